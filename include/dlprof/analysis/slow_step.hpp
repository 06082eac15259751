// dlprof/analysis/slow_step.hpp: what made one step slow, against the median of the others: the
// step of a flight recorder's slow-step dump compared, key by key (analysis/step_samples.hpp), with
// the median of the steps kept before it. "step 30 took 539 ms, 12.7x the median: stall 500 ms
// (new), aten::mm +2.1 ms".
//
// The slow step is the trace's longest; the others' figure for a key is the median over them of
// its per-step value (0 in the steps that do not run it). A key grew where its self CPU time or
// GPU time in the slow step passed that median; it is new where no other step ran it. The keys
// listed are those that grew most, until they add up to 80 % of the step's excess over the median
// step, at most five.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlprof/analysis/detail/rank_statistics.hpp"
#include "dlprof/analysis/step_samples.hpp"
#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// A key that grew in the slow step.
struct SlowStepKey {
  std::string key;
  KeyFigure figure = KeyFigure::Self;  ///< Self (CPU) or GpuSelf, whichever grew more
  double slow_ns = 0;                  ///< in the slow step
  double median_ns = 0;                ///< the median of the other steps
  bool added = false;                  ///< no other step ran it
};

struct SlowStep {
  std::int64_t number = -1;
  std::int64_t duration_ns = 0;
  double median_ns = 0;  ///< of the other steps' durations
  std::size_t other_steps = 0;
  std::vector<SlowStepKey> grew;  ///< largest growth first
  /// A hang dump's step: it had not ended, and its duration is how long it had run at the dump.
  bool hung = false;

  double ratio() const noexcept { return median_ns > 0 ? static_cast<double>(duration_ns) / median_ns : 0.0; }
};

/// The longest step of `samples` against the median of the others; none with fewer than two
/// steps.
inline std::optional<SlowStep> slow_step(const StepSamples& samples) {
  if (samples.steps.size() < 2) return std::nullopt;
  std::size_t slowest = 0;
  for (std::size_t i = 1; i < samples.steps.size(); ++i)
    if (samples.steps[i].duration_ns > samples.steps[slowest].duration_ns) slowest = i;
  SlowStep result;
  result.number = samples.steps[slowest].number;
  result.duration_ns = samples.steps[slowest].duration_ns;
  result.other_steps = samples.steps.size() - 1;
  std::vector<double> others;
  for (std::size_t i = 0; i < samples.steps.size(); ++i)
    if (i != slowest) others.push_back(static_cast<double>(samples.steps[i].duration_ns));
  result.median_ns = detail::quantile(others, 0.5);

  for (const KeySamples& key : samples.keys) {
    SlowStepKey grown;
    grown.key = key.key;
    double best = 0;
    for (const KeyFigure figure : {KeyFigure::Self, KeyFigure::GpuSelf}) {
      std::vector<double> values;
      std::int64_t other_calls = 0;
      for (std::size_t i = 0; i < key.steps.size(); ++i) {
        if (i == slowest) continue;
        values.push_back(static_cast<double>(figure_of(key.steps[i], figure)));
        other_calls += key.steps[i].calls;
      }
      const double median = detail::quantile(values, 0.5);
      const double slow = static_cast<double>(figure_of(key.steps[slowest], figure));
      if (slow - median > best) {
        best = slow - median;
        grown.figure = figure;
        grown.slow_ns = slow;
        grown.median_ns = median;
        grown.added = other_calls == 0;
      }
    }
    if (best > 0) result.grew.push_back(std::move(grown));
  }
  std::stable_sort(result.grew.begin(), result.grew.end(), [](const SlowStepKey& a, const SlowStepKey& b) {
    return a.slow_ns - a.median_ns > b.slow_ns - b.median_ns;
  });
  const double excess = static_cast<double>(result.duration_ns) - result.median_ns;
  double explained = 0;
  std::size_t kept = 0;
  while (kept < result.grew.size() && kept < 5 && (excess <= 0 || explained < 0.8 * excess)) {
    explained += result.grew[kept].slow_ns - result.grew[kept].median_ns;
    ++kept;
  }
  result.grew.resize(kept);
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
