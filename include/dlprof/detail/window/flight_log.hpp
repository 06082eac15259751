// dlprof/detail/window/flight_log.hpp: the flight recorder's memory of the last steps, which is
// the threads' rings themselves.
//
// Nothing is copied at a step(): the log marks where the next step begins in every ring and
// frees, in place, the steps it keeps no longer, so recording costs what it costs in a scheduled
// window and the recorder's memory is the rings'. A ring without room for one more step as large
// as the largest it keeps gives up its oldest kept steps too, all but the one just ended; what it
// gave up is counted as dropped in the steps it belonged to. Each thread keeps the last steps as far as its ring
// (events_per_thread) holds them. A dump drains every ring from the oldest kept step's
// start (drain.hpp); a fatal signal's handler writes the rings as they are (crash_file.hpp); with
// a trace directory the rings live in the flight log's file, which outlives a process killed
// without a handler (flight_log_file.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/detail/window/flight_log_file.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

template <class Deferred = void>
class BasicFlightLog {
 public:
  /// A log keeping at most `max_steps` steps and the step in progress, which begins at
  /// `start_tick`. Allocates all it will use.
  /// `file`, where given, is the flight log's file its rings live in: each step's end is noted
  /// there.
  BasicFlightLog(std::size_t max_steps, std::int64_t start_tick, FlightLogFile* file = nullptr)
      : steps_(max_steps + 1), crash_window_start_(start_tick), file_(file) {
    steps_[0] = Step{INT64_MIN, start_tick, 0};
    count_ = 1;
    RingRegistry::instance().visit_all([](ThreadRing& ring) { ring.clear_step_marks(); });
  }

  BasicFlightLog(const BasicFlightLog&) = delete;
  BasicFlightLog& operator=(const BasicFlightLog&) = delete;

  /// Step `step` ended at `end_tick`, and step `step + 1` begins: marks its start in every ring
  /// and frees what the kept steps no longer need. Allocates nothing.
  void end_step(std::int64_t step, std::int64_t end_tick) {
    Step& ended = newest();
    ended.number = step;
    if (count_ == steps_.size()) {
      first_ = (first_ + 1) % steps_.size();
      --count_;
    }
    steps_[(first_ + count_) % steps_.size()] = Step{step + 1, end_tick, 0};
    ++count_;
    const std::int64_t oldest_kept = steps_[first_].number;  // INT64_MIN: the steps before the first one ended
    const std::int64_t from = window_start_tick();
    RingRegistry::instance().visit_all([&](ThreadRing& ring) {
      ended.dropped += ring.take_new_drops();
      if (ring.exited() || ring.retired() || ring.superseded()) {
        free_if_older(ring, from);
        return;
      }
      ring.mark_step(step + 1);
      if (oldest_kept != INT64_MIN) ring.free_before_step(oldest_kept);
      // Room for the next step as large as the largest kept: freed now, by whole steps, since
      // the ring itself never overwrites what it holds. The step just ended stays: a step that
      // then finds its ring full drops its newest events, and counts them.
      const std::uint64_t room = ring.largest_marked_step();
      while (ring.pending() + room > ring.capacity() && ring.oldest_marked_step() < step) {
        const std::int64_t freed_step = ring.oldest_marked_step();
        const std::uint64_t freed = ring.free_oldest_marked_step();
        if (freed == 0) break;
        count_dropped(freed_step, freed);
      }
    });
    crash_window_start_.store(from, std::memory_order_relaxed);
    if (file_ != nullptr) file_->step_ended(step, from);
  }

  /// Where the kept steps begin: the oldest kept step's start.
  std::int64_t window_start_tick() const noexcept { return steps_[first_].start_tick; }

  /// The kept steps and the step in progress so far, drained from every ring up to `end_tick`;
  /// the log starts over there.
  DrainedEvents take(std::int64_t end_tick) {
    DrainedEvents drained = drain_rings(window_start_tick(), end_tick);
    for (std::size_t i = 0; i < count_; ++i) drained.dropped += steps_[(first_ + i) % steps_.size()].dropped;
    const std::int64_t in_progress = newest().number;
    first_ = 0;
    count_ = 1;
    steps_[0] = Step{in_progress, end_tick, 0};
    crash_window_start_.store(end_tick, std::memory_order_relaxed);
    return drained;
  }

  /// Where the kept steps begin, as a fatal signal's handler reads it.
  std::int64_t crash_window_start_tick() const noexcept { return crash_window_start_.load(std::memory_order_relaxed); }

 private:
  struct Step {
    std::int64_t number;      ///< INT64_MIN: what came before the first step() since the start
    std::int64_t start_tick;
    std::uint64_t dropped;    ///< events of the step lost to a full ring or freed for room
  };

  Step& newest() noexcept { return steps_[(first_ + count_ - 1) % steps_.size()]; }

  /// Counts `freed` events of step `step` and after it, freed for room, as dropped in that step
  /// when it is kept.
  void count_dropped(std::int64_t step, std::uint64_t freed) noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      Step& kept = steps_[(first_ + i) % steps_.size()];
      if (kept.number >= step) {
        kept.dropped += freed;
        return;
      }
    }
  }

  /// A ring that takes no more events (its thread ended, or it was retired): emptied once every
  /// event it holds began before `from`.
  static void free_if_older(ThreadRing& ring, std::int64_t from) {
    bool older = true;
    ring.peek([&](const Event* first, std::size_t count) {
      for (std::size_t i = 0; i < count && older; ++i) older = first[i].start < from;
    });
    if (older) ring.drain([](const Event*, std::size_t) {});
  }

  std::vector<Step> steps_;  ///< a circular array of the kept steps, the newest in progress
  std::size_t first_ = 0;
  std::size_t count_ = 0;
  std::atomic<std::int64_t> crash_window_start_;
  FlightLogFile* file_;
};

using FlightLog = BasicFlightLog<>;

}  // namespace detail
DLPROF_END_NAMESPACE
