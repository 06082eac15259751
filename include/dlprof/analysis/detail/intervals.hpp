// dlprof/analysis/detail/intervals.hpp: unions, intersections and differences of time intervals,
// the arithmetic under every breakdown. Merged lists are sorted by start and disjoint.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis::detail {

struct Interval {
  std::int64_t start = 0;
  std::int64_t end = 0;
};

/// Sorts `intervals` by start and merges them in place, as HTA's merge_kernel_intervals does: an
/// interval joins the current group unless it starts after every end seen so far (touching
/// intervals merge). An interval that ends before it starts (HTA's inward rounding makes them out
/// of sub-µs events) is kept as HTA keeps it: alone in its group, it adds its negative length.
inline void merge(std::vector<Interval>& intervals) {
  // The lists are sorted runs put end to end (each thread's slices, each stream's work): their
  // runs are merged, where introsort would fall back to heapsort and take a tenth of a report's
  // time.
  dlprof::detail::stable_sort_runs(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return a.start != b.start ? a.start < b.start : a.end < b.end;
  });
  std::size_t merged = 0;
  std::int64_t max_end = 0;
  for (const Interval& interval : intervals) {
    if (merged == 0 || interval.start > max_end) {
      intervals[merged++] = interval;
      max_end = interval.end;
    } else {
      intervals[merged - 1].end = std::max(intervals[merged - 1].end, interval.end);
      max_end = std::max(max_end, interval.end);
    }
  }
  intervals.resize(merged);
}

inline std::int64_t total_length(const std::vector<Interval>& merged) noexcept {
  std::int64_t total = 0;
  for (const Interval& interval : merged) total += interval.end - interval.start;
  return total;
}

/// The time in both merged lists.
inline std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t start = std::max(a[i].start, b[j].start);
    const std::int64_t end = std::min(a[i].end, b[j].end);
    if (start < end) out.push_back({start, end});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

inline std::int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) noexcept {
  std::int64_t total = 0;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t start = std::max(a[i].start, b[j].start);
    const std::int64_t end = std::min(a[i].end, b[j].end);
    if (start < end) total += end - start;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

/// The time in merged list `a` and not in merged list `b`.
inline std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  std::size_t j = 0;
  for (const Interval& interval : a) {
    std::int64_t start = interval.start;
    while (j < b.size() && b[j].end <= start) ++j;
    std::size_t k = j;
    while (k < b.size() && b[k].start < interval.end) {
      if (b[k].start > start) out.push_back({start, b[k].start});
      start = std::max(start, b[k].end);
      ++k;
    }
    if (start < interval.end) out.push_back({start, interval.end});
  }
  return out;
}

}  // namespace analysis::detail
DLPROF_END_NAMESPACE
