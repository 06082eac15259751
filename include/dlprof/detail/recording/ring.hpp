// dlprof/detail/recording/ring.hpp: the bounded single-producer ring of events each thread
// records into, and the two calls a range makes on it.
//
// The producer (the thread itself) never blocks, locks, allocates or makes a system call after
// its ring exists: a full ring drops the new event and counts it. The consumer (the profiler,
// under the registry's lock, ring_registry.hpp) copies events out between the published head and
// its tail.
#pragma once

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/slow_path.hpp"
#include "dlprof/format/flight_log_file.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kDefaultEventsPerThread = std::size_t{1} << 16;

inline std::size_t round_up_to_power_of_two(std::size_t n) noexcept {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/// A number for the calling thread that no other thread of the process ever gets (OS thread ids
/// are reused): the high half of the external correlation ids its ranges push.
inline thread_local std::uint32_t t_thread_ordinal = 0;
inline std::atomic<std::uint32_t> g_next_thread_ordinal{1};

inline std::uint32_t thread_ordinal() noexcept {
  if (DLPROF_UNLIKELY(t_thread_ordinal == 0))
    t_thread_ordinal = g_next_thread_ordinal.fetch_add(1, std::memory_order_relaxed);
  return t_thread_ordinal;
}

template <class Deferred>
class BasicRingRegistry;

class ThreadRing {
 public:
  ThreadRing(std::size_t capacity, std::int64_t os_tid, std::string thread_name, std::uint32_t thread_ordinal = 0)
      : slots_(new Event[round_up_to_power_of_two(capacity)]()),  // value-initialised: every page touched now
        capacity_(round_up_to_power_of_two(capacity)),
        mask_(capacity_ - 1),
        limit_(capacity_),
        os_tid_(os_tid),
        thread_ordinal_(thread_ordinal),
        thread_name_(std::move(thread_name)) {}

  /// A ring whose events and counters live in a flight log file's slot (flight_log_file.hpp):
  /// the object itself is placed in the slot, `slots` (zeroed, `capacity` a power of two) after
  /// it. The slot learns where the counters are and, as they change, the thread's identity.
  ThreadRing(FlightLogSlot& file_slot, Event* slots, std::size_t capacity, std::int64_t os_tid, std::string thread_name,
             std::uint32_t thread_ordinal)
      : slots_(slots),
        capacity_(capacity),
        mask_(capacity_ - 1),
        limit_(capacity_),
        os_tid_(os_tid),
        thread_ordinal_(thread_ordinal),
        thread_name_(std::move(thread_name)),
        file_slot_(&file_slot) {
    const auto offset = [&](const void* field) {
      return static_cast<std::uint64_t>(static_cast<const char*>(field) - reinterpret_cast<const char*>(&file_slot));
    };
    const auto within_entry = [&](const void* field) {
      return static_cast<std::uint64_t>(static_cast<const char*>(field) - reinterpret_cast<const char*>(&open_[0]));
    };
    file_slot.capacity = capacity_;
    file_slot.events_offset = offset(slots_);
    file_slot.head_offset = offset(&head_);
    file_slot.tail_offset = offset(&tail_);
    file_slot.open_depth_offset = offset(&open_depth_);
    file_slot.open_entries_offset = offset(&open_[0]);
    file_slot.open_entry_bytes = sizeof(TrackedRange);
    file_slot.open_name_offset = within_entry(&open_[0].name);
    file_slot.open_start_offset = within_entry(&open_[0].start);
    file_slot.open_category_offset = within_entry(&open_[0].category);
    file_slot.open_arguments_offset = within_entry(&open_[0].argument_words);
    file_slot.open_argument_types_offset = within_entry(&open_[0].argument_types);
    file_slot.open_entries = kTrackedOpenRanges;
    mirror_thread();
  }

  ~ThreadRing() {
    if (file_slot_ == nullptr) delete[] slots_;
  }

  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;

  enum class PushResult { Stored, Dropped, Retired };

  /// Producer side: stores the event, or counts it as dropped when the ring is full.
  ///
  /// The event is taken by value and the slow path never sees it: nothing takes its address, so
  /// the compiler keeps its fields in registers and stores them straight into the slot. Taken
  /// by `const Event&`, or handed to an out-of-line slow path, the event would be built on the
  /// stack first on every push, a tenth or more of a recorded range's cost.
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

  /// Producer side: stores a formatted range's Range record after the FormatArguments record
  /// that keeps its arguments, both or neither (counted as one dropped): apart they mean
  /// nothing. Field by field: built as two Events first, the records would go through the stack.
  DLPROF_ALWAYS_INLINE PushResult push_formatted_range(NameId name, std::int64_t start, std::int64_t end, Category category,
                                                       std::uint32_t correlation_sequence,
                                                       const FormatArguments& arguments) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (DLPROF_UNLIKELY(head + 1 - tail_cache_ >= limit_.load(std::memory_order_relaxed))) {
      const PushResult room = make_room(head + 1);  // slot head + 1 free: slot head is too
      if (room != PushResult::Stored) return room;
    }
    Event& kept = slots_[head & mask_];
    kept.name = static_cast<NameId>(arguments.words[0]);
    kept.start = start;
    kept.end = static_cast<std::int64_t>(arguments.words[1]);
    kept.kind = RecordKind::FormatArguments;
    kept.category = Category::User;
    kept.correlation_sequence = arguments.types;
    Event& range = slots_[(head + 1) & mask_];
    range.name = name;
    range.start = start;
    range.end = end;
    range.kind = RecordKind::Range;
    range.category = category;
    range.correlation_sequence = correlation_sequence;
    head_.store(head + 2, std::memory_order_release);
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
    const std::uint64_t head = head_.load(std::memory_order_acquire);
    const std::size_t count = visit(tail_.load(std::memory_order_relaxed), head, sink);
    tail_.store(head, std::memory_order_release);
    return count;
  }

  /// Reads every published event without freeing any, as drain() hands them: the flight
  /// recorder's crash handler, on the ring's own thread, which a signal interrupted.
  template <class Sink>
  void peek(Sink&& sink) const noexcept {
    visit(tail_.load(std::memory_order_relaxed), head_.load(std::memory_order_acquire), sink);
  }

  bool has_new_drops() const noexcept { return dropped_.load(std::memory_order_relaxed) != drops_reported_; }

  /// Consumer side: hands the events published since the last call (and not yet freed) to
  /// `sink(first, count)`, as drain() does, without freeing them: the flight log's file writes the
  /// names they use.
  template <class Sink>
  void scan_new_events(Sink&& sink) {
    const std::uint64_t head = head_.load(std::memory_order_acquire);
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    visit(scanned_ > tail ? scanned_ : tail, head, sink);
    scanned_ = head;
  }

  /// Consumer side: the flight recorder's log (flight_log.hpp) is the ring itself. It marks where
  /// each step begins, and frees the steps it no longer keeps without copying them. The last
  /// kStepMarks marks are kept; an older step is freed with the oldest marked one.
  static constexpr std::uint32_t kStepMarks = 64;

  /// Consumer side: step `step` begins here (after every event published now).
  void mark_step(std::int64_t step) noexcept {
    if (marks_count_ == kStepMarks) {
      marks_first_ = (marks_first_ + 1) % kStepMarks;
      --marks_count_;
    }
    marks_[(marks_first_ + marks_count_) % kStepMarks] = StepMark{step, head_.load(std::memory_order_acquire)};
    ++marks_count_;
  }

  /// Consumer side: forgets every mark (a new flight log, whose steps may be numbered anew).
  void clear_step_marks() noexcept { marks_count_ = 0; }

  /// Consumer side: the oldest step marked, whose events (and those pushed before it) the ring
  /// may still hold; INT64_MAX when none is.
  std::int64_t oldest_marked_step() const noexcept { return marks_count_ != 0 ? marks_[marks_first_].step : INT64_MAX; }

  /// Consumer side: frees the events pushed before the newest marked step at or before `step`
  /// began, and forgets the marks before it. Returns how many events were freed.
  std::uint64_t free_before_step(std::int64_t step) noexcept {
    std::uint64_t position = 0;
    bool found = false;
    while (marks_count_ != 0 && marks_[marks_first_].step <= step) {
      position = marks_[marks_first_].position;
      found = true;
      if (marks_count_ == 1 || marks_[(marks_first_ + 1) % kStepMarks].step > step) break;
      marks_first_ = (marks_first_ + 1) % kStepMarks;
      --marks_count_;
    }
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (!found || position <= tail) return 0;
    tail_.store(position, std::memory_order_release);
    return position - tail;
  }

  /// Consumer side: the most events one marked step holds, from one mark to the next.
  std::uint64_t largest_marked_step() const noexcept {
    std::uint64_t largest = 0;
    for (std::uint32_t i = 1; i < marks_count_; ++i) {
      const std::uint64_t events =
          marks_[(marks_first_ + i) % kStepMarks].position - marks_[(marks_first_ + i - 1) % kStepMarks].position;
      if (events > largest) largest = events;
    }
    return largest;
  }

  /// Consumer side: frees the oldest marked step (and what was pushed before it), unless it is
  /// the only one marked. Returns how many events were freed.
  std::uint64_t free_oldest_marked_step() noexcept {
    if (marks_count_ < 2) return 0;
    return free_before_step(marks_[(marks_first_ + 1) % kStepMarks].step);
  }

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
  using OpenRange = detail::OpenRange;
  /// Open ranges tracked per thread; deeper ones are counted as dropped if a window ends inside them.
  static constexpr std::uint32_t kTrackedOpenRanges = 32;

  /// What open_ranges() fills without allocating: a signal handler's, or the ring's own.
  struct TrackedOpenRanges {
    OpenRange ranges[kTrackedOpenRanges];
    std::uint32_t size = 0;
    void clear() noexcept { size = 0; }
    void push_back(const OpenRange& range) noexcept {
      if (size < kTrackedOpenRanges) ranges[size++] = range;
    }
  };

  /// Producer side: a recorded range began, with call stack `stack` (0: none). The consumer reads
  /// the stack of open ranges under a sequence lock (odd while an entry is written), so it never
  /// takes a half-written entry. The arguments of a formatted range (is_format_site_id(name)) are
  /// stored only when `with_arguments` is set; the consumer reads them only for such a name.
  DLPROF_ALWAYS_INLINE void open_range(NameId name, std::int64_t start, Category category, std::uint32_t correlation_sequence,
                                       std::uint32_t stack, const FormatArguments* with_arguments = nullptr) noexcept {
    const std::uint32_t depth = open_depth_.load(std::memory_order_relaxed);
    if (DLPROF_LIKELY(depth < kTrackedOpenRanges)) {
      // Release stores (plain stores on x86): a reader that sees any field of the new entry also
      // sees the odd sequence number stored before it, and retries.
      const std::uint32_t sequence = open_sequence_.load(std::memory_order_relaxed);
      open_sequence_.store(sequence + 1, std::memory_order_relaxed);
      TrackedRange& entry = open_[depth];
      entry.name.store(name, std::memory_order_release);
      entry.start.store(start, std::memory_order_release);
      entry.category.store(category, std::memory_order_release);
      entry.correlation_sequence.store(correlation_sequence, std::memory_order_release);
      entry.stack.store(stack, std::memory_order_release);
      if (with_arguments != nullptr) {
        entry.argument_words[0].store(with_arguments->words[0], std::memory_order_release);
        entry.argument_words[1].store(with_arguments->words[1], std::memory_order_release);
        entry.argument_types.store(with_arguments->types, std::memory_order_release);
      }
      open_sequence_.store(sequence + 2, std::memory_order_release);
    }
    open_depth_.store(depth + 1, std::memory_order_release);
  }

  /// Producer side: the innermost recorded range ended (before its event is pushed).
  DLPROF_ALWAYS_INLINE void close_range() noexcept {
    const std::uint32_t depth = open_depth_.load(std::memory_order_relaxed);
    if (DLPROF_LIKELY(depth != 0)) open_depth_.store(depth - 1, std::memory_order_release);
  }

  /// Consumer side: the ranges open now, outermost first (into `out`, a container of OpenRange),
  /// and how many more are open than are tracked. Retries while the producer writes an entry;
  /// after many tries, reports none.
  template <class OpenRanges>
  std::uint32_t open_ranges(OpenRanges& out) const {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      out.clear();
      const std::uint32_t before = open_sequence_.load(std::memory_order_acquire);
      if (before % 2 != 0) continue;
      const std::uint32_t depth = open_depth_.load(std::memory_order_acquire);
      const std::uint32_t tracked = depth < kTrackedOpenRanges ? depth : kTrackedOpenRanges;
      // Acquire loads: the sequence number is read again after them.
      for (std::uint32_t i = 0; i < tracked; ++i) {
        const TrackedRange& entry = open_[i];
        const NameId name = entry.name.load(std::memory_order_acquire);
        FormatArguments arguments{{0, 0}, 0};
        if (is_format_site_id(name))
          arguments = FormatArguments{{entry.argument_words[0].load(std::memory_order_acquire),
                                       entry.argument_words[1].load(std::memory_order_acquire)},
                                      entry.argument_types.load(std::memory_order_acquire)};
        out.push_back(OpenRange{name, entry.stack.load(std::memory_order_acquire), entry.start.load(std::memory_order_acquire),
                                entry.category.load(std::memory_order_acquire),
                                entry.correlation_sequence.load(std::memory_order_acquire), arguments});
      }
      if (open_sequence_.load(std::memory_order_relaxed) == before) return depth - tracked;
    }
    out.clear();
    return 0;
  }

  /// Producer side: the collective call now in progress on this thread (ScopedCollective), named
  /// after it ("gloo:all_reduce"), or none (`name` 0). A hang's description reads it: the call's
  /// op and range may be recorded only when it ends.
  void set_collective_in_progress(NameId name, std::int64_t start) noexcept {
    collective_start_.store(start, std::memory_order_relaxed);
    collective_name_.store(name, std::memory_order_release);
  }
  /// Consumer side: the collective in progress (name 0: none) and when it began.
  std::pair<NameId, std::int64_t> collective_in_progress() const noexcept {
    const NameId name = collective_name_.load(std::memory_order_acquire);
    return {name, collective_start_.load(std::memory_order_relaxed)};
  }

  /// A ring replacing a retired one takes over its thread's open ranges, so that ranges opened
  /// on the old ring close on the new one.
  void take_open_ranges_of(const ThreadRing& old) noexcept {
    TrackedOpenRanges open;
    const std::uint32_t untracked = old.open_ranges(open);
    for (std::uint32_t i = 0; i < open.size; ++i) {
      const OpenRange& range = open.ranges[i];
      open_range(range.name, range.start, range.category, range.correlation_sequence, range.stack, &range.arguments);
    }
    for (std::uint32_t i = 0; i < untracked; ++i) open_range(0, 0, Category::User, 0, 0);
    const auto [collective, since] = old.collective_in_progress();
    set_collective_in_progress(collective, since);
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
    marks_count_ = 0;
    scanned_ = 0;
    collective_name_.store(0, std::memory_order_relaxed);
    exited_.store(false, std::memory_order_relaxed);
    superseded_.store(false, std::memory_order_relaxed);
    os_tid_ = os_tid;
    thread_ordinal_ = thread_ordinal;
    thread_name_ = std::move(thread_name);
    mirror_thread();
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
  void set_thread_name(std::string name) {
    thread_name_ = std::move(name);
    mirror_thread();
  }
  /// The flight log file's slot the ring lives in, or null for a ring on the heap.
  FlightLogSlot* file_slot() const noexcept { return file_slot_; }

 private:
  template <class>
  friend class BasicRingRegistry;  // moves an ended thread's events to a ring of their size

  /// Hands the events between `tail` and `head` to `sink(first, count)`: one span, or two where
  /// they wrap. Returns how many.
  /// Copies the thread's identity into the file's slot, for a reader after the process is gone.
  void mirror_thread() noexcept {
    if (file_slot_ == nullptr) return;
    FlightThread& thread = file_slot_->thread;
    thread.os_tid = os_tid_;
    thread.ordinal = thread_ordinal_;
    const std::size_t length = thread_name_.size() < sizeof(thread.name) ? thread_name_.size() : sizeof(thread.name) - 1;
    std::memcpy(thread.name, thread_name_.data(), length);
    std::memset(thread.name + length, 0, sizeof(thread.name) - length);
  }

  template <class Sink>
  std::size_t visit(std::uint64_t tail, std::uint64_t head, Sink& sink) const {
    const std::size_t count = static_cast<std::size_t>(head - tail);
    const std::size_t first = static_cast<std::size_t>(tail & mask_);
    const std::size_t before_wrap = count < capacity_ - first ? count : capacity_ - first;
    if (before_wrap != 0) sink(&slots_[first], before_wrap);
    if (count != before_wrap) sink(&slots_[0], count - before_wrap);
    return count;
  }

  // Producer-owned line: written on every push.
  alignas(kCacheLine) std::atomic<std::uint64_t> head_{0};
  std::uint64_t tail_cache_ = 0;
  std::atomic<std::uint64_t> dropped_{0};
  // Read by the producer on every push but written only to retire the ring.
  Event* const slots_;  // owned
  std::size_t capacity_;
  std::size_t mask_;
  std::atomic<std::size_t> limit_;
  // The thread's open ranges: written by the producer as ranges begin and end.
  struct TrackedRange {
    std::atomic<NameId> name{0};
    std::atomic<std::int64_t> start{0};
    std::atomic<Category> category{Category::User};
    std::atomic<std::uint32_t> correlation_sequence{0};
    std::atomic<std::uint32_t> stack{0};
    std::atomic<std::uint64_t> argument_words[2] = {};
    std::atomic<std::uint32_t> argument_types{0};
  };
  alignas(kCacheLine) std::atomic<std::uint32_t> open_depth_{0};
  std::atomic<std::uint32_t> open_sequence_{0};
  TrackedRange open_[kTrackedOpenRanges];
  std::atomic<NameId> collective_name_{0};
  std::atomic<std::int64_t> collective_start_{0};
  // Consumer-owned line.
  alignas(kCacheLine) std::atomic<std::uint64_t> tail_{0};
  std::uint64_t drops_reported_ = 0;
  struct StepMark {
    std::int64_t step;
    std::uint64_t position;
  };
  StepMark marks_[kStepMarks] = {};
  std::uint32_t marks_first_ = 0;
  std::uint32_t marks_count_ = 0;
  std::uint64_t scanned_ = 0;  // events scan_new_events() has handed out
  std::atomic<bool> exited_{false};
  std::atomic<bool> superseded_{false};
  std::int64_t os_tid_;
  std::uint32_t thread_ordinal_;
  std::string thread_name_;
  FlightLogSlot* const file_slot_ = nullptr;
};

/// Where the ring registry places the rings of threads that start recording, instead of the heap:
/// the flight log's file (detail/window/flight_log_file.hpp).
class RingPlacement {
 public:
  /// A ring of `capacity` events for a thread, or null where it has no room: the heap's then.
  virtual std::shared_ptr<ThreadRing> make_ring(std::size_t capacity, std::int64_t os_tid, std::string thread_name,
                                                std::uint32_t thread_ordinal) = 0;
  /// In a fork's child, before the child writes to a ring: the placement keeps the child's
  /// writes from the parent's rings.
  virtual void make_private_in_child() noexcept = 0;

 protected:
  ~RingPlacement() = default;
};

/// This thread's ring. Constant-initialised, so reading it is one %fs-relative load with no
/// TLS-init call.
inline thread_local ThreadRing* t_ring = nullptr;

/// Name given with dlprof::set_thread_name, for the thread's next ring.
inline thread_local std::string t_pending_thread_name;

/// This thread's ring, attached first if it has none (or a retired one): a range calls it before
/// it reads its start time, so that setting up a ring is never inside a measured range. Null
/// when no ring can be allocated.
DLPROF_ALWAYS_INLINE ThreadRing* current_ring() noexcept {
  ThreadRing* ring = t_ring;
  if (DLPROF_LIKELY(ring != nullptr) && DLPROF_LIKELY(!ring->retired())) return ring;
  const RecordingSlowPath* slow_path = recording_slow_path();
  if (slow_path == nullptr) return nullptr;
  try {
    return slow_path->attach_thread_ring();
  } catch (...) {  // no memory for a ring: the events of this thread are counted as dropped
    return nullptr;
  }
}

/// Writes one event to this thread's ring; a full ring counts the event as dropped.
DLPROF_ALWAYS_INLINE void push_event(Event event) noexcept {  // by value: see ThreadRing::push
  ThreadRing* ring = t_ring;
  if (DLPROF_LIKELY(ring != nullptr) && DLPROF_LIKELY(ring->push(event) != ThreadRing::PushResult::Retired)) return;
  const RecordingSlowPath* slow_path = recording_slow_path();
  if (slow_path == nullptr) return;
  try {
    slow_path->attach_thread_ring()->push(event);
  } catch (...) {  // no memory for a new ring: the event is lost and counted, the thread keeps running
    slow_path->count_ringless_event();
  }
}

/// Writes a formatted range and its kept arguments to this thread's ring, both or neither.
DLPROF_ALWAYS_INLINE void push_formatted_range(NameId name, std::int64_t start, std::int64_t end, Category category,
                                               std::uint32_t correlation_sequence, const FormatArguments& arguments) noexcept {
  ThreadRing* ring = t_ring;
  if (DLPROF_LIKELY(ring != nullptr) &&
      DLPROF_LIKELY(ring->push_formatted_range(name, start, end, category, correlation_sequence, arguments) !=
                    ThreadRing::PushResult::Retired))
    return;
  const RecordingSlowPath* slow_path = recording_slow_path();
  if (slow_path == nullptr) return;
  try {
    slow_path->attach_thread_ring()->push_formatted_range(name, start, end, category, correlation_sequence, arguments);
  } catch (...) {  // no memory for a new ring: the event is lost and counted, the thread keeps running
    slow_path->count_ringless_event();
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
