// Data-parallel training under a real launcher, every rank profiled: the demo's CNN (mnist_cnn.hpp)
// on each rank's share of synthetic MNIST-shaped data, gradients all-reduced in buckets after
// every backward pass as DDP does, over c10d's Gloo process group on CPUs or its NCCL process group
// on GPUs (LibTorch with CUDA). Each rank writes its own trace into one directory, named by rank,
// and dlprof-report DIR compares the ranks.
//
//   mpirun -np 4 distributed_training --log-dir log/ddp               # Open MPI on one machine
//   torchrun --nproc-per-node 4 --no-python distributed_training ...  # or torchrun, or srun
//   mpirun -np 4 distributed_training --slow-rank 2 --slow-ms 20      # rank 2 computes 20 ms longer
//   torchrun --nproc-per-node 8 --no-python distributed_training --backend nccl   # a GPU per rank
//
// The rank and world size come from the launcher's variables (RANK/WORLD_SIZE for torchrun,
// OMPI_COMM_WORLD_* for mpirun, SLURM_PROCID/SLURM_NTASKS for srun); the ranks meet through a
// TCPStore that rank 0 serves at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500).
#include <dlprof/profiler.hpp>
#include <dlprof/torch_distributed.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if DLPROF_EXAMPLE_WITH_GLOO
#  include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL  // LibTorch built with CUDA and NCCL
#  include <c10/cuda/CUDAGuard.h>
#  include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>

#include <fmt/format.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "command_line.hpp"
#include "mnist_cnn.hpp"

namespace {

struct Options {
  int steps = 8;
  int batch_size = 32;
  std::int64_t bucket_elements = 25'000;  // DDP's buckets are 25 MB; this model has 207k parameters
  int slow_rank = -1;
  int slow_ms = 0;
  int die_rank = -1;
  int die_at_step = -1;
  int hang_rank = -1;
  int hang_at_step = -1;
  int timeout_s = 60;
  std::string backend = "gloo";
  std::string log_dir = "log/distributed";
  bool help = false;
};

void print_usage() {
  fmt::print(
      "Usage: distributed_training [--steps N] [--batch-size N] [--bucket-elements N] [--slow-rank R --slow-ms M]\n"
      "                            [--backend gloo|nccl] [--log-dir DIR]\n"
      "Data-parallel training of a small CNN over c10d's Gloo (CPU) or NCCL (GPU) process group, every rank\n"
      "profiled by dlprof.\n"
      "Run it under a launcher: mpirun -np 4, torchrun --no-python, or srun.\n\n"
      "  --steps N            training steps, at least 5 (default 8)\n"
      "  --batch-size N       examples per rank and step (default 32)\n"
      "  --bucket-elements N  gradient elements all-reduced together (default 25000)\n"
      "  --slow-rank R        rank R computes --slow-ms milliseconds longer each step (a straggler)\n"
      "  --slow-ms M          (default 0)\n"
      "  --die-rank R         rank R kills itself (SIGKILL) as step --die-at-step begins: the others' collectives\n"
      "  --die-at-step N      fail, and each writes the steps it recorded\n"
      "  --hang-rank R        rank R stops calling collectives as step --hang-at-step begins, and waits until it is\n"
      "  --hang-at-step N     killed: the others wait inside their all-reduce (DLPROF_MODE=flight-recorder dumps it)\n"
      "  --timeout-s S        how long a collective waits for the other ranks (default 60)\n"
      "  --backend B          gloo: CPUs (default); nccl: one GPU per rank (LOCAL_RANK), GPU activity recorded\n"
      "  --log-dir DIR        where every rank writes its trace (default log/distributed)\n"
      "MASTER_ADDR and MASTER_PORT (default 127.0.0.1:29500) locate rank 0's store.\n");
}

Options parse_options(int argc, char** argv) {
  using dlprof_examples::parse_int;
  Options options;
  dlprof_examples::for_each_flag(
      argc, argv,
      {"--steps", "--batch-size", "--bucket-elements", "--slow-rank", "--slow-ms", "--die-rank", "--die-at-step",
       "--hang-rank", "--hang-at-step", "--timeout-s", "--backend", "--log-dir"},
      options.help,
      [&](std::string_view flag, std::string_view value) {
        if (flag == "--steps") options.steps = parse_int(flag, value, 5, 1'000'000);
        else if (flag == "--batch-size") options.batch_size = parse_int(flag, value, 1, 4096);
        else if (flag == "--bucket-elements") options.bucket_elements = parse_int(flag, value, 1, 1'000'000'000);
        else if (flag == "--slow-rank") options.slow_rank = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--slow-ms") options.slow_ms = parse_int(flag, value, 0, 60'000);
        else if (flag == "--die-rank") options.die_rank = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--die-at-step") options.die_at_step = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--hang-rank") options.hang_rank = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--hang-at-step") options.hang_at_step = parse_int(flag, value, 0, 1'000'000);
        else if (flag == "--timeout-s") options.timeout_s = parse_int(flag, value, 1, 3600);
        else if (flag == "--backend" && (value == "gloo" || value == "nccl")) options.backend = std::string(value);
        else if (flag == "--backend")
          throw dlprof_examples::UsageError(fmt::format("--backend expects gloo or nccl, got '{}'", value));
        else if (value.empty()) throw dlprof_examples::UsageError("--log-dir needs a non-empty value");
        else options.log_dir = std::string(value);
      });
  return options;
}

/// The first line of a message (c10's errors carry a backtrace after it).
std::string_view first_line(std::string_view message) { return message.substr(0, message.find('\n')); }

std::string environment(const char* name, std::string_view otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(otherwise);
}

/// The parameters' gradients in buckets of about `elements` each, in reverse registration order
/// (the order backward produces them, as DDP buckets them).
std::vector<std::vector<torch::Tensor>> gradient_buckets(const std::vector<torch::Tensor>& parameters, std::int64_t elements) {
  std::vector<std::vector<torch::Tensor>> buckets(1);
  std::int64_t in_bucket = 0;
  for (auto parameter = parameters.rbegin(); parameter != parameters.rend(); ++parameter) {
    if (in_bucket >= elements) {
      buckets.emplace_back();
      in_bucket = 0;
    }
    buckets.back().push_back(*parameter);
    in_bucket += parameter->numel();
  }
  return buckets;
}

/// Averages the gradients over the ranks, one all-reduce per bucket of flattened gradients.
template <class Group>
void all_reduce_gradients(dlprof::ProfiledProcessGroup<Group>& group, const std::vector<std::vector<torch::Tensor>>& buckets) {
  DLPROF_RANGE("all_reduce_gradients", dlprof::Category::Communication);
  for (const auto& bucket : buckets) {
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& parameter : bucket) grads.push_back(parameter.grad().view(-1));
    std::vector<torch::Tensor> flat{torch::cat(grads)};
    group.allreduce(flat);
    flat[0].div_(group.size());
    std::int64_t offset = 0;
    for (const torch::Tensor& parameter : bucket) {
      const std::int64_t count = parameter.numel();
      parameter.grad().view(-1).copy_(flat[0].slice(0, offset, offset + count));
      offset += count;
    }
  }
}

/// What every rank runs the same way, whatever its process group.
struct Run {
  const Options& options;
  int rank;
  int world_size;
};

/// Trains the model on `device` over `group`, recording every rank, and says how it went.
template <class Group>
int train(dlprof::ProfiledProcessGroup<Group>& group, const Run& run, const torch::Device& device) {
  const Options& options = run.options;
  const int rank = run.rank, world_size = run.world_size;
  // Each rank's clock against rank 0's, written into its trace: dlprof-report puts the ranks on
  // rank 0's clock, so that it can tell which rank reached each collective last.
  const dlprof::ClockOffset offset = group.align_clocks();

  dlprof_examples::MnistCnn model;
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto buckets = gradient_buckets(model->parameters(), options.bucket_elements);
  dlprof::annotate_modules(*model);
  auto annotated_optimizer = dlprof::annotate(optimizer);

  // Every rank records the same steps; tensorboard_trace_handler names each rank's file.
  std::vector<dlprof::Activity> activities{dlprof::Activity::CPU};
  if (device.is_cuda()) activities.push_back(dlprof::Activity::CUDA);
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .activities(activities)
                            .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/3, /*repeat=*/1))
                            .record_shapes(true)
                            .on_trace_ready(dlprof::tensorboard_trace_handler(options.log_dir, fmt::format("rank{}", rank))));
  {
    // The same initial weights everywhere, as DDP broadcasts them.
    std::vector<torch::Tensor> parameters;
    for (const torch::Tensor& parameter : model->parameters()) parameters.push_back(parameter.data());
    for (torch::Tensor& parameter : parameters) {
      std::vector<torch::Tensor> one{parameter};
      group.broadcast(one);
    }
  }

  if (rank == 0)
    fmt::print("Data-parallel training over {} ({}): {} ranks, batch {} per rank, {} steps, {} gradient bucket(s)\n",
               options.backend, device.str(), world_size, options.batch_size, options.steps, buckets.size());
  prof.start();
  float loss_value = 0;
  int step = 0;
  try {
    for (; step < options.steps; ++step) {
      if (rank == options.die_rank && step == options.die_at_step) ::raise(SIGKILL);
      if (rank == options.hang_rank && step == options.hang_at_step) {
        fmt::print("rank {} stops calling collectives at step {}\n", rank, step);
        std::fflush(stdout);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      torch::Tensor images, labels;
      {
        DLPROF_RANGE("data_loading", dlprof::Category::DataLoader);
        const auto seed = static_cast<std::uint64_t>(step * world_size + rank);
        torch::manual_seed(seed);
        images = torch::randn({options.batch_size, 1, 28, 28}, device);
        labels = torch::randint(0, 10, {options.batch_size}, torch::TensorOptions(device).dtype(torch::kLong));
      }
      annotated_optimizer.zero_grad();
      torch::Tensor loss;
      {
        DLPROF_RANGE("forward", dlprof::Category::Forward);
        loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
        if (rank == options.slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(options.slow_ms));
      }
      {
        DLPROF_RANGE("backward", dlprof::Category::Backward);
        loss.backward();
      }
      all_reduce_gradients(group, buckets);
      annotated_optimizer.step();
      loss_value = loss.item<float>();
      prof.step();
    }
  } catch (const std::exception& error) {
    // A rank died or hung: this rank's collectives fail. The steps it recorded are written, and
    // the process leaves without tearing down a group whose peers are gone.
    prof.stop();
    fmt::print(stderr, "distributed_training: rank {} stops at step {}: a collective failed: {}\n", rank, step,
               first_line(error.what()));
    std::fflush(nullptr);
    std::_Exit(1);
  }
  prof.stop();
  group.barrier();
  fmt::print("rank {}: loss {:.4f} after {} steps; clock {:+.3f} ms from rank 0's (+/- {:.3f} ms); trace in {}\n", rank,
             loss_value, options.steps, static_cast<double>(offset.offset_ns) / 1e6,
             static_cast<double>(offset.uncertainty_ns) / 1e6, options.log_dir);
  return prof.errors().empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const dlprof_examples::UsageError& error) {
    fmt::print(stderr, "distributed_training: {}\nTry 'distributed_training --help'.\n", error.what());
    return 2;
  }
  if (options.help) {
    print_usage();
    return 0;
  }
  const dlprof::DistributedInfo launched = dlprof::distributed_info_from_environment();
  const int rank = static_cast<int>(launched.rank), world_size = static_cast<int>(launched.world_size);
  const std::string master = environment("MASTER_ADDR", "127.0.0.1");
  const std::string port_text = environment("MASTER_PORT", "29500");
  int port = 0;
  try {
    port = dlprof_examples::parse_int("MASTER_PORT", port_text, 1, 65535);
  } catch (const dlprof_examples::UsageError& error) {
    fmt::print(stderr, "distributed_training: {}\n", error.what());
    return 2;
  }
  torch::set_num_threads(1);  // the ranks share this machine's cores
  torch::manual_seed(0);      // the same initial weights on every rank

  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(port);
    store_options.isServer = rank == 0;
    store_options.numWorkers = world_size;
    store_options.timeout = std::chrono::seconds(options.timeout_s);
    store = c10::make_intrusive<c10d::TCPStore>(master, store_options);
  } catch (const std::exception& error) {
    fmt::print(stderr, "distributed_training: rank {} of {} cannot reach the store at {}:{}: {}\n", rank, world_size, master,
               port, error.what());
    return 1;
  }
  const Run run{options, rank, world_size};
  const auto joined = [&](const std::exception& error) {
    fmt::print(stderr, "distributed_training: rank {} of {} cannot join the {} group: {}\n", rank, world_size, options.backend,
               first_line(error.what()));
    return 1;
  };
  if (options.backend == "nccl") {
#ifdef USE_C10D_NCCL
    if (!torch::cuda::is_available()) {
      fmt::print(stderr, "distributed_training: --backend nccl, but this LibTorch sees no CUDA device\n");
      return 1;
    }
    int local_rank = 0;
    try {
      local_rank = dlprof_examples::parse_int("LOCAL_RANK", environment("LOCAL_RANK", "0"), 0, 1'000'000);
    } catch (const dlprof_examples::UsageError& error) {
      fmt::print(stderr, "distributed_training: {}\n", error.what());
      return 2;
    }
    const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % torch::cuda::device_count()));
    const c10::cuda::CUDAGuard on_device(device);  // the rank's GPU is the current one
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
    try {
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = std::chrono::milliseconds(options.timeout_s * 1000);
      nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, nccl_options);
    } catch (const std::exception& error) {
      return joined(error);
    }
    dlprof::ProfiledProcessGroup group(nccl);
    dlprof::register_nccl_version(c10d::getNcclVersion());
    return train(group, run, device);
#else
    fmt::print(stderr, "distributed_training: --backend nccl needs LibTorch built with CUDA and NCCL; this one has neither\n");
    return 2;
#endif
  }
#if DLPROF_EXAMPLE_WITH_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  try {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create();
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(master));
    gloo_options->timeout = std::chrono::seconds(options.timeout_s);
    gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, gloo_options);
  } catch (const std::exception& error) {
    return joined(error);
  }
  dlprof::ProfiledProcessGroup group(gloo);
  return train(group, run, torch::Device(torch::kCPU));
#else
  fmt::print(stderr, "distributed_training: this build has no Gloo (Gloo's headers were not found): use --backend nccl\n");
  return 2;
#endif
}
