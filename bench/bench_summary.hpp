// bench/bench_summary.hpp: a console reporter that also keeps each benchmark's figure, so a
// benchmark program can print the ratios DESIGN.md's cost model asks for, computed from the same
// run it just printed.
//
// The figure kept for a benchmark is its median when it ran with repetitions, otherwise its only
// run. Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true.
#pragma once

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

namespace dlprof_bench {

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  SummaryReporter() : ConsoleReporter(::isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const bool only_run = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      if (median || only_run) kept_[run.run_name.str()] = run;
    }
  }

  /// Real time per iteration in ns of the benchmark named exactly `name` (as printed, without
  /// the _median suffix); empty if it did not run (filtered out, skipped, or failed).
  std::optional<double> real_ns(const std::string& name) const {
    const Run* run = find(name);
    if (run == nullptr) return std::nullopt;
    return run->GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run->time_unit) * 1e9;
  }

  /// CPU time per iteration in ns.
  std::optional<double> cpu_ns(const std::string& name) const {
    const Run* run = find(name);
    if (run == nullptr) return std::nullopt;
    return run->GetAdjustedCPUTime() / benchmark::GetTimeUnitMultiplier(run->time_unit) * 1e9;
  }

  /// A user counter (rates such as items_per_second are already per second).
  std::optional<double> counter(const std::string& name, const std::string& counter_name) const {
    const Run* run = find(name);
    if (run == nullptr) return std::nullopt;
    const auto found = run->counters.find(counter_name);
    if (found == run->counters.end()) return std::nullopt;
    return found->second.value;
  }

 private:
  const Run* find(const std::string& name) const {
    const auto found = kept_.find(name);
    return found == kept_.end() ? nullptr : &found->second;
  }

  std::map<std::string, Run> kept_;
};

/// One line of the ratio table: the value, and against a target whether it is met (lower is
/// better when `at_most`, higher otherwise). Without a target the value is shown for reference.
inline void print_ratio(const char* what, std::optional<double> value, std::optional<double> target = std::nullopt,
                        bool at_most = true) {
  std::cout.flush();
  const std::string shown = value ? fmt::format("{:.3g}", *value) : std::string("n/a");
  if (!target) {
    fmt::print("  {:<56} {:>10}\n", what, shown);
    return;
  }
  const char* verdict = !value ? "" : (at_most ? *value <= *target : *value >= *target) ? "met" : "MISSED";
  fmt::print("  {:<56} {:>10}   target {} {:<8} {}\n", what, shown, at_most ? "<=" : ">=", *target, verdict);
}

inline std::optional<double> ratio(std::optional<double> numerator, std::optional<double> denominator) {
  if (!numerator || !denominator || *denominator <= 0) return std::nullopt;
  return *numerator / *denominator;
}

/// The kernel's clock source, shown in the context block so a run documents its machine.
inline std::string current_clocksource() {
  std::ifstream file("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  if (!(file >> name)) return "unknown";
  return name;
}

}  // namespace dlprof_bench
