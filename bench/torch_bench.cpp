// bench/torch_bench.cpp: what recording LibTorch's operators costs per op and per training step,
// for dlprof's observer (include/dlprof/torch.hpp) and LibTorch's own profilers, in one binary and
// one run so every ratio compares figures taken under the same load.
//
// Two workloads, each a full training step (zero_grad, forward, loss, backward, optimizer step)
// on fixed tensors, with torch::set_num_threads(1):
//   tiny_mlp   Linear(8, 8), ReLU, Linear(8, 1) on a [4, 8] batch, SGD: dispatch-bound, the time is
//              the ops' fixed cost, so a profiler's per-op cost shows at its largest;
//   mnist_cnn  the demo's dlprof_examples::MnistCnn on a [32, 1, 28, 28] batch, SGD with momentum.
//
// Modes, one benchmark each per workload (`<workload>/<mode>`):
//   no_profiler              nothing installed;
//   dlprof_idle              a dlprof::Profiler started, its schedule past its only cycle: the
//                            observer is removed (checked: at::hasGlobalCallbacks() is false), and
//                            prof.step() is called every step as a training loop would;
//   dlprof_ops               dlprof recording ops, schedule(0, 0, W) repeating: prof.step() every
//                            step, the rings drained every W steps inside the timed loop and the
//                            trace built on the Profiler's writer thread, where a handler tallies
//                            it (no file written);
//   dlprof_ops_shapes        the same with record_shapes (this file is built with NDEBUG);
//   record_profile           torch::autograd::profiler::RecordProfile (the legacy profiler, CPU
//                            state), restarted every W steps with timing paused: its JSON is
//                            written at each restart, into a string, untimed;
//   kineto_state_collector   torch::autograd::profiler::enableProfiler(ProfilerConfig(KINETO),
//                            {CPU}) / disableProfiler(): LibTorch 1.13 built without Kineto still
//                            collects the ops (it cannot save them); restarted every W steps,
//                            untimed;
//   kineto_state_collector_shapes  the same with report_input_shapes.
//
// W (steps per window) is the same for every recording mode: 8000 / ops_per_step, at most 100
// (66 for tiny_mlp, 23 for mnist_cnn); TORCH_BENCH_WINDOW=<steps> overrides it.
//
// Counters: ops_per_step (Op events dlprof records per step, counted once per workload),
// record_functions_per_step (every RecordFunction of any scope, counted by a callback),
// time_per_op (step time / ops_per_step; seconds in the JSON, "381ns" on the console),
// close_ns_per_op (time spent closing windows, per recorded op: for dlprof inside the timed loop,
// for LibTorch's profilers untimed), writer_ns_per_op (dlprof: CPU time of the writer thread that
// builds the traces, per recorded op, off the training thread), dropped (dlprof events lost to a full ring: must be 0),
// events_per_step (what the collector kept). Per-op overhead = (mode - no_profiler) /
// ops_per_step: printed after the table from the medians, and by bench/torch_overhead.py from JSON.
//
// paired_dlprof_ops_memory and paired_kineto_state_collector_memory: dlprof's ops and LibTorch's
// KINETO-state collector with profile_memory (every allocation and release recorded), paired.
//
// paired_<mode> (the five recording modes, both workloads): the same overhead measured inside one
// benchmark, W recorded steps alternating with W bare steps (see "Paired"), for mnist_cnn whose
// step drifts between repetitions by more than any profiler costs. Besides the means' difference
// (paired_overhead_ns_per_op), the difference of the step times' 10th, 25th and 50th
// percentiles (paired_p10/p25/p50_overhead_ns_per_op), which a step slowed by the host moves less.
//
// in_callbacks (both workloads, and mnist_cnn_batch1: the demo model's ops on one image): the
// time spent inside each collector's own callbacks, the collectors taking turns window by window
// in one benchmark (see "In callbacks"): counters <mode>_ns_per_op and
// dlprof_ops_shapes_per_<peer>. The steadiest per-op figure on mnist_cnn.
//
// paired_dlprof_flight_shapes (both workloads): the flight recorder with record_shapes in its
// steady state, each recorded step's prof.step() emptying the rings into its log, against the
// bare step in the same way. The same turns' whole
// steps (<mode>_step_ns_per_op) resolve on tiny_mlp and mnist_cnn_batch1, not on mnist_cnn.
//
// --floor adds tiny_mlp/floor_* and mnist_cnn/paired_floor_*: LibTorch's own floor, an empty
// RecordFunction callback on the observer's scopes (global, global with inputs, thread-local):
// what any observer pays before doing anything.
//
// Run: build-bench/bench/torch_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//      (add --benchmark_out=torch.json --benchmark_out_format=json for bench/torch_overhead.py)
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <dlprof/profiler.hpp>
#include <dlprof/torch.hpp>

#include "bench_summary.hpp"
#include "mnist_cnn.hpp"

static_assert(dlprof::detail::TorchOpObserver::kCanReadInputs,
              "torch_bench must be built with NDEBUG so that record_shapes reads op inputs");

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Workloads

struct TinyMlp {
  static constexpr const char* kName = "tiny_mlp";
  static constexpr double kMinTime = 0.5;  // seconds per repetition: ~10,000 steps
  torch::nn::Sequential model{torch::nn::Linear(8, 8), torch::nn::ReLU(), torch::nn::Linear(8, 1)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.01)};
  torch::Tensor input = torch::randn({4, 8});
  torch::Tensor target = torch::randn({4, 1});

  void step() {
    optimizer.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(input), target);
    loss.backward();
    optimizer.step();
  }
};

/// The demo model's training step on `kBatch` images.
template <std::int64_t kBatch>
struct MnistCnnBatch {
  // A batch of 32 is the demo's. A batch of 1 makes the same ops, but its step is short enough
  // for the collectors' cost to show in whole steps (in_callbacks only).
  static constexpr const char* kName = kBatch == 1 ? "mnist_cnn_batch1" : "mnist_cnn";
  // ~16 ms a step, of which the ops' overhead is ~1 %: more steps per repetition than the default.
  static constexpr double kMinTime = 1.0;
  dlprof_examples::MnistCnn model;
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)};
  torch::Tensor images = torch::randn({kBatch, 1, 28, 28});
  torch::Tensor labels = torch::randint(0, 10, {kBatch}, torch::kLong);

  void step() {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nll_loss(torch::log_softmax(model->forward(images), 1), labels);
    loss.backward();
    optimizer.step();
  }
};

using MnistCnnStep = MnistCnnBatch<32>;
using MnistCnnSingle = MnistCnnBatch<1>;

/// Steps run before each timed loop, whatever the mode (allocator and autograd warm-up).
constexpr int kWarmupSteps = 3;

template <class Workload>
std::unique_ptr<Workload> make_workload() {
  torch::manual_seed(0);
  auto workload = std::make_unique<Workload>();
  for (int i = 0; i < kWarmupSteps; ++i) workload->step();
  return workload;
}

// ---------------------------------------------------------------------------------------------
// How many ops a step has: counted once per workload, untimed.

struct OpCount {
  double ops_per_step = 0;               // Op events in a dlprof trace, per step
  double record_functions_per_step = 0;  // RecordFunction calls of any scope, per step
  std::int64_t window = 1;               // steps per recording window (dlprof, RecordProfile, KINETO)
};

std::array<std::atomic<std::int64_t>, static_cast<std::size_t>(at::RecordScope::NUM_SCOPES)> g_scope_calls{};

std::unique_ptr<at::ObserverContext> count_call(const at::RecordFunction& fn) {
  g_scope_calls[static_cast<std::size_t>(fn.scope())].fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

template <class Workload>
const OpCount& op_count() {
  static const OpCount count = [] {
    constexpr int kSteps = 10;
    auto workload = make_workload<Workload>();
    OpCount result;
    {  // a dlprof trace of kSteps steps
      dlprof::Profiler profiler;
      profiler.start();
      for (int i = 0; i < kSteps; ++i) workload->step();
      profiler.stop();
      std::int64_t ops = 0;
      for (const dlprof::TraceEvent& event : profiler.last_trace()->events)
        if (event.kind == dlprof::EventKind::Op) ++ops;
      result.ops_per_step = static_cast<double>(ops) / kSteps;
    }
    {  // every RecordFunction, any scope
      for (auto& calls : g_scope_calls) calls = 0;
      const at::CallbackHandle handle = at::addGlobalCallback(at::RecordFunctionCallback(&count_call));
      for (int i = 0; i < kSteps; ++i) workload->step();
      at::removeCallback(handle);
      std::int64_t all = 0;
      for (auto& calls : g_scope_calls) all += calls.load();
      result.record_functions_per_step = static_cast<double>(all) / kSteps;
    }
    // A window holds at most ~24k ops' events (up to 3 events each with shapes): well inside
    // the default 2^16-event ring, and the same length for every recording mode.
    result.window = std::max<std::int64_t>(1, std::min<std::int64_t>(100, static_cast<std::int64_t>(8000 / result.ops_per_step)));
    if (const char* window = std::getenv("TORCH_BENCH_WINDOW")) result.window = std::max(1, std::atoi(window));
    return result;
  }();
  return count;
}

void set_common_counters(benchmark::State& state, const OpCount& count) {
  state.counters["ops_per_step"] = count.ops_per_step;
  state.counters["record_functions_per_step"] = count.record_functions_per_step;
  // Step time / ops in seconds (ops * iterations / time, inverted): the console prints it with
  // an SI prefix ("381.2ns"), the JSON output in seconds.
  state.counters["time_per_op"] =
      benchmark::Counter(count.ops_per_step, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ---------------------------------------------------------------------------------------------
// Modes

template <class Workload>
void BM_no_profiler(benchmark::State& state) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  if (at::hasGlobalCallbacks() || at::hasThreadLocalCallbacks()) {
    state.SkipWithError("a RecordFunction callback is installed with no profiler running");
    return;
  }
  for (auto _ : state) workload->step();
  set_common_counters(state, count);
}

template <class Workload>
void BM_dlprof_idle(benchmark::State& state) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  // One recorded step (the observer installed), then the schedule is past its only cycle.
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 1, /*repeat=*/1)));
  profiler.start();
  if (!at::hasGlobalCallbacks()) {
    state.SkipWithError("the observer is not installed while recording");
    return;
  }
  workload->step();
  profiler.step();
  if (profiler.current_action() != dlprof::Action::None || at::hasGlobalCallbacks()) {
    state.SkipWithError("the observer is still installed after the schedule went idle");
    return;
  }
  std::int64_t recorded_ops = 0;
  for (const dlprof::TraceEvent& event : profiler.last_trace()->events)
    if (event.kind == dlprof::EventKind::Op) ++recorded_ops;
  if (recorded_ops == 0) {
    state.SkipWithError("the recorded step has no op");
    return;
  }
  for (auto _ : state) {
    workload->step();
    profiler.step();
  }
  if (at::hasGlobalCallbacks()) state.SkipWithError("a callback was installed during the idle steps");
  profiler.stop();
  set_common_counters(state, count);
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// What dlprof's traces held, tallied by a background handler: the trace of each window is built
/// on the Profiler's writer thread, as it is for a training loop whose handlers all run there
/// (tensorboard_trace_handler does), so reading it on the training thread would wait for it.
struct TraceTally {
  std::atomic<std::int64_t> steps{0}, events{0}, dropped{0};
  std::atomic<std::int64_t> writer_cpu_ns{0};  // CPU time of the writer thread, which builds the traces

  dlprof::TraceHandler handler() {
    return dlprof::TraceHandler(
        [this](const dlprof::Trace& trace) {
          for (const dlprof::TraceEvent& event : trace.events)
            if (event.kind == dlprof::EventKind::Step) steps.fetch_add(1, std::memory_order_relaxed);
          events.fetch_add(static_cast<std::int64_t>(trace.events.size()), std::memory_order_relaxed);
          dropped.fetch_add(static_cast<std::int64_t>(trace.dropped_events), std::memory_order_relaxed);
          writer_cpu_ns.store(thread_cpu_ns(), std::memory_order_relaxed);  // the builds so far, and this
        },
        /*run_in_background=*/true);
  }
};

template <class Workload>
void dlprof_recording(benchmark::State& state, bool shapes) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  TraceTally tally;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .schedule(dlprof::schedule(0, 0, count.window))
                                .record_shapes(shapes)
                                .on_trace_ready(tally.handler()));
  profiler.start();
  if (!at::hasGlobalCallbacks()) {
    state.SkipWithError("the observer is not installed while recording");
    return;
  }
  std::int64_t windows = 0;
  Clock::duration closing{};
  for (auto _ : state) {
    workload->step();
    const bool closes = profiler.current_action() == dlprof::Action::RecordAndSave;
    if (!closes) {
      profiler.step();
      continue;
    }
    const Clock::time_point begin = Clock::now();
    profiler.step();  // drains the rings; the trace is built on the writer thread
    closing += Clock::now() - begin;
    ++windows;
  }
  profiler.stop();  // waits for the traces
  set_common_counters(state, count);
  const std::int64_t recorded_steps = windows * count.window;
  state.counters["windows"] = static_cast<double>(windows);
  state.counters["dropped"] = static_cast<double>(tally.dropped.load());
  if (tally.steps.load() < recorded_steps) state.SkipWithError("steps are missing from the traces");
  if (tally.steps.load() > 0)
    state.counters["events_per_step"] = static_cast<double>(tally.events.load()) / static_cast<double>(tally.steps.load());
  if (recorded_steps > 0) {
    state.counters["writer_ns_per_op"] =
        static_cast<double>(tally.writer_cpu_ns.load()) / (static_cast<double>(tally.steps.load()) * count.ops_per_step);
    state.counters["close_ns_per_op"] =
        std::chrono::duration<double, std::nano>(closing).count() / (static_cast<double>(recorded_steps) * count.ops_per_step);
  }
  if (tally.dropped.load() != 0) state.SkipWithError("dlprof dropped events: the ring filled");
}

template <class Workload>
void BM_dlprof_ops(benchmark::State& state) {
  dlprof_recording<Workload>(state, false);
}

template <class Workload>
void BM_dlprof_ops_shapes(benchmark::State& state) {
  dlprof_recording<Workload>(state, true);
}

/// Runs the timed loop with a LibTorch profiler opened by `open` and closed by `close` (which
/// returns the events it collected) around every `window` steps, untimed.
template <class Workload, class Open, class Close>
void torch_profiler_loop(benchmark::State& state, Open open, Close close) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  open();
  std::int64_t until_restart = count.window, events = 0, closed_steps = 0;
  Clock::duration closing{};
  for (auto _ : state) {
    workload->step();
    if (--until_restart != 0) continue;
    state.PauseTiming();
    const Clock::time_point begin = Clock::now();
    events += close();
    closing += Clock::now() - begin;
    closed_steps += count.window;
    open();
    until_restart = count.window;
    state.ResumeTiming();
  }
  {
    const Clock::time_point begin = Clock::now();
    events += close();
    closing += Clock::now() - begin;
    closed_steps += count.window - until_restart;
  }
  set_common_counters(state, count);
  if (closed_steps > 0) {
    state.counters["events_per_step"] = static_cast<double>(events) / static_cast<double>(closed_steps);
    state.counters["close_ns_per_op"] =
        std::chrono::duration<double, std::nano>(closing).count() / (static_cast<double>(closed_steps) * count.ops_per_step);
  }
  if (events == 0) state.SkipWithError("the profiler collected nothing");
}

template <class Workload>
void BM_record_profile(benchmark::State& state) {
  std::ostringstream out;
  std::optional<torch::autograd::profiler::RecordProfile> guard;
  torch_profiler_loop<Workload>(
      state, [&] { guard.emplace(out); },
      [&]() -> std::int64_t {
        guard.reset();  // writes the window's chrome trace into `out`
        const std::string text = out.str();
        out.str("");
        std::int64_t events = 0;  // one object per event, each with a "ph" key
        for (std::size_t at = text.find("\"ph\""); at != std::string::npos; at = text.find("\"ph\"", at + 4)) ++events;
        return events;
      });
}

/// Enables LibTorch's KINETO-state collector on the CPU; disableProfiler() ends it.
void enable_kineto_state(bool shapes, bool memory = false) {
  namespace profiler = torch::autograd::profiler;
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO, /*report_input_shapes=*/shapes,
                                        /*profile_memory=*/memory);
  const std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
}

template <class Workload>
void kineto_state(benchmark::State& state, bool shapes) {
  namespace profiler = torch::autograd::profiler;
  torch_profiler_loop<Workload>(
      state, [&] { enable_kineto_state(shapes); },
      [&]() -> std::int64_t {
        const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
        return static_cast<std::int64_t>(result->events().size());
      });
}

template <class Workload>
void BM_kineto_state_collector(benchmark::State& state) {
  kineto_state<Workload>(state, false);
}

template <class Workload>
void BM_kineto_state_collector_shapes(benchmark::State& state) {
  kineto_state<Workload>(state, true);
}

// ---------------------------------------------------------------------------------------------
// Paired: each recording mode against the bare step in the same benchmark, window by window.
// On this VM a mnist_cnn step drifts by 3-5 % from one repetition to the next (no_profiler alone:
// 15.5 to 18.1 ms), more than the whole per-op cost of any profiler, so separate benchmarks cannot
// resolve it. Here W recorded steps alternate with W bare steps; each step is timed on the
// thread's CPU clock and the benchmark's (manual) time is that of the recorded steps:
//   paired_overhead_ns_per_op = (mean recorded step - mean bare step) / ops_per_step.
// The first bare step after each window is not counted (it runs in caches the window's close left).
// dlprof: schedule(W, 0, W), so the bare steps are the wait phase (observer removed) and the
// recorded steps include prof.step(), the rings drained at each window's end included; LibTorch's
// profilers are enabled and disabled (their results built) between windows, untimed.

struct PairedTimes {
  std::vector<std::int64_t> recorded_ns, bare_ns;  // one per step

  void add_recorded(std::int64_t ns) { recorded_ns.push_back(ns); }
  void add_bare(std::int64_t ns) { bare_ns.push_back(ns); }

  /// The q-quantile of a step time, in ns (nearest rank).
  static double quantile(std::vector<std::int64_t> steps, double q) {
    const auto rank = static_cast<std::ptrdiff_t>(q * static_cast<double>(steps.size() - 1) + 0.5);
    std::nth_element(steps.begin(), steps.begin() + rank, steps.end());
    return static_cast<double>(steps[static_cast<std::size_t>(rank)]);
  }

  static double mean(const std::vector<std::int64_t>& steps) {
    double sum = 0;
    for (const std::int64_t ns : steps) sum += static_cast<double>(ns);
    return sum / static_cast<double>(steps.size());
  }

  void set_counters(benchmark::State& state, const OpCount& count) const {
    set_common_counters(state, count);
    if (recorded_ns.empty() || bare_ns.empty()) return;
    state.counters["paired_bare_us"] = mean(bare_ns) / 1e3;
    state.counters["paired_overhead_ns_per_op"] = (mean(recorded_ns) - mean(bare_ns)) / count.ops_per_step;
    // A step slowed by the host (a preempted vCPU still counts as the thread's CPU time here)
    // moves the mean by more than a profiler costs on a compute-bound step; it moves the lower
    // quantiles far less, so their difference is the steadier figure on mnist_cnn.
    for (const auto& [name, q] : {std::pair{"paired_p10_overhead_ns_per_op", 0.1},
                                  std::pair{"paired_p25_overhead_ns_per_op", 0.25},
                                  std::pair{"paired_p50_overhead_ns_per_op", 0.5}})
      state.counters[name] = (quantile(recorded_ns, q) - quantile(bare_ns, q)) / count.ops_per_step;
  }
};

/// `stacks`: with_stack, each op's C++ call stack taken by the unwind tables (libunwind).
template <class Workload>
void paired_dlprof(benchmark::State& state, bool shapes, bool stacks = false, bool memory = false) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  TraceTally tally;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .schedule(dlprof::schedule(count.window, 0, count.window))
                                .record_shapes(shapes)
                                .with_stack(stacks)
                                .profile_memory(memory)
                                .on_trace_ready(tally.handler()));
  profiler.start();
  PairedTimes times;
  bool after_window = true;
  const auto recording = [&] {
    const dlprof::Action action = profiler.current_action();
    return action == dlprof::Action::Record || action == dlprof::Action::RecordAndSave;
  };
  for (auto _ : state) {
    while (!recording()) {  // the wait phase: bare steps
      const std::int64_t begin = thread_cpu_ns();
      workload->step();
      profiler.step();
      const std::int64_t elapsed = thread_cpu_ns() - begin;
      if (!after_window) {
        times.add_bare(elapsed);
      }
      after_window = false;
    }
    if (at::hasGlobalCallbacks() == false) {
      state.SkipWithError("the observer is not installed while recording");
      break;
    }
    const bool closes = profiler.current_action() == dlprof::Action::RecordAndSave;
    const std::int64_t begin = thread_cpu_ns();
    workload->step();
    profiler.step();
    const std::int64_t elapsed = thread_cpu_ns() - begin;
    state.SetIterationTime(static_cast<double>(elapsed) * 1e-9);
    times.add_recorded(elapsed);
    if (closes) after_window = true;
  }
  profiler.stop();
  times.set_counters(state, count);
  state.counters["dropped"] = static_cast<double>(tally.dropped.load());
  if (tally.dropped.load() != 0) state.SkipWithError("dlprof dropped events: the ring filled");
}

/// The flight recorder (DLPROF_MODE=flight-recorder) with record_shapes, in its steady state: every
/// recorded step ends with prof.step(), which empties the rings into the recorder's log. Its W
/// recorded steps alternate with W bare ones, the recorder stopped (observer removed) between.
/// The first recorded step after each start() is not counted: start() allocates the log.
template <class Workload>
void BM_paired_dlprof_flight_shapes(benchmark::State& state) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .mode(dlprof::Mode::FlightRecorder)
                                .record_shapes(true)
                                .slow_step_factor(0));
  PairedTimes times;
  std::int64_t recorded_in_block = count.window;
  for (auto _ : state) {
    if (recorded_in_block == count.window) {
      if (profiler.started()) profiler.stop();
      for (std::int64_t i = 0; i < count.window; ++i) {
        const std::int64_t begin = thread_cpu_ns();
        workload->step();
        if (i != 0) times.add_bare(thread_cpu_ns() - begin);
      }
      profiler.start();
      recorded_in_block = 0;
      if (at::hasGlobalCallbacks() == false) {
        state.SkipWithError("the observer is not installed while recording");
        break;
      }
    }
    const std::int64_t begin = thread_cpu_ns();
    workload->step();
    profiler.step();
    const std::int64_t elapsed = thread_cpu_ns() - begin;
    state.SetIterationTime(static_cast<double>(elapsed) * 1e-9);
    if (recorded_in_block++ != 0) times.add_recorded(elapsed);
  }
  if (!profiler.dump("end of benchmark")) state.SkipWithError("the flight recorder did not dump");
  const auto trace = profiler.last_trace();
  profiler.stop();
  times.set_counters(state, count);
  state.counters["dropped"] = trace != nullptr ? static_cast<double>(trace->dropped_events) : -1;
  if (trace == nullptr || trace->dropped_events != 0) state.SkipWithError("dlprof dropped events: the ring filled");
}

template <class Workload, class Open, class Close>
void paired_torch(benchmark::State& state, Open open, Close close) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  PairedTimes times;
  std::int64_t in_window = 0;
  open();
  for (auto _ : state) {
    const std::int64_t begin = thread_cpu_ns();
    workload->step();
    const std::int64_t elapsed = thread_cpu_ns() - begin;
    state.SetIterationTime(static_cast<double>(elapsed) * 1e-9);
    times.add_recorded(elapsed);
    if (++in_window < count.window) continue;
    close();
    for (std::int64_t i = 0; i < count.window; ++i) {
      const std::int64_t bare_begin = thread_cpu_ns();
      workload->step();
      if (i == 0) continue;
      times.add_bare(thread_cpu_ns() - bare_begin);
    }
    open();
    in_window = 0;
  }
  close();
  times.set_counters(state, count);
}

template <class Workload>
void BM_paired_dlprof_ops(benchmark::State& state) {
  paired_dlprof<Workload>(state, false);
}

template <class Workload>
void BM_paired_dlprof_ops_shapes(benchmark::State& state) {
  paired_dlprof<Workload>(state, true);
}

template <class Workload>
void BM_paired_dlprof_ops_stack(benchmark::State& state) {
  paired_dlprof<Workload>(state, false, true);
}

template <class Workload>
void BM_paired_dlprof_ops_memory(benchmark::State& state) {
  paired_dlprof<Workload>(state, false, false, true);
}

template <class Workload>
void BM_paired_record_profile(benchmark::State& state) {
  std::ostringstream out;
  std::optional<torch::autograd::profiler::RecordProfile> guard;
  paired_torch<Workload>(
      state, [&] { guard.emplace(out); },
      [&] {
        guard.reset();
        out.str("");
      });
}

template <class Workload>
void paired_kineto(benchmark::State& state, bool shapes, bool memory = false) {
  paired_torch<Workload>(
      state, [&] { enable_kineto_state(shapes, memory); }, [] { torch::autograd::profiler::disableProfiler(); });
}

template <class Workload>
void BM_paired_kineto_state_collector_memory(benchmark::State& state) {
  paired_kineto<Workload>(state, false, true);
}

template <class Workload>
void BM_paired_kineto_state_collector(benchmark::State& state) {
  paired_kineto<Workload>(state, false);
}

template <class Workload>
void BM_paired_kineto_state_collector_shapes(benchmark::State& state) {
  paired_kineto<Workload>(state, true);
}

// ---------------------------------------------------------------------------------------------
// In callbacks (<workload>/in_callbacks): the time each collector spends inside its own
// RecordFunction callbacks, timed by two probe callbacks around them. On mnist_cnn a step's
// compute drifts by more than any collector costs (see "Paired"); the callbacks' time does not
// include it, so this figure resolves what the step times cannot. LibTorch runs a RecordFunction's global callbacks, then
// its thread-local ones, each in the order they were added (checked by check_callback_order()),
// so a global probe added before the profiler and a thread-local one added after it bracket
// the profiler's callbacks at both the op's entry and its exit, whether the profiler's are
// global (dlprof) or thread-local (LibTorch's). What the bracket leaves out is the same for
// every profiler (RecordFunction itself) except two costs: LibTorch boxing each op's inputs
// when a callback needs them (dlprof and the KINETO-state collector with shapes; measured by
// the floor benchmarks), and the KINETO-state collector freeing its per-op context after the
// exit callbacks. The probes' own cost (probes_only) is measured alongside and subtracted.

/// The floor: a callback doing nothing.
std::unique_ptr<at::ObserverContext> empty_enter(const at::RecordFunction&) { return nullptr; }
void empty_exit(const at::RecordFunction&, at::ObserverContext*) {}

/// An empty callback as dlprof's observer registers its own: the same scopes, inputs when
/// `inputs`. What it costs, any such callback costs, boxing included.
at::RecordFunctionCallback floor_callback(bool inputs) {
  return at::RecordFunctionCallback(&empty_enter, &empty_exit)
      .needsInputs(inputs)
      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
}

at::CallbackHandle add_floor_callback(bool inputs) { return at::addGlobalCallback(floor_callback(inputs)); }

struct ProbeTimes {
  std::int64_t enter_began = 0, exit_began = 0;
  std::int64_t ticks = 0;  // between the probes, entries and exits
  std::int64_t calls = 0;  // RecordFunctions probed
};
thread_local ProbeTimes t_probe;

std::unique_ptr<at::ObserverContext> probe_first_enter(const at::RecordFunction&) {
  t_probe.enter_began = dlprof::detail::now_ticks();
  return nullptr;
}
void probe_first_exit(const at::RecordFunction&, at::ObserverContext*) { t_probe.exit_began = dlprof::detail::now_ticks(); }
std::unique_ptr<at::ObserverContext> probe_last_enter(const at::RecordFunction&) {
  t_probe.ticks += dlprof::detail::now_ticks() - t_probe.enter_began;
  ++t_probe.calls;
  return nullptr;
}
void probe_last_exit(const at::RecordFunction&, at::ObserverContext*) {
  t_probe.ticks += dlprof::detail::now_ticks() - t_probe.exit_began;
}

thread_local std::vector<int> t_callback_order;  // check_callback_order()'s markers, as they ran

template <int kMarker>
std::unique_ptr<at::ObserverContext> order_enter(const at::RecordFunction&) {
  t_callback_order.push_back(kMarker);
  return nullptr;
}

template <int kMarker>
void order_exit(const at::RecordFunction&, at::ObserverContext*) {
  t_callback_order.push_back(-kMarker);
}

/// Whether LibTorch runs callbacks in the order the probes rely on: the first global one, a
/// later global one, a thread-local one, a later thread-local one; entries and exits alike.
bool check_callback_order() {
  t_callback_order.clear();
  const std::array<at::CallbackHandle, 4> handles = {
      at::addGlobalCallback(at::RecordFunctionCallback(&order_enter<1>, &order_exit<1>)),
      at::addThreadLocalCallback(at::RecordFunctionCallback(&order_enter<3>, &order_exit<3>)),
      at::addGlobalCallback(at::RecordFunctionCallback(&order_enter<2>, &order_exit<2>)),
      at::addThreadLocalCallback(at::RecordFunctionCallback(&order_enter<4>, &order_exit<4>))};
  { RECORD_USER_SCOPE("dlprof_bench_callback_order"); }
  for (const at::CallbackHandle handle : handles) at::removeCallback(handle);
  return t_callback_order == std::vector<int>{1, 2, 3, 4, -1, -2, -3, -4};
}

/// One collector as the alternating benchmark runs it: open() before a window, close() after.
struct ProbedMode {
  const char* name;
  std::function<void()> open, close;
  std::function<void()> end_step = [] {};  // after each step, inside its time: the flight recorder's prof.step()
  std::int64_t ticks = 0, steps = 0;
  std::int64_t step_ticks = 0;  // the counted steps' own time, whole
};

/// The collectors take turns, one short window each, the probes around their callbacks;
/// each window's first step is not counted (it runs in what the previous close left in cache).
/// Taking turns within one benchmark puts every collector under the same load: on this VM a
/// mnist_cnn step's speed drifts by 20-30 % between repetitions, and with it every in-callback
/// figure, so only figures taken side by side compare.
///   <mode>_ns_per_op: probed time per step / ops_per_step, less the probes' own (probes_only);
///   dlprof_ops_shapes_per_<peer>: the ratios the targets are about.
/// The same turns also time each counted step whole, which takes in what the bracket leaves out
/// (input boxing, the collector's per-op context freed) at the price of the step's own noise:
///   <mode>_step_ns_per_op: the step time's mean less probes_only's, per op;
///   dlprof_ops_shapes_step_per_<peer>: its ratios.
/// The flight recorder takes a turn too (dlprof_flight_shapes), its prof.step() after each step
/// inside the step's time: its whole steps are its steady state, the rings emptied into its log.
/// Two empty callbacks take their turns too, registered as dlprof's is: floor_callback, and
/// floor_callback_inputs, for which LibTorch boxes every op's inputs. Their whole steps tell what
/// of a collector's cost is LibTorch's (boxing_step_ns_per_op: the difference of the two).
template <class Workload>
void BM_in_callbacks(benchmark::State& state) {
  static const bool order_holds = check_callback_order();
  if (!order_holds) {
    state.SkipWithError("LibTorch does not run callbacks in the order the probes need");
    return;
  }
  namespace profiler = torch::autograd::profiler;
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  dlprof::Profiler dlprof_ops{dlprof::ProfilerOptions{}};
  dlprof::Profiler dlprof_ops_shapes{dlprof::ProfilerOptions{}.record_shapes(true)};
  dlprof::Profiler dlprof_flight_shapes{
      dlprof::ProfilerOptions{}.mode(dlprof::Mode::FlightRecorder).record_shapes(true).slow_step_factor(0)};
  std::uint64_t dlprof_dropped = 0;
  const auto stop_dlprof = [&](dlprof::Profiler& profiler) {
    profiler.stop();
    dlprof_dropped += profiler.last_trace()->dropped_events;
  };
  std::ostringstream record_profile_json;
  std::optional<profiler::RecordProfile> record_profile;
  at::CallbackHandle floor = 0;
  std::vector<ProbedMode> modes = {
      {"probes_only", [] {}, [] {}},
      {"dlprof_ops", [&] { dlprof_ops.start(); }, [&] { stop_dlprof(dlprof_ops); }},
      {"dlprof_ops_shapes", [&] { dlprof_ops_shapes.start(); }, [&] { stop_dlprof(dlprof_ops_shapes); }},
      {"dlprof_flight_shapes", [&] { dlprof_flight_shapes.start(); },
       [&] {
         dlprof_flight_shapes.dump();
         stop_dlprof(dlprof_flight_shapes);
       },
       [&] { dlprof_flight_shapes.step(); }},
      {"record_profile", [&] { record_profile.emplace(record_profile_json); },
       [&] {
         record_profile.reset();
         record_profile_json.str("");
       }},
      {"kineto_state_collector", [] { enable_kineto_state(false); }, [] { profiler::disableProfiler(); }},
      {"kineto_state_collector_shapes", [] { enable_kineto_state(true); }, [] { profiler::disableProfiler(); }},
      {"floor_callback", [&] { floor = add_floor_callback(false); }, [&] { at::removeCallback(floor); }},
      {"floor_callback_inputs", [&] { floor = add_floor_callback(true); }, [&] { at::removeCallback(floor); }}};

  // Short windows, so that each collector gets many turns in a repetition and the drift averages
  // out: a sixth of the other benchmarks' W (3 steps of mnist_cnn, 11 of tiny_mlp).
  const std::int64_t window = std::max<std::int64_t>(2, count.window / 6);
  const at::CallbackHandle first = at::addGlobalCallback(at::RecordFunctionCallback(&probe_first_enter, &probe_first_exit));
  std::size_t turn = 0;
  std::int64_t in_window = 0;
  at::CallbackHandle last = 0;
  const auto open_window = [&] {
    modes[turn].open();
    last = at::addThreadLocalCallback(at::RecordFunctionCallback(&probe_last_enter, &probe_last_exit));
  };
  open_window();
  std::int64_t step_ticks = 0;
  for (auto _ : state) {
    if (in_window == 1) t_probe = ProbeTimes{};  // the window's first step is not counted
    const std::int64_t step_began = dlprof::detail::now_ticks();
    workload->step();
    modes[turn].end_step();
    if (in_window >= 1) step_ticks += dlprof::detail::now_ticks() - step_began;
    if (++in_window < window) continue;
    state.PauseTiming();
    at::removeCallback(last);
    modes[turn].close();
    modes[turn].ticks += t_probe.ticks;
    modes[turn].steps += in_window - 1;
    modes[turn].step_ticks += step_ticks;
    step_ticks = 0;
    turn = (turn + 1) % modes.size();
    in_window = 0;
    open_window();
    state.ResumeTiming();
  }
  at::removeCallback(last);
  modes[turn].close();
  at::removeCallback(first);
  set_common_counters(state, count);
  if (dlprof_dropped != 0) state.SkipWithError("dlprof dropped events: the ring filled");

  const double ns_per_tick = dlprof::detail::process_ns_per_tick();
  /// Ticks a mode counted (its probed ticks or its steps' whole ticks) in ns per op.
  const auto per_op = [&](const ProbedMode& mode, std::int64_t ticks) {
    return static_cast<double>(ticks) * ns_per_tick / static_cast<double>(mode.steps) / count.ops_per_step;
  };
  if (modes[0].steps == 0) return;
  const double probes = per_op(modes[0], modes[0].ticks);
  state.counters["probes_only_ns_per_op"] = probes;
  std::map<std::string, double> net;
  for (std::size_t i = 1; i < modes.size(); ++i) {
    if (modes[i].steps == 0) continue;
    net[modes[i].name] = per_op(modes[i], modes[i].ticks) - probes;
    state.counters[fmt::format("{}_ns_per_op", modes[i].name)] = net[modes[i].name];
  }
  std::map<std::string, double> step_net;
  for (std::size_t i = 1; i < modes.size(); ++i) {
    if (modes[i].steps == 0) continue;
    step_net[modes[i].name] = per_op(modes[i], modes[i].step_ticks) - per_op(modes[0], modes[0].step_ticks);
    state.counters[fmt::format("{}_step_ns_per_op", modes[i].name)] = step_net[modes[i].name];
  }
  if (step_net.count("floor_callback") != 0 && step_net.count("floor_callback_inputs") != 0)
    state.counters["boxing_step_ns_per_op"] = step_net["floor_callback_inputs"] - step_net["floor_callback"];
  for (const char* peer : {"kineto_state_collector", "kineto_state_collector_shapes"})
    if (step_net.count(peer) != 0 && step_net.count("dlprof_flight_shapes") != 0)
      state.counters[fmt::format("dlprof_flight_shapes_step_per_{}", peer)] = step_net["dlprof_flight_shapes"] / step_net[peer];
  for (const char* peer : {"record_profile", "kineto_state_collector", "kineto_state_collector_shapes"}) {
    if (net.count(peer) != 0 && net.count("dlprof_ops_shapes") != 0)
      state.counters[fmt::format("dlprof_ops_shapes_per_{}", peer)] = net["dlprof_ops_shapes"] / net[peer];
    if (step_net.count(peer) != 0 && step_net.count("dlprof_ops_shapes") != 0)
      state.counters[fmt::format("dlprof_ops_shapes_step_per_{}", peer)] = step_net["dlprof_ops_shapes"] / step_net[peer];
  }
}

/// Set when --benchmark_min_time is given: it then applies to every benchmark.
bool g_min_time_from_flag = false;

/// Each workload's own MinTime, unless --benchmark_min_time is given.
benchmark::internal::Benchmark* with_min_time(benchmark::internal::Benchmark* bench, double seconds) {
  return g_min_time_from_flag ? bench : bench->MinTime(seconds);
}

/// Benchmarks registered with MinTime carry it in their names: "tiny_mlp/no_profiler/min_time:0.500".
std::string run_name(const char* workload, double min_time, const std::string& mode) {
  if (g_min_time_from_flag) return fmt::format("{}/{}", workload, mode);
  return fmt::format("{}/{}/min_time:{:.3f}", workload, mode, min_time);
}

// ---------------------------------------------------------------------------------------------
// LibTorch's floor (run with --floor): an empty callback on the scopes the observer uses.

/// kThreadLocal: a thread-local callback, as LibTorch's own profilers install (it sees only this
/// thread and the threads LibTorch hands its state to; dlprof's must see every thread).
template <bool kInputs, bool kThreadLocal = false>
void BM_floor_callback(benchmark::State& state) {
  using Workload = TinyMlp;
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  const at::CallbackHandle handle = kThreadLocal ? at::addThreadLocalCallback(floor_callback(kInputs))
                                                 : at::addGlobalCallback(floor_callback(kInputs));
  for (auto _ : state) workload->step();
  at::removeCallback(handle);
  set_common_counters(state, count);
}

/// The floor, paired: the empty callback installed for each recorded window only.
template <bool kInputs>
void BM_paired_floor_callback_mnist(benchmark::State& state) {
  at::CallbackHandle handle = 0;
  paired_torch<MnistCnnStep>(
      state, [&] { handle = add_floor_callback(kInputs); }, [&] { at::removeCallback(handle); });
}

void register_floor() {
  const auto add = [](const char* workload, double min_time, const char* name, void (*fn)(benchmark::State&),
                      bool paired = false) {
    auto* bench = benchmark::RegisterBenchmark(fmt::format("{}/{}", workload, name).c_str(), fn)->Unit(benchmark::kMicrosecond);
    if (paired) bench->UseManualTime();
    with_min_time(bench, min_time);
  };
  const char* tiny = TinyMlp::kName;
  const double tiny_time = TinyMlp::kMinTime;
  add(tiny, tiny_time, "floor_callback", &BM_floor_callback<false>);
  add(tiny, tiny_time, "floor_callback_inputs", &BM_floor_callback<true>);
  add(tiny, tiny_time, "floor_thread_local_callback", &BM_floor_callback<false, true>);
  // mnist_cnn: paired only (see "Paired").
  const char* mnist = MnistCnnStep::kName;
  const double mnist_time = MnistCnnStep::kMinTime;
  add(mnist, mnist_time, "paired_floor_callback", &BM_paired_floor_callback_mnist<false>, true);
  add(mnist, mnist_time, "paired_floor_callback_inputs", &BM_paired_floor_callback_mnist<true>, true);
}

// ---------------------------------------------------------------------------------------------
// Registration and the summary

const std::vector<std::string> kModes = {"no_profiler",    "dlprof_idle",    "dlprof_ops",
                                         "dlprof_ops_shapes", "record_profile", "kineto_state_collector",
                                         "kineto_state_collector_shapes"};

/// in_callbacks' nine modes take turns: each gets the time of one mode's own benchmark.
constexpr int kInCallbacksModes = 9;

template <class Workload>
void register_in_callbacks() {
  with_min_time(benchmark::RegisterBenchmark(fmt::format("{}/in_callbacks", Workload::kName).c_str(),
                                             &BM_in_callbacks<Workload>)
                    ->Unit(benchmark::kMicrosecond),
                kInCallbacksModes * Workload::kMinTime);
}

template <class Workload>
void register_workload() {
  using Fn = void (*)(benchmark::State&);
  const std::vector<Fn> functions = {&BM_no_profiler<Workload>,        &BM_dlprof_idle<Workload>,
                                     &BM_dlprof_ops<Workload>,         &BM_dlprof_ops_shapes<Workload>,
                                     &BM_record_profile<Workload>,     &BM_kineto_state_collector<Workload>,
                                     &BM_kineto_state_collector_shapes<Workload>};
  for (std::size_t i = 0; i < kModes.size(); ++i)
    with_min_time(benchmark::RegisterBenchmark(fmt::format("{}/{}", Workload::kName, kModes[i]).c_str(), functions[i])
                      ->Unit(benchmark::kMicrosecond),
                  Workload::kMinTime);
  const std::vector<std::pair<const char*, Fn>> paired = {
      {"paired_dlprof_ops", &BM_paired_dlprof_ops<Workload>},
      {"paired_dlprof_ops_shapes", &BM_paired_dlprof_ops_shapes<Workload>},
      {"paired_dlprof_ops_stack", &BM_paired_dlprof_ops_stack<Workload>},
      {"paired_dlprof_ops_memory", &BM_paired_dlprof_ops_memory<Workload>},
      {"paired_kineto_state_collector_memory", &BM_paired_kineto_state_collector_memory<Workload>},
      {"paired_record_profile", &BM_paired_record_profile<Workload>},
      {"paired_kineto_state_collector", &BM_paired_kineto_state_collector<Workload>},
      {"paired_kineto_state_collector_shapes", &BM_paired_kineto_state_collector_shapes<Workload>},
      {"paired_dlprof_flight_shapes", &BM_paired_dlprof_flight_shapes<Workload>}};
  for (const auto& [name, fn] : paired)
    with_min_time(benchmark::RegisterBenchmark(fmt::format("{}/{}", Workload::kName, name).c_str(), fn)
                      ->Unit(benchmark::kMicrosecond)
                      ->UseManualTime(),
                  Workload::kMinTime);
  register_in_callbacks<Workload>();
}



void print_summary(const dlprof_bench::SummaryReporter& results) {
  for (const auto& [workload, min_time] :
       {std::pair{TinyMlp::kName, TinyMlp::kMinTime}, std::pair{MnistCnnStep::kName, MnistCnnStep::kMinTime}}) {
    const auto cpu = [&, workload = workload, min_time = min_time](const std::string& mode) {
      return results.cpu_ns(run_name(workload, min_time, mode));
    };
    const auto ops = results.counter(run_name(workload, min_time, "no_profiler"), "ops_per_step");
    const auto base = cpu("no_profiler");
    if (!ops || !base) continue;
    const auto overhead = [&](const std::string& mode) -> std::optional<double> {
      const auto t = cpu(mode);
      if (!t) return std::nullopt;
      return (*t - *base) / *ops;
    };
    std::cout.flush();
    fmt::print("\n{}: {:.1f} ops per step; medians of CPU time; overhead per op = (mode - no_profiler) / ops\n",
               workload, *ops);
    fmt::print("  {:<32} {:>12} {:>16}\n", "mode", "step (us)", "overhead/op (ns)");
    std::vector<std::string> modes = kModes;
    for (const char* floor : {"floor_callback", "floor_callback_inputs", "floor_thread_local_callback"})
      modes.emplace_back(floor);
    for (const std::string& mode : modes) {
      const auto t = cpu(mode);
      if (!t) continue;
      fmt::print("  {:<32} {:>12.2f} {:>16.1f}\n", mode, *t / 1e3, *overhead(mode));
    }
    using dlprof_bench::print_ratio;
    using dlprof_bench::ratio;
    print_ratio("dlprof_idle / no_profiler (step time)", ratio(cpu("dlprof_idle"), base));
    print_ratio("dlprof_ops_shapes / record_profile (per-op overhead)",
                ratio(overhead("dlprof_ops_shapes"), overhead("record_profile")), 0.5);
    print_ratio("dlprof_ops_shapes / kineto_state_collector (per-op)",
                ratio(overhead("dlprof_ops_shapes"), overhead("kineto_state_collector")), 1.0);
    print_ratio("dlprof_ops_shapes / kineto_state_collector_shapes",
                ratio(overhead("dlprof_ops_shapes"), overhead("kineto_state_collector_shapes")));
    print_ratio("dlprof_ops / record_profile (per-op overhead)",
                ratio(overhead("dlprof_ops"), overhead("record_profile")));
    print_ratio("dlprof_ops / kineto_state_collector (per-op overhead)",
                ratio(overhead("dlprof_ops"), overhead("kineto_state_collector")));

    // The paired benchmarks: recorded and bare steps alternating within one benchmark.
    const auto paired = [&, workload = workload, min_time = min_time](const std::string& mode) {
      const std::string name = g_min_time_from_flag
                                   ? fmt::format("{}/paired_{}/manual_time", workload, mode)
                                   : fmt::format("{}/paired_{}/min_time:{:.3f}/manual_time", workload, mode, min_time);
      return results.counter(name, "paired_overhead_ns_per_op");
    };
    if (!paired("dlprof_ops")) continue;
    std::cout.flush();
    fmt::print("  paired (W recorded steps alternating with W bare ones), overhead per op (ns):\n");
    for (const char* mode : {"dlprof_ops", "dlprof_ops_shapes", "dlprof_flight_shapes", "record_profile",
                             "kineto_state_collector", "kineto_state_collector_shapes"}) {
      if (const auto value = paired(mode)) fmt::print("    {:<30} {:>12.1f}\n", mode, *value);
    }
    print_ratio("paired: dlprof_ops_shapes / record_profile", ratio(paired("dlprof_ops_shapes"), paired("record_profile")),
                0.5);
    print_ratio("paired: dlprof_ops_shapes / kineto_state_collector",
                ratio(paired("dlprof_ops_shapes"), paired("kineto_state_collector")), 1.0);
    print_ratio("paired: dlprof_flight_shapes / kineto_state_collector",
                ratio(paired("dlprof_flight_shapes"), paired("kineto_state_collector")), 1.0);
    print_ratio("paired: dlprof_flight_shapes / kineto_state_collector_shapes",
                ratio(paired("dlprof_flight_shapes"), paired("kineto_state_collector_shapes")));
  }
}

/// The in_callbacks benchmarks' figures (medians when repeated).
void print_in_callbacks(const dlprof_bench::SummaryReporter& results) {
  for (const auto& [workload, min_time] :
       {std::pair{TinyMlp::kName, TinyMlp::kMinTime}, std::pair{MnistCnnStep::kName, MnistCnnStep::kMinTime},
        std::pair{MnistCnnSingle::kName, MnistCnnSingle::kMinTime}}) {
    const std::string name = g_min_time_from_flag ? fmt::format("{}/in_callbacks", workload)
                                                  : fmt::format("{}/in_callbacks/min_time:{:.3f}", workload,
                                                                kInCallbacksModes * min_time);
    if (!results.counter(name, "dlprof_ops_shapes_ns_per_op")) continue;
    std::cout.flush();
    fmt::print("\n{}: time inside each collector's callbacks, collectors taking turns, ns per op\n", workload);
    for (const char* mode : {"probes_only", "dlprof_ops", "dlprof_ops_shapes", "dlprof_flight_shapes", "record_profile",
                             "kineto_state_collector", "kineto_state_collector_shapes"})
      if (const auto value = results.counter(name, fmt::format("{}_ns_per_op", mode)))
        fmt::print("  {:<32} {:>12.1f}\n", mode, *value);
    using dlprof_bench::print_ratio;
    print_ratio("in callbacks: dlprof_ops_shapes / record_profile",
                results.counter(name, "dlprof_ops_shapes_per_record_profile"), 0.5);
    print_ratio("in callbacks: dlprof_ops_shapes / kineto_state_collector",
                results.counter(name, "dlprof_ops_shapes_per_kineto_state_collector"), 1.0);
    print_ratio("in callbacks: dlprof_ops_shapes / kineto_state_collector_shapes",
                results.counter(name, "dlprof_ops_shapes_per_kineto_state_collector_shapes"));
    fmt::print("{}: the same turns' whole steps, less probes_only's, ns per op\n", workload);
    for (const char* mode : {"dlprof_ops", "dlprof_ops_shapes", "dlprof_flight_shapes", "record_profile",
                             "kineto_state_collector", "kineto_state_collector_shapes", "floor_callback",
                             "floor_callback_inputs", "boxing"})
      if (const auto value = results.counter(name, fmt::format("{}_step_ns_per_op", mode)))
        fmt::print("  {:<32} {:>12.1f}\n", mode, *value);
    print_ratio("whole steps: dlprof_ops_shapes / record_profile",
                results.counter(name, "dlprof_ops_shapes_step_per_record_profile"), 0.5);
    print_ratio("whole steps: dlprof_ops_shapes / kineto_state_collector",
                results.counter(name, "dlprof_ops_shapes_step_per_kineto_state_collector"), 1.0);
    print_ratio("whole steps: dlprof_flight_shapes / kineto_state_collector",
                results.counter(name, "dlprof_flight_shapes_step_per_kineto_state_collector"), 1.0);
    print_ratio("whole steps: dlprof_flight_shapes / kineto_state_collector_shapes",
                results.counter(name, "dlprof_flight_shapes_step_per_kineto_state_collector_shapes"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --benchmark_format=json|csv on stdout: the library's own reporter, no summary.
  // --floor: also LibTorch's floor (an empty callback).
  bool plain_format = false, floor = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--floor") == 0) {
      floor = true;
      continue;
    }
    if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0 && std::strcmp(argv[i] + 19, "console") != 0)
      plain_format = true;
    if (std::strncmp(argv[i], "--benchmark_min_time=", 21) == 0) g_min_time_from_flag = true;
    argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  torch::set_num_threads(1);
  { const dlprof::Profiler selects_clock; }
  register_workload<TinyMlp>();
  register_workload<MnistCnnStep>();
  register_in_callbacks<MnistCnnSingle>();
  if (floor) register_floor();
  benchmark::AddCustomContext("libtorch", TORCH_VERSION);
  benchmark::AddCustomContext("torch_threads", std::to_string(torch::get_num_threads()));
  benchmark::AddCustomContext("dlprof_clock", dlprof::detail::g_use_tsc.load() ? "tsc" : "clock_monotonic");
  if (plain_format) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    dlprof_bench::SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_summary(reporter);
    print_in_callbacks(reporter);
  }
  benchmark::Shutdown();
  return 0;
}
