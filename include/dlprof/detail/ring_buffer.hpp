// dlprof/detail/ring_buffer.hpp: one bounded single-producer ring of events per thread and the
// registry the collector drains them through.
//
// The producer (the thread itself) never blocks, locks, allocates or makes a system call after
// its ring exists: a full ring drops the new event and counts it. The consumer (the profiler,
// under the registry's lock) copies events out between the published head and its tail.
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
#include "dlprof/detail/event.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kDefaultEventsPerThread = std::size_t{1} << 16;

inline std::size_t round_up_to_power_of_two(std::size_t n) noexcept {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

inline std::int64_t current_os_tid() noexcept { return static_cast<std::int64_t>(::syscall(SYS_gettid)); }

/// A number for the calling thread that no other thread of the process ever gets (OS thread ids
/// are reused): the high half of the external correlation ids its ranges push.
inline thread_local std::uint32_t t_thread_ordinal = 0;
inline std::atomic<std::uint32_t> g_next_thread_ordinal{1};

inline std::uint32_t thread_ordinal() noexcept {
  if (DLPROF_UNLIKELY(t_thread_ordinal == 0))
    t_thread_ordinal = g_next_thread_ordinal.fetch_add(1, std::memory_order_relaxed);
  return t_thread_ordinal;
}

class ThreadRing {
 public:
  ThreadRing(std::size_t capacity, std::int64_t os_tid, std::string thread_name, std::uint32_t thread_ordinal = 0)
      : slots_(std::make_unique<Event[]>(round_up_to_power_of_two(capacity))),  // value-initialised: every page touched now
        capacity_(round_up_to_power_of_two(capacity)),
        mask_(capacity_ - 1),
        limit_(capacity_),
        os_tid_(os_tid),
        thread_ordinal_(thread_ordinal),
        thread_name_(std::move(thread_name)) {}

  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;

  enum class PushResult { Stored, Dropped, Retired };

  /// Producer side: stores the event, or counts it as dropped when the ring is full.
  ///
  /// The event is taken by value and the slow path never sees it: nothing takes its address, so
  /// the compiler keeps its fields in registers and stores them straight into the slot. (With
  /// `const Event&`, or an out-of-line slow path taking the event, it was first built on the
  /// stack on every push: 2 to 4 ns of a 20 ns recorded range, bench/RESULTS.md.)
  DLPROF_ALWAYS_INLINE PushResult push(Event event) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (DLPROF_UNLIKELY(head - tail_cache_ >= limit_.load(std::memory_order_relaxed))) {
      const PushResult room = make_room(head);
      if (room != PushResult::Stored) return room;
    }
    slots_[head & mask_] = event;
    head_.store(head + 1, std::memory_order_release);
    return PushResult::Stored;
  }

  /// Consumer side: how many events are published and not yet drained (more may follow).
  std::size_t pending() const noexcept {
    return static_cast<std::size_t>(head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_relaxed));
  }

  /// Consumer side: hands every published event to `sink(first, count)`, as the one or two
  /// spans of slots they lie in (the second where they wrap), in push order, and frees them.
  /// Spans rather than single events, so the consumer can copy them in bulk.
  template <class Sink>
  std::size_t drain(Sink&& sink) {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t head = head_.load(std::memory_order_acquire);
    const std::size_t count = static_cast<std::size_t>(head - tail);
    const std::size_t first = static_cast<std::size_t>(tail & mask_);
    const std::size_t before_wrap = count < capacity_ - first ? count : capacity_ - first;
    if (before_wrap != 0) sink(&slots_[first], before_wrap);
    if (count != before_wrap) sink(&slots_[0], count - before_wrap);
    tail_.store(head, std::memory_order_release);
    return count;
  }

  bool has_new_drops() const noexcept { return dropped_.load(std::memory_order_relaxed) != drops_reported_; }

  /// Drops counted so far that the consumer has not yet reported; resets the count it reports.
  std::uint64_t take_new_drops() noexcept {
    const std::uint64_t total = dropped_.load(std::memory_order_relaxed);
    const std::uint64_t fresh = total - drops_reported_;
    drops_reported_ = total;
    return fresh;
  }

  /// Slow path of push(): refreshes the consumer's position; Stored means slot `head` is free.
  DLPROF_NOINLINE PushResult make_room(std::uint64_t head) noexcept {
    if (retired()) return PushResult::Retired;
    tail_cache_ = tail_.load(std::memory_order_acquire);
    if (head - tail_cache_ >= capacity_) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return PushResult::Dropped;
    }
    return PushResult::Stored;
  }

  /// A range open on the ring's thread, recorded when it began: at the end of a window, ranges
  /// still open are saved clipped to the window's end (a loop-body range around the step() that
  /// ends the window, a range around stop()), so they are counted rather than lost.
  struct OpenRange {
    NameId name;
    std::int64_t start;
    Category category;
    std::uint32_t correlation_sequence;
  };
  /// Open ranges tracked per thread; deeper ones are counted as dropped if a window ends inside them.
  static constexpr std::uint32_t kTrackedOpenRanges = 32;

  /// Producer side: a recorded range began. The consumer reads the stack under a sequence lock
  /// (odd while an entry is written), so it never takes a half-written entry.
  DLPROF_ALWAYS_INLINE void open_range(const OpenRange& range) noexcept {
    const std::uint32_t depth = open_depth_.load(std::memory_order_relaxed);
    if (DLPROF_LIKELY(depth < kTrackedOpenRanges)) {
      // Release stores (plain stores on x86): a reader that sees any field of the new entry also
      // sees the odd sequence number stored before it, and retries.
      const std::uint32_t sequence = open_sequence_.load(std::memory_order_relaxed);
      open_sequence_.store(sequence + 1, std::memory_order_relaxed);
      TrackedRange& entry = open_[depth];
      entry.name.store(range.name, std::memory_order_release);
      entry.start.store(range.start, std::memory_order_release);
      entry.category.store(range.category, std::memory_order_release);
      entry.correlation_sequence.store(range.correlation_sequence, std::memory_order_release);
      open_sequence_.store(sequence + 2, std::memory_order_release);
    }
    open_depth_.store(depth + 1, std::memory_order_release);
  }

  /// Producer side: the innermost recorded range ended (before its event is pushed).
  DLPROF_ALWAYS_INLINE void close_range() noexcept {
    const std::uint32_t depth = open_depth_.load(std::memory_order_relaxed);
    if (DLPROF_LIKELY(depth != 0)) open_depth_.store(depth - 1, std::memory_order_release);
  }

  /// Consumer side: the ranges open now, outermost first, and how many more are open than are
  /// tracked. Retries while the producer writes an entry; after many tries, reports none.
  std::uint32_t open_ranges(std::vector<OpenRange>& out) const {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      out.clear();
      const std::uint32_t before = open_sequence_.load(std::memory_order_acquire);
      if (before % 2 != 0) continue;
      const std::uint32_t depth = open_depth_.load(std::memory_order_acquire);
      const std::uint32_t tracked = depth < kTrackedOpenRanges ? depth : kTrackedOpenRanges;
      // Acquire loads: the sequence number is read again after them.
      for (std::uint32_t i = 0; i < tracked; ++i) {
        const TrackedRange& entry = open_[i];
        out.push_back(OpenRange{entry.name.load(std::memory_order_acquire), entry.start.load(std::memory_order_acquire),
                                entry.category.load(std::memory_order_acquire),
                                entry.correlation_sequence.load(std::memory_order_acquire)});
      }
      if (open_sequence_.load(std::memory_order_relaxed) == before) return depth - tracked;
    }
    out.clear();
    return 0;
  }

  /// A ring replacing a retired one takes over its thread's open ranges, so that ranges opened
  /// on the old ring close on the new one.
  void take_open_ranges_of(const ThreadRing& old) {
    std::vector<OpenRange> open;
    const std::uint32_t untracked = old.open_ranges(open);
    for (const OpenRange& range : open) open_range(range);
    for (std::uint32_t i = 0; i < untracked; ++i) open_range(OpenRange{});
  }

  /// A retired ring accepts nothing more: its thread attaches a fresh one on its next push.
  void retire() noexcept { limit_.store(0, std::memory_order_relaxed); }
  bool retired() const noexcept { return limit_.load(std::memory_order_relaxed) == 0; }

  /// Registry side, under its lock: the ring of an ended thread starts over for `os_tid`'s.
  void reuse(std::int64_t os_tid, std::string thread_name, std::uint32_t thread_ordinal) {
    head_.store(0, std::memory_order_relaxed);
    tail_cache_ = 0;
    dropped_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    drops_reported_ = 0;
    open_depth_.store(0, std::memory_order_relaxed);
    exited_.store(false, std::memory_order_relaxed);
    superseded_.store(false, std::memory_order_relaxed);
    os_tid_ = os_tid;
    thread_ordinal_ = thread_ordinal;
    thread_name_ = std::move(thread_name);
  }

  /// Registry side, under its lock: a ring holding only `source`'s undrained events and drops, for
  /// the window to drain after `source`'s thread has ended. Empties `source`.
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

  /// Set once its thread has attached a newer ring: its open ranges are that ring's now.
  void mark_superseded() noexcept { superseded_.store(true, std::memory_order_release); }
  bool superseded() const noexcept { return superseded_.load(std::memory_order_acquire); }

  void mark_exited() noexcept { exited_.store(true, std::memory_order_release); }
  bool exited() const noexcept { return exited_.load(std::memory_order_acquire); }

  std::size_t capacity() const noexcept { return capacity_; }
  std::int64_t os_tid() const noexcept { return os_tid_; }
  std::uint32_t thread_ordinal() const noexcept { return thread_ordinal_; }
  /// Thread name; guarded by the registry's mutex.
  const std::string& thread_name() const noexcept { return thread_name_; }
  void set_thread_name(std::string name) { thread_name_ = std::move(name); }

 private:
  // Producer-owned line: written on every push.
  alignas(kCacheLine) std::atomic<std::uint64_t> head_{0};
  std::uint64_t tail_cache_ = 0;
  std::atomic<std::uint64_t> dropped_{0};
  // Read by the producer on every push but written only to retire the ring.
  std::unique_ptr<Event[]> slots_;
  std::size_t capacity_;
  std::size_t mask_;
  std::atomic<std::size_t> limit_;
  // The thread's open ranges: written by the producer as ranges begin and end.
  struct TrackedRange {
    std::atomic<NameId> name{0};
    std::atomic<std::int64_t> start{0};
    std::atomic<Category> category{Category::User};
    std::atomic<std::uint32_t> correlation_sequence{0};
  };
  alignas(kCacheLine) std::atomic<std::uint32_t> open_depth_{0};
  std::atomic<std::uint32_t> open_sequence_{0};
  TrackedRange open_[kTrackedOpenRanges];
  // Consumer-owned line.
  alignas(kCacheLine) std::atomic<std::uint64_t> tail_{0};
  std::uint64_t drops_reported_ = 0;
  std::atomic<bool> exited_{false};
  std::atomic<bool> superseded_{false};
  std::int64_t os_tid_;
  std::uint32_t thread_ordinal_;
  std::string thread_name_;
};

/// Every ring of the process. Its mutex is taken when a thread attaches its first ring, when the
/// collector drains, and when a thread is renamed: never on the recording path.
class RingRegistry {
 public:
  /// Constructed on first use and never destroyed: a Profiler that is a global, or still
  /// started at std::exit, drains the rings while static objects are being destroyed.
  static RingRegistry& instance() {
    static RingRegistry* registry = new RingRegistry();
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
      ring = std::make_shared<ThreadRing>(capacity_, os_tid, std::move(thread_name), thread_ordinal);
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
    if (ring->retired() || ring->superseded() || ring->capacity() != capacity_) {
      ring->mark_exited();
      return;
    }
    if (ring->pending() != 0 || ring->has_new_drops()) {
      *held = ThreadRing::remainder_of(*ring);
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

  /// Calls `visit(ring)` for each ring, then forgets rings that can receive nothing more
  /// (exited or retired) and are empty after the visit.
  template <class Visit>
  void drain_all(Visit&& visit) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& ring : rings_) visit(*ring);
    std::vector<std::shared_ptr<ThreadRing>> kept;
    kept.reserve(rings_.size());
    for (auto& ring : rings_)
      if (!(ring->exited() || ring->retired())) kept.push_back(std::move(ring));
    rings_ = std::move(kept);
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
    for (auto& ring : rings_) ring->retire();
    rings_.clear();
    ringless_events_.store(0, std::memory_order_relaxed);
  }

 private:
  /// Rings kept for threads yet to start: enough for a burst of short-lived threads (data
  /// loader workers, a thread pool's churn) to find one each, little memory while none start.
  static constexpr std::size_t kIdleRings = 4;

  RingRegistry() { idle_.reserve(kIdleRings); }
  std::mutex mutex_;
  std::vector<std::shared_ptr<ThreadRing>> rings_;
  std::vector<std::shared_ptr<ThreadRing>> idle_;
  std::size_t capacity_ = kDefaultEventsPerThread;
  std::atomic<std::uint64_t> ringless_events_{0};
};

/// This thread's ring. Constant-initialised, so reading it is one %fs-relative load with no
/// TLS-init call.
inline thread_local ThreadRing* t_ring = nullptr;

/// Keeps this thread's ring alive while the thread runs and hands it back when the thread ends,
/// so the collector still drains its last events. Only touched on the attach path.
struct RingOwner {
  std::shared_ptr<ThreadRing> ring;
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
inline thread_local RingOwner t_ring_owner;

/// Name given with dlprof::set_thread_name before the thread's ring existed.
inline thread_local std::string t_pending_thread_name;

inline std::string native_thread_name() {
  char name[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return {};
  return name;
}

/// Slow path of the first event of a thread (or the first after its ring was retired).
DLPROF_NOINLINE inline ThreadRing* attach_thread_ring() {
  std::string name = t_ring_owner.ring             ? t_ring_owner.ring->thread_name()
                     : !t_pending_thread_name.empty() ? t_pending_thread_name
                                                      : native_thread_name();
  std::shared_ptr<ThreadRing> ring = RingRegistry::instance().attach(current_os_tid(), std::move(name), thread_ordinal());
  if (t_ring_owner.ring) {
    ring->take_open_ranges_of(*t_ring_owner.ring);
    t_ring_owner.ring->mark_superseded();
  }
  t_ring_owner.ring = std::move(ring);
  t_ring = t_ring_owner.ring.get();
  return t_ring;
}

/// This thread's ring, attached first if it has none (or a retired one): a range calls it before
/// it reads its start time, so that setting up a ring is never inside a measured range. Null
/// when no ring can be allocated.
DLPROF_ALWAYS_INLINE ThreadRing* current_ring() noexcept {
  ThreadRing* ring = t_ring;
  if (DLPROF_LIKELY(ring != nullptr) && DLPROF_LIKELY(!ring->retired())) return ring;
  try {
    return attach_thread_ring();
  } catch (...) {  // no memory for a ring: the events of this thread are counted as dropped
    return nullptr;
  }
}

/// Writes one event to this thread's ring; a full ring counts the event as dropped.
DLPROF_ALWAYS_INLINE void push_event(Event event) noexcept {  // by value: see ThreadRing::push
  ThreadRing* ring = t_ring;
  if (DLPROF_LIKELY(ring != nullptr) && DLPROF_LIKELY(ring->push(event) != ThreadRing::PushResult::Retired)) return;
  try {
    attach_thread_ring()->push(event);
  } catch (...) {  // no memory for a new ring: the event is lost and counted, the thread keeps running
    RingRegistry::instance().count_ringless_event();
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
