// dlprof/detail/backends/gpu_clock_sampler.hpp: the GPUs' clocks, power and clock limits, read
// from NVML on a thread of its own while a window records.
//
// A thread rather than a reading at each step(): clock limits come and go within a step (the
// power cap bites during the largest GEMMs), and a step can last seconds. The thread reads NVML
// only; it records nothing in the rings and takes no lock the training threads take.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/nvml_library.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The DeviceCounterKind flags that NVML's clock-limit bits set: power (the software power cap,
/// the hardware power brake), temperature (the software and hardware thermal slowdowns), or
/// anything else but an idle GPU. An idle GPU's low clocks are no limit on work it runs.
struct ClockLimits {
  bool power = false;
  bool temperature = false;
  bool otherwise = false;
};

inline ClockLimits clock_limits_of(std::uint64_t reasons) noexcept {
  constexpr std::uint64_t power = nvml::kReasonSwPowerCap | nvml::kReasonHwPowerBrakeSlowdown;
  constexpr std::uint64_t temperature = nvml::kReasonSwThermalSlowdown | nvml::kReasonHwThermalSlowdown;
  // A hardware slowdown is what the power brake and the thermal slowdown show as, besides their
  // own bits; alone it is another cause.
  const std::uint64_t explained = (reasons & (power | temperature)) != 0 ? nvml::kReasonHwSlowdown : 0;
  const std::uint64_t other = reasons & ~(power | temperature | explained | nvml::kReasonGpuIdle);
  return {(reasons & power) != 0, (reasons & temperature) != 0, other != 0};
}

/// Reads NVML for the devices of a window. attach() once; then start() and stop() around each
/// window, or read() for one reading. Samples are timestamped by the clock given, the one the
/// backend's records are on.
class GpuClockSampler {
 public:
  using Clock = std::int64_t (*)();
  /// Samples kept at most: the oldest give way (a flight recorder's window never closes). About
  /// 24 bytes each; at the default period, six counters of one GPU fill it in 4 minutes.
  static constexpr std::size_t kMaxSamples = std::size_t{1} << 17;
  static constexpr std::chrono::milliseconds kDefaultPeriod{20};

  GpuClockSampler() = default;
  GpuClockSampler(const GpuClockSampler&) = delete;
  GpuClockSampler& operator=(const GpuClockSampler&) = delete;
  ~GpuClockSampler() { stop(); }

  /// Finds the NVML device of each CUDA device, by PCI bus id ("0000:3b:00.0"; an empty id
  /// leaves that device out). False, with the reason, when NVML cannot be used at all.
  bool attach(NvmlLibrary nvml, const std::vector<std::string>& pci_bus_ids, Clock clock, std::string& reason) {
    nvml_ = std::move(nvml);
    clock_ = clock;
    if (const nvml::Return result = nvml_.init(); result != nvml::kSuccess) {
      reason = fmt::format("nvmlInit failed: {}", nvml_.describe(result));
      return false;
    }
    devices_.clear();
    std::string missing;
    for (std::size_t ordinal = 0; ordinal < pci_bus_ids.size(); ++ordinal) {
      nvml::Device device = nullptr;
      if (pci_bus_ids[ordinal].empty() ||
          nvml_.device_by_pci_bus_id(pci_bus_ids[ordinal].c_str(), &device) != nvml::kSuccess) {
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", ordinal);
        continue;
      }
      devices_.push_back({static_cast<std::uint32_t>(ordinal), device});
    }
    if (devices_.empty()) {
      reason = "NVML knows none of the CUDA devices by their PCI bus ids";
      return false;
    }
    if (!missing.empty()) reason = fmt::format("NVML does not know CUDA device {}: no clocks for it", missing);
    return true;
  }

  bool attached() const noexcept { return !devices_.empty(); }

  /// Reads every device once, now.
  void read() {
    std::vector<DeviceCounterSample> reading;
    read_into(reading);
    std::lock_guard<std::mutex> lock(mutex_);
    keep(reading);
  }

  /// Reads every `period` on a thread until stop(); does nothing when not attached or running.
  void start(std::chrono::nanoseconds period) {
    if (!attached() || thread_ != nullptr || period.count() <= 0) return;
    owner_pid_ = ::getpid();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = false;
    }
    thread_ = std::make_unique<std::thread>([this, period] { run(period); });
  }

  /// Ends the thread; in a forked child, whose copy has no such thread, forgets it instead.
  void stop() noexcept {
    if (thread_ == nullptr) return;
    if (owner_pid_ != ::getpid()) {
      (void)thread_.release();  // the parent's: neither joinable nor detachable here
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_->join();
    thread_.reset();
  }

  /// The samples taken since the last take(), oldest first, and how many gave way to newer ones.
  std::vector<DeviceCounterSample> take(std::uint64_t& dropped) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<DeviceCounterSample> taken(samples_.begin(), samples_.end());
    samples_.clear();
    dropped = std::exchange(dropped_, 0);
    return taken;
  }

  /// Forgets the samples taken before `time` (the clock's axis).
  void discard_before(std::int64_t time) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!samples_.empty() && samples_.front().time_ns < time) samples_.pop_front();
  }

 private:
  struct Attached {
    std::uint32_t ordinal = 0;
    nvml::Device device = nullptr;
  };

  void run(std::chrono::nanoseconds period) {
    std::vector<DeviceCounterSample> reading;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      reading.clear();
      read_into(reading);
      lock.lock();
      keep(reading);
      wake_.wait_for(lock, period, [this] { return stopping_; });
    }
  }

  /// One reading of every device; a value NVML does not give (a GPU without power readings, an
  /// old driver) is left out, not written as 0.
  void read_into(std::vector<DeviceCounterSample>& out) const {
    for (const Attached& gpu : devices_) {
      const std::int64_t time = clock_();
      const auto add = [&](DeviceCounterKind kind, double value) { out.push_back({time, value, gpu.ordinal, kind}); };
      unsigned int mhz = 0;
      if (nvml_.clock_info(gpu.device, nvml::kSmClock, &mhz) == nvml::kSuccess) add(DeviceCounterKind::SmClockMhz, mhz);
      if (nvml_.clock_info(gpu.device, nvml::kMemoryClock, &mhz) == nvml::kSuccess)
        add(DeviceCounterKind::MemoryClockMhz, mhz);
      unsigned int milliwatts = 0;
      if (nvml_.power_usage != nullptr && nvml_.power_usage(gpu.device, &milliwatts) == nvml::kSuccess)
        add(DeviceCounterKind::PowerWatts, milliwatts / 1000.0);
      unsigned long long reasons = 0;
      if (nvml_.clocks_event_reasons != nullptr &&
          nvml_.clocks_event_reasons(gpu.device, &reasons) == nvml::kSuccess) {
        const ClockLimits limits = clock_limits_of(reasons);
        add(DeviceCounterKind::LimitedByPower, limits.power ? 1 : 0);
        add(DeviceCounterKind::LimitedByTemperature, limits.temperature ? 1 : 0);
        add(DeviceCounterKind::LimitedOtherwise, limits.otherwise ? 1 : 0);
      }
    }
  }

  void keep(const std::vector<DeviceCounterSample>& reading) {
    for (const DeviceCounterSample& sample : reading) {
      if (samples_.size() == kMaxSamples) {
        samples_.pop_front();
        ++dropped_;
      }
      samples_.push_back(sample);
    }
  }

  NvmlLibrary nvml_;
  Clock clock_ = nullptr;
  std::vector<Attached> devices_;
  mutable std::mutex mutex_;  // guards samples_, dropped_ and stopping_
  std::condition_variable wake_;
  std::deque<DeviceCounterSample> samples_;
  std::uint64_t dropped_ = 0;
  bool stopping_ = false;
  std::unique_ptr<std::thread> thread_;
  ::pid_t owner_pid_ = 0;
};

}  // namespace detail
DLPROF_END_NAMESPACE
