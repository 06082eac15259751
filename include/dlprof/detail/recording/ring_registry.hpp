// dlprof/detail/recording/ring_registry.hpp: every thread's ring, and the slow path of
// recording (slow_path.hpp) that attaches them and interns names.
//
// Memory follows the live threads: when a thread ends, the events its ring still holds move to
// a ring just large enough for them, drained with the others at the window's end, and the ring
// itself waits, pre-faulted, for the next thread to start (a few are kept; the rest are freed).
#pragma once

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/alternate_signal_stack.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/slow_path.hpp"
#include "dlprof/detail/recording/stack_table.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline std::int64_t current_os_tid() noexcept { return static_cast<std::int64_t>(::syscall(SYS_gettid)); }

/// Every ring of the process. Its mutex is taken when a thread attaches its first ring, when the
/// collector drains, and when a thread is renamed: never on the recording path.
///
/// RingRegistry is BasicRingRegistry<>, and the slow path below is made of templates: the
/// Profiler alone installs and uses them, so only the file that runs one compiles them.
template <class Deferred = void>
class BasicRingRegistry {
 public:
  /// Constructed on first use and never destroyed: a Profiler that is a global, or still
  /// started at std::exit, drains the rings while static objects are being destroyed.
  static BasicRingRegistry& instance() {
    static BasicRingRegistry* registry = new BasicRingRegistry();
    return *registry;
  }

  /// A ring for a thread: one an ended thread left, or a new one.
  std::shared_ptr<ThreadRing> attach(std::int64_t os_tid, std::string thread_name, std::uint32_t thread_ordinal = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<ThreadRing> ring;
    if (!idle_.empty()) {
      ring = std::move(idle_.back());
      idle_.pop_back();
      ring->reuse(os_tid, std::move(thread_name), thread_ordinal);
    } else {
      if (placement_) ring = placement_->make_ring(capacity_, os_tid, thread_name, thread_ordinal);
      if (!ring) ring = std::make_shared<ThreadRing>(capacity_, os_tid, std::move(thread_name), thread_ordinal);
    }
    rings_.push_back(ring);
    return ring;
  }

  /// A thread ended: the events its ring holds move to a ring of their size, and the ring is kept
  /// for the next thread (up to kIdleRings, freed past that). A ring that can no longer take
  /// events (retired, superseded) stays until the collector has drained it.
  void release(const std::shared_ptr<ThreadRing>& ring) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto held = std::find(rings_.begin(), rings_.end(), ring);
    if (held == rings_.end()) return;  // forgotten: a fork's child, or already drained and retired
    // A ring in the flight log's file keeps its events there, until the log frees them.
    if (ring->retired() || ring->superseded() || ring->capacity() != capacity_ || ring->file_slot() != nullptr) {
      ring->mark_exited();
      return;
    }
    if (ring->pending() != 0 || ring->has_new_drops()) {
      *held = remainder_of(*ring);
    } else {
      rings_.erase(held);
    }
    if (idle_.size() < kIdleRings) idle_.push_back(ring);  // reserved: does not throw
  }

  /// Capacity of rings attached from now on. Rings of another capacity are retired so that
  /// every thread honours the new setting from its next event; call only between windows.
  void set_capacity(std::size_t events_per_thread) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t capacity = round_up_to_power_of_two(events_per_thread);
    if (capacity == capacity_) return;
    capacity_ = capacity;
    for (auto& ring : rings_) ring->retire();
    idle_.clear();
  }

  /// Places the rings attached from now on (null: on the heap), and retires every ring, so that
  /// each thread attaches one there from its next event. Call only between windows.
  void place_rings(std::shared_ptr<RingPlacement> placement) {
    std::lock_guard<std::mutex> lock(mutex_);
    placement_ = std::move(placement);
    for (auto& ring : rings_) ring->retire();
    idle_.clear();
  }

  /// Calls `visit(ring)` for each ring, then forgets rings that can receive nothing more
  /// (exited or retired) and are empty after the visit.
  template <class Visit>
  void drain_all(Visit&& visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& ring : rings_) visit(*ring);
    // In place: the flight recorder drains at every step, and allocates nothing doing so.
    rings_.erase(std::remove_if(rings_.begin(), rings_.end(),
                                [](const std::shared_ptr<ThreadRing>& ring) { return ring->exited() || ring->retired(); }),
                 rings_.end());
  }

  /// Calls `visit(ring)` for each ring, then forgets rings that can receive nothing more (exited
  /// or retired) and hold nothing: the flight recorder's step, which frees old steps in place.
  template <class Visit>
  void visit_all(Visit&& visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& ring : rings_) visit(*ring);
    rings_.erase(std::remove_if(rings_.begin(), rings_.end(),
                                [](const std::shared_ptr<ThreadRing>& ring) {
                                  return (ring->exited() || ring->retired()) && ring->pending() == 0 && !ring->has_new_drops();
                                }),
                 rings_.end());
  }

  /// Calls `visit(ring)` for each ring if the lock is free, and returns whether it was: a fatal
  /// signal's handler, which may not wait (the crashing thread may hold the lock itself).
  /// Meanwhile no thread attaches or releases a ring, and no ring is freed.
  template <class Visit>
  bool try_visit_all(Visit&& visit) noexcept {
    if (!mutex_.try_lock()) return false;
    for (auto& ring : rings_) visit(static_cast<const ThreadRing&>(*ring));
    mutex_.unlock();
    return true;
  }

  /// Calls `visit(ring)` for the ring of each live thread (not exited, not superseded).
  template <class Visit>
  void visit_live(Visit&& visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& ring : rings_)
      if (!ring->exited() && !ring->superseded()) visit(static_cast<const ThreadRing&>(*ring));
  }

  template <class Fn>
  auto with_lock(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    return fn();
  }

  std::size_t ring_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return rings_.size();
  }

  /// Event slots of every ring held, idle ones included: the memory the rings take, in events.
  std::size_t slots_held() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t slots = 0;
    for (const auto& ring : rings_) slots += ring->capacity();
    for (const auto& ring : idle_) slots += ring->capacity();
    return slots;
  }

  /// Rings of ended threads waiting for new ones.
  std::size_t idle_ring_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_.size();
  }

  /// Events lost because their thread had no ring and none could be allocated.
  void count_ringless_event() noexcept { ringless_events_.fetch_add(1, std::memory_order_relaxed); }
  /// Ringless events counted since the last call.
  std::uint64_t take_ringless_events() noexcept { return ringless_events_.exchange(0, std::memory_order_relaxed); }

  /// fork(): the forking thread holds the lock across the fork, so that the child's copy of the
  /// registry is consistent (pthread_atfork's prepare, parent and child handlers).
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }
  /// In a fork's child, after unlock_after_fork(): the rings are the parent's threads', holding
  /// the parent's events; they are forgotten (retired, so a thread of the child holding one
  /// attaches a fresh ring).
  void forget_all_in_child() noexcept {
    if (placement_) placement_->make_private_in_child();  // before the rings are written to
    for (auto& ring : rings_) ring->retire();
    rings_.clear();
    ringless_events_.store(0, std::memory_order_relaxed);
  }

 private:
  /// Under the lock: a ring holding only `source`'s undrained events and drops, for the window to
  /// drain after `source`'s thread has ended. Empties `source`.
  static std::shared_ptr<ThreadRing> remainder_of(ThreadRing& source) {
    const std::size_t pending = source.pending();
    auto remainder = std::make_shared<ThreadRing>(pending == 0 ? 1 : pending, source.os_tid_, source.thread_name_,
                                                  source.thread_ordinal_);
    source.drain([&](const Event* first, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i) remainder->push(first[i]);
    });
    remainder->dropped_.store(source.take_new_drops(), std::memory_order_relaxed);
    remainder->mark_exited();
    return remainder;
  }

  /// Rings kept for threads yet to start: enough for a burst of short-lived threads (data
  /// loader workers, a thread pool's churn) to find one each, little memory while none start.
  static constexpr std::size_t kIdleRings = 4;

  BasicRingRegistry() { idle_.reserve(kIdleRings); }
  std::mutex mutex_;
  std::vector<std::shared_ptr<ThreadRing>> rings_;
  std::vector<std::shared_ptr<ThreadRing>> idle_;
  std::shared_ptr<RingPlacement> placement_;
  std::size_t capacity_ = kDefaultEventsPerThread;
  std::atomic<std::uint64_t> ringless_events_{0};
};

using RingRegistry = BasicRingRegistry<>;

/// Keeps this thread's ring alive while the thread runs and hands it back when the thread ends,
/// so the collector still drains its last events; and the thread's alternate signal stack, so a
/// crash on an overflowed stack still leaves its crash file. Only touched on the attach path.
template <class Deferred = void>
struct RingOwner {
  std::shared_ptr<ThreadRing> ring;
  AlternateSignalStack signal_stack;
  ~RingOwner() {
    t_ring = nullptr;
    if (!ring) return;
    try {
      RingRegistry::instance().release(ring);
    } catch (...) {  // no memory for the remainder: the ring stays whole until it is drained
      ring->mark_exited();
    }
    ring.reset();
  }
};

/// This thread's RingOwner. A block-scope thread_local, whose destructor is registered when the
/// thread first passes its declaration: GCC reaches a constant-initialized thread_local at
/// namespace scope without running its file's thread-local initializer, and so never registers the
/// destructor of one that is first reached from another file (the thread's first range is in the
/// program's file, its ring attached in dlprof::runtime's).
template <class Deferred = void>
RingOwner<Deferred>& this_thread_ring_owner() noexcept {
  thread_local RingOwner<Deferred> owner;
  return owner;
}

/// Set once the fatal-signal handler that writes crash files is installed (a flight recorder
/// started): from then on each thread that attaches a ring gets an alternate signal stack. Other
/// modes install no such handler, and their threads pay nothing for one.
inline std::atomic<bool> g_threads_need_signal_stacks{false};

/// Gives the calling thread its alternate signal stack now (its ring may be attached already).
template <class Deferred = void>
void give_this_thread_a_signal_stack() noexcept {
  this_thread_ring_owner<Deferred>().signal_stack.install();
}

inline std::string native_thread_name() {
  char name[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return {};
  return name;
}

/// Slow path of the first event of a thread (or the first after its ring was retired).
template <class Deferred = void>
DLPROF_NOINLINE ThreadRing* attach_thread_ring() {
  RingOwner<Deferred>& owner = this_thread_ring_owner<Deferred>();
  std::string name = owner.ring                       ? owner.ring->thread_name()
                     : !t_pending_thread_name.empty() ? t_pending_thread_name
                                                      : native_thread_name();
  std::shared_ptr<ThreadRing> ring = RingRegistry::instance().attach(current_os_tid(), std::move(name), thread_ordinal());
  if (owner.ring) {
    ring->take_open_ranges_of(*owner.ring);
    owner.ring->mark_superseded();
  }
  owner.ring = std::move(ring);
  t_ring = owner.ring.get();
  if (g_threads_need_signal_stacks.load(std::memory_order_relaxed)) owner.signal_stack.install();
  return t_ring;
}

/// Names the calling thread's ring, or the ring it attaches next.
template <class Deferred = void>
void set_ring_thread_name(std::string_view name) {
  std::string copy(name);
  t_pending_thread_name = copy;
  if (ThreadRing* ring = t_ring) RingRegistry::instance().with_lock([&] { ring->set_thread_name(std::move(copy)); });
}

template <class Deferred = void>
NameId intern_in_table(std::string_view name, const char** text) {
  const std::string* stored = nullptr;
  const NameId id = InternTable::instance().intern_locked(name, &stored);
  *text = stored->c_str();
  return id;
}

template <class Deferred = void>
void count_ringless_event() noexcept {
  RingRegistry::instance().count_ringless_event();
}

template <class Deferred = void>
inline constexpr RecordingSlowPath kRecordingSlowPath{&attach_thread_ring<Deferred>, &count_ringless_event<Deferred>,
                                                      &intern_in_table<Deferred>, &set_ring_thread_name<Deferred>,
                                                      &capture_call_stack<Deferred>};

/// Makes the slow path reachable from ranges; the Profiler calls it before it raises kRecording.
template <class Deferred = void>
void install_recording_slow_path() noexcept {
  g_recording_slow_path.store(&kRecordingSlowPath<Deferred>, std::memory_order_release);
}

}  // namespace detail
DLPROF_END_NAMESPACE
