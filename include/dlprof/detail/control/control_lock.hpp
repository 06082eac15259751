// dlprof/detail/control/control_lock.hpp: how a Profiler's start(), step() and stop() exclude one
// another across threads, and refuse to be called from a handler they are running.
#pragma once

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Holds `mutex` for one control call and records its thread in `controller`, so that a handler
/// the call runs on its own thread (which would otherwise deadlock or re-enter) is refused. A
/// call from the writer thread, where background handlers run, is refused too.
class ControlLock {
 public:
  ControlLock(std::mutex& mutex, std::atomic<std::thread::id>& controller, bool on_writer_thread, const char* method)
      : mutex_(mutex), controller_(controller) {
    if (controller.load(std::memory_order_acquire) == std::this_thread::get_id() || on_writer_thread)
      throw std::logic_error(fmt::format("dlprof::Profiler::{}(): called from an on_trace_ready handler; only stop() may be", method));
    mutex.lock();
    controller.store(std::this_thread::get_id(), std::memory_order_release);
  }
  ~ControlLock() {
    controller_.store(std::thread::id(), std::memory_order_release);
    mutex_.unlock();
  }
  ControlLock(const ControlLock&) = delete;
  ControlLock& operator=(const ControlLock&) = delete;

 private:
  std::mutex& mutex_;
  std::atomic<std::thread::id>& controller_;
};

}  // namespace detail
DLPROF_END_NAMESPACE
