// dlprof/analysis/temporal_breakdown.hpp: how one rank's GPU spent the profiled time, as Holistic
// Trace Analysis's get_temporal_breakdown reports it (hta/analyzers/breakdown_analysis.py):
//
//   kernel time   last end − first start of the GPU's work (kernels, copies, fills, and the
//                 syncs with a stream: HTA's `stream != -1`)
//   idle          kernel time − the union of that work
//   compute       the union of COMPUTATION kernels (kernel_type.hpp)
//   non-compute   kernel time − compute − idle: communication, copies, fills, syncs
//
// Two deviations (kHtaDeviations in analysis.hpp):
// - Kineto writes a context synchronisation's "no stream" as 4294967295, which HTA takes for a
//   stream, so it counts Context Sync spans as GPU time; the reader reads "no stream" as -1 (as
//   dlprof writes it, and as HTA then reads it), and they are left out here. On the A100
//   reference trace that moves the shares by less than 0.02 points.
// - CPU slices that name a stream (torch.compile's triton_* launch ops carry args.stream) are GPU
//   work to HTA, which counts their CPU time as computation; here they are only with hta_compat
//   (detail::hta_view).
//
//   auto temporal = dlprof::analysis::temporal_breakdown(trace, {/*hta_compat=*/true});
//   fmt::print("{}", temporal.table());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct TemporalBreakdown {
  std::int64_t idle_ns = 0;
  std::int64_t compute_ns = 0;
  std::int64_t non_compute_ns = 0;
  std::int64_t kernel_time_ns = 0;  ///< 0 when the trace has no GPU work

  double idle_percent() const noexcept { return percent_of(idle_ns); }
  double compute_percent() const noexcept { return percent_of(compute_ns); }
  double non_compute_percent() const noexcept { return percent_of(non_compute_ns); }

  /// The three shares in µs and %, as HTA prints them.
  std::string table() const {
    return fmt::format(
        "{:<12} {:>14} {:>8}\n{:<12} {:>14.3f} {:>7.2f}%\n{:<12} {:>14.3f} {:>7.2f}%\n{:<12} {:>14.3f} {:>7.2f}%\n"
        "{:<12} {:>14.3f}\n",
        "GPU time", "us", "%", "idle", idle_ns / 1e3, idle_percent(), "compute", compute_ns / 1e3, compute_percent(),
        "non-compute", non_compute_ns / 1e3, non_compute_percent(), "total", kernel_time_ns / 1e3);
  }

 private:
  double percent_of(std::int64_t ns) const noexcept {
    return kernel_time_ns == 0 ? 0.0 : 100.0 * static_cast<double>(ns) / static_cast<double>(kernel_time_ns);
  }
};

namespace detail {

inline TemporalBreakdown temporal_breakdown(const Trace& trace, const HtaView& view) {
  KernelTypes types(trace, view);
  std::vector<Interval> busy;
  std::vector<Interval> computing;
  for (const GpuWork& work : view.gpu) {
    if (!work.on_stream()) continue;
    busy.push_back({work.start_ns, work.end_ns});
    if (types.of(*work.event) == KernelType::Computation) computing.push_back({work.start_ns, work.end_ns});
  }
  TemporalBreakdown result;
  if (busy.empty()) return result;
  merge(busy);
  merge(computing);
  result.kernel_time_ns = busy.back().end - busy.front().start;
  result.idle_ns = result.kernel_time_ns - total_length(busy);
  result.compute_ns = total_length(computing);
  result.non_compute_ns = result.kernel_time_ns - result.compute_ns - result.idle_ns;
  return result;
}

}  // namespace detail

/// The temporal breakdown of one rank's trace.
inline TemporalBreakdown temporal_breakdown(const Trace& trace, const AnalysisOptions& options = {}) {
  return detail::temporal_breakdown(trace, detail::hta_view(trace, options));
}

}  // namespace analysis
DLPROF_END_NAMESPACE
