// dlprof/analysis/run_diff.hpp: what changed between two runs, from each run's per-step samples
// (analysis/step_samples.hpp): the step time compared, every key (op, kernel, module, call site,
// collective) classified by HTA's predicates and tested against the steps' noise, and the few
// changes that explain most of the difference in step time.
//
// Per step. Every figure is compared per step (mean, median and quartiles over the steps), so a run
// of 3 steps compares with a run of 50, and a key absent from a step counts 0 there.
//
// Classification. HTA's TraceDiff.ops_diff predicates, on calls per step: added (none in BASE,
// some in NEW), deleted (the reverse), increased and decreased (more or fewer in NEW, some in
// both), unchanged (as many).
//
// Noise. A key's change is significant when the Mann–Whitney U test of its per-step time (self CPU
// time for ops and ranges, device time for kernels) in NEW against BASE rejects "one
// distribution" and the key survives Benjamini–Hochberg's control of false discoveries over all
// keys (DiffOptions::false_discovery_rate): of the keys called significant, at most that share are
// expected to be noise. Within noise otherwise. With 3 steps a side no change can be told from
// noise at 5 %: the steps a run needs grow as the noise does.
//
// Explaining the step time. A key's impact is the change of its mean per-step self CPU time or GPU
// time (the larger); the changes that explain the step time are the significant ones whose impact
// has the step time's sign, largest first, until they add up to most of it
// (DiffOptions::explained_share) or DiffOptions::explained_at_most of them.
//
//   const auto base = dlprof::analysis::step_samples(a, dlprof::analysis::step_breakdown(a), SampleKey::Op);
//   const auto next = dlprof::analysis::step_samples(b, dlprof::analysis::step_breakdown(b), SampleKey::Op);
//   const dlprof::analysis::RunDiff diff = dlprof::analysis::diff_runs(base, next);
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/rank_statistics.hpp"
#include "dlprof/analysis/step_samples.hpp"
#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct DiffOptions {
  /// The share of false discoveries tolerated among the keys called significant.
  double false_discovery_rate = 0.05;
  /// The step time's test: the chance of calling two runs of one distribution different.
  double alpha = 0.05;
  /// The changes that explain the step time stop once they add up to this share of it...
  double explained_share = 0.8;
  /// ...or when there are this many.
  std::size_t explained_at_most = 5;
};

/// A figure over the steps of one run.
struct StepSummary {
  double mean = 0;
  double median = 0;
  double p25 = 0;
  double p75 = 0;
};

inline StepSummary summarize_steps(const std::vector<double>& values) {
  StepSummary summary;
  summary.mean = detail::mean(values);
  summary.median = detail::quantile(values, 0.5);
  summary.p25 = detail::quantile(values, 0.25);
  summary.p75 = detail::quantile(values, 0.75);
  return summary;
}

/// HTA's categories of a key's change, by calls per step.
enum class KeyChangeKind : std::uint8_t { Added, Deleted, Increased, Decreased, Unchanged };
inline constexpr std::size_t kKeyChangeKindCount = 5;

constexpr std::string_view to_string(KeyChangeKind kind) noexcept {
  switch (kind) {
    case KeyChangeKind::Added: return "added";
    case KeyChangeKind::Deleted: return "deleted";
    case KeyChangeKind::Increased: return "increased";
    case KeyChangeKind::Decreased: return "decreased";
    case KeyChangeKind::Unchanged: return "unchanged";
  }
  return "unchanged";
}

/// One key in both runs.
struct KeyChange {
  std::string key;
  KeyChangeKind kind = KeyChangeKind::Unchanged;
  std::array<StepSummary, kKeyFigureCount> base{};  ///< by KeyFigure, per step
  std::array<StepSummary, kKeyFigureCount> next{};
  /// The figure tested: Self for ops and ranges, GpuSelf for kernels.
  KeyFigure tested = KeyFigure::Self;
  double p_value = 1;  ///< Mann–Whitney, two-sided, of the tested figure's per-step values
  bool significant = false;
  /// The change of the mean per-step time that moved most: self CPU time or GPU time.
  KeyFigure impact_figure = KeyFigure::Self;
  double impact_ns = 0;

  const StepSummary& base_of(KeyFigure figure) const noexcept { return base[static_cast<std::size_t>(figure)]; }
  const StepSummary& next_of(KeyFigure figure) const noexcept { return next[static_cast<std::size_t>(figure)]; }
  double delta(KeyFigure figure) const noexcept { return next_of(figure).mean - base_of(figure).mean; }
};

/// The runs' step times compared.
struct StepTimeChange {
  StepSummary base;  ///< ns
  StepSummary next;
  std::size_t base_steps = 0;
  std::size_t next_steps = 0;
  /// NEW's step time relative to BASE's: the Hodges–Lehmann shift of the log step times (a ratio,
  /// as 0.03 for 3 % slower) and its bounds at 1 − DiffOptions::alpha each side.
  double relative = 0;
  double relative_lower = 0;
  double relative_upper = 0;
  double p_value = 1;  ///< Mann–Whitney, two-sided
  bool significant = false;

  double delta_ns() const noexcept { return next.mean - base.mean; }
};

struct RunDiff {
  SampleKey key = SampleKey::Op;
  DiffOptions options;
  StepTimeChange step_time;
  /// Every key of either run: the significant first, each by impact (the largest change first),
  /// then by time (the most self CPU or GPU time a step first).
  std::vector<KeyChange> changes;
  /// Indices into `changes`: the few that explain most of the change in step time.
  std::vector<std::size_t> explaining;
  std::array<std::size_t, kKeyChangeKindCount> kinds{};  ///< keys of each KeyChangeKind
  std::size_t significant = 0;
  /// What differs between the runs besides their figures: devices, data types, world sizes, step
  /// counts, lost events. Said at the top of a comparison; none of it stops one.
  std::vector<std::string> notes;
};

namespace detail {

inline std::vector<double> figure_per_step(const KeySamples* samples, KeyFigure figure, std::size_t steps) {
  std::vector<double> values(steps, 0.0);
  if (samples == nullptr) return values;
  for (std::size_t i = 0; i < steps && i < samples->steps.size(); ++i)
    values[i] = static_cast<double>(figure_of(samples->steps[i], figure));
  return values;
}

inline std::string step_numbers(const StepSamples& samples) {
  if (samples.steps.empty()) return "no step";
  if (samples.steps.size() == 1 && samples.steps.front().number < 0) return "1 step (the whole trace)";
  return fmt::format("{} step{} (#{}\u2013#{})", samples.steps.size(), samples.steps.size() == 1 ? "" : "s",
                     samples.steps.front().number, samples.steps.back().number);
}

inline void comparability_notes(const StepSamples& base, const StepSamples& next, std::vector<std::string>& notes) {
  const auto join = [](const auto& names) {
    std::string text;
    for (const auto& name : names) (text += text.empty() ? "" : ", ") += name.empty() ? std::string("unnamed") : std::string(name);
    return text.empty() ? std::string("none") : text;
  };
  if (base.devices != next.devices)
    notes.push_back(fmt::format("the runs' GPUs differ: BASE {}, NEW {}", join(base.devices), join(next.devices)));
  if (base.dtypes != next.dtypes && !base.dtypes.empty() && !next.dtypes.empty())
    notes.push_back(fmt::format("the ops' data types differ: BASE {}, NEW {}", join(base.dtypes), join(next.dtypes)));
  if (base.world_size != next.world_size)
    notes.push_back(fmt::format("the world sizes differ: BASE {} rank{}, NEW {}", base.world_size, base.world_size == 1 ? "" : "s",
                                next.world_size));
  if (base.steps.size() != next.steps.size())
    notes.push_back(fmt::format("BASE has {}, NEW {}: figures are per step", step_numbers(base), step_numbers(next)));
  const auto lost = [&](const StepSamples& run, std::string_view side) {
    if (run.dropped_events + run.dropped_gpu_records + run.overflowed_names == 0) return;
    notes.push_back(fmt::format("{} lost events while it recorded ({} dropped, {} GPU records dropped, {} names over the table): "
                                "its figures undercount",
                                side, run.dropped_events, run.dropped_gpu_records, run.overflowed_names));
  };
  lost(base, "BASE");
  lost(next, "NEW");
}

inline KeyChangeKind change_kind(const KeySamples* base, std::size_t base_steps, const KeySamples* next, std::size_t next_steps) {
  // Calls per step compared exactly: base_calls / base_steps against next_calls / next_steps.
  const std::int64_t base_calls = base == nullptr ? 0 : base->sum().calls;
  const std::int64_t next_calls = next == nullptr ? 0 : next->sum().calls;
  const long double base_scaled = static_cast<long double>(base_calls) * static_cast<long double>(next_steps);
  const long double next_scaled = static_cast<long double>(next_calls) * static_cast<long double>(base_steps);
  if (base_calls == 0 && next_calls > 0) return KeyChangeKind::Added;
  if (base_calls > 0 && next_calls == 0) return KeyChangeKind::Deleted;
  if (next_scaled > base_scaled) return KeyChangeKind::Increased;
  if (next_scaled < base_scaled) return KeyChangeKind::Decreased;
  return KeyChangeKind::Unchanged;
}

}  // namespace detail

/// The comparison of NEW (`next`) against BASE (`base`); both keyed alike (StepSamples::key).
inline RunDiff diff_runs(const StepSamples& base, const StepSamples& next, const DiffOptions& options = {}) {
  RunDiff diff;
  diff.key = base.key;
  diff.options = options;
  detail::comparability_notes(base, next, diff.notes);
  const std::size_t base_steps = base.steps.size();
  const std::size_t next_steps = next.steps.size();

  StepTimeChange& step = diff.step_time;
  std::vector<double> base_durations, next_durations, base_logs, next_logs;
  for (const StepSample& sample : base.steps) {
    base_durations.push_back(static_cast<double>(sample.duration_ns));
    base_logs.push_back(std::log(std::max<double>(1.0, static_cast<double>(sample.duration_ns))));
  }
  for (const StepSample& sample : next.steps) {
    next_durations.push_back(static_cast<double>(sample.duration_ns));
    next_logs.push_back(std::log(std::max<double>(1.0, static_cast<double>(sample.duration_ns))));
  }
  step.base = summarize_steps(base_durations);
  step.next = summarize_steps(next_durations);
  step.base_steps = base_steps;
  step.next_steps = next_steps;
  if (base_steps != 0 && next_steps != 0) {
    step.p_value = detail::mann_whitney(base_durations, next_durations).p_value();
    step.significant = step.p_value < options.alpha;
    const detail::ShiftEstimate shift = detail::hodges_lehmann(base_logs, next_logs, options.alpha / 2);
    step.relative = std::expm1(shift.shift);
    step.relative_lower = std::expm1(shift.lower);
    step.relative_upper = std::expm1(shift.upper);
  }

  // Every key of either run, in BASE's order, then NEW's new ones.
  std::vector<std::pair<const KeySamples*, const KeySamples*>> keys;
  std::unordered_map<std::string_view, std::size_t> index;
  for (const KeySamples& samples : base.keys) {
    index.emplace(samples.key, keys.size());
    keys.emplace_back(&samples, nullptr);
  }
  for (const KeySamples& samples : next.keys) {
    const auto [found, added] = index.emplace(samples.key, keys.size());
    if (added) keys.emplace_back(nullptr, &samples);
    else keys[found->second].second = &samples;
  }
  std::vector<double> p_values;
  for (const auto& [before, after] : keys) {
    KeyChange& change = diff.changes.emplace_back();
    change.key = before != nullptr ? before->key : after->key;
    change.kind = detail::change_kind(before, base_steps, after, next_steps);
    ++diff.kinds[static_cast<std::size_t>(change.kind)];
    for (std::size_t f = 0; f < kKeyFigureCount; ++f) {
      change.base[f] = summarize_steps(detail::figure_per_step(before, static_cast<KeyFigure>(f), base_steps));
      change.next[f] = summarize_steps(detail::figure_per_step(after, static_cast<KeyFigure>(f), next_steps));
    }
    change.tested = is_device_key(diff.key) ? KeyFigure::GpuSelf : KeyFigure::Self;
    if (base_steps != 0 && next_steps != 0)
      change.p_value = detail::mann_whitney(detail::figure_per_step(before, change.tested, base_steps),
                                            detail::figure_per_step(after, change.tested, next_steps))
                           .p_value();
    p_values.push_back(change.p_value);
    const double cpu = change.delta(KeyFigure::Self);
    const double gpu = change.delta(KeyFigure::GpuSelf);
    change.impact_figure = std::abs(gpu) > std::abs(cpu) ? KeyFigure::GpuSelf : KeyFigure::Self;
    change.impact_ns = change.delta(change.impact_figure);
  }
  const std::vector<bool> discoveries = detail::benjamini_hochberg(p_values, options.false_discovery_rate);
  for (std::size_t i = 0; i < diff.changes.size(); ++i) {
    diff.changes[i].significant = discoveries[i];
    diff.significant += discoveries[i];
  }
  // Among equal changes (none, most often), the keys that take the most time first.
  const auto time_of = [](const KeyChange& change) {
    return std::max({change.base_of(KeyFigure::Self).mean, change.next_of(KeyFigure::Self).mean,
                     change.base_of(KeyFigure::GpuSelf).mean, change.next_of(KeyFigure::GpuSelf).mean});
  };
  std::stable_sort(diff.changes.begin(), diff.changes.end(), [&](const KeyChange& a, const KeyChange& b) {
    return std::make_tuple(!a.significant, -std::abs(a.impact_ns), -time_of(a)) <
           std::make_tuple(!b.significant, -std::abs(b.impact_ns), -time_of(b));
  });

  const double step_delta = step.delta_ns();
  double explained = 0;
  for (std::size_t i = 0; i < diff.changes.size() && diff.explaining.size() < options.explained_at_most; ++i) {
    const KeyChange& change = diff.changes[i];
    if (!change.significant || change.impact_ns == 0 || (step_delta != 0 && (change.impact_ns > 0) != (step_delta > 0))) continue;
    diff.explaining.push_back(i);
    explained += change.impact_ns;
    if (step_delta != 0 && std::abs(explained) >= options.explained_share * std::abs(step_delta)) break;
  }
  return diff;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
