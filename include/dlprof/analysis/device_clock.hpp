// dlprof/analysis/device_clock.hpp: the clock each GPU ran at beside the clock its peaks are quoted
// at, from NVML's readings in the trace (Trace::device_counters): the largest single gap between a
// kernel and its peak is often a GPU the power cap or heat held below its boost clock.
//
// A compute-bound kernel's rate scales with the SM clock, so its efficiency at the clock the GPU
// ran is its efficiency against the datasheet over the clock's share of the boost clock ("72 % of
// the peak, 92 % of the peak at the 1.56 GHz the GPU ran"). Memory-bound kernels follow the memory
// clock, which HBM holds, and are not adjusted.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "dlprof/analysis/device_peaks.hpp"
#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// What NVML read of one device over a span.
struct DeviceClock {
  std::uint32_t device = 0;
  std::size_t clock_readings = 0;
  double mean_sm_mhz = 0;
  double min_sm_mhz = 0;
  double max_sm_mhz = 0;
  double boost_mhz = 0;  ///< the clock its peaks are quoted at; 0: not known
  /// Of the readings of each limit, the share with the limit on: [0, 1]; nothing unread.
  std::optional<double> power_limited;
  std::optional<double> temperature_limited;
  std::optional<double> otherwise_limited;
  std::optional<double> mean_power_watts;

  /// The mean SM clock over the boost clock: what share of the peak the clock allowed.
  std::optional<double> clock_share() const noexcept {
    if (boost_mhz <= 0 || clock_readings == 0) return std::nullopt;
    return mean_sm_mhz / boost_mhz;
  }
  /// A compute-bound efficiency against the datasheet's peak, taken at the clock the GPU ran.
  std::optional<double> at_clock(double efficiency) const noexcept {
    const std::optional<double> share = clock_share();
    if (!share || *share <= 0) return std::nullopt;
    return efficiency / *share;
  }
};

/// The clocks of the devices with readings in [begin_ns, end_ns), by device. `peaks` stands for
/// every device's as roofline()'s; null: each device's own.
inline std::vector<DeviceClock> device_clocks(const Trace& trace, std::int64_t begin_ns, std::int64_t end_ns,
                                              const DevicePeaks* peaks = nullptr) {
  struct Sums {
    DeviceClock clock;
    double clock_sum = 0;
    double power_sum = 0;
    std::size_t power_readings = 0;
    std::size_t limit_readings[3] = {};
    std::size_t limited[3] = {};
  };
  std::map<std::uint32_t, Sums> by_device;
  for (const DeviceCounterSample& sample : trace.device_counters) {
    if (sample.time_ns < begin_ns || sample.time_ns >= end_ns) continue;
    Sums& sums = by_device[sample.device];
    sums.clock.device = sample.device;
    switch (sample.kind) {
      case DeviceCounterKind::SmClockMhz:
        sums.clock.min_sm_mhz = sums.clock.clock_readings == 0 ? sample.value : std::min(sums.clock.min_sm_mhz, sample.value);
        sums.clock.max_sm_mhz = std::max(sums.clock.max_sm_mhz, sample.value);
        sums.clock_sum += sample.value;
        ++sums.clock.clock_readings;
        break;
      case DeviceCounterKind::PowerWatts:
        sums.power_sum += sample.value;
        ++sums.power_readings;
        break;
      case DeviceCounterKind::LimitedByPower:
      case DeviceCounterKind::LimitedByTemperature:
      case DeviceCounterKind::LimitedOtherwise: {
        const auto limit = static_cast<std::size_t>(sample.kind) - static_cast<std::size_t>(DeviceCounterKind::LimitedByPower);
        ++sums.limit_readings[limit];
        sums.limited[limit] += sample.value != 0;
        break;
      }
      case DeviceCounterKind::MemoryClockMhz:
        break;
    }
  }
  std::vector<DeviceClock> clocks;
  for (auto& [device, sums] : by_device) {
    DeviceClock& clock = sums.clock;
    if (clock.clock_readings > 0) clock.mean_sm_mhz = sums.clock_sum / static_cast<double>(clock.clock_readings);
    if (sums.power_readings > 0) clock.mean_power_watts = sums.power_sum / static_cast<double>(sums.power_readings);
    std::optional<double>* shares[3] = {&clock.power_limited, &clock.temperature_limited, &clock.otherwise_limited};
    for (std::size_t limit = 0; limit < 3; ++limit)
      if (sums.limit_readings[limit] > 0)
        *shares[limit] = static_cast<double>(sums.limited[limit]) / static_cast<double>(sums.limit_readings[limit]);
    const DevicePeaks* device_peaks = peaks;
    if (device_peaks == nullptr)
      if (const DevicePropertiesOf properties = device_properties_of(trace.devices, static_cast<int>(device)))
        device_peaks = find_device_peaks(*properties.properties);
    if (device_peaks != nullptr) clock.boost_mhz = device_peaks->boost_mhz;
    clocks.push_back(clock);
  }
  return clocks;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
