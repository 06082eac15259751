// dlprof/analysis/steady_state.hpp: which steps of a window show the job's steady state, and which
// hold what happens once. The verdict (verdict.hpp) judges the steady steps and says which it
// leaves out and why; the GPU-utilization rule (recommendations.hpp) gives no batch-size advice
// for idle time that first calls explain.
//
// A step is flagged, for as many of these reasons as hold:
//   first calls   it holds a runtime or driver call of >= kMinFirstCallNs during which the GPU
//                 idles at least half the time (so it waits for no GPU work: a synchronize or copy
//                 call never counts), of a name whose long calls fall in one step, or in fewer
//                 than a quarter of the steps: CUDA's context creation (cudaFree(0),
//                 cudaDeviceGetStreamPriorityRange), lazy module loading in a first launch,
//                 cudaMalloc's first growth of the caching allocator;
//   outlier       it takes more than kOutlierRatio times the median step;
//   mid-flight    the window's first step, when GPU work that started in it before the trace's
//                 first call ended was launched before the window (no call of the trace has its
//                 correlation id): its host waits for work the trace does not show.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/host_syncs.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

inline constexpr std::int64_t kMinFirstCallNs = 10'000'000;
inline constexpr double kOutlierRatio = 1.3;

enum class StepFlag : std::uint8_t { FirstCalls, Outlier, MidFlight };

/// The JSON's name of a flag.
constexpr std::string_view id_of(StepFlag flag) noexcept {
  switch (flag) {
    case StepFlag::FirstCalls: return "first_calls";
    case StepFlag::Outlier: return "outlier";
    case StepFlag::MidFlight: return "mid_flight";
  }
  return "first_calls";
}

/// A call that happens once: what it is and how long it took.
struct FirstCall {
  std::string_view name;
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;
};

/// One step left out of the steady state, and why.
struct FlaggedStep {
  std::size_t index = 0;     ///< into StepBreakdown::steps
  std::int64_t number = -1;  ///< the ProfilerStep's number; -1 for a trace without steps
  StepFlag flag = StepFlag::FirstCalls;
  /// First calls: their summed time; outlier: the step's time; mid-flight: the GPU time of the
  /// work launched before the window.
  std::int64_t ns = 0;
  double ratio_to_median = 0;       ///< outlier: the step over the median step
  std::vector<FirstCall> calls;     ///< first calls: the longest first, at most kCallsKept
  static constexpr std::size_t kCallsKept = 3;
};

/// A GPU's busy share of the steady steps.
struct SteadyUtilization {
  std::uint32_t device = 0;
  double utilization = 0;  ///< [0, 1]: the union of its work's time over the steady steps' time
};

struct SteadyState {
  std::vector<FlaggedStep> flagged;  ///< by step, then flag
  std::vector<bool> steady;          ///< by StepBreakdown::steps index
  std::int64_t first_call_ns = 0;    ///< all first calls' time in the steps
  std::int64_t steady_ns = 0;        ///< the steady steps' time
  /// Per GPU with work, by device; empty without GPU work or without a steady step.
  std::vector<SteadyUtilization> utilization;

  std::size_t steady_steps() const noexcept {
    return static_cast<std::size_t>(std::count(steady.begin(), steady.end(), true));
  }
};

namespace detail {

/// The calls the GPU may make the host wait in; their length says nothing of a first call.
inline bool is_waiting_call(std::string_view name) noexcept {
  return is_synchronize_call(name) || is_copy_call(name) || name.find("Synchronize") != std::string_view::npos ||
         name.find("Query") != std::string_view::npos;
}

}  // namespace detail

inline SteadyState steady_state(const Trace& trace, const StepBreakdown& breakdown) {
  SteadyState out;
  const std::vector<StepTime>& steps = breakdown.steps;
  out.steady.assign(steps.size(), true);
  if (steps.empty()) return out;
  const auto step_of = [&](std::int64_t time) -> std::ptrdiff_t {
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (time >= steps[i].start_ns && time < steps[i].end_ns) return static_cast<std::ptrdiff_t>(i);
    return -1;
  };
  std::vector<detail::Interval> busy;  // any device's
  std::vector<std::pair<std::uint32_t, std::vector<detail::Interval>>> kernels_of_device;  // TensorBoard's utilization: kernels
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
    busy.push_back({work.start_ns, work.end_ns});
    if (work.kind != GpuEventKind::Kernel) continue;
    if (kernels_of_device.empty() || kernels_of_device.back().first != work.device) kernels_of_device.emplace_back(work.device, std::vector<detail::Interval>{});
    kernels_of_device.back().second.push_back({work.start_ns, work.end_ns});
  }
  detail::merge(busy);

  // Long calls that wait for no GPU work, and the steps each name's long calls fall in.
  struct LongCall {
    const ApiEvent* call;
    std::ptrdiff_t step;
  };
  std::vector<LongCall> long_calls;
  std::vector<std::int8_t> waiting_name(trace.names.size(), -1);
  for (const ApiEvent& call : trace.api_events) {
    if (call.duration_ns() < kMinFirstCallNs) continue;
    std::int8_t& waits = waiting_name[call.name];
    if (waits < 0) waits = detail::is_waiting_call(trace.names[call.name]) ? 1 : 0;
    if (waits == 1) continue;
    const std::int64_t gpu_busy = detail::intersection_length(busy, {{call.start_ns, call.end_ns}});
    if (2 * gpu_busy > call.duration_ns()) continue;
    const std::ptrdiff_t step = step_of(call.start_ns);
    if (step >= 0) long_calls.push_back({&call, step});
  }
  std::vector<std::pair<std::uint32_t, std::ptrdiff_t>> name_steps;  // (name, step), unique
  for (const LongCall& long_call : long_calls) name_steps.emplace_back(long_call.call->name, long_call.step);
  std::sort(name_steps.begin(), name_steps.end());
  name_steps.erase(std::unique(name_steps.begin(), name_steps.end()), name_steps.end());
  const auto is_one_off = [&](std::uint32_t name) {
    const auto [first, last] = std::equal_range(name_steps.begin(), name_steps.end(), std::make_pair(name, std::ptrdiff_t{-1}),
                                                [](const auto& a, const auto& b) { return a.first < b.first; });
    const auto in_steps = static_cast<std::size_t>(last - first);
    return in_steps <= 1 || 4 * in_steps < steps.size();
  };
  std::vector<FlaggedStep> first_calls(steps.size());
  for (const LongCall& long_call : long_calls) {
    if (!is_one_off(long_call.call->name)) continue;
    FlaggedStep& step = first_calls[static_cast<std::size_t>(long_call.step)];
    step.ns += long_call.call->duration_ns();
    step.calls.push_back({trace.names[long_call.call->name], long_call.call->start_ns, long_call.call->duration_ns()});
    out.first_call_ns += long_call.call->duration_ns();
  }

  // Work launched before the window, running in its first step before the trace's first call ends.
  std::int64_t before_window_ns = 0;
  if (!trace.api_events.empty()) {
    std::int64_t first_call_end = INT64_MAX;
    std::vector<std::uint32_t> correlations;
    for (const ApiEvent& call : trace.api_events) {
      first_call_end = std::min(first_call_end, call.end_ns);
      if (call.correlation != 0) correlations.push_back(call.correlation);
    }
    std::sort(correlations.begin(), correlations.end());
    for (const GpuEvent& work : trace.gpu_events) {
      if (work.correlation == 0 || work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
      if (work.start_ns < steps.front().start_ns || work.start_ns >= std::min(first_call_end, steps.front().end_ns)) continue;
      if (!std::binary_search(correlations.begin(), correlations.end(), work.correlation))
        before_window_ns += work.duration_ns();
    }
  }

  std::vector<std::int64_t> durations;
  for (const StepTime& step : steps) durations.push_back(step.duration_ns());
  std::nth_element(durations.begin(), durations.begin() + static_cast<std::ptrdiff_t>(durations.size() / 2), durations.end());
  double median = static_cast<double>(durations[durations.size() / 2]);
  if (durations.size() % 2 == 0)
    median = (median + static_cast<double>(*std::max_element(durations.begin(),
                                                             durations.begin() + static_cast<std::ptrdiff_t>(durations.size() / 2)))) / 2;

  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto flag = [&](FlaggedStep flagged) {
      flagged.index = i;
      flagged.number = steps[i].number;
      out.flagged.push_back(std::move(flagged));
      out.steady[i] = false;
    };
    if (!first_calls[i].calls.empty()) {
      FlaggedStep flagged = std::move(first_calls[i]);
      flagged.flag = StepFlag::FirstCalls;
      std::stable_sort(flagged.calls.begin(), flagged.calls.end(),
                       [](const FirstCall& a, const FirstCall& b) { return a.duration_ns > b.duration_ns; });
      if (flagged.calls.size() > FlaggedStep::kCallsKept) flagged.calls.resize(FlaggedStep::kCallsKept);
      flag(std::move(flagged));
    }
    if (steps.size() > 1 && static_cast<double>(steps[i].duration_ns()) > kOutlierRatio * median) {
      FlaggedStep flagged;
      flagged.flag = StepFlag::Outlier;
      flagged.ns = steps[i].duration_ns();
      flagged.ratio_to_median = static_cast<double>(steps[i].duration_ns()) / median;
      flag(std::move(flagged));
    }
    if (i == 0 && before_window_ns > 0) {
      FlaggedStep flagged;
      flagged.flag = StepFlag::MidFlight;
      flagged.ns = before_window_ns;
      flag(std::move(flagged));
    }
  }
  // The GPUs' busy share of the steady steps, as DeviceMetrics::utilization gives it over all.
  std::vector<detail::Interval> steady_spans;
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (out.steady[i]) steady_spans.push_back({steps[i].start_ns, steps[i].end_ns});
  detail::merge(steady_spans);
  out.steady_ns = detail::total_length(steady_spans);
  if (out.steady_ns > 0)
    for (auto& [device, kernels] : kernels_of_device) {  // GPU work is by device: one entry each
      detail::merge(kernels);
      out.utilization.push_back(
          {device, static_cast<double>(detail::intersection_length(kernels, steady_spans)) / static_cast<double>(out.steady_ns)});
    }
  return out;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
