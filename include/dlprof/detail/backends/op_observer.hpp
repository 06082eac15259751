// dlprof/detail/backends/op_observer.hpp: what the Profiler knows of a framework's operator observer, with
// no framework header in sight. torch.hpp implements OpObserver with LibTorch's RecordFunction
// callbacks and registers itself here when a program includes it.
#pragma once

#include <atomic>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// What the observer is asked to record besides each op's name and times.
struct OpObserverOptions {
  bool record_shapes = false;
  bool with_flops = false;
  bool profile_memory = false;  ///< the framework's allocator events, reported on the calling thread and those it hands work to
};

/// Records every operator of a framework as an Op event on its thread. Installed when a window
/// is prepared (warm-up included) and removed when the schedule goes idle, so that idle steps
/// pay nothing; it records only while the recording flag is up. Called from the thread driving
/// the Profiler.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void enable(const OpObserverOptions& options) = 0;
  virtual void disable() = 0;
};

/// The observer of this program, registered by torch.hpp; null in a program without it.
using OpObserverAccessor = OpObserver& (*)();
inline std::atomic<OpObserverAccessor> g_op_observer{nullptr};

}  // namespace detail
DLPROF_END_NAMESPACE
