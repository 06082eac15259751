// dlprof/analysis/analysis.hpp: every analysis of a Trace, and HTA's five per-rank analyses in one
// call. Each header of dlprof/analysis/ is one analysis and compiles on its own:
//
//   key_averages.hpp (dlprof/)  per op and range: calls, self and total CPU time, self and total
//                               GPU time through External id (torch's key_averages; also what
//                               Profiler::key_averages() returns)
//   gpu_summary.hpp             nvprof's "GPU activities" and "API calls"
//   step_breakdown.hpp          TensorBoard's step-time breakdown and GPU summary
//   temporal_breakdown.hpp      HTA: idle / compute / non-compute
//   kernel_type_breakdown.hpp   HTA: time by kernel type, top kernels
//   idle_time_breakdown.hpp     HTA: host wait / kernel wait / other, per stream
//   comm_comp_overlap.hpp       HTA: communication overlapped by computation
//   launch_stats.hpp            HTA: launch call durations and launch delays
//   kernel_attribution.hpp      PyProf2: each kernel's step, layer, op, shapes, FLOPs
//   host_syncs.hpp              where the host waits for the GPU, and the line that asks
//   rank_comparison.hpp         ranks side by side, stragglers per step
//   tensor_cores.hpp, kernel_type.hpp   the name classifiers they use
// Conventions (times in ns, names as views into the Trace) are in options.hpp.
#pragma once

#include <string_view>

#include "dlprof/analysis/comm_comp_overlap.hpp"
#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/gpu_summary.hpp"
#include "dlprof/analysis/host_syncs.hpp"
#include "dlprof/analysis/idle_time_breakdown.hpp"
#include "dlprof/analysis/kernel_attribution.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/kernel_type_breakdown.hpp"
#include "dlprof/analysis/launch_stats.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/analysis/rank_comparison.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/analysis/temporal_breakdown.hpp"
#include "dlprof/analysis/tensor_cores.hpp"
#include "dlprof/analysis/thread_cpu.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// A deliberate departure from Holistic Trace Analysis 0.5.0, and why.
struct HtaDeviation {
  std::string_view what;
  std::string_view why;
};

/// Every way the HTA-style analyses depart from HTA's definitions; in all else they follow them
/// (with AnalysisOptions::hta_compat, one to one where a deviation does not say otherwise).
inline constexpr HtaDeviation kHtaDeviations[] = {
    {"CPU ops that name a GPU stream (torch.compile's triton_* launches) are not GPU work; with hta_compat they are",
     "HTA takes every event with a stream for GPU work (stream != -1), and so counts those ops' CPU time as GPU computation"},
    {"Context synchronisations are not GPU work",
     "Kineto writes their \"no stream\" as 4294967295, which HTA takes for a stream"},
    {"Work that starts before earlier work on its stream has ended is counted as overlap, not as a negative wait",
     "HTA subtracts the previous end from each start, which gives negative kernel-wait and idle times"},
    {"Streams of different GPUs are kept apart in the idle-time breakdown",
     "HTA groups them by stream number alone, which changes nothing for the one GPU per rank it expects"},
    {"The kernel-type breakdown's \"others\" row gives the statistics of the durations it gathers",
     "HTA's gives those of the per-kernel totals, unlike its other rows"},
};

/// CPU slices that name a GPU stream, which HTA counts as GPU work (detail::hta_view).
using CpuSlicesOnStreams = detail::CpuSlicesOnStreams;

/// HTA's per-rank analyses of one trace.
struct HtaAnalyses {
  TemporalBreakdown temporal;
  KernelTypeBreakdown kernel_types;
  IdleTimeBreakdown idle_time;
  CommCompOverlap overlap;
  LaunchStats launches;
  CpuSlicesOnStreams cpu_slices_on_streams;
};

/// All of HTA's per-rank analyses, selecting and rounding the trace's events once.
inline HtaAnalyses hta_analyses(const Trace& trace, const AnalysisOptions& options = {}) {
  const detail::HtaView view = detail::hta_view(trace, options);
  return {detail::temporal_breakdown(trace, view), detail::kernel_type_breakdown(trace, view, options),
          detail::idle_time_breakdown(view, options), detail::comm_comp_overlap(trace, view),
          detail::launch_stats(trace, view, options), view.cpu_slices_on_streams};
}

}  // namespace analysis
DLPROF_END_NAMESPACE
