// dlprof/detail/window/lifecycle.hpp: what dlprof does when the process forks or exits, and the writer
// thread whose work must outlive both.
//
// exit: a trace being built or written on a Profiler's writer thread is finished before the
// process ends (an atexit hook waits for every writer), as torch.profiler has the file on disk
// when step() returns. The ring registry and the intern table are never destroyed, so a global
// Profiler stopped by its destructor, or a writer finishing at exit, still finds them.
//
// fork: the child inherits the parent's memory but only the forking thread. Everything that
// another thread may hold locked (the intern table, the ring registry, the list of writers) is
// held by the forking thread across fork() and released on both sides, and the child then forgets
// the parent's rings, stops recording, and counts one more fork generation: a Profiler
// inherited from the parent sees the new generation and records nothing in the child, writes
// nothing, and never waits for the parent's writer thread, which does not exist there. A Profiler
// made in the child records the child's own trace.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/fork_generation.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/recording/name_table.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The Profiler that currently owns the recording flag; only one may be started at a time.
inline std::atomic<const void*> g_started_profiler{nullptr};

template <class Deferred = void>
class BackgroundWriter;

/// Every BackgroundWriter alive, for the exit hook. Never destroyed: the hook runs during exit.
struct LiveWriters {
  std::mutex mutex;
  std::vector<BackgroundWriter<>*> writers;

  static LiveWriters& instance() {
    static LiveWriters* live = new LiveWriters();
    return *live;
  }
};

/// Runs jobs (building traces, background handlers) in order on one thread. The queue is bounded:
/// when it is full the submitting thread waits, so a slow disk slows training instead of growing
/// memory. A template, as everything the Profiler alone uses (profiler.hpp).
template <class Deferred>
class BackgroundWriter {
 public:
  using Job = std::function<void()>;

  BackgroundWriter() : generation_(fork_generation()), thread_([this] { run(); }) {
    LiveWriters& live = LiveWriters::instance();
    const std::lock_guard<std::mutex> lock(live.mutex);
    live.writers.push_back(this);
  }

  /// Finishes the jobs queued, then ends the thread. Never called in a fork's child for a writer
  /// of the parent (see inherited()).
  ~BackgroundWriter() {
    {
      LiveWriters& live = LiveWriters::instance();
      const std::lock_guard<std::mutex> lock(live.mutex);
      live.writers.erase(std::remove(live.writers.begin(), live.writers.end(), this), live.writers.end());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// Queues `job`, which must not throw: it reports its own failures.
  void submit(Job job) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return jobs_.size() < kQueueCapacity; });
    jobs_.push_back(std::move(job));
    changed_.notify_all();
  }

  /// Returns when every submitted job has finished.
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return jobs_.empty() && !busy_; });
  }

  bool on_writer_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

  /// Whether this writer belongs to a parent process: in a fork's child its thread does not
  /// exist and its lock may be held forever, so the child must neither use nor destroy it.
  bool inherited() const noexcept { return generation_ != fork_generation(); }

 private:
  static constexpr std::size_t kQueueCapacity = 4;

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and everything submitted is done
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      changed_.notify_all();
      lock.unlock();
      job();
      lock.lock();
      busy_ = false;
      changed_.notify_all();
    }
  }

  const std::uint32_t generation_;
  std::mutex mutex_;  // guards jobs_, busy_ and stopping_
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything it reads is constructed
};

/// At exit: waits until every writer of this process has finished what it was given, so that a
/// trace whose window closed before exit() is on disk when the process ends.
template <class Deferred = void>
void finish_writes_at_exit() noexcept {
  LiveWriters& live = LiveWriters::instance();
  std::vector<BackgroundWriter<>*> writers;
  {
    const std::lock_guard<std::mutex> lock(live.mutex);
    writers = live.writers;
  }
  for (BackgroundWriter<>* writer : writers)
    if (!writer->inherited() && !writer->on_writer_thread()) {  // a handler calling exit() cannot wait for itself
      try {
        writer->wait_idle();
      } catch (...) {
      }
    }
}

template <class Deferred = void>
void prepare_fork() noexcept {
  LiveWriters::instance().mutex.lock();
  InternTable::instance().lock_for_fork();
  RingRegistry::instance().lock_for_fork();
}

template <class Deferred = void>
void after_fork_in_parent() noexcept {
  RingRegistry::instance().unlock_after_fork();
  InternTable::instance().unlock_after_fork();
  LiveWriters::instance().mutex.unlock();
}

template <class Deferred = void>
void after_fork_in_child() noexcept {
  g_active.fetch_and(~kWindowFlags, std::memory_order_relaxed);
  g_started_profiler.store(nullptr, std::memory_order_relaxed);
  g_fork_generation.fetch_add(1, std::memory_order_acq_rel);
  RingRegistry::instance().forget_all_in_child();
  RingRegistry::instance().unlock_after_fork();
  InternTable::instance().unlock_after_fork();
  LiveWriters::instance().writers.clear();  // the parent's, whose threads the child has not
  LiveWriters::instance().mutex.unlock();
  t_ring = nullptr;
  this_thread_ring_owner<>().ring.reset();
}

/// Installs the fork handlers and the exit hook, once per process.
template <class Deferred = void>
void install_lifecycle_hooks() {
  static const bool installed = [] {
    RingRegistry::instance();  // constructed before the hooks that use them
    InternTable::instance();
    LiveWriters::instance();
    ::pthread_atfork(prepare_fork<>, after_fork_in_parent<>, after_fork_in_child<>);
    std::atexit(finish_writes_at_exit<>);
    return true;
  }();
  (void)installed;
}

}  // namespace detail
DLPROF_END_NAMESPACE
