// dlprof/detail/sorted_runs.hpp: a stable sort for sequences that are already made of a few
// sorted runs, as a trace's events mostly are: Kineto writes each thread's CPU events in time
// order, thread after thread. The runs are found in one pass and merged pairwise, O(n log runs)
// where std::stable_sort moves every element log2(n) times; a sequence of many runs is given
// to std::stable_sort.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Sorts [first, last) as std::stable_sort does (equal elements keep their order).
template <class RandomIt, class Less>
void stable_sort_runs(RandomIt first, RandomIt last, Less less) {
  // Beyond this many runs, merging them costs about what the sort does.
  constexpr std::size_t kMostRuns = 64;
  const auto size = static_cast<std::size_t>(std::distance(first, last));
  std::vector<std::size_t> bounds{0};  // where each run starts, and the end
  for (std::size_t i = 1; i < size; ++i) {
    if (!less(first[static_cast<std::ptrdiff_t>(i)], first[static_cast<std::ptrdiff_t>(i - 1)])) continue;
    if (bounds.size() == kMostRuns) {
      std::stable_sort(first, last, less);
      return;
    }
    bounds.push_back(i);
  }
  bounds.push_back(size);
  while (bounds.size() > 2) {  // each pass merges neighbouring runs, the left one's elements first on ties
    std::size_t kept = 1;
    for (std::size_t run = 0; run + 2 < bounds.size(); run += 2) {
      std::inplace_merge(first + static_cast<std::ptrdiff_t>(bounds[run]), first + static_cast<std::ptrdiff_t>(bounds[run + 1]),
                         first + static_cast<std::ptrdiff_t>(bounds[run + 2]), less);
      bounds[kept++] = bounds[run + 2];
    }
    if (bounds.size() % 2 == 0) bounds[kept++] = bounds.back();  // an odd run out waits for the next pass
    bounds.resize(kept);
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
