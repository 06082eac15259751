// Traces recorded on an NVIDIA H200 (PyTorch and LibTorch 2.11, CUDA 13.0) by
// scripts/gpu-validate.sh; tests/data/h200/README.md says how each was made. Every figure the tests
// expect was read from the file by other means (Python's json) and is checked here by hand
// arithmetic: NVML's readings beside 200 BF16 matmuls in dlprof's trace, and torch.profiler's own
// traces of PyTorch 2.11 with memory, stacks and modules, one of them leaking 64 MiB a step.
#include <dlprof/analysis/device_peaks.hpp>
#include <dlprof/import/chrome_trace.hpp>
#include <dlprof/trace.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace h200_traces_test {

using dlprof::DeviceCounterKind;
using dlprof::EventKind;
using dlprof::Trace;
using dlprof::TraceEvent;

std::string h200_file(const std::string& name) { return std::string(DLPROF_TEST_DATA_DIR) + "/h200/" + name; }

std::vector<double> values_of(const Trace& trace, DeviceCounterKind kind) {
  std::vector<double> values;
  for (const dlprof::DeviceCounterSample& sample : trace.device_counters)
    if (sample.kind == kind) values.push_back(sample.value);
  return values;
}

TEST(H200TraceTest, DlprofsRooflineTraceHoldsNvmlsReadingsEveryTenMilliseconds) {
  const Trace trace = dlprof::read_trace(h200_file("roofline-dlprof.pt.trace.json.gz"));
  EXPECT_TRUE(trace.read_result.empty()) << trace.read_result.first_skip_reason;
  ASSERT_EQ(trace.device_counters.size(), 240u);  // 40 readings of six counters
  EXPECT_EQ(trace.gpu.dropped_device_counters, 0u);
  std::map<DeviceCounterKind, std::vector<std::int64_t>> times;
  for (const dlprof::DeviceCounterSample& sample : trace.device_counters) {
    EXPECT_EQ(sample.device, 0u);
    EXPECT_GE(sample.time_ns, trace.window_start_ns);
    EXPECT_LE(sample.time_ns, trace.window_end_ns);
    times[sample.kind].push_back(sample.time_ns);
  }
  ASSERT_EQ(times.size(), 6u);
  for (const auto& [kind, kind_times] : times) {
    EXPECT_EQ(kind_times.size(), 40u);
    EXPECT_TRUE(std::is_sorted(kind_times.begin(), kind_times.end()));
  }
  // Five steps of 79 ms: 40 readings 10 ms apart, the last ones a little later than the period.
  const std::vector<std::int64_t>& sm_times = times[DeviceCounterKind::SmClockMhz];
  std::vector<std::int64_t> gaps;
  for (std::size_t i = 1; i < sm_times.size(); ++i) gaps.push_back(sm_times[i] - sm_times[i - 1]);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  EXPECT_NEAR(static_cast<double>(gaps[gaps.size() / 2]), 10.1e6, 0.2e6);

  // 200 BF16 GEMMs held the SM clock at 1515-1605 MHz of the 1980 it may reach, the power cap
  // holding it down at every reading, with 395-583 W drawn and HBM at 3201 MHz.
  const auto sm = values_of(trace, DeviceCounterKind::SmClockMhz);
  EXPECT_EQ(*std::min_element(sm.begin(), sm.end()), 1515);
  EXPECT_EQ(*std::max_element(sm.begin(), sm.end()), 1605);
  for (const double mhz : values_of(trace, DeviceCounterKind::MemoryClockMhz)) EXPECT_EQ(mhz, 3201);
  const auto power = values_of(trace, DeviceCounterKind::PowerWatts);
  EXPECT_NEAR(*std::min_element(power.begin(), power.end()), 395, 0.5);
  EXPECT_NEAR(*std::max_element(power.begin(), power.end()), 583, 0.5);
  for (const double flag : values_of(trace, DeviceCounterKind::LimitedByPower)) EXPECT_EQ(flag, 1);
  for (const double flag : values_of(trace, DeviceCounterKind::LimitedByTemperature)) EXPECT_EQ(flag, 0);
  for (const double flag : values_of(trace, DeviceCounterKind::LimitedOtherwise)) EXPECT_EQ(flag, 0);
}

TEST(H200TraceTest, TheBf16MatmulsCarryTheirFlopsAndRunBelowTheDensePeak) {
  const Trace trace = dlprof::read_trace(h200_file("roofline-dlprof.pt.trace.json.gz"));
  std::unordered_map<std::uint64_t, std::int64_t> kernel_ns_of;
  for (const dlprof::GpuEvent& work : trace.gpu_events)
    if (work.kind == dlprof::GpuEventKind::Kernel && work.external_id != 0)
      kernel_ns_of[work.external_id] += work.duration_ns();
  int matmuls = 0;
  std::int64_t kernel_ns = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::Op || trace.name_of(event) != "aten::mm" || event.inputs == TraceEvent::kNoInputs)
      continue;
    const dlprof::OpInputs& inputs = trace.op_inputs[event.inputs];
    if (trace.names[inputs.dims] != "[[8192, 8192], [8192, 8192]]") continue;
    ++matmuls;
    EXPECT_EQ(inputs.flops, 2ull * 8192 * 8192 * 8192);  // 2MNK
    const auto kernel = kernel_ns_of.find(event.external_id);
    ASSERT_NE(kernel, kernel_ns_of.end()) << "a matmul without its kernel";
    kernel_ns += kernel->second;
  }
  ASSERT_EQ(matmuls, 200);
  // 200 x 1.0995e12 FLOPs in 308.5 ms of kernels: 712.8 TFLOP/s, 72 % of the H200's dense BF16
  // peak of 989.4 TFLOP/s (1,979 is the 2:4-sparse figure).
  const double tflops = matmuls * 2.0 * 8192 * 8192 * 8192 / (static_cast<double>(kernel_ns) * 1e-9) / 1e12;
  EXPECT_NEAR(static_cast<double>(kernel_ns) * 1e-6, 308.5, 0.1);
  EXPECT_NEAR(tflops, 712.8, 0.2);
  ASSERT_FALSE(trace.devices.empty());
  EXPECT_EQ(trace.devices.front().name, "NVIDIA H200");
  const dlprof::analysis::DevicePeaks* peaks = dlprof::analysis::find_device_peaks(trace.devices.front());
  ASSERT_NE(peaks, nullptr);
  const double peak = peaks->matrix_peak(dlprof::analysis::Precision::BF16);
  EXPECT_EQ(peak, 989.4);
  EXPECT_NEAR(tflops / peak, 0.720, 0.001);
  // At the clock NVML read (mean 1,558 MHz of the 1,980 the peak is quoted at), the roof is
  // 778.5 TFLOP/s, and the matmuls ran at 91.6 % of it.
  double clock_sum = 0;
  const auto sm = values_of(trace, DeviceCounterKind::SmClockMhz);
  for (const double mhz : sm) clock_sum += mhz;
  const double roof_at_clock = peak * (clock_sum / static_cast<double>(sm.size())) / peaks->boost_mhz;
  EXPECT_NEAR(roof_at_clock, 778.5, 0.5);
  EXPECT_NEAR(tflops / roof_at_clock, 0.916, 0.001);
}

/// The CUDA memory allocated at the end of each step: what the caching allocator reports.
std::vector<std::int64_t> allocated_at_step_ends(const Trace& trace) {
  std::vector<std::int64_t> allocated;
  for (const TraceEvent& step : trace.events) {
    if (step.kind != EventKind::Step) continue;
    std::int64_t last = -1;
    for (const dlprof::MemoryEvent& memory : trace.memory_events)
      if (memory.device_type == dlprof::MemoryDeviceType::CUDA && memory.time_ns <= step.end_ns)
        last = memory.total_allocated;
    allocated.push_back(last);
  }
  return allocated;
}

TEST(H200TraceTest, TorchProfilersOwnTraceOfPyTorch211ReadsWithMemoryStacksAndModules) {
  const Trace trace = dlprof::read_trace(h200_file("pt2.11-transformer.pt.trace.json.gz"));
  EXPECT_EQ(trace.read_result.skipped_events, 0u) << trace.read_result.first_skip_reason;
  EXPECT_EQ(trace.memory_events.size(), 1904u);
  const auto cpu_allocations = std::count_if(trace.memory_events.begin(), trace.memory_events.end(),
                                             [](const auto& memory) { return memory.device_type == dlprof::MemoryDeviceType::CPU; });
  EXPECT_EQ(cpu_allocations, 8);
  std::map<EventKind, int> kinds;
  bool module_frame = false;
  for (const TraceEvent& event : trace.events) {
    ++kinds[event.kind];
    module_frame = module_frame || trace.name_of(event).rfind("nn.Module: TransformerEncoderLayer", 0) == 0;
  }
  EXPECT_EQ(kinds[EventKind::Op], 5700);
  EXPECT_EQ(kinds[EventKind::PythonFrame], 5285);  // with_stack's python_function frames
  EXPECT_EQ(kinds[EventKind::Step], 4);
  EXPECT_TRUE(module_frame) << "with_modules names each module's frame";
  EXPECT_EQ(std::count_if(trace.gpu_events.begin(), trace.gpu_events.end(),
                          [](const auto& work) { return work.kind == dlprof::GpuEventKind::Kernel; }),
            760);
  // A steady loop: 355.4 MiB allocated at the end of every step.
  EXPECT_THAT(allocated_at_step_ends(trace), testing::Each(372'654'592));
}

TEST(H200TraceTest, TheLeakingLoopsTraceGrowsBySixtyFourMebibytesAStep) {
  const Trace trace = dlprof::read_trace(h200_file("pt2.11-leak.pt.trace.json.gz"));
  EXPECT_EQ(trace.read_result.skipped_events, 0u) << trace.read_result.first_skip_reason;
  // Each step keeps its logits: 16 x 256 x 8192 BF16 values, 67,108,864 bytes.
  const std::vector<std::int64_t> allocated = allocated_at_step_ends(trace);
  ASSERT_EQ(allocated.size(), 4u);
  for (std::size_t i = 1; i < allocated.size(); ++i) EXPECT_EQ(allocated[i] - allocated[i - 1], 16 * 256 * 8192 * 2);
  EXPECT_EQ(allocated.front(), 511'066'624);
}

}  // namespace h200_traces_test
