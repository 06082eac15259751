// The main demo: a LibTorch trainer profiled end to end with a few lines of dlprof.
//
// A small CNN (conv, batchnorm, relu, pool, linear; examples/mnist_cnn.hpp) learns to classify
// synthetic MNIST-shaped images delivered by a torch::data DataLoader with worker threads. The
// loader, the optimizer and every layer of the model are annotated without editing their code,
// and the Profiler records ATen ops with their shapes, FLOPs and allocations over the steps its
// schedule selects, writes a trace that TensorBoard, HTA and Perfetto open, and prints its report
// (where the time of a step went, the top ops, what to change) and the ops with the most FLOPs:
//
//   libtorch_training                         # CPU, 2 loader workers, trace in ./log
//   libtorch_training --num-workers 0         # loading runs inline: the DataLoader takes the step
//   libtorch_training --device cuda           # on a GPU (LibTorch with CUDA): kernels linked to ops
//   libtorch_training --with-stack && dlprof-report --stacks cpu log > cpu.folded
//                                             # each op's C++ call stack: a flame graph of the steps
//   DLPROF_MODE=flight-recorder DLPROF_OUTPUT=log/fr libtorch_training --steps 40 --slow-step 30
//                                             # the flight recorder dumps the slow step
//   DLPROF_MODE=flight-recorder DLPROF_OUTPUT=log/fr libtorch_training --steps 40 --crash-at 25
//                                             # ... and the steps before a crash
//   DLPROF_MODE=flight-recorder libtorch_training --steps 40 --oom-at 30 --log-dir log/oom
//                                             # ... and what held the memory when it ran out
//   libtorch_training --steps 12 --leak       # keeps every step's logits: the report names what holds them
//   libtorch_training --slowdown 3 --log-dir log/slow && dlprof-report --diff log log/slow
//                                             # the loading works 3 % of a step longer: the diff names it
#include <dlprof/profiler.hpp>
#include <dlprof/export/folded_stacks.hpp>
#include <dlprof/report.hpp>
#include <torch/torch.h>

#include <fmt/format.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "command_line.hpp"
#include "mnist_cnn.hpp"
#include "trace_files.hpp"

namespace {

constexpr std::int64_t kImageSize = 28;
constexpr std::int64_t kClasses = 10;

constexpr int kStoredSize = 96;  // the size an example is stored at, before augmenting
constexpr int kCropSize = 88;
constexpr int kSmoothingPasses = 4;

volatile std::uint64_t busy_work_result = 0;  // keeps the work from being optimised away

/// Does `rounds` rounds of integer work: what a slower op adds, which takes longer on a slower
/// machine as the op would (a spin for a fixed time would not).
void busy_work(std::uint64_t rounds) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (std::uint64_t i = 0; i < rounds; ++i) state = (state ^ (state >> 29)) * 0xbf58476d1ce4e5b9ull + i;
  busy_work_result = state;
}

/// The rounds of busy_work() that take `duration` on this machine now.
std::uint64_t busy_work_rounds(std::chrono::nanoseconds duration) {
  constexpr std::uint64_t kProbeRounds = 1 << 22;
  const auto start = std::chrono::steady_clock::now();
  busy_work(kProbeRounds);
  const double probe_ns = static_cast<double>(std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count());
  return static_cast<std::uint64_t>(static_cast<double>(kProbeRounds) * static_cast<double>(duration.count()) / std::max(probe_ns, 1.0));
}

// MNIST-shaped examples whose class is visible: a bright patch at a position that depends on the
// label, over noise. Each example is made on demand from its index and costs what loading an
// image costs on the CPU, in plain C++ as an image library's would: it is "decoded" (drawn at
// 96×96 and smoothed four times, as a decoder's IDCT and upsampling touch every pixel), then
// augmented (a random crop, a small rotation and a resize to 28×28 by bilinear sampling, a
// brightness jitter) and normalised. Loading a batch takes about as long as training on it, so
// the DataLoader's workers matter.
class SyntheticMnist : public torch::data::datasets::Dataset<SyntheticMnist> {
 public:
  /// `extra_rounds`: busy_work() rounds each example does besides its decoding (--slowdown), read
  /// by every loading thread and set by the training loop.
  SyntheticMnist(std::size_t examples, std::shared_ptr<const std::atomic<std::uint64_t>> extra_rounds)
      : examples_(examples), extra_rounds_(std::move(extra_rounds)) {}

  torch::data::Example<> get(std::size_t index) override {
    // A range of the DataLoader category: the report counts the worker threads that run it as
    // loader threads, and shows how evenly they share the loading.
    DLPROF_RANGE("SyntheticMnist::get", dlprof::Category::DataLoader);
    if (const std::uint64_t rounds = extra_rounds_->load(std::memory_order_relaxed)) busy_work(rounds);
    const auto label = static_cast<int>(index % kClasses);
    std::uint64_t state = 0x9E3779B97F4A7C15ull * (index + 1);
    const auto uniform = [&state] {  // xorshift64*: the example depends on its index alone
      state ^= state >> 12;
      state ^= state << 25;
      state ^= state >> 27;
      return static_cast<float>((state * 0x2545F4914F6CDD1Dull) >> 40) / static_cast<float>(1 << 24);
    };
    // Decode.
    std::vector<float> pixels(kStoredSize * kStoredSize), smoothed(pixels.size());
    for (float& pixel : pixels) pixel = 0.3f * uniform();
    const int row = 8 + (label / 5) * 44, column = 8 + (label % 5) * 17;
    for (int y = row; y < row + 24; ++y)
      for (int x = column; x < column + 16; ++x) pixels[static_cast<std::size_t>(y * kStoredSize + x)] += 0.7f;
    for (int pass = 0; pass < kSmoothingPasses; ++pass) {
      for (int y = 0; y < kStoredSize; ++y)
        for (int x = 0; x < kStoredSize; ++x) {
          float sum = 0;
          for (int dy = -2; dy <= 2; ++dy)
            for (int dx = -2; dx <= 2; ++dx) {
              const int sy = std::clamp(y + dy, 0, kStoredSize - 1), sx = std::clamp(x + dx, 0, kStoredSize - 1);
              sum += pixels[static_cast<std::size_t>(sy * kStoredSize + sx)];
            }
          smoothed[static_cast<std::size_t>(y * kStoredSize + x)] = sum / 25;
        }
      pixels.swap(smoothed);
    }
    // Augment: crop, rotate a few degrees, resize, jitter; then normalise.
    const float top = std::floor(uniform() * (kStoredSize - kCropSize)), left = std::floor(uniform() * (kStoredSize - kCropSize));
    const float angle = (uniform() - 0.5f) * 0.2f, brightness = 0.9f + 0.2f * uniform();
    const float scale = static_cast<float>(kCropSize) / kImageSize, center = (kImageSize - 1) / 2.0f;
    torch::Tensor image = torch::empty({1, kImageSize, kImageSize});
    float* out = image.data_ptr<float>();
    for (int y = 0; y < kImageSize; ++y)
      for (int x = 0; x < kImageSize; ++x) {
        const float u = (x - center) * scale, v = (y - center) * scale;
        const float sx = std::clamp(left + kCropSize / 2.0f + u * std::cos(angle) - v * std::sin(angle), 0.0f, kStoredSize - 1.001f);
        const float sy = std::clamp(top + kCropSize / 2.0f + u * std::sin(angle) + v * std::cos(angle), 0.0f, kStoredSize - 1.001f);
        const int x0 = static_cast<int>(sx), y0 = static_cast<int>(sy);
        const float fx = sx - x0, fy = sy - y0;
        const auto at = [&](int yy, int xx) { return pixels[static_cast<std::size_t>(yy * kStoredSize + xx)]; };
        const float value = (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x0 + 1)) + fy * ((1 - fx) * at(y0 + 1, x0) + fx * at(y0 + 1, x0 + 1));
        out[y * kImageSize + x] = (value * brightness - 0.1307f) / 0.3081f;
      }
    return {image, torch::tensor(static_cast<std::int64_t>(label))};
  }

  torch::optional<std::size_t> size() const override { return examples_; }

 private:
  std::size_t examples_;
  std::shared_ptr<const std::atomic<std::uint64_t>> extra_rounds_;
};

struct Options {
  int steps = 12;
  int batch_size = 64;
  int num_workers = 2;
  int slow_step = -1;
  int crash_at = -1;
  int oom_at = -1;
  int active = -1;  // not given: 3, or with --leak every step after the warm-up
  int slowdown_percent = 0;
  bool slowdown_in_forward = false;  // --slowdown-in forward; else the data loading
  bool leak = false;
  bool with_stack = false;
  std::string device = "cpu";
  std::string log_dir = "log";
  bool help = false;
};

void print_usage(int min_steps) {
  fmt::print(
      "Usage: libtorch_training [--steps N] [--batch-size N] [--num-workers N] [--device cpu|cuda] [--log-dir DIR]\n"
      "                         [--active N] [--slow-step N] [--crash-at N] [--oom-at N] [--leak] [--slowdown P]\n"
      "                         [--slowdown-in loading|forward] [--with-stack]\n"
      "Trains a small CNN on synthetic MNIST-shaped data with LibTorch, profiled by dlprof.\n\n"
      "  --steps N          training steps, at least {} (default 12)\n"
      "  --batch-size N     examples per batch (default 64)\n"
      "  --num-workers N    DataLoader worker threads; 0 loads inline (default 2)\n"
      "  --device D         cpu or cuda (default cpu); cuda also records GPU activity where dlprof::cupti is linked\n"
      "  --log-dir DIR      where the trace goes (default log)\n"
      "  --active N         steps recorded, after 2 skipped and 1 of warm-up (default 3; with --leak, all)\n"
      "  --slow-step N      step N stalls for half a second (a flight recorder dumps it)\n"
      "  --crash-at N       step N dies of SIGSEGV inside a range (a flight recorder leaves its last steps)\n"
      "  --oom-at N         step N's forward asks for 1 PiB: LibTorch's out-of-memory error ends training (a flight\n"
      "                     recorder dumps what held the memory)\n"
      "  --leak             keeps every step's logits in a std::vector, as a leak does (the report names what holds them)\n"
      "  --slowdown P       from the first recorded step on, the data loading does P % of a step more work (what took P %\n"
      "                     of the median of the steps before, spread over the batch's examples), a known regression for\n"
      "                     dlprof-report --diff and --baseline to find\n"
      "  --slowdown-in W    where --slowdown's work goes: loading (SyntheticMnist::get, the default) or forward (the\n"
      "                     forward range, after the loss)\n"
      "  --with-stack       ranges and ops carry their call stacks (dlprof-report --stacks cpu: a flame graph)\n"
      "The DLPROF_* variables (README, \"Leave it on\") override the profiling options set here.\n",
      min_steps);
}

// Accepts `--flag value` and `--flag=value`.
Options parse_options(int argc, char** argv, int min_steps) {
  using dlprof_examples::parse_int;
  Options options;
  dlprof_examples::for_each_flag(
      argc, argv, {"--steps", "--batch-size", "--num-workers", "--device", "--log-dir", "--slow-step", "--crash-at", "--oom-at", "--active",
                   "--slowdown", "--slowdown-in"},
      {"--with-stack", "--leak"}, options.help,
      [&](std::string_view flag, std::string_view value) {
        if (flag == "--with-stack") options.with_stack = true;
        else if (flag == "--leak") options.leak = true;
        else if (flag == "--active") options.active = parse_int(flag, value, 1, 1'000'000);
        else if (flag == "--slowdown") options.slowdown_percent = parse_int(flag, value, 0, 1000);
        else if (flag == "--slowdown-in" && (value == "loading" || value == "forward")) options.slowdown_in_forward = value == "forward";
        else if (flag == "--slowdown-in")
          throw dlprof_examples::UsageError(fmt::format("--slowdown-in expects loading or forward, got '{}'", value));
        else if (flag == "--steps") options.steps = parse_int(flag, value, min_steps, 1'000'000);
        else if (flag == "--batch-size") options.batch_size = parse_int(flag, value, 1, 4096);
        else if (flag == "--num-workers") options.num_workers = parse_int(flag, value, 0, 64);
        else if (flag == "--slow-step") options.slow_step = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--crash-at") options.crash_at = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--oom-at") options.oom_at = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--device" && (value == "cpu" || value == "cuda")) options.device = std::string(value);
        else if (flag == "--device") throw dlprof_examples::UsageError(fmt::format("--device expects cpu or cuda, got '{}'", value));
        else if (value.empty()) throw dlprof_examples::UsageError("--log-dir needs a non-empty value");
        else options.log_dir = std::string(value);
      });
  return options;
}

/// A fatal signal inside a range: a store to a page the process may not touch.
[[noreturn]] void crash_inside_a_range() {
  DLPROF_RANGE("crash_site");
  void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *static_cast<volatile int*>(page) = 1;
  std::abort();
}

/// What a batch far too large does: LibTorch's allocator reports that it cannot allocate, and
/// throws its out-of-memory error.
void ask_for_too_much(const torch::Device& device) {
  DLPROF_RANGE("oversized_activation");
  torch::empty({std::int64_t{1} << 48}, torch::TensorOptions().device(device));  // 1 PiB of floats
}

}  // namespace

int main(int argc, char** argv) {
  // Wait 2 steps (the first ones allocate and pick kernels), warm up 1, record --active (3), once.
  constexpr int kWait = 2, kWarmup = 1, kActive = 3;
  const int min_steps = kWait + kWarmup + kActive;
  Options options;
  try {
    options = parse_options(argc, argv, min_steps);
    if (options.active < 0) options.active = options.leak ? options.steps - kWait - kWarmup : kActive;
    if (options.steps < kWait + kWarmup + options.active)
      throw dlprof_examples::UsageError(fmt::format("--active {} records steps {} to {}, but --steps is {}", options.active,
                                                    kWait + kWarmup, kWait + kWarmup + options.active - 1, options.steps));
  } catch (const dlprof_examples::UsageError& error) {
    fmt::print(stderr, "libtorch_training: {}\nTry 'libtorch_training --help'.\n", error.what());
    return 2;
  }
  if (options.help) {
    print_usage(min_steps);
    return 0;
  }
  const dlprof::Schedule profile_schedule = dlprof::schedule(kWait, kWarmup, options.active, /*repeat=*/1);
  if (options.device == "cuda" && !torch::cuda::is_available()) {
    fmt::print(stderr, "libtorch_training: --device cuda, but this LibTorch sees no CUDA device\n");
    return 2;
  }
  const torch::Device device(options.device == "cuda" ? torch::kCUDA : torch::kCPU);
  torch::manual_seed(0);

  // The model, its optimizer and its data, as any LibTorch trainer has them.
  dlprof_examples::MnistCnn model;
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto examples = static_cast<std::size_t>(options.batch_size) * static_cast<std::size_t>(options.steps);
  const auto loading_slowdown_rounds = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto loader = torch::data::make_data_loader(
      SyntheticMnist(examples, loading_slowdown_rounds).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(static_cast<std::size_t>(options.batch_size)).workers(
          static_cast<std::size_t>(options.num_workers)));

  // dlprof: a range per layer, per loader step and per optimizer call, without editing them.
  dlprof::annotate_modules(*model);
  auto annotated_optimizer = dlprof::annotate(optimizer);
  std::vector<dlprof::Activity> activities{dlprof::Activity::CPU};
  if (device.is_cuda()) activities.push_back(dlprof::Activity::CUDA);
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .activities(activities)
                            .schedule(profile_schedule)
                            .record_shapes(true)
                            .profile_memory(true)
                            .with_flops(true)
                            .with_stack(options.with_stack)
                            .on_trace_ready(dlprof::tensorboard_trace_handler(options.log_dir)));

  fmt::print("Training a small CNN on synthetic MNIST ({}): batch size {}, {} steps, {} DataLoader worker(s)\n\n",
             device.str(), options.batch_size, options.steps, options.num_workers);
  model->train();
  float first_loss = 0, last_loss = 0;
  std::vector<torch::Tensor> kept_logits;  // --leak: "for an accuracy computed after training"
  int step = 0;
  // --slowdown: P % of the median of the steps before the recorded ones, in every step after them.
  std::vector<std::chrono::nanoseconds> unrecorded_steps;
  std::uint64_t forward_slowdown_rounds = 0;
  try {
    // The scope stops the Profiler at its end; a flight recorder left by an exception dumps first,
    // naming the request an out-of-memory error refused.
    const dlprof::ProfilingScope scope(prof);
    auto step_begin = std::chrono::steady_clock::now();
    for (auto& batch : dlprof::annotate(*loader)) {
      const dlprof::Action action = prof.current_action();
      torch::Tensor images = batch.data.to(device), labels = batch.target.to(device);
      annotated_optimizer.zero_grad();
      torch::Tensor loss;
      {
        DLPROF_RANGE("forward", dlprof::Category::Forward);
        torch::Tensor logits = model->forward(images);
        loss = torch::nn::functional::cross_entropy(logits, labels);
        if (options.leak) kept_logits.push_back(logits);
        if (step >= kWait + kWarmup && forward_slowdown_rounds != 0) busy_work(forward_slowdown_rounds);
        if (step == options.oom_at) ask_for_too_much(device);
      }
      {
        DLPROF_RANGE("backward", dlprof::Category::Backward);
        loss.backward();
      }
      annotated_optimizer.step();
      if (step == options.slow_step) {
        DLPROF_RANGE("stall");
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
      if (step == options.crash_at) crash_inside_a_range();
      last_loss = loss.item<float>();
      if (step == 0) first_loss = last_loss;
      const auto now = std::chrono::steady_clock::now();
      if (step < kWait + kWarmup) {
        unrecorded_steps.push_back(now - step_begin);
        if (step == kWait + kWarmup - 1 && options.slowdown_percent > 0) {
          std::sort(unrecorded_steps.begin(), unrecorded_steps.end());
          const std::chrono::nanoseconds slowdown = unrecorded_steps[unrecorded_steps.size() / 2] * options.slowdown_percent / 100;
          const std::uint64_t rounds = busy_work_rounds(slowdown);
          if (options.slowdown_in_forward) forward_slowdown_rounds = rounds;
          else loading_slowdown_rounds->store(rounds / static_cast<std::uint64_t>(options.batch_size), std::memory_order_relaxed);
          fmt::print("--slowdown {}: {} works {:.2f} ms longer a step from step {} on ({} rounds of work)\n", options.slowdown_percent,
                     options.slowdown_in_forward ? "forward" : "the data loading", std::chrono::duration<double, std::milli>(slowdown).count(),
                     step + 1, rounds);
        }
      }
      fmt::print("step {:3}  loss {:.4f}  {:7.2f} ms  [{}]\n", step, last_loss,
                 std::chrono::duration<double, std::milli>(now - step_begin).count(), dlprof::to_string(action));
      step_begin = now;
      prof.step();
      if (++step == options.steps) break;
    }
  } catch (const c10::Error& error) {
    fmt::print(stderr, "libtorch_training: step {} failed: {}\n", step, std::string_view(error.what_without_backtrace()).substr(0, 200));
    if (prof.mode() == dlprof::Mode::FlightRecorder)
      fmt::print(stderr, "The flight recorder left {} dump(s): read them with dlprof-report DIR\n", prof.dumps());
    return 1;
  }

  fmt::print("\nLoss: {:.4f} at step 0 -> {:.4f} at step {}\n\n", first_loss, last_loss, step - 1);
  if (prof.mode() != dlprof::Mode::Scheduled) {  // DLPROF_MODE: what it recorded is in its directory
    fmt::print("dlprof ran with DLPROF_MODE={}: {} trace(s) written; read them with dlprof-report DIR\n",
               dlprof::to_string(prof.mode()),
               prof.mode() == dlprof::Mode::FlightRecorder ? prof.dumps() : (prof.last_trace() != nullptr ? 1u : 0u));
    return prof.errors().empty() ? 0 : 1;
  }
  const std::string report = prof.report();
  fmt::print("{}\n", report);
  if (report.find("[dataloader_bound]") != std::string::npos)
    fmt::print("In this demo the loader's workers are --num-workers (now {}): try --num-workers 4.\n\n", options.num_workers);
  fmt::print("Top ops by FLOPs:\n{}\n", prof.key_averages().sort_by(dlprof::SortBy::Flops).table(8));
  if (options.with_stack) {
    fmt::print("Top ops by self time, by the two innermost frames of this program that called them:\n{}\n",
               prof.key_averages().group_by_stack(2).sort_by(dlprof::SortBy::SelfTime).table(6));
    const std::string folded = (std::filesystem::path(options.log_dir) / "stacks.folded").string();
    prof.export_stacks(folded);
    fmt::print("Folded stacks by self CPU time: {} (flamegraph.pl {} > flame.svg)\n", folded, folded);
    const std::string by_bytes = (std::filesystem::path(options.log_dir) / "stacks.bytes.folded").string();
    prof.export_stacks(by_bytes, dlprof::analysis::StackMetric::SelfBytesAllocated);
    fmt::print("Folded stacks by bytes allocated: {}\n", by_bytes);
  }
  const std::optional<std::filesystem::path> trace = dlprof_examples::newest_trace_file(options.log_dir);
  if (!trace || !prof.errors().empty()) {  // dlprof has already printed why on stderr
    fmt::print(stderr, "libtorch_training: no trace was written to {}\n", options.log_dir);
    return 1;
  }
  fmt::print("Trace: {}\n(open it in https://ui.perfetto.dev or with tensorboard --logdir {})\n", trace->string(),
             options.log_dir);
  return 0;
}
