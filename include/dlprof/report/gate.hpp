// dlprof/report/gate.hpp: the regression gate's verdict (analysis/regression_gate.hpp) as
// `dlprof-report --baseline BASE --fail-if-slower 2% NEW` prints it, and as a JUnit XML file that
// CI systems show (one test case per check: a regression is a failure, runs that cannot be
// compared an error).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/regression_gate.hpp"
#include "dlprof/analysis/run_diff.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/report/diff.hpp"

DLPROF_BEGIN_NAMESPACE

/// The gate's verdict and, where the step time regressed, the keys that explain it.
struct GateOutcome {
  analysis::GateReport gate;
  analysis::RunDiff diff;  ///< the runs compared by key, for the keys responsible
  std::string base_title;
  std::string next_title;
};

namespace detail {

inline std::string gate_percent(double relative) {
  if (!std::isfinite(relative)) return relative > 0 ? "+inf %" : "-inf %";
  return fmt::format("{:+.2f} %", 100 * relative);
}

/// "step_time > +2 %": what the check fails on.
inline std::string gate_check_name(const analysis::GateCheck& check) {
  return fmt::format("{} {} {}{:g} %", analysis::to_string(check.figure), check.higher_is_worse ? ">" : "<",
                     check.higher_is_worse ? "+" : "-", 100 * check.threshold);
}

inline std::string gate_result_line(const analysis::GateResult& result, double alpha) {
  const std::string name = gate_check_name(result.check);
  if (result.verdict == analysis::GateVerdict::NotComparable) return fmt::format("{}: not comparable: {}", name, result.reason);
  std::string line = fmt::format("{}: {}: {} (at least {} at {:g} % confidence){}, {} p = {}", name,
                                 result.verdict == analysis::GateVerdict::Regression ? "REGRESSION" : "pass",
                                 gate_percent(result.relative), gate_percent(result.relative_bound), 100 * (1 - alpha),
                                 result.speed_adjusted ? " after the machine's speed" : "",
                                 result.runs_tested ? "one-sided t-test of the runs," : "one-sided Mann-Whitney",
                                 p_value_text(result.p_value));
  if (result.runs_tested) line += fmt::format("; runs differ by {:.2f} % (σ)", 100 * result.run_spread);
  if (result.smallest_detectable > 0)
    line += fmt::format("; the smallest change it catches 95 % of the time here: {:.2f} %", 100 * result.smallest_detectable);
  if (result.steps_needed > 0)
    line += fmt::format("; to catch {:g} % so, record {} steps a run", 100 * result.check.threshold, result.steps_needed);
  if (result.runs_tested)
    line += result.runs_needed > 0
                ? fmt::format("; to catch {:g} % so, compare {} runs a side", 100 * result.check.threshold, result.runs_needed)
                : fmt::format("; no {} runs a side catch {:g} % at this spread", analysis::detail::kMaxRunsNeeded,
                              100 * result.check.threshold);
  return line;
}

/// What the gate saw of the machine's speed, or why it could not judge by it.
inline std::string gate_speed_line(const analysis::GateReport& gate) {
  const analysis::MachineSpeed& speed = gate.speed;
  if (gate.base_runs < 2)
    return "One BASE run: the gate sees how steps vary, not how runs do; a machine that slows between two runs reads as a "
           "regression. Give --baseline two or more runs to judge by runs.";
  if (!speed.estimated) return fmt::format("The machine's speed is not judged: {}.", speed.not_estimated);
  std::vector<std::string> base, next;
  for (const double factor : speed.base_factors) base.push_back(fmt::format("{:.3f}", factor));
  for (const double factor : speed.next_factors) next.push_back(fmt::format("{:.3f}", factor));
  return fmt::format("The machine's speed, from {} ops that do the same work in every run (time a call, over BASE's): BASE runs "
                     "{}, NEW {}; NEW's work ran {} against BASE's (p = {:.2g} that BASE's speeds explain it).",
                     speed.keys, fmt::join(base, " "), fmt::join(next, " "), gate_percent(speed.factor - 1), speed.p_value);
}

}  // namespace detail

/// The verdict as terminal text: each check, then what explains a slower step.
inline std::string render_gate_text(const GateOutcome& outcome) {
  const analysis::GateReport& gate = outcome.gate;
  std::string out = detail::wrap(fmt::format("dlprof-report gate: NEW {} against BASE {}: {}", detail::terminal_text(outcome.next_title),
                                             detail::terminal_text(outcome.base_title), to_string(gate.verdict())),
                                 120, "  ") +
                    "\n";
  out += fmt::format("{} run{} ({} steps) against {} ({}); each check fails runs of one distribution at most {:g} % of the time\n",
                     gate.next_runs, gate.next_runs == 1 ? "" : "s", gate.next_steps, gate.base_runs, gate.base_steps,
                     100 * gate.options.false_alarm_rate);
  out += detail::wrap(detail::gate_speed_line(gate), 120, "  ") + "\n";
  for (const std::string& reason : gate.not_comparable) out += detail::wrap("Not comparable: " + reason, 120, "  ") + "\n";
  for (const analysis::GateResult& result : gate.results)
    out += detail::wrap(detail::gate_result_line(result, gate.options.false_alarm_rate), 120, "  ") + "\n";
  const bool slower = std::any_of(gate.results.begin(), gate.results.end(), [](const analysis::GateResult& result) {
    return result.verdict == analysis::GateVerdict::Regression && result.check.figure == analysis::GateFigure::StepTime;
  });
  if (slower) {
    if (outcome.diff.explaining.empty()) {
      out += "Responsible: no key changed beyond the steps' noise in the step time's direction.\n";
    } else {
      out += fmt::format("Responsible (by {}):\n", analysis::to_string(outcome.diff.key));
      for (const std::size_t i : outcome.diff.explaining)
        out += "  " + detail::wrap(detail::terminal_text(detail::explaining_line(outcome.diff, outcome.diff.changes[i])), 118, "    ") +
               "\n";
    }
  }
  return out;
}

/// The verdict as JUnit XML: a test suite of one test case per check.
inline std::string render_gate_junit(const GateOutcome& outcome) {
  const analysis::GateReport& gate = outcome.gate;
  const auto xml = [](std::string_view text) { return detail::html_escape(text); };
  std::size_t failures = 0, errors = 0;
  std::string cases;
  if (!gate.not_comparable.empty()) {
    std::string reasons;
    for (const std::string& reason : gate.not_comparable) (reasons += reasons.empty() ? "" : "; ") += reason;
    ++errors;
    cases += fmt::format("    <testcase classname=\"dlprof.gate\" name=\"comparable runs\">\n      <error message=\"not comparable: "
                         "{}\"/>\n    </testcase>\n",
                         xml(reasons));
  }
  for (const analysis::GateResult& result : gate.results) {
    cases += fmt::format("    <testcase classname=\"dlprof.gate\" name=\"{}\">\n", xml(detail::gate_check_name(result.check)));
    const std::string line = detail::gate_result_line(result, gate.options.false_alarm_rate);
    if (result.verdict == analysis::GateVerdict::Regression) {
      ++failures;
      std::string detail_text = line;
      if (result.check.figure == analysis::GateFigure::StepTime)
        for (const std::size_t i : outcome.diff.explaining)
          detail_text += "\n" + detail::explaining_line(outcome.diff, outcome.diff.changes[i]);
      cases += fmt::format("      <failure message=\"{}\">{}</failure>\n", xml(line), xml(detail_text));
    } else if (result.verdict == analysis::GateVerdict::NotComparable) {
      ++errors;
      cases += fmt::format("      <error message=\"{}\"/>\n", xml(line));
    } else {
      cases += fmt::format("      <system-out>{}</system-out>\n", xml(line));
    }
    cases += "    </testcase>\n";
  }
  const std::size_t tests = gate.results.size() + (gate.not_comparable.empty() ? 0 : 1);
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dlprof-report\" tests=\"{0}\" failures=\"{1}\" "
                     "errors=\"{2}\">\n  <testsuite name=\"dlprof regression gate: {3} against {4}\" tests=\"{0}\" failures=\"{1}\" "
                     "errors=\"{2}\" skipped=\"0\">\n{5}  </testsuite>\n</testsuites>\n",
                     tests, failures, errors, xml(outcome.next_title), xml(outcome.base_title), cases);
}

DLPROF_END_NAMESPACE
