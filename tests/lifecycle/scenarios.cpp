// Programs that end, fork and exit the ways training jobs do, one per scenario, for
// lifecycle_test to run as child processes and judge by exit status and the files they leave:
//
//   lifecycle_scenarios global-started-at-exit DIR   a global Profiler still started when main returns
//   lifecycle_scenarios exit-after-window DIR        std::exit right after the step() that ends a window
//   lifecycle_scenarios fork-after-save DIR          fork after a saved window; the child stops and
//                                                    destroys the inherited Profiler, then exits
//   lifecycle_scenarios child-records-own DIR        fork mid-window; the child records its own trace
//                                                    with a Profiler of its own
//   lifecycle_scenarios names-past-the-bound DIR     unique run-time names past a small name table:
//                                                    window 1 overflows, window 2 reuses its names
//   lifecycle_scenarios name-table-memory            heap growth of a full name table against its limit
//   lifecycle_scenarios soak DIR                     a training loop with thread churn, forks, unique
//                                                    run-time names and windows repeated without end
#include <dlprof/profiler.hpp>

#include "../sanitized.hpp"

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

using dlprof_test::kSanitized;

dlprof::ProfilerOptions saved_to(const std::string& dir, const std::string& worker) {
  return dlprof::ProfilerOptions{}.on_trace_ready(dlprof::tensorboard_trace_handler(dir, worker));
}

// Constructed before main, as a training program's global profiler is.
dlprof::Profiler& global_profiler() {
  static dlprof::Profiler profiler(saved_to(std::getenv("LIFECYCLE_DIR") ? std::getenv("LIFECYCLE_DIR") : "/nonexistent",
                                            "global"));
  return profiler;
}
const bool g_global_made = (global_profiler(), true);

int global_started_at_exit() {
  global_profiler().start();
  DLPROF_RANGE("before-exit");
  return 0;  // the Profiler is stopped, and its window saved, while static objects are destroyed
}

int exit_after_window(const std::string& dir) {
  dlprof::Profiler prof(saved_to(dir, "exiting").schedule(dlprof::schedule(0, 0, 1, 1)));
  prof.start();
  {
    DLPROF_RANGE("last-step-work");
  }
  prof.step();  // ends the window: the trace is built and written on the writer thread
  std::exit(0);
}

int wait_for(pid_t child) {
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return 100;
  if (!WIFEXITED(status)) return 101;
  return WEXITSTATUS(status);
}

int fork_after_save(const std::string& dir) {
  dlprof::Profiler prof(saved_to(dir, "parent").schedule(dlprof::schedule(0, 0, 1, 1)));
  prof.start();
  {
    DLPROF_RANGE("parent-work");
  }
  prof.step();  // the window is saved by the writer thread
  prof.step();
  const pid_t child = ::fork();
  if (child == 0) {
    prof.step();
    prof.stop();  // waited for the parent's writer thread, which the child does not have
    if (prof.last_trace() != nullptr || prof.started()) ::_exit(3);
    ::_exit(0);  // destroying the inherited Profiler is tested by child-records-own's return
  }
  const int child_status = wait_for(child);
  prof.stop();
  return child_status;
}

int child_records_own(const std::string& dir) {
  dlprof::Profiler prof(saved_to(dir, "parent"));
  prof.start();
  {
    DLPROF_RANGE("parent-before-fork");
  }
  const pid_t child = ::fork();
  if (child == 0) {
    int status = 0;
    {
      DLPROF_RANGE("inherited-idle");  // the parent's window is not the child's: not recorded
      prof.step();
      try {
        prof.start();
        status = 4;  // start() of an inherited Profiler must refuse
      } catch (const std::logic_error&) {
      }
      dlprof::Profiler own(saved_to(dir, "child"));
      own.start();
      {
        DLPROF_RANGE("child-work");
      }
      own.stop();
      if (own.last_trace() == nullptr || own.last_trace()->pid != ::getpid()) status = 5;
    }
    std::exit(status);  // runs exit hooks and destroys statics in the child
  }
  const int child_status = wait_for(child);
  {
    DLPROF_RANGE("parent-after-fork");
  }
  prof.stop();
  return child_status;
}

// Window 1 records 3000 unique names into a 64 KiB table (about 600 fit); window 2 records only
// names the table holds. lifecycle_test checks each trace's dlprof_overflowed_names.
int names_past_the_bound(const std::string& dir) {
  dlprof::Profiler prof(
      saved_to(dir, "names").name_table_bytes(64 << 10).schedule(dlprof::schedule(0, 0, 1, 2)));
  prof.start();
  // A string argument: the name is formatted and interned as the range begins (numbers alone are
  // kept and formatted with the window, taking no room in the table).
  for (int i = 0; i < 3000; ++i) DLPROF_RANGE_F("unique name {}", std::to_string(i));
  prof.step();
  for (int i = 0; i < 100; ++i) DLPROF_RANGE_F("unique name {}", std::to_string(i % 10));
  prof.step();
  prof.stop();
  return prof.errors().empty() ? 0 : 3;
}

// Heap in use, mapped chunks included.
std::size_t heap_in_use() {
  const struct mallinfo2 info = ::mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Interns unique names of two lengths (inside and past the small-string capacity) until the
// table is full, and compares the heap it grew by with the limit: within 15%.
int name_table_memory() {
  constexpr std::size_t kLimit = std::size_t{8} << 20;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.name_table_bytes(kLimit).events_per_thread(1 << 20));
  prof.start();  // the ring is allocated here, before the heap is measured
  const std::size_t before = heap_in_use();
  const std::size_t interned_before = dlprof::detail::InternTable::instance().bytes();
  for (int i = 0; i < 400'000; ++i) {
    if (i % 2 == 0) {
      DLPROF_RANGE_F("n{}", std::to_string(i));  // a string argument: interned
    } else {
      DLPROF_RANGE_F("a longer range name {}", std::to_string(i));
    }
  }
  const std::size_t grown = heap_in_use() - before;
  const std::size_t counted = dlprof::detail::InternTable::instance().bytes() - interned_before;
  prof.stop();
  const std::uint64_t overflowed = prof.last_trace() ? prof.last_trace()->overflowed_names : 0;
  std::printf("limit %zu, counted %zu, heap grown %zu, overflowed %llu\n", kLimit, counted, grown,
              static_cast<unsigned long long>(overflowed));
  if (overflowed == 0) return 3;                    // the limit was never reached
  if (counted > kLimit) return 4;                   // the table grew past its limit
  if (grown > kLimit + kLimit / 100 * 15) return 5;  // the count misses real memory
  if (grown < kLimit / 100 * 70) return 6;          // the count is far above real memory
  return 0;
}

// Resident memory of this process, from /proc/self/statm.
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  std::size_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// A training loop kept up for kSteps steps (800, or 400 under a sanitizer). Each step: the loop body's range around the work and
// the step() call (so that each window clips two: one at the step inside it, one open at its
// end), kNames unique formatted names, half of them interned (a 256 KiB name table fills during
// warm-up) and half formatted with the window, a worker
// thread that records kWorkerRanges ranges into a ring of kRing events and ends (kWorkerRanges -
// kRing dropped each), and, every fourth step, a fork whose child records nothing of its own
// into the parent's window. Resident memory is measured once the table is full and at the end.
//
// lifecycle_test checks every file: JSON, the drop, clip and overflow counts, the events.
constexpr int kSteps = kSanitized ? 400 : 800;  // each fork and thread costs a sanitizer far more
constexpr int kNames = 100;
constexpr int kRing = 512;
constexpr int kWorkerRanges = 600;

int soak(const std::string& dir) {
  dlprof::Profiler prof(saved_to(dir, "soak")
                            .schedule(dlprof::schedule(1, 1, 2, 0))
                            .events_per_thread(kRing)
                            .name_table_bytes(256 << 10));
  prof.start();
  std::size_t resident_after_warm_up = 0;
  for (int step = 0; step < kSteps; ++step) {
    DLPROF_RANGE("iteration");
    for (int name = 0; name < kNames; ++name) {
      if (name % 2 == 0) {
        DLPROF_RANGE_F("step {} batch {}", step, name);  // kept and formatted with the window
      } else {
        DLPROF_RANGE_F("step {} batch {} of the soak's training loop", step, std::to_string(name));  // interned
      }
    }
    std::thread worker([] {
      for (int i = 0; i < kWorkerRanges; ++i) {
        DLPROF_RANGE("worker-range");
      }
    });
    worker.join();
    if (step % 4 == 2) {
      const pid_t child = ::fork();
      if (child == 0) {
        {
          DLPROF_RANGE_F("in-child {}", step);
        }
        ::_exit(0);
      }
      if (wait_for(child) != 0) return 3;
    }
    if (step == kSteps / 4) resident_after_warm_up = resident_bytes();
    prof.step();
  }
  prof.stop();
  const std::size_t resident_at_end = resident_bytes();
  std::printf("resident after warm-up %zu, at the end %zu\n", resident_after_warm_up, resident_at_end);
  if (!prof.errors().empty()) return 4;
  // The sanitizers hold freed memory back (ASan's quarantine) and grow their shadow: not flat.
  if (!kSanitized && resident_at_end > resident_after_warm_up + (std::size_t{2} << 20)) return 5;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lifecycle_scenarios SCENARIO [DIR]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  const std::string dir = argc > 2 ? argv[2] : "";
  if (scenario == "global-started-at-exit") return global_started_at_exit();
  if (scenario == "exit-after-window") return exit_after_window(dir);
  if (scenario == "fork-after-save") return fork_after_save(dir);
  if (scenario == "child-records-own") return child_records_own(dir);
  if (scenario == "names-past-the-bound") return names_past_the_bound(dir);
  if (scenario == "name-table-memory") return name_table_memory();
  if (scenario == "soak") return soak(dir);
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}
