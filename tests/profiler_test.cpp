#include <dlprof/profiler.hpp>
#include <dlprof/export/chrome_trace.hpp>

#include "test_files.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using dlprof_test::file_names;
using dlprof_test::os_tid;
using dlprof_test::read_file;
using dlprof_test::read_gzip;
using dlprof_test::TempDir;

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

// ProfilerStep#N names of a trace, in trace order.
std::vector<std::string> step_names(const dlprof::Trace& trace) {
  std::vector<std::string> names;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Step) names.emplace_back(trace.name_of(event));
  return names;
}

// Names of the user ranges of a trace (ProfilerStep excluded).
std::multiset<std::string> range_names(const dlprof::Trace& trace) {
  std::multiset<std::string> names;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Range) names.emplace(trace.name_of(event));
  return names;
}

// Runs a training loop under a schedule and records every on_trace_ready call as
// "<step()|stop()> at step <step_num()>: <ProfilerStep names>", so a whole run compares as one list.
class ScheduledRun {
 public:
  explicit ScheduledRun(dlprof::Schedule schedule)
      : prof_(dlprof::ProfilerOptions{}.schedule(schedule).on_trace_ready([this](const dlprof::Trace& trace) {
          calls_.push_back(fmt::format("{} at step {}: {}", stopping_ ? "stop()" : "step()", prof_.step_num(),
                                       fmt::join(step_names(trace), " ")));
          traces_.push_back(trace);
        })) {}

  // start(), then `steps` iterations of work each followed by step(), then the work of step
  // `steps` and stop(). Iteration i's work is a range named "iteration i".
  void run(int steps) {
    prof_.start();
    for (int i = 0; i < steps; ++i) {
      work(i);
      prof_.step();
    }
    work(steps);
    stopping_ = true;
    prof_.stop();
  }

  const std::vector<std::string>& calls() const { return calls_; }
  const std::vector<dlprof::Trace>& traces() const { return traces_; }
  const dlprof::Profiler& profiler() const { return prof_; }

 private:
  static void work(int iteration) { DLPROF_RANGE_F("iteration {}", iteration); }

  bool stopping_ = false;
  std::vector<std::string> calls_;
  std::vector<dlprof::Trace> traces_;
  dlprof::Profiler prof_;
};

// --- the schedule state machine (docs/trace-format.md §1.2) -------------------------------------------

TEST(ProfilerScheduleTest, TorchWorkedExampleSavesTwoCyclesInTheRightStepCalls) {
  // skip_first=2, wait=1, warmup=1, active=2, repeat=2: NONE NONE NONE WARMUP RECORD RECORD_AND_SAVE
  // NONE WARMUP RECORD RECORD_AND_SAVE NONE...
  ScheduledRun run(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/2, /*skip_first=*/2));
  run.run(14);
  EXPECT_THAT(run.calls(), ElementsAre("step() at step 6: ProfilerStep#4 ProfilerStep#5",
                                       "step() at step 10: ProfilerStep#8 ProfilerStep#9"));
  EXPECT_EQ(run.profiler().step_num(), 14);
}

TEST(ProfilerScheduleTest, SkipFirstWaitUsesAbsoluteStepNumbers) {
  // docs/trace-format.md §1.1: steps 0-2 NONE, 3 WARMUP, 4 RECORD, 5 RECORD_AND_SAVE, then NONE.
  ScheduledRun run(dlprof::schedule(/*wait=*/2, /*warmup=*/1, /*active=*/2, /*repeat=*/1, /*skip_first=*/3,
                                    /*skip_first_wait=*/true));
  run.run(12);
  EXPECT_THAT(run.calls(), ElementsAre("step() at step 6: ProfilerStep#4 ProfilerStep#5"));
}

TEST(ProfilerScheduleTest, RepeatZeroCyclesUntilStoppedAndSavesThePartialCycle) {
  // Period 4: NONE WARMUP RECORD RECORD_AND_SAVE, forever. Stopped at step 14, a RECORD step.
  ScheduledRun run(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/0));
  run.run(14);
  EXPECT_THAT(run.calls(), ElementsAre("step() at step 4: ProfilerStep#2 ProfilerStep#3",
                                       "step() at step 8: ProfilerStep#6 ProfilerStep#7",
                                       "step() at step 12: ProfilerStep#10 ProfilerStep#11",
                                       "stop() at step 14: ProfilerStep#14"));
}

TEST(ProfilerScheduleTest, ActiveOneSavesEveryCycle) {
  // Period 3: NONE WARMUP RECORD_AND_SAVE, twice.
  ScheduledRun run(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/1, /*repeat=*/2));
  run.run(9);
  EXPECT_THAT(run.calls(), ElementsAre("step() at step 3: ProfilerStep#2", "step() at step 6: ProfilerStep#5"));
}

TEST(ProfilerScheduleTest, ActiveOneWithoutWaitOrWarmupSavesEveryStep) {
  // Every step is RECORD_AND_SAVE, including the one still open at stop().
  ScheduledRun run(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/1));
  run.run(4);
  EXPECT_THAT(run.calls(), ElementsAre("step() at step 1: ProfilerStep#0", "step() at step 2: ProfilerStep#1",
                                       "step() at step 3: ProfilerStep#2", "step() at step 4: ProfilerStep#3",
                                       "stop() at step 4: ProfilerStep#4"));
}

TEST(ProfilerScheduleTest, WarmupStepsAreNeverInTheTrace) {
  ScheduledRun run(dlprof::schedule(/*wait=*/0, /*warmup=*/2, /*active=*/2, /*repeat=*/1));
  run.run(6);
  ASSERT_THAT(run.traces(), SizeIs(1));
  const dlprof::Trace& trace = run.traces()[0];
  EXPECT_THAT(step_names(trace), ElementsAre("ProfilerStep#2", "ProfilerStep#3"));
  EXPECT_EQ(range_names(trace), (std::multiset<std::string>{"iteration 2", "iteration 3"}));
}

TEST(ProfilerScheduleTest, EachRangeLiesInsideItsProfilerStep) {
  ScheduledRun run(dlprof::schedule(/*wait=*/1, /*warmup=*/0, /*active=*/3, /*repeat=*/1));
  run.run(5);
  ASSERT_THAT(run.traces(), SizeIs(1));
  const dlprof::Trace& trace = run.traces()[0];
  for (const dlprof::TraceEvent& range : trace.events) {
    if (range.kind != dlprof::EventKind::Range) continue;
    const std::string expected_step = fmt::format("ProfilerStep#{}", std::string(trace.name_of(range)).substr(10));
    int enclosing = 0;
    for (const dlprof::TraceEvent& step : trace.events)
      if (step.kind == dlprof::EventKind::Step && step.start_ns <= range.start_ns && range.end_ns <= step.end_ns) {
        EXPECT_EQ(trace.name_of(step), expected_step);
        ++enclosing;
      }
    EXPECT_EQ(enclosing, 1) << trace.name_of(range);
  }
  EXPECT_EQ(range_names(trace), (std::multiset<std::string>{"iteration 1", "iteration 2", "iteration 3"}));
}

TEST(ProfilerScheduleTest, StopWhileRecordingSavesThePartialCycle) {
  // WARMUP, RECORD, RECORD, RECORD_AND_SAVE: stopped during the second RECORD step.
  ScheduledRun run(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/3, /*repeat=*/1));
  run.run(2);
  EXPECT_THAT(run.calls(), ElementsAre("stop() at step 2: ProfilerStep#1 ProfilerStep#2"));
  ASSERT_THAT(run.traces(), SizeIs(1));
  EXPECT_EQ(range_names(run.traces()[0]), (std::multiset<std::string>{"iteration 1", "iteration 2"}));
}

TEST(ProfilerScheduleTest, StopDuringRecordAndSaveStepSavesIt) {
  ScheduledRun run(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/3, /*repeat=*/1));
  run.run(3);
  EXPECT_THAT(run.calls(), ElementsAre("stop() at step 3: ProfilerStep#1 ProfilerStep#2 ProfilerStep#3"));
}

TEST(ProfilerScheduleTest, StopDuringWarmupSavesNothing) {
  ScheduledRun run(dlprof::schedule(/*wait=*/1, /*warmup=*/2, /*active=*/2));
  run.run(2);  // step 2 is the second warm-up step
  EXPECT_THAT(run.calls(), IsEmpty());
  EXPECT_EQ(run.profiler().last_trace(), nullptr);
  EXPECT_FALSE(run.profiler().started());
}

TEST(ProfilerScheduleTest, StopDuringWaitSavesNothing) {
  ScheduledRun run(dlprof::schedule(/*wait=*/3, /*warmup=*/1, /*active=*/2));
  run.run(1);
  EXPECT_THAT(run.calls(), IsEmpty());
  EXPECT_EQ(run.profiler().last_trace(), nullptr);
}

TEST(ProfilerScheduleTest, StopInALaterCyclesWarmupSavesNothingMore) {
  // WARMUP RECORD_AND_SAVE WARMUP: cycle 1 saves; the work of step 2 (warm-up) is in no trace.
  ScheduledRun run(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/1));
  run.run(2);
  EXPECT_THAT(run.calls(), ElementsAre("step() at step 2: ProfilerStep#1"));
  ASSERT_THAT(run.traces(), SizeIs(1));
  EXPECT_EQ(range_names(run.traces()[0]), (std::multiset<std::string>{"iteration 1"}));
}

TEST(ProfilerScheduleTest, NoEventLeaksFromOneWindowIntoTheNext) {
  // NONE RECORD RECORD_AND_SAVE NONE RECORD RECORD_AND_SAVE NONE.
  std::vector<dlprof::Trace> traces;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/0, /*active=*/2, /*repeat=*/2))
                            .on_trace_ready([&](const dlprof::Trace& trace) { traces.push_back(trace); }));
  prof.start();
  for (int i = 0; i < 7; ++i) {
    // Open across step(): "straddling 2" and "straddling 5" are open when their window closes,
    // so they end at its end in their trace, and their own late events go to no trace.
    DLPROF_RANGE_F("straddling {}", i);
    { DLPROF_RANGE_F("iteration {}", i); }
    prof.step();
  }
  prof.stop();

  ASSERT_THAT(traces, SizeIs(2));
  EXPECT_THAT(step_names(traces[0]), ElementsAre("ProfilerStep#1", "ProfilerStep#2"));
  EXPECT_EQ(range_names(traces[0]), (std::multiset<std::string>{"iteration 1", "iteration 2", "straddling 1", "straddling 2"}));
  EXPECT_THAT(step_names(traces[1]), ElementsAre("ProfilerStep#4", "ProfilerStep#5"));
  EXPECT_EQ(range_names(traces[1]), (std::multiset<std::string>{"iteration 4", "iteration 5", "straddling 4", "straddling 5"}));
  for (const dlprof::Trace& trace : traces) {
    for (const dlprof::TraceEvent& event : trace.events) {
      EXPECT_GE(event.start_ns, trace.window_start_ns) << trace.name_of(event);
      EXPECT_LE(event.start_ns, trace.window_end_ns) << trace.name_of(event);
    }
  }
  EXPECT_LE(traces[0].window_end_ns, traces[1].window_start_ns);
}

// --- without a schedule -------------------------------------------------------------------------

TEST(ProfilerTest, WithoutScheduleRecordsStartToStopWithoutProfilerSteps) {
  std::vector<dlprof::Trace> traces;
  dlprof::Profiler prof(
      dlprof::ProfilerOptions{}.on_trace_ready([&](const dlprof::Trace& trace) { traces.push_back(trace); }));
  prof.start();
  for (int i = 0; i < 4; ++i) {
    { DLPROF_RANGE_F("unscheduled {}", i); }
    prof.step();
  }
  EXPECT_THAT(traces, IsEmpty()) << "without a schedule the trace is saved only at stop()";
  prof.stop();
  ASSERT_THAT(traces, SizeIs(1));
  EXPECT_THAT(step_names(traces[0]), IsEmpty());
  EXPECT_EQ(range_names(traces[0]),
            (std::multiset<std::string>{"unscheduled 0", "unscheduled 1", "unscheduled 2", "unscheduled 3"}));
}

TEST(ProfilerTest, DefaultProfilerKeepsTheLastTraceAndItsSummary) {
  dlprof::Profiler prof;
  EXPECT_EQ(prof.last_trace(), nullptr);
  prof.start();
  { DLPROF_RANGE("default_profiler_range"); }
  prof.stop();
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->pid, ::getpid());
  EXPECT_LE(trace->window_start_ns, trace->window_end_ns);
  const dlprof::KeyAverages averages = prof.key_averages();
  const dlprof::KeyAverage* row = averages.find("default_profiler_range");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->calls, 1u);
}

TEST(ProfilerTest, StartingTwiceGivesTwoIndependentWindows) {
  dlprof::Profiler prof;
  prof.start();
  { DLPROF_RANGE("first_window_range"); }
  prof.stop();
  const auto first = prof.last_trace();
  { DLPROF_RANGE("between_windows_range"); }
  prof.start();
  { DLPROF_RANGE("second_window_range"); }
  prof.stop();
  const auto second = prof.last_trace();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(range_names(*first), (std::multiset<std::string>{"first_window_range"}));
  EXPECT_EQ(range_names(*second), (std::multiset<std::string>{"second_window_range"}));
}

// torch.profiler counts step() calls since the profiler was created, across start()/stop().
TEST(ProfilerTest, RestartingKeepsCountingStepsSinceConstruction) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 2)));
  prof.start();
  prof.step();
  prof.stop();
  ASSERT_EQ(prof.step_num(), 1);
  prof.start();
  prof.step();
  prof.step();
  prof.stop();
  EXPECT_EQ(prof.step_num(), 3);
  ASSERT_NE(prof.last_trace(), nullptr);
  EXPECT_THAT(step_names(*prof.last_trace()), ElementsAre("ProfilerStep#2", "ProfilerStep#3"));
}

// Without dlprof::cupti a CUDA request degrades to CPU-only with one warning per process.
TEST(ProfilerTest, CudaWithoutCuptiWarnsOnceAndRecordsCpu) {
  const auto cuda_options = [] { return dlprof::ProfilerOptions{}.activities({dlprof::Activity::CPU, dlprof::Activity::CUDA}); };
  ::testing::internal::CaptureStderr();
  dlprof::Profiler first(cuda_options());
  dlprof::Profiler second(cuda_options());
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(warnings, HasSubstr("dlprof::cupti"));
  EXPECT_EQ(warnings.find("dlprof::cupti"), warnings.rfind("dlprof::cupti")) << warnings;
  second.start();
  { DLPROF_RANGE("cpu_still_recorded"); }
  second.stop();
  ASSERT_NE(second.last_trace(), nullptr);
  EXPECT_NE(second.key_averages().find("cpu_still_recorded"), nullptr);
}

TEST(ProfilerTest, ActivitiesMayBeChosenAtRunTime) {
  std::vector<dlprof::Activity> kinds{dlprof::Activity::CPU};
  const bool device_present = true;  // e.g. torch::cuda::is_available()
  if (device_present) kinds.push_back(dlprof::Activity::CUDA);
  const dlprof::ProfilerOptions options = dlprof::ProfilerOptions{}.activities(kinds);
  EXPECT_THAT(options.activities(), ElementsAre(dlprof::Activity::CPU, dlprof::Activity::CUDA));
  EXPECT_THAT(dlprof::ProfilerOptions{}.activities({dlprof::Activity::CUDA}).activities(),
              ElementsAre(dlprof::Activity::CUDA));
}

TEST(ProfilerTest, RangesOutsideAnyWindowAreNotRecorded) {
  { DLPROF_RANGE("before_start_range"); }
  dlprof::Profiler prof;
  { DLPROF_RANGE("constructed_not_started_range"); }
  prof.start();
  { DLPROF_RANGE("inside_range"); }
  prof.stop();
  ASSERT_NE(prof.last_trace(), nullptr);
  EXPECT_EQ(range_names(*prof.last_trace()), (std::multiset<std::string>{"inside_range"}));
}

// --- handlers -----------------------------------------------------------------------------------

TEST(ProfilerTest, AllHandlersFireInTheOrderGiven) {
  std::vector<int> order;
  std::vector<const dlprof::Trace*> seen;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .on_trace_ready([&](const dlprof::Trace& trace) {
                              order.push_back(1);
                              seen.push_back(&trace);
                            })
                            .on_trace_ready([&](const dlprof::Trace& trace) {
                              order.push_back(2);
                              seen.push_back(&trace);
                            })
                            .on_trace_ready([&](const dlprof::Trace& trace) {
                              order.push_back(3);
                              seen.push_back(&trace);
                            }));
  prof.start();
  prof.stop();
  EXPECT_THAT(order, ElementsAre(1, 2, 3));
  ASSERT_THAT(seen, SizeIs(3));
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[1], seen[2]);
  EXPECT_EQ(seen[0], prof.last_trace().get()) << "every handler sees the one trace last_trace() returns";
}

TEST(ProfilerTest, EmptyHandlerIsRejected) {
  EXPECT_THROW(dlprof::ProfilerOptions{}.on_trace_ready(dlprof::TraceHandler{}), std::invalid_argument);
}

TEST(ProfilerTest, ThrowingHandlerIsRecordedAndTrainingContinues) {
  int later_handler_calls = 0;
  int failures = 0;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/1, /*repeat=*/2))
                            .on_trace_ready([&](const dlprof::Trace&) {
                              throw std::runtime_error(fmt::format("handler failure #{}", ++failures));
                            })
                            .on_trace_ready([&](const dlprof::Trace&) { ++later_handler_calls; }));
  prof.start();
  for (int i = 0; i < 4; ++i) EXPECT_NO_THROW(prof.step());
  EXPECT_NO_THROW(prof.stop());
  EXPECT_EQ(prof.step_num(), 4);
  EXPECT_EQ(later_handler_calls, 2) << "a failing handler must not stop the ones after it";
  EXPECT_THAT(prof.errors(), ElementsAre(HasSubstr("handler failure #1"), HasSubstr("handler failure #2")));
}


// With every handler in the background, windows become traces on the writer thread: step() only
// drains the rings. last_trace() waits for the trace of the window just closed, and a background
// handler asking for it gets its own trace rather than waiting for a later one queued behind it.
TEST(ProfilerTest, TracesBuiltInTheBackgroundAreWaitedForByLastTrace) {
  dlprof::Profiler* profiler = nullptr;
  std::vector<std::string> handled_steps;
  std::vector<bool> handler_saw_its_trace;
  dlprof::Profiler prof(
      dlprof::ProfilerOptions{}
          .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/1, /*repeat=*/2))
          .on_trace_ready(dlprof::TraceHandler(
              [&](const dlprof::Trace& trace) {
                // Slow enough that the next window closes while this one is still being handled.
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                handler_saw_its_trace.push_back(profiler->last_trace().get() == &trace);
                for (const dlprof::TraceEvent& event : trace.events)
                  if (event.kind == dlprof::EventKind::Step) handled_steps.emplace_back(trace.name_of(event));
              },
              /*run_in_background=*/true)));
  profiler = &prof;
  prof.start();
  prof.step();
  prof.step();
  const std::shared_ptr<const dlprof::Trace> second = prof.last_trace();
  ASSERT_NE(second, nullptr);
  EXPECT_THAT(step_names(*second), ElementsAre("ProfilerStep#1"))
      << "last_trace() right after step() is the window that step closed, built or waited for";
  prof.stop();
  EXPECT_THAT(handled_steps, ElementsAre("ProfilerStep#0", "ProfilerStep#1"));
  EXPECT_THAT(handler_saw_its_trace, ElementsAre(true, true));
}
// --- threads ------------------------------------------------------------------------------------

TEST(ProfilerTest, ProfilerStepsAreOnTheThreadCallingStep) {
  std::int64_t loop_tid = 0;
  std::shared_ptr<const dlprof::Trace> trace;
  std::thread training([&] {
    loop_tid = os_tid();
    dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 3, 1)));
    prof.start();
    for (int i = 0; i < 3; ++i) prof.step();
    prof.stop();
    trace = prof.last_trace();
  });
  training.join();
  ASSERT_NE(trace, nullptr);
  ASSERT_NE(loop_tid, os_tid());
  int steps = 0;
  for (const dlprof::TraceEvent& event : trace->events) {
    if (event.kind != dlprof::EventKind::Step) continue;
    ++steps;
    EXPECT_EQ(trace->threads.at(event.thread).os_tid, loop_tid) << trace->name_of(event);
  }
  EXPECT_EQ(steps, 3);
}

TEST(ProfilerTest, RangesOfOtherThreadsCarryTheirTidAndName) {
  std::int64_t named_first_tid = 0;
  std::int64_t named_later_tid = 0;
  dlprof::Profiler prof;
  prof.start();
  std::thread named_first([&] {
    named_first_tid = os_tid();
    // Longer than the 15 characters the OS keeps: the trace has the full name.
    dlprof::set_thread_name("profiler-data-loader-0");
    DLPROF_RANGE("profiler_load_batch");
  });
  std::thread named_later([&] {
    named_later_tid = os_tid();
    { DLPROF_RANGE("profiler_before_rename"); }
    dlprof::set_thread_name("profiler-renamed");
    DLPROF_RANGE("profiler_after_rename");
  });
  named_first.join();
  named_later.join();
  { DLPROF_RANGE("profiler_main_range"); }
  prof.stop();

  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  std::map<std::string, std::int64_t> tid_of_range;
  for (const dlprof::TraceEvent& event : trace->events)
    tid_of_range[std::string(trace->name_of(event))] = trace->threads.at(event.thread).os_tid;
  EXPECT_EQ(tid_of_range.at("profiler_load_batch"), named_first_tid);
  EXPECT_EQ(tid_of_range.at("profiler_before_rename"), named_later_tid);
  EXPECT_EQ(tid_of_range.at("profiler_after_rename"), named_later_tid);
  EXPECT_EQ(tid_of_range.at("profiler_main_range"), os_tid());

  std::map<std::int64_t, std::string> thread_names;
  for (const dlprof::ThreadInfo& thread : trace->threads) thread_names[thread.os_tid] = thread.name;
  EXPECT_EQ(thread_names.at(named_first_tid), "profiler-data-loader-0");
  EXPECT_EQ(thread_names.at(named_later_tid), "profiler-renamed");
}

// --- misuse and lifetime ------------------------------------------------------------------------

TEST(ProfilerTest, OnlyOneProfilerMayBeStarted) {
  dlprof::Profiler first;
  dlprof::Profiler second;
  first.start();
  EXPECT_THROW(second.start(), std::logic_error);
  EXPECT_THROW(first.start(), std::logic_error);
  EXPECT_FALSE(second.started());
  first.stop();
  EXPECT_NO_THROW(second.start());
  EXPECT_TRUE(second.started());
  second.stop();
}

TEST(ProfilerTest, StepBeforeStartThrows) {
  dlprof::Profiler prof;
  EXPECT_THROW(prof.step(), std::logic_error);
  prof.start();
  prof.stop();
  EXPECT_THROW(prof.step(), std::logic_error) << "step() after stop() is misuse too";
}

TEST(ProfilerTest, ProfilingScopeStopsOnScopeExit) {
  int calls = 0;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.on_trace_ready([&](const dlprof::Trace&) { ++calls; }));
  {
    const dlprof::ProfilingScope scope(prof);
    EXPECT_TRUE(prof.started());
    DLPROF_RANGE("profiling_scope_range");
  }
  EXPECT_FALSE(prof.started());
  EXPECT_EQ(calls, 1);
  ASSERT_NE(prof.last_trace(), nullptr);
  EXPECT_EQ(range_names(*prof.last_trace()), (std::multiset<std::string>{"profiling_scope_range"}));
}

TEST(ProfilerTest, DestructorStopsAStartedProfiler) {
  int calls = 0;
  {
    dlprof::Profiler prof(dlprof::ProfilerOptions{}.on_trace_ready([&](const dlprof::Trace&) { ++calls; }));
    prof.start();
    EXPECT_EQ(calls, 0);
  }
  EXPECT_EQ(calls, 1);
  // The destroyed profiler released the process-wide slot.
  dlprof::Profiler next;
  EXPECT_NO_THROW(next.start());
  next.stop();
}

// --- ring capacity ------------------------------------------------------------------------------

TEST(ProfilerTest, EventsPerThreadBelowTwoIsRejected) {
  EXPECT_THROW(dlprof::ProfilerOptions{}.events_per_thread(1), std::invalid_argument);
  EXPECT_THROW(dlprof::ProfilerOptions{}.events_per_thread(0), std::invalid_argument);
  EXPECT_EQ(dlprof::ProfilerOptions{}.events_per_thread(2).events_per_thread(), 2u);
  EXPECT_THROW(dlprof::ProfilerOptions{}.events_per_thread(dlprof::ProfilerOptions::kMaxEventsPerThread + 1),
               std::invalid_argument);
}

TEST(ProfilerTest, NameTableBytesOutOfRangeIsRejected) {
  EXPECT_THROW(dlprof::ProfilerOptions{}.name_table_bytes(0), std::invalid_argument);
  EXPECT_THROW(dlprof::ProfilerOptions{}.name_table_bytes(dlprof::ProfilerOptions::kMinNameTableBytes - 1),
               std::invalid_argument);
  EXPECT_THROW(dlprof::ProfilerOptions{}.name_table_bytes(dlprof::detail::kMaxNameTableBytes + 1), std::invalid_argument);
  EXPECT_EQ(dlprof::ProfilerOptions{}.name_table_bytes(1 << 20).name_table_bytes(), std::size_t{1} << 20);
  EXPECT_EQ(dlprof::ProfilerOptions{}.name_table_bytes(), dlprof::detail::kDefaultNameTableBytes);
}

TEST(ProfilerTest, FullRingCountsExactlyTheDroppedEvents) {
  const TempDir dir;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.events_per_thread(64).on_trace_ready(
      [&](const dlprof::Trace& trace) { dlprof::save_chrome_trace(trace, (dir.path() / "dropped.json").string()); }));
  prof.start();
  for (int i = 0; i < 100; ++i) {
    DLPROF_RANGE("profiler_ring_filler");
  }
  prof.stop();
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->events.size(), 64u);
  EXPECT_EQ(trace->dropped_events, 100u - 64u);
  EXPECT_EQ(json::parse(read_file(dir.path() / "dropped.json")).at("dlprof_dropped_events"), 100 - 64);
  EXPECT_EQ(prof.key_averages().dropped_events(), 100u - 64u);
}

TEST(ProfilerTest, RingCapacityIsRoundedUpToAPowerOfTwo) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.events_per_thread(40));
  prof.start();
  for (int i = 0; i < 100; ++i) {
    DLPROF_RANGE("profiler_rounded_filler");
  }
  prof.stop();
  ASSERT_NE(prof.last_trace(), nullptr);
  EXPECT_EQ(prof.last_trace()->events.size(), 64u);
  EXPECT_EQ(prof.last_trace()->dropped_events, 36u);
}

TEST(ProfilerTest, DefaultCapacityIsRestoredForTheNextProfiler) {
  {
    dlprof::Profiler small(dlprof::ProfilerOptions{}.events_per_thread(4));
    small.start();
    small.stop();
  }
  dlprof::Profiler prof;
  prof.start();
  for (int i = 0; i < 100; ++i) {
    DLPROF_RANGE("profiler_default_capacity");
  }
  prof.stop();
  ASSERT_NE(prof.last_trace(), nullptr);
  EXPECT_EQ(prof.last_trace()->events.size(), 100u);
  EXPECT_EQ(prof.last_trace()->dropped_events, 0u);
}

// --- tensorboard_trace_handler ------------------------------------------------------------------

TEST(ProfilerTensorboardHandlerTest, WritesTorchNamedFileIntoANewNestedDirectory) {
  const TempDir tmp;
  const fs::path dir = tmp.path() / "runs" / "exp1";
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/2, /*repeat=*/1))
                            .on_trace_ready(dlprof::tensorboard_trace_handler(dir.string(), "worker0")));
  prof.start();
  for (int i = 0; i < 3; ++i) {
    { DLPROF_RANGE("tensorboard_range"); }
    prof.step();
  }
  prof.stop();
  EXPECT_THAT(prof.errors(), IsEmpty());

  ASSERT_TRUE(fs::is_directory(dir));
  const std::vector<std::string> files = file_names(dir);
  ASSERT_THAT(files, SizeIs(1)) << "one trace, and no temporary file left behind";
  EXPECT_TRUE(std::regex_match(files[0], std::regex(R"(^worker0\.\d{19}\.pt\.trace\.json$)"))) << files[0];

  const json document = json::parse(read_file(dir / files[0]));
  EXPECT_EQ(document.at("traceName"), (dir / files[0]).string());
  std::set<std::string> names;
  for (const json& event : document.at("traceEvents")) names.insert(event.at("name").get<std::string>());
  EXPECT_THAT(names, AllOf(Contains("ProfilerStep#0"), Contains("ProfilerStep#1"), Contains("tensorboard_range"),
                           Not(Contains("ProfilerStep#2"))));
}

TEST(ProfilerTensorboardHandlerTest, DefaultWorkerNameIsHostnameUnderscorePid) {
  const TempDir tmp;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.on_trace_ready(dlprof::tensorboard_trace_handler(tmp.path().string())));
  prof.start();
  prof.stop();
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::vector<std::string> files = file_names(tmp.path());
  ASSERT_THAT(files, SizeIs(1));
  const std::string prefix = fmt::format("{}_{}", host, ::getpid());
  EXPECT_TRUE(std::regex_match(files[0].substr(prefix.size()), std::regex(R"(^\.\d{19}\.pt\.trace\.json$)")))
      << files[0];
  EXPECT_EQ(files[0].substr(0, prefix.size()), prefix);
}

TEST(ProfilerTensorboardHandlerTest, GzipVariantWritesACompressedTrace) {
  const TempDir tmp;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.on_trace_ready(
      dlprof::tensorboard_trace_handler(tmp.path().string(), "gzworker", /*gzip=*/true)));
  prof.start();
  { DLPROF_RANGE("tensorboard_gzip_range"); }
  prof.stop();
  const std::vector<std::string> files = file_names(tmp.path());
  ASSERT_THAT(files, SizeIs(1));
  EXPECT_TRUE(std::regex_match(files[0], std::regex(R"(^gzworker\.\d{19}\.pt\.trace\.json\.gz$)"))) << files[0];
  const json document = json::parse(read_gzip(tmp.path() / files[0]));
  std::set<std::string> names;
  for (const json& event : document.at("traceEvents")) names.insert(event.at("name").get<std::string>());
  EXPECT_THAT(names, Contains("tensorboard_gzip_range"));
}

TEST(ProfilerTensorboardHandlerTest, StopReturnsOnlyAfterTheBackgroundWriteFinished) {
  const TempDir tmp;
  std::thread::id handler_thread;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .on_trace_ready(dlprof::TraceHandler(
                                [&](const dlprof::Trace&) { handler_thread = std::this_thread::get_id(); },
                                /*run_in_background=*/true))
                            .on_trace_ready(dlprof::tensorboard_trace_handler(tmp.path().string(), "sync")));
  prof.start();
  for (int i = 0; i < 1000; ++i) {
    DLPROF_RANGE("tensorboard_background_range");
  }
  prof.stop();
  // No waiting here: the file must already be complete when stop() returns.
  const std::vector<std::string> files = file_names(tmp.path());
  ASSERT_THAT(files, SizeIs(1));
  const json document = json::parse(read_file(tmp.path() / files[0]));
  int ranges = 0;
  for (const json& event : document.at("traceEvents")) ranges += event.at("name") == "tensorboard_background_range";
  EXPECT_EQ(ranges, 1000);
  EXPECT_NE(handler_thread, std::thread::id());
  EXPECT_NE(handler_thread, std::this_thread::get_id()) << "background handlers run off the training thread";
}

TEST(ProfilerTensorboardHandlerTest, UnwritableDirectoryIsReportedAndTrainingContinues) {
  const TempDir tmp;
  // A directory below a regular file cannot be created, even by root.
  std::ofstream(tmp.path() / "file") << "not a directory";
  const std::string bad_dir = (tmp.path() / "file" / "sub").string();
  const fs::path good_dir = tmp.path() / "good";
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/1, /*repeat=*/2))
                            .on_trace_ready(dlprof::tensorboard_trace_handler(bad_dir, "bad"))
                            .on_trace_ready(dlprof::tensorboard_trace_handler(good_dir.string(), "good")));
  prof.start();
  for (int i = 0; i < 4; ++i) EXPECT_NO_THROW(prof.step());
  EXPECT_NO_THROW(prof.stop());
  EXPECT_EQ(prof.step_num(), 4);
  // Both cycles failed for the bad directory and both were written to the good one: the writer
  // thread survives a failure.
  EXPECT_THAT(prof.errors(), ElementsAre(HasSubstr(bad_dir), HasSubstr(bad_dir)));
  EXPECT_THAT(file_names(good_dir), SizeIs(2));
  EXPECT_FALSE(fs::exists(bad_dir));
}

TEST(ProfilerTensorboardHandlerTest, EmptyDirectoryIsRejected) {
  EXPECT_THROW(dlprof::tensorboard_trace_handler(""), std::invalid_argument);
}

TEST(ProfilerOptionsTest, ACrashFileGoesWhereCrashDirectorySaysElseToTheFirstDirectoryHandler) {
  EXPECT_EQ(dlprof::ProfilerOptions{}.crash_file_directory(), std::nullopt) << "no directory: no crash file";
  dlprof::ProfilerOptions handlers;
  handlers.on_trace_ready([](const dlprof::Trace&) {})
      .on_trace_ready(dlprof::tensorboard_trace_handler("/tmp/first", "w1"))
      .on_trace_ready(dlprof::tensorboard_trace_handler("/tmp/second", "w2"));
  ASSERT_TRUE(handlers.crash_file_directory().has_value());
  EXPECT_EQ(handlers.crash_file_directory()->directory, "/tmp/first");
  EXPECT_EQ(handlers.crash_file_directory()->worker, "w1");
  handlers.crash_directory("/tmp/crashes", "rank3");
  EXPECT_EQ(handlers.crash_file_directory()->directory, "/tmp/crashes");
  EXPECT_EQ(handlers.crash_file_directory()->worker, "rank3");
  const auto alone = dlprof::ProfilerOptions{}.crash_directory("/tmp/crashes").crash_file_directory();
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(alone->worker, dlprof::detail::default_worker_name());
  EXPECT_THROW(dlprof::ProfilerOptions{}.crash_directory(""), std::invalid_argument);
}

}  // namespace
