// dlprof/analysis/launch_stats.hpp: what each kernel launch cost the CPU and how long its work
// waited to start, as Holistic Trace Analysis's get_cuda_kernel_launch_stats computes it
// (cuda_kernel_analysis.py):
//
// - Launch calls: cudaLaunchKernel, cudaLaunchKernelExC and MTIA's
//   "runFunction - job_prep_and_submit_for_execution", and with include_memory_events
//   cudaMemcpyAsync and cudaMemsetAsync (never the driver's cuLaunchKernel, as in HTA). Every CPU
//   call sharing a correlation id with one of them is joined to every piece of GPU work with a
//   stream that carries that id.
// - launch delay = max(0, work start − call start − call duration).
// - Outliers: calls longer than runtime_cutoff (50 µs); launch delays longer than
//   launch_delay_cutoff (100 µs); "short" work, which ran shorter than its call (≤ the cutoff)
//   took.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// One launch call joined to the work it launched.
struct KernelLaunch {
  std::uint32_t correlation = 0;
  std::string_view call;    ///< e.g. "cudaLaunchKernel"
  std::string_view work;    ///< the kernel, copy or fill
  std::int64_t cpu_duration_ns = 0;
  std::int64_t gpu_duration_ns = 0;
  std::int64_t launch_delay_ns = 0;
};

struct LaunchStats {
  std::vector<KernelLaunch> launches;  ///< in the order of the calls
  std::size_t runtime_outliers = 0;       ///< cpu_duration > runtime_cutoff
  std::size_t launch_delay_outliers = 0;  ///< launch_delay > launch_delay_cutoff
  std::size_t short_kernels = 0;          ///< gpu_duration < cpu_duration <= runtime_cutoff

  std::int64_t total_launch_delay_ns() const noexcept {
    std::int64_t total = 0;
    for (const KernelLaunch& launch : launches) total += launch.launch_delay_ns;
    return total;
  }
  double mean_launch_delay_ns() const noexcept { return mean([](const KernelLaunch& l) { return l.launch_delay_ns; }); }
  double mean_cpu_duration_ns() const noexcept { return mean([](const KernelLaunch& l) { return l.cpu_duration_ns; }); }
  std::int64_t max_launch_delay_ns() const noexcept {
    std::int64_t longest = 0;
    for (const KernelLaunch& launch : launches) longest = std::max(longest, launch.launch_delay_ns);
    return longest;
  }

  std::string table() const {
    return fmt::format(
        "Launches: {}  mean launch delay: {:.3f} us  max: {:.3f} us  mean launch call: {:.3f} us\n"
        "Runtime outliers: {}  launch-delay outliers: {}  work shorter than its launch call: {}\n",
        launches.size(), mean_launch_delay_ns() / 1e3, max_launch_delay_ns() / 1e3, mean_cpu_duration_ns() / 1e3,
        runtime_outliers, launch_delay_outliers, short_kernels);
  }

 private:
  template <class Field>
  double mean(Field field) const noexcept {
    if (launches.empty()) return 0.0;
    double total = 0;
    for (const KernelLaunch& launch : launches) total += static_cast<double>(field(launch));
    return total / static_cast<double>(launches.size());
  }
};

namespace detail {

/// MTIA's kernel launch, which HTA counts with CUDA's (cuda_kernel_analysis.py).
inline constexpr std::string_view kMtiaLaunchCall = "runFunction - job_prep_and_submit_for_execution";

inline bool is_launch_call(std::string_view name, bool include_memory_events) noexcept {
  if (name == "cudaLaunchKernel" || name == "cudaLaunchKernelExC" || name == kMtiaLaunchCall) return true;
  return include_memory_events && (name == "cudaMemcpyAsync" || name == "cudaMemsetAsync");
}

inline LaunchStats launch_stats(const Trace& trace, const HtaView& view, const AnalysisOptions& options) {
  std::vector<std::uint32_t> launch_correlations;
  for (const ApiCall& call : view.api)
    if (call.event->correlation != 0 && is_launch_call(trace.names[call.event->name], options.include_memory_events))
      launch_correlations.push_back(call.event->correlation);
  std::sort(launch_correlations.begin(), launch_correlations.end());
  const auto launched = [&](std::uint32_t correlation) {
    return correlation != 0 && std::binary_search(launch_correlations.begin(), launch_correlations.end(), correlation);
  };

  std::vector<std::pair<std::uint32_t, const GpuWork*>> work_by_correlation;
  for (const GpuWork& work : view.gpu)
    if (work.on_stream() && launched(work.event->correlation)) work_by_correlation.emplace_back(work.event->correlation, &work);
  dlprof::detail::stable_sort_runs(work_by_correlation.begin(), work_by_correlation.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  LaunchStats result;
  result.launches.reserve(work_by_correlation.size());
  for (const ApiCall& call : view.api) {
    const std::uint32_t correlation = call.event->correlation;
    if (!launched(correlation)) continue;
    auto work = std::lower_bound(work_by_correlation.begin(), work_by_correlation.end(), correlation,
                                 [](const auto& entry, std::uint32_t id) { return entry.first < id; });
    for (; work != work_by_correlation.end() && work->first == correlation; ++work) {
      KernelLaunch launch;
      launch.correlation = correlation;
      launch.call = trace.names[call.event->name];
      launch.work = trace.names[work->second->event->name];
      launch.cpu_duration_ns = call.duration_ns();
      launch.gpu_duration_ns = work->second->duration_ns();
      launch.launch_delay_ns = std::max<std::int64_t>(0, work->second->start_ns - call.start_ns - call.duration_ns());
      result.runtime_outliers += launch.cpu_duration_ns > options.runtime_cutoff_ns;
      result.launch_delay_outliers += launch.launch_delay_ns > options.launch_delay_cutoff_ns;
      result.short_kernels +=
          launch.cpu_duration_ns <= options.runtime_cutoff_ns && launch.gpu_duration_ns < launch.cpu_duration_ns;
      result.launches.push_back(launch);
    }
  }
  return result;
}

}  // namespace detail

/// The kernel launch statistics of one rank's trace.
inline LaunchStats launch_stats(const Trace& trace, const AnalysisOptions& options = {}) {
  return detail::launch_stats(trace, detail::hta_view(trace, options), options);
}

}  // namespace analysis
DLPROF_END_NAMESPACE
