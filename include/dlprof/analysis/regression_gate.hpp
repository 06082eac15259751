// dlprof/analysis/regression_gate.hpp: a CI gate on two runs' per-step samples
// (analysis/step_samples.hpp) that knows its own noise: NEW fails when a figure moved the wrong way
// beyond what the steps' noise explains and by at least half its threshold, at a stated rate of
// false alarms, and the gate says how small a change it could have caught.
//
// Figures, each a value per step, and the direction that is worse:
//   step_time      the step's duration                           higher is worse
//   gpu_busy       the share of the step the GPU's work covers   lower is worse
//   exposed_comm   the step time only communication covers       higher is worse
//   mfu            FLOPs over the step's time and the GPUs' peak lower is worse
//   memory_peak    the most memory allocated during the step     higher is worse
// A check names a figure, a direction and a threshold: a relative change, as 0.02 for 2 %.
//
// The test. For each check, the one-sided Mann–Whitney U test of NEW's per-step values against
// BASE's in the worse direction, at level alpha (GateOptions::false_alarm_rate): where NEW and BASE
// come from one distribution, the check fails in at most alpha of runs. The change is the
// Hodges–Lehmann shift of the per-step values over BASE's median, with its one-sided bound at
// 1 − alpha. A check fails when the test rejects and the change is at least half the threshold:
// nearer the threshold than no change, so that a real change of the threshold is caught as often
// as the noise allows and a tiny real one is not a failure.
//
// What it could catch. From the steps' spread (a robust σ: 1.4826 × the median absolute deviation,
// pooled over both runs, over BASE's median), the standard error of the shift is
// σ·√(π/3·(1/n₁ + 1/n₂)) (the Hodges–Lehmann estimate's, for normal noise). The smallest change
// caught with probability GateOptions::power is max(z₁₋α·SE, threshold/2) + z_power·SE; the steps a
// run needs to catch the threshold itself come from the same formula.
//
// Fail closed. Two runs are not comparable, and the gate says why instead of passing, when either
// lost events while it recorded (dropped records, GPU records, names over the table), when the
// kinds of kernels their steps run differ (communication, memory, computation: one run has GPU
// work or collectives the other has none of), when a run has no step, when a check's figure is
// missing from a run (no GPU, no allocations, no FLOPs or peak), or when too few steps make a
// failure impossible at alpha (3 steps a side cannot go below p = 0.05).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/rank_statistics.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/step_samples.hpp"
#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

enum class GateFigure : std::uint8_t { StepTime, GpuBusy, ExposedCommunication, Mfu, MemoryPeak };

constexpr std::string_view to_string(GateFigure figure) noexcept {
  switch (figure) {
    case GateFigure::StepTime: return "step_time";
    case GateFigure::GpuBusy: return "gpu_busy";
    case GateFigure::ExposedCommunication: return "exposed_comm";
    case GateFigure::Mfu: return "mfu";
    case GateFigure::MemoryPeak: return "memory_peak";
  }
  return "step_time";
}

/// The figure to_string() spells, if any.
inline std::optional<GateFigure> gate_figure_of(std::string_view name) noexcept {
  for (const GateFigure figure :
       {GateFigure::StepTime, GateFigure::GpuBusy, GateFigure::ExposedCommunication, GateFigure::Mfu, GateFigure::MemoryPeak})
    if (to_string(figure) == name) return figure;
  return std::nullopt;
}

/// Whether a higher value of the figure is the worse one.
constexpr bool higher_is_worse(GateFigure figure) noexcept {
  return figure != GateFigure::GpuBusy && figure != GateFigure::Mfu;
}

/// One check: the figure fails when it moved `threshold` (relative, > 0) the worse way.
struct GateCheck {
  GateFigure figure = GateFigure::StepTime;
  bool higher_is_worse = true;
  double threshold = 0.02;
};

struct GateOptions {
  std::vector<GateCheck> checks;
  /// The rate of false alarms each check allows: how often it fails two runs of one distribution.
  double false_alarm_rate = 0.01;
  /// How often a change of the smallest detectable size is caught.
  double power = 0.95;
};

enum class GateVerdict : std::uint8_t { Pass, Regression, NotComparable };

constexpr std::string_view to_string(GateVerdict verdict) noexcept {
  switch (verdict) {
    case GateVerdict::Pass: return "pass";
    case GateVerdict::Regression: return "regression";
    case GateVerdict::NotComparable: return "not comparable";
  }
  return "pass";
}

/// One check's outcome.
struct GateResult {
  GateCheck check;
  GateVerdict verdict = GateVerdict::Pass;
  std::string reason;  ///< NotComparable: why
  double base_median = 0;
  double next_median = 0;
  /// NEW against BASE: the shift over BASE's median (0.03: 3 % higher), and its one-sided bound at
  /// 1 − alpha on the better side (the least the figure moved the worse way).
  double relative = 0;
  double relative_bound = 0;
  double p_value = 1;  ///< one-sided, in the worse direction
  /// The smallest relative change caught with GateOptions::power, given this pair's noise and steps.
  double smallest_detectable = 0;
  /// The steps each run needs so that a change of the threshold is caught with GateOptions::power;
  /// 0 where no number of steps will do (noise larger than the threshold allows).
  std::size_t steps_needed = 0;
};

struct GateReport {
  GateOptions options;
  std::size_t base_steps = 0;
  std::size_t next_steps = 0;
  std::vector<GateResult> results;  ///< one per check
  /// Why the runs cannot be compared at all; empty where they can.
  std::vector<std::string> not_comparable;

  GateVerdict verdict() const noexcept {
    if (!not_comparable.empty()) return GateVerdict::NotComparable;
    bool regression = false;
    for (const GateResult& result : results) {
      if (result.verdict == GateVerdict::NotComparable) return GateVerdict::NotComparable;
      regression = regression || result.verdict == GateVerdict::Regression;
    }
    return regression ? GateVerdict::Regression : GateVerdict::Pass;
  }
};

/// The peak FLOP/s of a run's GPUs, for the mfu figure; none where unknown.
struct GatePeaks {
  std::optional<double> base_flops_per_second;
  std::optional<double> next_flops_per_second;
};

namespace detail {

/// The figure's value in each step; none where the run does not have the figure.
inline std::optional<std::vector<double>> gate_values(const StepSamples& run, GateFigure figure, std::optional<double> peak) {
  std::vector<double> values;
  bool present = false;
  for (const StepSample& step : run.steps) {
    const double duration = static_cast<double>(step.duration_ns);
    switch (figure) {
      case GateFigure::StepTime:
        values.push_back(duration);
        present = true;
        break;
      case GateFigure::GpuBusy:
        values.push_back(duration > 0 ? static_cast<double>(step.gpu_busy_ns) / duration : 0.0);
        present = present || step.gpu_busy_ns > 0;
        break;
      case GateFigure::ExposedCommunication:
        values.push_back(static_cast<double>(step.exposed_communication_ns));
        present = true;
        break;
      case GateFigure::Mfu:
        values.push_back(duration > 0 && peak ? static_cast<double>(step.flops) / (duration / 1e9) / *peak : 0.0);
        present = present || (step.flops > 0 && peak && *peak > 0);
        break;
      case GateFigure::MemoryPeak:
        values.push_back(static_cast<double>(step.memory_peak_bytes.value_or(0)));
        present = present || step.memory_peak_bytes.has_value();
        break;
    }
  }
  if (!present) return std::nullopt;
  return values;
}

/// The smallest p a one-sided rank test of n1 and n2 values can give: 1 / C(n1 + n2, n1).
inline double smallest_p(std::size_t n1, std::size_t n2) {
  double arrangements = 1;
  for (std::size_t i = 1; i <= std::min(n1, n2); ++i)
    arrangements = arrangements * static_cast<double>(std::max(n1, n2) + i) / static_cast<double>(i);
  return 1 / arrangements;
}

/// The steps a side that make a one-sided rank test able to reach p < alpha.
inline std::size_t steps_for_alpha(double alpha) {
  std::size_t n = 1;
  while (smallest_p(n, n) >= alpha) ++n;
  return n;
}

inline std::string kernel_kinds_text(const std::array<bool, kKernelTypeCount>& present) {
  std::string text;
  for (std::size_t type = 0; type < kKernelTypeCount; ++type)
    if (present[type]) (text += text.empty() ? "" : ", ") += to_string(static_cast<KernelType>(type));
  return text.empty() ? std::string("no kernels") : text;
}

/// The kinds of kernels the run's steps run: those the median step runs some of.
inline std::array<bool, kKernelTypeCount> kernel_kinds(const StepSamples& run) {
  std::array<bool, kKernelTypeCount> present{};
  for (std::size_t type = 0; type < kKernelTypeCount; ++type) {
    std::vector<double> counts;
    for (const auto& step : run.kernels_by_type) counts.push_back(static_cast<double>(step[type]));
    present[type] = quantile(counts, 0.5) > 0;
  }
  return present;
}

}  // namespace detail

/// The gate's verdict on NEW (`next`) against BASE (`base`).
inline GateReport regression_gate(const StepSamples& base, const StepSamples& next, const GateOptions& options,
                                  const GatePeaks& peaks = {}) {
  GateReport report;
  report.options = options;
  report.base_steps = base.steps.size();
  report.next_steps = next.steps.size();
  const double alpha = options.false_alarm_rate;
  for (const auto& [run, side] : {std::make_pair(&base, "BASE"), std::make_pair(&next, "NEW")}) {
    if (run->steps.empty()) report.not_comparable.push_back(fmt::format("{} has no step", side));
    if (run->dropped_events + run->dropped_gpu_records + run->overflowed_names != 0)
      report.not_comparable.push_back(fmt::format("{} lost events while it recorded ({} dropped, {} GPU records dropped, {} names "
                                                  "over the table): its figures undercount",
                                                  side, run->dropped_events, run->dropped_gpu_records, run->overflowed_names));
  }
  const auto base_kinds = detail::kernel_kinds(base);
  const auto next_kinds = detail::kernel_kinds(next);
  if (base_kinds != next_kinds)
    report.not_comparable.push_back(fmt::format("the kinds of kernels a step runs differ: BASE {}, NEW {}",
                                                detail::kernel_kinds_text(base_kinds), detail::kernel_kinds_text(next_kinds)));
  const std::size_t n1 = base.steps.size();
  const std::size_t n2 = next.steps.size();
  if (n1 != 0 && n2 != 0 && detail::smallest_p(n1, n2) >= alpha)
    report.not_comparable.push_back(fmt::format("{} steps against {} cannot show a change at a false-alarm rate of {:g} %: "
                                                "record at least {} steps a run",
                                                n1, n2, 100 * alpha, detail::steps_for_alpha(alpha)));

  const double z_alpha = detail::normal_upper_quantile(alpha);
  const double z_power = detail::normal_upper_quantile(1 - options.power);
  for (const GateCheck& check : options.checks) {
    GateResult& result = report.results.emplace_back();
    result.check = check;
    const std::optional<std::vector<double>> before = detail::gate_values(base, check.figure, peaks.base_flops_per_second);
    const std::optional<std::vector<double>> after = detail::gate_values(next, check.figure, peaks.next_flops_per_second);
    if (!before || !after) {
      result.verdict = GateVerdict::NotComparable;
      result.reason = fmt::format("{} has no {} (it needs {})", !before ? "BASE" : "NEW", to_string(check.figure),
                                  check.figure == GateFigure::GpuBusy      ? "GPU work"
                                  : check.figure == GateFigure::Mfu        ? "FLOPs (with_flops) and a GPU whose peak is known"
                                  : check.figure == GateFigure::MemoryPeak ? "allocations (profile_memory)"
                                                                           : "steps");
      continue;
    }
    if (before->empty() || after->empty()) {
      result.verdict = GateVerdict::NotComparable;
      result.reason = "a run has no step";
      continue;
    }
    result.base_median = detail::quantile(*before, 0.5);
    result.next_median = detail::quantile(*after, 0.5);
    const detail::MannWhitney test = detail::mann_whitney(*before, *after);
    result.p_value = check.higher_is_worse ? test.p_greater : test.p_less;
    const detail::ShiftEstimate shift = detail::hodges_lehmann(*before, *after, alpha);
    const double scale = result.base_median;
    if (scale <= 0) {
      // No base to be relative to (no exposed communication in BASE): any rise is infinite.
      const bool worse = check.higher_is_worse ? shift.lower > 0 : shift.upper < 0;
      result.relative = shift.shift == 0 ? 0.0 : (shift.shift > 0 ? HUGE_VAL : -HUGE_VAL);
      result.relative_bound = worse ? result.relative : 0.0;
      result.verdict = worse && result.p_value < alpha ? GateVerdict::Regression : GateVerdict::Pass;
      continue;
    }
    result.relative = shift.shift / scale;
    result.relative_bound = (check.higher_is_worse ? shift.lower : shift.upper) / scale;
    // Noise: each run's spread about its own median, pooled, over BASE's median.
    std::vector<double> deviations;
    const double next_median = result.next_median;
    for (const double value : *before) deviations.push_back(value - result.base_median);
    for (const double value : *after) deviations.push_back(value - next_median);
    const double sigma = detail::robust_sigma(deviations) / scale;
    const double pi_over_3 = std::acos(-1.0) / 3;
    const double standard_error =
        sigma * std::sqrt(pi_over_3 * (1 / static_cast<double>(before->size()) + 1 / static_cast<double>(after->size())));
    result.smallest_detectable = std::max(z_alpha * standard_error, check.threshold / 2) + z_power * standard_error;
    // Equal runs of n steps: SE(n) = sigma·√(2π/3n) must be at most what catches the threshold.
    const double largest_error = std::min(check.threshold / (z_alpha + z_power), check.threshold / 2 / z_power);
    if (sigma == 0) {
      result.steps_needed = detail::steps_for_alpha(alpha);
    } else if (largest_error > 0) {
      result.steps_needed = std::max(detail::steps_for_alpha(alpha),
                                     static_cast<std::size_t>(std::ceil(2 * pi_over_3 * (sigma / largest_error) * (sigma / largest_error))));
    }
    const double worse_change = check.higher_is_worse ? result.relative : -result.relative;
    result.verdict = result.p_value < alpha && worse_change >= check.threshold / 2 ? GateVerdict::Regression : GateVerdict::Pass;
  }
  return report;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
