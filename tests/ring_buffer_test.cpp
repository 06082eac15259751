// Tests of detail/recording/ring.hpp and ring_registry.hpp: the per-thread ring on its own, then
// the rings as the Profiler uses them from many threads (exact counts, forced overflow, producers racing the collector,
// threads that exit before the drain, configured capacity).
#include <dlprof/detail/window/formatted_name.hpp>
#include <dlprof/detail/recording/ring_registry.hpp>
#include <dlprof/profiler.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using dlprof::detail::Event;
using dlprof::detail::ThreadRing;
using PushResult = dlprof::detail::ThreadRing::PushResult;

// An event whose name field carries `index`, so the order of drained events can be checked.
Event indexed_event(std::uint64_t index) {
  return Event{index, static_cast<std::int64_t>(index), {static_cast<std::int64_t>(index)}, dlprof::detail::RecordKind::Range,
               dlprof::Category::User};
}

std::vector<std::uint64_t> drain_indices(ThreadRing& ring) {
  std::vector<std::uint64_t> indices;
  ring.drain([&](const Event* first, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) indices.push_back(first[i].name);
  });
  return indices;
}

std::vector<std::uint64_t> consecutive(std::uint64_t first, std::uint64_t count) {
  std::vector<std::uint64_t> values;
  for (std::uint64_t i = 0; i < count; ++i) values.push_back(first + i);
  return values;
}

TEST(ThreadRingTest, DrainReturnsPushedEventsInPushOrder) {
  ThreadRing ring(16, /*os_tid=*/1, "ring");
  for (std::uint64_t i = 0; i < 10; ++i) ASSERT_EQ(ring.push(indexed_event(i)), PushResult::Stored);

  EXPECT_EQ(drain_indices(ring), consecutive(0, 10));
  EXPECT_TRUE(drain_indices(ring).empty()) << "a drain must free what it handed out";
}

TEST(ThreadRingTest, CapacityRoundsUpToPowerOfTwo) {
  EXPECT_EQ(ThreadRing(1, 1, "").capacity(), 1u);
  EXPECT_EQ(ThreadRing(5, 1, "").capacity(), 8u);
  EXPECT_EQ(ThreadRing(1000, 1, "").capacity(), 1024u);
  EXPECT_EQ(ThreadRing(1024, 1, "").capacity(), 1024u);
  EXPECT_EQ(ThreadRing(1025, 1, "").capacity(), 2048u);
}

TEST(ThreadRingTest, FullRingDropsNewEventsAndCountsEachOne) {
  ThreadRing ring(8, 1, "ring");
  for (std::uint64_t i = 0; i < 8; ++i) ASSERT_EQ(ring.push(indexed_event(i)), PushResult::Stored);
  for (std::uint64_t i = 8; i < 13; ++i) EXPECT_EQ(ring.push(indexed_event(i)), PushResult::Dropped);

  EXPECT_EQ(ring.take_new_drops(), 5u);
  // The oldest events are kept; the ones that found the ring full are gone.
  EXPECT_EQ(drain_indices(ring), consecutive(0, 8));
  // Draining frees the slots for the producer again.
  EXPECT_EQ(ring.push(indexed_event(100)), PushResult::Stored);
  EXPECT_EQ(drain_indices(ring), std::vector<std::uint64_t>{100});
}

// A formatted range's kept arguments and its Range are stored together or not at all: one
// without the other would name the range by its bare format.
TEST(ThreadRingTest, AFormattedRangeIsStoredWithItsArgumentsOrDroppedWithThem) {
  ThreadRing ring(4, 1, "ring");
  ASSERT_EQ(ring.push(indexed_event(0)), PushResult::Stored);
  const dlprof::detail::FormatArguments arguments = dlprof::detail::keep_format_arguments(7, 2.5);
  ASSERT_EQ(ring.push_formatted_range(/*name=*/42 | dlprof::detail::kFormatSiteTag, 10, 20, dlprof::Category::User, 3, arguments),
            PushResult::Stored);
  EXPECT_EQ(ring.push_formatted_range(43 | dlprof::detail::kFormatSiteTag, 30, 40, dlprof::Category::User, 0, arguments),
            PushResult::Dropped)
      << "one slot is left: the pair needs two";
  EXPECT_EQ(ring.take_new_drops(), 1u) << "a dropped formatted range counts as one event";

  std::vector<Event> events;
  ring.drain([&](const Event* first, std::size_t count) { events.insert(events.end(), first, first + count); });
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].kind, dlprof::detail::RecordKind::FormatArguments);
  EXPECT_EQ(events[1].start, 10);
  const dlprof::detail::FormatArguments kept = dlprof::detail::format_arguments_of(events[1]);
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{} {:.2f}", kept), "7 2.50");
  EXPECT_EQ(events[2].kind, dlprof::detail::RecordKind::Range);
  EXPECT_EQ(events[2].name, 42u | dlprof::detail::kFormatSiteTag);
  EXPECT_EQ(events[2].end, 20);
  EXPECT_EQ(events[2].correlation_sequence, 3u);
}

TEST(ThreadRingTest, AnOpenFormattedRangeKeepsItsArgumentsAndALiteralOneReadsNone) {
  ThreadRing ring(8, 1, "ring");
  const dlprof::detail::FormatArguments arguments = dlprof::detail::keep_format_arguments(std::int64_t{-5}, 'x');
  ring.open_range(/*name=*/64, 1, dlprof::Category::User, 0, /*stack=*/0);
  ring.open_range(80 | dlprof::detail::kFormatSiteTag, 2, dlprof::Category::User, 0, /*stack=*/7, &arguments);
  std::vector<ThreadRing::OpenRange> open;
  ASSERT_EQ(ring.open_ranges(open), 0u);
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(open[0].arguments.types, 0u);
  EXPECT_EQ(open[0].stack, 0u);
  EXPECT_EQ(open[1].stack, 7u);
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{} {}", open[1].arguments), "-5 x");

  // The slot a formatted range used, reused by a literal range: its old arguments are not read.
  ring.close_range();
  ring.open_range(96, 3, dlprof::Category::User, 0, 0);
  ASSERT_EQ(ring.open_ranges(open), 0u);
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(open[1].name, 96u);
  EXPECT_EQ(open[1].arguments.types, 0u);
}

// What a damaged crash file may hold: types no range keeps, more bytes than are kept, a format
// the arguments do not fit. The name is the format itself, never an exception.
TEST(ThreadRingTest, KeptArgumentsThatCannotBeReadGiveTheFormatItself) {
  dlprof::detail::FormatArguments arguments = dlprof::detail::keep_format_arguments(1, 2);
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{}+{}", arguments), "1+2");
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{:s}", arguments), "{:s}") << "an int formatted as a string";
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{} {} {}", arguments), "{} {} {}") << "too few arguments";
  arguments.types = 0xF;
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{}", arguments), "{}") << "an unknown type";
  arguments.types = 0x55555;  // five 8-byte integers: more than 16 bytes
  EXPECT_EQ(dlprof::detail::format_with_kept_arguments("{}", arguments), "{}");
}

TEST(ThreadRingTest, TakeNewDropsReportsOnlyDropsSinceLastCall) {
  ThreadRing ring(4, 1, "ring");
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_EQ(ring.push(indexed_event(i)), PushResult::Stored);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ring.push(indexed_event(99)), PushResult::Dropped);

  EXPECT_EQ(ring.take_new_drops(), 3u);
  EXPECT_EQ(ring.take_new_drops(), 0u) << "drops already reported must not be reported twice";

  for (int i = 0; i < 2; ++i) ASSERT_EQ(ring.push(indexed_event(99)), PushResult::Dropped);
  EXPECT_EQ(ring.take_new_drops(), 2u);
}

TEST(ThreadRingTest, WrapAroundKeepsOrderOverManyFillDrainCycles) {
  constexpr std::uint64_t kCapacity = 8;
  ThreadRing ring(kCapacity, 1, "ring");
  std::uint64_t next = 0;
  // Batches of 1..8 events: the slot index wraps at a different position in every cycle, and
  // every eighth batch fills the ring exactly.
  for (std::uint64_t cycle = 0; cycle < 1000; ++cycle) {
    const std::uint64_t batch = cycle % kCapacity + 1;
    for (std::uint64_t i = 0; i < batch; ++i) ASSERT_EQ(ring.push(indexed_event(next + i)), PushResult::Stored);
    ASSERT_EQ(drain_indices(ring), consecutive(next, batch)) << "cycle " << cycle;
    next += batch;
  }
  EXPECT_EQ(ring.take_new_drops(), 0u);
}

TEST(ThreadRingTest, RetiredRingRefusesEventsWithoutCountingDrops) {
  ThreadRing ring(8, 1, "ring");
  ASSERT_EQ(ring.push(indexed_event(0)), PushResult::Stored);
  ASSERT_FALSE(ring.retired());

  ring.retire();

  EXPECT_TRUE(ring.retired());
  EXPECT_EQ(ring.push(indexed_event(1)), PushResult::Retired);
  EXPECT_EQ(ring.push(indexed_event(2)), PushResult::Retired);
  EXPECT_EQ(ring.take_new_drops(), 0u) << "a retired ring's thread re-attaches: its events are not lost";
  // What was stored before retirement is still handed to the collector.
  EXPECT_EQ(drain_indices(ring), std::vector<std::uint64_t>{0});
}

// Holds every thread until all of them have started, so that they record concurrently (and,
// being alive together, have distinct OS thread ids).
class StartLine {
 public:
  explicit StartLine(int threads) : waiting_(threads) {}
  void arrive_and_wait() {
    waiting_.fetch_sub(1);
    while (waiting_.load() > 0) std::this_thread::yield();
  }

 private:
  std::atomic<int> waiting_;
};

// Runs an empty window, so that events and drops left in the rings by earlier tests of this
// binary (threads that kept recording after a stop) are drained and their rings forgotten before
// a test counts exact totals.
void drain_leftovers(std::size_t events_per_thread) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.events_per_thread(events_per_thread));
  profiler.start();
  profiler.stop();
}

// Number of Range events named `name` on each OS thread of `trace`.
std::map<std::int64_t, std::size_t> ranges_per_thread(const dlprof::Trace& trace, std::string_view name) {
  std::map<std::int64_t, std::size_t> counts;
  for (const dlprof::TraceEvent& event : trace.events) {
    if (event.kind == dlprof::EventKind::Range && trace.name_of(event) == name)
      ++counts[trace.threads[event.thread].os_tid];
  }
  return counts;
}

constexpr int kThreads = 8;
constexpr std::size_t kRangesPerThread = 100'000;

/// Runs `body` on kThreads threads released together (all alive at once), joins them and
/// returns their OS thread ids.
template <class Body>
std::vector<std::int64_t> run_together_on_threads(Body body) {
  std::vector<std::int64_t> tids(kThreads);
  StartLine start_line(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tids[t] = dlprof::detail::current_os_tid();
      start_line.arrive_and_wait();
      body();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return tids;
}

TEST(RingConcurrencyTest, EightThreadsRecordEveryRangeWhenTheirRingsFit) {
  constexpr std::size_t kEventsPerThread = std::size_t{1} << 17;
  drain_leftovers(kEventsPerThread);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.events_per_thread(kEventsPerThread));
  profiler.start();

  const std::vector<std::int64_t> tids = run_together_on_threads([] {
    for (std::size_t i = 0; i < kRangesPerThread; ++i) {
      DLPROF_RANGE("concurrent_range");
    }
  });
  profiler.stop();

  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->dropped_events, 0u);
  EXPECT_EQ(trace->events.size(), kThreads * kRangesPerThread);
  const auto counts = ranges_per_thread(*trace, "concurrent_range");
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(kThreads));
  for (std::int64_t tid : tids) {
    ASSERT_EQ(counts.count(tid), 1u) << "thread " << tid << " missing from the trace";
    EXPECT_EQ(counts.at(tid), kRangesPerThread) << "thread " << tid;
  }
}

TEST(RingConcurrencyTest, FullRingsKeepEachThreadsFirstEventsAndCountEveryDrop) {
  constexpr std::size_t kEventsPerThread = std::size_t{1} << 14;
  drain_leftovers(kEventsPerThread);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.events_per_thread(kEventsPerThread));
  profiler.start();

  const std::vector<std::int64_t> tids = run_together_on_threads([] {
    // Two sites: the ranges that fit the ring and those recorded after it is full. Nothing is
    // drained during the window, so only the first kind may survive.
    for (std::size_t i = 0; i < kRangesPerThread; ++i) {
      if (i < kEventsPerThread) {
        DLPROF_RANGE("fits_in_ring");
      } else {
        DLPROF_RANGE("finds_ring_full");
      }
    }
  });
  profiler.stop();

  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->dropped_events, kThreads * (kRangesPerThread - kEventsPerThread));
  EXPECT_EQ(trace->events.size(), kThreads * kEventsPerThread);
  EXPECT_TRUE(ranges_per_thread(*trace, "finds_ring_full").empty());
  const auto counts = ranges_per_thread(*trace, "fits_in_ring");
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(kThreads));
  for (std::int64_t tid : tids) {
    ASSERT_EQ(counts.count(tid), 1u) << "thread " << tid << " missing from the trace";
    EXPECT_EQ(counts.at(tid), kEventsPerThread) << "thread " << tid;
  }
}

// Threads that record ranges back to back until stopped; the destructor stops and joins them,
// so an assertion that returns early does not leave them running.
class Producers {
 public:
  explicit Producers(int threads) : completed_(static_cast<std::size_t>(threads)) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] {
        while (keep_recording_.load()) {
          {
            DLPROF_RANGE("straddling_range");
          }
          completed_[t].fetch_add(1);
        }
      });
    }
  }
  ~Producers() { stop(); }
  Producers(const Producers&) = delete;
  Producers& operator=(const Producers&) = delete;

  void stop() {
    keep_recording_.store(false);
    for (std::thread& thread : threads_)
      if (thread.joinable()) thread.join();
  }

  /// Ranges thread `t` has finished so far.
  std::size_t completed(int t) const { return completed_[t].load(); }

 private:
  std::atomic<bool> keep_recording_{true};
  std::vector<std::atomic<std::size_t>> completed_;
  std::vector<std::thread> threads_;
};

TEST(RingConcurrencyTest, ProducersRecordingAcrossWindowBoundariesStayInsideEachWindow) {
  constexpr std::size_t kRangesPerWindow = 2'000;
  constexpr int kWindows = 3;
  // Small rings: they fill during each window, so drops race the drain too, and each trace
  // stays small enough to build quickly under ThreadSanitizer.
  const auto options = dlprof::ProfilerOptions{}.events_per_thread(std::size_t{1} << 12);
  drain_leftovers(options.events_per_thread());

  Producers producers(kThreads);
  for (int window = 0; window < kWindows; ++window) {
    dlprof::Profiler profiler(options);
    profiler.start();
    std::vector<std::size_t> completed_at_start(kThreads);
    for (int t = 0; t < kThreads; ++t) completed_at_start[t] = producers.completed(t);
    // Every thread completes kRangesPerWindow ranges inside the window; the producers are still
    // recording when stop() drains their rings.
    for (int t = 0; t < kThreads; ++t)
      while (producers.completed(t) < completed_at_start[t] + kRangesPerWindow) std::this_thread::yield();
    profiler.stop();

    const auto trace = profiler.last_trace();
    ASSERT_NE(trace, nullptr);
    // Ranges completed after start() returned began inside the window (all but possibly the one
    // in flight at that moment): each was either stored or counted as dropped.
    EXPECT_GE(trace->events.size() + trace->dropped_events, kThreads * (kRangesPerWindow - 1)) << "window " << window;
    for (const dlprof::TraceEvent& event : trace->events) {
      ASSERT_GE(event.start_ns, trace->window_start_ns) << "window " << window;
      ASSERT_LE(event.start_ns, trace->window_end_ns) << "window " << window;
      ASSERT_GE(event.end_ns, event.start_ns) << "window " << window;
    }
  }
  producers.stop();

  // Ranges that began in the last window and ended after its drain sit in the rings now; they
  // belong to no later window.
  dlprof::Profiler after(options);
  after.start();
  after.stop();
  ASSERT_NE(after.last_trace(), nullptr);
  EXPECT_TRUE(after.last_trace()->events.empty());
}

TEST(RingConcurrencyTest, AnEndedThreadsEventsMoveToARingOfTheirSizeAndItsRingServesTheNextThread) {
  constexpr std::size_t kRanges = 1'000;
  drain_leftovers(8);  // another capacity empties the idle rings, so the first thread's ring is kept
  drain_leftovers(dlprof::detail::kDefaultEventsPerThread);
  dlprof::detail::RingRegistry& registry = dlprof::detail::RingRegistry::instance();
  dlprof::Profiler profiler;
  profiler.start();
  const std::size_t rings_before = registry.ring_count();
  const std::size_t slots_before = registry.slots_held();

  std::int64_t first_tid = 0;
  const ThreadRing* first_ring = nullptr;
  std::thread first([&] {
    first_tid = dlprof::detail::current_os_tid();
    for (std::size_t i = 0; i < kRanges; ++i) {
      DLPROF_RANGE("ended_thread_range");
    }
    first_ring = dlprof::detail::t_ring;
  });
  first.join();

  // The thread is gone and its events are not drained yet: they are held in a ring of their size
  // (1024 slots), and the thread's ring of 65536 waits for the next thread.
  EXPECT_EQ(registry.ring_count(), rings_before + 1);
  EXPECT_EQ(registry.slots_held(), slots_before + dlprof::detail::kDefaultEventsPerThread + 1024);

  std::int64_t second_tid = 0;
  const ThreadRing* second_ring = nullptr;
  std::thread second([&] {
    second_tid = dlprof::detail::current_os_tid();
    {
      DLPROF_RANGE("next_thread_range");
    }
    second_ring = dlprof::detail::t_ring;
  });
  second.join();
  EXPECT_EQ(second_ring, first_ring);
  EXPECT_EQ(registry.slots_held(), slots_before + dlprof::detail::kDefaultEventsPerThread + 1024 + 1);

  profiler.stop();
  EXPECT_EQ(registry.ring_count(), rings_before);
  EXPECT_EQ(registry.slots_held(), slots_before + dlprof::detail::kDefaultEventsPerThread);
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  const auto first_counts = ranges_per_thread(*trace, "ended_thread_range");
  ASSERT_EQ(first_counts.size(), 1u);
  EXPECT_EQ(first_counts.at(first_tid), kRanges);
  const auto second_counts = ranges_per_thread(*trace, "next_thread_range");
  ASSERT_EQ(second_counts.size(), 1u);
  EXPECT_EQ(second_counts.at(second_tid), 1u);
}

TEST(RingConcurrencyTest, ThreadChurnKeepsTheRingsOfLiveThreadsAndAFewIdleOnes) {
  drain_leftovers(dlprof::detail::kDefaultEventsPerThread);
  dlprof::detail::RingRegistry& registry = dlprof::detail::RingRegistry::instance();
  dlprof::Profiler profiler;
  profiler.start();
  const std::size_t slots_before = registry.slots_held();
  for (int round = 0; round < 50; ++round) {
    std::vector<std::thread> workers;
    for (int t = 0; t < 6; ++t)
      workers.emplace_back([] {
        for (int i = 0; i < 10; ++i) {
          DLPROF_RANGE("churn");
        }
      });
    for (std::thread& worker : workers) worker.join();
  }
  // 300 threads have ended; at most six were alive at once. Their rings: at most four idle
  // (two rings' worth of slots more than four are freed), and 300 remainders of 16 slots.
  EXPECT_LE(registry.idle_ring_count(), 4u);
  EXPECT_LE(registry.slots_held(), slots_before + 4 * dlprof::detail::kDefaultEventsPerThread + 300 * 16);
  profiler.stop();
  EXPECT_EQ(ranges_per_thread(*profiler.last_trace(), "churn").size(), 300u);
}

TEST(RingConcurrencyTest, DropsOfAnEndedThreadAreCounted) {
  drain_leftovers(8);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.events_per_thread(8));
  profiler.start();
  std::thread worker([] {
    for (int i = 0; i < 20; ++i) {
      DLPROF_RANGE("overflowing");
    }
  });
  worker.join();
  profiler.stop();
  EXPECT_EQ(ranges_per_thread(*profiler.last_trace(), "overflowing").begin()->second, 8u);
  EXPECT_EQ(profiler.last_trace()->dropped_events, 12u);
}

TEST(RingConcurrencyTest, RingsGetTheConfiguredCapacityRoundedUp) {
  {
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}.events_per_thread(1000));
    profiler.start();
    // start() attaches the calling thread's ring; other threads attach on their first event.
    ASSERT_NE(dlprof::detail::t_ring, nullptr);
    EXPECT_EQ(dlprof::detail::t_ring->capacity(), 1024u);
    std::size_t worker_capacity = 0;
    std::thread worker([&] {
      {
        DLPROF_RANGE("capacity_probe");
      }  // the range's end writes the thread's first event, which attaches its ring
      worker_capacity = dlprof::detail::t_ring->capacity();
    });
    worker.join();
    EXPECT_EQ(worker_capacity, 1024u);
    profiler.stop();
  }
  // A later profiler with another setting replaces the rings that were sized for the old one.
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.events_per_thread(5000));
  profiler.start();
  ASSERT_NE(dlprof::detail::t_ring, nullptr);
  EXPECT_EQ(dlprof::detail::t_ring->capacity(), 8192u);
  profiler.stop();
}

}  // namespace
