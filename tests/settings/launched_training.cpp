// A training loop written as a user writes one and controlled from its launcher alone: a plain
// Profiler, started, stepped and stopped, with no option set in the code. settings_test and
// flight_recorder_test run it with DLPROF_* variables and a DLPROF_CONFIG file and judge it by
// the traces it leaves, its stderr and its exit status. It prints the options the Profiler ended
// up with.
//
//   launched_training STEPS [--step-ms MS] [--slow-step N] [--crash-at N segv|abort|throw]
//                           [--own-handler] [--fork-at N] [--load-ms MS] [--overflow-at N main|thread]
//                           [--hang-at N] [--irregular-warmup N] [--own-usr2-handler]
//                           [--eat-memory-at N MB] [--exit-at N]
//
// --step-ms MS      each step sleeps MS ms; "training" is printed once the Profiler has started
// --slow-step N     step N takes 200 ms instead of about 2
// --load-ms MS      before the Profiler is made, prints "loading" and sleeps MS ms, as a job
//                   loading its model does
// --overflow-at N   step N recurses without end inside the range "runaway_recursion", on the main
//                   thread or on a thread of its own, until the stack overflows (SIGSEGV)
// --hang-at N       step N prints "hanging" and never ends: it waits inside the range
//                   "wait_for_peer" until the process is killed
// --irregular-warmup N  of the first N steps, the odd ones take 60 ms more: a warm-up
// --own-usr2-handler    installs a SIGUSR2 handler in main, after dlprof's was installed at load;
//                   it prints "own SIGUSR2 handler ran"
// --crash-at N      step N dies inside the range "crash_site": of SIGSEGV, abort() or an
//                   exception nothing catches (std::terminate)
// --own-handler     installs a SIGSEGV and SIGABRT handler before the Profiler is made; it
//                   prints "own handler ran" and lets the signal kill the process
// --fork-at N       at step N, forks a child that steps, dumps and dies of SIGSEGV inside a range,
//                   as a data loader worker might; the parent waits for it and trains on
// --eat-memory-at N MB  step N prints "eating", then maps and touches memory inside the range
//                   "allocate_batch" until the kernel kills it for memory (a cgroup's limit); with
//                   MB > 0 its address space is first limited to MB more than it holds (RLIMIT_AS).
//                   When a mapping fails, or after 1 GiB, it dies of SIGKILL, as the OOM killer
//                   ends a process. Half a second passes in the range before it eats
// --exit-at N       step N calls std::exit(3) inside the range "giving_up", the Profiler running,
//                   half a second into it
#include <dlprof/profiler.hpp>

#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdint>
#include <cstdio>
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

/// Recurses until `depth` reaches `limit`, which the caller makes unreachable: each frame keeps a
/// buffer the compiler cannot drop, so the stack overflows.
int recurse(int depth, int limit) {
  volatile char frame[512];
  frame[depth % sizeof(frame)] = static_cast<char>(depth);
  if (depth >= limit) return frame[0];
  return recurse(depth + 1, limit) + frame[depth % sizeof(frame)];
}

[[noreturn]] void overflow_stack(const std::string& where, int limit) {
  const auto run = [limit] {
    DLPROF_RANGE("runaway_recursion");
    std::exit(recurse(0, limit));
  };
  if (where == "thread") std::thread(run).join();
  run();
  std::abort();
}

[[noreturn]] void hang() {
  DLPROF_RANGE("wait_for_peer");
  fmt::print("hanging\n");
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

/// The bytes of address space the process holds (VmSize); 0 where /proc does not say.
std::uint64_t address_space_bytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  std::uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), status) != nullptr)
    if (std::sscanf(line, "VmSize: %" SCNu64 " kB", &kib) == 1) break;
  std::fclose(status);
  return kib * 1024;
}

[[noreturn]] void eat_memory(std::uint64_t limit_mb) {
  DLPROF_RANGE("allocate_batch");
  if (limit_mb > 0) {
    const rlimit limit{address_space_bytes() + (limit_mb << 20), RLIM_INFINITY};
    ::setrlimit(RLIMIT_AS, &limit);
  }
  fmt::print("eating\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the recorder's watcher notes the range's name
  constexpr std::size_t kChunk = std::size_t{8} << 20;
  for (std::size_t eaten = 0;; eaten += kChunk) {
    void* chunk = eaten < (std::size_t{1} << 30)
                      ? ::mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
    if (chunk == MAP_FAILED) ::kill(::getpid(), SIGKILL);
    else std::memset(chunk, 1, kChunk);
  }
}

void own_usr2_handler(int) {
  static const char kMessage[] = "own SIGUSR2 handler ran\n";
  static_cast<void>(::write(2, kMessage, sizeof(kMessage) - 1));
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
  int load_ms = 0;
  int overflow_at = -1;
  int hang_at = -1;
  int irregular_warmup = 0;
  int eat_memory_at = -1;
  int exit_at = -1;
  std::uint64_t eat_limit_mb = 0;
  std::string crash_how = "segv";
  std::string overflow_where = "main";
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--slow-step" && i + 1 < argc) slow_step = std::atoi(argv[++i]);
    if (flag == "--fork-at" && i + 1 < argc) fork_at = std::atoi(argv[++i]);
    if (flag == "--step-ms" && i + 1 < argc) step_ms = std::atoi(argv[++i]);
    if (flag == "--load-ms" && i + 1 < argc) load_ms = std::atoi(argv[++i]);
    if (flag == "--hang-at" && i + 1 < argc) hang_at = std::atoi(argv[++i]);
    if (flag == "--irregular-warmup" && i + 1 < argc) irregular_warmup = std::atoi(argv[++i]);
    if (flag == "--overflow-at" && i + 2 < argc) {
      overflow_at = std::atoi(argv[++i]);
      overflow_where = argv[++i];
    }
    if (flag == "--crash-at" && i + 2 < argc) {
      crash_at = std::atoi(argv[++i]);
      crash_how = argv[++i];
    }
    if (flag == "--eat-memory-at" && i + 2 < argc) {
      eat_memory_at = std::atoi(argv[++i]);
      eat_limit_mb = std::strtoull(argv[++i], nullptr, 10);
    }
    if (flag == "--exit-at" && i + 1 < argc) exit_at = std::atoi(argv[++i]);
    if (flag == "--own-usr2-handler") ::signal(SIGUSR2, own_usr2_handler);
    if (flag == "--own-handler") {
      ::signal(SIGSEGV, own_handler);
      ::signal(SIGABRT, own_handler);
    }
  }
  ::alarm(60);  // a deadlock fails the test instead of hanging it
  if (load_ms > 0) {
    fmt::print("loading\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(load_ms));
  }
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
    if (step < irregular_warmup && step % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(60));
    if (step == crash_at) crash(crash_how);
    if (step == overflow_at) overflow_stack(overflow_where, argc > 0 ? INT_MAX : 0);
    if (step == hang_at) hang();
    if (step == eat_memory_at) eat_memory(eat_limit_mb);
    if (step == exit_at) {
      DLPROF_RANGE("giving_up");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the recorder's watcher notes the range's name
      std::exit(3);
    }
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
  fmt::print("mode={} schedule={},{},{},{},{} handlers={} events_per_thread={} record_shapes={} traces={} dumps={} "
             "signals_refused={} sum={}\n",
             kModes[static_cast<int>(prof.mode())], schedule.wait(), schedule.warmup(), schedule.active(), schedule.repeat(),
             schedule.skip_first(), options.handlers().size(), options.events_per_thread(), options.record_shapes(),
             prof.last_trace() != nullptr, prof.dumps(), prof.signals_refused(), sum > 0);
  return 0;
}
