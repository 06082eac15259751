// dlprof/analysis/comm_comp_overlap.hpp: how much of one rank's communication ran while it
// computed, as Holistic Trace Analysis's get_comm_comp_overlap computes it
// (communication_analysis.py): the time where the union of COMMUNICATION kernels meets the union
// of COMPUTATION kernels (kernel_type.hpp), over the union of COMMUNICATION kernels. HTA's
// answer is NaN without communication; here `has_communication()` says so.
#pragma once

#include <cstdint>
#include <vector>

#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct CommCompOverlap {
  std::int64_t communication_ns = 0;  ///< union of COMMUNICATION kernels
  std::int64_t computation_ns = 0;    ///< union of COMPUTATION kernels
  std::int64_t overlap_ns = 0;        ///< time in both

  bool has_communication() const noexcept { return communication_ns != 0; }
  /// HTA's comp_comm_overlap_pctg; 0 without communication.
  double overlap_percent() const noexcept {
    return communication_ns == 0 ? 0.0 : 100.0 * static_cast<double>(overlap_ns) / static_cast<double>(communication_ns);
  }
};

namespace detail {

inline CommCompOverlap comm_comp_overlap(const Trace& trace, const HtaView& view) {
  KernelTypes types(trace, view);
  std::vector<Interval> communication;
  std::vector<Interval> computation;
  for (const GpuWork& work : view.gpu) {
    if (!work.on_stream()) continue;
    const KernelType type = types.of(*work.event);
    if (type == KernelType::Communication) communication.push_back({work.start_ns, work.end_ns});
    if (type == KernelType::Computation) computation.push_back({work.start_ns, work.end_ns});
  }
  merge(communication);
  merge(computation);
  CommCompOverlap result;
  result.communication_ns = total_length(communication);
  result.computation_ns = total_length(computation);
  sweep({&communication, &computation}, [&](std::int64_t status, std::int64_t duration) {
    if (status == 3) result.overlap_ns += duration;
  });
  return result;
}

}  // namespace detail

/// The communication–computation overlap of one rank's trace.
inline CommCompOverlap comm_comp_overlap(const Trace& trace, const AnalysisOptions& options = {}) {
  return detail::comm_comp_overlap(trace, detail::hta_view(trace, options));
}

}  // namespace analysis
DLPROF_END_NAMESPACE
