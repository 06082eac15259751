// bench/writer_bench.cpp: how fast a recorded window becomes a file, in events per second
// (DESIGN.md's target for writing: >= 5 M events/s), stage by stage:
//
//   BM_assemble_trace         drained ring events (ticks) -> Trace: clock map, name resolution,
//                             per-thread ordering and nesting (detail::assemble_trace)
//   BM_write_chrome_trace     Trace -> Chrome-trace JSON in a reused memory buffer
//   BM_trace_save             Trace::save to /tmp: JSON into a fresh buffer, then a temporary
//                             file and a rename; /gzip:1 compresses it with zlib (level 6)
//
// The input is one synthetic window shaped like a training run's: 1 M ranges over 8 threads
// (a training thread with ProfilerStep#N, module and ATen-op ranges nested three deep, an
// autograd thread, DataLoader workers), in the order a ring holds them (each range is pushed
// when it ends, so children precede their parent), with literal and interned names.
//
// Run: build-bench/bench/writer_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <dlprof/profiler.hpp>

#include "bench_summary.hpp"

namespace {

using dlprof::Category;
using dlprof::EventKind;
using dlprof::detail::RecordKind;
using dlprof::detail::DrainedEvents;
using dlprof::detail::Event;
using dlprof::detail::NameId;

constexpr std::size_t kThreads = 8;
constexpr std::size_t kRangesPerThread = 125'000;  // 1 M ranges in all
constexpr double kNsPerTick = 1.0 / 2.6;           // a 2.6 GHz TSC, as on the machine measured

// Names written as DLPROF_RANGE literals: their Site's address is the name id.
const dlprof::detail::Site kSites[] = {
    dlprof::detail::Site{"train_step", Category::User},
    dlprof::detail::Site{"forward", Category::Forward},
    dlprof::detail::Site{"backward", Category::Backward},
    dlprof::detail::Site{"optimizer.step", Category::Optimizer},
    dlprof::detail::Site{"DataLoader.__next__", Category::DataLoader},
    dlprof::detail::Site{"all_reduce", Category::Communication},
};

// Names as LibTorch's observer or DLPROF_RANGE_F would record them: interned at run time.
constexpr std::string_view kOpNames[] = {
    "aten::conv2d",        "aten::convolution",     "aten::_convolution",  "aten::cudnn_convolution",
    "aten::batch_norm",    "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm", "aten::relu_",
    "aten::max_pool2d",    "aten::linear",          "aten::addmm",         "aten::t",
    "aten::add_",          "aten::empty",           "aten::empty_strided", "aten::copy_",
    "aten::to",            "aten::_to_copy",        "aten::view",          "aten::flatten",
    "aten::cross_entropy_loss", "aten::log_softmax", "aten::nll_loss_nd",  "aten::zeros_like",
    "autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0",
    "aten::convolution_backward", "autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0",
    "aten::mm",            "aten::sum",             "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad",
    "aten::mul_",          "aten::add",             "aten::zero_",
};
constexpr std::string_view kModuleNames[] = {
    "nn.Module: Conv2d_1",    "nn.Module: BatchNorm2d_1", "nn.Module: ReLU_1",   "nn.Module: MaxPool2d_1",
    "nn.Module: Sequential_1", "nn.Module: Linear_1",     "nn.Module: Flatten_1", "nn.Module: CrossEntropyLoss_1",
};
constexpr std::string_view kWorkerNames[] = {
    "decode_jpeg", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize", "collate_fn",
};

NameId site_id(std::size_t i) { return dlprof::detail::site_name_id(kSites[i % std::size(kSites)]); }

/// One thread's ranges in ring order. Each "step" is a root range (a literal name) holding 8
/// module ranges of 6 op ranges each (57 ranges, interned names); the training thread also
/// records its ProfilerStep#N.
DrainedEvents::Thread make_thread(std::size_t index, std::int64_t start_tick) {
  DrainedEvents::Thread thread{4000 + static_cast<std::int64_t>(index), static_cast<std::uint32_t>(index + 1), "", {}};
  thread.name = index == 0 ? "pt_main_thread" : index == 1 ? "pt_autograd_0" : fmt::format("DataLoader worker {}", index - 2);
  thread.events.reserve(kRangesPerThread + kRangesPerThread / 50);
  const auto ticks = [](std::int64_t ns) { return static_cast<std::int64_t>(static_cast<double>(ns) / kNsPerTick); };
  std::int64_t now = start_tick;
  std::uint64_t step = 0;
  std::size_t op = index;  // threads start at different ops so their name sequences differ
  const NameId root_name = site_id(index == 0 ? 0 : index == 1 ? 2 : 4);  // train_step, backward, DataLoader
  while (thread.events.size() < kRangesPerThread) {
    const std::int64_t step_begin = now;
    for (std::size_t module = 0; module < 8; ++module) {
      const std::int64_t module_begin = now;
      for (std::size_t k = 0; k < 6; ++k) {
        const std::int64_t begin = now;
        now += ticks(2'000 + static_cast<std::int64_t>((op * 7919) % 48'000));  // 2-50 us
        const NameId name = index >= 2 ? dlprof::detail::intern(kWorkerNames[op % std::size(kWorkerNames)])
                                       : dlprof::detail::intern(kOpNames[op % std::size(kOpNames)]);
        thread.events.push_back(Event{name, begin, {now}, RecordKind::Range, Category::User});
        now += ticks(300);
        ++op;
      }
      const NameId module_name =
          index >= 2 ? dlprof::detail::intern("load_sample") : dlprof::detail::intern(kModuleNames[module]);
      thread.events.push_back(Event{module_name, module_begin, {now}, RecordKind::Range, Category::Forward});
      now += ticks(500);
    }
    thread.events.push_back(Event{root_name, step_begin, {now}, RecordKind::Range, Category::User});
    if (index == 0)
      thread.events.push_back(Event{static_cast<NameId>(step), step_begin, {now}, RecordKind::Step, Category::Step});
    now += ticks(1'000);
    ++step;
  }
  return thread;
}

/// The drained window and the clock map of its Trace, built once for every benchmark.
struct Window {
  DrainedEvents drained;
  dlprof::detail::ClockMap clock;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::size_t events = 0;
};

const Window& window() {
  static const Window built = [] {
    Window w;
    const dlprof::detail::ClockSample anchor{1'000'000'000'000, dlprof::detail::clock_ns(CLOCK_REALTIME)};
    w.clock = dlprof::detail::ClockMap(anchor, kNsPerTick);
    std::int64_t last_tick = anchor.ticks;
    for (std::size_t t = 0; t < kThreads; ++t) {
      w.drained.threads.push_back(make_thread(t, anchor.ticks + static_cast<std::int64_t>(t) * 1000));
      for (const Event& event : w.drained.threads.back().events) last_tick = std::max(last_tick, event.end);
      w.events += w.drained.threads.back().events.size();
    }
    w.start_ns = anchor.realtime_ns;
    w.end_ns = w.clock.to_realtime_ns(last_tick);
    return w;
  }();
  return built;
}

dlprof::Trace build(DrainedEvents drained) {
  const Window& w = window();
  dlprof::Trace trace = dlprof::detail::assemble_trace(std::move(drained), w.clock, w.start_ns, w.end_ns, dlprof::detail::InternedNames());
  trace.pid = static_cast<std::int64_t>(::getpid());
  trace.process_name = "train.py";
  trace.clock_source = "tsc";
  trace.distributed.backend = "nccl";
  return trace;
}

const dlprof::Trace& trace() {
  static const dlprof::Trace built = build(window().drained);
  return built;
}

dlprof::Trace trace_copy() { return trace(); }

void BM_assemble_trace(benchmark::State& state) {
  const Window& w = window();
  for (auto _ : state) {
    state.PauseTiming();  // assemble_trace consumes its input: copy it untimed
    DrainedEvents input = w.drained;
    state.ResumeTiming();
    dlprof::Trace built = dlprof::detail::assemble_trace(std::move(input), w.clock, w.start_ns, w.end_ns, dlprof::detail::InternedNames());
    benchmark::DoNotOptimize(built.events.data());
    state.PauseTiming();  // freeing the result is not part of building it
    built = dlprof::Trace{};
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(w.events));
}
BENCHMARK(BM_assemble_trace)->Unit(benchmark::kMillisecond)->MinTime(1.0);

void BM_write_chrome_trace(benchmark::State& state) {
  const dlprof::Trace& input = trace();
  fmt::memory_buffer buffer;
  dlprof::write_chrome_trace(input, buffer, "bench.pt.trace.json");  // grows the buffer once, untimed
  for (auto _ : state) {
    buffer.clear();
    dlprof::write_chrome_trace(input, buffer, "bench.pt.trace.json");
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(input.events.size()));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(buffer.size()));
  state.counters["bytes_per_event"] = static_cast<double>(buffer.size()) / static_cast<double>(input.events.size());
}
BENCHMARK(BM_write_chrome_trace)->Unit(benchmark::kMillisecond)->MinTime(1.0);

void BM_trace_save(benchmark::State& state) {
  const dlprof::Trace& input = trace();
  const bool gzip = state.range(0) != 0;
  const std::string path =
      fmt::format("/tmp/dlprof_writer_bench_{}.pt.trace.json{}", static_cast<long>(::getpid()), gzip ? ".gz" : "");
  for (auto _ : state) dlprof::save_chrome_trace(input, path);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(input.events.size()));
  if (FILE* file = std::fopen(path.c_str(), "rb")) {
    std::fseek(file, 0, SEEK_END);
    state.counters["file_MB"] = static_cast<double>(std::ftell(file)) / 1e6;
    std::fclose(file);
  }
  std::remove(path.c_str());
}
// Saving waits on the file system, so its rate is taken over wall time; the others are over CPU
// time (benchmark's default for items_per_second), which a busy machine disturbs less.
BENCHMARK(BM_trace_save)->ArgName("gzip")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The GPU side of a window: 500,000 cudaLaunchKernel calls from the training thread, each linked
// to one of its ranges, and their 500,000 kernels on four streams (CUPTI's record order: calls,
// external correlations and kernels interleaved).
constexpr std::size_t kLaunches = 500'000;

dlprof::detail::DeviceActivity device_activity(const dlprof::Trace& cpu) {
  dlprof::detail::DeviceActivity activity;
  activity.names = {"cudaLaunchKernel", "void gemm_tiled<128, 128>(float const*, float const*, float*, int, int, int)",
                    "bias_relu(float*, float const*, int)"};
  dlprof::DeviceProperties h100;
  h100.name = "NVIDIA H100 80GB HBM3";
  h100.compute_major = 9;
  h100.num_sms = 132;
  h100.max_threads_per_multiprocessor = 2048;
  h100.regs_per_multiprocessor = 65536;
  h100.shared_mem_per_multiprocessor = 233472;
  activity.devices = {h100};
  activity.clock = dlprof::detail::BackendClock{false, {}, 1.0};  // CLOCK_REALTIME ns, used as they are
  const std::int64_t span = cpu.window_end_ns - cpu.window_start_ns;
  const std::int64_t os_tid = cpu.threads[0].os_tid;
  for (std::uint32_t i = 0; i < kLaunches; ++i) {
    const std::int64_t at = cpu.window_start_ns + span * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(kLaunches);
    dlprof::ApiEvent call;
    call.start_ns = at;
    call.end_ns = at + 3'000;
    call.name = 0;
    call.thread = static_cast<std::uint32_t>(os_tid);
    call.cbid = 211;
    call.correlation = i + 1;
    activity.api.push_back(call);
    activity.external_correlations.push_back({i + 1, dlprof::detail::make_external_id(1, i % 50'000 + 1)});
    dlprof::GpuEvent kernel;
    kernel.start_ns = at + 5'000;
    kernel.end_ns = at + 5'000 + (span / static_cast<std::int64_t>(kLaunches)) / 2;
    kernel.name = 1 + i % 2;
    kernel.stream = 7 + i % 4;
    kernel.correlation = i + 1;
    kernel.kernel.grid[0] = 264;
    kernel.kernel.block[0] = 256;
    kernel.kernel.registers_per_thread = 64;
    activity.gpu.push_back(kernel);
  }
  return activity;
}

/// The CPU trace with its ranges' pushed ids, so the launches above link to them.
std::unordered_map<std::uint64_t, std::uint64_t> pushed_ids(dlprof::Trace& trace) {
  std::uint32_t sequence = 0;
  for (dlprof::TraceEvent& event : trace.events)
    if (event.kind == EventKind::Range && trace.threads[event.thread].os_tid == trace.threads[0].os_tid && sequence < 50'000)
      event.external_id = dlprof::detail::make_external_id(1, ++sequence);
  return dlprof::detail::assign_external_ids(trace);
}

const dlprof::Trace& gpu_trace() {
  static const dlprof::Trace built = [] {
    dlprof::Trace trace = trace_copy();
    const auto ids = pushed_ids(trace);
    dlprof::detail::merge_device_activity(trace, device_activity(trace), window().clock, ids);
    return trace;
  }();
  return built;
}

void BM_merge_device_activity(benchmark::State& state) {
  dlprof::Trace cpu = trace_copy();
  const auto ids = pushed_ids(cpu);
  const dlprof::detail::DeviceActivity activity = device_activity(cpu);
  for (auto _ : state) {
    state.PauseTiming();  // merging consumes both: copy them untimed
    dlprof::Trace trace = cpu;
    dlprof::detail::DeviceActivity input = activity;
    state.ResumeTiming();
    dlprof::detail::merge_device_activity(trace, std::move(input), window().clock, ids);
    benchmark::DoNotOptimize(trace.gpu_events.data());
    state.PauseTiming();
    trace = dlprof::Trace{};
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * kLaunches));
}
BENCHMARK(BM_merge_device_activity)->Unit(benchmark::kMillisecond)->MinTime(1.0);

/// Writes only the GPU side (API calls, kernels, gpu_user_annotations and flows) of gpu_trace():
/// the CPU events are the trace of BM_write_chrome_trace, measured there.
void BM_write_chrome_trace_gpu(benchmark::State& state) {
  dlprof::Trace input = gpu_trace();
  input.events.clear();
  fmt::memory_buffer buffer;
  dlprof::write_chrome_trace(input, buffer, "bench.pt.trace.json");
  const auto events = static_cast<std::int64_t>(input.api_events.size() + input.gpu_events.size());
  for (auto _ : state) {
    buffer.clear();
    dlprof::write_chrome_trace(input, buffer, "bench.pt.trace.json");
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetItemsProcessed(state.iterations() * events);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(buffer.size()));
  state.counters["bytes_per_event"] = static_cast<double>(buffer.size()) / static_cast<double>(events);
  state.counters["gpu_annotations"] = static_cast<double>(
      std::count_if(input.gpu_events.begin(), input.gpu_events.end(),
                    [](const dlprof::GpuEvent& e) { return e.kind == dlprof::GpuEventKind::Annotation; }));
}
BENCHMARK(BM_write_chrome_trace_gpu)->Unit(benchmark::kMillisecond)->MinTime(1.0);

void print_summary(const dlprof_bench::SummaryReporter& results) {
  using dlprof_bench::print_ratio;
  const auto per_second = [&](const char* name) -> std::optional<double> {
    const auto rate = results.counter(name, "items_per_second");
    if (!rate) return std::nullopt;
    return *rate / 1e6;
  };
  const auto build_rate = per_second("BM_assemble_trace/min_time:1.000");
  const auto write_rate = per_second("BM_write_chrome_trace/min_time:1.000");
  std::optional<double> pipeline;
  if (build_rate && write_rate) pipeline = 1.0 / (1.0 / *build_rate + 1.0 / *write_rate);
  fmt::print("\nMillions of events per second ({} events, {} threads), from the figures above:\n", window().events,
             kThreads);
  print_ratio("write_chrome_trace (into memory)", write_rate, 5.0, /*at_most=*/false);
  print_ratio("assemble_trace", build_rate);
  print_ratio("assemble_trace + write_chrome_trace", pipeline);
  print_ratio("Trace::save, uncompressed, /tmp", per_second("BM_trace_save/gzip:0/real_time"));
  print_ratio("Trace::save, gzip, /tmp", per_second("BM_trace_save/gzip:1/real_time"));
  fmt::print("GPU side ({} launches: calls + kernels, with annotations and flows):\n", kLaunches);
  print_ratio("write_chrome_trace, GPU events", per_second("BM_write_chrome_trace_gpu/min_time:1.000"), 5.0,
              /*at_most=*/false);
  print_ratio("merge_device_activity (collector)", per_second("BM_merge_device_activity/min_time:1.000"));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The window's names are interned as a recording Profiler interns them; with no Profiler here,
  // the slow path in front of the name table is installed by hand.
  dlprof::detail::install_recording_slow_path();
  fmt::print(stderr, "writer_bench: building a {}-event window...\n", window().events);
  trace();
  dlprof_bench::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_summary(reporter);
  benchmark::Shutdown();
  return 0;
}
