// dlprof/profiling_scope.hpp: a Profiler started for the life of a scope, as torch.profiler's
// `with profile(...) as prof:`. Included by profiler.hpp.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <fmt/core.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/out_of_memory.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/profiler.hpp"

DLPROF_BEGIN_NAMESPACE

/// Starts a Profiler on construction and stops it on destruction. A flight recorder left by an
/// exception dumps its steps first, saying so, and what was asked for where an allocator had just
/// reported that it could not allocate (LibTorch's out-of-memory error).
template <class Deferred = void>
class BasicProfilingScope {
 public:
  explicit BasicProfilingScope(BasicProfiler<Deferred>& profiler)
      : profiler_(profiler),
        uncaught_exceptions_(std::uncaught_exceptions()),
        out_of_memory_reports_(detail::g_out_of_memory_reports.count.load(std::memory_order_acquire)) {
    profiler_.start();
  }
  ~BasicProfilingScope() {
    try {
      if (std::uncaught_exceptions() > uncaught_exceptions_) profiler_.dump(exception_reason());
      profiler_.stop();
    } catch (...) {  // stop() reports handler failures itself; a destructor must not throw
    }
  }
  BasicProfilingScope(const BasicProfilingScope&) = delete;
  BasicProfilingScope& operator=(const BasicProfilingScope&) = delete;

 private:
  /// "out of memory: asked 2.00 GiB on CUDA:0" where an allocator reported that it could not
  /// allocate since the scope began (LibTorch's report, just before it throws).
  std::string exception_reason() const {
    if (detail::g_out_of_memory_reports.count.load(std::memory_order_acquire) == out_of_memory_reports_)
      return "an exception left the ProfilingScope";
    const auto [type, device] = detail::unpack_memory_device(detail::g_out_of_memory_reports.device.load(std::memory_order_relaxed));
    return fmt::format("out of memory: asked {} on {}; an exception left the ProfilingScope",
                       KeyAverages::format_bytes(detail::g_out_of_memory_reports.bytes.load(std::memory_order_relaxed)),
                       detail::device_label(type, device));
  }

  BasicProfiler<Deferred>& profiler_;
  int uncaught_exceptions_;
  std::uint64_t out_of_memory_reports_;
};

using ProfilingScope = BasicProfilingScope<>;

DLPROF_END_NAMESPACE
