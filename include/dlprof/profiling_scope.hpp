// dlprof/profiling_scope.hpp: a Profiler started for the life of a scope, as torch.profiler's
// `with profile(...) as prof:`. Included by profiler.hpp.
#pragma once

#include <exception>

#include "dlprof/config.hpp"
#include "dlprof/profiler.hpp"

DLPROF_BEGIN_NAMESPACE

/// Starts a Profiler on construction and stops it on destruction. A flight recorder left by an
/// exception dumps its steps first.
template <class Deferred = void>
class BasicProfilingScope {
 public:
  explicit BasicProfilingScope(BasicProfiler<Deferred>& profiler)
      : profiler_(profiler), uncaught_exceptions_(std::uncaught_exceptions()) {
    profiler_.start();
  }
  ~BasicProfilingScope() {
    try {
      if (std::uncaught_exceptions() > uncaught_exceptions_) profiler_.dump("an exception left the ProfilingScope");
      profiler_.stop();
    } catch (...) {  // stop() reports handler failures itself; a destructor must not throw
    }
  }
  BasicProfilingScope(const BasicProfilingScope&) = delete;
  BasicProfilingScope& operator=(const BasicProfilingScope&) = delete;

 private:
  BasicProfiler<Deferred>& profiler_;
  int uncaught_exceptions_;
};

using ProfilingScope = BasicProfilingScope<>;

DLPROF_END_NAMESPACE
