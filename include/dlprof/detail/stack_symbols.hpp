// dlprof/detail/stack_symbols.hpp: the trace that a Profiler's key_averages() and export_stacks()
// read, with its call stacks' frames as functions and lines where the program links
// dlprof::symbolize (which defines DLPROF_HAS_SYMBOLIZE and StackSymbols<true>, in
// import/symbolize.hpp), and as the trace recorded them otherwise. Which one a file gets is a
// template argument, so that files built with and without the symboliser never share one
// definition.
#pragma once

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

#if defined(DLPROF_HAS_SYMBOLIZE) && DLPROF_HAS_SYMBOLIZE
#  define DLPROF_DETAIL_SYMBOLISE_STACKS true
#else
#  define DLPROF_DETAIL_SYMBOLISE_STACKS false
#endif

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// `of(trace, copy)`: `trace` itself, or, when its stacks have frames to symbolise, `copy` made
/// from it and symbolised.
template <bool Symbolise>
struct StackSymbols {
  static const Trace& of(const Trace& trace, Trace& /*copy*/) noexcept { return trace; }
};
template <>
struct StackSymbols<true>;

}  // namespace detail
DLPROF_END_NAMESPACE

#if DLPROF_DETAIL_SYMBOLISE_STACKS
#  include "dlprof/import/symbolize.hpp"
#endif
