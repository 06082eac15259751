// dlprof/analysis/duration_stats.hpp: count, sum, min, max, mean and standard deviation of the
// durations of everything sharing one name: a row of the kernel tables and of the nvprof-style
// summaries.
#pragma once

#include <cstdint>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// Durations of everything sharing one name.
struct DurationStats {
  std::string_view name;
  std::uint64_t calls = 0;
  std::int64_t total_ns = 0;
  std::int64_t min_ns = 0;
  std::int64_t max_ns = 0;
  double mean_ns = 0;
  /// Sample standard deviation (n − 1 in the denominator, as pandas' std); 0 for one call.
  double stddev_ns = 0;
};

}  // namespace analysis
DLPROF_END_NAMESPACE
