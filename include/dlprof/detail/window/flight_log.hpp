// dlprof/detail/window/flight_log.hpp: the flight recorder's memory of the last steps, and the
// crash file it leaves when the process dies of a fatal signal.
//
// At every step() the rings are emptied into one log of events allocated when the recorder
// starts, a segment per step. The oldest segments give way when the log is full or holds more
// steps than asked, so the recorder's memory is fixed: the log's events (32 bytes each) besides
// the rings. A dump takes the kept segments, and what the rings hold since, as one window.
//
// A fatal signal's handler may not allocate, lock or use stdio, so it cannot build a trace: it
// writes the log's raw records, the crashing thread's ring and open ranges and the text of the
// names they use to a crash file (`*.dlprof-crash`) with write(2) alone, and
// import/crash_dump.hpp turns that file into the trace afterwards.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/format/crash_file.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The kind of the record heading each thread's block of events in the log: `name` holds the
/// thread's slot, `start` how many events follow. No ring record has this kind.
inline constexpr RecordKind kLogBlockKind = static_cast<RecordKind>(0xFF);

template <class Deferred = void>
class BasicFlightLog {
 public:
  /// Threads the log can tell apart among its kept steps; events of more are dropped and counted.
  static constexpr std::uint32_t kMaxThreads = kFlightThreadSlots;

  /// A log of `capacity_events` (rounded up to a power of two) keeping at most `max_steps` steps,
  /// starting at `start_tick`. Allocates all it will use.
  BasicFlightLog(std::size_t capacity_events, std::size_t max_steps, std::int64_t start_tick)
      : capacity_(round_up_to_power_of_two(capacity_events)),
        mask_(capacity_ - 1),
        events_(new Event[capacity_]()),
        max_steps_(max_steps),
        segments_(max_steps + 1),
        threads_(new FlightThread[kMaxThreads]()),
        thread_last_use_(kMaxThreads, 0),
        name_set_(new std::uint64_t[kNameSetSize]()),
        next_start_tick_(start_tick),
        crash_window_start_(start_tick) {
    for (std::uint32_t i = 0; i < kMaxThreads; ++i) threads_[i].slot = i;
  }

  BasicFlightLog(const BasicFlightLog&) = delete;
  BasicFlightLog& operator=(const BasicFlightLog&) = delete;

  /// Empties every ring into the log as the segment of step `step`, which ends at `end_tick`.
  /// The oldest steps give way to it; events that do not fit once the step is alone in the log
  /// are dropped and counted.
  void append_step(std::int64_t step, std::int64_t end_tick) {
    const std::uint64_t sequence = ++sequence_;
    const std::uint64_t segment_begin = write_;
    std::uint64_t dropped = 0;
    RingRegistry::instance().drain_all([&](ThreadRing& ring) {
      if (ring.pending() == 0) {
        dropped += ring.take_new_drops();
        return;
      }
      const std::uint32_t slot = slot_of(ring, sequence);
      if (slot == kNoSlot || !make_room(2, segment_begin)) {
        dropped += ring.drain([](const Event*, std::size_t) {});
        dropped += ring.take_new_drops();
        return;
      }
      const std::uint64_t block = write_++;
      std::uint64_t count = 0;
      ring.drain([&](const Event* first, std::size_t n) {
        make_room(n, segment_begin);
        const std::size_t fits = std::min<std::size_t>(n, static_cast<std::size_t>(capacity_ - (write_ - begin())));
        copy_in(first, fits);
        count += fits;
        dropped += n - fits;
      });
      events_[block & mask_] = Event{slot, static_cast<std::int64_t>(count), {0}, kLogBlockKind, Category::User, 0};
      dropped += ring.take_new_drops();
      end_.store(write_, std::memory_order_release);
    });
    push_segment(Segment{step, next_start_tick_, end_tick, segment_begin, write_, dropped, sequence});
    next_start_tick_ = end_tick;
    while (segment_count_ > max_steps_) pop_segment();
    crash_window_start_.store(window_start_tick(), std::memory_order_relaxed);
  }

  /// Where the kept steps begin: the oldest segment's start, or where the next one starts.
  std::int64_t window_start_tick() const noexcept {
    return segment_count_ != 0 ? segments_[first_segment_].start_tick : next_start_tick_;
  }

  /// The kept steps' events, each thread's in order, keeping those that start at or after
  /// window_start_tick(); empties the log, whose next step starts at `next_start_tick`.
  DrainedEvents take(std::int64_t next_start_tick) {
    DrainedEvents drained;
    const std::int64_t from = window_start_tick();
    std::vector<std::int32_t> index_of_slot(kMaxThreads, -1);
    for (std::size_t s = 0; s < segment_count_; ++s) drained.dropped += segments_[(first_segment_ + s) % segments_.size()].dropped;
    for (std::uint64_t at = begin(); at < write_;) {
      const Event block = events_[at & mask_];
      const auto count = static_cast<std::uint64_t>(block.start);
      const auto slot = static_cast<std::uint32_t>(block.name);
      ++at;
      if (index_of_slot[slot] < 0) {
        index_of_slot[slot] = static_cast<std::int32_t>(drained.threads.size());
        const FlightThread& thread = threads_[slot];
        drained.threads.push_back({thread.os_tid, thread.ordinal, thread.name, {}});
      }
      std::vector<Event>& events = drained.threads[static_cast<std::size_t>(index_of_slot[slot])].events;
      for (std::uint64_t i = 0; i < count; ++i, ++at) {
        const Event& event = events_[at & mask_];
        if (event.start >= from) events.push_back(event);
      }
    }
    begin_.store(write_, std::memory_order_release);
    end_.store(write_, std::memory_order_release);
    segment_count_ = 0;
    next_start_tick_ = next_start_tick;
    crash_window_start_.store(next_start_tick, std::memory_order_relaxed);
    return drained;
  }

  // The crash handler's side: called from a fatal signal's handler, any thread.

  /// Where the kept steps begin, as the crash handler reads it.
  std::int64_t crash_window_start_tick() const noexcept { return crash_window_start_.load(std::memory_order_relaxed); }

  /// Calls `visit_thread(const FlightThread&)` for every slot in use, then `visit_block(slot,
  /// first, count)` for every span of events the log holds, in order. Reads what step() last
  /// published; a step() running meanwhile on another thread may leave the spans it rewrites
  /// inconsistent, which the reader of the crash file checks for.
  template <class VisitThread, class VisitBlock>
  void visit_for_crash(VisitThread&& visit_thread, VisitBlock&& visit_block) const noexcept {
    for (std::uint32_t slot = 0; slot < kMaxThreads; ++slot)
      if (thread_last_use_[slot] != 0) visit_thread(threads_[slot]);
    const std::uint64_t end = end_.load(std::memory_order_acquire);
    std::uint64_t at = begin_.load(std::memory_order_acquire);
    while (at < end) {
      const Event block = events_[at & mask_];
      const auto count = static_cast<std::uint64_t>(block.start);
      if (block.kind != kLogBlockKind || block.name >= kMaxThreads || count > end - at - 1) return;
      ++at;
      for (std::uint64_t done = 0; done < count;) {
        const std::uint64_t first = (at + done) & mask_;
        const std::uint64_t span = std::min<std::uint64_t>(count - done, capacity_ - first);
        visit_block(static_cast<std::uint32_t>(block.name), &events_[first], static_cast<std::size_t>(span));
        done += span;
      }
      at += count;
    }
  }

  /// The slot of the thread `os_tid`/`ordinal` in the log, or kMaxThreads when it has none.
  std::uint32_t crash_slot_of(std::int64_t os_tid, std::uint32_t ordinal) const noexcept {
    for (std::uint32_t slot = 0; slot < kMaxThreads; ++slot)
      if (thread_last_use_[slot] != 0 && threads_[slot].os_tid == os_tid && threads_[slot].ordinal == ordinal) return slot;
    return kMaxThreads;
  }

  /// Whether `id` is seen for the first time since clear_names_seen(): the crash handler writes
  /// each name once. Past three quarters full, every id counts as new.
  bool first_sight_of_name(NameId id) noexcept {
    if (names_seen_ >= kNameSetSize / 4 * 3) return true;
    const NameId key = id + 1;  // 0 marks an empty slot
    for (std::size_t i = static_cast<std::size_t>(key * 0x9E3779B97F4A7C15ull) & (kNameSetSize - 1);;
         i = (i + 1) & (kNameSetSize - 1)) {
      if (name_set_[i] == key) return false;
      if (name_set_[i] == 0) {
        name_set_[i] = key;
        ++names_seen_;
        return true;
      }
    }
  }
  void clear_names_seen() noexcept {
    std::memset(name_set_.get(), 0, kNameSetSize * sizeof(std::uint64_t));
    names_seen_ = 0;
  }

 private:
  static constexpr std::uint32_t kNoSlot = UINT32_MAX;
  static constexpr std::size_t kNameSetSize = std::size_t{1} << 16;

  struct Segment {
    std::int64_t step = 0;
    std::int64_t start_tick = 0;
    std::int64_t end_tick = 0;
    std::uint64_t begin = 0;  ///< log positions
    std::uint64_t end = 0;
    std::uint64_t dropped = 0;
    std::uint64_t sequence = 0;
  };

  std::uint64_t begin() const noexcept { return begin_.load(std::memory_order_relaxed); }

  /// Frees the oldest segments until `n` more events fit, never those at or after `keep_from`.
  bool make_room(std::size_t n, std::uint64_t keep_from) {
    while (write_ + n - begin() > capacity_ && segment_count_ != 0 && segments_[first_segment_].end <= keep_from)
      pop_segment();
    return write_ + n - begin() <= capacity_;
  }

  void copy_in(const Event* first, std::size_t n) noexcept {
    while (n != 0) {
      const std::size_t at = static_cast<std::size_t>(write_ & mask_);
      const std::size_t span = std::min(n, capacity_ - at);
      std::memcpy(static_cast<void*>(&events_[at]), first, span * sizeof(Event));
      write_ += span;
      first += span;
      n -= span;
    }
  }

  void push_segment(const Segment& segment) {
    segments_[(first_segment_ + segment_count_) % segments_.size()] = segment;
    ++segment_count_;
  }

  /// Forgets the oldest segment: the crash handler stops reading it before it is overwritten.
  void pop_segment() {
    const Segment& oldest = segments_[first_segment_];
    first_segment_ = (first_segment_ + 1) % segments_.size();
    --segment_count_;
    const std::uint64_t next = segment_count_ != 0 ? segments_[first_segment_].begin : std::max(oldest.end, begin());
    if (next > begin()) begin_.store(next, std::memory_order_release);
  }

  /// The slot of `ring`'s thread, taking a free one (unused by the kept steps) for a new thread.
  /// Looks only through the slots ever used: as many as threads recorded in the kept steps.
  std::uint32_t slot_of(const ThreadRing& ring, std::uint64_t sequence) {
    std::uint32_t free_slot = kNoSlot;
    const std::uint64_t oldest_kept = segment_count_ != 0 ? segments_[first_segment_].sequence : sequence;
    for (std::uint32_t slot = 0; slot < slots_used_; ++slot) {
      if (thread_last_use_[slot] != 0 && threads_[slot].os_tid == ring.os_tid() && threads_[slot].ordinal == ring.thread_ordinal()) {
        thread_last_use_[slot] = sequence;
        return slot;
      }
      if (free_slot == kNoSlot && thread_last_use_[slot] < oldest_kept) free_slot = slot;
    }
    if (free_slot == kNoSlot && slots_used_ < kMaxThreads) free_slot = slots_used_++;
    if (free_slot == kNoSlot) return kNoSlot;
    FlightThread& thread = threads_[free_slot];
    thread.os_tid = ring.os_tid();
    thread.ordinal = ring.thread_ordinal();
    const std::size_t length = std::min(ring.thread_name().size(), sizeof(thread.name) - 1);
    std::memcpy(thread.name, ring.thread_name().data(), length);
    thread.name[length] = '\0';
    thread_last_use_[free_slot] = sequence;
    return free_slot;
  }

  const std::size_t capacity_;
  const std::size_t mask_;
  std::unique_ptr<Event[]> events_;
  std::atomic<std::uint64_t> begin_{0};  ///< oldest position kept
  std::atomic<std::uint64_t> end_{0};    ///< positions before it are published to the crash handler
  std::uint64_t write_ = 0;              ///< next position written
  const std::size_t max_steps_;
  std::vector<Segment> segments_;  ///< a circular array of the kept steps
  std::size_t first_segment_ = 0;
  std::size_t segment_count_ = 0;
  std::uint64_t sequence_ = 0;
  std::unique_ptr<FlightThread[]> threads_;
  std::vector<std::uint64_t> thread_last_use_;  ///< the sequence of the last segment with events of the slot; 0: free
  std::uint32_t slots_used_ = 0;                ///< slots at or past it were never used
  std::unique_ptr<std::uint64_t[]> name_set_;
  std::size_t names_seen_ = 0;
  std::int64_t next_start_tick_;
  std::atomic<std::int64_t> crash_window_start_;
};

using FlightLog = BasicFlightLog<>;

}  // namespace detail
DLPROF_END_NAMESPACE
