// dlprof/analysis/memory_leaks.hpp: memory that grows step after step, and what holds it.
//
// Per device, the allocator's count at each step's end gives the series a user watches, and its
// slope (Theil–Sen: the median of the slopes between every two steps, which a few noisy steps do
// not move). What holds growing memory is found from the allocations themselves: those made in
// step i and still alive when step i + lag begins, grouped by the op and module that made them and
// by their line of code. A group is a leak's holder when
//
// - most steps leave such survivors: at least three, and three in four of the steps judged (the
//   steps that have a step `lag` after them), so that what one step makes once (an optimizer's
//   state, a cache filled in the first step) is not one;
// - and the group's live bytes at the steps' ends rise (a Theil–Sen slope above 0), so that what
//   is kept for a few steps and then let go (a bounded history) is not one.
//
// Growth is judged over min_steps steps at least; a shorter window gets no verdict, and says so.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/memory_blocks.hpp"
#include "dlprof/analysis/memory_peak.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// Allocations of one origin that outlive their step, step after step.
struct LeakHolder {
  std::string site;  ///< the op and module that made them, as MemoryShare::name
  std::string line;  ///< their line of code; empty without stacks
  MemoryCategory category = MemoryCategory::Unknown;  ///< the category of most of their bytes
  std::uint64_t allocations = 0;  ///< survivors: made in a judged step, alive `lag` steps later
  std::int64_t bytes = 0;         ///< their bytes
  std::size_t steps = 0;          ///< judged steps that left survivors
  double bytes_per_step = 0;      ///< the slope of the group's live bytes at the steps' ends
};

/// One device's memory over the steps.
struct MemoryGrowth {
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;
  std::vector<std::int64_t> allocated_at_step_end;  ///< by step: the allocator's count (or the window's) then
  double bytes_per_step = 0;                        ///< the series' Theil–Sen slope
  std::vector<LeakHolder> holders;                  ///< by bytes per step, largest first

  bool leaks() const noexcept { return !holders.empty(); }
};

struct MemoryLeaks {
  std::size_t steps = 0;
  std::size_t lag = 0;
  /// Why growth was not judged ("3 steps recorded; growth is judged over 5 at least"); empty
  /// where it was.
  std::string not_judged;
  std::vector<MemoryGrowth> devices;  ///< as MemoryBlocks::devices

  bool found() const noexcept {
    return std::any_of(devices.begin(), devices.end(), [](const MemoryGrowth& device) { return device.leaks(); });
  }
};

namespace detail {

/// Theil–Sen's slope of `values` at x = 0, 1, 2, ...: the median of the pairwise slopes.
inline double theil_sen_slope(const std::vector<std::int64_t>& values) {
  std::vector<double> slopes;
  slopes.reserve(values.size() * (values.size() - 1) / 2);
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = i + 1; j < values.size(); ++j)
      slopes.push_back(static_cast<double>(values[j] - values[i]) / static_cast<double>(j - i));
  if (slopes.empty()) return 0;
  const std::size_t middle = slopes.size() / 2;
  std::nth_element(slopes.begin(), slopes.begin() + static_cast<std::ptrdiff_t>(middle), slopes.end());
  if (slopes.size() % 2 == 1) return slopes[middle];
  const double upper = slopes[middle];
  return (upper + *std::max_element(slopes.begin(), slopes.begin() + static_cast<std::ptrdiff_t>(middle))) / 2;
}

/// The device's allocated bytes after each of its events, by time: the allocator's count, or the
/// window's running sum.
inline std::vector<std::pair<std::int64_t, std::int64_t>> allocated_over_time(const Trace& trace, const DeviceMemoryBlocks& device) {
  std::vector<const MemoryEvent*> events;
  for (const MemoryEvent& event : trace.memory_events)
    if (detail::is_event_of(event, device))
      events.push_back(&event);
  std::stable_sort(events.begin(), events.end(), [](const MemoryEvent* a, const MemoryEvent* b) { return a->time_ns < b->time_ns; });
  std::vector<std::pair<std::int64_t, std::int64_t>> series;
  series.reserve(events.size());
  std::int64_t running = device.allocated_before_window;
  for (const MemoryEvent* event : events) {
    running += event->bytes;
    series.emplace_back(event->time_ns, device.counted_by_allocator ? event->total_allocated : running);
  }
  return series;
}

/// The value of `series` (allocated_over_time()) at `time_ns`; `before` ahead of its first event.
inline std::int64_t allocated_at(const std::vector<std::pair<std::int64_t, std::int64_t>>& series, std::int64_t before,
                                 std::int64_t time_ns) {
  const auto after = std::upper_bound(series.begin(), series.end(), time_ns,
                                      [](std::int64_t time, const auto& point) { return time < point.first; });
  return after == series.begin() ? before : (after - 1)->second;
}

}  // namespace detail

/// Growing memory in `trace` (with `blocks` = memory_blocks(trace)): survivors judged `lag` steps
/// after their step, over `min_steps` steps at least.
inline MemoryLeaks memory_leaks(const Trace& trace, const MemoryBlocks& blocks, std::size_t lag = 2, std::size_t min_steps = 5) {
  MemoryLeaks result;
  result.lag = std::max<std::size_t>(lag, 1);
  result.steps = blocks.steps.size();
  if (blocks.empty()) return result;
  const std::size_t needed = std::max(min_steps, result.lag + 3);
  if (result.steps < needed) {
    result.not_judged = fmt::format("{} step{} with memory events; growth is judged over {} at least", result.steps,
                                    result.steps == 1 ? "" : "s", needed);
    return result;
  }
  const std::size_t judged = result.steps - result.lag;
  const std::size_t steps_needed = std::max<std::size_t>(3, (3 * judged + 3) / 4);
  for (const DeviceMemoryBlocks& device : blocks.devices) {
    MemoryGrowth growth;
    growth.device_type = device.device_type;
    growth.device = device.device;
    const auto series = detail::allocated_over_time(trace, device);
    for (const MemoryStep& step : blocks.steps)
      growth.allocated_at_step_end.push_back(detail::allocated_at(series, device.allocated_before_window, step.end_ns));
    growth.bytes_per_step = detail::theil_sen_slope(growth.allocated_at_step_end);

    struct Group {
      LeakHolder holder;
      std::vector<bool> steps;                  // judged steps with survivors
      std::vector<const MemoryBlock*> members;  // every allocation of its origin made in a step
      std::array<std::int64_t, kMemoryCategoryCount> by_category{};  // of the survivors
    };
    std::map<std::pair<std::string, std::string>, Group> groups;
    for (const MemoryBlock& block : device.blocks) {
      if (block.step < 0) continue;
      std::string site = detail::site_of(trace, block);
      std::string line = code_line_of(trace, block);
      Group& group = groups[{site, line}];
      if (group.steps.empty()) {
        group.steps.assign(judged, false);
        group.holder.site = std::move(site);
        group.holder.line = std::move(line);
      }
      group.members.push_back(&block);
      const auto step = static_cast<std::size_t>(block.step);
      if (step >= judged || block.released_ns <= blocks.steps[step + result.lag].start_ns) continue;
      group.steps[step] = true;
      ++group.holder.allocations;
      group.holder.bytes += block.bytes;
      group.by_category[static_cast<std::size_t>(block.category)] += block.bytes;
    }
    for (auto& [key, group] : groups) {
      group.holder.steps = static_cast<std::size_t>(std::count(group.steps.begin(), group.steps.end(), true));
      if (group.holder.steps < steps_needed) continue;
      std::vector<std::int64_t> live(blocks.steps.size(), 0);
      for (std::size_t s = 0; s < blocks.steps.size(); ++s)
        for (const MemoryBlock* member : group.members)
          if (member->live_at(blocks.steps[s].end_ns)) live[s] += member->bytes;
      group.holder.bytes_per_step = detail::theil_sen_slope(live);
      if (group.holder.bytes_per_step <= 0) continue;
      group.holder.category = static_cast<MemoryCategory>(
          std::max_element(group.by_category.begin(), group.by_category.end()) - group.by_category.begin());
      growth.holders.push_back(std::move(group.holder));
    }
    std::sort(growth.holders.begin(), growth.holders.end(), [](const LeakHolder& a, const LeakHolder& b) {
      return std::tie(b.bytes_per_step, a.site, a.line) < std::tie(a.bytes_per_step, b.site, b.line);
    });
    result.devices.push_back(std::move(growth));
  }
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
