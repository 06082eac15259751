// The time base: ticks map onto CLOCK_REALTIME nanoseconds, which CUPTI and torch.profiler use.
#include <dlprof/profiler.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using dlprof::detail::ClockMap;
using dlprof::detail::ClockSample;

TEST(ClockMapTest, MapsThroughTwoSamplesExactly) {
  const ClockSample first{1'000, 1'700'000'000'000'000'000};
  const ClockSample last{3'001'000, 1'700'000'000'000'000'000 + 1'500'000};  // 0.5 ns per tick
  const ClockMap map = ClockMap::through(first, last, /*fallback_ns_per_tick=*/7.0);
  EXPECT_DOUBLE_EQ(map.ns_per_tick(), 0.5);
  EXPECT_EQ(map.to_realtime_ns(first.ticks), first.realtime_ns);
  EXPECT_EQ(map.to_realtime_ns(last.ticks), last.realtime_ns);
  EXPECT_EQ(map.to_realtime_ns(1'001'000), first.realtime_ns + 500'000);
  EXPECT_EQ(map.to_realtime_ns(0), first.realtime_ns - 500) << "ticks before the anchor map before it";
}

TEST(ClockMapTest, SamplesUnderAMillisecondApartUseTheFallbackRate) {
  const ClockSample first{0, 1'000'000'000};
  const ClockSample last{100, 1'000'000'000 + 999'999};
  EXPECT_DOUBLE_EQ(ClockMap::through(first, last, 2.5).ns_per_tick(), 2.5);
  EXPECT_DOUBLE_EQ(ClockMap::through(last, first, 2.5).ns_per_tick(), 2.5) << "reversed samples";
}

// Ranges that nest in ticks must nest in nanoseconds, whatever the rate's rounding.
TEST(ClockMapTest, IsMonotonic) {
  const ClockMap map(ClockSample{123'456, 1'700'000'000'000'000'000}, 0.3846153846);
  std::int64_t previous = map.to_realtime_ns(-5'000);
  for (std::int64_t ticks = -4'999; ticks < 200'000; ++ticks) {
    const std::int64_t ns = map.to_realtime_ns(ticks);
    ASSERT_GE(ns, previous) << "at tick " << ticks;
    previous = ns;
  }
}

TEST(ClockTest, UsesTheTscExactlyWhenItIsInvariant) {
  EXPECT_EQ(dlprof::detail::select_clock(), dlprof::detail::has_invariant_tsc());
  EXPECT_EQ(dlprof::detail::g_use_tsc.load(), dlprof::detail::has_invariant_tsc());
}

TEST(ClockTest, TicksNeverGoBackwards) {
  dlprof::detail::select_clock();
  std::int64_t previous = dlprof::detail::now_ticks();
  for (int i = 0; i < 100'000; ++i) {
    const std::int64_t now = dlprof::detail::now_ticks();
    ASSERT_GE(now, previous);
    previous = now;
  }
}

// Events land where CLOCK_REALTIME says they happened: each mark lies between the realtime
// readings taken just before and just after it, within the map's error (sub-microsecond; 5 us
// leaves room for a preempted calibration sample on a busy machine).
TEST(ClockTest, EventsLineUpWithClockRealtime) {
  constexpr std::int64_t kToleranceNs = 5'000;
  constexpr int kMarks = 200;
  dlprof::Profiler profiler;
  std::vector<std::pair<std::int64_t, std::int64_t>> brackets;
  profiler.start();
  const std::int64_t begin = dlprof::detail::clock_ns(CLOCK_REALTIME);
  // Spread the marks over more than a millisecond so the window measures its own tick rate.
  for (int i = 0; i < kMarks; ++i) {
    const std::int64_t before = dlprof::detail::clock_ns(CLOCK_REALTIME);
    dlprof::mark("aligned");
    const std::int64_t after = dlprof::detail::clock_ns(CLOCK_REALTIME);
    brackets.emplace_back(before, after);
    while (dlprof::detail::clock_ns(CLOCK_REALTIME) < begin + (i + 1) * 10'000) {
    }
  }
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  std::vector<std::int64_t> marks;
  for (const dlprof::TraceEvent& event : trace->events)
    if (event.kind == dlprof::EventKind::Instant) marks.push_back(event.start_ns);
  ASSERT_EQ(marks.size(), static_cast<std::size_t>(kMarks));
  for (int i = 0; i < kMarks; ++i) {
    EXPECT_GE(marks[i], brackets[i].first - kToleranceNs) << "mark " << i;
    EXPECT_LE(marks[i], brackets[i].second + kToleranceNs) << "mark " << i;
  }
  EXPECT_LE(trace->window_start_ns, begin);
  EXPECT_GE(trace->window_end_ns, brackets.back().second);
}

}  // namespace
