// dlprof/analysis/memory_timeline.hpp: each device's allocated memory over the window, split by
// category (memory_blocks.hpp), and what its allocator reserved.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/memory_blocks.hpp"
#include "dlprof/analysis/memory_leaks.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// A device's memory after one of its events.
struct MemoryTimelinePoint {
  std::int64_t time_ns = 0;
  /// Allocated bytes by MemoryCategory. Unknown holds what the allocator counts and the window
  /// never saw allocated (before the window, or by a thread that reports nothing).
  std::array<std::int64_t, kMemoryCategoryCount> by_category{};
  std::int64_t reserved = 0;  ///< the allocator's reserve (a caching allocator's); 0 where not said

  std::int64_t allocated() const noexcept { return std::accumulate(by_category.begin(), by_category.end(), std::int64_t{0}); }
};

struct DeviceMemoryTimeline {
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;
  std::vector<MemoryTimelinePoint> points;  ///< by time
  bool has_reserved = false;                ///< whether the trace says what was reserved
};

/// Each device's timeline in `blocks` (memory_blocks(trace)), `max_points` points at most: a longer
/// one keeps, of each run of points, the one with the most allocated, so that no peak is lost.
inline std::vector<DeviceMemoryTimeline> memory_timelines(const Trace& trace, const MemoryBlocks& blocks,
                                                          std::size_t max_points = 2000) {
  std::vector<DeviceMemoryTimeline> timelines;
  for (const DeviceMemoryBlocks& device : blocks.devices) {
    DeviceMemoryTimeline timeline;
    timeline.device_type = device.device_type;
    timeline.device = device.device;
    struct Change {
      std::int64_t time_ns;
      std::int64_t bytes;
      MemoryCategory category;
    };
    std::vector<Change> changes;
    changes.reserve(2 * device.blocks.size());
    for (const MemoryBlock& block : device.blocks) {
      changes.push_back({block.allocated_ns, block.bytes, block.category});
      if (block.released()) changes.push_back({block.released_ns, -block.bytes, block.category});
    }
    std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) { return a.time_ns < b.time_ns; });
    std::vector<std::pair<std::int64_t, std::int64_t>> reserved_series;
    for (const MemoryEvent& event : trace.memory_events)
      if (detail::is_event_of(event, device)) {
        reserved_series.emplace_back(event.time_ns, event.total_reserved);
        timeline.has_reserved = timeline.has_reserved || event.total_reserved != 0;
      }
    std::stable_sort(reserved_series.begin(), reserved_series.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const auto series = detail::allocated_over_time(trace, device);
    std::array<std::int64_t, kMemoryCategoryCount> seen{};
    std::size_t next = 0;
    timeline.points.reserve(series.size());
    for (std::size_t i = 0; i < series.size(); ++i) {
      const auto [time_ns, allocated] = series[i];
      for (; next < changes.size() && changes[next].time_ns <= time_ns; ++next)
        seen[static_cast<std::size_t>(changes[next].category)] += changes[next].bytes;
      if (i + 1 < series.size() && series[i + 1].first == time_ns) continue;  // one point per moment
      MemoryTimelinePoint point;
      point.time_ns = time_ns;
      point.by_category = seen;
      const std::int64_t known = std::accumulate(seen.begin(), seen.end(), std::int64_t{0});
      point.by_category[static_cast<std::size_t>(MemoryCategory::Unknown)] += std::max<std::int64_t>(0, allocated - known);
      if (timeline.has_reserved) point.reserved = detail::allocated_at(reserved_series, 0, time_ns);
      timeline.points.push_back(point);
    }
    if (timeline.points.size() > max_points && max_points > 0) {
      const std::size_t run = (timeline.points.size() + max_points - 1) / max_points;
      std::vector<MemoryTimelinePoint> kept;
      kept.reserve(max_points);
      for (std::size_t first = 0; first < timeline.points.size(); first += run) {
        const auto begin = timeline.points.begin() + static_cast<std::ptrdiff_t>(first);
        const auto end = timeline.points.begin() + static_cast<std::ptrdiff_t>(std::min(first + run, timeline.points.size()));
        kept.push_back(*std::max_element(begin, end, [](const MemoryTimelinePoint& a, const MemoryTimelinePoint& b) {
          return a.allocated() < b.allocated();
        }));
      }
      timeline.points = std::move(kept);
    }
    timelines.push_back(std::move(timeline));
  }
  return timelines;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
