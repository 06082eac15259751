// Tests of cuda.hpp that need no GPU: how kernels are named, how launch arguments are converted
// and passed, the ranges the wrappers record, and how StepTimer reports a missing device. On a
// machine without a GPU every CUDA call fails, and the wrappers must still record their ranges
// and hand the error back. Built by the host compiler, so no kernel can be defined here: launches
// go to host functions, which the runtime rejects (and cannot name) with or without a GPU.
#include <dlprof/cuda.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using dlprof::EventKind;
using dlprof::Trace;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void not_a_kernel(float*, int) {}
void no_parameters() {}

// Opens a window with a default Profiler, runs `body` on this thread and returns the names of the
// ranges it recorded, in order.
template <class Body>
std::vector<std::string> recorded_ranges(Body&& body) {
  dlprof::Profiler profiler;
  profiler.start();
  body();
  profiler.stop();
  const std::shared_ptr<const Trace> trace = profiler.last_trace();
  std::vector<std::string> names;
  for (const dlprof::TraceEvent& event : trace->events)
    if (event.kind == EventKind::Range) names.emplace_back(trace->name_of(event));
  return names;
}

bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(CudaKernelDisplayName, DropsReturnTypeAndParametersAndKeepsTemplateArguments) {
  using dlprof::cuda::detail::kernel_range_name;
  // Symbols as nvcc 13.0 mangles them.
  EXPECT_EQ(kernel_range_name("_Z4gemmPKfS0_Pfiii"), "gemm");
  EXPECT_EQ(kernel_range_name("_Z10sgd_updateIfEvPT_PKS0_S0_i"), "sgd_update<float>");
  EXPECT_EQ(kernel_range_name("_Z10gemm_tiledILb1ELb0EEvPKfS1_Pfiii"), "gemm_tiled<true, false>");
  EXPECT_EQ(kernel_range_name("_ZN5model9bias_reluEPfPKfi"), "model::bias_relu");
  EXPECT_EQ(kernel_range_name("_Z5applyIXadL_Z3deviEEEvi"), "apply<&(dev(int))>");  // parentheses in a template argument
}

TEST(CudaKernelDisplayName, DropsAnonymousNamespaces) {
  using dlprof::cuda::detail::kernel_range_name;
  EXPECT_EQ(kernel_range_name("_ZN36_GLOBAL__N__8bde9d08_4_m_cu_663ebd9f12relu_forwardEPfi"), "relu_forward");
}

TEST(CudaKernelDisplayName, KeepsNamesThatDoNotDemangle) {
  using dlprof::cuda::detail::kernel_range_name;
  EXPECT_EQ(kernel_range_name("c_kernel"), "c_kernel");  // extern "C"
  EXPECT_EQ(kernel_range_name("gemm(float const*, int)"), "gemm");  // already demangled
  EXPECT_EQ(kernel_range_name(""), "");
}

TEST(CudaKernelArguments, ConvertsEachArgumentToItsParameterTypeAndPointsAtIt) {
  dlprof::cuda::detail::KernelArguments<float, const int*, long> arguments(3, nullptr, 7);
  void** pointers = arguments.pointers();
  EXPECT_EQ(*static_cast<float*>(pointers[0]), 3.0f);
  EXPECT_EQ(*static_cast<const int**>(pointers[1]), nullptr);
  EXPECT_EQ(*static_cast<long*>(pointers[2]), 7L);
}

TEST(CudaKernelArguments, AcceptsOnlyOneImplicitlyConvertibleArgumentPerParameter) {
  using dlprof::cuda::detail::ArgumentsConvert;
  using dlprof::cuda::detail::TypeList;
  static_assert(ArgumentsConvert<TypeList<>, TypeList<>>::value);
  static_assert(ArgumentsConvert<TypeList<float, const float*>, TypeList<int, float*>>::value);
  static_assert(!ArgumentsConvert<TypeList<float>, TypeList<>>::value);
  static_assert(!ArgumentsConvert<TypeList<float>, TypeList<float, float>>::value);
  static_assert(!ArgumentsConvert<TypeList<float*>, TypeList<const float*>>::value);
  static_assert(!ArgumentsConvert<TypeList<std::unique_ptr<int>>, TypeList<int*>>::value);  // explicit only
}

TEST(CudaMemcpySite, NamesTheDirection) {
  using dlprof::cuda::detail::memcpy_site;
  EXPECT_STREQ(memcpy_site(cudaMemcpyHostToHost, false).name, "cudaMemcpy HtoH");
  EXPECT_STREQ(memcpy_site(cudaMemcpyHostToDevice, false).name, "cudaMemcpy HtoD");
  EXPECT_STREQ(memcpy_site(cudaMemcpyDeviceToHost, false).name, "cudaMemcpy DtoH");
  EXPECT_STREQ(memcpy_site(cudaMemcpyDeviceToDevice, false).name, "cudaMemcpy DtoD");
  EXPECT_STREQ(memcpy_site(cudaMemcpyDefault, false).name, "cudaMemcpy Default");
  EXPECT_STREQ(memcpy_site(static_cast<cudaMemcpyKind>(42), false).name, "cudaMemcpy");
  EXPECT_STREQ(memcpy_site(cudaMemcpyHostToDevice, true).name, "cudaMemcpyAsync HtoD");
  EXPECT_STREQ(memcpy_site(cudaMemcpyDeviceToHost, true).name, "cudaMemcpyAsync DtoH");
  EXPECT_STREQ(memcpy_site(cudaMemcpyDefault, true).name, "cudaMemcpyAsync Default");
  EXPECT_STREQ(memcpy_site(static_cast<cudaMemcpyKind>(-1), true).name, "cudaMemcpyAsync");
}

TEST(CudaLaunch, RecordsARangeAroundTheLaunchAndReturnsItsError) {
  cudaError_t error = cudaSuccess;
  const auto ranges = recorded_ranges([&] {
    error = dlprof::cuda::launch(not_a_kernel, dim3(1), dim3(32), 0, nullptr, nullptr, 4);
  });
  EXPECT_NE(error, cudaSuccess);
  // The runtime cannot name a host function, with or without a GPU: the fallback name.
  EXPECT_THAT(ranges, ElementsAre("cudaLaunchKernel"));
  EXPECT_EQ(dlprof::cuda::kernel_name(not_a_kernel), "cudaLaunchKernel");
}

TEST(CudaLaunch, ZeroParameterKernels) {
  cudaError_t error = cudaSuccess, macro_error = cudaSuccess;
  const auto ranges = recorded_ranges([&] {
    error = dlprof::cuda::launch(no_parameters, 1, 1, 0, nullptr);
    macro_error = DLPROF_CUDA_LAUNCH(no_parameters, 1, 1, 0, nullptr);
  });
  EXPECT_NE(error, cudaSuccess);
  EXPECT_NE(macro_error, cudaSuccess);
  EXPECT_THAT(ranges, ElementsAre("cudaLaunchKernel", "no_parameters"));
}

TEST(CudaLaunch, MacroNamesTheRangeAfterTheKernelExpression) {
  cudaError_t error = cudaSuccess;
  const auto ranges = recorded_ranges([&] {
    for (int i = 0; i < 2; ++i) error = DLPROF_CUDA_LAUNCH(not_a_kernel, dim3(2), dim3(64), 0, nullptr, nullptr, i);
  });
  EXPECT_NE(error, cudaSuccess);
  EXPECT_THAT(ranges, ElementsAre("not_a_kernel", "not_a_kernel"));
}

TEST(CudaLaunch, LaunchesAndReturnsTheErrorWhileNoWindowIsOpen) {
  EXPECT_NE(dlprof::cuda::launch(not_a_kernel, 1, 1, 0, nullptr, nullptr, 0), cudaSuccess);
  EXPECT_NE(DLPROF_CUDA_LAUNCH(not_a_kernel, 1, 1, 0, nullptr, nullptr, 0), cudaSuccess);
}

TEST(CudaCopiesAndFills, RecordARangeNamedAfterTheCallAndReturnItsError) {
  float host[4] = {};
  cudaError_t errors[5] = {};
  const auto ranges = recorded_ranges([&] {
    errors[0] = dlprof::cuda::memcpy(nullptr, host, sizeof(host), cudaMemcpyHostToDevice);
    errors[1] = dlprof::cuda::memcpy_async(host, nullptr, sizeof(host), cudaMemcpyDeviceToHost, nullptr);
    errors[2] = dlprof::cuda::memcpy_async(host, nullptr, sizeof(host), cudaMemcpyDefault);
    errors[3] = dlprof::cuda::memset(nullptr, 0, 16);
    errors[4] = dlprof::cuda::memset_async(nullptr, 0, 16, nullptr);
  });
  for (const cudaError_t error : errors) EXPECT_NE(error, cudaSuccess) << cudaGetErrorName(error);
  EXPECT_THAT(ranges, ElementsAre("cudaMemcpy HtoD", "cudaMemcpyAsync DtoH", "cudaMemcpyAsync Default", "cudaMemset",
                                  "cudaMemsetAsync"));
}

TEST(CudaStepTimer, WithoutADeviceConstructionThrowsNamingTheCudaError) {
  int count = 0;
  const cudaError_t device_error = cudaGetDeviceCount(&count);
  if (device_error == cudaSuccess && count > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    const dlprof::cuda::StepTimer timer;
    FAIL() << "StepTimer was constructed without a device";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("cudaEventCreate failed"));
    // The runtime fails to start for the same reason whichever call starts it.
    if (device_error != cudaSuccess) {
      EXPECT_THAT(error.what(), HasSubstr(cudaGetErrorName(device_error)));
    }
  }
}

TEST(CudaStepTimer, OnADeviceMeasuresAndRejectsCallsOutOfOrder) {
  if (!has_device()) GTEST_SKIP() << "needs a CUDA device";
  dlprof::cuda::StepTimer timer;
  EXPECT_THROW(timer.end(), std::logic_error);
  EXPECT_THROW(timer.elapsed_ms(), std::logic_error);
  timer.begin();
  EXPECT_THROW(timer.last_ms(), std::logic_error);
  timer.end();
  EXPECT_GE(timer.elapsed_ms(), 0.0f);
  ASSERT_TRUE(timer.last_ms().has_value());
  dlprof::cuda::StepTimer moved = std::move(timer);
  moved.begin();
  moved.end();
  EXPECT_GE(moved.elapsed_ms(), 0.0f);
}

}  // namespace
