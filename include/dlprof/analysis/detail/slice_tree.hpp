// dlprof/analysis/detail/slice_tree.hpp: the nesting of a trace's slices (ranges, steps, ops) on
// each thread, and lookups by External id, by correlation id and by time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis::detail {

class SliceTree {
 public:
  static constexpr std::uint32_t kNone = UINT32_MAX;

  /// Relies on the Trace's order: events by thread, then start, enclosing slices first.
  explicit SliceTree(const Trace& trace) : trace_(trace), parent_(trace.events.size(), kNone) {
    std::vector<std::uint32_t> open;
    std::uint32_t thread = UINT32_MAX;
    slices_.reserve(trace.events.size());  // an upper bound: pages never written cost nothing
    by_external_id_.reserve(trace.events.size());
    for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
      const TraceEvent& event = trace.events[i];
      if (!is_slice(event.kind)) continue;
      if (event.thread != thread) {
        open.clear();
        thread = event.thread;
        thread_slices_.push_back({thread, static_cast<std::uint32_t>(slices_.size())});
      }
      while (!open.empty() && trace.events[open.back()].end_ns < event.end_ns) open.pop_back();
      if (!open.empty()) parent_[i] = open.back();
      open.push_back(i);
      slices_.push_back(i);
      if (event.external_id != 0) by_external_id_.emplace_back(event.external_id, i);
    }
    thread_slices_.push_back({UINT32_MAX, static_cast<std::uint32_t>(slices_.size())});
    // Stable: the first slice of an External id two share wins.
    dlprof::detail::stable_sort_runs(by_external_id_.begin(), by_external_id_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::uint32_t i = 0; i < trace.api_events.size(); ++i)
      if (trace.api_events[i].correlation != 0) call_of_correlation_.emplace_back(trace.api_events[i].correlation, i);
    dlprof::detail::stable_sort_runs(call_of_correlation_.begin(), call_of_correlation_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  std::uint32_t parent(std::uint32_t slice) const noexcept { return parent_[slice]; }

  /// The slice whose External id is `id`, or kNone.
  std::uint32_t with_external_id(std::uint64_t id) const noexcept {
    if (id == 0) return kNone;
    const auto found = std::lower_bound(by_external_id_.begin(), by_external_id_.end(), id,
                                        [](const auto& entry, std::uint64_t key) { return entry.first < key; });
    return found != by_external_id_.end() && found->first == id ? found->second : kNone;
  }

  /// The API call with correlation id `correlation`, or nullptr.
  const ApiEvent* call_with_correlation(std::uint32_t correlation) const noexcept {
    if (correlation == 0) return nullptr;
    const auto found = std::lower_bound(call_of_correlation_.begin(), call_of_correlation_.end(), correlation,
                                        [](const auto& entry, std::uint32_t key) { return entry.first < key; });
    return found != call_of_correlation_.end() && found->first == correlation ? &trace_.api_events[found->second] : nullptr;
  }

  /// The innermost slice of `thread` that contains `time_ns` (ends included), or kNone.
  std::uint32_t innermost_at(std::uint32_t thread, std::int64_t time_ns) const noexcept {
    const auto owner = std::lower_bound(thread_slices_.begin(), thread_slices_.end() - 1, thread,
                                        [](const auto& entry, std::uint32_t key) { return entry.first < key; });
    if (owner == thread_slices_.end() - 1 || owner->first != thread) return kNone;
    const auto begin = slices_.begin() + owner->second;
    const auto end = slices_.begin() + (owner + 1)->second;
    auto after = std::upper_bound(begin, end, time_ns,
                                  [&](std::int64_t time, std::uint32_t slice) { return time < trace_.events[slice].start_ns; });
    if (after == begin) return kNone;
    std::uint32_t slice = *(after - 1);
    while (slice != kNone && trace_.events[slice].end_ns < time_ns) slice = parent_[slice];
    return slice;
  }

  /// `slice` or the innermost slice around it for which `accept(event)` holds, or kNone.
  template <class Accept>
  std::uint32_t self_or_ancestor(std::uint32_t slice, Accept&& accept) const {
    while (slice != kNone && !accept(trace_.events[slice])) slice = parent_[slice];
    return slice;
  }

 private:
  const Trace& trace_;
  std::vector<std::uint32_t> parent_;                                   // by event index
  std::vector<std::uint32_t> slices_;                                   // slice indices, in trace order
  std::vector<std::pair<std::uint32_t, std::uint32_t>> thread_slices_;  // (thread, first in slices_), sentinel last
  std::vector<std::pair<std::uint64_t, std::uint32_t>> by_external_id_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> call_of_correlation_;
};

}  // namespace analysis::detail
DLPROF_END_NAMESPACE
