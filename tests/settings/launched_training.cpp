// A training loop written as a user writes one and controlled from its launcher alone: a plain
// Profiler, started, stepped and stopped, with no option set in the code. settings_test and
// flight_recorder_test run it with DLPROF_* variables and a DLPROF_CONFIG file and judge it by
// the traces it leaves, its stderr and its exit status. It prints the options the Profiler ended
// up with.
//
//   launched_training STEPS [--step-ms MS] [--slow-step N] [--crash-at N segv|abort|throw]
//                           [--own-handler] [--fork-at N]
//
// --step-ms MS      each step sleeps MS ms; "training" is printed once the Profiler has started
// --slow-step N     step N takes 200 ms instead of about 2
// --crash-at N      step N dies inside the range "crash_site": of SIGSEGV, abort() or an
//                   exception nothing catches (std::terminate)
// --own-handler     installs a SIGSEGV and SIGABRT handler before the Profiler is made; it
//                   prints "own handler ran" and lets the signal kill the process
// --fork-at N       at step N, forks a child that steps, dumps and dies of SIGSEGV inside a range,
//                   as a data loader worker might; the parent waits for it and trains on
#include <dlprof/profiler.hpp>

#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

void own_handler(int signal) {
  static const char kMessage[] = "own handler ran\n";
  static_cast<void>(::write(2, kMessage, sizeof(kMessage) - 1));
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

[[noreturn]] void crash(const std::string& how) {
  DLPROF_RANGE("crash_site");
  if (how == "abort") std::abort();
  if (how == "throw") throw std::runtime_error("loss is NaN");
  // A page no access is allowed to: a fault the sanitizers do not catch first, as a null store is.
  void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *static_cast<volatile int*>(page) = 1;
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  int slow_step = -1;
  int crash_at = -1;
  int fork_at = -1;
  int step_ms = 0;
  std::string crash_how = "segv";
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--slow-step" && i + 1 < argc) slow_step = std::atoi(argv[++i]);
    if (flag == "--fork-at" && i + 1 < argc) fork_at = std::atoi(argv[++i]);
    if (flag == "--step-ms" && i + 1 < argc) step_ms = std::atoi(argv[++i]);
    if (flag == "--crash-at" && i + 2 < argc) {
      crash_at = std::atoi(argv[++i]);
      crash_how = argv[++i];
    }
    if (flag == "--own-handler") {
      ::signal(SIGSEGV, own_handler);
      ::signal(SIGABRT, own_handler);
    }
  }
  ::alarm(60);  // a deadlock fails the test instead of hanging it
  dlprof::Profiler prof;
  prof.start();
  if (step_ms > 0) {
    fmt::print("training\n");
    std::fflush(stdout);
  }
  double sum = 0;
  for (int step = 0; step < steps; ++step) {
    DLPROF_RANGE("train_step");
    for (int i = 0; i < 1000; ++i) sum += static_cast<double>(i) * step;
    if (slow_step >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(step == slow_step ? 200 : 2));
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    if (step == crash_at) crash(crash_how);
    if (step == fork_at) {
      const pid_t child = ::fork();
      if (child == 0) {
        prof.step();
        const bool dumped = prof.dump();
        fmt::print("forked child dumped={}\n", dumped);
        std::fflush(stdout);
        crash("segv");
      }
      int status = 0;
      ::waitpid(child, &status, 0);
      fmt::print("forked child died of signal {}\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    prof.step();
  }
  prof.stop();
  const dlprof::ProfilerOptions& options = prof.options();
  const dlprof::Schedule& schedule = options.schedule();
  constexpr const char* kModes[] = {"scheduled", "off", "on-demand", "flight-recorder"};
  fmt::print("mode={} schedule={},{},{},{},{} handlers={} events_per_thread={} record_shapes={} traces={} dumps={} sum={}\n",
             kModes[static_cast<int>(prof.mode())], schedule.wait(), schedule.warmup(), schedule.active(), schedule.repeat(),
             schedule.skip_first(), options.handlers().size(), options.events_per_thread(), options.record_shapes(),
             prof.last_trace() != nullptr, prof.dumps(), sum > 0);
  return 0;
}
