// The GPUs' clocks, power and clock limits: NVML's clock-limit bits as the trace's three flags,
// the sampler over a played NVML (devices found by PCI bus id, readings, its thread, its bound),
// and the whole path through the CUPTI backend and the Profiler into a written and read trace.
#include <dlprof/cupti.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/import/chrome_trace.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "played_cuda.hpp"

namespace {

using dlprof::DeviceCounterKind;
using dlprof::DeviceCounterSample;
using dlprof::detail::clock_limits_of;
using dlprof::detail::CuptiBackend;
using dlprof::detail::CuptiLibrary;
using dlprof::detail::GpuClockSampler;
using dlprof::detail::NvmlLibrary;
using dlprof_test::played;
using dlprof_test::played_cupti;
using dlprof_test::played_driver;
using dlprof_test::played_nvml;
using dlprof_test::readings;
using dlprof_test::Played;
using testing::HasSubstr;
namespace nvml = dlprof::detail::nvml;

std::atomic<std::int64_t> g_sampler_time{0};
std::int64_t counting_clock() { return g_sampler_time += 1000; }

std::vector<DeviceCounterSample> of_kind(const std::vector<DeviceCounterSample>& samples, DeviceCounterKind kind) {
  std::vector<DeviceCounterSample> kept;
  std::copy_if(samples.begin(), samples.end(), std::back_inserter(kept),
               [kind](const DeviceCounterSample& sample) { return sample.kind == kind; });
  return kept;
}

TEST(ClockLimitsTest, NvmlBitsBecomePowerTemperatureOrOtherAndIdleIsNoLimit) {
  EXPECT_FALSE(clock_limits_of(0).power);
  EXPECT_TRUE(clock_limits_of(nvml::kReasonSwPowerCap).power);
  EXPECT_TRUE(clock_limits_of(nvml::kReasonHwPowerBrakeSlowdown | nvml::kReasonHwSlowdown).power);
  EXPECT_FALSE(clock_limits_of(nvml::kReasonHwPowerBrakeSlowdown | nvml::kReasonHwSlowdown).otherwise)
      << "the hardware slowdown bit comes with the power brake; it is the same cause";
  EXPECT_TRUE(clock_limits_of(nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown).temperature);
  EXPECT_FALSE(clock_limits_of(nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown).otherwise);
  EXPECT_TRUE(clock_limits_of(nvml::kReasonSwThermalSlowdown).temperature);
  EXPECT_TRUE(clock_limits_of(nvml::kReasonHwSlowdown).otherwise) << "alone, a hardware slowdown is another cause";
  EXPECT_TRUE(clock_limits_of(nvml::kReasonApplicationsClocksSetting).otherwise);
  EXPECT_TRUE(clock_limits_of(nvml::kReasonSyncBoost).otherwise);
  const auto idle = clock_limits_of(nvml::kReasonGpuIdle);
  EXPECT_FALSE(idle.power || idle.temperature || idle.otherwise);
}

class GpuClockSamplerTest : public testing::Test {
 protected:
  void SetUp() override {
    played = Played{};
    readings.reset();
    g_sampler_time = 0;
  }
};

TEST_F(GpuClockSamplerTest, AReadingHasSixCountersPerDeviceInTheirUnits) {
  played.nvml_bus_ids = {"00000000:19:00.0", "00000000:1A:00.0"};
  readings.clock_reasons = nvml::kReasonSwPowerCap | nvml::kReasonHwSlowdown | nvml::kReasonSyncBoost;
  GpuClockSampler sampler;
  std::string reason;
  ASSERT_TRUE(sampler.attach(played_nvml(), {"0000:19:00.0", "0000:1a:00.0"}, &counting_clock, reason));
  EXPECT_EQ(reason, "");
  sampler.read();
  std::uint64_t dropped = 99;
  const std::vector<DeviceCounterSample> samples = sampler.take(dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(samples.size(), 12u);
  for (const std::uint32_t device : {0u, 1u}) {
    const auto value = [&](DeviceCounterKind kind) {
      for (const DeviceCounterSample& sample : samples)
        if (sample.device == device && sample.kind == kind) return sample.value;
      ADD_FAILURE() << "no counter " << static_cast<int>(kind) << " for device " << device;
      return -1.0;
    };
    EXPECT_EQ(value(DeviceCounterKind::SmClockMhz), 1755);
    EXPECT_EQ(value(DeviceCounterKind::MemoryClockMhz), 2619);
    EXPECT_DOUBLE_EQ(value(DeviceCounterKind::PowerWatts), 612.4);
    EXPECT_EQ(value(DeviceCounterKind::LimitedByPower), 1);
    EXPECT_EQ(value(DeviceCounterKind::LimitedByTemperature), 0);
    EXPECT_EQ(value(DeviceCounterKind::LimitedOtherwise), 1);  // sync boost
  }
  EXPECT_TRUE(sampler.take(dropped).empty()) << "taken samples are gone";
}

TEST_F(GpuClockSamplerTest, ADeviceNvmlDoesNotKnowIsNamedAndTheOthersAreRead) {
  GpuClockSampler sampler;
  std::string reason;
  ASSERT_TRUE(sampler.attach(played_nvml(), {"0000:19:00.0", "0000:5e:00.0", ""}, &counting_clock, reason));
  EXPECT_EQ(reason, "NVML does not know CUDA device 1, 2: no clocks for it");
  sampler.read();
  std::uint64_t dropped = 0;
  for (const DeviceCounterSample& sample : sampler.take(dropped)) EXPECT_EQ(sample.device, 0u);
}

TEST_F(GpuClockSamplerTest, NvmlThatCannotStartOrKnowsNoDeviceIsAReasonNotACrash) {
  played.nvml_init_result = 4;
  GpuClockSampler refused;
  std::string reason;
  EXPECT_FALSE(refused.attach(played_nvml(), {"0000:19:00.0"}, &counting_clock, reason));
  EXPECT_EQ(reason, "nvmlInit failed: Insufficient Permissions (4)");
  EXPECT_FALSE(refused.attached());
  refused.start(std::chrono::milliseconds(1));  // does nothing
  refused.stop();

  played.nvml_init_result = 0;
  GpuClockSampler strangers;
  EXPECT_FALSE(strangers.attach(played_nvml(), {"0000:5e:00.0"}, &counting_clock, reason));
  EXPECT_EQ(reason, "NVML knows none of the CUDA devices by their PCI bus ids");
}

TEST_F(GpuClockSamplerTest, ValuesNvmlDoesNotGiveAreLeftOutNotWrittenAsZero) {
  NvmlLibrary nvml = played_nvml();
  nvml.power_usage = [](nvml::Device, unsigned int*) { return 3; };  // NVML_ERROR_NOT_SUPPORTED
  nvml.clocks_event_reasons = nullptr;                                // a driver without the entry point
  GpuClockSampler sampler;
  std::string reason;
  ASSERT_TRUE(sampler.attach(nvml, {"0000:19:00.0"}, &counting_clock, reason));
  sampler.read();
  std::uint64_t dropped = 0;
  const auto samples = sampler.take(dropped);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].kind, DeviceCounterKind::SmClockMhz);
  EXPECT_EQ(samples[1].kind, DeviceCounterKind::MemoryClockMhz);
}

TEST_F(GpuClockSamplerTest, ItsThreadReadsUntilStoppedAndItsBoundDropsTheOldestCounted) {
  GpuClockSampler sampler;
  std::string reason;
  ASSERT_TRUE(sampler.attach(played_nvml(), {"0000:19:00.0"}, &counting_clock, reason));
  sampler.start(std::chrono::microseconds(200));
  while (readings.count < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sampler.stop();
  const int read = readings.count;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(readings.count, read) << "read after stop()";
  std::uint64_t dropped = 0;
  const auto samples = sampler.take(dropped);
  EXPECT_EQ(samples.size(), static_cast<std::size_t>(read) * 6);
  EXPECT_TRUE(std::is_sorted(samples.begin(), samples.end(),
                             [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; }));

  const std::size_t readings_to_fill = GpuClockSampler::kMaxSamples / 6;
  for (std::size_t i = 0; i < readings_to_fill + 10; ++i) sampler.read();
  const auto bounded = sampler.take(dropped);
  EXPECT_EQ(bounded.size(), GpuClockSampler::kMaxSamples);
  EXPECT_EQ(dropped, (readings_to_fill + 10) * 6 - GpuClockSampler::kMaxSamples);
  EXPECT_GT(bounded.front().time_ns, samples.back().time_ns);
  EXPECT_EQ(bounded.back().time_ns, g_sampler_time) << "the newest are kept";

  sampler.read();
  const std::int64_t cut = g_sampler_time + 1;
  sampler.read();
  sampler.discard_before(cut);
  EXPECT_EQ(sampler.take(dropped).size(), 6u);
}

TEST_F(GpuClockSamplerTest, AForkedChildStopsItsCopyWithoutWaitingForTheParentsThread) {
  GpuClockSampler sampler;
  std::string reason;
  ASSERT_TRUE(sampler.attach(played_nvml(), {"0000:19:00.0"}, &counting_clock, reason));
  sampler.start(std::chrono::milliseconds(1));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sampler.stop();  // joining the parent's thread here would never return
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  sampler.stop();
}

TEST(NvmlLibraryTest, AMissingLibraryOrOneWithoutTheEntryPointsIsNamed) {
  NvmlLibrary nvml;
  std::string error;
  EXPECT_FALSE(nvml.open("libnvidia-ml-that-is-not-here.so.1", error));
  EXPECT_THAT(error, HasSubstr("cannot load libnvidia-ml-that-is-not-here.so.1"));
  EXPECT_FALSE(nvml.open("libz.so.1", error));
  EXPECT_EQ(error, "libz.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetClockInfo");
  EXPECT_EQ(nvml.describe(7), "NVML error 7");
}

class DeviceCounterTraceTest : public testing::Test {
 protected:
  void SetUp() override {
    played = Played{};
    readings.reset();
    CuptiLibrary probe;
    std::string error;
    if (!probe.open(error)) GTEST_SKIP() << "libcupti is not available here: " << error;
  }
  void TearDown() override { dlprof::detail::g_gpu_backend.store(nullptr); }

  /// A Profiler of CPU and CUDA activity over a played GPU whose NVML is read every `period`.
  std::unique_ptr<dlprof::Profiler> profiler_reading_every(std::chrono::milliseconds period) {
    static CuptiBackend* current = nullptr;
    current = &backend_;
    dlprof::detail::g_gpu_backend.store(+[]() -> dlprof::detail::GpuBackend& { return *current; });
    return std::make_unique<dlprof::Profiler>(dlprof::ProfilerOptions{}
                                                  .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                                  .device_counter_period(period));
  }

  CuptiBackend backend_{played_driver(), played_cupti(), played_nvml()};
};

TEST_F(DeviceCounterTraceTest, AWindowHasTheGpusClocksOnItsRowWrittenAndReadBack) {
  const auto owned = profiler_reading_every(std::chrono::milliseconds(1));
  dlprof::Profiler& profiler = *owned;
  profiler.start();
  {
    DLPROF_RANGE("step");
    dlprof_test::launch_kernel("_Z4gemmv", 7, 50'000);
    readings.clock_reasons = nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown;
    readings.sm_mhz = 1410;
    const int seen = readings.count;
    while (readings.count < seen + 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  const auto clocks = of_kind(trace->device_counters, DeviceCounterKind::SmClockMhz);
  ASSERT_GE(clocks.size(), 3u);
  EXPECT_EQ(clocks.front().value, 1755) << "read as the window opens";
  EXPECT_EQ(clocks.back().value, 1410) << "and as it closes";
  for (const DeviceCounterSample& sample : trace->device_counters) {
    EXPECT_EQ(sample.device, 0u);
    EXPECT_GE(sample.time_ns, trace->window_start_ns);
    EXPECT_LE(sample.time_ns, trace->window_end_ns);
  }
  const auto heat = of_kind(trace->device_counters, DeviceCounterKind::LimitedByTemperature);
  ASSERT_FALSE(heat.empty());
  EXPECT_EQ(heat.front().value, 0);
  EXPECT_EQ(heat.back().value, 1);

  // Written as counters on the GPU's process (pid 0, "GPU 0"), one named track each.
  fmt::memory_buffer buffer;
  dlprof::write_chrome_trace(*trace, buffer, "counters");
  const std::string text(buffer.data(), buffer.size());
  const nlohmann::json written = nlohmann::json::parse(text);
  std::size_t sm_clock_events = 0;
  for (const auto& event : written["traceEvents"])
    if (event.value("ph", "") == "C" && event.value("name", "") == "SM clock (MHz)") {
      ++sm_clock_events;
      EXPECT_EQ(event["pid"], 0);
      EXPECT_EQ(event["cat"], "counter");
      EXPECT_TRUE(event["args"]["value"].is_number());
    }
  EXPECT_EQ(sm_clock_events, clocks.size());

  const dlprof::Trace read = dlprof::parse_trace(text, "counters");
  ASSERT_EQ(read.device_counters.size(), trace->device_counters.size());
  for (std::size_t i = 0; i < read.device_counters.size(); ++i) {
    EXPECT_EQ(read.device_counters[i].kind, trace->device_counters[i].kind);
    EXPECT_EQ(read.device_counters[i].device, trace->device_counters[i].device);
    EXPECT_DOUBLE_EQ(read.device_counters[i].value, trace->device_counters[i].value);
    EXPECT_NEAR(static_cast<double>(read.device_counters[i].time_ns),
                static_cast<double>(trace->device_counters[i].time_ns), 1000.0);
  }
  for (const dlprof::TraceEvent& event : read.events)
    EXPECT_NE(event.kind, dlprof::EventKind::Counter) << "a GPU counter read as a CPU one: " << read.name_of(event);
}

TEST_F(DeviceCounterTraceTest, APeriodOfZeroReadsNothing) {
  const auto owned = profiler_reading_every(std::chrono::milliseconds(0));
  dlprof::Profiler& profiler = *owned;
  profiler.start();
  dlprof_test::launch_kernel("_Z4gemmv", 7, 50'000);
  profiler.stop();
  ASSERT_NE(profiler.last_trace(), nullptr);
  EXPECT_TRUE(profiler.last_trace()->device_counters.empty());
  EXPECT_EQ(readings.count, 0);
}

}  // namespace
