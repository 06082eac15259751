// bench/range_bench.cpp: what one range (begin + end) costs, beside its peers, in one binary and
// one run, so the ratios of DESIGN.md's cost model compare figures taken under the same load:
//
//   idle       DLPROF_RANGE with no Profiler window open and no NVTX tool attached, against
//              NVTX3's own C++ range (NVTX3_FUNC_RANGE_IN) and the raw C push/pop with no tool;
//   recording  DLPROF_RANGE / DLPROF_RANGE_F into the thread's ring, against two reads of the
//              clock the events use (and the other clocks it could have used);
//   stacks     the return addresses of 10 and 20 frames by frame pointers and by the unwind
//              tables, libunwind's and libgcc's (detail/recording/stack_walk.hpp), against
//              Tracy's published x64 figures (306 ns for 10 frames, 531 for 20) and a recorded
//              range in the same run.
//
// Recording benchmarks must measure the store path, not the cheaper drop path of a full ring:
// every `events_per_thread / 2` iterations the loop pauses timing, stops the Profiler (which
// drains the rings into a Trace) and starts it again; the `dropped` counter must read 0.
//
// Run: build-bench/bench/range_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <optional>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#  include <x86intrin.h>
#endif

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <dlprof/detail/recording/ring_registry.hpp>
#include <dlprof/detail/recording/stack_walk.hpp>
#include <dlprof/memory_tag.hpp>
#include <dlprof/profiler.hpp>

#if DLPROF_HAS_NVTX
#  include <nvtx3/nvtx3.hpp>
#endif

#include "bench_summary.hpp"

namespace {

// ---------------------------------------------------------------------------------------------
// Stacks: a walk from the bottom of a recursion `depth` frames deep, every frame keeping its
// frame pointer, as a program built with -fno-omit-frame-pointer has them.

#define DLPROF_BENCH_KEEPS_FRAME_POINTER __attribute__((noinline, optimize("no-omit-frame-pointer")))

template <class AtBottom>
DLPROF_BENCH_KEEPS_FRAME_POINTER int at_depth(int depth, AtBottom& at_bottom) {
  if (depth <= 1) {
    at_bottom();
    return 0;
  }
  const int below = at_depth(depth - 1, at_bottom);
  benchmark::ClobberMemory();
  return below + 1;
}

/// Walks `state.range(0)` frames with `walk` at each iteration, from that depth; the counter
/// `frames` is what each walk took, `ns_per_frame` the cost of one.
template <std::size_t (*Walk)(std::uintptr_t*, std::size_t, std::size_t)>
void walk_stack(benchmark::State& state) {
  const auto frames = static_cast<std::size_t>(state.range(0));
  std::uintptr_t out[64];
  std::size_t taken = 0;
  auto loop = [&]() DLPROF_BENCH_KEEPS_FRAME_POINTER {
    for (auto _ : state) {
      taken = Walk(out, frames, 0);
      benchmark::DoNotOptimize(out);
    }
  };
  at_depth(static_cast<int>(frames), loop);
  state.counters["frames"] = static_cast<double>(taken);
  state.counters["ns_per_frame"] = benchmark::Counter(static_cast<double>(state.iterations() * taken),
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (taken != frames) state.SkipWithError("the walk took fewer frames than it was asked for");
}

void BM_stack_frame_pointers(benchmark::State& state) { walk_stack<&dlprof::detail::walk_frame_pointers>(state); }
BENCHMARK(BM_stack_frame_pointers)->ArgName("frames")->Arg(10)->Arg(20);

void BM_stack_unwind_libunwind(benchmark::State& state) {
  if (dlprof::detail::libunwind_backtrace() == nullptr) {
    state.SkipWithError("libunwind.so.8 cannot be opened");
    return;
  }
  walk_stack<&dlprof::detail::unwind_with_libunwind>(state);
}
BENCHMARK(BM_stack_unwind_libunwind)->ArgName("frames")->Arg(10)->Arg(20);

void BM_stack_unwind_libgcc(benchmark::State& state) { walk_stack<&dlprof::detail::unwind_with_libgcc>(state); }
BENCHMARK(BM_stack_unwind_libgcc)->ArgName("frames")->Arg(10)->Arg(20);

// ---------------------------------------------------------------------------------------------
// Idle: nothing records.

void BM_dlprof_range_idle(benchmark::State& state) {
  if (dlprof::detail::active_flags() != 0) {
    state.SkipWithError("a Profiler is recording or an NVTX tool is attached (unset DLPROF_NVTX, NVTX_INJECTION64_PATH)");
    return;
  }
  for (auto _ : state) {
    DLPROF_RANGE("idle");
  }
}
BENCHMARK(BM_dlprof_range_idle);

// The arguments of DLPROF_RANGE_F are not even formatted while idle.
void BM_dlprof_range_f_idle(benchmark::State& state) {
  if (dlprof::detail::active_flags() != 0) {
    state.SkipWithError("a Profiler is recording or an NVTX tool is attached");
    return;
  }
  std::int64_t i = 0;
  for (auto _ : state) {
    DLPROF_RANGE_F("step {}", i % 64);
    ++i;
  }
}
BENCHMARK(BM_dlprof_range_f_idle);

#if DLPROF_HAS_NVTX

struct BenchDomain {
  static constexpr const char* name{"dlprof_bench"};
};

// What a library using NVTX3 directly writes: a static registered string and attributes
// (each behind a function-local static guard) and a scoped_range_in. With no tool attached
// each NVTX call loads a null function pointer from NVTX's table and returns.
void BM_nvtx3_scoped_range_no_tool(benchmark::State& state) {
  for (auto _ : state) {
    NVTX3_FUNC_RANGE_IN(BenchDomain);
  }
}
BENCHMARK(BM_nvtx3_scoped_range_no_tool);

// The C calls underneath, with the domain and attributes prepared once: the floor of NVTX.
void BM_nvtx_c_push_pop_no_tool(benchmark::State& state) {
  const nvtxDomainHandle_t domain = nvtxDomainCreateA("dlprof_bench_c");
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attributes.message.registered = nvtxDomainRegisterStringA(domain, "c range");
  for (auto _ : state) {
    nvtxDomainRangePushEx(domain, &attributes);
    nvtxDomainRangePop(domain);
  }
  nvtxDomainDestroy(domain);
}
BENCHMARK(BM_nvtx_c_push_pop_no_tool);

#endif  // DLPROF_HAS_NVTX

// ---------------------------------------------------------------------------------------------
// Clocks: what a recorded range reads twice. main() constructs a Profiler first, so
// detail::select_clock() has chosen the counter now_ticks() reads.

void BM_clock_two_reads(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(dlprof::detail::now_ticks());
    benchmark::DoNotOptimize(dlprof::detail::now_ticks());
  }
  state.SetLabel(dlprof::detail::g_use_tsc.load() ? "tsc" : "clock_monotonic");
}
BENCHMARK(BM_clock_two_reads);

#if defined(__x86_64__) || defined(__i386__)
void BM_clock_rdtsc_pair(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(__rdtsc());
    benchmark::DoNotOptimize(__rdtsc());
  }
}
BENCHMARK(BM_clock_rdtsc_pair);
#endif

void clock_gettime_pair(benchmark::State& state, clockid_t clock) {
  timespec first{};
  timespec second{};
  for (auto _ : state) {
    clock_gettime(clock, &first);
    clock_gettime(clock, &second);
    benchmark::DoNotOptimize(first);
    benchmark::DoNotOptimize(second);
  }
}

void BM_clock_gettime_monotonic_pair(benchmark::State& state) { clock_gettime_pair(state, CLOCK_MONOTONIC); }
BENCHMARK(BM_clock_gettime_monotonic_pair);

void BM_clock_gettime_realtime_pair(benchmark::State& state) { clock_gettime_pair(state, CLOCK_REALTIME); }
BENCHMARK(BM_clock_gettime_realtime_pair);

// ---------------------------------------------------------------------------------------------
// Recording: a Profiler window is open.

/// C++17 has no std::barrier: the threads of one benchmark run meet here around a window
/// restart.
class Barrier {
 public:
  void arrive_and_wait(int threads) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == threads) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    changed_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mutex_;  // guards arrived_ and generation_
  std::condition_variable changed_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
};

/// The Profiler of the recording benchmark now running, and what its windows collected. Set up
/// before the run's threads start (benchmark's Setup hook), read by thread 0 after they finish.
struct Recording {
  std::optional<dlprof::Profiler> profiler;
  Barrier barrier;
  std::uint64_t windows = 0;
  std::uint64_t events = 0;
  std::uint64_t dropped = 0;
  std::uint64_t stacks = 0;        // events with a call stack
  std::uint64_t stack_frames = 0;  // and their frames
  bool gpu_correlation = false;  // windows also raise kCorrelating (no GPU backend here to do it)
};
Recording g_recording;

/// Starts recording with `options` (the ring sized by the run's first argument).
void start_recording_with(const benchmark::State& state, dlprof::ProfilerOptions options) {
  g_recording.windows = g_recording.events = g_recording.dropped = g_recording.stacks = g_recording.stack_frames = 0;
  g_recording.profiler.emplace(options.events_per_thread(static_cast<std::size_t>(state.range(0)))
                                   .on_trace_ready([](const dlprof::Trace& trace) {  // runs in stop(), on thread 0
                                     ++g_recording.windows;
                                     g_recording.events += trace.events.size();
                                     g_recording.dropped += trace.dropped_events;
                                     for (const dlprof::TraceEvent& event : trace.events) {
                                       if (event.stack == dlprof::TraceEvent::kNoStack) continue;
                                       ++g_recording.stacks;
                                       g_recording.stack_frames += trace.stacks[event.stack].depth;
                                     }
                                   }));
  g_recording.profiler->start();
}

void start_recording(const benchmark::State& state) { start_recording_with(state, dlprof::ProfilerOptions{}); }

void end_recording(const benchmark::State&) { g_recording.profiler.reset(); }

/// Pauses every thread's timer, has thread 0 close the window (draining the rings) and open a
/// new one, and resumes: the rings never fill, and the restart is not timed.
void restart_window(benchmark::State& state) {
  state.PauseTiming();
  g_recording.barrier.arrive_and_wait(state.threads());
  if (state.thread_index() == 0) {
    g_recording.profiler->stop();
    g_recording.profiler->start();
    if (g_recording.gpu_correlation) dlprof::detail::g_active.fetch_or(dlprof::detail::kCorrelating);
  }
  g_recording.barrier.arrive_and_wait(state.threads());
  state.ResumeTiming();
}

/// Runs `range(i)` once per iteration while recording, restarting the window every
/// events_per_thread / 2 ring records (a range writes `records_per_range`).
template <class Range>
void record_ranges(benchmark::State& state, Range range, std::int64_t records_per_range = 1) {
  // A thread's first event attaches (allocates and pre-faults) its ring: do that untimed, as
  // Profiler::start() does for its own thread. Calling `range` only in the loop lets the
  // compiler inline it there, as it would in a user's function.
  if (dlprof::detail::t_ring == nullptr || dlprof::detail::t_ring->retired()) dlprof::detail::attach_thread_ring();
  const std::int64_t restart_every = state.range(0) / 2 / records_per_range;
  std::int64_t until_restart = restart_every;
  std::int64_t i = 0;
  for (auto _ : state) {
    range(i++);
    if (DLPROF_UNLIKELY(--until_restart == 0)) {
      restart_window(state);
      until_restart = restart_every;
    }
  }
  if (state.thread_index() != 0) return;
  // Every thread has left the loop (benchmark joins them at its end): close the last window.
  g_recording.profiler->stop();
  const double ranges = static_cast<double>(state.iterations()) * state.threads();
  state.counters["dropped"] = static_cast<double>(g_recording.dropped);
  state.counters["windows"] = static_cast<double>(g_recording.windows);
  state.counters["events_per_range"] = static_cast<double>(g_recording.events) / ranges;
  if (g_recording.dropped != 0) state.SkipWithError("the ring dropped events: the drop path was measured");
}

void BM_dlprof_range_recording(benchmark::State& state) {
  record_ranges(state, [](std::int64_t) { DLPROF_RANGE("recorded"); });
}
// 2^16 events is the default ring (2 MiB, resident in this machine's L2); 2^20 (32 MiB) spills
// it, so each event's store misses.
BENCHMARK(BM_dlprof_range_recording)
    ->ArgName("events_per_thread")
    ->Arg(1 << 16)
    ->Arg(1 << 20)
    ->Setup(start_recording)
    ->Teardown(end_recording);
BENCHMARK(BM_dlprof_range_recording)
    ->ArgName("events_per_thread")
    ->Arg(1 << 16)
    ->Threads(2)
    ->Setup(start_recording)
    ->Teardown(end_recording);

// with_stack: each range also takes its call stack as it begins, `frames` deep (stack_depth), at
// the bottom of a recursion deeper than that whose frames keep their frame pointers. The range
// writes a Stack record and its Range; a stack seen before is found in the thread's cache.
constexpr int kStackBenchDepth = 40;

void start_recording_with_stack(const benchmark::State& state) {
  start_recording_with(state, dlprof::ProfilerOptions{}
                                  .with_stack(true)
                                  .stack_depth(static_cast<std::size_t>(state.range(1)))
                                  .stack_unwinder(state.range(2) != 0 ? dlprof::StackUnwinder::FramePointers
                                                                      : dlprof::StackUnwinder::UnwindTables));
}

// What an annotated LibTorch optimizer writes per tensor after each step with profile_memory: one
// record, where a range writes one too.
void BM_tag_memory_recording(benchmark::State& state) {
  static float buffer[16];
  record_ranges(state, [](std::int64_t) { dlprof::tag_memory(buffer, sizeof buffer, dlprof::MemoryCategory::Parameter); });
}
BENCHMARK(BM_tag_memory_recording)
    ->ArgName("events_per_thread")
    ->Arg(1 << 16)
    ->Setup(start_recording)
    ->Teardown(end_recording);

void BM_dlprof_range_recording_with_stack(benchmark::State& state) {
  if (state.range(2) == 0 && dlprof::detail::libunwind_backtrace() == nullptr) {
    state.SkipWithError("libunwind.so.8 cannot be opened");
    return;
  }
  auto loop = [&]() DLPROF_BENCH_KEEPS_FRAME_POINTER {
    record_ranges(state, [](std::int64_t) { DLPROF_RANGE("recorded_with_stack"); }, /*records_per_range=*/2);
  };
  at_depth(kStackBenchDepth, loop);
  const double frames = g_recording.stacks == 0 ? 0 : static_cast<double>(g_recording.stack_frames) / g_recording.stacks;
  state.counters["frames"] = frames;
  if (frames != static_cast<double>(state.range(1))) state.SkipWithError("the stacks took fewer frames than asked for");
}
BENCHMARK(BM_dlprof_range_recording_with_stack)
    ->ArgNames({"events_per_thread", "frames", "frame_pointers"})
    ->Args({1 << 16, 10, 0})
    ->Args({1 << 16, 20, 0})
    ->Args({1 << 16, 10, 1})
    ->Args({1 << 16, 20, 1})
    ->Setup(start_recording_with_stack)
    ->Teardown(end_recording);

// While GPU activity is recorded, each range also pushes and pops an external correlation id so
// the kernels it launches link to it. The hooks here keep the id on a thread-local stack, the
// least CUPTI's own push/pop can do: this measures dlprof's share of the cost, not CUPTI's.
thread_local std::uint64_t t_external_ids[64];
thread_local int t_external_depth = 0;
void push_external_id(std::uint64_t id) noexcept { t_external_ids[t_external_depth++ & 63] = id; }
void pop_external_id() noexcept { --t_external_depth; }

void start_recording_with_gpu_correlation(const benchmark::State& state) {
  dlprof::detail::g_push_external_id.store(&push_external_id);
  dlprof::detail::g_pop_external_id.store(&pop_external_id);
  g_recording.gpu_correlation = true;
  start_recording(state);
  dlprof::detail::g_active.fetch_or(dlprof::detail::kCorrelating);
}

void end_recording_with_gpu_correlation(const benchmark::State& state) {
  g_recording.gpu_correlation = false;
  dlprof::detail::g_active.fetch_and(~dlprof::detail::kCorrelating);
  end_recording(state);
}

void BM_dlprof_range_recording_gpu_correlation(benchmark::State& state) {
  record_ranges(state, [](std::int64_t) {
    DLPROF_RANGE("recorded");
    if (DLPROF_UNLIKELY(t_external_depth != 1)) std::abort();  // the id is pushed for the range's lifetime
  });
}
BENCHMARK(BM_dlprof_range_recording_gpu_correlation)
    ->ArgName("events_per_thread")
    ->Arg(1 << 16)
    ->Setup(start_recording_with_gpu_correlation)
    ->Teardown(end_recording_with_gpu_correlation);

// Numbers as arguments: kept in a second ring record, formatted when the window is assembled
// (untimed here, as a window's close is).
void BM_dlprof_range_f_recording(benchmark::State& state) {
  record_ranges(
      state, [](std::int64_t i) { DLPROF_RANGE_F("epoch {} step {}", 3, i); }, 2);
}
BENCHMARK(BM_dlprof_range_f_recording)
    ->ArgName("events_per_thread")
    ->Arg(1 << 16)
    ->Setup(start_recording)
    ->Teardown(end_recording);

// A string argument, which the range cannot keep: formatted as the range begins, then a hit in
// the per-thread intern cache (64 recurring names).
const std::string_view kLayerNames[] = {"conv1", "conv2", "fc1", "fc2"};
void BM_dlprof_range_f_string_recording(benchmark::State& state) {
  record_ranges(state, [](std::int64_t i) { DLPROF_RANGE_F("layer {} step {}", kLayerNames[i % 4], i % 16); });
}
BENCHMARK(BM_dlprof_range_f_string_recording)
    ->ArgName("events_per_thread")
    ->Arg(1 << 16)
    ->Setup(start_recording)
    ->Teardown(end_recording);

// A short-lived thread (a data loader's, a pool's churn) that records one range: what starting and
// joining it costs, with no Profiler and while recording. Its ring comes from the rings of ended
// threads (allocating and pre-faulting a fresh 2 MiB ring costs about a millisecond); the window
// is restarted, untimed, every 256 threads so their leftover events do not pile up.
void BM_short_thread_idle(benchmark::State& state) {
  for (auto _ : state) {
    std::thread worker([] { DLPROF_RANGE("short-thread"); });
    worker.join();
  }
}
BENCHMARK(BM_short_thread_idle)->UseRealTime();

/// Starts and joins a thread that records one range, per iteration; every 256 threads, untimed,
/// `settle()` empties what they left (their events wait in the rings of ended threads).
template <class Settle>
void run_short_threads(benchmark::State& state, Settle&& settle) {
  std::int64_t until_settled = 256;
  for (auto _ : state) {
    std::thread worker([] { DLPROF_RANGE("short-thread"); });
    worker.join();
    if (--until_settled == 0) {
      state.PauseTiming();
      settle();
      until_settled = 256;
      state.ResumeTiming();
    }
  }
}

void BM_short_thread_recording(benchmark::State& state) {
  dlprof::Profiler profiler;
  profiler.start();
  run_short_threads(state, [&] {
    profiler.stop();
    profiler.start();
  });
  profiler.stop();
}
BENCHMARK(BM_short_thread_recording)->UseRealTime();

// The same under a flight recorder, where each recording thread also gets (and at its end frees)
// an alternate signal stack for the crash handler; a step, untimed, every 256 threads.
void BM_short_thread_flight_recorder(benchmark::State& state) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.mode(dlprof::Mode::FlightRecorder).slow_step_factor(0));
  profiler.start();
  run_short_threads(state, [&] { profiler.step(); });
  profiler.stop();
}
BENCHMARK(BM_short_thread_flight_recorder)->UseRealTime();

// Ratios use CPU time per range: on a quiet machine it equals wall time for these single-thread
// loops, and on a busy one it leaves out the time the thread spent descheduled. For the 2-thread
// run benchmark divides wall time by the ranges of both threads (a throughput); CPU time per
// range is still what each thread pays.
void print_ratios(const dlprof_bench::SummaryReporter& results) {
  using dlprof_bench::print_ratio;
  using dlprof_bench::ratio;
  const auto cpu = [&](const char* name) { return results.cpu_ns(name); };
  const auto two_reads = cpu("BM_clock_two_reads");
  fmt::print("\nRatios of CPU time per range (DESIGN.md cost model), from the figures above:\n");
  print_ratio("idle / NVTX3 scoped_range, no tool",
              ratio(cpu("BM_dlprof_range_idle"), cpu("BM_nvtx3_scoped_range_no_tool")), 1.0);
  print_ratio("DLPROF_RANGE_F idle / NVTX3 scoped_range, no tool",
              ratio(cpu("BM_dlprof_range_f_idle"), cpu("BM_nvtx3_scoped_range_no_tool")), 1.0);
  print_ratio("idle / NVTX C push+pop, no tool (reference)",
              ratio(cpu("BM_dlprof_range_idle"), cpu("BM_nvtx_c_push_pop_no_tool")));
  print_ratio("recording (2^16 ring) / two clock reads",
              ratio(cpu("BM_dlprof_range_recording/events_per_thread:65536"), two_reads), 1.2);
  print_ratio("recording (2^20 ring) / two clock reads",
              ratio(cpu("BM_dlprof_range_recording/events_per_thread:1048576"), two_reads), 1.2);
  print_ratio("recording, 2 threads (2^16 rings) / two clock reads",
              ratio(cpu("BM_dlprof_range_recording/events_per_thread:65536/threads:2"), two_reads), 1.2);
  print_ratio("DLPROF_RANGE_F recording, numbers / DLPROF_RANGE recording",
              ratio(cpu("BM_dlprof_range_f_recording/events_per_thread:65536"),
                    cpu("BM_dlprof_range_recording/events_per_thread:65536")),
              1.5);
  print_ratio("DLPROF_RANGE_F recording, a string / DLPROF_RANGE recording (reference)",
              ratio(cpu("BM_dlprof_range_f_string_recording/events_per_thread:65536"),
                    cpu("BM_dlprof_range_recording/events_per_thread:65536")));
  print_ratio("two clock reads / two rdtsc (reference)", ratio(two_reads, cpu("BM_clock_rdtsc_pair")));
  print_ratio("short-lived thread, one range: recording / idle (wall)",
              ratio(results.real_ns("BM_short_thread_recording/real_time"), results.real_ns("BM_short_thread_idle/real_time")),
              1.5);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // A Profiler's constructor selects the clock (TSC or CLOCK_MONOTONIC) and starts the tick
  // calibration, so the clock benchmarks read the counter recording would read.
  { const dlprof::Profiler selects_clock; }
  benchmark::AddCustomContext("dlprof_clock", dlprof::detail::g_use_tsc.load() ? "tsc" : "clock_monotonic");
  benchmark::AddCustomContext("kernel_clocksource", dlprof_bench::current_clocksource());
  benchmark::AddCustomContext("nvtx3", DLPROF_HAS_NVTX ? "compiled in, no tool attached" : "not available");
  dlprof_bench::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter);
  benchmark::Shutdown();
  return 0;
}
