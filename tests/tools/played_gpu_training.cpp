// Writes the trace of a training loop whose GPU is played (tests/played_cuda.hpp): the real
// Profiler, CUPTI backend, collector and writer, fed the activity records CUPTI would produce
// for a step of H2D copies, forward/backward GEMMs, an all-reduce and an optimizer update, and the
// clocks and power a played NVML reads. The trace is then opened by HTA and TensorBoard's plugin
// (check_trace_tools.py --gpu), which is how a trace's GPU side is checked without a GPU.
//
// Usage: played_gpu_training TRACE_DIR
#include <chrono>
#include <cstdio>
#include <string>

#include "../played_cuda.hpp"

namespace {

/// CPU work between launches, so the played GPU has a CPU timeline to line up with.
void busy_wait(std::chrono::microseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

constexpr std::uint32_t kComputeStream = 7;
constexpr std::uint32_t kCopyStream = 13;
constexpr std::uint32_t kCommunicationStream = 20;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TRACE_DIR\n", argv[0]);
    return 2;
  }
  using namespace dlprof_test;
  CuptiLibrary cupti = played_cupti();
  if (cupti.get_next_record == nullptr) {
    std::fprintf(stderr, "played_gpu_training: libcupti could not be loaded\n");
    return 1;
  }
  static CuptiBackend backend(played_driver(), std::move(cupti), played_nvml());
  dlprof::detail::g_gpu_backend.store(+[]() -> dlprof::detail::GpuBackend& { return backend; });

  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/4, /*repeat=*/1))
                                .on_trace_ready(dlprof::tensorboard_trace_handler(argv[1], "played_gpu")));
  profiler.start();
  for (int step = 0; step < 7; ++step) {
    {
      DLPROF_RANGE("enumerate(DataLoader)#PlayedLoader.__next__", dlprof::Category::DataLoader);
      busy_wait(std::chrono::microseconds(300));
      copy_to_device(4 << 20, /*pinned=*/false, kCopyStream, 350'000);
    }
    {
      DLPROF_RANGE("forward", dlprof::Category::Forward);
      fill_on_device(1 << 20, kComputeStream, 5'000);
      for (int layer = 0; layer < 4; ++layer) {
        launch_kernel("_Z10gemm_tiledPKfS0_Pfiii", kComputeStream, 120'000);
        launch_kernel("_Z9bias_reluPfPKfi", kComputeStream, 15'000);
        busy_wait(std::chrono::microseconds(20));
      }
    }
    {
      DLPROF_RANGE("backward", dlprof::Category::Backward);
      for (int layer = 0; layer < 4; ++layer) {
        launch_kernel("_Z10gemm_tiledPKfS0_Pfiii", kComputeStream, 240'000);
        busy_wait(std::chrono::microseconds(20));
      }
      launch_kernel("ncclKernel_AllReduce_RING_LL_Sum_float", kCommunicationStream, 200'000);
    }
    {
      DLPROF_RANGE("Optimizer.step#SGD.step", dlprof::Category::Optimizer);
      launch_kernel("_Z10sgd_updatePfPKffi", kComputeStream, 30'000);
      synchronize_stream(kComputeStream);
    }
    profiler.step();
  }
  profiler.stop();
  for (const std::string& error : profiler.errors()) std::fprintf(stderr, "%s\n", error.c_str());
  return profiler.errors().empty() ? 0 : 1;
}
