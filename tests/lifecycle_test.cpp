// The process's life around the recording window: exit, fork, several threads driving one
// Profiler, handlers that stop it, threads that get no ring. Exit and fork are judged in child
// processes (tests/lifecycle/scenarios.cpp, or a fork of this test), by exit status and files.
#include <dlprof/profiler.hpp>

#include "test_files.hpp"
#include "sanitized.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using dlprof_test::read_file;
using dlprof_test::TempDir;
using nlohmann::json;
using ::testing::HasSubstr;

using dlprof_test::kSanitized;

// A child's end: its exit status, or the signal that ended it; timed_out when it was killed for
// running past the limit (a hang).
struct ChildEnd {
  bool exited = false;
  int status = -1;
  int signal = 0;
  bool timed_out = false;
};

ChildEnd wait_with_limit(pid_t child, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ChildEnd end;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      end.exited = WIFEXITED(status);
      end.status = end.exited ? WEXITSTATUS(status) : -1;
      end.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      return end;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-child, SIGKILL);  // its process group: a hung grandchild goes too
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      end.timed_out = true;
      return end;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string describe(const ChildEnd& end) {
  if (end.timed_out) return "hung (killed after the time limit)";
  if (end.exited) return fmt::format("exited with status {}", end.status);
  return fmt::format("killed by signal {}", end.signal);
}

ChildEnd run_scenario(const std::string& scenario, const fs::path& dir) {
  const std::string program = DLPROF_LIFECYCLE_SCENARIOS;
  const std::string dir_text = dir.string();
  std::vector<char*> argv{const_cast<char*>(program.c_str()), const_cast<char*>(scenario.c_str()),
                          const_cast<char*>(dir_text.c_str()), nullptr};
  const std::string env_dir = "LIFECYCLE_DIR=" + dir_text;
  std::vector<char*> env;
  for (char** variable = environ; *variable != nullptr; ++variable) env.push_back(*variable);
  env.push_back(const_cast<char*>(env_dir.c_str()));
  env.push_back(nullptr);
  posix_spawnattr_t attributes;
  ::posix_spawnattr_init(&attributes);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);  // a group of its own, killed whole on a hang
  ::posix_spawnattr_setpgroup(&attributes, 0);
  pid_t child = 0;
  const int spawned = ::posix_spawn(&child, program.c_str(), nullptr, &attributes, argv.data(), env.data());
  ::posix_spawnattr_destroy(&attributes);
  if (spawned != 0) return {};
  return wait_with_limit(child, std::chrono::seconds(60));
}

// Trace files (.pt.trace.json) in `dir`, and every other file there.
std::vector<fs::path> traces_in(const fs::path& dir, std::vector<fs::path>* others = nullptr) {
  std::vector<fs::path> traces;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 14 && name.compare(name.size() - 14, 14, ".pt.trace.json") == 0)
      traces.push_back(entry.path());
    else if (others != nullptr)
      others->push_back(entry.path());
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

std::set<std::string> event_names(const fs::path& trace_file) {
  const json trace = json::parse(read_file(trace_file));
  std::set<std::string> names;
  for (const json& event : trace.at("traceEvents"))
    if (event.contains("name") && event["name"].is_string()) names.insert(event["name"].get<std::string>());
  return names;
}

TEST(ProcessExit, AGlobalProfilerStillStartedWhenMainReturnsSavesItsWindow) {
  const TempDir dir;
  const ChildEnd end = run_scenario("global-started-at-exit", dir.path());
  ASSERT_TRUE(end.exited && end.status == 0) << describe(end);
  const auto traces = traces_in(dir.path());
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_TRUE(event_names(traces[0]).count("before-exit"));
}

TEST(ProcessExit, ExitRightAfterTheWindowEndingStepLeavesTheWholeTraceOnDisk) {
  const TempDir dir;
  const ChildEnd end = run_scenario("exit-after-window", dir.path());
  ASSERT_TRUE(end.exited && end.status == 0) << describe(end);
  std::vector<fs::path> others;
  const auto traces = traces_in(dir.path(), &others);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_TRUE(others.empty()) << "left behind: " << others.front();
  EXPECT_TRUE(event_names(traces[0]).count("last-step-work"));
}

TEST(ProcessFork, AChildStoppingTheInheritedProfilerNeitherHangsNorWrites) {
  const TempDir dir;
  const ChildEnd end = run_scenario("fork-after-save", dir.path());
  ASSERT_TRUE(end.exited && end.status == 0) << describe(end);
  const auto traces = traces_in(dir.path());
  ASSERT_EQ(traces.size(), 1u);  // the parent's window, written once
  EXPECT_TRUE(event_names(traces[0]).count("parent-work"));
}

TEST(ProcessFork, AChildRecordsOnlyItsOwnTraceUnderItsOwnPidAndTheParentsIsUntouched) {
  const TempDir dir;
  const ChildEnd end = run_scenario("child-records-own", dir.path());
  ASSERT_TRUE(end.exited && end.status == 0) << describe(end);
  const auto traces = traces_in(dir.path());
  ASSERT_EQ(traces.size(), 2u);
  const fs::path child_trace = traces[0].filename().string().rfind("child.", 0) == 0 ? traces[0] : traces[1];
  const fs::path parent_trace = child_trace == traces[0] ? traces[1] : traces[0];
  ASSERT_EQ(parent_trace.filename().string().rfind("parent.", 0), 0u);

  const std::set<std::string> parent = event_names(parent_trace);
  EXPECT_TRUE(parent.count("parent-before-fork"));
  EXPECT_TRUE(parent.count("parent-after-fork"));
  EXPECT_FALSE(parent.count("child-work"));
  EXPECT_FALSE(parent.count("inherited-idle"));

  const std::set<std::string> child = event_names(child_trace);
  EXPECT_TRUE(child.count("child-work"));
  EXPECT_FALSE(child.count("parent-before-fork"));
  EXPECT_FALSE(child.count("inherited-idle"));
  const json parsed_child = json::parse(read_file(child_trace));
  const json parsed_parent = json::parse(read_file(parent_trace));
  for (const json& event : parsed_child["traceEvents"])
    if (event.value("ph", "") == "X") {
      EXPECT_NE(event["pid"], parsed_parent["traceEvents"][0]["pid"]);
      break;
    }
}

TEST(NameTable, NamesPastTheBoundAreCountedInTheirOwnWindowOnly) {
  const TempDir dir;
  const ChildEnd end = run_scenario("names-past-the-bound", dir.path());
  ASSERT_TRUE(end.exited && end.status == 0) << describe(end);
  const auto traces = traces_in(dir.path());
  ASSERT_EQ(traces.size(), 2u);
  std::vector<json> windows;
  for (const fs::path& file : traces) windows.push_back(json::parse(read_file(file)));
  std::sort(windows.begin(), windows.end(),
            [](const json& a, const json& b) { return a["baseTimeNanoseconds"] < b["baseTimeNanoseconds"]; });
  std::uint64_t kept = 0;
  std::uint64_t overflow_named = 0;
  for (const json& event : windows[0]["traceEvents"]) {
    const std::string name = event.value("name", "");
    if (name.rfind("unique name ", 0) == 0) ++kept;
    if (name == "<dlprof: name table full>") ++overflow_named;
  }
  EXPECT_EQ(kept + overflow_named, 3000u);
  EXPECT_GT(kept, 100u);
  EXPECT_GT(overflow_named, 0u);
  EXPECT_EQ(windows[0]["dlprof_overflowed_names"], overflow_named);
  EXPECT_EQ(windows[1]["dlprof_overflowed_names"], 0);  // names the table holds are found, not counted
}

TEST(NameTable, TheLimitBoundsTheHeapTheTableTakes) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers' allocators are not glibc's, whose layout the table counts";
  const ChildEnd end = run_scenario("name-table-memory", fs::temp_directory_path());
  EXPECT_TRUE(end.exited && end.status == 0) << describe(end) << " (3: never full, 4: over its limit, 5: counted "
                                                                 "less than the heap grew, 6: counted far more)";
}

// tests/lifecycle/scenarios.cpp's soak: 800 steps (400 under a sanitizer) of wait 1, warm-up 1,
// active 2, repeated: a window every four steps.
TEST(Soak, ATrainingLoopWithThreadChurnForksAndUniqueNamesKeepsItsMemoryAndCountsEveryLoss) {
  const TempDir dir;
  const ChildEnd end = run_scenario("soak", dir.path());
  ASSERT_TRUE(end.exited && end.status == 0)
      << describe(end) << " (3: a forked child failed, 4: a handler failed, 5: resident memory grew after warm-up)";
  std::vector<fs::path> others;
  const auto traces = traces_in(dir.path(), &others);
  EXPECT_TRUE(others.empty()) << "left behind: " << others.front();
  ASSERT_EQ(traces.size(), kSanitized ? 100u : 200u);
  std::uint64_t overflowed = 0;
  for (const fs::path& file : traces) {
    SCOPED_TRACE(file.string());
    const std::string text = read_file(file);
    EXPECT_TRUE(dlprof_test::is_valid_utf8(text));
    const json trace = json::parse(text);  // throws, failing the test, on invalid JSON
    std::size_t steps = 0;
    std::size_t worker_ranges = 0;
    std::size_t overflow_named = 0;
    std::size_t iterations = 0;
    for (const json& event : trace.at("traceEvents")) {
      const std::string name = event.value("name", "");
      if (name.rfind("ProfilerStep#", 0) == 0) ++steps;
      if (name == "worker-range") ++worker_ranges;
      if (name == "iteration") ++iterations;
      if (name == "<dlprof: name table full>") ++overflow_named;
      EXPECT_NE(name.rfind("in-child", 0), 0u) << "a forked child's range in the parent's trace";
    }
    EXPECT_EQ(steps, 2u);
    EXPECT_EQ(iterations, 2u);
    EXPECT_EQ(worker_ranges, 2u * 512);
    EXPECT_EQ(trace["dlprof_dropped_events"], 2 * (600 - 512));
    EXPECT_EQ(trace["dlprof_clipped_ranges"], 2);
    EXPECT_EQ(trace["dlprof_overflowed_names"], overflow_named);
    overflowed += overflow_named;
  }
  EXPECT_GT(overflowed, 0u) << "the name table never filled";
}

// Threads intern names (DLPROF_RANGE_F, set_thread_name) without pause while the main thread
// forks: each child must be able to intern and record at once.
TEST(ProcessFork, ChildrenForkedWhileOtherThreadsInternNamesDoNotDeadlock) {
  dlprof::Profiler prof;
  prof.start();
  std::atomic<bool> done{false};
  std::vector<std::thread> interning;
  for (int t = 0; t < 3; ++t)
    interning.emplace_back([&, t] {
      for (std::uint64_t i = 0; !done.load(std::memory_order_relaxed); ++i) {
        DLPROF_RANGE_F("interned {} {}", t, std::to_string(i % 50'000));  // a string argument: interned
        if (i % 1024 == 0) dlprof::set_thread_name(fmt::format("interner-{}-{}", t, i));
      }
    });
  for (int round = 0; round < 12; ++round) {
    const pid_t child = ::fork();
    if (child == 0) {
      // A handler on this thread: the trace is built here, and the child starts no thread
      // (ThreadSanitizer does not follow threads started after a multi-threaded fork).
      dlprof::Profiler own(dlprof::ProfilerOptions{}.on_trace_ready([](const dlprof::Trace&) {}));
      own.start();
      {
        DLPROF_RANGE_F("child {}", round);
        dlprof::set_thread_name("forked-child");
      }
      own.stop();
      const auto trace = own.last_trace();
      ::_exit(trace != nullptr && trace->events.size() == 1 ? 0 : 7);
    }
    const ChildEnd end = wait_with_limit(child, std::chrono::seconds(30));
    EXPECT_TRUE(end.exited && end.status == 0) << "fork " << round << ": " << describe(end);
  }
  done = true;
  for (std::thread& thread : interning) thread.join();
  prof.stop();
}

// The class is meant for one thread; two threads stepping it at once are serialised, so every
// step counts and nothing is corrupted (ASan and TSan run this).
TEST(ProfilerThreads, StepFromTwoThreadsAtOnceCountsEveryStep) {
  std::atomic<int> traces{0};
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(1, 1, 2, 0))
                            .on_trace_ready([&](const dlprof::Trace&) { ++traces; }));
  prof.start();
  constexpr int kStepsPerThread = 2000;
  std::vector<std::thread> steppers;
  for (int t = 0; t < 2; ++t)
    steppers.emplace_back([&] {
      for (int i = 0; i < kStepsPerThread; ++i) {
        DLPROF_RANGE("work");
        prof.step();
      }
    });
  for (std::thread& thread : steppers) thread.join();
  EXPECT_EQ(prof.step_num(), 2 * kStepsPerThread);
  prof.stop();
  EXPECT_EQ(traces.load(), 2 * kStepsPerThread / 4);  // a cycle of 4 steps each, the last one's saved at its end
}

TEST(ProfilerThreads, StopFromAForegroundHandlerStopsOnceTheStepReturns) {
  dlprof::Profiler* self = nullptr;
  int handled = 0;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(0, 0, 1, 0))
                            .on_trace_ready([&](const dlprof::Trace&) {
                              ++handled;
                              self->stop();
                            }));
  self = &prof;
  prof.start();
  prof.step();  // ends the first window; its handler stops the profiler
  EXPECT_EQ(handled, 1);
  EXPECT_FALSE(prof.started());
  EXPECT_FALSE(dlprof::detail::is_recording());
  EXPECT_TRUE(prof.errors().empty());
  dlprof::Profiler next;  // the recording flag is free for another
  EXPECT_NO_THROW(next.start());
  next.stop();
}

TEST(ProfilerThreads, StepFromAHandlerIsRefusedWithAClearError) {
  dlprof::Profiler* self = nullptr;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(0, 0, 1, 1))
                            .on_trace_ready([&](const dlprof::Trace&) { self->step(); }));
  self = &prof;
  prof.start();
  prof.step();
  prof.stop();
  ASSERT_EQ(prof.errors().size(), 1u);
  EXPECT_THAT(prof.errors()[0], HasSubstr("step(): called from an on_trace_ready handler"));
}

// A thread whose ring cannot be allocated loses its events; each one is counted as dropped.
TEST(RingAllocation, EventsOfThreadsWithoutARingAreCountedAsDropped) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's shadow memory does not fit under the address-space limit this test sets";
  const pid_t child = ::fork();
  if (child == 0) {
    constexpr std::size_t kRingEvents = std::size_t{1} << 26;  // 2 GiB per ring: more than the limit allows
    const rlimit limit{std::size_t{1} << 30, std::size_t{1} << 30};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(10);
    dlprof::Profiler prof(dlprof::ProfilerOptions{}.events_per_thread(kRingEvents));
    prof.start();  // this thread gets no ring either: warned, not thrown
    if (!prof.started()) ::_exit(11);
    constexpr int kThreads = 4;
    constexpr int kRanges = 250;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([] {
        for (int i = 0; i < kRanges; ++i) {
          DLPROF_RANGE("lost");
        }
      });
    for (std::thread& thread : threads) thread.join();
    for (int i = 0; i < kRanges; ++i) {
      DLPROF_RANGE("lost here too");
    }
    prof.stop();
    const auto trace = prof.last_trace();
    if (trace == nullptr) ::_exit(12);
    ::_exit(trace->events.empty() && trace->dropped_events == (kThreads + 1) * kRanges ? 0 : 13);
  }
  const ChildEnd end = wait_with_limit(child, std::chrono::seconds(60));
  EXPECT_TRUE(end.exited && end.status == 0) << describe(end);
}


// A range that is open when its window ends is saved ending at the window's end and counted as
// clipped, never lost: around the step() that ends the window, around stop(), on another thread.
const dlprof::TraceEvent* range_named(const dlprof::Trace& trace, const std::string& name) {
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Range && trace.name_of(event) == name) return &event;
  return nullptr;
}

TEST(WindowEnd, ARangeAroundTheStepThatEndsTheWindowIsClippedAndCounted) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 2, 1)));
  prof.start();
  for (int i = 0; i < 2; ++i) {
    DLPROF_RANGE("loop-body");
    prof.step();  // the second ends the window inside this range
  }
  prof.stop();
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  int bodies = 0;
  for (const dlprof::TraceEvent& event : trace->events)
    if (event.kind == dlprof::EventKind::Range && trace->name_of(event) == "loop-body") ++bodies;
  EXPECT_EQ(bodies, 2);
  EXPECT_EQ(trace->clipped_ranges, 2u);  // each outlives the step it began in
  for (const dlprof::TraceEvent& event : trace->events) EXPECT_LE(event.end_ns, trace->window_end_ns + 1);
}

TEST(WindowEnd, ARangeOpenAtStopIsClippedAndCounted) {
  dlprof::Profiler prof;
  prof.start();
  {
    DLPROF_RANGE("outer");
    {
      DLPROF_RANGE("closed");
    }
    prof.stop();
  }
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  const dlprof::TraceEvent* outer = range_named(*trace, "outer");
  const dlprof::TraceEvent* closed = range_named(*trace, "closed");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(closed, nullptr);
  EXPECT_EQ(trace->clipped_ranges, 1u);
  EXPECT_LE(outer->start_ns, closed->start_ns);
  EXPECT_GE(outer->end_ns, closed->end_ns);

  dlprof::Profiler next;  // the range's own late event belongs to no window
  next.start();
  next.stop();
  EXPECT_EQ(range_named(*next.last_trace(), "outer"), nullptr);
}

TEST(WindowEnd, ARangeOpenOnAnotherThreadIsClippedAndCounted) {
  dlprof::Profiler prof;
  prof.start();
  std::atomic<int> stage{0};
  std::thread worker([&] {
    DLPROF_RANGE("worker-open");
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  prof.stop();
  stage = 2;
  worker.join();
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  const dlprof::TraceEvent* open = range_named(*trace, "worker-open");
  ASSERT_NE(open, nullptr);
  EXPECT_EQ(trace->clipped_ranges, 1u);
  EXPECT_LE(open->end_ns, trace->window_end_ns + 1);
}


// Setting up a thread's ring (allocating and touching 64 MiB here) happens before its first
// range reads its start time, so that range measures only itself.
TEST(RingAllocation, TheFirstRangeOfANewThreadDoesNotTimeItsRingsSetUp) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.events_per_thread(std::size_t{1} << 21));
  prof.start();
  std::thread([] {
    DLPROF_RANGE("first-on-thread");
    { DLPROF_RANGE("inner"); }  // the thread's first event pushed
  }).join();
  prof.stop();
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  const dlprof::TraceEvent* first = range_named(*trace, "first-on-thread");
  ASSERT_NE(first, nullptr);
  EXPECT_LT(first->end_ns - first->start_ns, 2'000'000) << "an empty range took as long as setting up 64 MiB";
}


TEST(ProfilerThreads, AHandlerFailingEveryWindowIsPrintedOnceAndKeptEachTime) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(0, 0, 1, 0))
                            .on_trace_ready([](const dlprof::Trace&) { throw std::runtime_error("disk full"); }));
  ::testing::internal::CaptureStderr();
  prof.start();
  for (int i = 0; i < 50; ++i) prof.step();
  prof.stop();
  const std::string printed = ::testing::internal::GetCapturedStderr();
  std::size_t lines = 0;
  for (std::size_t at = printed.find("disk full"); at != std::string::npos; at = printed.find("disk full", at + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << printed;
  EXPECT_EQ(prof.errors().size(), 51u);  // 50 windows by step(), one by stop()
}

}  // namespace
