// dlprof/analysis/regression_gate.hpp: a CI gate on runs' per-step samples
// (analysis/step_samples.hpp) that knows its own noise: NEW fails when a figure moved the wrong way
// beyond what the noise explains and by at least half its threshold, at a stated rate of false
// alarms, and the gate says how small a change it could have caught.
//
// Figures, each a value per step, and the direction that is worse:
//   step_time      the step's duration                           higher is worse
//   gpu_busy       the share of the step the GPU's work covers   lower is worse
//   exposed_comm   the step time only communication covers       higher is worse
//   mfu            FLOPs over the step's time and the GPUs' peak lower is worse
//   memory_peak    the most memory allocated during the step     higher is worse
// A check names a figure, a direction and a threshold: a relative change, as 0.02 for 2 %.
//
// Two kinds of noise move a figure: from step to step within a run, and from run to run (a
// machine that is slower this minute, another process on the host). One run a side shows only the
// first, so the gate tests steps; several runs a side show the second, and the gate tests runs.
//
// One run a side: the one-sided Mann–Whitney U test of NEW's per-step values against BASE's in the
// worse direction, at level alpha (GateOptions::false_alarm_rate): where NEW and BASE come from
// one distribution, the check fails in at most alpha of runs. The change is the Hodges–Lehmann
// shift of the per-step values over BASE's median, with its one-sided bound at 1 − alpha. From the
// steps' spread (a robust σ: 1.4826 × the median absolute deviation, pooled over both runs, over
// BASE's median), the standard error of the shift is σ·√(π/3·(1/n₁ + 1/n₂)) (the Hodges–Lehmann
// estimate's, for normal noise); it gives the smallest change caught with GateOptions::power, and
// the steps a run needs to catch the threshold. A machine that slows between the two runs is seen
// as a regression: the report says so.
//
// Several runs a side (BASE two at least): each run is one sample, the logarithm of its median
// step value, and the test is Student's two-sample t-test of NEW's against BASE's, one-sided at
// alpha, with the runs' variance pooled over both sides. That variance holds both noises: the
// between-run one that a step test cannot see, and the within-run one of each median. The smallest
// change caught with GateOptions::power is max(t₁₋α·SE, log(1 + threshold/2)) + t_power·SE, and the
// runs a side that catch the threshold come from the same formula with the runs' σ at its upper
// bound of the same confidence as the power: a σ seen in a few runs may be well below the runs'
// own, and the count must catch the threshold at the σ they have.
//
// The machine's speed (step_time, several BASE runs, GateOptions::machine_speed). A slower machine
// slows all work alike; a change to the code slows some. The same work is the ops that every run
// calls equally often a step (five at least); a run's speed is the median over them of its
// per-call time over BASE's (self time; device time for kernels). step_time is judged after the
// speed of each step, the same median over the ops that step calls (a run's sample is the median
// of its steps, each over its own speed): a shared machine's load changes within a run too. A run
// speed outside what BASE's own runs show (NEW slower, by the one-sided t-test at alpha) cannot be
// told from a change that slows every op alike: the runs are then not comparable, rather than
// judged after a speed the gate cannot vouch for.
//
// A check fails when the test rejects and the change is at least half the threshold: nearer the
// threshold than no change, so that a real change of the threshold is caught as often as the noise
// allows and a tiny real one is not a failure.
//
// Fail closed. Runs are not comparable, and the gate says why instead of passing, when one lost
// events while it recorded (dropped records, GPU records, names over the table), when the kinds of
// kernels their steps run differ (communication, memory, computation: one run has GPU work or
// collectives the other has none of), when a run has no step, when a check's figure is missing
// from a run (no GPU, no allocations, no FLOPs or peak), or when too few steps make a failure
// impossible at alpha (3 steps a side cannot go below p = 0.05).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
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
  /// Whether step_time is judged after the machine's speed, where several BASE runs allow it.
  bool machine_speed = true;
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
  /// 0 where no number of steps will do (noise larger than the threshold allows) or where runs are
  /// tested (runs_needed).
  std::size_t steps_needed = 0;
  /// Runs tested: the runs' relative spread (σ of the log of a run's median, pooled) and the runs a
  /// side that catch the threshold with GateOptions::power (0: more than kMaxRunsNeeded).
  bool runs_tested = false;
  double run_spread = 0;
  std::size_t runs_needed = 0;
  /// Whether the figure was judged after the machine's speed (GateReport::speed).
  bool speed_adjusted = false;
};

/// How fast the machine ran each run: its per-call time for the same work over BASE's.
struct MachineSpeed {
  bool estimated = false;
  std::string not_estimated;  ///< why, where not estimated
  std::size_t keys = 0;       ///< the ops that do the same work in every run
  std::vector<double> base_factors;  ///< per BASE run: 1.05 is 5 % slower than BASE's typical run
  std::vector<double> next_factors;  ///< per NEW run
  /// Per run, per step: the same work's speed in that step, which step_time is judged after (the
  /// run's factor for a step that calls too few of the ops).
  std::vector<std::vector<double>> base_step_factors;
  std::vector<std::vector<double>> next_step_factors;
  double factor = 1;                 ///< NEW's over BASE's (geometric means)
  double p_value = 1;                ///< that BASE's runs' speeds put NEW's so slow, one-sided
};

struct GateReport {
  GateOptions options;
  std::size_t base_runs = 0;
  std::size_t next_runs = 0;
  std::size_t base_steps = 0;  ///< over all its runs
  std::size_t next_steps = 0;
  MachineSpeed speed;
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
struct GatePeaks {  // of every run of a side
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

/// A key's per-call time in a run: the median over the steps that call it of time over calls.
inline std::optional<double> per_call_time(const KeySamples& samples, bool device_key) {
  std::vector<double> times;
  for (const KeyFigures& step : samples.steps)
    if (step.calls > 0)
      times.push_back(static_cast<double>(device_key ? step.gpu_self_ns : step.self_ns) / static_cast<double>(step.calls));
  if (times.empty()) return std::nullopt;
  return quantile(std::move(times), 0.5);
}

inline double median_calls(const KeySamples& samples) {
  std::vector<double> calls;
  for (const KeyFigures& step : samples.steps) calls.push_back(static_cast<double>(step.calls));
  return quantile(std::move(calls), 0.5);
}

/// Each run's speed against BASE's: the median over the same work of its per-call time over the
/// median of BASE's runs' per-call times.
inline MachineSpeed machine_speed(const std::vector<StepSamples>& base, const std::vector<StepSamples>& next) {
  MachineSpeed speed;
  constexpr std::size_t kFewestKeys = 5;
  constexpr double kShortestCallNs = 1000;  // shorter calls are mostly the clock's and the recorder's
  std::vector<const StepSamples*> runs;
  for (const StepSamples& run : base) runs.push_back(&run);
  for (const StepSamples& run : next) runs.push_back(&run);
  const bool device_key = is_device_key(base.front().key);
  std::vector<std::vector<double>> log_ratios(runs.size());  // per run, per key of the same work
  std::vector<std::vector<std::vector<double>>> step_log_ratios(runs.size());  // per run, per step, per key called in it
  for (std::size_t run = 0; run < runs.size(); ++run) step_log_ratios[run].resize(runs[run]->steps.size());
  for (const KeySamples& reference : base.front().keys) {
    // The step itself ("ProfilerStep*" in the samples) is what is judged, not work within it.
    if (dlprof::detail::starts_with(reference.key, kineto::name::kProfilerStepPrefix)) continue;
    const double calls = median_calls(reference);
    if (calls < 1) continue;
    std::vector<double> times;
    for (const StepSamples* run : runs) {
      const KeySamples* samples = run->find(reference.key);
      const std::optional<double> time = samples && median_calls(*samples) == calls ? per_call_time(*samples, device_key) : std::nullopt;
      if (!time || *time <= 0) break;
      times.push_back(*time);
    }
    if (times.size() != runs.size()) continue;
    const double base_time = quantile(std::vector<double>(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(base.size())), 0.5);
    if (base_time < kShortestCallNs) continue;
    for (std::size_t run = 0; run < runs.size(); ++run) {
      log_ratios[run].push_back(std::log(times[run] / base_time));
      const std::vector<KeyFigures>& steps = runs[run]->find(reference.key)->steps;
      for (std::size_t step = 0; step < steps.size() && step < step_log_ratios[run].size(); ++step) {
        const KeyFigures& figures = steps[step];
        const double time = static_cast<double>(device_key ? figures.gpu_self_ns : figures.self_ns);
        if (figures.calls > 0 && time > 0)
          step_log_ratios[run][step].push_back(std::log(time / static_cast<double>(figures.calls) / base_time));
      }
    }
    ++speed.keys;
  }
  if (speed.keys < kFewestKeys) {
    speed.not_estimated = fmt::format("{} op{} the same number of times a step in every run, and {} needed", speed.keys,
                                      speed.keys == 1 ? " is called" : "s are called", kFewestKeys);
    return speed;
  }
  speed.estimated = true;
  for (std::size_t run = 0; run < runs.size(); ++run) {
    const double run_factor = std::exp(quantile(log_ratios[run], 0.5));
    (run < base.size() ? speed.base_factors : speed.next_factors).push_back(run_factor);
    std::vector<double>& step_factors = (run < base.size() ? speed.base_step_factors : speed.next_step_factors).emplace_back();
    for (std::vector<double>& step : step_log_ratios[run])
      step_factors.push_back(step.size() >= kFewestKeys ? std::exp(quantile(std::move(step), 0.5)) : run_factor);
  }
  return speed;
}

/// Student's two-sample t-test of `next` against `base` (pooled variance), one-sided: higher is
/// worse where `higher_is_worse`. Also the runs a side that catch `threshold` (log scale) with
/// `power`, at this spread.
struct RunTest {
  double difference = 0;  ///< mean of next less mean of base
  double standard_error = 0;
  double degrees = 0;
  double p_value = 1;
  double spread = 0;  ///< the pooled σ of one run
};

inline RunTest run_t_test(const std::vector<double>& base, const std::vector<double>& next, bool higher_is_worse) {
  RunTest test;
  const double base_mean = mean(base);
  const double next_mean = mean(next);
  double squares = 0;
  for (const double value : base) squares += (value - base_mean) * (value - base_mean);
  for (const double value : next) squares += (value - next_mean) * (value - next_mean);
  test.degrees = static_cast<double>(base.size() + next.size()) - 2;
  test.spread = std::sqrt(squares / test.degrees);
  test.difference = next_mean - base_mean;
  test.standard_error = test.spread * std::sqrt(1 / static_cast<double>(base.size()) + 1 / static_cast<double>(next.size()));
  const double worse = higher_is_worse ? test.difference : -test.difference;
  if (test.standard_error > 0) {
    test.p_value = student_upper_tail(worse / test.standard_error, test.degrees);
  } else {
    test.p_value = worse > 0 ? 0.0 : 1.0;
  }
  return test;
}

/// The most runs a side the gate will ask for.
inline constexpr std::size_t kMaxRunsNeeded = 1000;

/// The σ that a sample spread of `spread` over `degrees` degrees of freedom stays under with
/// `confidence`: spread·√(degrees / χ²), χ² the chi-square's lower (1 − confidence) quantile by
/// Wilson and Hilferty's cube-root approximation (good to 0.1 % from 5 degrees).
inline double spread_upper_bound(double spread, double degrees, double confidence) {
  const double spread_of_cube_root = std::sqrt(2 / (9 * degrees));
  const double cube_root = 1 - 2 / (9 * degrees) - normal_upper_quantile(1 - confidence) * spread_of_cube_root;
  const double chi_square = degrees * cube_root * cube_root * cube_root;
  return chi_square > 0 ? spread * std::sqrt(degrees / chi_square) : std::numeric_limits<double>::infinity();
}

/// The runs a side (equal sides) with which a change of log(1 + threshold) is caught with `power`
/// at false-alarm rate `alpha`, for runs of spread `spread`; 0 beyond kMaxRunsNeeded.
inline std::size_t runs_needed(double spread, double threshold, double alpha, double power) {
  const double target = std::log1p(threshold);
  const double floor = std::log1p(threshold / 2);
  for (std::size_t runs = 2; runs <= kMaxRunsNeeded; ++runs) {
    const double degrees = 2 * static_cast<double>(runs) - 2;
    const double error = spread * std::sqrt(2 / static_cast<double>(runs));
    if (std::max(student_upper_quantile(alpha, degrees) * error, floor) + student_upper_quantile(1 - power, degrees) * error <= target)
      return runs;
  }
  return 0;
}

}  // namespace detail

namespace detail {

/// One check by the steps of one run a side.
inline void gate_by_steps(GateResult& result, const std::vector<double>& before, const std::vector<double>& after, const GateOptions& options) {
  const GateCheck& check = result.check;
  const double alpha = options.false_alarm_rate;
  const double z_alpha = normal_upper_quantile(alpha);
  const double z_power = normal_upper_quantile(1 - options.power);
  const MannWhitney test = mann_whitney(before, after);
  result.p_value = check.higher_is_worse ? test.p_greater : test.p_less;
  const ShiftEstimate shift = hodges_lehmann(before, after, alpha);
  const double scale = result.base_median;
  if (scale <= 0) {
    // No base to be relative to (no exposed communication in BASE): any rise is infinite.
    const bool worse = check.higher_is_worse ? shift.lower > 0 : shift.upper < 0;
    result.relative = shift.shift == 0 ? 0.0 : (shift.shift > 0 ? HUGE_VAL : -HUGE_VAL);
    result.relative_bound = worse ? result.relative : 0.0;
    result.verdict = worse && result.p_value < alpha ? GateVerdict::Regression : GateVerdict::Pass;
    return;
  }
  result.relative = shift.shift / scale;
  result.relative_bound = (check.higher_is_worse ? shift.lower : shift.upper) / scale;
  // Noise: each run's spread about its own median, pooled, over BASE's median.
  std::vector<double> deviations;
  for (const double value : before) deviations.push_back(value - result.base_median);
  for (const double value : after) deviations.push_back(value - result.next_median);
  const double sigma = robust_sigma(deviations) / scale;
  const double pi_over_3 = std::acos(-1.0) / 3;
  const double standard_error =
      sigma * std::sqrt(pi_over_3 * (1 / static_cast<double>(before.size()) + 1 / static_cast<double>(after.size())));
  result.smallest_detectable = std::max(z_alpha * standard_error, check.threshold / 2) + z_power * standard_error;
  // Equal runs of n steps: SE(n) = sigma·√(2π/3n) must be at most what catches the threshold.
  const double largest_error = std::min(check.threshold / (z_alpha + z_power), check.threshold / 2 / z_power);
  if (sigma == 0) {
    result.steps_needed = steps_for_alpha(alpha);
  } else if (largest_error > 0) {
    result.steps_needed = std::max(steps_for_alpha(alpha),
                                   static_cast<std::size_t>(std::ceil(2 * pi_over_3 * (sigma / largest_error) * (sigma / largest_error))));
  }
  const double worse_change = check.higher_is_worse ? result.relative : -result.relative;
  result.verdict = result.p_value < alpha && worse_change >= check.threshold / 2 ? GateVerdict::Regression : GateVerdict::Pass;
}

/// A run's sample: the log of its median step value, each step's value over its speed where
/// `step_speeds` has them.
inline double run_log_median(const std::vector<double>& values, const std::vector<double>* step_speeds) {
  if (step_speeds == nullptr) return std::log(quantile(values, 0.5));
  std::vector<double> adjusted;
  for (std::size_t step = 0; step < values.size(); ++step) adjusted.push_back(values[step] / (*step_speeds)[step]);
  return std::log(quantile(std::move(adjusted), 0.5));
}

/// One check by runs: each run's log median (its steps over their speeds where `speeds` has them,
/// per run and per step).
inline void gate_by_runs(GateResult& result, const std::vector<std::vector<double>>& before, const std::vector<std::vector<double>>& after,
                         const std::vector<std::vector<double>>& base_speeds, const std::vector<std::vector<double>>& next_speeds,
                         const GateOptions& options) {
  const GateCheck& check = result.check;
  const double alpha = options.false_alarm_rate;
  result.runs_tested = true;
  result.speed_adjusted = !base_speeds.empty();
  std::vector<double> base_logs, next_logs;
  for (std::size_t run = 0; run < before.size(); ++run)
    base_logs.push_back(run_log_median(before[run], base_speeds.empty() ? nullptr : &base_speeds[run]));
  for (std::size_t run = 0; run < after.size(); ++run)
    next_logs.push_back(run_log_median(after[run], next_speeds.empty() ? nullptr : &next_speeds[run]));
  const RunTest test = run_t_test(base_logs, next_logs, check.higher_is_worse);
  result.p_value = test.p_value;
  result.run_spread = std::expm1(test.spread);
  result.relative = std::expm1(test.difference);
  const double t_alpha = student_upper_quantile(alpha, test.degrees);
  const double t_power = student_upper_quantile(1 - options.power, test.degrees);
  result.relative_bound = std::expm1(check.higher_is_worse ? test.difference - t_alpha * test.standard_error
                                                           : test.difference + t_alpha * test.standard_error);
  result.smallest_detectable =
      std::expm1(std::max(t_alpha * test.standard_error, std::log1p(check.threshold / 2)) + t_power * test.standard_error);
  result.runs_needed = runs_needed(spread_upper_bound(test.spread, test.degrees, options.power), check.threshold, alpha, options.power);
  const double worse_change = check.higher_is_worse ? test.difference : -test.difference;
  result.verdict = result.p_value < alpha && worse_change >= std::log1p(check.threshold / 2) ? GateVerdict::Regression : GateVerdict::Pass;
}

}  // namespace detail

/// The gate's verdict on NEW's runs (`next`) against BASE's (`base`), one run a side or several.
inline GateReport regression_gate(const std::vector<StepSamples>& base, const std::vector<StepSamples>& next, const GateOptions& options,
                                  const GatePeaks& peaks = {}) {
  GateReport report;
  report.options = options;
  report.base_runs = base.size();
  report.next_runs = next.size();
  const double alpha = options.false_alarm_rate;
  if (base.empty() || next.empty()) {
    report.not_comparable.push_back(fmt::format("{} has no run", base.empty() ? "BASE" : "NEW"));
    return report;
  }
  const auto run_name = [](std::string_view side, std::size_t run, std::size_t runs) {
    return runs == 1 ? std::string(side) : fmt::format("{} run {}", side, run + 1);
  };
  for (const auto& [runs, side] : {std::make_pair(&base, "BASE"), std::make_pair(&next, "NEW")}) {
    for (std::size_t run = 0; run < runs->size(); ++run) {
      const StepSamples& samples = (*runs)[run];
      if (samples.steps.empty()) report.not_comparable.push_back(fmt::format("{} has no step", run_name(side, run, runs->size())));
      if (samples.dropped_events + samples.dropped_gpu_records + samples.overflowed_names != 0)
        report.not_comparable.push_back(fmt::format("{} lost events while it recorded ({} dropped, {} GPU records dropped, {} names "
                                                    "over the table): its figures undercount",
                                                    run_name(side, run, runs->size()), samples.dropped_events, samples.dropped_gpu_records,
                                                    samples.overflowed_names));
    }
  }
  for (const StepSamples& run : base) report.base_steps += run.steps.size();
  for (const StepSamples& run : next) report.next_steps += run.steps.size();
  const StepSamples joined_base = concatenate_runs(base);
  const StepSamples joined_next = concatenate_runs(next);
  const auto base_kinds = detail::kernel_kinds(joined_base);
  const auto next_kinds = detail::kernel_kinds(joined_next);
  if (base_kinds != next_kinds)
    report.not_comparable.push_back(fmt::format("the kinds of kernels a step runs differ: BASE {}, NEW {}",
                                                detail::kernel_kinds_text(base_kinds), detail::kernel_kinds_text(next_kinds)));
  const bool by_runs = base.size() >= 2;
  const std::size_t n1 = report.base_steps;
  const std::size_t n2 = report.next_steps;
  if (!by_runs && n1 != 0 && n2 != 0 && detail::smallest_p(n1, n2) >= alpha)
    report.not_comparable.push_back(fmt::format("{} steps against {} cannot show a change at a false-alarm rate of {:g} %: "
                                                "record at least {} steps a run",
                                                n1, n2, 100 * alpha, detail::steps_for_alpha(alpha)));
  const bool any_empty = std::any_of(base.begin(), base.end(), [](const StepSamples& run) { return run.steps.empty(); }) ||
                         std::any_of(next.begin(), next.end(), [](const StepSamples& run) { return run.steps.empty(); });
  const bool times_step = std::any_of(options.checks.begin(), options.checks.end(),
                                      [](const GateCheck& check) { return check.figure == GateFigure::StepTime; });
  if (!by_runs) {
    report.speed.not_estimated = "one BASE run shows no speed of its own to judge NEW's by";
  } else if (!options.machine_speed) {
    report.speed.not_estimated = "asked not to (GateOptions::machine_speed, --no-machine-speed)";
  } else if (!times_step) {
    report.speed.not_estimated = "it serves the step_time check, which is not asked for";
  } else if (any_empty) {
    report.speed.not_estimated = "a run has no step";
  } else {
    report.speed = detail::machine_speed(base, next);
    if (report.speed.estimated) {
      std::vector<double> base_logs, next_logs;
      for (const double factor : report.speed.base_factors) base_logs.push_back(std::log(factor));
      for (const double factor : report.speed.next_factors) next_logs.push_back(std::log(factor));
      report.speed.factor = std::exp(detail::mean(next_logs) - detail::mean(base_logs));
      // Is NEW's speed one of BASE's? Tested against BASE's runs' spread alone: NEW's runs are
      // judged after their speed, so that speed must come from what the machine is seen to do.
      const double base_mean = detail::mean(base_logs);
      double squares = 0;
      for (const double value : base_logs) squares += (value - base_mean) * (value - base_mean);
      const double degrees = static_cast<double>(base_logs.size()) - 1;
      const double spread = std::sqrt(squares / degrees);
      const double error = spread * std::sqrt(1 / static_cast<double>(base_logs.size()) + 1 / static_cast<double>(next_logs.size()));
      const double difference = detail::mean(next_logs) - base_mean;
      report.speed.p_value = error > 0 ? detail::student_upper_tail(difference / error, degrees) : (difference > 0 ? 0.0 : 1.0);
      if (report.speed.p_value < alpha)
        report.not_comparable.push_back(fmt::format(
            "the same work ({} ops) ran {:.1f} % slower in NEW, beyond what BASE's {} runs' speeds show (p = {:.2g}): a slower "
            "machine, or a change that slows every op alike; --no-machine-speed judges the step time as it is",
            report.speed.keys, 100 * (report.speed.factor - 1), base.size(), report.speed.p_value));
    }
  }

  for (const GateCheck& check : options.checks) {
    GateResult& result = report.results.emplace_back();
    result.check = check;
    std::vector<std::vector<double>> before, after;
    const char* missing = nullptr;
    for (const StepSamples& run : base) {
      std::optional<std::vector<double>> values = detail::gate_values(run, check.figure, peaks.base_flops_per_second);
      if (!values) missing = "BASE";
      before.push_back(values ? std::move(*values) : std::vector<double>{});
    }
    for (const StepSamples& run : next) {
      std::optional<std::vector<double>> values = detail::gate_values(run, check.figure, peaks.next_flops_per_second);
      if (!values && !missing) missing = "NEW";
      after.push_back(values ? std::move(*values) : std::vector<double>{});
    }
    if (missing) {
      result.verdict = GateVerdict::NotComparable;
      result.reason = fmt::format("{} has no {} (it needs {})", missing, to_string(check.figure),
                                  check.figure == GateFigure::GpuBusy      ? "GPU work"
                                  : check.figure == GateFigure::Mfu        ? "FLOPs (with_flops) and a GPU whose peak is known"
                                  : check.figure == GateFigure::MemoryPeak ? "allocations (profile_memory)"
                                                                           : "steps");
      continue;
    }
    if (any_empty) {
      result.verdict = GateVerdict::NotComparable;
      result.reason = "a run has no step";
      continue;
    }
    std::vector<double> all_before, all_after;
    for (const auto& run : before) all_before.insert(all_before.end(), run.begin(), run.end());
    for (const auto& run : after) all_after.insert(all_after.end(), run.begin(), run.end());
    result.base_median = detail::quantile(all_before, 0.5);
    result.next_median = detail::quantile(all_after, 0.5);
    const auto positive = [](const std::vector<std::vector<double>>& runs) {
      return std::all_of(runs.begin(), runs.end(), [](const std::vector<double>& run) { return detail::quantile(run, 0.5) > 0; });
    };
    if (by_runs && positive(before) && positive(after)) {
      const bool adjusted = check.figure == GateFigure::StepTime && report.speed.estimated;
      detail::gate_by_runs(result, before, after, adjusted ? report.speed.base_step_factors : std::vector<std::vector<double>>{},
                           adjusted ? report.speed.next_step_factors : std::vector<std::vector<double>>{}, options);
    } else {
      // One BASE run, or a figure some run's median step does not have (no exposed communication):
      // the steps, as many runs as there are, tested as one sample a side.
      detail::gate_by_steps(result, all_before, all_after, options);
    }
  }
  return report;
}

/// The gate's verdict on one run a side.
inline GateReport regression_gate(const StepSamples& base, const StepSamples& next, const GateOptions& options, const GatePeaks& peaks = {}) {
  return regression_gate(std::vector<StepSamples>{base}, std::vector<StepSamples>{next}, options, peaks);
}

}  // namespace analysis
DLPROF_END_NAMESPACE
