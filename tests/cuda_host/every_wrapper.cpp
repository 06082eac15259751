// <dlprof/cuda.hpp> in a translation unit of the host compiler, not nvcc, linked with
// CUDA::cudart: every wrapper is instantiated. Built with and without DLPROF_DISABLE (under which
// DLPROF_CUDA_LAUNCH must still launch); built, never run.
#include <dlprof/cuda.hpp>

namespace {

// Stand-ins for kernels: only the host compiler sees this file.
void axpy(float, const float*, float*, int) {}
void no_parameters() {}

}  // namespace

int main() {
  float host[4] = {};
  float* device = nullptr;
  cudaError_t error = dlprof::cuda::launch(axpy, dim3(1), dim3(4), 0, nullptr, 2.0, host, device, 4);
  error = DLPROF_CUDA_LAUNCH(axpy, 1, 4, 0, nullptr, 2.0f, host, device, 4);
  error = dlprof::cuda::launch(no_parameters, 1, 1, 0, nullptr);
  error = DLPROF_CUDA_LAUNCH(no_parameters, 1, 1, 0, nullptr);
  error = dlprof::cuda::memcpy(device, host, sizeof(host), cudaMemcpyHostToDevice);
  error = dlprof::cuda::memcpy_async(host, device, sizeof(host), cudaMemcpyDeviceToHost, nullptr);
  error = dlprof::cuda::memset(device, 0, sizeof(host));
  error = dlprof::cuda::memset_async(device, 0, sizeof(host), nullptr);
  dlprof::cuda::StepTimer timer;
  timer.begin();
  timer.end();
  const std::optional<float> ready_ms = timer.last_ms();
  const float ms = timer.elapsed_ms();
  return error == cudaSuccess && ready_ms && ms >= 0 && !dlprof::cuda::kernel_name(axpy).empty() ? 0 : 1;
}
