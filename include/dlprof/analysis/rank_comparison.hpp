// dlprof/analysis/rank_comparison.hpp: the ranks of a distributed job side by side, and the rank
// that held each step back.
//
// Per rank (one Trace each, as read_trace_set() returns them): its steps' mean time (TensorBoard's
// steps, carried to device time: step_breakdown.hpp), its GPUs' mean utilization over those steps,
// HTA's temporal breakdown and communication–computation overlap (under `options`).
// Per step number present on two ranks or more: the slowest and the fastest rank, the median
// step time, and how much slower than the median and the fastest the slowest was: a straggler.
//
//   const auto ranks = dlprof::analysis::compare_ranks(dlprof::read_trace_set(paths));
//   fmt::print("{}", ranks.table());
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/comm_comp_overlap.hpp"
#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/analysis/temporal_breakdown.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct RankSummary {
  std::int64_t rank = 0;  ///< distributedInfo's rank
  std::size_t steps = 0;
  double step_time_mean_ns = 0;
  std::int64_t step_time_min_ns = 0;
  std::int64_t step_time_max_ns = 0;
  double gpu_utilization = 0;  ///< mean over the rank's GPUs, [0, 1]
  TemporalBreakdown temporal;
  CommCompOverlap overlap;
};

/// One step number across the ranks that ran it.
struct StepAcrossRanks {
  std::int64_t step = -1;  ///< N of ProfilerStep#N
  std::size_t ranks = 0;
  std::int64_t slowest_rank = 0;
  std::int64_t slowest_ns = 0;
  std::int64_t fastest_rank = 0;
  std::int64_t fastest_ns = 0;
  double median_ns = 0;

  /// How much longer the slowest rank took than the median, in % of the median.
  double slowest_over_median_percent() const noexcept {
    return median_ns > 0 ? 100.0 * (static_cast<double>(slowest_ns) - median_ns) / median_ns : 0.0;
  }
  double slowest_over_fastest_percent() const noexcept {
    return fastest_ns > 0 ? 100.0 * static_cast<double>(slowest_ns - fastest_ns) / static_cast<double>(fastest_ns) : 0.0;
  }
};

struct RankComparison {
  std::vector<RankSummary> ranks;        ///< by rank
  std::vector<StepAcrossRanks> steps;    ///< by step number

  std::string table() const {
    fmt::memory_buffer out;
    auto line = std::back_inserter(out);
    fmt::format_to(line, "{:>6} {:>6} {:>16} {:>10} {:>9} {:>9} {:>13} {:>9}\n", "Rank", "Steps", "Step mean (us)", "GPU util",
                   "Idle", "Compute", "Non-compute", "Overlap");
    for (const RankSummary& rank : ranks)
      fmt::format_to(line, "{:>6} {:>6} {:>16.3f} {:>9.2f}% {:>8.2f}% {:>8.2f}% {:>12.2f}% {:>8.2f}%\n", rank.rank, rank.steps,
                     rank.step_time_mean_ns / 1e3, 100.0 * rank.gpu_utilization, rank.temporal.idle_percent(),
                     rank.temporal.compute_percent(), rank.temporal.non_compute_percent(), rank.overlap.overlap_percent());
    if (!steps.empty())
      fmt::format_to(line, "\n{:>8} {:>6} {:>14} {:>14} {:>14} {:>12} {:>12}\n", "Step", "Ranks", "Slowest (us)", "Median (us)",
                     "Fastest (us)", "vs median", "vs fastest");
    for (const StepAcrossRanks& step : steps)
      fmt::format_to(line, "{:>8} {:>6} {:>8.3f} (r{}) {:>14.3f} {:>8.3f} (r{}) {:>11.2f}% {:>11.2f}%\n", step.step, step.ranks,
                     step.slowest_ns / 1e3, step.slowest_rank, step.median_ns / 1e3, step.fastest_ns / 1e3, step.fastest_rank,
                     step.slowest_over_median_percent(), step.slowest_over_fastest_percent());
    return fmt::to_string(out);
  }
};

/// What compare_analysed_ranks reads of one rank: analyses that whoever holds them (make_report) computes
/// once and shares.
struct RankAnalyses {
  std::int64_t rank;
  const StepBreakdown& steps;
  const TemporalBreakdown& temporal;
  const CommCompOverlap& overlap;
};

/// The ranks side by side, with the stragglers of each step, from their analyses.
inline RankComparison compare_analysed_ranks(const std::vector<RankAnalyses>& ranks) {
  RankComparison result;
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> step_times;  // step -> (time, rank)
  for (const RankAnalyses& rank : ranks) {
    RankSummary summary;
    summary.rank = rank.rank;
    summary.temporal = rank.temporal;
    summary.overlap = rank.overlap;
    const StepBreakdown& breakdown = rank.steps;
    summary.steps = breakdown.steps.size();
    summary.step_time_mean_ns = breakdown.average_step_ns();
    for (std::size_t i = 0; i < breakdown.steps.size(); ++i) {
      const StepTime& step = breakdown.steps[i];
      summary.step_time_min_ns = i == 0 ? step.duration_ns() : std::min(summary.step_time_min_ns, step.duration_ns());
      summary.step_time_max_ns = std::max(summary.step_time_max_ns, step.duration_ns());
      if (step.number >= 0) step_times[step.number].emplace_back(step.duration_ns(), summary.rank);
    }
    for (const DeviceMetrics& device : breakdown.devices) summary.gpu_utilization += device.utilization;
    if (!breakdown.devices.empty()) summary.gpu_utilization /= static_cast<double>(breakdown.devices.size());
    result.ranks.push_back(summary);
  }
  std::stable_sort(result.ranks.begin(), result.ranks.end(),
                   [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });

  for (auto& [number, times] : step_times) {
    if (times.size() < 2) continue;
    std::sort(times.begin(), times.end());  // by time, then rank: ties go to the lower rank
    StepAcrossRanks step;
    step.step = number;
    step.ranks = times.size();
    step.fastest_ns = times.front().first;
    step.fastest_rank = times.front().second;
    const std::int64_t longest = times.back().first;
    const auto slowest = std::find_if(times.begin(), times.end(), [longest](const auto& t) { return t.first == longest; });
    step.slowest_ns = slowest->first;
    step.slowest_rank = slowest->second;
    const std::size_t middle = times.size() / 2;
    step.median_ns = times.size() % 2 == 1 ? static_cast<double>(times[middle].first)
                                           : (static_cast<double>(times[middle - 1].first) + static_cast<double>(times[middle].first)) / 2;
    result.steps.push_back(step);
  }
  return result;
}

/// The ranks of `traces` side by side, with the stragglers of each step.
inline RankComparison compare_ranks(const std::vector<Trace>& traces, const AnalysisOptions& options = {}) {
  std::vector<StepBreakdown> steps;
  std::vector<TemporalBreakdown> temporal;
  std::vector<CommCompOverlap> overlap;
  steps.reserve(traces.size());
  temporal.reserve(traces.size());
  overlap.reserve(traces.size());
  std::vector<RankAnalyses> ranks;
  for (const Trace& trace : traces) {
    const detail::HtaView view = detail::hta_view(trace, options);
    ranks.push_back({trace.distributed.rank, steps.emplace_back(step_breakdown(trace)), temporal.emplace_back(detail::temporal_breakdown(trace, view)),
                     overlap.emplace_back(detail::comm_comp_overlap(trace, view))});
  }
  return compare_analysed_ranks(ranks);
}

}  // namespace analysis
DLPROF_END_NAMESPACE
