// The flight recorder (DLPROF_MODE=flight-recorder): the last steps kept in fixed memory, and the
// dumps it writes on request, after a slow step, when an exception leaves a ProfilingScope, on
// std::terminate and on a fatal signal. The crash cases run the training loop of
// tests/settings/launched_training.cpp as a child process and judge it by its exit and the trace
// it leaves.
#include <dlprof/detail/control/launched_options.hpp>
#include <dlprof/detail/recording/alternate_signal_stack.hpp>
#include <dlprof/detail/recording/ring_registry.hpp>
#include <dlprof/detail/window/crash_file.hpp>
#include <dlprof/format/flight_log_file.hpp>
#include <dlprof/import/chrome_trace.hpp>
#include <dlprof/profiler.hpp>
#include <dlprof/report.hpp>

#include "launched_training.hpp"
#include "memory_cgroup.hpp"
#include "sanitized.hpp"
#include "test_files.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <sstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using dlprof_test::files_in;
using dlprof_test::launch;
using dlprof_test::Launched;
using dlprof_test::recorded_steps;
using dlprof_test::ScopedEnvironment;
using dlprof_test::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

/// Keeps every trace handed to it.
struct KeptTraces {
  std::vector<std::shared_ptr<const dlprof::Trace>> traces;
  dlprof::TraceHandler handler() {
    return [this](const dlprof::Trace& trace) { traces.push_back(std::make_shared<dlprof::Trace>(trace)); };
  }
};

/// A flight recorder keeping `steps` steps that dumps only when asked: a step that a busy
/// (sanitized) machine slows would otherwise be dumped, and each dump starts the log over. The
/// tests of slow steps set their own factor.
dlprof::ProfilerOptions flight_options(KeptTraces& kept, std::size_t steps) {
  return dlprof::ProfilerOptions{}
      .mode(dlprof::Mode::FlightRecorder)
      .flight_steps(steps)
      .slow_step_factor(0)
      .on_trace_ready(kept.handler());
}

std::size_t count_named(const dlprof::Trace& trace, std::string_view name) {
  return static_cast<std::size_t>(std::count_if(trace.events.begin(), trace.events.end(),
                                                [&](const dlprof::TraceEvent& event) { return trace.names[event.name] == name; }));
}

void flight_steps(dlprof::Profiler& profiler, int steps) {
  for (int i = 0; i < steps; ++i) {
    DLPROF_RANGE("flight_work");
    profiler.step();
  }
}

TEST(FlightRecorderTest, KeepsTheLastStepsAndDumpsThemOnRequest) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 3));
  ASSERT_EQ(profiler.mode(), dlprof::Mode::FlightRecorder);
  EXPECT_FALSE(profiler.dump()) << "not started";
  profiler.start();
  flight_steps(profiler, 10);
  EXPECT_THAT(kept.traces, IsEmpty()) << "nothing is written until a dump";
  {
    DLPROF_RANGE("inside_the_dump");
    EXPECT_TRUE(profiler.dump("asked by the test"));
  }
  ASSERT_EQ(kept.traces.size(), 1u);
  const dlprof::Trace& first = *kept.traces[0];
  EXPECT_EQ(first.flight_recorder_dump, "asked by the test");
  EXPECT_THAT(recorded_steps(first), ElementsAre("ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9", "ProfilerStep#10"))
      << "the last three steps, and the one in progress so far";
  EXPECT_EQ(count_named(first, "inside_the_dump"), 1u) << "a range open at the dump ends there";

  flight_steps(profiler, 2);
  EXPECT_TRUE(profiler.dump());
  ASSERT_EQ(kept.traces.size(), 2u);
  EXPECT_THAT(recorded_steps(*kept.traces[1]), ElementsAre("ProfilerStep#11", "ProfilerStep#12"))
      << "a dump holds the steps after the previous one";
  EXPECT_EQ(kept.traces[1]->flight_recorder_dump, "prof.dump()");
  EXPECT_GE(kept.traces[1]->window_start_ns, first.window_end_ns - 1000) << "dumps do not overlap";
  profiler.stop();
  EXPECT_EQ(kept.traces.size(), 2u) << "stop() writes nothing";
  EXPECT_EQ(profiler.dumps(), 2u);
}

TEST(FlightRecorderTest, ScheduledProfilersDumpNothing) {
  dlprof::Profiler scheduled;
  scheduled.start();
  EXPECT_FALSE(scheduled.dump());
  scheduled.stop();
}

TEST(FlightRecorderTest, ASlowStepIsDumpedWithTheStepsBeforeItAtMostOnceAMinute) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 4).slow_step_factor(20));
  profiler.start();
  const auto run = [&](int steps, int slow_at) {
    for (int i = 0; i < steps; ++i) {
      DLPROF_RANGE("timed_work");
      std::this_thread::sleep_for(std::chrono::milliseconds(i == slow_at ? 400 : 5));
      profiler.step();
    }
  };
  run(21, -1);
  EXPECT_THAT(kept.traces, IsEmpty());
  run(1, 0);  // step 21
  ASSERT_EQ(kept.traces.size(), 1u);
  const dlprof::Trace& dump = *kept.traces[0];
  EXPECT_THAT(dump.flight_recorder_dump, AllOf(StartsWith("slow step 21: "), HasSubstr("the median"), HasSubstr("of the 21 steps before it")));
  EXPECT_THAT(recorded_steps(dump), ElementsAre("ProfilerStep#18", "ProfilerStep#19", "ProfilerStep#20", "ProfilerStep#21"));
  run(3, 1);  // another slow step, within the minute
  EXPECT_EQ(kept.traces.size(), 1u);
  EXPECT_EQ(profiler.slow_steps_not_dumped(), 1u);
  profiler.stop();
}

TEST(FlightRecorderTest, ASlowStepThatTakesARequestIsOneDumpThatNamesBoth) {
  KeptTraces kept;
  const ScopedEnvironment environment(std::vector<std::pair<std::string, std::string>>{{"DLPROF_SIGNAL", "USR1"}});
  dlprof::Profiler profiler(flight_options(kept, 4).slow_step_factor(20));
  profiler.start();
  for (int i = 0; i < 22; ++i) {
    DLPROF_RANGE("timed_work");
    std::this_thread::sleep_for(std::chrono::milliseconds(i == 21 ? 400 : 5));
    if (i == 21) ::raise(SIGUSR1);
    profiler.step();
  }
  profiler.stop();
  ASSERT_EQ(kept.traces.size(), 1u) << "one dump answers the slow step and the signal";
  EXPECT_THAT(kept.traces[0]->flight_recorder_dump, AllOf(StartsWith("slow step 21: "), EndsWith("; the dump signal")));
}

// An allocator's out-of-memory report, then its exception leaving the scope: the dump says what
// was asked for, and holds the report itself.
TEST(FlightRecorderTest, AnOutOfMemoryErrorLeavingTheScopeDumpsWhatWasAskedFor) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 2));
  try {
    dlprof::ProfilingScope scope(profiler);
    flight_steps(profiler, 3);
    DLPROF_RANGE("oversized_batch");
    dlprof::detail::report_out_of_memory(std::int64_t{3} << 30, std::int64_t{5} << 30, std::int64_t{6} << 30,
                                         dlprof::MemoryDeviceType::CUDA, 1);
    throw std::bad_alloc();
  } catch (const std::bad_alloc&) {
  }
  ASSERT_EQ(kept.traces.size(), 1u);
  EXPECT_EQ(kept.traces[0]->flight_recorder_dump, "out of memory: asked 3.00 GiB on CUDA:1; an exception left the ProfilingScope");
  ASSERT_EQ(kept.traces[0]->out_of_memory.size(), 1u);
  const dlprof::OutOfMemoryEvent& failure = kept.traces[0]->out_of_memory[0];
  EXPECT_EQ(failure.bytes, std::int64_t{3} << 30);
  EXPECT_EQ(failure.total_allocated, std::int64_t{5} << 30);
  EXPECT_EQ(failure.total_reserved, std::int64_t{6} << 30);
  EXPECT_EQ(failure.device_type, dlprof::MemoryDeviceType::CUDA);
  EXPECT_EQ(failure.device, 1);

  // A later exception without a report is only an exception.
  try {
    dlprof::ProfilingScope scope(profiler);
    flight_steps(profiler, 2);
    throw std::bad_alloc();
  } catch (const std::bad_alloc&) {
  }
  ASSERT_EQ(kept.traces.size(), 2u);
  EXPECT_EQ(kept.traces[1]->flight_recorder_dump, "an exception left the ProfilingScope");
}

TEST(FlightRecorderTest, AnExceptionLeavingTheScopeDumps) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 2));
  try {
    dlprof::ProfilingScope scope(profiler);
    flight_steps(profiler, 5);
    DLPROF_RANGE("failing_step");
    throw std::runtime_error("loss is NaN");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(profiler.started());
  ASSERT_EQ(kept.traces.size(), 1u);
  EXPECT_EQ(kept.traces[0]->flight_recorder_dump, "an exception left the ProfilingScope");
  EXPECT_EQ(count_named(*kept.traces[0], "failing_step"), 1u);

  {
    dlprof::ProfilingScope scope(profiler);
    flight_steps(profiler, 2);
  }
  EXPECT_EQ(kept.traces.size(), 1u) << "a scope left normally dumps nothing";
}

TEST(FlightRecorderTest, MemoryIsFixedWhenItStartsWhateverTheSteps) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 2).events_per_thread(256));
  profiler.start();
  flight_steps(profiler, 2);  // rings of an earlier capacity are retired as their threads record
  const std::size_t slots = dlprof::detail::RingRegistry::instance().slots_held();
  for (int step = 0; step < 2000; ++step) {
    for (int i = 0; i < 50; ++i) {
      DLPROF_RANGE("small_work");
    }
    profiler.step();
  }
  EXPECT_EQ(dlprof::detail::RingRegistry::instance().slots_held(), slots);
  // Larger steps: the ring (256 events) is the log. It keeps what fits of the last two steps,
  // giving up the older for room, a step that finds it full drops its newest events, and every
  // range of the kept steps is in the dump or counted as dropped.
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 200; ++i) {
      DLPROF_RANGE("small_work");
    }
    profiler.step();
  }
  for (int i = 0; i < 300; ++i) {
    DLPROF_RANGE("small_work");
  }
  profiler.step();
  ASSERT_TRUE(profiler.dump());
  const dlprof::Trace& dump = *kept.traces.back();
  EXPECT_LE(dump.events.size(), 256u + 2);
  EXPECT_GE(count_named(dump, "small_work"), 50u) << "the last step, as far as the ring had room";
  EXPECT_GE(count_named(dump, "small_work") + dump.dropped_events, 500u) << "the two kept steps' ranges, each kept or counted";
  EXPECT_THAT(recorded_steps(dump), Not(IsEmpty()));
  profiler.stop();
}

TEST(FlightRecorderTest, ThreadsRecordWhileStepsDrain) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 3));
  profiler.start();
  std::atomic<bool> done{false};
  // Each step ends once every worker has recorded in it, so that the kept steps hold all five
  // threads however the scheduler (and a sanitizer) delays the workers.
  std::array<std::atomic<std::uint64_t>, 4> items{};
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < items.size(); ++t)
    workers.emplace_back([&done, &items, t] {
      dlprof::set_thread_name("flight worker " + std::to_string(t));
      while (!done.load(std::memory_order_relaxed)) {
        {
          DLPROF_RANGE("worker_item");
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        items[t].fetch_add(1, std::memory_order_release);
      }
    });
  for (int step = 0; step < 50; ++step) {
    DLPROF_RANGE("main_step");
    std::array<std::uint64_t, 4> before{};
    for (std::size_t t = 0; t < items.size(); ++t) before[t] = items[t].load(std::memory_order_acquire);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (std::size_t t = 0; t < items.size(); ++t)
      while (items[t].load(std::memory_order_acquire) == before[t] && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    profiler.step();
  }
  ASSERT_TRUE(profiler.dump());
  done = true;
  for (std::thread& worker : workers) worker.join();
  profiler.stop();
  const dlprof::Trace& dump = *kept.traces.back();
  EXPECT_GE(dump.threads.size(), 5u);
  EXPECT_GT(count_named(dump, "worker_item"), 0u);
  EXPECT_EQ(recorded_steps(dump).size(), 4u);
  for (const dlprof::TraceEvent& event : dump.events) {
    EXPECT_GE(event.start_ns, dump.window_start_ns);
    EXPECT_LE(event.end_ns, dump.window_end_ns);
  }
}

TEST(FlightRecorderTest, SignalsThatArriveTogetherAskOnceAndOneIsTakenPerIntervalTheRestCounted) {
  KeptTraces kept;
  const ScopedEnvironment environment(std::vector<std::pair<std::string, std::string>>{{"DLPROF_SIGNAL", "USR1"}});
  dlprof::Profiler profiler(flight_options(kept, 2));
  ::raise(SIGUSR1);  // before start(): taken by the first step
  ::raise(SIGUSR1);
  profiler.start();
  testing::internal::CaptureStderr();
  flight_steps(profiler, 1);
  ASSERT_EQ(kept.traces.size(), 1u);
  EXPECT_EQ(kept.traces[0]->flight_recorder_dump, "the dump signal");
  EXPECT_EQ(profiler.signals_refused(), 1u) << "two signals before a step ask once";
  ::raise(SIGUSR1);
  flight_steps(profiler, 3);
  EXPECT_EQ(kept.traces.size(), 1u) << "within 10 s of the dump the signal took";
  EXPECT_EQ(profiler.signals_refused(), 2u);
  profiler.stop();
  const std::string warnings = testing::internal::GetCapturedStderr();
  constexpr std::string_view kRefused =
      "1 dump request by signal refused: signals that arrive together ask once, and one request by signal is taken "
      "every 10 s at most";
  const std::size_t first = warnings.find(kRefused);
  ASSERT_NE(first, std::string::npos) << warnings;
  EXPECT_NE(warnings.find(kRefused, first + 1), std::string::npos) << "the rest, when the Profiler stops: " << warnings;
  ::signal(SIGUSR1, SIG_DFL);
}

TEST(FlightRecorderTest, NoStepIsJudgedSlowBeforeTwentyOneHaveEnded) {
  KeptTraces kept;
  // A factor of 20 rather than the default, so that a busy machine stretching one 4 ms step of
  // the steady ones past the rest does not pass for the slow step this test says is not judged.
  dlprof::Profiler profiler(flight_options(kept, 4).slow_step_factor(20));
  profiler.start();
  for (int i = 0; i < 40; ++i) {
    DLPROF_RANGE("timed_work");
    // A warm-up: the first ten steps irregular, the odd ones 30 times the others.
    std::this_thread::sleep_for(std::chrono::milliseconds(i < 10 && i % 2 == 1 ? 120 : 4));
    profiler.step();
  }
  EXPECT_THAT(kept.traces, IsEmpty()) << kept.traces.front()->flight_recorder_dump;
  EXPECT_EQ(profiler.slow_steps_not_dumped(), 0u);
  profiler.stop();
}

TEST(FlightRecorderTest, ASignalWhileADumpIsBeingWrittenAsksForTheNextOne) {
  const ScopedEnvironment environment(std::vector<std::pair<std::string, std::string>>{{"DLPROF_SIGNAL", "USR1"}});
  std::atomic<int> written{0};
  std::atomic<bool> writing{false};
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .mode(dlprof::Mode::FlightRecorder)
                                .flight_steps(2)
                                .on_trace_ready(dlprof::TraceHandler(
                                    [&](const dlprof::Trace&) {  // a slow disk
                                      writing = true;
                                      std::this_thread::sleep_for(std::chrono::milliseconds(200));
                                      ++written;
                                      writing = false;
                                    },
                                    /*run_in_background=*/true)));
  profiler.start();
  flight_steps(profiler, 3);
  ASSERT_TRUE(profiler.dump("first"));
  for (int i = 0; i < 200 && !writing; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(writing) << "the first dump is being written";
  ::raise(SIGUSR1);
  flight_steps(profiler, 1);  // takes the signal: the second dump waits for the writer
  profiler.stop();            // waits for both
  EXPECT_EQ(written, 2);
  EXPECT_EQ(profiler.dumps(), 2u);
  ::signal(SIGUSR1, SIG_DFL);
}

TEST(FlightRecorderTest, TheTriggerFileAsksForADumpAndIsConsumed) {
  TempDir dir;
  const fs::path trigger = dir.path() / "dump-now";
  KeptTraces kept;
  const ScopedEnvironment environment({{"DLPROF_TRIGGER_FILE", trigger.string()}, {"DLPROF_SIGNAL", "none"}});
  dlprof::Profiler profiler(flight_options(kept, 2));
  profiler.start();
  flight_steps(profiler, 2);
  std::ofstream(trigger).flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  flight_steps(profiler, 2);
  ASSERT_EQ(kept.traces.size(), 1u);
  EXPECT_EQ(kept.traces[0]->flight_recorder_dump, "the trigger file");
  EXPECT_FALSE(fs::exists(trigger));
  profiler.stop();
}

TEST(FlightRecorderTest, ACrashFileHoldsTheKeptStepsTheThreadsRangesAndTheirNames) {
  TempDir dir;
  KeptTraces kept;
  dlprof::Profiler profiler(
      flight_options(kept, 2).on_trace_ready(dlprof::tensorboard_trace_handler(dir.path().string(), "crashing worker")));
  profiler.start();
  for (int step = 0; step < 4; ++step) {
    { DLPROF_RANGE_F("formatted {}", step); }
    { DLPROF_RANGE_F("interned {}", std::to_string(step)); }
    profiler.step();
  }
  // Another thread, inside a range as the process dies: its ring and open range are in the file.
  std::atomic<bool> worker_inside{false};
  std::atomic<bool> crashed{false};
  std::thread worker([&] {
    dlprof::set_thread_name("crash worker");
    { DLPROF_RANGE("worker_done_before_crash"); }
    DLPROF_RANGE("worker_open_at_crash");
    worker_inside = true;
    while (!crashed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!worker_inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    DLPROF_RANGE("outer_at_crash");
    DLPROF_RANGE_F("inner at crash {}", 7);
    dlprof::detail::CrashTarget* target = dlprof::detail::g_crash_target.load();
    ASSERT_NE(target, nullptr);
    const bool written = dlprof::detail::write_crash_file(*target, SIGSEGV, "SIGSEGV");
    crashed = true;
    worker.join();
    ASSERT_TRUE(written);
  }
  profiler.stop();
  EXPECT_EQ(dlprof::detail::g_crash_target.load(), nullptr) << "stop() disarms the crash dump";
  std::vector<fs::path> crash_files;
  for (const fs::path& file : files_in(dir.path()))
    if (file.extension() == ".dlprof-crash") crash_files.push_back(file);
  ASSERT_EQ(crash_files.size(), 1u);
  EXPECT_THAT(crash_files[0].filename().string(), StartsWith("crashing worker."));

  const dlprof::Trace trace = dlprof::read_trace(crash_files[0].string());
  EXPECT_EQ(trace.flight_recorder_dump, "SIGSEGV in step 4");
  EXPECT_THAT(recorded_steps(trace), ElementsAre("ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"));
  EXPECT_EQ(count_named(trace, "formatted 2"), 1u) << "formats and their kept arguments are written by the handler";
  EXPECT_EQ(count_named(trace, "interned 3"), 1u) << "interned names are written by the handler";
  EXPECT_EQ(count_named(trace, "outer_at_crash"), 1u) << "ranges open at the crash end there";
  EXPECT_EQ(count_named(trace, "inner at crash 7"), 1u);
  EXPECT_EQ(count_named(trace, "worker_done_before_crash"), 1u) << "every thread's ring is written";
  EXPECT_EQ(count_named(trace, "worker_open_at_crash"), 1u) << "and every thread's open ranges";
  EXPECT_EQ(trace.clipped_ranges, 4u) << "three ranges and the step";
  EXPECT_TRUE(trace.read_result.empty());
  EXPECT_EQ(trace.pid, static_cast<std::int64_t>(::getpid()));

  // dlprof-report's directory read takes the crash file as a window beside the JSON dumps.
  const std::vector<std::vector<dlprof::Trace>> windows = dlprof::read_trace_windows({dir.path().string()});
  EXPECT_EQ(windows.size(), 1u);
}

TEST(FlightRecorderTest, CrashDirectoryTakesTheCrashFileWhereNoHandlerWrites) {
  TempDir dir;
  TempDir handler_dir;
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 2)
                                .on_trace_ready(dlprof::tensorboard_trace_handler(handler_dir.path().string(), "dumps"))
                                .crash_directory((dir.path() / "crashes").string(), "rank 0"));
  profiler.start();
  profiler.step();
  {
    dlprof::detail::CrashTarget* target = dlprof::detail::g_crash_target.load();
    ASSERT_NE(target, nullptr);
    ASSERT_TRUE(dlprof::detail::write_crash_file(*target, SIGABRT, "SIGABRT"));
  }
  profiler.stop();
  const std::vector<fs::path> crash_files = files_in(dir.path() / "crashes");
  ASSERT_EQ(crash_files.size(), 1u);
  EXPECT_THAT(crash_files[0].filename().string(), StartsWith("rank 0."));
  EXPECT_TRUE(files_in(handler_dir.path()).empty()) << "the handler's directory holds no crash file";
  EXPECT_EQ(dlprof::read_trace(crash_files[0].string()).flight_recorder_dump, "SIGABRT in step 1");
}

TEST(FlightRecorderTest, ACutOrDamagedCrashFileReadsWhatItHoldsAndABadOneIsRefused) {
  TempDir dir;
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 2).on_trace_ready(dlprof::tensorboard_trace_handler(dir.path().string())));
  profiler.start();
  flight_steps(profiler, 3);
  ASSERT_TRUE(dlprof::detail::write_crash_file(*dlprof::detail::g_crash_target.load(), SIGABRT, "SIGABRT"));
  profiler.stop();
  fs::path crash_file;
  for (const fs::path& file : files_in(dir.path()))
    if (file.extension() == ".dlprof-crash") crash_file = file;
  ASSERT_FALSE(crash_file.empty());
  const std::string whole = dlprof_test::read_file(crash_file);
  const auto write = [&](const std::string& bytes) {
    const fs::path path = dir.path() / "damaged.dlprof-crash";
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  };

  const dlprof::Trace cut = dlprof::read_trace(write(whole.substr(0, whole.size() - 40)));
  EXPECT_THAT(cut.read_result.notes, ElementsAre(HasSubstr("before its last record")));

  // An event whose kind byte is garbage, as a step() rewriting the log meanwhile would leave.
  std::string damaged = whole;
  const std::size_t events = sizeof(dlprof::detail::CrashHeader) + sizeof(dlprof::detail::CrashRecordHeader) +
                             sizeof(dlprof::detail::FlightThread) + sizeof(dlprof::detail::CrashRecordHeader) +
                             sizeof(dlprof::detail::CrashSlot);
  damaged[events + offsetof(dlprof::detail::Event, kind)] = static_cast<char>(0x7E);
  const dlprof::Trace skipped = dlprof::read_trace(write(damaged));
  EXPECT_EQ(skipped.read_result.skipped_events, 1u);
  EXPECT_THAT(skipped.read_result.first_skip_reason, HasSubstr("unknown kind 126"));

  std::string other_version = whole;
  other_version[8] = 9;
  EXPECT_THAT([&] { dlprof::read_trace(write(other_version)); },
              ::testing::ThrowsMessage<dlprof::TraceReadError>(HasSubstr("crash file of version 9")));
  EXPECT_THROW(dlprof::read_trace(write(whole.substr(0, 20))), dlprof::TraceReadError);
}

// The child processes: a training loop under DLPROF_MODE=flight-recorder.

std::vector<fs::path> files_ending(const fs::path& dir, std::string_view suffix) {
  std::vector<fs::path> found;
  for (const fs::path& file : files_in(dir))
    if (file.string().size() >= suffix.size() && file.string().compare(file.string().size() - suffix.size(), suffix.size(), suffix) == 0)
      found.push_back(file);
  return found;
}

/// Lines of /proc/self/maps: the process's memory mappings.
std::size_t memory_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
}

TEST(AlternateSignalStackTest, EachRecordingThreadHasOneFreedWhenItEndsAndAProgramsOwnIsKept) {
  KeptTraces kept;
  dlprof::Profiler profiler(flight_options(kept, 2));
  profiler.start();
  std::thread([] {
    DLPROF_RANGE("first_range_of_a_thread");
    stack_t stack{};
    ASSERT_EQ(::sigaltstack(nullptr, &stack), 0);
    EXPECT_EQ(stack.ss_flags & SS_DISABLE, 0) << "a thread that records has an alternate signal stack";
    if (!dlprof_test::kSanitized) {  // the sanitizers give every thread a smaller one of their own
      EXPECT_GE(stack.ss_size, dlprof::detail::AlternateSignalStack::kMinBytes);
    }
  }).join();

  static char own_stack[64 * 1024];
  std::thread([] {
    const stack_t own{own_stack, 0, sizeof(own_stack)};
    stack_t before{};  // the sanitizers' own, which they unmap when the thread ends: put back
    ASSERT_EQ(::sigaltstack(&own, &before), 0);
    { DLPROF_RANGE("range_on_a_thread_with_its_own_stack"); }
    stack_t stack{};
    ASSERT_EQ(::sigaltstack(nullptr, &stack), 0);
    EXPECT_EQ(stack.ss_sp, static_cast<void*>(own_stack)) << "the program's stack is kept";
    ::sigaltstack(&before, nullptr);
  }).join();

  const auto churn = [](int threads) {
    for (int i = 0; i < threads; ++i) std::thread([] { DLPROF_RANGE("short_lived_thread"); }).join();
  };
  churn(20);  // rings and their idle pool settle
  const std::size_t before = memory_mappings();
  churn(200);
  EXPECT_LT(memory_mappings(), before + 20) << "each ended thread's alternate stack is unmapped";
  profiler.stop();
}

/// The sanitizers handle SIGSEGV themselves (report, then exit 1); dlprof's handler chains to them.
void expect_died_of(const Launched& run, int signal) {
  if (dlprof_test::kSanitized && signal == SIGSEGV)
    EXPECT_TRUE(run.signal != 0 || (run.status != 0 && run.status != -1)) << run.err;
  else
    EXPECT_EQ(run.signal, signal) << "exit status " << run.status << "\n" << run.err;
}

std::vector<std::string> flight_settings(const fs::path& traces) {
  return {"DLPROF_MODE=flight-recorder", "DLPROF_FLIGHT_STEPS=3", "DLPROF_OUTPUT=" + traces.string(), "DLPROF_WORKER=rank0"};
}

TEST(FlightRecorderCrashTest, ASegfaultInsideARangeLeavesItsLastStepsAndStillKillsTheProcess) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch(flight_settings(traces), dir.path(), 20, {"--crash-at", "12", "segv"});
  expect_died_of(run, SIGSEGV);
  const std::vector<fs::path> crash_files = files_ending(traces, ".dlprof-crash");
  ASSERT_EQ(crash_files.size(), 1u) << run.err;
  const std::vector<dlprof::Trace> set = dlprof::read_trace_set({traces.string()});
  ASSERT_EQ(set.size(), 1u);
  const dlprof::Trace& trace = set[0];
  EXPECT_EQ(trace.flight_recorder_dump, "SIGSEGV in step 12");
  EXPECT_THAT(recorded_steps(trace), ElementsAre("ProfilerStep#9", "ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#12"));
  EXPECT_EQ(count_named(trace, "crash_site"), 1u) << "the range it died in";
  EXPECT_THAT(dlprof::report(trace), HasSubstr("Flight-recorder dump: SIGSEGV in step 12"));
}

TEST(FlightRecorderCrashTest, AStackOverflowOnTheMainThreadOrAnotherLeavesACrashFileAndStillKillsTheProcess) {
  for (const std::string where : {"main", "thread"}) {
    SCOPED_TRACE(where);
    TempDir dir;
    const fs::path traces = dir.path() / "traces";
    const Launched run = launch(flight_settings(traces), dir.path(), 20, {"--overflow-at", "6", where});
    expect_died_of(run, SIGSEGV);
    if (!dlprof_test::kSanitized) {
      EXPECT_EQ(128 + run.signal, 139) << "a shell's exit status, as without dlprof";
    }
    const std::vector<fs::path> crash_files = files_ending(traces, ".dlprof-crash");
    ASSERT_EQ(crash_files.size(), 1u) << "the handler ran on the thread's alternate stack\n" << run.err;
    const dlprof::Trace trace = dlprof::read_trace(crash_files[0].string());
    EXPECT_EQ(trace.flight_recorder_dump, "SIGSEGV in step 6");
    EXPECT_EQ(count_named(trace, "runaway_recursion"), 1u) << "the range it overflowed in";
  }
}

TEST(FlightRecorderCrashTest, AbortLeavesItsLastSteps) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch(flight_settings(traces), dir.path(), 20, {"--crash-at", "6", "abort"});
  expect_died_of(run, SIGABRT);
  ASSERT_EQ(files_ending(traces, ".dlprof-crash").size(), 1u) << run.err;
  const dlprof::Trace trace = dlprof::read_trace(files_ending(traces, ".dlprof-crash")[0].string());
  EXPECT_EQ(trace.flight_recorder_dump, "SIGABRT in step 6");
  EXPECT_EQ(count_named(trace, "crash_site"), 1u);
}

TEST(FlightRecorderCrashTest, TheProgramsOwnHandlerStillRuns) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch(flight_settings(traces), dir.path(), 20, {"--own-handler", "--crash-at", "5", "abort"});
  EXPECT_THAT(run.err, HasSubstr("own handler ran"));
  expect_died_of(run, SIGABRT);
  EXPECT_EQ(files_ending(traces, ".dlprof-crash").size(), 1u) << run.err;
}

TEST(FlightRecorderCrashTest, AnUncaughtExceptionWritesATraceThroughTheHandlers) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch(flight_settings(traces), dir.path(), 20, {"--crash-at", "7", "throw"});
  expect_died_of(run, SIGABRT);
  EXPECT_THAT(files_ending(traces, ".dlprof-crash"), IsEmpty()) << "std::terminate may allocate: a trace, not a crash file";
  const std::vector<fs::path> written = files_ending(traces, ".pt.trace.json");
  ASSERT_EQ(written.size(), 1u) << run.err;
  const dlprof::Trace trace = dlprof::read_trace(written[0].string());
  EXPECT_EQ(trace.flight_recorder_dump, "std::terminate: uncaught exception: loss is NaN");
  EXPECT_THAT(recorded_steps(trace), ElementsAre("ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"));
}

TEST(FlightRecorderCrashTest, ASlowStepIsDumpedFromTheEnvironmentAlone) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  std::vector<std::string> settings = flight_settings(traces);
  settings.push_back("DLPROF_SLOW_STEP_FACTOR=10");
  const Launched run = launch(settings, dir.path(), 28, {"--slow-step", "25"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("mode=flight-recorder"));
  EXPECT_THAT(run.out, HasSubstr("dumps=1"));
  const std::vector<dlprof::Trace> set = dlprof::read_trace_set({traces.string()});
  ASSERT_EQ(set.size(), 1u);
  EXPECT_THAT(set[0].flight_recorder_dump, StartsWith("slow step 25: "));
}

TEST(FlightRecorderCrashTest, AForkedChildNeitherDumpsTheParentsStepsNorHangs) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch(flight_settings(traces), dir.path(), 10, {"--fork-at", "4"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("forked child dumped=false"));
  EXPECT_THAT(run.out, HasSubstr("forked child died of signal"));
  if (!dlprof_test::kSanitized) {
    EXPECT_THAT(run.out, HasSubstr("died of signal 11")) << "SIGSEGV, after dlprof's handler";
  }
  EXPECT_THAT(files_in(traces), IsEmpty()) << "the child's crash writes nothing, and the parent did not crash";
}

TEST(FlightRecorderCrashTest, AnUnwritableDirectoryIsOneErrorAndTrainingGoesOn) {
  TempDir dir;
  const fs::path blocker = dir.path() / "a file";
  std::ofstream(blocker) << "not a directory";
  std::vector<std::string> settings = flight_settings(blocker / "traces");
  settings.push_back("DLPROF_SLOW_STEP_FACTOR=10");
  settings.push_back("DLPROF_SIGNAL=none");
  const Launched run = launch(settings, dir.path(), 28, {"--slow-step", "25"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("dumps=1"));
  EXPECT_THAT(run.err, HasSubstr("a crash will leave no file"));
  EXPECT_THAT(run.err, HasSubstr("cannot create trace directory"));
}

/// Runs the training loop as launch() does, with its files limited to `bytes` (RLIMIT_FSIZE) and
/// SIGXFSZ ignored, both inherited: a write past the limit fails as on a full disk, midway.
Launched launch_on_a_full_disk(const std::vector<std::string>& settings, const fs::path& scratch, int steps,
                               const std::vector<std::string>& arguments, rlim_t bytes) {
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limited = saved;
  limited.rlim_cur = bytes;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction previous {};
  ::sigaction(SIGXFSZ, &ignore, &previous);
  ::setrlimit(RLIMIT_FSIZE, &limited);
  const pid_t child = dlprof_test::spawn_training(settings, scratch, steps, arguments);
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &previous, nullptr);
  Launched result;
  int status = 0;
  if (child != 0 && ::waitpid(child, &status, 0) == child && WIFEXITED(status)) result.status = WEXITSTATUS(status);
  result.out = dlprof_test::read_file(scratch / "stdout.txt");
  result.err = dlprof_test::read_file(scratch / "stderr.txt");
  return result;
}

TEST(FlightRecorderCrashTest, ADiskThatFillsDuringADumpIsOneErrorAndTrainingGoesOn) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  std::vector<std::string> settings = flight_settings(traces);
  settings.push_back("DLPROF_SLOW_STEP_FACTOR=10");
  settings.push_back("DLPROF_SIGNAL=none");
  const Launched run = launch_on_a_full_disk(settings, dir.path(), 28, {"--slow-step", "25"}, 2048);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("dumps=1")) << "training went on to its end";
  std::size_t errors = 0;
  for (std::size_t at = run.err.find("File too large"); at != std::string::npos; at = run.err.find("File too large", at + 1))
    ++errors;
  EXPECT_EQ(errors, 1u) << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot write"));
  EXPECT_THAT(run.err, HasSubstr("the file size limit (RLIMIT_FSIZE, 2048 bytes) is below the flight log's"))
      << "no flight log where the limit would stop it";
  EXPECT_THAT(files_in(traces), IsEmpty()) << "no half-written trace, no temporary file";
}

TEST(FlightRecorderHangTest, AStepThatNeverEndsIsDumpedOnceWhileItRunsNamingTheRangeItWaitsIn) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  std::vector<std::string> settings = flight_settings(traces);
  settings.push_back("DLPROF_SLOW_STEP_FACTOR=3");
  dlprof_test::BackgroundTraining job(settings, dir.path(), 1000, {"--step-ms", "5", "--hang-at", "25"});
  ASSERT_TRUE(job.wait_for_output("hanging", 60)) << job.err();
  const auto hung = std::chrono::steady_clock::now();
  std::vector<fs::path> dumps;
  while (dumps.empty() && std::chrono::steady_clock::now() - hung < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    dumps = files_ending(traces, ".pt.trace.json");
  }
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - hung).count();
  ASSERT_EQ(dumps.size(), 1u) << job.err();
  const dlprof::Trace dump = dlprof::read_trace(dumps[0].string());
  std::vector<double> step_s;
  for (const dlprof::TraceEvent& event : dump.events)
    if (event.kind == dlprof::EventKind::Step && dump.names[event.name] != "ProfilerStep#25")
      step_s.push_back(static_cast<double>(event.end_ns - event.start_ns) / 1e9);
  ASSERT_FALSE(step_s.empty());
  std::sort(step_s.begin(), step_s.end());
  const double limit_s = 3 * step_s[step_s.size() / 2] + 1.0 + (dlprof_test::kSanitized ? 2.0 : 0.0);
  EXPECT_LT(waited_s, limit_s) << "the dump appears within the factor times the median plus a second";
  EXPECT_THAT(dump.flight_recorder_dump,
              AllOf(StartsWith("hang: step 25 has run "), HasSubstr("of the 21 steps before it, and has not ended"),
                    HasSubstr("; the thread calling step() is inside wait_for_peer for "), HasSubstr(", within train_step")));
  EXPECT_THAT(recorded_steps(dump), ElementsAre("ProfilerStep#22", "ProfilerStep#23", "ProfilerStep#24", "ProfilerStep#25"))
      << "the kept steps and the step in progress";
  EXPECT_EQ(count_named(dump, "wait_for_peer"), 1u) << "the open range, ending at the dump";
  const std::string report = dlprof::report(dump);
  EXPECT_THAT(report, HasSubstr("Flight-recorder dump: hang: step 25 has run "));
  std::string flat;  // the report's wrapped lines as one
  for (const char c : report) {
    if (c == '\n' || c == ' ') {
      if (!flat.empty() && flat.back() != ' ') flat += ' ';
    } else {
      flat += c;
    }
  }
  EXPECT_THAT(flat, testing::ContainsRegex("The hung step: ProfilerStep#25 had run [0-9.]+ ms at the dump, [0-9.]+x the median [0-9.]+ ms of "
                                           "the [0-9]+ other steps: wait_for_peer [0-9.]+ ms \\(new\\)"));
  std::istringstream lines(report.substr(report.find("Flight-recorder dump: ")));
  for (std::string line; std::getline(lines, line) && !line.empty();) EXPECT_LE(line.size(), 100u) << line;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(files_ending(traces, ".pt.trace.json").size(), 1u) << "one dump per hang";
  EXPECT_EQ(::kill(job.pid(), 0), 0) << "the job is never killed";
}

// The flight log's file: what a process killed without a handler leaves.

std::vector<fs::path> flight_logs(const fs::path& traces) { return files_ending(traces, ".dlprof-flight"); }

/// flight_settings() with rings of 1024 events: a flight log of 6.3 MiB rather than 132, which the
/// tests copy and damage.
std::vector<std::string> flight_log_settings(const fs::path& traces) {
  std::vector<std::string> settings = flight_settings(traces);
  settings.push_back("DLPROF_EVENTS_PER_THREAD=1024");
  return settings;
}

/// The TraceReadError reading `path` throws, or a failure.
dlprof::TraceReadError flight_read_error(const fs::path& path) {
  try {
    dlprof::read_trace(path.string());
  } catch (const dlprof::TraceReadError& error) {
    return error;
  }
  ADD_FAILURE() << path << " was read";
  return dlprof::TraceReadError(path.string(), "read");
}

/// Runs the training loop in the flight recorder until it hangs in step `hang_at`, checks that its
/// live log is refused, and kills it with SIGKILL. Returns the log it left.
fs::path killed_mid_step(const fs::path& scratch, const fs::path& traces, int hang_at) {
  dlprof_test::BackgroundTraining job(flight_log_settings(traces), scratch, 1000,
                                      {"--step-ms", "5", "--hang-at", std::to_string(hang_at)});
  EXPECT_TRUE(job.wait_for_output("hanging", 60)) << job.err();
  std::vector<fs::path> logs = flight_logs(traces);
  EXPECT_EQ(logs.size(), 1u) << "one flight log while the recorder runs\n" << job.err();
  if (logs.size() != 1) return {};
  EXPECT_THAT(flight_read_error(logs[0]).reason(),
              AllOf(HasSubstr("the flight log of a live process: process "), HasSubstr("still holds it")))
      << "a live log is never read as a dead one";
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the watcher writes the step's new names
  EXPECT_EQ(::kill(job.pid(), SIGKILL), 0);
  const Launched run = job.wait();
  EXPECT_EQ(run.signal, SIGKILL) << run.err;
  return logs[0];
}

TEST(FlightLogTest, AProcessKilledMidStepLeavesItsLastStepsForTheReport) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const fs::path log = killed_mid_step(dir.path(), traces, 12);
  ASSERT_FALSE(log.empty());
  ASSERT_TRUE(fs::exists(log)) << "the kernel keeps the mapping's pages when the process dies";
  const std::vector<dlprof::Trace> set = dlprof::read_trace_set({traces.string()});
  ASSERT_EQ(set.size(), 1u);
  const dlprof::Trace& trace = set[0];
  EXPECT_THAT(trace.flight_recorder_dump,
              AllOf(StartsWith("the process (pid "), HasSubstr(") ended without a dump, last step 11; "),
                    HasSubstr("SIGKILL, the OOM killer, a memory limit")));
  EXPECT_THAT(recorded_steps(trace), ElementsAre("ProfilerStep#9", "ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#12"))
      << "the kept steps, and the step it died in, ending where its log ends";
  EXPECT_EQ(count_named(trace, "wait_for_peer"), 1u) << "the range it was inside";
  EXPECT_EQ(count_named(trace, "train_step"), 4u);
  EXPECT_TRUE(trace.read_result.empty()) << trace.read_result.notes.size();
  EXPECT_THAT(dlprof::report(trace), HasSubstr("Flight-recorder dump: the process (pid "));
}

TEST(FlightLogTest, AProcessKilledForMemoryLeavesItsLastSteps) {
  // A memory cgroup of its own where this test may make one (the kernel's OOM killer ends the
  // process); otherwise RLIMIT_AS, under which the process, refused memory, dies of SIGKILL.
  dlprof_test::MemoryCgroup cgroup(std::string("dlprof_flight_log_") + std::to_string(::getpid()));
  if (!cgroup.made() && dlprof_test::kSanitized)
    GTEST_SKIP() << "no memory cgroup can be made here (" << cgroup.problem()
                 << "), and the sanitizers reserve more address space than RLIMIT_AS would leave";
  ::testing::Test::RecordProperty("memory_limit", cgroup.made() ? "a memory cgroup" : "RLIMIT_AS");
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  dlprof_test::BackgroundTraining job(flight_log_settings(traces), dir.path(), 1000,
                                      {"--step-ms", "20", "--eat-memory-at", "15", cgroup.made() ? "0" : "256"});
  if (cgroup.made()) {
    ASSERT_TRUE(cgroup.limit(job.pid(), std::uint64_t{128} << 20)) << cgroup.problem();
  }
  const Launched run = job.wait();
  EXPECT_EQ(run.signal, SIGKILL) << (cgroup.made() ? "the OOM killer" : "refused memory") << "\n" << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("eating"));
  const std::vector<fs::path> logs = flight_logs(traces);
  ASSERT_EQ(logs.size(), 1u) << run.err;
  const dlprof::Trace trace = dlprof::read_trace(logs[0].string());
  EXPECT_THAT(trace.flight_recorder_dump, HasSubstr("ended without a dump, last step 14"));
  EXPECT_THAT(recorded_steps(trace), ElementsAre("ProfilerStep#12", "ProfilerStep#13", "ProfilerStep#14", "ProfilerStep#15"));
  EXPECT_EQ(count_named(trace, "allocate_batch"), 1u) << "the range it was allocating in";
}

TEST(FlightLogTest, NoLogIsLeftByARecorderThatStopsOrByAProcessThatLeftADump) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched ended = launch(flight_log_settings(traces), dir.path(), 10);
  EXPECT_EQ(ended.status, 0) << ended.err;
  EXPECT_THAT(flight_logs(traces), IsEmpty()) << "the recorder stopped";
  const Launched crashed = launch(flight_log_settings(traces), dir.path(), 20, {"--crash-at", "6", "abort"});
  expect_died_of(crashed, SIGABRT);
  EXPECT_EQ(files_ending(traces, ".dlprof-crash").size(), 1u) << crashed.err;
  EXPECT_THAT(flight_logs(traces), IsEmpty()) << "the crash file holds what the log held";
  const Launched thrown = launch(flight_log_settings(traces), dir.path(), 20, {"--crash-at", "7", "throw"});
  EXPECT_EQ(files_ending(traces, ".pt.trace.json").size(), 1u) << thrown.err;
  EXPECT_THAT(flight_logs(traces), IsEmpty()) << "the dump holds what the log held";
}

TEST(FlightLogTest, AProcessThatCallsExitWithItsRecorderRunningIsSaidToHaveExited) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch(flight_log_settings(traces), dir.path(), 20, {"--exit-at", "7"});
  EXPECT_EQ(run.status, 3) << run.err;
  const std::vector<fs::path> logs = flight_logs(traces);
  ASSERT_EQ(logs.size(), 1u) << "a Profiler that is not destroyed at exit leaves its log";
  const dlprof::Trace trace = dlprof::read_trace(logs[0].string());
  EXPECT_THAT(trace.flight_recorder_dump,
              AllOf(HasSubstr("ended without a dump, last step 6; it called exit() with its flight recorder running"),
                    Not(HasSubstr("SIGKILL"))));
  EXPECT_EQ(count_named(trace, "giving_up"), 1u);
}

TEST(FlightLogTest, ThisProcesssOwnLogIsLiveAndGoesWithTheRecorder) {
  TempDir dir;
  {
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                  .mode(dlprof::Mode::FlightRecorder)
                                  .flight_steps(2)
                                  .slow_step_factor(0)
                                  .events_per_thread(1024)
                                  .on_trace_ready(dlprof::tensorboard_trace_handler(dir.path().string(), "self")));
    profiler.start();
    flight_steps(profiler, 3);
    const std::vector<fs::path> logs = flight_logs(dir.path());
    ASSERT_EQ(logs.size(), 1u);
    EXPECT_THAT(logs[0].filename().string(), StartsWith("self."));
    EXPECT_THAT(flight_read_error(logs[0]).reason(),
                HasSubstr(fmt::format("the flight log of a live process: process {} still holds it", ::getpid())))
        << "the lock is the open file's: this process sees it too";
    std::thread([] { DLPROF_RANGE("flight_log_thread"); }).join();  // a thread that ends, its ring in the log
    profiler.stop();
  }
  EXPECT_THAT(flight_logs(dir.path()), IsEmpty());
}

TEST(FlightLogTest, TwoProcessesWritingToOneDirectoryEachLeaveTheirOwnLog) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  fs::create_directories(dir.path() / "a");
  fs::create_directories(dir.path() / "b");
  {
    dlprof_test::BackgroundTraining a(flight_log_settings(traces), dir.path() / "a", 1000, {"--step-ms", "5", "--hang-at", "6"});
    dlprof_test::BackgroundTraining b(flight_log_settings(traces), dir.path() / "b", 1000, {"--step-ms", "5", "--hang-at", "9"});
    ASSERT_TRUE(a.wait_for_output("hanging", 60)) << a.err();
    ASSERT_TRUE(b.wait_for_output("hanging", 60)) << b.err();
    EXPECT_EQ(flight_logs(traces).size(), 2u);
  }  // killed with SIGKILL
  std::vector<std::string> dumps;
  for (const fs::path& log : flight_logs(traces)) dumps.push_back(dlprof::read_trace(log.string()).flight_recorder_dump);
  EXPECT_THAT(dumps, ::testing::UnorderedElementsAre(HasSubstr("last step 5;"), HasSubstr("last step 8;")));
}

TEST(FlightLogTest, ACutDamagedOrForeignLogIsReadAsFarAsItHoldsOrRefusedWithTheReason) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const fs::path log = killed_mid_step(dir.path(), traces, 8);
  ASSERT_FALSE(log.empty());
  const std::string whole = dlprof_test::read_file(log);
  dlprof::detail::FlightLogHeader header{};
  ASSERT_GE(whole.size(), sizeof(header));
  std::memcpy(&header, whole.data(), sizeof(header));
  const auto write = [&](const std::string& name, const std::string& bytes) {
    const fs::path path = dir.path() / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  };
  const auto patched = [&](std::size_t offset, const void* value, std::size_t size) {
    std::string bytes = whole;
    std::memcpy(bytes.data() + offset, value, size);
    return bytes;
  };

  // Another version, and a header cut short.
  const std::uint32_t version = 99;
  EXPECT_THAT(flight_read_error(write("v99.dlprof-flight", patched(offsetof(dlprof::detail::FlightLogHeader, version),
                                                                   &version, sizeof(version))))
                  .reason(),
              StartsWith("a dlprof flight log of version 99 with a "));
  EXPECT_THAT(flight_read_error(write("short.dlprof-flight", whole.substr(0, 100))).reason(),
              StartsWith("not a dlprof flight log"));

  // Cut inside the first ring's events: what it holds is read, with a note.
  const std::string cut = whole.substr(0, header.slots_offset + header.slot_bytes / 2);
  const dlprof::Trace cut_trace = dlprof::read_trace(write("cut.dlprof-flight", cut).string());
  ASSERT_FALSE(cut_trace.read_result.notes.empty());
  EXPECT_THAT(cut_trace.read_result.notes[0], HasSubstr("it was cut short"));

  // A ring whose counters do not fit: its last events are read, with a note.
  dlprof::detail::FlightLogSlot slot{};
  std::memcpy(&slot, whole.data() + header.slots_offset, sizeof(slot));
  const std::uint64_t tail = UINT64_MAX;  // past its head
  const dlprof::Trace torn = dlprof::read_trace(
      write("torn.dlprof-flight", patched(header.slots_offset + slot.tail_offset, &tail, sizeof(tail))).string());
  ASSERT_FALSE(torn.read_result.notes.empty());
  EXPECT_THAT(torn.read_result.notes[0], HasSubstr("has counters that do not fit"));

  // Garbage in every event slot of every ring: each is left out and counted, never a crash.
  std::string garbage = whole;
  for (std::uint64_t i = 0; i < header.slot_count; ++i) {
    const std::uint64_t base = header.slots_offset + i * header.slot_bytes;
    if (base + header.slot_bytes > garbage.size()) break;
    dlprof::detail::FlightLogSlot each{};
    std::memcpy(&each, garbage.data() + base, sizeof(each));
    if (each.state != 1) continue;
    std::memset(garbage.data() + base + each.events_offset, 0xAB, each.capacity * sizeof(dlprof::detail::Event));
  }
  const dlprof::Trace scrambled = dlprof::read_trace(write("garbage.dlprof-flight", garbage).string());
  EXPECT_GT(scrambled.read_result.skipped_events, 0u);
  EXPECT_THAT(scrambled.read_result.first_skip_reason, HasSubstr("an event of unknown kind"));
}

/// Runs dlprof-capture with `arguments`; its stdout, stderr and exit status.
Launched run_capture_tool(const std::string& arguments, const fs::path& scratch) {
  const fs::path err = scratch / "capture-stderr.txt";
  const std::string command = fmt::format("'{}' {} 2>'{}'", DLPROF_CAPTURE_TOOL, arguments, err.string());
  Launched result;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char chunk[512];
  for (std::size_t n = 0; (n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) result.out.append(chunk, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
  result.err = dlprof_test::read_file(err);
  return result;
}

TEST(CaptureToolTest, AsksARunningJobOnDemandAndPrintsTheTracesPath) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const fs::path trigger = dir.path() / "capture-now";
  const dlprof_test::BackgroundTraining job({"DLPROF_MODE=on-demand", "DLPROF_OUTPUT=" + traces.string(),
                                             "DLPROF_TRIGGER_FILE=" + trigger.string()},
                                            dir.path(), 1'000'000, {"--step-ms", "2"});
  ASSERT_TRUE(job.wait_for_output("training", 30)) << job.err();

  const Launched by_signal = run_capture_tool(std::to_string(job.pid()), dir.path());
  ASSERT_EQ(by_signal.status, 0) << by_signal.err;
  const std::string first = by_signal.out.substr(0, by_signal.out.find('\n'));
  EXPECT_EQ(fs::path(first).parent_path(), traces);
  EXPECT_EQ(recorded_steps(dlprof::read_trace(first)).size(), 5u) << "the signal asks for the default";

  const Launched by_file = run_capture_tool(fmt::format("{} --steps 3", job.pid()), dir.path());
  ASSERT_EQ(by_file.status, 0) << by_file.err;
  const std::string second = by_file.out.substr(0, by_file.out.find('\n'));
  EXPECT_NE(second, first);
  EXPECT_EQ(recorded_steps(dlprof::read_trace(second)).size(), 3u) << "the trigger file carries the steps";
}

TEST(CaptureToolTest, AsksAFlightRecorderForADump) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  // No slow-step dumps: on a busy machine one may come first, and this asks for the signal's.
  const dlprof_test::BackgroundTraining job({"DLPROF_MODE=flight-recorder", "DLPROF_FLIGHT_STEPS=4",
                                             "DLPROF_SLOW_STEP_FACTOR=0", "DLPROF_OUTPUT=" + traces.string()},
                                            dir.path(), 1'000'000, {"--step-ms", "2"});
  ASSERT_TRUE(job.wait_for_output("training", 30)) << job.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Launched run = run_capture_tool(std::to_string(job.pid()), dir.path());
  ASSERT_EQ(run.status, 0) << run.err;
  const dlprof::Trace dump = dlprof::read_trace(run.out.substr(0, run.out.find('\n')));
  EXPECT_EQ(dump.flight_recorder_dump, "the dump signal");
  const std::size_t steps = recorded_steps(dump).size();  // however many a slow (sanitized) job had taken, at most the 4 kept
  EXPECT_GE(steps, 1u);
  EXPECT_LE(steps, 4u);
}

TEST(CaptureSignalTest, ASignalWhileTheJobLoadsIsTakenByTheFirstProfilerInsteadOfKillingIt) {
  for (const std::string mode : {"on-demand", "flight-recorder"}) {
    SCOPED_TRACE(mode);
    TempDir dir;
    const fs::path traces = dir.path() / "traces";
    dlprof_test::BackgroundTraining job({"DLPROF_MODE=" + mode, "DLPROF_OUTPUT=" + traces.string()}, dir.path(), 12,
                                        {"--load-ms", "1000", "--step-ms", "2"});
    ASSERT_TRUE(job.wait_for_output("loading", 30)) << job.err();
    std::string trace_path;
    if (mode == "on-demand") {  // dlprof-capture asks while no Profiler exists yet
      const Launched capture = run_capture_tool(std::to_string(job.pid()), dir.path());
      EXPECT_EQ(capture.status, 0) << capture.err;
      trace_path = capture.out.substr(0, capture.out.find('\n'));
    } else {
      ASSERT_EQ(::kill(job.pid(), SIGUSR2), 0);
    }
    const Launched run = job.wait();
    ASSERT_EQ(run.signal, 0) << "the job died of a signal";
    EXPECT_EQ(run.status, 0) << run.err;
    const std::vector<fs::path> written = files_ending(traces, ".pt.trace.json");
    ASSERT_EQ(written.size(), 1u) << run.err;
    const dlprof::Trace trace = dlprof::read_trace(written[0].string());
    if (mode == "on-demand") {
      EXPECT_EQ(written[0].string(), trace_path);
      EXPECT_THAT(recorded_steps(trace), ElementsAre("ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5",
                                                     "ProfilerStep#6"))
          << "the first step() takes the request: it warms up, the next five record";
    } else {
      EXPECT_EQ(trace.flight_recorder_dump, "the dump signal");
    }
  }
}

/// Whether process `pid` catches `signal`: its SigCgt mask in /proc/PID/status.
bool catches(pid_t pid, int signal) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (signal - 1) & 1) != 0;
  return false;
}

TEST(CaptureSignalTest, CaughtFromTheStartOnlyInTheModesThatTakeRequestsAndOnlyTheOneAskedFor) {
  struct Case {
    std::vector<std::string> settings;
    int caught;  // the signal caught while the job loads, or 0
  };
  const Case cases[] = {{{}, 0},
                        {{"DLPROF_MODE=off"}, 0},
                        {{"DLPROF_MODE=on-demand"}, SIGUSR2},
                        {{"DLPROF_MODE=flight-recorder", "DLPROF_SIGNAL=USR1"}, SIGUSR1},
                        {{"DLPROF_MODE=on-demand", "DLPROF_SIGNAL=none"}, 0}};
  for (const Case& launched : cases) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(launched.settings, " ")));
    TempDir dir;
    dlprof_test::BackgroundTraining job(launched.settings, dir.path(), 4, {"--load-ms", "2000"});
    ASSERT_TRUE(job.wait_for_output("loading", 30)) << job.err();
    for (const int signal : {SIGUSR1, SIGUSR2}) EXPECT_EQ(catches(job.pid(), signal), signal == launched.caught) << signal;
  }
}

TEST(CaptureSignalTest, AProgramThatHandlesTheSignalItselfKeepsItsHandler) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  dlprof_test::BackgroundTraining job({"DLPROF_MODE=on-demand", "DLPROF_OUTPUT=" + traces.string()}, dir.path(), 1'000'000,
                                      {"--step-ms", "2", "--own-usr2-handler"});
  ASSERT_TRUE(job.wait_for_output("training", 30)) << job.err();
  ASSERT_EQ(::kill(job.pid(), SIGUSR2), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_THAT(job.err(), HasSubstr("own SIGUSR2 handler ran"));
  EXPECT_THAT(job.err(), HasSubstr(fmt::format("signal {} cannot ask for captures: the program handles that signal itself; "
                                               "prof.capture() and DLPROF_TRIGGER_FILE still can",
                                               SIGUSR2)));
  EXPECT_THAT(files_in(traces), IsEmpty()) << "the signal is the program's";
  EXPECT_EQ(::kill(job.pid(), 0), 0);
}

TEST(CaptureSignalTest, AStormOfSignalsGivesOneDumpAndCountsTheRefused) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  // No slow-step dumps: a step the storm slows down is not what this test counts.
  dlprof_test::BackgroundTraining job(
      {"DLPROF_MODE=flight-recorder", "DLPROF_SLOW_STEP_FACTOR=0", "DLPROF_OUTPUT=" + traces.string()}, dir.path(), 1500,
      {"--step-ms", "1"});
  ASSERT_TRUE(job.wait_for_output("training", 30)) << job.err();
  int sent = 0;
  const auto storm_start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3000; ++i) {  // 3,000 signals over half a second
    sent += ::kill(job.pid(), SIGUSR2) == 0 ? 1 : 0;
    std::this_thread::sleep_until(storm_start + std::chrono::microseconds(500'000 * (i + 1) / 3000));
  }
  EXPECT_EQ(sent, 3000) << "the job outlived the storm";
  const Launched run = job.wait();
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("dumps=1 "));
  EXPECT_EQ(files_ending(traces, ".pt.trace.json").size(), 1u);
  const std::size_t refused_at = run.out.find("signals_refused=");
  ASSERT_NE(refused_at, std::string::npos);
  const long refused = std::atol(run.out.c_str() + refused_at + 16);
  EXPECT_GE(refused, 1) << "the kernel merges a signal that arrives while one is pending, so fewer than 2,999";
  EXPECT_LE(refused, 2999);
  EXPECT_THAT(run.err, HasSubstr("by signal refused: signals that arrive together ask once, and one request by signal is "
                                 "taken every 10 s at most"));
}

/// Starts `program` with `environment` alone, its output discarded; returns its process id.
pid_t spawn_with_environment(std::vector<std::string> words, std::vector<std::string> environment) {
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::vector<char*> env;
  for (std::string& variable : environment) env.push_back(variable.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t files;
  ::posix_spawn_file_actions_init(&files);
  ::posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int spawned = ::posix_spawnp(&child, argv[0], &files, nullptr, argv.data(), env.data());
  ::posix_spawn_file_actions_destroy(&files);
  return spawned == 0 ? child : 0;
}

TEST(CaptureToolTest, NeverSignalsAProcessThatDoesNotCatchTheSignal) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const fs::path trigger = dir.path() / "capture-now";
  // Launched for on-demand capture, but not a program that catches the signal: a shell's sleep.
  const pid_t bare = spawn_with_environment({"sleep", "60"}, {"DLPROF_MODE=on-demand", "DLPROF_OUTPUT=" + traces.string()});
  const pid_t with_trigger = spawn_with_environment(
      {"sleep", "60"}, {"DLPROF_MODE=on-demand", "DLPROF_OUTPUT=" + traces.string(), "DLPROF_TRIGGER_FILE=" + trigger.string()});
  ASSERT_NE(bare, 0);
  ASSERT_NE(with_trigger, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past exec: the environment is sleep's

  const Launched refused = run_capture_tool(std::to_string(bare), dir.path());
  EXPECT_EQ(refused.status, 1);
  EXPECT_THAT(refused.err, HasSubstr(fmt::format("process {} does not catch signal {} (SIGUSR2)", bare, SIGUSR2)));
  EXPECT_THAT(refused.err, HasSubstr("it would kill it"));
  EXPECT_THAT(refused.err, HasSubstr("DLPROF_TRIGGER_FILE"));

  const Launched by_file = run_capture_tool(fmt::format("{} --timeout 0.5", with_trigger), dir.path());
  EXPECT_EQ(by_file.status, 1) << "no trace comes from a sleep";
  EXPECT_THAT(by_file.err, HasSubstr("wrote " + trigger.string()));
  EXPECT_TRUE(fs::exists(trigger));

  for (const pid_t sleeper : {bare, with_trigger}) {
    EXPECT_EQ(::kill(sleeper, 0), 0) << "alive: never signalled";
    ::kill(sleeper, SIGKILL);
    int status = 0;
    ::waitpid(sleeper, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "it was alive until killed here";
  }
}

TEST(CaptureToolTest, RefusesWhatItCannotAskWithTheReason) {
  TempDir dir;
  const Launched usage = run_capture_tool("--steps 3", dir.path());
  EXPECT_EQ(usage.status, 2);
  EXPECT_THAT(usage.err, HasSubstr("name the job's process id"));
  const Launched no_process = run_capture_tool("999999999", dir.path());
  EXPECT_EQ(no_process.status, 1);
  EXPECT_THAT(no_process.err, HasSubstr("no process 999999999"));
  const dlprof_test::BackgroundTraining scheduled({}, dir.path(), 1'000'000, {"--step-ms", "2"});
  ASSERT_TRUE(scheduled.wait_for_output("training", 30));
  const Launched not_on_demand = run_capture_tool(std::to_string(scheduled.pid()), dir.path());
  EXPECT_EQ(not_on_demand.status, 1);
  EXPECT_THAT(not_on_demand.err, HasSubstr("only on-demand and flight-recorder take requests"));
}

TEST(FlightRecorderSettingsTest, ModeStepsAndFactorAreReadAndBadValuesKeepTheDefaults) {
  const auto launched = [](std::vector<std::pair<std::string, std::string>> variables) {
    const ScopedEnvironment environment(std::move(variables));
    return dlprof::detail::apply_settings(dlprof::ProfilerOptions{}, dlprof::detail::read_settings(environ));
  };
  const dlprof::detail::LaunchedOptions good =
      launched({{"DLPROF_MODE", "flight-recorder"}, {"DLPROF_FLIGHT_STEPS", "12"}, {"DLPROF_SLOW_STEP_FACTOR", "2.5"}});
  EXPECT_EQ(good.mode, dlprof::Mode::FlightRecorder);
  EXPECT_EQ(good.options.flight_steps(), 12u);
  EXPECT_EQ(good.options.slow_step_factor(), 2.5);
  EXPECT_THAT(good.warnings, IsEmpty());

  const dlprof::detail::LaunchedOptions bad = launched(
      {{"DLPROF_MODE", "flight-recorder"}, {"DLPROF_FLIGHT_STEPS", "0"}, {"DLPROF_SLOW_STEP_FACTOR", "0.5"}});
  EXPECT_EQ(bad.options.flight_steps(), dlprof::ProfilerOptions::kDefaultFlightSteps);
  EXPECT_EQ(bad.options.slow_step_factor(), dlprof::ProfilerOptions::kDefaultSlowStepFactor);
  EXPECT_THAT(bad.warnings, ElementsAre(HasSubstr("DLPROF_SLOW_STEP_FACTOR=0.5"), HasSubstr("DLPROF_FLIGHT_STEPS=0")));

  const dlprof::detail::LaunchedOptions unused = launched({{"DLPROF_FLIGHT_STEPS", "4"}});
  EXPECT_THAT(unused.warnings, ElementsAre(HasSubstr("only DLPROF_MODE=flight-recorder runs")));
}

}  // namespace
