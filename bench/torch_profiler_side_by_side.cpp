// bench/torch_profiler_side_by_side.cpp: one LibTorch training loop on a CUDA GPU, recorded by
// dlprof or by LibTorch's own Kineto profiler (what torch.profiler runs), with the same schedule,
// activities and options, so that scripts/gpu_side_by_side.py can compare their traces and their
// costs process for process, alternating.
//
//   torch_profiler_side_by_side --profiler none|dlprof|torch --workload train|launch|roofline
//                               --log-dir DIR [--batch-size N] [--launches N] [--warmup-steps N]
//
// Workloads, each step ending when the host has the GPU's result:
//   train   dlprof_examples::MnistCnn on fixed CUDA batches of --batch-size images: zero_grad,
//           forward, cross-entropy, backward, SGD with momentum, loss.item();
//   launch  --launches in-place adds to a one-element CUDA tensor (one ATen op and one kernel
//           launch each), then torch::cuda::synchronize(): what a profiler costs per launch;
//   roofline ops of known FLOPs and bytes near the GPU's limits, then torch::cuda::synchronize():
//           --launches BF16 8192x8192x8192 matmuls (compute-bound, Tensor Cores), one of 8191
//           (no multiple of 8), FP32 4096^3 matmuls with TF32 off and on, an add of two 2^28-element
//           BF16 tensors (memory-bound), softmax, layer_norm, a BF16 3x3 convolution, an
//           embedding lookup, a cast and, with LibTorch 2, flash attention. Recorded with
//           with_flops, and by dlprof with the GPUs' clocks read every 10 ms: the trace a
//           roofline is checked on.
// After --warmup-steps steps with no profiler (cuDNN's choices, the caching allocator), 7 steps
// run under torch.profiler.schedule(wait=1, warmup=1, active=5) with CPU and CUDA activities and
// record_shapes:
//   dlprof  a dlprof::Profiler with that schedule; its trace is saved on the writer thread;
//   torch   what torch.profiler.profile does at the schedule's transitions: prepareProfiler in the
//           step() that enters warm-up, enableProfiler in the one that enters the active steps,
//           disableProfiler and save after the last; each step inside a user-scope
//           `ProfilerStep#N` range, as torch.profiler's step() opens one;
//   none    the same steps, no profiler.
// The trace goes to DIR/<profiler>.pt.trace.json. The program prints one line,
// `side-by-side: {JSON}`, with the active steps' times (each step's work and the profiler's call
// that ends it, except the last step's, which closes the window), the launch loops' CPU and wall
// times (launch workload), and the time to close the window (that call, and stop() or
// disableProfiler() and save).
// Without a CUDA device it says so and exits with status 77.
#include <ATen/Context.h>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/profiler.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <time.h>

#include "command_line.hpp"
#include "mnist_cnn.hpp"

namespace {

constexpr int kWaitSteps = 1;
constexpr int kWarmupSteps = 1;
constexpr int kActiveSteps = 5;
constexpr int kScheduledSteps = kWaitSteps + kWarmupSteps + kActiveSteps;

struct Options {
  std::string profiler;
  std::string workload;
  std::string log_dir;
  int batch_size = 256;
  int launches = 1000;
  int warmup_steps = 20;
  bool cuda = true;
  bool help = false;
};

void print_usage() {
  fmt::print(
      "Usage: torch_profiler_side_by_side --profiler none|dlprof|torch --workload train|launch|roofline --log-dir DIR\n"
      "                                   [--batch-size N] [--launches N] [--warmup-steps N] [--device cuda|cpu]\n"
      "  --batch-size N     images per training step (default 256)\n"
      "  --launches N       kernel launches per launch step, BF16 matmuls per roofline step (default 1000)\n"
      "  --warmup-steps N   steps run before the schedule, with no profiler (default 20)\n"
      "  --device D         cuda (default), or cpu to try the loop and the profilers' calls without a GPU\n");
}

Options parse_options(int argc, char** argv) {
  using dlprof_examples::parse_int;
  using dlprof_examples::UsageError;
  Options options;
  dlprof_examples::for_each_flag(
      argc, argv, {"--profiler", "--workload", "--log-dir", "--batch-size", "--launches", "--warmup-steps", "--device"}, options.help,
      [&](std::string_view flag, std::string_view value) {
        if (flag == "--batch-size") options.batch_size = parse_int(flag, value, 1, 65536);
        else if (flag == "--launches") options.launches = parse_int(flag, value, 1, 1'000'000);
        else if (flag == "--warmup-steps") options.warmup_steps = parse_int(flag, value, 0, 100'000);
        else if (flag == "--profiler" && (value == "none" || value == "dlprof" || value == "torch"))
          options.profiler = std::string(value);
        else if (flag == "--profiler") throw UsageError(fmt::format("--profiler expects none, dlprof or torch, got '{}'", value));
        else if (flag == "--workload" && (value == "train" || value == "launch" || value == "roofline"))
          options.workload = std::string(value);
        else if (flag == "--device" && (value == "cuda" || value == "cpu")) options.cuda = value == "cuda";
        else if (flag == "--device") throw UsageError(fmt::format("--device expects cuda or cpu, got '{}'", value));
        else if (flag == "--workload")
          throw UsageError(fmt::format("--workload expects train, launch or roofline, got '{}'", value));
        else if (value.empty()) throw UsageError("--log-dir needs a non-empty value");
        else options.log_dir = std::string(value);
      });
  if (!options.help && (options.profiler.empty() || options.workload.empty() || options.log_dir.empty()))
    throw UsageError("--profiler, --workload and --log-dir are required");
  return options;
}

/// The profiler under test, driven at the step boundaries as torch.profiler drives its own.
class ProfilerUnderTest {
 public:
  virtual ~ProfilerUnderTest() = default;
  /// Before step 0.
  virtual void start() {}
  /// Around step `step`'s work.
  virtual void begin_step(int /*step*/) {}
  virtual void end_step() {}
  /// After step `step`'s work: the profiler's step() call.
  virtual void step(int /*step*/) {}
  /// After the last scheduled step: the trace is on disk when it returns.
  virtual void finish() {}
};

class DlprofUnderTest final : public ProfilerUnderTest {
 public:
  DlprofUnderTest(const std::string& path, std::vector<dlprof::Activity> activities, bool with_flops)
      : prof_(dlprof::ProfilerOptions{}
                  .activities(std::move(activities))
                  .schedule(dlprof::schedule(kWaitSteps, kWarmupSteps, kActiveSteps, /*repeat=*/1))
                  .record_shapes(true)
                  .with_flops(with_flops)
                  .device_counter_period(std::chrono::milliseconds(with_flops ? 10 : 20))
                  .on_trace_ready(dlprof::TraceHandler(
                      [path](const dlprof::Trace& trace) { dlprof::save_chrome_trace(trace, path); },
                      /*run_in_background=*/true))) {}
  void start() override { prof_.start(); }
  void step(int /*step*/) override { prof_.step(); }
  void finish() override {
    prof_.stop();
    for (const std::string& error : prof_.errors()) fmt::print(stderr, "torch_profiler_side_by_side: dlprof: {}\n", error);
  }

 private:
  dlprof::Profiler prof_;
};

class KinetoUnderTest final : public ProfilerUnderTest {
 public:
  KinetoUnderTest(std::string path, std::set<torch::profiler::impl::ActivityType> activities, bool with_flops)
      : path_(std::move(path)),
        config_(torch::profiler::impl::ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/false,
                /*with_stack=*/false, with_flops),
        activities_(std::move(activities)) {}
  void begin_step(int step) override {
    range_.emplace(at::RecordScope::USER_SCOPE);
    if (range_->isActive()) range_->before(fmt::format("ProfilerStep#{}", step));
  }
  void end_step() override { range_.reset(); }
  void step(int step) override {
    namespace autograd_profiler = torch::autograd::profiler;
    if (step + 1 == kWaitSteps) autograd_profiler::prepareProfiler(config_, activities_);
    else if (step + 1 == kWaitSteps + kWarmupSteps) autograd_profiler::enableProfiler(config_, activities_);
    else if (step + 1 == kScheduledSteps) autograd_profiler::disableProfiler()->save(path_);
  }

 private:
  std::string path_;
  torch::profiler::impl::ProfilerConfig config_;
  std::set<torch::profiler::impl::ActivityType> activities_;
  std::optional<at::RecordFunction> range_;
};

using Clock = std::chrono::steady_clock;

double milliseconds(Clock::duration duration) { return std::chrono::duration<double, std::milli>(duration).count(); }

double thread_cpu_ms() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

/// The roofline workload's step (see the file comment): the tensors are made once, outside it.
std::function<void()> roofline_workload(const torch::Device& device, int matmuls) {
  const auto bf16 = torch::TensorOptions().device(device).dtype(torch::kBFloat16);
  const auto fp32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  struct Tensors {
    torch::Tensor a, b, a_odd, b_odd, fp32_a, fp32_b, x, y, rows, gamma, beta, image, filter, table, tokens, q, k, v;
  };
  auto t = std::make_shared<Tensors>();
  t->a = torch::randn({8192, 8192}, bf16);
  t->b = torch::randn({8192, 8192}, bf16);
  t->a_odd = torch::randn({8191, 8191}, bf16);
  t->b_odd = torch::randn({8191, 8191}, bf16);
  t->fp32_a = torch::randn({4096, 4096}, fp32);
  t->fp32_b = torch::randn({4096, 4096}, fp32);
  t->x = torch::randn({std::int64_t{1} << 28}, bf16);
  t->y = torch::randn({std::int64_t{1} << 28}, bf16);
  t->rows = torch::randn({8192, 8192}, bf16);
  t->gamma = torch::ones({8192}, bf16);
  t->beta = torch::zeros({8192}, bf16);
  t->image = torch::randn({32, 256, 56, 56}, bf16);
  t->filter = torch::randn({256, 256, 3, 3}, bf16);
  t->table = torch::randn({50304, 4096}, bf16);
  t->tokens = torch::randint(0, 50304, {8, 2048}, torch::TensorOptions().device(device).dtype(torch::kLong));
  t->q = torch::randn({8, 16, 4096, 128}, bf16);
  t->k = torch::randn({8, 16, 4096, 128}, bf16);
  t->v = torch::randn({8, 16, 4096, 128}, bf16);
  const bool cuda = device.is_cuda();
  return [t, matmuls, cuda] {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < matmuls; ++i) torch::mm(t->a, t->b);
    torch::mm(t->a_odd, t->b_odd);
    at::globalContext().setAllowTF32CuBLAS(false);
    torch::mm(t->fp32_a, t->fp32_b);
    at::globalContext().setAllowTF32CuBLAS(true);
    torch::mm(t->fp32_a, t->fp32_b);
    at::globalContext().setAllowTF32CuBLAS(false);
    torch::add(t->x, t->y);
    torch::softmax(t->rows, -1);
    torch::layer_norm(t->rows, {8192}, t->gamma, t->beta);
    torch::conv2d(t->image, t->filter, {}, 1, 1);
    torch::embedding(t->table, t->tokens);
    t->rows.to(torch::kFloat32);
#if TORCH_VERSION_MAJOR >= 2
    at::scaled_dot_product_attention(t->q, t->k, t->v);
#endif
    if (cuda) torch::cuda::synchronize();
  };
}

/// Runs the scheduled steps under `profiler`: the active steps' times and the window's close.
void run_schedule(ProfilerUnderTest& profiler, const std::function<void()>& work, std::vector<double>& active_step_ms,
                  double& close_ms) {
  profiler.start();
  for (int step = 0; step < kScheduledSteps; ++step) {
    const Clock::time_point begin = Clock::now();
    profiler.begin_step(step);
    work();
    profiler.end_step();
    const Clock::time_point worked = Clock::now();
    profiler.step(step);
    const Clock::time_point stepped = Clock::now();
    if (step < kWaitSteps + kWarmupSteps) continue;
    const bool last = step + 1 == kScheduledSteps;
    active_step_ms.push_back(milliseconds((last ? worked : stepped) - begin));
    if (last) close_ms = milliseconds(stepped - worked);
  }
  const Clock::time_point finishing = Clock::now();
  profiler.finish();
  close_ms += milliseconds(Clock::now() - finishing);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const dlprof_examples::UsageError& error) {
    fmt::print(stderr, "torch_profiler_side_by_side: {}\n", error.what());
    return 2;
  }
  if (options.help) {
    print_usage();
    return 0;
  }
  if (options.cuda && !torch::cuda::is_available()) {
    fmt::print("torch_profiler_side_by_side: skipped: this LibTorch sees no CUDA device\n");
    return 77;
  }
  std::filesystem::create_directories(options.log_dir);
  const std::string trace_path = fmt::format("{}/{}.pt.trace.json", options.log_dir, options.profiler);

  const torch::Device device(options.cuda ? torch::kCUDA : torch::kCPU);
  torch::manual_seed(0);
  dlprof_examples::MnistCnn model;
  model->to(device);
  model->train();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const torch::Tensor images = torch::randn({options.batch_size, 1, 28, 28}, device);
  const torch::Tensor labels = torch::randint(0, 10, {options.batch_size}, torch::TensorOptions().device(device).dtype(torch::kLong));
  torch::Tensor counter = torch::zeros({1}, device);
  float loss_value = 0;

  // The launch loop's own cost, before the synchronisation that ends its step: the launching
  // thread's CPU time (what a profiler adds to each launch, free of the scheduler's noise) and
  // its wall time.
  std::vector<double> launch_loop_cpu_ms, launch_loop_wall_ms;
  const auto train = [&] {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    loss.backward();
    optimizer.step();
    loss_value = loss.item<float>();
  };
  const auto launch = [&] {
    const double cpu_begin = thread_cpu_ms();
    const Clock::time_point begin = Clock::now();
    for (int i = 0; i < options.launches; ++i) counter.add_(1);
    launch_loop_wall_ms.push_back(milliseconds(Clock::now() - begin));
    launch_loop_cpu_ms.push_back(thread_cpu_ms() - cpu_begin);
    if (options.cuda) torch::cuda::synchronize();
  };
  std::function<void()> work;
  if (options.workload == "train") work = train;
  else if (options.workload == "launch") work = launch;
  else work = roofline_workload(device, options.launches);
  for (int step = 0; step < options.warmup_steps; ++step) work();

  std::unique_ptr<ProfilerUnderTest> profiler;
  using torch::profiler::impl::ActivityType;
  if (options.profiler == "dlprof") {
    std::vector<dlprof::Activity> activities{dlprof::Activity::CPU};
    if (options.cuda) activities.push_back(dlprof::Activity::CUDA);
    profiler = std::make_unique<DlprofUnderTest>(trace_path, std::move(activities), options.workload == "roofline");
  } else if (options.profiler == "torch") {
    std::set<ActivityType> activities{ActivityType::CPU};
    if (options.cuda) activities.insert(ActivityType::CUDA);
    profiler = std::make_unique<KinetoUnderTest>(trace_path, std::move(activities), options.workload == "roofline");
  }
  else profiler = std::make_unique<ProfilerUnderTest>();

  std::vector<double> active_step_ms;
  double close_ms = 0;
  try {
    run_schedule(*profiler, work, active_step_ms, close_ms);
  } catch (const std::exception& error) {
    fmt::print(stderr, "torch_profiler_side_by_side: {} failed: {}\n", options.profiler, error.what());
    return 1;
  }
  const bool traced = options.profiler == "none" || std::filesystem::exists(trace_path);
  // The last kActiveSteps launch loops are the active steps'.
  const auto active = [](const std::vector<double>& all) {
    return std::vector<double>(all.end() - std::min<std::ptrdiff_t>(kActiveSteps, static_cast<std::ptrdiff_t>(all.size())),
                               all.end());
  };
  fmt::print(
      "side-by-side: {{\"profiler\": \"{}\", \"workload\": \"{}\", \"batch_size\": {}, \"launches_per_step\": {}, "
      "\"active_step_ms\": [{:.4f}], \"launch_loop_cpu_ms\": [{:.4f}], \"launch_loop_wall_ms\": [{:.4f}], "
      "\"close_ms\": {:.3f}, \"loss\": {:.5f}, \"traced\": {}}}\n",
      options.profiler, options.workload, options.batch_size, options.workload == "launch" ? options.launches : 0,
      fmt::join(active_step_ms, ", "), fmt::join(active(launch_loop_cpu_ms), ", "),
      fmt::join(active(launch_loop_wall_ms), ", "), close_ms, loss_value, options.profiler != "none" && traced);
  if (!traced) {
    fmt::print(stderr, "torch_profiler_side_by_side: {} wrote no trace to {}\n", options.profiler, trace_path);
    return 1;
  }
  return 0;
}
