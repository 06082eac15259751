// dlprof/analysis/options.hpp: what the HTA-style analyses take besides the trace, with Holistic
// Trace Analysis 0.5.0's defaults.
//
// Conventions of every analysis in dlprof/analysis/:
// - They are pure functions of a `dlprof::Trace` (dlprof's own, or torch.profiler's read by
//   dlprof/import/chrome_trace.hpp) and return plain structs; nothing is printed.
// - Times are int64 nanoseconds, as in the Trace; percentages are doubles in [0, 100], ratios in
//   [0, 1]. HTA reports µs: divide by 1000.
// - Names in results are views into the Trace's strings: keep the Trace alive while using them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// Which events the HTA-style analyses see, and HTA's parameters.
///
/// By default they see every event up to the end of the last ProfilerStep, in exact
/// nanoseconds: HTA 0.5.0 loaded with `include_last_profiler_step=True` and
/// `HTA_DISABLE_NS_ROUNDING=1`. `hta_compat` applies HTA's own defaults instead, so that numbers
/// compare with HTA one to one.
struct AnalysisOptions {
  /// HTA's conventions: when the trace names two or more ProfilerSteps, drop the CPU events that
  /// start at or after the last step's start and the GPU work they launched; round every start
  /// up and every end down to whole µs (HTA does so for traces with fractional µs).
  bool hta_compat = false;

  /// Kernel-type breakdown: the most kernels listed per type (the rest are "others") ...
  std::size_t num_kernels = 10;
  /// ... and the share of a type's time, by cumulated kernel time, they may cover.
  double duration_ratio = 0.8;
  /// Kernel-type breakdown and its overlap shares include MEMORY (copies and fills).
  bool include_memory_kernels = true;

  /// Idle-time breakdown: a gap between two kernels on a stream shorter than this, with the
  /// second launched before the first ended, is "kernel wait" (HTA's consecutive_kernel_delay,
  /// 30 µs).
  std::int64_t consecutive_kernel_delay_ns = 30'000;

  /// Launch statistics: a launch call longer than this is a runtime outlier (50 µs) ...
  std::int64_t runtime_cutoff_ns = 50'000;
  /// ... and work that starts this long after its launch call returned is a launch-delay
  /// outlier (100 µs).
  std::int64_t launch_delay_cutoff_ns = 100'000;
  /// Launch statistics count cudaMemcpyAsync and cudaMemsetAsync with the kernel launches.
  bool include_memory_events = true;
};

}  // namespace analysis
DLPROF_END_NAMESPACE
