// The dlprof::runtime library: the Profiler's runtime compiled once for a whole program, so that a
// file that includes <dlprof/profiler.hpp> parses only its declarations (config.hpp,
// DLPROF_RUNTIME_LIBRARY).
#include "dlprof/detail/profiler_runtime.hpp"

DLPROF_BEGIN_NAMESPACE

template class BasicProfiler<void>;
template TraceHandler tensorboard_trace_handler<void>(std::string dir, std::string worker, bool gzip);

DLPROF_END_NAMESPACE
