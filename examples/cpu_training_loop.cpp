// cpu_training_loop: a complete, CPU-only training loop profiled with dlprof.
//
// An MNIST-shaped synthetic dataset is "decoded" and augmented by a DataLoader with
// --num-workers threads feeding a bounded prefetch queue; a 784-256-10 MLP is trained on it with
// plain C++ forward, backward and SGD. The loop is profiled with schedule(1, 1, 3, 1) like a
// torch.profiler run: the trace of steps 2-4 goes to --log-dir for TensorBoard or Perfetto, and
// the program prints its report: each step's time by TensorBoard's roles (the DataLoader share
// among them), the top ranges and what to change.
//
//   cpu_training_loop --num-workers 0   # loading runs inline: DataLoader dominates the step
//   cpu_training_loop --num-workers 4   # workers prefetch: the DataLoader share shrinks
//
// Workers share the CPU with the training thread: with more workers than spare cores, the
// DataLoader share falls further but forward and backward slow down (compare fc1 in the tables).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <dlprof/profiler.hpp>
#include <dlprof/report.hpp>

#include "command_line.hpp"
#include "cpu_mlp.hpp"
#include "trace_files.hpp"

namespace {

using dlprof_examples::cpu_mlp::Batch;
using dlprof_examples::cpu_mlp::kClasses;
using dlprof_examples::cpu_mlp::kDatasetSeed;
using dlprof_examples::cpu_mlp::kHiddenUnits;
using dlprof_examples::cpu_mlp::kLearningRate;
using dlprof_examples::cpu_mlp::kModelSeed;
using dlprof_examples::cpu_mlp::kPixels;
using dlprof_examples::cpu_mlp::Mlp;
using dlprof_examples::cpu_mlp::SyntheticDataset;
using dlprof_examples::cpu_mlp::SyntheticLoader;

struct Options {
  int num_workers = 0;
  int steps = 12;
  int batch_size = 128;
  std::string log_dir = "./log/cpu_training_loop";
  bool profile = true;
  bool help = false;
};


void print_usage(int min_steps) {
  fmt::print(R"(Usage: cpu_training_loop [options]
Trains a small MLP on synthetic MNIST-shaped data on the CPU, profiled by dlprof.

  --num-workers N   DataLoader worker threads; 0 loads batches on the training thread (default 0)
  --steps N         training steps, at least {} so that a trace is recorded (default 12)
  --batch-size N    samples per batch (default 128)
  --log-dir DIR     where the trace is written (default ./log/cpu_training_loop)
  --profile on|off  off runs the same loop with the profiler never started, to measure its cost
  --help            this text
)",
             min_steps);
}

// Accepts `--flag value` and `--flag=value`.
Options parse_options(int argc, char** argv, int min_steps) {
  using dlprof_examples::parse_int;
  Options options;
  dlprof_examples::for_each_flag(
      argc, argv, {"--num-workers", "--steps", "--batch-size", "--log-dir", "--profile"}, options.help,
      [&](std::string_view flag, std::string_view value) {
        if (flag == "--num-workers") options.num_workers = parse_int(flag, value, 0, 64);
        else if (flag == "--steps") options.steps = parse_int(flag, value, min_steps, 1'000'000);
        else if (flag == "--batch-size") options.batch_size = parse_int(flag, value, 1, 4096);
        else if (flag == "--profile" && (value == "on" || value == "off")) options.profile = value == "on";
        else if (flag == "--profile") throw dlprof_examples::UsageError(fmt::format("--profile expects on or off, got '{}'", value));
        else if (value.empty()) throw dlprof_examples::UsageError("--log-dir needs a non-empty value");
        else options.log_dir = std::string(value);
      });
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  // Wait 1 step, warm up 1, record 3 (steps 2-4), once. The trace is saved when the last recorded
  // step ends, so the run needs at least wait + warmup + active steps.
  const dlprof::Schedule profile_schedule = dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/3, /*repeat=*/1);
  const auto min_steps =
      static_cast<int>(profile_schedule.wait() + profile_schedule.warmup() + profile_schedule.active());
  Options options;
  try {
    options = parse_options(argc, argv, min_steps);
  } catch (const dlprof_examples::UsageError& error) {
    fmt::print(stderr, "cpu_training_loop: {}\nTry 'cpu_training_loop --help'.\n", error.what());
    return 2;
  }
  if (options.help) {
    print_usage(min_steps);
    return 0;
  }

  const SyntheticDataset dataset(kDatasetSeed);
  Mlp model(kModelSeed);
  SyntheticLoader loader(dataset, options.batch_size, options.num_workers);
  fmt::print("Training a {}-{}-{} MLP: batch size {}, {} steps, {} DataLoader worker(s)\n\n", kPixels, kHiddenUnits,
             kClasses, options.batch_size, options.steps, options.num_workers);

  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(profile_schedule)
                            .on_trace_ready(dlprof::tensorboard_trace_handler(options.log_dir)));
  float first_loss = 0, last_loss = 0;
  if (options.profile) prof.start();
  for (int step = 0; step < options.steps; ++step) {
    const auto step_begin = std::chrono::steady_clock::now();
    const dlprof::Action action = prof.current_action();
    {
      // One range per iteration, formatted only while recording. It closes before prof.step() so
      // that it nests inside ProfilerStep#N (a per-epoch range would straddle steps).
      DLPROF_RANGE_F("epoch {} step {}", step / loader.batches_per_epoch(), step);
      const Batch batch = loader.next();
      model.zero_grad();
      last_loss = model.forward(batch);
      model.backward(batch);
      model.sgd_step(kLearningRate);
      if (step == 0) first_loss = last_loss;
      dlprof::counter("loss", last_loss);
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - step_begin;
    dlprof::counter("samples/s", options.batch_size / elapsed.count());
    fmt::print("step {:3}  loss {:.4f}  {:7.2f} ms  [{}]\n", step, last_loss, elapsed.count() * 1e3,
               dlprof::to_string(action));
    if (options.profile) prof.step();
  }
  prof.stop();
  if (!options.profile) {
    fmt::print("\nLoss: {:.4f} at step 0 -> {:.4f} at step {} (profiler off)\n", first_loss, last_loss, options.steps - 1);
    return 0;
  }

  fmt::print("\nLoss: {:.4f} at step 0 -> {:.4f} at step {}\n\n", first_loss, last_loss, options.steps - 1);
  fmt::print("{}\n", prof.report());
  const std::optional<std::filesystem::path> trace = dlprof_examples::newest_trace_file(options.log_dir);
  if (!trace || !prof.errors().empty()) {  // dlprof has already printed why on stderr
    fmt::print(stderr, "cpu_training_loop: no trace was written to {}\n", options.log_dir);
    return 1;
  }
  fmt::print("Trace: {}\n(open it in https://ui.perfetto.dev or with tensorboard --logdir {})\n", trace->string(),
             options.log_dir);
  return 0;
}
