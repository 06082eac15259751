// dlprof/analysis/verdict.hpp: the report's opening lines. What bounds the step (the group of
// TensorBoard's step roles that takes most of it), how long a step takes (median, and mean),
// how busy the GPUs are, and the actions that save the most time, from the ranked findings.
//
//   bound               the roles it sums
//   gpu_compute         Kernel
//   communication_wait  Communication (collectives with no kernel of computation alongside)
//   memory_copies       Memcpy, Memset
//   input               DataLoader
//   host                CPU Exec, Runtime, Other (the GPU idle while the CPU works)
//
// It judges the steady steps (steady_state.hpp): steps that hold first calls, outlier steps and
// a first step that starts mid-flight are left out, and listed, while any step is left; with none
// left it judges them all and says so.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/analysis/recommendations.hpp"
#include "dlprof/analysis/steady_state.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

enum class Bound : std::uint8_t { GpuCompute, CommunicationWait, MemoryCopies, Input, Host, NoSteps };
inline constexpr std::size_t kBoundCount = 5;  ///< the bounds a step can have (NoSteps aside)

/// The JSON's name of a bound.
constexpr std::string_view id_of(Bound bound) noexcept {
  switch (bound) {
    case Bound::GpuCompute: return "gpu_compute";
    case Bound::CommunicationWait: return "communication_wait";
    case Bound::MemoryCopies: return "memory_copies";
    case Bound::Input: return "input";
    case Bound::Host: return "host";
    case Bound::NoSteps: return "no_steps";
  }
  return "no_steps";
}

constexpr Bound bound_of(StepRole role) noexcept {
  switch (role) {
    case StepRole::Kernel: return Bound::GpuCompute;
    case StepRole::Communication: return Bound::CommunicationWait;
    case StepRole::Memcpy:
    case StepRole::Memset: return Bound::MemoryCopies;
    case StepRole::DataLoader: return Bound::Input;
    case StepRole::Runtime:
    case StepRole::CpuExec:
    case StepRole::Other: return Bound::Host;
  }
  return Bound::Host;
}

/// A step the verdict leaves out, and why.
struct LeftOutStep {
  std::int64_t rank = 0;
  FlaggedStep step;
};

/// One rank's steps as the verdict reads them.
struct RankSteps {
  std::int64_t rank = 0;
  const StepBreakdown* steps = nullptr;
  const SteadyState* steady = nullptr;  ///< null: every step is steady
};

struct Verdict {
  Bound bound = Bound::NoSteps;
  double bound_share = 0;      ///< the bound's roles, in % of the judged steps' time
  std::size_t steps = 0;       ///< the judged steps, over every rank
  /// The flagged steps of every rank (by rank, then step), left out of the figures above unless
  /// every step is flagged (all_flagged).
  std::vector<LeftOutStep> left_out;
  bool all_flagged = false;    ///< no steady step: the figures are of every step
  double median_step_ns = 0;
  double mean_step_ns = 0;
  std::optional<double> gpu_busy;  ///< the mean of the GPUs' utilization, [0, 1]; none without kernels
  /// The ranks' mean model FLOP utilization over their steps (roofline.hpp), [0, 1]; none without
  /// FLOP counts or known peaks. make_report() fills it in.
  std::optional<double> mfu;
  /// The first (at most kActions) findings that save time: the findings are ranked, so these are
  /// indices 0 to top_actions - 1 of them.
  std::size_t top_actions = 0;

  static constexpr std::size_t kActions = 3;

  /// Whether the mean step is worth showing beside the median: more than 5 % apart.
  bool mean_differs() const noexcept { return std::abs(mean_step_ns - median_step_ns) > 0.05 * median_step_ns; }
};

/// The verdict over the steps of every rank and the ranked findings of all of them.
inline Verdict verdict(const std::vector<RankSteps>& ranks, const std::vector<Recommendation>& findings) {
  Verdict out;
  std::size_t steady = 0;
  for (const RankSteps& rank : ranks) {
    steady += rank.steady != nullptr ? rank.steady->steady_steps() : rank.steps->steps.size();
    if (rank.steady != nullptr)
      for (const FlaggedStep& step : rank.steady->flagged) out.left_out.push_back({rank.rank, step});
  }
  out.all_flagged = steady == 0 && !out.left_out.empty();
  const bool judge_all = steady == 0;
  std::array<double, kBoundCount> bound_ns{};
  std::vector<std::int64_t> durations;
  double total_ns = 0, busy = 0;
  std::size_t devices = 0;
  for (const RankSteps& rank : ranks) {
    for (std::size_t i = 0; i < rank.steps->steps.size(); ++i) {
      if (!judge_all && rank.steady != nullptr && !rank.steady->steady[i]) continue;
      const StepTime& step = rank.steps->steps[i];
      durations.push_back(step.duration_ns());
      total_ns += static_cast<double>(step.duration_ns());
      for (std::size_t role = 0; role < kStepRoleCount; ++role)
        bound_ns[static_cast<std::size_t>(bound_of(static_cast<StepRole>(role)))] += static_cast<double>(step.role_ns[role]);
    }
    // The GPUs' busy share of the judged steps.
    if (!judge_all && rank.steady != nullptr && rank.steady->steady_steps() != rank.steps->steps.size()) {
      for (const SteadyUtilization& device : rank.steady->utilization) {
        busy += device.utilization;
        ++devices;
      }
      continue;
    }
    for (const DeviceMetrics& device : rank.steps->devices) {
      busy += device.utilization;
      ++devices;
    }
  }
  if (devices != 0) out.gpu_busy = busy / static_cast<double>(devices);
  while (out.top_actions < std::min(findings.size(), Verdict::kActions) && findings[out.top_actions].saves_time())
    ++out.top_actions;
  out.steps = durations.size();
  if (durations.empty() || total_ns <= 0) return out;
  out.mean_step_ns = total_ns / static_cast<double>(durations.size());
  out.median_step_ns = detail::median(std::move(durations));
  const auto largest = std::max_element(bound_ns.begin(), bound_ns.end());  // the first of equals
  out.bound = static_cast<Bound>(largest - bound_ns.begin());
  out.bound_share = 100.0 * *largest / total_ns;
  return out;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
