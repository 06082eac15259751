// dlprof/export/folded_stacks.hpp: a trace's call stacks written as a flame graph's input, in the
// folded format of flamegraph.pl, speedscope and Perfetto (analysis/call_stacks.hpp's
// folded_stacks()), as torch.profiler's export_stacks(path, metric) writes them, with the op or
// range itself as the leaf. Frames are symbolised first where the program links
// dlprof::symbolize.
//
//   prof.export_stacks("stacks.folded", dlprof::analysis::StackMetric::SelfGpuTime);
//   // flamegraph.pl stacks.folded > flame.svg
#pragma once

#include <stdexcept>
#include <string>

#include "dlprof/analysis/call_stacks.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/stack_symbols.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// Writes the folded call stacks of `trace`'s ops and ranges, weighted by `metric` (times in
/// microseconds, bytes as they are), to `path` (gzip when it ends in ".gz"), atomically as
/// save_chrome_trace() does. Throws std::invalid_argument when the trace has no call stacks
/// (recorded without with_stack), or no allocations to weigh them by (SelfBytesAllocated without
/// profile_memory), rather than write an empty file, and std::runtime_error naming the path when
/// it cannot write it.
template <bool Symbolise = DLPROF_DETAIL_SYMBOLISE_STACKS>
void export_stacks(const Trace& trace, const std::string& path,
                   analysis::StackMetric metric = analysis::StackMetric::SelfCpuTime) {
  if (trace.stacks.empty())
    throw std::invalid_argument("dlprof: export_stacks: the trace has no call stacks: record them with "
                                "ProfilerOptions::with_stack(true) or DLPROF_WITH_STACK=1");
  if (metric == analysis::StackMetric::SelfBytesAllocated && trace.memory_events.empty())
    throw std::invalid_argument("dlprof: export_stacks: the trace has no allocations to weigh its stacks by: record them "
                                "with ProfilerOptions::profile_memory(true) or DLPROF_PROFILE_MEMORY=1");
  Trace copy;
  const std::string folded = analysis::folded_stacks(detail::StackSymbols<Symbolise>::of(trace, copy), metric);
  detail::AtomicFile file(path, detail::ends_with(path, ".gz"), "call stacks");
  file.write(folded);
  file.commit();
}

namespace detail {
template <class Metric>
struct FoldedStacks;
/// What Profiler::export_stacks() writes.
template <>
struct FoldedStacks<analysis::StackMetric> {
  template <bool Symbolise>
  static void save(const Trace& trace, const std::string& path, analysis::StackMetric metric) {
    export_stacks<Symbolise>(trace, path, metric);
  }
};
}  // namespace detail

DLPROF_END_NAMESPACE
