// dlprof/detail/control/watcher.hpp: a Profiler's own thread, which looks at the job every 200 ms
// and whenever it is woken. What it looks for is the Profiler's (profiler.hpp): a timed capture
// that is due and a program without steps (on demand), a step that hangs (the flight recorder).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A class template, as everything the Profiler alone uses (profiler.hpp).
template <class Deferred = void>
class BasicWatcher {
 public:
  static constexpr std::chrono::milliseconds kPeriod{200};

  BasicWatcher() = default;
  ~BasicWatcher() { stop(); }

  BasicWatcher(const BasicWatcher&) = delete;
  BasicWatcher& operator=(const BasicWatcher&) = delete;

  /// Starts the thread, which runs `look` every kPeriod and when woken, unless it runs already.
  void start(std::function<void()> look) {
    if (thread_) return;
    look_ = std::move(look);
    thread_ = std::make_unique<std::thread>([this] { run(); });
  }

  /// Has the thread look now. Any thread may call it, whether or not the watcher runs.
  void wake() noexcept { wake_.notify_all(); }

  /// Ends the thread once its look in progress is done.
  void stop() {
    if (!thread_) return;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_->join();
    thread_.reset();
  }

  /// In a fork's child: the parent's thread does not exist there and the lock may be held for
  /// good, so the thread is neither stopped nor joined.
  void abandon_in_child() noexcept { static_cast<void>(thread_.release()); }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, kPeriod);
      if (stopping_) return;
      lock.unlock();
      look_();
      lock.lock();
    }
  }

  std::function<void()> look_;
  std::mutex mutex_;  // guards stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::unique_ptr<std::thread> thread_;
};

using Watcher = BasicWatcher<>;

}  // namespace detail
DLPROF_END_NAMESPACE
