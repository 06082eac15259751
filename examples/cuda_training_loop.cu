// cuda_training_loop: a raw-CUDA training loop profiled with dlprof, CPU ranges and GPU work in one
// trace, without touching a kernel.
//
// A 784-4096-10 MLP is trained with hand-written kernels (tiled GEMM, bias+ReLU, softmax
// cross-entropy, bias gradients, SGD) on synthetic MNIST-shaped data. Launches go through
// dlprof::cuda::launch (or DLPROF_CUDA_LAUNCH), so each is a range named after its kernel and the
// kernel links to it in the trace; the input batch is copied on a copy stream while the compute
// stream trains on the previous one, the two ordered by CUDA events. The loop is profiled with
// schedule(1, 1, 3, 1) and Activity::CUDA: the trace of steps 2-4 goes to --log-dir.
//
//   cuda_training_loop --host-memory pinned     # the copy runs alongside compute (DMA)
//   cuda_training_loop --host-memory pageable   # cudaMemcpyAsync blocks the host while it stages
//   cuda_training_loop --stats stats.json       # what scripts/gpu_validate.py checks the trace against
//   cuda_training_loop --graph --with-stack     # the step as a CUDA graph, captured in the first recorded
//                                               # step: each replayed kernel names the launch that captured it
//
// Without a usable GPU it says why and exits with status 2.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dlprof/cuda.hpp>
#include <dlprof/profiler.hpp>

#include "command_line.hpp"
#include "random.hpp"
#include "trace_files.hpp"

namespace {

using dlprof::Category;

// Every CUDA call is checked: the failing call, where it was made and why, then exit status 1.
#define CUDA_CHECK(call) check_cuda((call), #call, __FILE__, __LINE__)

void check_cuda(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return;
  fmt::print(stderr, "{}:{}: {} failed: {} ({})\n", file, line, call, cudaGetErrorString(error), cudaGetErrorName(error));
  std::exit(1);
}

constexpr int kPixels = 28 * 28;
constexpr int kHiddenUnits = 4096;
constexpr int kClasses = 10;
constexpr int kDatasetBatches = 4;  // distinct batches in host memory, used in turn
constexpr float kLearningRate = 0.02f;
constexpr std::uint64_t kDatasetSeed = 20240401;
constexpr std::uint64_t kModelSeed = 7;
constexpr int kThreadsPerBlock = 256;

// ---------------------------------------------------------------------------------------------
// Kernels. Matrices are row-major.

constexpr int kGemmTile = 64;        // each block computes a 64x64 tile of C
constexpr int kGemmTileK = 16;       // ... walking K 16 at a time through shared memory
constexpr int kGemmThreadsSide = 16; // 16x16 threads, each computing 4x4 elements of the tile
constexpr int kGemmPerThread = kGemmTile / kGemmThreadsSide;

// C[m x n] = op(A)[m x k] * op(B)[k x n]. op(A) is A stored m x k, or the transpose of A stored
// k x m when TransposeA; likewise op(B) from B stored k x n, or n x k when TransposeB. C is
// overwritten, so gradients need no zeroing between steps.
template <bool TransposeA, bool TransposeB>
__global__ void gemm_tiled(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ c) {
  // [kk][row] and [kk][column]; the padding column spreads the loads' stores over all the banks.
  __shared__ float a_tile[kGemmTileK][kGemmTile + 1];
  __shared__ float b_tile[kGemmTileK][kGemmTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int thread = ty * kGemmThreadsSide + tx;
  const int row0 = static_cast<int>(blockIdx.y) * kGemmTile, column0 = static_cast<int>(blockIdx.x) * kGemmTile;
  float sum[kGemmPerThread][kGemmPerThread] = {};
  for (int k0 = 0; k0 < k; k0 += kGemmTileK) {
    // Neighbouring threads load neighbouring addresses, whichever way each matrix is stored.
    for (int i = thread; i < kGemmTile * kGemmTileK; i += kGemmThreadsSide * kGemmThreadsSide) {
      const int a_row = TransposeA ? i % kGemmTile : i / kGemmTileK, a_k = TransposeA ? i / kGemmTile : i % kGemmTileK;
      const int row = row0 + a_row, ak = k0 + a_k;
      float a_value = 0;
      if (row < m && ak < k)
        a_value = TransposeA ? a[static_cast<std::size_t>(ak) * m + row] : a[static_cast<std::size_t>(row) * k + ak];
      a_tile[a_k][a_row] = a_value;
      const int b_column = TransposeB ? i / kGemmTileK : i % kGemmTile, b_k = TransposeB ? i % kGemmTileK : i / kGemmTile;
      const int column = column0 + b_column, bk = k0 + b_k;
      float b_value = 0;
      if (column < n && bk < k)
        b_value = TransposeB ? b[static_cast<std::size_t>(column) * k + bk] : b[static_cast<std::size_t>(bk) * n + column];
      b_tile[b_k][b_column] = b_value;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kGemmTileK; ++kk) {
      float a_values[kGemmPerThread], b_values[kGemmPerThread];
#pragma unroll
      for (int i = 0; i < kGemmPerThread; ++i) {
        a_values[i] = a_tile[kk][ty + i * kGemmThreadsSide];
        b_values[i] = b_tile[kk][tx + i * kGemmThreadsSide];
      }
#pragma unroll
      for (int i = 0; i < kGemmPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kGemmPerThread; ++j) sum[i][j] += a_values[i] * b_values[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kGemmPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kGemmPerThread; ++j) {
      const int row = row0 + ty + i * kGemmThreadsSide, column = column0 + tx + j * kGemmThreadsSide;
      if (row < m && column < n) c[static_cast<std::size_t>(row) * n + column] = sum[i][j];
    }
}

// x = max(x + bias, 0) for x[rows x columns], in place.
// Keeps the GPU busy for `nanoseconds`, so that a timed launch's start event, the kernel and its
// end event are all queued before the GPU reaches them: otherwise the events also time the GPU
// waiting for the host to submit the kernel. Launched only with --stats.
__global__ void hold_stream(unsigned long long nanoseconds) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

__global__ void bias_relu_forward(int rows, int columns, const float* __restrict__ bias, float* __restrict__ x) {
  const std::size_t count = static_cast<std::size_t>(rows) * columns;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = fmaxf(x[i] + bias[i % columns], 0.0f);
}

// dL/dz = dL/da where the ReLU let the value through, 0 elsewhere; in place.
__global__ void relu_backward(int count, const float* __restrict__ activation, float* __restrict__ grad) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < count; i += static_cast<int>(gridDim.x * blockDim.x))
    if (activation[i] <= 0.0f) grad[i] = 0.0f;
}

// One thread per sample: softmax of logits + bias, the sample's share of the mean cross-entropy
// (added to *loss), and dL/dlogits = (softmax - one_hot(label)) / rows.
__global__ void softmax_cross_entropy(int rows, int classes, const float* __restrict__ logits,
                                      const float* __restrict__ bias, const int* __restrict__ labels,
                                      float* __restrict__ grad_logits, float* __restrict__ loss) {
  const int row = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (row >= rows) return;
  const float* z = logits + static_cast<std::size_t>(row) * classes;
  float* grad = grad_logits + static_cast<std::size_t>(row) * classes;
  float max_logit = -INFINITY;
  for (int c = 0; c < classes; ++c) max_logit = fmaxf(max_logit, z[c] + bias[c]);
  float sum = 0;
  for (int c = 0; c < classes; ++c) sum += (grad[c] = __expf(z[c] + bias[c] - max_logit));
  const int label = labels[row];
  for (int c = 0; c < classes; ++c) grad[c] = (grad[c] / sum - (c == label ? 1.0f : 0.0f)) / static_cast<float>(rows);
  atomicAdd(loss, (logf(sum) + max_logit - z[label] - bias[label]) / static_cast<float>(rows));
}

constexpr int kReduceColumns = 32;  // bias_gradient: a block sums 32 columns
constexpr int kReduceRows = 8;      // ... with 8 threads per column

// grad_bias[j] = sum over rows of grad[row][j]. Threads of a warp read 32 neighbouring columns of
// a row (coalesced); the 8 partial sums of a column meet in shared memory.
__global__ void bias_gradient(int rows, int columns, const float* __restrict__ grad, float* __restrict__ grad_bias) {
  __shared__ float partial[kReduceRows][kReduceColumns];
  const int column = static_cast<int>(blockIdx.x) * kReduceColumns + static_cast<int>(threadIdx.x);
  float sum = 0;
  if (column < columns)
    for (int row = static_cast<int>(threadIdx.y); row < rows; row += kReduceRows)
      sum += grad[static_cast<std::size_t>(row) * columns + column];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || column >= columns) return;
  for (int i = 1; i < kReduceRows; ++i) sum += partial[i][threadIdx.x];
  grad_bias[column] = sum;
}

// parameters -= learning_rate * gradients, over every parameter of the model at once.
template <class T>
__global__ void sgd_update(int count, T learning_rate, const T* __restrict__ gradients, T* __restrict__ parameters) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < count; i += static_cast<int>(gridDim.x * blockDim.x))
    parameters[i] -= learning_rate * gradients[i];
}

unsigned blocks_for(std::size_t threads) {
  return static_cast<unsigned>((threads + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

dim3 gemm_grid(int m, int n) {
  return dim3(static_cast<unsigned>((n + kGemmTile - 1) / kGemmTile), static_cast<unsigned>((m + kGemmTile - 1) / kGemmTile));
}
const dim3 kGemmBlock(kGemmThreadsSide, kGemmThreadsSide);

// ---------------------------------------------------------------------------------------------
// Memory.

// cudaMalloc'd array of `count` T, freed with its owner.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  std::size_t count_;
  T* data_ = nullptr;
};

// Host memory the input batches are copied from: pageable (an ordinary allocation: the driver
// stages each copy through its own pinned buffer, and cudaMemcpyAsync returns only once the data
// is staged) or pinned (cudaMallocHost: the GPU reads it directly and the call returns at once).
template <class T>
class HostArray {
 public:
  HostArray(std::size_t count, bool pinned) : pinned_(pinned) {
    if (pinned_) {
      CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
    } else {
      pageable_.resize(count);
      data_ = pageable_.data();
    }
  }
  ~HostArray() {
    if (pinned_) cudaFreeHost(data_);
  }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;

  T* get() const noexcept { return data_; }

 private:
  bool pinned_;
  std::vector<T> pageable_;
  T* data_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Data.

using dlprof_examples::Rng;

// kDatasetBatches batches of MNIST-shaped samples in host memory: each class is a random
// prototype image, each sample its class's prototype plus noise (learnable, not trivially).
class SyntheticDataset {
 public:
  SyntheticDataset(int batch_size, bool pinned)
      : batch_size_(batch_size),
        images_(static_cast<std::size_t>(kDatasetBatches) * batch_size * kPixels, pinned),
        labels_(static_cast<std::size_t>(kDatasetBatches) * batch_size, pinned) {
    Rng rng(kDatasetSeed);
    std::vector<float> prototypes(static_cast<std::size_t>(kClasses) * kPixels);
    for (float& p : prototypes) p = rng.normal();
    for (std::size_t sample = 0; sample < static_cast<std::size_t>(kDatasetBatches) * batch_size; ++sample) {
      const int label = rng.below(kClasses);
      labels_.get()[sample] = label;
      float* image = images_.get() + sample * kPixels;
      for (int i = 0; i < kPixels; ++i) image[i] = 0.5f * prototypes[static_cast<std::size_t>(label) * kPixels + i] + rng.normal();
    }
  }

  const float* images(int batch) const { return images_.get() + static_cast<std::size_t>(batch) * batch_size_ * kPixels; }
  const int* labels(int batch) const { return labels_.get() + static_cast<std::size_t>(batch) * batch_size_; }
  std::size_t image_bytes() const { return static_cast<std::size_t>(batch_size_) * kPixels * sizeof(float); }
  std::size_t label_bytes() const { return static_cast<std::size_t>(batch_size_) * sizeof(int); }

 private:
  int batch_size_;
  HostArray<float> images_;
  HostArray<int> labels_;
};

// One batch on the device, and the events that pass it between the streams: `ready` when the copy
// stream has written it, `consumed` when the compute stream no longer reads it.
struct DeviceBatch {
  explicit DeviceBatch(int batch_size)
      : images(static_cast<std::size_t>(batch_size) * kPixels), labels(static_cast<std::size_t>(batch_size)) {
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
  }
  ~DeviceBatch() {
    cudaEventDestroy(ready);
    cudaEventDestroy(consumed);
  }
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  DeviceArray<float> images;
  DeviceArray<int> labels;
  cudaEvent_t ready = nullptr;
  cudaEvent_t consumed = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Launches and what the validation needs to know about them.

// Launches kernels on the compute stream. In recorded steps it counts them and, with --stats, times
// each with a pair of CUDA events (a StepTimer), read once profiling is over so that reading them
// adds nothing to the trace.
class KernelLauncher {
 public:
  KernelLauncher(cudaStream_t stream, bool time_kernels) : stream_(stream), time_kernels_(time_kernels) {}

  void begin_step(bool recorded) { counting_ = recorded; }

  // dlprof::cuda::launch: a range named after the kernel.
  template <class... Params, class... Args>
  cudaError_t operator()(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
    return launch_counted(kernel, [&] {
      return dlprof::cuda::launch(kernel, grid, block, 0, stream_, std::forward<Args>(args)...);
    });
  }

  // Any launch of `kernel`, e.g. through DLPROF_CUDA_LAUNCH.
  template <class... Params, class Launch>
  cudaError_t launch_counted(void (*kernel)(Params...), Launch&& launch) {
    if (!counting_) return launch();
    ++launches_;
    if (!time_kernels_) return launch();
    dlprof::cuda::StepTimer& timer = timers_.emplace_back(stream_);
    hold_stream<<<1, 1, 0, stream_>>>(kHoldNanoseconds);
    timer.begin();
    const cudaError_t error = launch();
    timer.end();
    // The name dlprof::cuda::launch gives the kernel's ranges, resolved once per kernel.
    timed_kernels_.push_back(dlprof::cuda::kernel_name(kernel));
    return error;
  }

  cudaStream_t stream() const noexcept { return stream_; }
  std::int64_t launches() const noexcept { return launches_; }

  struct KernelTime {
    std::int64_t count = 0;
    double sum_ms = 0;
  };
  // GPU time of every timed launch, by kernel name; waits for the last one.
  std::map<std::string_view, KernelTime> kernel_times() {
    std::map<std::string_view, KernelTime> times;
    for (std::size_t i = 0; i < timers_.size(); ++i) {
      KernelTime& time = times[timed_kernels_[i]];
      ++time.count;
      time.sum_ms += timers_[i].elapsed_ms();
    }
    return times;
  }

 private:
  // Longer than the host takes to record an event and launch a kernel in a recorded step.
  static constexpr unsigned long long kHoldNanoseconds = 100'000;

  cudaStream_t stream_;
  bool time_kernels_;
  bool counting_ = false;
  std::int64_t launches_ = 0;
  std::vector<dlprof::cuda::StepTimer> timers_;
  std::vector<std::string_view> timed_kernels_;  // the kernel each timer timed
};

// ---------------------------------------------------------------------------------------------
// The model.

// 784 -> kHiddenUnits -> ReLU -> 10, softmax cross-entropy. Parameters (and their gradients) live
// in one array each, so one SGD kernel updates them all: W1 [784 x H], b1 [H], W2 [H x 10], b2 [10].
class Mlp {
 public:
  Mlp(int batch_size, KernelLauncher& launch)
      : batch_size_(batch_size), launch_(launch), parameters_(kParameterCount), gradients_(kParameterCount),
        hidden_(static_cast<std::size_t>(batch_size) * kHiddenUnits), grad_hidden_(hidden_.bytes() / sizeof(float)),
        logits_(static_cast<std::size_t>(batch_size) * kClasses), grad_logits_(logits_.bytes() / sizeof(float)), loss_(1) {
    Rng rng(kModelSeed);
    std::vector<float> initial(kParameterCount, 0.0f);  // biases start at 0
    const auto he_uniform = [&](std::size_t offset, std::size_t count, int inputs) {
      const float bound = std::sqrt(6.0f / static_cast<float>(inputs));
      for (std::size_t i = 0; i < count; ++i) initial[offset + i] = bound * (2.0f * rng.uniform() - 1.0f);
    };
    he_uniform(kW1, kW1Count, kPixels);
    he_uniform(kW2, kW2Count, kHiddenUnits);
    CUDA_CHECK(dlprof::cuda::memcpy(parameters_.get(), initial.data(), parameters_.bytes(), cudaMemcpyHostToDevice));
  }

  void forward(const DeviceBatch& batch) {
    DLPROF_RANGE("forward", Category::Forward);
    const cudaStream_t stream = launch_.stream();
    CUDA_CHECK(dlprof::cuda::memset_async(loss_.get(), 0, loss_.bytes(), stream));
    CUDA_CHECK(launch_(gemm_tiled<false, false>, gemm_grid(batch_size_, kHiddenUnits), kGemmBlock, batch_size_,
                       kHiddenUnits, kPixels, batch.images.get(), parameter(kW1), hidden_.get()));
    CUDA_CHECK(launch_(bias_relu_forward, blocks_for(hidden_.bytes() / sizeof(float)), kThreadsPerBlock, batch_size_,
                       kHiddenUnits, parameter(kB1), hidden_.get()));
    CUDA_CHECK(launch_(gemm_tiled<false, false>, gemm_grid(batch_size_, kClasses), kGemmBlock, batch_size_, kClasses,
                       kHiddenUnits, hidden_.get(), parameter(kW2), logits_.get()));
    // The one launch through the macro: its range is named by the expression, no lookup at all.
    CUDA_CHECK(launch_.launch_counted(softmax_cross_entropy, [&] {
      return DLPROF_CUDA_LAUNCH(softmax_cross_entropy, blocks_for(static_cast<std::size_t>(batch_size_)),
                                kThreadsPerBlock, 0, stream, batch_size_, kClasses, logits_.get(), parameter(kB2),
                                batch.labels.get(), grad_logits_.get(), loss_.get());
    }));
  }

  void backward(const DeviceBatch& batch) {
    DLPROF_RANGE("backward", Category::Backward);
    CUDA_CHECK(launch_(bias_gradient, dim3((kClasses + kReduceColumns - 1) / kReduceColumns),
                       dim3(kReduceColumns, kReduceRows), batch_size_, kClasses, grad_logits_.get(), gradient(kB2)));
    CUDA_CHECK(launch_(gemm_tiled<true, false>, gemm_grid(kHiddenUnits, kClasses), kGemmBlock, kHiddenUnits, kClasses,
                       batch_size_, hidden_.get(), grad_logits_.get(), gradient(kW2)));
    CUDA_CHECK(launch_(gemm_tiled<false, true>, gemm_grid(batch_size_, kHiddenUnits), kGemmBlock, batch_size_,
                       kHiddenUnits, kClasses, grad_logits_.get(), parameter(kW2), grad_hidden_.get()));
    CUDA_CHECK(launch_(relu_backward, blocks_for(hidden_.bytes() / sizeof(float)), kThreadsPerBlock,
                       batch_size_ * kHiddenUnits, hidden_.get(), grad_hidden_.get()));
    CUDA_CHECK(launch_(bias_gradient, dim3((kHiddenUnits + kReduceColumns - 1) / kReduceColumns),
                       dim3(kReduceColumns, kReduceRows), batch_size_, kHiddenUnits, grad_hidden_.get(), gradient(kB1)));
    CUDA_CHECK(launch_(gemm_tiled<true, false>, gemm_grid(kPixels, kHiddenUnits), kGemmBlock, kPixels, kHiddenUnits,
                       batch_size_, batch.images.get(), grad_hidden_.get(), gradient(kW1)));
  }

  void sgd_step(float learning_rate) {
    DLPROF_RANGE("optimizer", Category::Optimizer);
    CUDA_CHECK(launch_(sgd_update<float>, blocks_for(kParameterCount), kThreadsPerBlock, static_cast<int>(kParameterCount),
                       learning_rate, gradients_.get(), parameters_.get()));
  }

  const float* loss() const noexcept { return loss_.get(); }

 private:
  static constexpr std::size_t kW1Count = static_cast<std::size_t>(kPixels) * kHiddenUnits;
  static constexpr std::size_t kW2Count = static_cast<std::size_t>(kHiddenUnits) * kClasses;
  static constexpr std::size_t kW1 = 0, kB1 = kW1 + kW1Count, kW2 = kB1 + kHiddenUnits, kB2 = kW2 + kW2Count;
  static constexpr std::size_t kParameterCount = kB2 + kClasses;

  float* parameter(std::size_t offset) const noexcept { return parameters_.get() + offset; }
  float* gradient(std::size_t offset) const noexcept { return gradients_.get() + offset; }

  int batch_size_;
  KernelLauncher& launch_;
  DeviceArray<float> parameters_, gradients_;
  DeviceArray<float> hidden_, grad_hidden_;  // activations after bias+ReLU, and their gradient
  DeviceArray<float> logits_, grad_logits_;  // before the output bias (the loss kernel adds it)
  DeviceArray<float> loss_;
};

// --graph: forward, backward and the SGD step as one CUDA graph per batch slot, captured on the
// compute stream inside a recorded step, where dlprof sees each node created in the range of the
// launch that made it, and replayed from then on: the trace ties each replayed kernel to that
// launch (and, with --with-stack, to its line) rather than to cudaGraphLaunch alone.
class GraphedStep {
 public:
  GraphedStep() = default;
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;
  ~GraphedStep() {
    for (const cudaGraphExec_t exec : execs_)
      if (exec != nullptr) cudaGraphExecDestroy(exec);
  }

  bool captured() const noexcept { return execs_[0] != nullptr; }

  void capture(Mlp& model, DeviceBatch (&batches)[2], cudaStream_t stream) {
    DLPROF_RANGE("capture_graphs");
    for (int slot = 0; slot < 2; ++slot) {
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      model.forward(batches[slot]);
      model.backward(batches[slot]);
      model.sgd_step(kLearningRate);
      cudaGraph_t graph = nullptr;
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGraphInstantiateWithFlags(&execs_[slot], graph, 0));
      CUDA_CHECK(cudaGraphDestroy(graph));  // the executable graph holds clones of its nodes
    }
  }

  void replay(int slot, cudaStream_t stream) {
    DLPROF_RANGE("train_step_graph");
    CUDA_CHECK(cudaGraphLaunch(execs_[slot], stream));
  }

 private:
  cudaGraphExec_t execs_[2] = {nullptr, nullptr};
};

// ---------------------------------------------------------------------------------------------
// Command line, files.

struct Options {
  int steps = 12;
  int active = 3;
  int batch_size = 2048;
  std::string log_dir = "./log/cuda_training_loop";
  bool pinned = true;
  bool profile = true;
  int crash_at = -1;
  std::string stats_path;
  bool graph = false;
  bool with_stack = false;
  bool help = false;
};


void print_usage() {
  fmt::print(R"(Usage: cuda_training_loop [options]
Trains a small MLP with hand-written CUDA kernels on synthetic data, profiled by dlprof (CPU ranges
and GPU activity in one trace). The profiler waits 1 step, warms up 1, records --active steps.

  --steps N                 training steps, at least 2 + --active (default 12)
  --active N                steps the profiler records (default 3)
  --batch-size N            samples per batch (default 2048)
  --host-memory pageable|pinned
                            host memory the batches are copied from (default pinned)
  --log-dir DIR             where the trace is written (default ./log/cuda_training_loop)
  --profile on|off          off runs the same loop with the profiler never started, to measure its cost
  --crash-at N              step N dies of SIGSEGV inside a range, its kernels queued (with
                            DLPROF_MODE=flight-recorder, the crash file keeps the last steps)
  --stats FILE              also time every kernel of the recorded steps with CUDA events and write
                            what scripts/gpu_validate.py checks the trace against to FILE (JSON)
  --graph                   from the first recorded step on, run forward, backward and the SGD step
                            as a CUDA graph (one per batch slot) captured in that step and replayed
                            after it; not with --stats
  --with-stack              record the call stack of every range (ProfilerOptions::with_stack)
  --help                    this text
)");
}

// Accepts `--flag value` and `--flag=value`.
Options parse_options(int argc, char** argv) {
  using dlprof_examples::parse_int;
  using dlprof_examples::UsageError;
  Options options;
  bool steps_given = false;
  dlprof_examples::for_each_flag(
      argc, argv, {"--steps", "--active", "--batch-size", "--host-memory", "--log-dir", "--profile", "--crash-at", "--stats"},
      {"--graph", "--with-stack"}, options.help, [&](std::string_view flag, std::string_view value) {
        if (flag == "--graph" || flag == "--with-stack") {
          (flag == "--graph" ? options.graph : options.with_stack) = true;
          return;
        }
        if (flag == "--steps") {
          options.steps = parse_int(flag, value, 1, 1'000'000);
          steps_given = true;
        } else if (flag == "--active") options.active = parse_int(flag, value, 1, 100'000);
        else if (flag == "--batch-size") options.batch_size = parse_int(flag, value, 1, 16384);
        else if (flag == "--host-memory" && (value == "pageable" || value == "pinned")) options.pinned = value == "pinned";
        else if (flag == "--host-memory") throw UsageError(fmt::format("--host-memory expects pageable or pinned, got '{}'", value));
        else if (flag == "--profile" && (value == "on" || value == "off")) options.profile = value == "on";
        else if (flag == "--profile") throw UsageError(fmt::format("--profile expects on or off, got '{}'", value));
        else if (flag == "--crash-at") options.crash_at = parse_int(flag, value, 0, 1'000'000);
        else if (value.empty()) throw UsageError(fmt::format("{} needs a non-empty value", flag));
        else if (flag == "--log-dir") options.log_dir = std::string(value);
        else options.stats_path = std::string(value);
      });
  const int min_steps = 2 + options.active;  // wait + warmup + active: the trace is saved when the last one ends
  if (!steps_given) options.steps = std::max(options.steps, min_steps);
  if (options.steps < min_steps)
    throw UsageError(fmt::format("--steps must be at least {} (2 + --active) so that a trace is recorded", min_steps));
  if (options.graph && !options.stats_path.empty())
    throw UsageError("--graph and --stats go separately: a graph's kernels cannot be timed one by one");
  return options;
}

std::string json_string(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20) quoted += fmt::format("\\u{:04x}", static_cast<int>(c));
    else quoted += c;
  }
  return quoted + '"';
}

// What scripts/gpu_validate.py compares the trace with: the steps recorded, the kernels launched
// in them, and (timed with CUDA events) the GPU time of those kernels.
void write_stats(const std::string& path, const std::vector<std::int64_t>& recorded_steps, std::int64_t launches,
                 const std::map<std::string_view, KernelLauncher::KernelTime>& times, const Options& options, double mean_step_ms) {
  std::int64_t timed = 0;
  double timed_ms = 0;
  std::string by_kernel;
  for (const auto& [name, time] : times) {
    timed += time.count;
    timed_ms += time.sum_ms;
    by_kernel += fmt::format("{}\n      {}: {{\"count\": {}, \"sum_ms\": {:.6f}}}", by_kernel.empty() ? "" : ",",
                             json_string(name), time.count, time.sum_ms);
  }
  std::ofstream out(path);
  out << fmt::format(R"({{
  "program": "cuda_training_loop",
  "host_memory": "{}",
  "batch_size": {},
  "recorded_steps": [{}],
  "kernel_launches": {},
  "timing_helper_kernels": ["hold_stream"],
  "kernel_event_timing": {{
    "count": {},
    "sum_ms": {:.6f},
    "by_kernel": {{{}
    }}
  }},
  "mean_step_ms": {:.6f}
}}
)",
                     options.pinned ? "pinned" : "pageable", options.batch_size, fmt::join(recorded_steps, ", "), launches,
                     timed, timed_ms, by_kernel, mean_step_ms);
  if (!out.flush()) throw std::runtime_error(fmt::format("cannot write {}", path));
}

/// A fatal signal inside a range while the step's kernels are queued: a store to a page the
/// process may not touch.
[[noreturn]] void crash_inside_a_range() {
  DLPROF_RANGE("crash_site");
  void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *static_cast<volatile int*>(page) = 1;
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const dlprof_examples::UsageError& error) {
    fmt::print(stderr, "cuda_training_loop: {}\nTry 'cuda_training_loop --help'.\n", error.what());
    return 2;
  }
  if (options.help) {
    print_usage();
    return 0;
  }

  int devices = 0;
  if (const cudaError_t error = cudaGetDeviceCount(&devices); error != cudaSuccess || devices == 0) {
    if (error != cudaSuccess)
      fmt::print(stderr, "cuda_training_loop: no usable CUDA device: cudaGetDeviceCount failed: {} ({})\n",
                 cudaGetErrorString(error), cudaGetErrorName(error));
    else fmt::print(stderr, "cuda_training_loop: no CUDA device found\n");
    return 2;
  }
  cudaDeviceProp device{};
  CUDA_CHECK(cudaGetDeviceProperties(&device, 0));

  const dlprof::Schedule profile_schedule =
      dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/options.active, /*repeat=*/1);
  cudaStream_t compute_stream = nullptr, copy_stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  {
    const SyntheticDataset dataset(options.batch_size, options.pinned);
    DeviceBatch batches[2] = {DeviceBatch(options.batch_size), DeviceBatch(options.batch_size)};
    KernelLauncher launcher(compute_stream, /*time_kernels=*/!options.stats_path.empty());
    Mlp model(options.batch_size, launcher);
    dlprof::cuda::StepTimer gpu_step(compute_stream);
    float host_loss = 0;

    // Copies batch `step` of the dataset into its device slot on the copy stream, once the compute
    // stream is done with what the slot held.
    const auto start_copy = [&](int step) {
      DeviceBatch& slot = batches[step % 2];
      const int source = step % kDatasetBatches;
      CUDA_CHECK(cudaStreamWaitEvent(copy_stream, slot.consumed, 0));
      CUDA_CHECK(dlprof::cuda::memcpy_async(slot.images.get(), dataset.images(source), dataset.image_bytes(),
                                            cudaMemcpyHostToDevice, copy_stream));
      CUDA_CHECK(dlprof::cuda::memcpy_async(slot.labels.get(), dataset.labels(source), dataset.label_bytes(),
                                            cudaMemcpyHostToDevice, copy_stream));
      CUDA_CHECK(cudaEventRecord(slot.ready, copy_stream));
    };

    fmt::print("Training a {}-{}-{} MLP on {}: batch size {}, {} steps, {} host memory\n\n", kPixels, kHiddenUnits,
               kClasses, device.name, options.batch_size, options.steps, options.pinned ? "pinned" : "pageable");
    GraphedStep graphed;
    dlprof::Profiler prof(dlprof::ProfilerOptions{}
                              .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                              .with_stack(options.with_stack)
                              .schedule(profile_schedule)
                              .on_trace_ready(dlprof::tensorboard_trace_handler(options.log_dir)));
    std::vector<std::int64_t> recorded_steps;
    std::vector<double> window_step_ms;  // steps the schedule records (or would, profiler off)
    float first_loss = 0;
    start_copy(0);
    if (options.profile) prof.start();
    for (int step = 0; step < options.steps; ++step) {
      const auto step_begin = std::chrono::steady_clock::now();
      const dlprof::Action action = prof.current_action();
      const bool recorded = action == dlprof::Action::Record || action == dlprof::Action::RecordAndSave;
      if (recorded) recorded_steps.push_back(step);
      launcher.begin_step(recorded);
      DeviceBatch& batch = batches[step % 2];
      gpu_step.begin();
      {
        DLPROF_RANGE("data", Category::DataLoader);
        CUDA_CHECK(cudaStreamWaitEvent(compute_stream, batch.ready, 0));
      }
      if (options.graph && recorded && !graphed.captured()) graphed.capture(model, batches, compute_stream);
      if (graphed.captured()) {
        graphed.replay(step % 2, compute_stream);
        CUDA_CHECK(cudaEventRecord(batch.consumed, compute_stream));
      } else {
        model.forward(batch);
        model.backward(batch);
        CUDA_CHECK(cudaEventRecord(batch.consumed, compute_stream));
        model.sgd_step(kLearningRate);
      }
      gpu_step.end();
      if (step == options.crash_at) crash_inside_a_range();
      if (step + 1 < options.steps) {
        // After this step's work is queued: a pageable copy blocks the host while the GPU computes.
        DLPROF_RANGE("prefetch", Category::DataLoader);
        start_copy(step + 1);
      }
      {
        DLPROF_RANGE("loss.item()");
        CUDA_CHECK(dlprof::cuda::memcpy_async(&host_loss, model.loss(), sizeof(host_loss), cudaMemcpyDeviceToHost,
                                              compute_stream));
        CUDA_CHECK(cudaStreamSynchronize(compute_stream));
      }
      const float gpu_ms = gpu_step.elapsed_ms();  // also the "gpu step ms" counter while recording
      if (step == 0) first_loss = host_loss;
      dlprof::counter("loss", host_loss);
      const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - step_begin;
      const dlprof::Action planned = profile_schedule(step);
      if (planned == dlprof::Action::Record || planned == dlprof::Action::RecordAndSave)
        window_step_ms.push_back(elapsed.count());
      fmt::print("step {:3}  loss {:.4f}  {:7.2f} ms  (GPU {:6.2f} ms)  [{}]\n", step, host_loss, elapsed.count(), gpu_ms,
                 dlprof::to_string(action));
      if (options.profile) prof.step();
    }
    prof.stop();

    // The first recorded step pays one-time costs (kernel names are resolved there): left out
    // when there are others.
    if (window_step_ms.size() > 1) window_step_ms.erase(window_step_ms.begin());
    double mean_step_ms = 0;
    for (const double ms : window_step_ms) mean_step_ms += ms / static_cast<double>(window_step_ms.size());
    fmt::print("\nLoss: {:.4f} at step 0 -> {:.4f} at step {}\n", first_loss, host_loss, options.steps - 1);
    fmt::print("Mean step wall time: {:.3f} ms over {} step(s) the profiler {} (the first left out)\n", mean_step_ms,
               window_step_ms.size(), options.profile ? "recorded" : "would record");

    if (!options.stats_path.empty()) {
      write_stats(options.stats_path, recorded_steps, launcher.launches(), launcher.kernel_times(), options, mean_step_ms);
      fmt::print("Stats: {}\n", options.stats_path);
    }
    if (options.profile) {
      fmt::print("\n{}\n", prof.key_averages().sort_by(dlprof::SortBy::SelfTime).table(20));
      const std::optional<std::filesystem::path> trace = dlprof_examples::newest_trace_file(options.log_dir);
      if (!trace || !prof.errors().empty()) {  // dlprof has already printed why on stderr
        fmt::print(stderr, "cuda_training_loop: no trace was written to {}\n", options.log_dir);
        return 1;
      }
      fmt::print("Trace: {}\n(open it in https://ui.perfetto.dev or with tensorboard --logdir {})\n", trace->string(),
                 options.log_dir);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(copy_stream));
  CUDA_CHECK(cudaStreamDestroy(compute_stream));
  return 0;
}
