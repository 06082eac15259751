// Kernels tied to their step, layer and op, forward and backward, on a hand-built trace shaped like
// torch.profiler's.
#include <dlprof/analysis/kernel_attribution.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::Category;
using dlprof::analysis::Direction;
using ::testing::HasSubstr;

constexpr std::uint64_t kLinearFlops = 2ull * 32 * 784 * 128;  // 6422528

// Thread 0 (os tid 100) runs the forward of a Linear and a ReLU layer in ProfilerStep#3; thread
// 1 (autograd's) runs AddmmBackward0, paired with aten::linear by sequence number 7.
dlprof::Trace layered_trace() {
  return dlprof_test::AnalysisTraceBuilder()
      .step(3, 0, 10'000)
      .range("nn.Module: Linear_fc1", 100, 2'000, Category::Forward)
      .op("aten::linear", 200, 1'900, 1)
      .sequence(7)
      .inputs("[[32, 784], [128, 784], [128]]", "[\"float\", \"float\", \"float\"]", kLinearFlops, 1'000'000)
      .op("aten::t", 210, 250, 2)
      .op("aten::addmm", 300, 1'800, 3)
      .inputs("[[128], [32, 784], [784, 128]]", "[\"float\", \"float\", \"float\"]", kLinearFlops, 600'000)
      .call("cudaLaunchKernel", 400, 450, 11, 3)
      .kernel("ampere_sgemm_128x64_tn", 500, 1'500, 11, 3)
      .launch(24, 128, 0.2f, 12)
      .call("cudaLaunchKernel", 460, 480, 12, 3)
      .kernel("void splitKreduce_kernel<32, 16, int, float, float>()", 1'500, 1'700, 12, 3)
      .range("nn.Module: ReLU_act", 2'100, 2'500, Category::Forward)
      .op("aten::relu", 2'150, 2'450, 4)
      .call("cudaLaunchKernel", 2'200, 2'250, 13, 4)
      .kernel("void at::native::vectorized_elementwise_kernel<4, relu>()", 2'600, 2'700, 13, 4)
      .call("cudaLaunchKernel", 2'300, 2'320, 16)  // no External id: tied through the call
      .kernel("void at::native::vectorized_elementwise_kernel<4, FillFunctor>()", 2'750, 2'760, 16)
      .call("cudaMemcpyAsync", 2'800, 2'900, 14)
      .memcpy(1, 3'000, 3'100, 14, 4096)
      .op("autograd::engine::evaluate_function: AddmmBackward0", 5'000, 7'000, 20, Category::Backward, 1)
      .op("AddmmBackward0", 5'010, 6'990, 21, Category::Backward, 1)
      .sequence(7, 100)
      .op("aten::mm", 5'100, 6'000, 22, Category::Backward, 1)
      .inputs("[[32, 128], [128, 784]]", "[\"float\", \"float\"]", 1'000, 500)
      .call("cudaLaunchKernel", 5'200, 5'300, 15, 22, 1)
      .kernel("volta_h884gemm_64x64_ldg8_nn", 5'400, 5'900, 15, 22)
      .trace();
}

TEST(KernelAttributionTest, TiesForwardKernelsToTheirStepLayerAndOp) {
  const dlprof::Trace trace = layered_trace();
  const auto attribution = dlprof::analysis::kernel_attribution(trace);
  ASSERT_EQ(attribution.kernels.size(), 6u);

  const auto& gemm = attribution.kernels[0];
  EXPECT_EQ(gemm.name, "ampere_sgemm_128x64_tn");
  EXPECT_EQ(gemm.step, 3);
  EXPECT_EQ(gemm.layer, "nn.Module: Linear_fc1");
  EXPECT_EQ(gemm.op, "aten::addmm");
  EXPECT_EQ(gemm.direction, Direction::Forward);
  EXPECT_EQ(gemm.input_dims, "[[128], [32, 784], [784, 128]]");
  EXPECT_EQ(gemm.input_types, "[\"float\", \"float\", \"float\"]");
  EXPECT_EQ(gemm.duration_ns, 1'000);
  EXPECT_FALSE(gemm.tensor_cores);
  EXPECT_EQ(gemm.work->kernel.grid[0], 24u);
  EXPECT_EQ(gemm.work->kernel.block[0], 128u);
  EXPECT_EQ(gemm.work->stream, 7);
  // addmm's FLOPs and bytes, shared with its split-K reduction by duration (1000 : 200).
  EXPECT_EQ(gemm.flops, 5'352'107u);
  EXPECT_EQ(gemm.bytes, 500'000u);
  const auto& reduction = attribution.kernels[1];
  EXPECT_EQ(reduction.flops, kLinearFlops - 5'352'107u);
  EXPECT_EQ(reduction.bytes, 100'000u);
  EXPECT_DOUBLE_EQ(gemm.tflops_per_second(), 5'352'107.0 / 1'000 / 1e3);

  const auto& relu = attribution.kernels[2];
  EXPECT_EQ(relu.layer, "nn.Module: ReLU_act");
  EXPECT_EQ(relu.op, "aten::relu");
  EXPECT_EQ(relu.flops, std::nullopt);  // no shapes: unknown, not 0
  EXPECT_EQ(relu.input_dims, "");

  const auto& fill = attribution.kernels[3];
  EXPECT_EQ(fill.op, "aten::relu");  // no External id: the op around its launch call
  EXPECT_EQ(fill.layer, "nn.Module: ReLU_act");

  const auto& copy = attribution.kernels[4];
  EXPECT_EQ(copy.name, "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(copy.step, 3);
  EXPECT_EQ(copy.op, "");
  EXPECT_EQ(copy.layer, "");
}

TEST(KernelAttributionTest, BackwardKernelsTakeTheLayerOfTheirForwardOp) {
  const dlprof::Trace trace = layered_trace();
  const auto attribution = dlprof::analysis::kernel_attribution(trace);
  const auto& backward = attribution.kernels.at(5);
  EXPECT_EQ(backward.name, "volta_h884gemm_64x64_ldg8_nn");
  EXPECT_EQ(backward.step, 3);  // launched on autograd's thread, inside the main thread's step
  EXPECT_EQ(backward.op, "aten::mm");
  EXPECT_EQ(backward.direction, Direction::Backward);
  EXPECT_EQ(backward.layer, "nn.Module: Linear_fc1");
  EXPECT_TRUE(backward.tensor_cores);
  EXPECT_EQ(backward.flops, 1'000u);
  EXPECT_DOUBLE_EQ(backward.tflops_per_second(), 1'000.0 / 500 / 1e3);
}

TEST(KernelAttributionTest, BackwardKernelsFindTheirForwardOpAsTorchNumbersThreads) {
  // torch.profiler writes 0 as a forward op's `Fwd thread id`, and its RecordFunction thread id
  // (1, not the OS's) as the backward op's.
  dlprof::Trace trace = layered_trace();
  for (dlprof::TraceEvent& event : trace.events)
    if (event.sequence_number == 7) event.forward_thread_id = event.category == Category::Backward ? 1 : 0;
  EXPECT_EQ(dlprof::analysis::kernel_attribution(trace).kernels.at(5).layer, "nn.Module: Linear_fc1");
}

TEST(KernelAttributionTest, OpsWithShapesButNoFlopsFromTheTraceAreEstimated) {
  // torch.profiler's with_flops counts no softmax; its shapes give 5 FLOPs per element and the
  // bytes of a read and a write (flops.hpp).
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .op("aten::_softmax", 0, 100, 1)
                                  .inputs("[[64, 128], [], []]", R"(["float", "Scalar", "Scalar"])")
                                  .kernel("softmax_warp_forward", 10, 60, 5, 1)
                                  .trace();
  const auto attribution = dlprof::analysis::kernel_attribution(trace);
  ASSERT_EQ(attribution.kernels.size(), 1u);
  EXPECT_EQ(attribution.kernels[0].flops, 5u * 64 * 128);
  EXPECT_EQ(attribution.kernels[0].bytes, 2u * 4 * 64 * 128);
}

TEST(KernelAttributionTest, TableHasPyProfsColumns) {
  const dlprof::Trace trace = layered_trace();
  const std::string table = dlprof::analysis::kernel_attribution(trace).table();
  for (const char* column : {"Step", "Layer", "Op", "Dir", "Kernel", "Time", "TC", "Grid", "Block", "Stream", "FLOPs",
                             "TFLOP/s", "Input dims / types"})
    EXPECT_THAT(table, HasSubstr(column));
  EXPECT_THAT(table, HasSubstr("24x1x1"));
  EXPECT_THAT(table, HasSubstr("bwd"));
  EXPECT_THAT(dlprof::analysis::kernel_attribution(trace).table(2), ::testing::Not(HasSubstr("relu")));
}

TEST(KernelAttributionTest, WorkWithNothingAroundItStillGetsARow) {
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder().kernel("lonely", 0, 10, 1).trace();
  const auto attribution = dlprof::analysis::kernel_attribution(trace);
  ASSERT_EQ(attribution.kernels.size(), 1u);
  EXPECT_EQ(attribution.kernels[0].step, -1);
  EXPECT_EQ(attribution.kernels[0].op, "");
  EXPECT_EQ(attribution.kernels[0].direction, Direction::Forward);
}

}  // namespace
