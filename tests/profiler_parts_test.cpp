// The Profiler's parts without a Profiler: the window recorder, the flight recorder, on-demand
// capture and the watcher thread, each driven through its own interface.
#include <dlprof/detail/control/on_demand.hpp>
#include <dlprof/detail/control/watcher.hpp>
#include <dlprof/detail/window/flight_recorder.hpp>
#include <dlprof/detail/window/lifecycle.hpp>
#include <dlprof/detail/window/window_recorder.hpp>
#include <dlprof/range.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace profiler_parts_test {

using dlprof::Action;
using dlprof::ProfilerOptions;
using dlprof::detail::ClosedWindow;
using dlprof::detail::DrainedEvents;
using dlprof::detail::Event;
using dlprof::detail::RecordKind;

/// What the Profiler's constructor sets up before any window: the clock and the fork and exit hooks.
void set_up_recording() {
  dlprof::detail::install_lifecycle_hooks();
  dlprof::detail::select_clock();
}

/// The numbers of the steps `window` holds on this thread, in order, and how many ranges named
/// `range` it holds there.
struct ThisThread {
  std::vector<std::int64_t> steps;
  int ranges = 0;
};

ThisThread on_this_thread(const ClosedWindow& window, std::string_view range) {
  ThisThread found;
  const std::int64_t tid = dlprof::detail::current_os_tid();
  for (const DrainedEvents::Thread& thread : window.drained.threads) {
    if (thread.os_tid != tid) continue;
    for (const Event& event : thread.events) {
      if (event.kind == RecordKind::Step) found.steps.push_back(static_cast<std::int64_t>(event.name));
      if (event.kind == RecordKind::Range && dlprof::detail::is_site_id(event.name) &&
          dlprof::detail::site_of(event.name).name == range)  // a literal range's name is its site's
        ++found.ranges;
    }
  }
  return found;
}

TEST(WindowRecorderTest, AWindowHoldsItsStepsAndRangesAndIsHandedOverOnce) {
  set_up_recording();
  ProfilerOptions options;
  dlprof::detail::WindowRecorder window(options);
  window.arm(/*keep_newest=*/false);
  { DLPROF_RANGE("window-recorder-before"); }  // armed, not yet recording
  window.start();
  for (std::int64_t step = 7; step <= 8; ++step) {
    window.open_step(step, /*marks_steps=*/true);
    EXPECT_TRUE(window.step_recorded());
    { DLPROF_RANGE("window-recorder-inside"); }
    window.close_step(step);
    EXPECT_GE(window.last_step_ticks(), 0);
  }
  window.stop();
  { DLPROF_RANGE("window-recorder-after"); }
  const std::shared_ptr<ClosedWindow> closed = window.close();
  window.disable_collectors();

  const ThisThread found = on_this_thread(*closed, "window-recorder-inside");
  EXPECT_EQ(found.steps, (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(found.ranges, 2);
  EXPECT_EQ(on_this_thread(*closed, "window-recorder-before").ranges, 0);
  EXPECT_EQ(on_this_thread(*closed, "window-recorder-after").ranges, 0);
  EXPECT_LE(closed->start_ns, closed->end_ns);
  EXPECT_FALSE(closed->thread_cpu.readings.empty()) << "the threads' CPU time is read at the window's and the steps' edges";

  const std::shared_ptr<ClosedWindow> again = window.close();
  EXPECT_TRUE(on_this_thread(*again, "window-recorder-inside").steps.empty()) << "a window is handed over once";
}

TEST(WindowRecorderTest, ADiscardedWindowAndAWindowWithoutStepMarksHoldNoSteps) {
  set_up_recording();
  ProfilerOptions options;
  dlprof::detail::WindowRecorder window(options);
  window.arm(/*keep_newest=*/false);
  window.start();
  window.open_step(1, /*marks_steps=*/false);  // a Profiler without a schedule marks no steps
  EXPECT_FALSE(window.step_recorded());
  { DLPROF_RANGE("window-recorder-unmarked"); }
  window.close_step(1);
  window.stop();
  const std::shared_ptr<ClosedWindow> closed = window.close();
  EXPECT_TRUE(on_this_thread(*closed, "window-recorder-unmarked").steps.empty());
  EXPECT_EQ(on_this_thread(*closed, "window-recorder-unmarked").ranges, 1);

  window.start();
  { DLPROF_RANGE("window-recorder-discarded"); }
  window.stop();
  window.discard();
  EXPECT_EQ(on_this_thread(*window.close(), "window-recorder-discarded").ranges, 0);
  window.disable_collectors();
}

TEST(FlightRecorderAloneTest, ADumpHoldsTheKeptStepsAndTheStepInProgressAndTheLogStartsOver) {
  set_up_recording();
  ProfilerOptions options;
  options.flight_steps(2).slow_step_factor(0);
  dlprof::detail::WindowRecorder window(options);
  dlprof::detail::FlightRecorder flight(window, options);
  flight.start(0, dlprof::detail::fork_generation(), nullptr, nullptr);
  for (std::int64_t step = 0; step < 4; ++step) {
    window.open_step(step, /*marks_steps=*/true);
    flight.step_opened();
    { DLPROF_RANGE("flight-recorder-step"); }
    window.close_step(step);
    EXPECT_EQ(flight.end_step(step), std::nullopt) << "no slow-step factor: no step is slow";
    flight.number_step(step + 1);
  }
  window.open_step(4, /*marks_steps=*/true);
  flight.step_opened();
  const std::shared_ptr<ClosedWindow> dump = flight.dump("a test", 4);
  EXPECT_EQ(dump->flight_reason, "a test");
  EXPECT_EQ(flight.dumps(), 1u);
  EXPECT_EQ(on_this_thread(*dump, "flight-recorder-step").steps, (std::vector<std::int64_t>{2, 3, 4}))
      << "the two steps kept, and the step in progress so far";
  EXPECT_EQ(on_this_thread(*dump, "flight-recorder-step").ranges, 2);
  EXPECT_GE(dump->drained.clipped_open, 1u);

  window.close_step(4);
  EXPECT_EQ(flight.end_step(4), std::nullopt);
  flight.number_step(5);
  window.open_step(5, /*marks_steps=*/true);
  flight.step_opened();
  { DLPROF_RANGE("flight-recorder-step"); }
  window.close_step(5);
  EXPECT_EQ(flight.end_step(5), std::nullopt);
  flight.number_step(6);
  const std::shared_ptr<ClosedWindow> next = flight.dump("again", 6);
  EXPECT_EQ(on_this_thread(*next, "flight-recorder-step").steps, (std::vector<std::int64_t>{5}))
      << "the next dump holds the steps begun after the last one";
  EXPECT_EQ(on_this_thread(*next, "flight-recorder-step").ranges, 1);
  flight.stop();
  EXPECT_EQ(dlprof::detail::g_crash_target.load(), nullptr) << "a stopped recorder leaves nothing for a crash";
}

// The rings are the flight log: a step copies nothing out of them and frees, in place, the steps
// no longer kept.
TEST(FlightRecorderAloneTest, AStepCopiesNothingAndFreesTheStepsNoLongerKept) {
  set_up_recording();
  ProfilerOptions options;
  options.flight_steps(2).slow_step_factor(0);
  dlprof::detail::WindowRecorder window(options);
  dlprof::detail::FlightRecorder flight(window, options);
  flight.start(0, dlprof::detail::fork_generation(), nullptr, nullptr);
  const dlprof::detail::ThreadRing* ring = dlprof::detail::current_ring();
  ASSERT_NE(ring, nullptr);
  std::vector<std::size_t> held;  // events the ring holds after each step
  for (std::int64_t step = 0; step < 6; ++step) {
    window.open_step(step, /*marks_steps=*/true);
    flight.step_opened();
    for (int i = 0; i < 10; ++i) {
      DLPROF_RANGE("flight-log-range");
    }
    window.close_step(step);
    EXPECT_EQ(flight.end_step(step), std::nullopt);
    flight.number_step(step + 1);
    held.push_back(ring->pending());
  }
  EXPECT_GE(held[0], 11u) << "the step's ranges and its step stay in the ring";
  EXPECT_GE(held[1], 22u);
  for (std::size_t step = 2; step < held.size(); ++step)
    EXPECT_EQ(held[step], held[1]) << "two steps kept: the one before them is freed at step " << step;
  const std::shared_ptr<ClosedWindow> dump = flight.dump("a test", 6);
  EXPECT_EQ(on_this_thread(*dump, "flight-log-range").steps, (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(on_this_thread(*dump, "flight-log-range").ranges, 20);
  EXPECT_EQ(ring->pending(), 0u) << "a dump empties the rings";
  flight.stop();
}

TEST(OnDemandCaptureTest, ACaptureOfStepsWarmsUpRecordsAndEndsWithTheOptionsItChangedRestored) {
  ProfilerOptions options;
  options.record_shapes(false);
  dlprof::detail::OnDemandCapture capture(options);
  EXPECT_EQ(capture.action(11), Action::None);
  EXPECT_FALSE(capture.capturing());

  dlprof::detail::CaptureRequest request;
  request.steps = 2;
  request.record_shapes = true;
  request.source = "a test";
  EXPECT_FALSE(capture.begin(request, 10)) << "a capture of steps begins at the next step, not now";
  EXPECT_TRUE(capture.capturing());
  EXPECT_TRUE(options.record_shapes()) << "the request's options hold for its window";
  EXPECT_EQ(capture.action(11), Action::Warmup);
  EXPECT_EQ(capture.action(12), Action::Record);
  EXPECT_EQ(capture.action(13), Action::RecordAndSave);
  EXPECT_EQ(capture.action(14), Action::None);
  EXPECT_TRUE(capture.running(13));
  EXPECT_FALSE(capture.running(14));
  EXPECT_EQ(capture.refusal(request), "capture asked by a test refused: the capture of steps 12 to 13 is still running");

  capture.end();
  EXPECT_FALSE(options.record_shapes()) << "the Profiler's own options again";
  EXPECT_FALSE(capture.capturing());
}

TEST(OnDemandCaptureTest, ATimedCaptureRecordsFromNowUntilItIsDueAndAProgramWithoutStepsIsNoticed) {
  ProfilerOptions options;
  dlprof::detail::OnDemandCapture capture(options);
  const std::int64_t now = dlprof::detail::clock_ns(CLOCK_MONOTONIC);
  capture.stepped(now);
  EXPECT_FALSE(capture.without_steps(now + dlprof::detail::OnDemandCapture::kNoStepsNs - 1));
  EXPECT_TRUE(capture.without_steps(now + dlprof::detail::OnDemandCapture::kNoStepsNs));

  dlprof::detail::CaptureRequest request;
  request.duration_ns = 5'000'000'000;
  request.source = "a test";
  EXPECT_TRUE(capture.begin(request, 3)) << "a timed capture begins now";
  EXPECT_EQ(capture.action(4), Action::Record);
  EXPECT_TRUE(capture.running(1'000));
  EXPECT_FALSE(capture.timed_capture_due(now));
  EXPECT_TRUE(capture.timed_capture_due(now + 6'000'000'000));
  EXPECT_EQ(capture.refusal(request), "capture asked by a test refused: a timed capture is still running");
  capture.end_timed();
  capture.end();
  EXPECT_FALSE(capture.running(4));
  EXPECT_EQ(capture.action(4), Action::None);
}

TEST(WatcherTest, LooksWhenWokenAndStopsOnceItsLookIsDone) {
  std::atomic<int> looks{0};
  dlprof::detail::Watcher watcher;
  watcher.wake();  // before it runs: nothing to wake, and no harm
  watcher.start([&looks] { looks.fetch_add(1); });
  watcher.start([] { ADD_FAILURE() << "a second start() keeps the first look"; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (looks.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    watcher.wake();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(looks.load(), 1);
  watcher.stop();
  const int after_stop = looks.load();
  std::this_thread::sleep_for(2 * dlprof::detail::Watcher::kPeriod);
  EXPECT_EQ(looks.load(), after_stop) << "a stopped watcher looks no more";
  watcher.stop();  // again: nothing to do
}

}  // namespace profiler_parts_test
