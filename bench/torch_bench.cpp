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
//                            step, a trace built every W steps inside the timed loop, no handler
//                            (no file written);
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
// Counters: ops_per_step (Op events dlprof records per step, counted once per workload),
// record_functions_per_step (every RecordFunction of any scope, counted by a callback),
// ns_per_op (step time / ops_per_step), close_ns_per_op (time spent closing windows: for dlprof
// inside the timed loop, for LibTorch's profilers untimed; per recorded op), dropped (dlprof
// events lost to a full ring: must be 0), events_per_step (what the collector kept).
// Per-op overhead = (mode - no_profiler) / ops_per_step: printed after the table from the medians,
// and by bench/torch_overhead.py from JSON output.
//
// Run: build-bench/bench/torch_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//      (add --benchmark_out=torch.json --benchmark_out_format=json for bench/torch_overhead.py)
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
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

struct MnistCnnStep {
  static constexpr const char* kName = "mnist_cnn";
  dlprof_examples::MnistCnn model;
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)};
  torch::Tensor images = torch::randn({32, 1, 28, 28});
  torch::Tensor labels = torch::randint(0, 10, {32}, torch::kLong);

  void step() {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nll_loss(torch::log_softmax(model->forward(images), 1), labels);
    loss.backward();
    optimizer.step();
  }
};

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
  double dlprof_scope_functions_per_step = 0;  // ... of the scopes dlprof observes
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
      const std::int64_t observed = g_scope_calls[static_cast<std::size_t>(at::RecordScope::FUNCTION)] +
                                    g_scope_calls[static_cast<std::size_t>(at::RecordScope::BACKWARD_FUNCTION)] +
                                    g_scope_calls[static_cast<std::size_t>(at::RecordScope::USER_SCOPE)];
      result.record_functions_per_step = static_cast<double>(all) / kSteps;
      result.dlprof_scope_functions_per_step = static_cast<double>(observed) / kSteps;
    }
    // A window holds at most ~24k ops' events (up to 3 events each with shapes): well inside
    // the default 2^16-event ring, and the same length for every recording mode.
    result.window = std::max<std::int64_t>(1, std::min<std::int64_t>(100, static_cast<std::int64_t>(8000 / result.ops_per_step)));
    return result;
  }();
  return count;
}

void set_common_counters(benchmark::State& state, const OpCount& count) {
  state.counters["ops_per_step"] = count.ops_per_step;
  state.counters["record_functions_per_step"] = count.record_functions_per_step;
  // Step time / ops: value * iterations / time, inverted, scaled to ns.
  state.counters["ns_per_op"] =
      benchmark::Counter(count.ops_per_step * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
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

template <class Workload>
void dlprof_recording(benchmark::State& state, bool shapes) {
  const OpCount& count = op_count<Workload>();
  auto workload = make_workload<Workload>();
  dlprof::Profiler profiler(
      dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, count.window)).record_shapes(shapes));
  profiler.start();
  if (!at::hasGlobalCallbacks()) {
    state.SkipWithError("the observer is not installed while recording");
    return;
  }
  std::int64_t windows = 0, events = 0, dropped = 0, recorded_steps = 0;
  Clock::duration closing{};
  for (auto _ : state) {
    workload->step();
    const bool closes = profiler.current_action() == dlprof::Action::RecordAndSave;
    if (!closes) {
      profiler.step();
      continue;
    }
    const Clock::time_point begin = Clock::now();
    profiler.step();  // builds the window's trace: no handler, nothing written
    closing += Clock::now() - begin;
    const auto trace = profiler.last_trace();
    ++windows;
    events += static_cast<std::int64_t>(trace->events.size());
    dropped += static_cast<std::int64_t>(trace->dropped_events);
    recorded_steps += count.window;
  }
  profiler.stop();
  set_common_counters(state, count);
  state.counters["windows"] = static_cast<double>(windows);
  state.counters["dropped"] = static_cast<double>(dropped);
  if (recorded_steps > 0) {
    state.counters["events_per_step"] = static_cast<double>(events) / static_cast<double>(recorded_steps);
    state.counters["close_ns_per_op"] =
        std::chrono::duration<double, std::nano>(closing).count() / (static_cast<double>(recorded_steps) * count.ops_per_step);
  }
  if (dropped != 0) state.SkipWithError("dlprof dropped events: the ring filled");
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

template <class Workload>
void kineto_state(benchmark::State& state, bool shapes) {
  namespace profiler = torch::autograd::profiler;
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO, /*report_input_shapes=*/shapes);
  const std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  torch_profiler_loop<Workload>(
      state,
      [&] {
        profiler::prepareProfiler(config, activities);
        profiler::enableProfiler(config, activities);
      },
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
// Registration and the summary

const std::vector<std::string> kModes = {"no_profiler",    "dlprof_idle",    "dlprof_ops",
                                         "dlprof_ops_shapes", "record_profile", "kineto_state_collector",
                                         "kineto_state_collector_shapes"};

template <class Workload>
void register_workload() {
  using Fn = void (*)(benchmark::State&);
  const std::vector<Fn> functions = {&BM_no_profiler<Workload>,        &BM_dlprof_idle<Workload>,
                                     &BM_dlprof_ops<Workload>,         &BM_dlprof_ops_shapes<Workload>,
                                     &BM_record_profile<Workload>,     &BM_kineto_state_collector<Workload>,
                                     &BM_kineto_state_collector_shapes<Workload>};
  for (std::size_t i = 0; i < kModes.size(); ++i)
    benchmark::RegisterBenchmark(fmt::format("{}/{}", Workload::kName, kModes[i]).c_str(), functions[i])
        ->Unit(benchmark::kMicrosecond);
}

void print_summary(const dlprof_bench::SummaryReporter& results) {
  for (const char* workload : {TinyMlp::kName, MnistCnnStep::kName}) {
    const auto cpu = [&](const std::string& mode) { return results.cpu_ns(fmt::format("{}/{}", workload, mode)); };
    const auto ops = results.counter(fmt::format("{}/no_profiler", workload), "ops_per_step");
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
    for (const std::string& mode : kModes) {
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
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --benchmark_format=json|csv on stdout: the library's own reporter, no summary.
  bool plain_format = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0 && std::strcmp(argv[i] + 19, "console") != 0)
      plain_format = true;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  torch::set_num_threads(1);
  { const dlprof::Profiler selects_clock; }
  register_workload<TinyMlp>();
  register_workload<MnistCnnStep>();
  benchmark::AddCustomContext("libtorch", TORCH_VERSION);
  benchmark::AddCustomContext("torch_threads", std::to_string(torch::get_num_threads()));
  benchmark::AddCustomContext("dlprof_clock", dlprof::detail::g_use_tsc.load() ? "tsc" : "clock_monotonic");
  if (plain_format) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    dlprof_bench::SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_summary(reporter);
  }
  benchmark::Shutdown();
  return 0;
}
