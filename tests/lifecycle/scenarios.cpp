// Programs that end, fork and exit the ways training jobs do, one per scenario, for
// lifecycle_test to run as child processes and judge by exit status and the files they leave:
//
//   lifecycle_scenarios global-started-at-exit DIR   a global Profiler still started when main returns
//   lifecycle_scenarios exit-after-window DIR        std::exit right after the step() that ends a window
//   lifecycle_scenarios fork-after-save DIR          fork after a saved window; the child stops and
//                                                    destroys the inherited Profiler, then exits
//   lifecycle_scenarios child-records-own DIR        fork mid-window; the child records its own trace
//                                                    with a Profiler of its own
#include <dlprof/profiler.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

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
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}
