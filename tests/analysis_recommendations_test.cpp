// Each recommendation rule on a hand-built trace that triggers it and on one just short of it; the
// time each finding saves per step, by hand; the floors under which none fires; the ranking; one
// finding for every rank it holds on.
#include <dlprof/analysis/recommendations.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::Recommendation;
using dlprof_test::AnalysisTraceBuilder;
using dlprof::analysis::Severity;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<std::string> ids(const std::vector<Recommendation>& found) {
  std::vector<std::string> out;
  for (const Recommendation& r : found) out.push_back(r.id);
  return out;
}

const Recommendation* find(const std::vector<Recommendation>& found, const std::string& id) {
  for (const Recommendation& r : found)
    if (r.id == id) return &r;
  return nullptr;
}

// ---- DataLoader --------------------------------------------------------------------------------

dlprof::Trace loading_for(std::int64_t loader_ns) {
  return AnalysisTraceBuilder()
      .step(1, 0, 1'000'000)
      .range("enumerate(DataLoader)#MnistLoader.__next__", 0, loader_ns, dlprof::Category::DataLoader)
      .op("aten::mm", loader_ns, 900'000)
      .step(2, 1'000'000, 2'000'000)
      .range("enumerate(DataLoader)#MnistLoader.__next__", 1'000'000, 1'000'000 + loader_ns, dlprof::Category::DataLoader)
      .trace();
}

TEST(RecommendationsTest, DataLoaderAboveFivePercentOfTheStepNamesTheShareAndTheWorkers) {
  const auto found = dlprof::analysis::recommendations(loading_for(100'000));  // 10 % of each 1 ms step
  const Recommendation* loader = find(found, "dataloader_bound");
  ASSERT_NE(loader, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(loader->text, HasSubstr("10.0% of the step is DataLoader"));
  EXPECT_THAT(loader->text, HasSubstr("workers"));
  EXPECT_THAT(loader->evidence, HasSubstr("DataLoader 0.100 ms of the average step 1.000 ms (10.0%), over 2 steps"));
}

TEST(RecommendationsTest, DataLoaderAtFivePercentIsNotReported) {
  EXPECT_EQ(find(dlprof::analysis::recommendations(loading_for(50'000)), "dataloader_bound"), nullptr);
}

// ---- host-to-device copies ---------------------------------------------------------------------

/// One 10 ms step: a 0.6 ms copy through `call` (0.8 ms on the CPU), and a pinned asynchronous one.
dlprof::Trace copy_trace(std::string_view call, std::uint8_t source_kind) {
  return AnalysisTraceBuilder()
      .step(1, 0, 10'000'000)
      .call(call, 100'000, 900'000, 1)
      .memcpy(/*HtoD*/ 1, 200'000, 800'000, 1, 4 << 20, 0, 7, source_kind)
      .call("cudaMemcpyAsync", 1'000'000, 1'100'000, 2)
      .memcpy(/*HtoD*/ 1, 1'200'000, 2'000'000, 2, 4 << 20, 0, 7, /*Pinned*/ 2)
      .trace();
}

TEST(RecommendationsTest, CopiesFromPageableMemoryAskForPinnedBuffers) {
  const auto found = dlprof::analysis::recommendations(copy_trace("cudaMemcpyAsync", /*Pageable*/ 1));
  const Recommendation* pageable = find(found, "pageable_copies");
  ASSERT_NE(pageable, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(pageable->text, HasSubstr("50% of host-to-device bytes come from pageable memory"));
  EXPECT_THAT(pageable->text, HasSubstr("pin"));
  EXPECT_THAT(pageable->evidence, HasSubstr("1 of 2 host-to-device copies from pageable memory, 4.00 MiB of 8.00 MiB"));
  // A copy from pageable memory returns only once staged: it is synchronous too.
  const Recommendation* synchronous = find(found, "synchronous_copies");
  ASSERT_NE(synchronous, nullptr);
  EXPECT_THAT(synchronous->evidence, HasSubstr("1 of 2 host-to-device copies synchronous"));
  EXPECT_THAT(synchronous->evidence, HasSubstr("0.800 ms spent in their calls on the CPU (8.0% of the steps' span)"));
}

TEST(RecommendationsTest, AFewSmallPageableCopiesAreNotReported) {
  // 16 KiB of pageable copies beside 4 MiB pinned (a reference trace's pattern), and a 0.5 µs
  // blocking call in a 1 ms step: under 10 % of the bytes, under 1 % of the span.
  const dlprof::Trace trace = AnalysisTraceBuilder()
                                  .step(1, 0, 1'000'000)
                                  .call("cudaMemcpyAsync", 1'000, 1'500, 1)
                                  .memcpy(/*HtoD*/ 1, 2'000, 3'000, 1, 16 << 10, 0, 7, /*Pageable*/ 1)
                                  .call("cudaMemcpyAsync", 10'000, 11'000, 2)
                                  .memcpy(/*HtoD*/ 1, 12'000, 20'000, 2, 4 << 20, 0, 7, /*Pinned*/ 2)
                                  .trace();
  const auto found = dlprof::analysis::recommendations(trace);
  EXPECT_EQ(find(found, "pageable_copies"), nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_EQ(find(found, "synchronous_copies"), nullptr);
}

TEST(RecommendationsTest, BlockingCopyCallsAskForNonBlockingCopiesFromPinnedMemory) {
  const auto found = dlprof::analysis::recommendations(copy_trace("cudaMemcpy", /*Pinned*/ 2));
  EXPECT_EQ(find(found, "pageable_copies"), nullptr);
  const Recommendation* synchronous = find(found, "synchronous_copies");
  ASSERT_NE(synchronous, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(synchronous->text, HasSubstr("non_blocking"));
}

TEST(RecommendationsTest, AsynchronousCopiesFromPinnedMemoryAreFine) {
  const auto found = dlprof::analysis::recommendations(copy_trace("cudaMemcpyAsync", /*Pinned*/ 2));
  EXPECT_EQ(find(found, "pageable_copies"), nullptr);
  EXPECT_EQ(find(found, "synchronous_copies"), nullptr);
}

// ---- layout transposes ---------------------------------------------------------------------------

dlprof::Trace transposes_for(std::int64_t transpose_ns) {
  return AnalysisTraceBuilder()
      .step(1, 0, 1'000'000)
      .call("cudaLaunchKernel", 0, 1'000, 1)
      .call("cudaLaunchKernel", 1'000, 2'000, 2)
      .kernel("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>()", 10'000,
              10'000 + transpose_ns, 1)
      .kernel("volta_scudnn_128x64_relu_interior_nn_v1", 200'000, 200'000 + 1'000'000 - transpose_ns, 2)
      .trace();
}

TEST(RecommendationsTest, TransposeKernelsAskForChannelsLast) {
  const auto found = dlprof::analysis::recommendations(transposes_for(100'000));
  const Recommendation* transposes = find(found, "layout_transposes");
  ASSERT_NE(transposes, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(transposes->text, HasSubstr("10.0% of kernel time converts tensors between NCHW and NHWC"));
  EXPECT_THAT(transposes->text, HasSubstr("channels_last"));
  EXPECT_THAT(transposes->evidence, HasSubstr("1 transpose kernels"));
}

TEST(RecommendationsTest, ATransposeUnderTwoPercentOfKernelTimeIsNotReported) {
  EXPECT_EQ(find(dlprof::analysis::recommendations(transposes_for(10'000)), "layout_transposes"), nullptr);
}

// ---- Tensor Cores ----------------------------------------------------------------------------------

dlprof::Trace gemm_trace(std::string_view kernel, int compute_major, std::string_view dims,
                         std::string_view types = R"(["float", "float"])") {
  return AnalysisTraceBuilder()
      .device(0, "Tesla V100-SXM2-32GB", compute_major)
      .step(1, 0, 1'000'000)
      .op("aten::mm", 1'000, 50'000, 11)
      .inputs(dims, types)
      .call("cudaLaunchKernel", 2'000, 6'000, 1, 11)
      .kernel(kernel, 10'000, 400'000, 1, 11)
      .trace();
}

TEST(RecommendationsTest, Float32GemmsWithoutTensorCoresOnVoltaAskForMixedPrecision) {
  const auto found = dlprof::analysis::recommendations(gemm_trace("volta_sgemm_128x64_nn", 7, "[[32, 64], [64, 128]]"));
  const Recommendation* amp = find(found, "fp32_without_tensor_cores");
  ASSERT_NE(amp, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(amp->text, HasSubstr("compute capability 7.x"));
  EXPECT_THAT(amp->text, HasSubstr("mixed precision"));
  EXPECT_THAT(amp->evidence, HasSubstr("0.390 ms of float32 GEMM/conv kernels (100.0% of kernel time), 0 Tensor Core kernels"));
  EXPECT_EQ(find(found, "gemm_dims_not_multiple_of_8"), nullptr) << "32, 128 and 64 are multiples of 8";
}

TEST(RecommendationsTest, GemmsOfUnknownDtypeWithoutTensorCoresAskForMixedPrecision) {
  // A trace without record_shapes, as torch.profiler's reference V100 ResNet trace.
  const dlprof::Trace trace = AnalysisTraceBuilder()
                                  .device(0, "Tesla V100-SXM2-32GB", 7)
                                  .step(1, 0, 1'000'000)
                                  .op("aten::cudnn_convolution", 1'000, 50'000, 11)
                                  .call("cudaLaunchKernel", 2'000, 6'000, 1, 11)
                                  .kernel("volta_scudnn_128x64_relu_interior_nn_v1", 10'000, 400'000, 1, 11)
                                  .trace();
  EXPECT_NE(find(dlprof::analysis::recommendations(trace), "fp32_without_tensor_cores"), nullptr);
}

TEST(RecommendationsTest, TensorCoreKernelsHalfPrecisionOrAnOlderGpuNeedNoMixedPrecision) {
  EXPECT_EQ(find(dlprof::analysis::recommendations(gemm_trace("volta_h884gemm_64x64_ldg8_nn", 7, "[[32, 64], [64, 128]]")),
                 "fp32_without_tensor_cores"),
            nullptr);
  EXPECT_EQ(find(dlprof::analysis::recommendations(gemm_trace("maxwell_sgemm_128x64_nn", 6, "[[32, 64], [64, 128]]")),
                 "fp32_without_tensor_cores"),
            nullptr);
  EXPECT_EQ(find(dlprof::analysis::recommendations(gemm_trace("volta_sgemm_128x64_nn", 7, "[[32, 64], [64, 128]]",
                                                              R"(["c10::Half", "c10::Half"])")),
                 "fp32_without_tensor_cores"),
            nullptr);
}

// An MI300X runs hipBLASLt's matrix-core GEMMs (Tensile's "_MI32x32x2x1_" tile): no advice. Its
// float32 GEMMs on Tensile's "_MAC_" kernels get the advice in AMD's words: matrix cores.
dlprof::Trace amd_gemm_trace(std::string_view kernel, std::string_view device = "AMD Instinct MI300X") {
  return AnalysisTraceBuilder()
      .device(0, device, 9)
      .step(1, 0, 1'000'000)
      .op("aten::mm", 1'000, 50'000, 11)
      .inputs("[[32, 64], [64, 128]]", R"(["float", "float"])")
      .call("hipLaunchKernel", 2'000, 6'000, 1, 11)
      .kernel(kernel, 10'000, 400'000, 1, 11)
      .trace();
}

TEST(RecommendationsTest, AmdMatrixCoreGemmsAreMatrixCoreKernels) {
  const auto found = dlprof::analysis::recommendations(
      amd_gemm_trace("Cijk_Alik_Bljk_SB_MT128x128x16_MI32x32x2x1_SN_1LDSB0_GRVW4_K1_MIWT2_2_WG32_8_1"));
  EXPECT_EQ(find(found, "fp32_without_tensor_cores"), nullptr) << ::testing::PrintToString(ids(found));
}

TEST(RecommendationsTest, AmdFloat32GemmsWithoutMatrixCoresSpeakOfMatrixCores) {
  const auto found = dlprof::analysis::recommendations(amd_gemm_trace("Cijk_Ailk_Bljk_SB_MT64x64x16_MAC_SN_K1_NLCA1"));
  const Recommendation* amp = find(found, "fp32_without_tensor_cores");
  ASSERT_NE(amp, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(amp->text, HasSubstr("no kernel uses matrix cores, which this GPU (AMD Instinct MI300X) has"));
  EXPECT_THAT(amp->text, ::testing::Not(HasSubstr("Tensor Core")));
  EXPECT_THAT(amp->text, ::testing::Not(HasSubstr("TF32")));
  EXPECT_THAT(amp->evidence, HasSubstr("0 matrix-core kernels"));
  // A Vega-era Instinct (MI50) has no matrix cores.
  EXPECT_EQ(find(dlprof::analysis::recommendations(amd_gemm_trace("Cijk_Ailk_Bljk_SB_MT64x64x16_MAC_SN", "AMD Instinct MI50")),
                 "fp32_without_tensor_cores"),
            nullptr);
}

TEST(RecommendationsTest, GemmSizesNotMultiplesOfEightAskForPadding) {
  const auto found = dlprof::analysis::recommendations(
      gemm_trace("volta_h884gemm_64x64_ldg8_nn", 7, "[[30, 64], [64, 100]]", R"(["c10::Half", "c10::Half"])"));
  const Recommendation* padding = find(found, "gemm_dims_not_multiple_of_8");
  ASSERT_NE(padding, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(padding->text, HasSubstr("100% of matrix-product kernel time"));
  EXPECT_THAT(padding->evidence, HasSubstr("aten::mm with M=30 N=100 K=64"));
  // M is the token count, which decides no alignment.
  EXPECT_EQ(find(dlprof::analysis::recommendations(gemm_trace("volta_h884gemm_64x64_ldg8_nn", 7, "[[30, 64], [64, 96]]",
                                                              R"(["c10::Half", "c10::Half"])")),
                 "gemm_dims_not_multiple_of_8"),
            nullptr);
}

// ---- roofline-driven rules ---------------------------------------------------------------------

/// Three elementwise ops over [64, 1024] on one stream in a layer, then a Tensor Core GEMM.
dlprof::Trace elementwise_chain(std::string_view third_dims) {
  const char* types = R"(["float", "float"])";
  return AnalysisTraceBuilder()
      .step(1, 0, 1'000'000)
      .range("nn.Module: MLP_0", 0, 900'000, dlprof::Category::Forward)
      .op("aten::mul", 1'000, 2'000, 1)
      .inputs("[[64, 1024], [64, 1024]]", types)
      .op("aten::add", 3'000, 4'000, 2)
      .inputs("[[64, 1024], [64, 1024]]", types)
      .op("aten::gelu", 5'000, 6'000, 3)
      .inputs(third_dims, types)
      .op("aten::mm", 7'000, 8'000, 4)
      .inputs("[[64, 1024], [1024, 1024]]", types)
      .kernel("vectorized_elementwise_kernel<mul>", 100'000, 200'000, 11, 1)
      .kernel("vectorized_elementwise_kernel<add>", 200'000, 350'000, 12, 2)
      .kernel("vectorized_elementwise_kernel<gelu>", 350'000, 450'000, 13, 3)
      .kernel("sm80_xmma_gemm_f32f32_tf32f32_f32_nn", 450'000, 900'000, 14, 4)
      .trace();
}

TEST(RecommendationsTest, ChainsOfElementwiseKernelsOverOneShapeAskForFusion) {
  const auto found = dlprof::analysis::recommendations(elementwise_chain("[[64, 1024], [64, 1024]]"));
  const Recommendation* chains = find(found, "elementwise_chains");
  ASSERT_NE(chains, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(chains->text, HasSubstr("torch.compile"));
  // 100 + 150 + 100 us run; fused, about the longest, 150 us: 200 us saved.
  EXPECT_EQ(chains->evidence, "1 chain of 3 kernels in all, 0.200 ms to save by fusing them; the largest: aten::mul -> "
                              "aten::add -> aten::gelu over [64, 1024] in layer nn.Module: MLP_0: 3 kernels, 0.350 ms");
  EXPECT_DOUBLE_EQ(chains->impact_ns, 200'000);
  // A third op over another shape breaks the chain: two kernels are no chain.
  EXPECT_EQ(find(dlprof::analysis::recommendations(elementwise_chain("[[64, 1], [64, 1]]")), "elementwise_chains"), nullptr);
}

// ---- GPU utilization -------------------------------------------------------------------------------

dlprof::Trace busy_for(std::int64_t kernel_ns) {
  return AnalysisTraceBuilder()
      .device(0, "A100", 8)
      .step(1, 0, 1'000'000)
      .call("cudaLaunchKernel", 0, 1'000, 1)
      .kernel("void at::native::vectorized_elementwise_kernel<4>()", 1'000, 1'000 + kernel_ns, 1)
      .trace();
}

TEST(RecommendationsTest, AGpuBusyLessThanHalfTheStepsIsReported) {
  const auto found = dlprof::analysis::recommendations(busy_for(300'000));
  const Recommendation* low = find(found, "low_gpu_utilization");
  ASSERT_NE(low, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(low->evidence, HasSubstr("GPU 0 busy 30.0% of the steps' span"));
  EXPECT_THAT(low->text, HasSubstr("batch"));
}

TEST(RecommendationsTest, AGpuBusyMoreThanHalfTheStepsIsNotReported) {
  EXPECT_EQ(find(dlprof::analysis::recommendations(busy_for(800'000)), "low_gpu_utilization"), nullptr);
}

// A trace of the graph-capture phase: the kernels launched between cudaStreamBeginCapture and
// cudaStreamEndCapture are recorded into the graph and never run, so the GPU is idle for want of
// kernels, not of a larger batch.
dlprof::Trace capture_phase(std::int64_t capture_start, std::int64_t capture_end) {
  AnalysisTraceBuilder builder;
  builder.device(0, "A100", 8)
      .step(1, 0, 1'000'000)
      .call("cudaLaunchKernel", 0, 1'000, 1)
      .kernel("void at::native::vectorized_elementwise_kernel<4>()", 1'000, 21'000, 1)
      .call("cudaStreamBeginCapture", capture_start, capture_start + 2'000, 2);
  for (std::uint32_t i = 0; i < 20; ++i)
    builder.call("cudaLaunchKernel", capture_start + 3'000 + 5'000 * i, capture_start + 7'000 + 5'000 * i, 10 + i);
  return builder.call("cudaStreamEndCapture", capture_end - 10'000, capture_end, 3)
      .call("cudaGraphInstantiate", capture_end, capture_end + 50'000, 4)
      .trace();
}

TEST(RecommendationsTest, AGraphCapturePhaseGetsNoBatchSizeAdvice) {
  const auto found = dlprof::analysis::recommendations(capture_phase(30'000, 830'000));
  EXPECT_EQ(find(found, "low_gpu_utilization"), nullptr) << ::testing::PrintToString(ids(found));
  const Recommendation* capture = find(found, "graph_capture_phase");
  ASSERT_NE(capture, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(capture->text, HasSubstr("80.0% of the steps' span is CUDA graph capture"));
  EXPECT_THAT(capture->text, HasSubstr("Profile the steps that replay the graph"));
  EXPECT_THAT(capture->text, ::testing::Not(HasSubstr("larger batch (")));
  EXPECT_THAT(capture->evidence, HasSubstr("GPU 0 busy 2.0% of the steps' span; 1 stream capture over 0.800 ms (80.0%"));
}

TEST(RecommendationsTest, AShortCaptureDoesNotHideALowUtilization) {
  // 10 % of the step is capture; outside it the GPU is busy 20 µs of 900 µs.
  const auto found = dlprof::analysis::recommendations(capture_phase(30'000, 130'000));
  EXPECT_EQ(find(found, "graph_capture_phase"), nullptr);
  const Recommendation* low = find(found, "low_gpu_utilization");
  ASSERT_NE(low, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(low->evidence, HasSubstr("GPU 0 busy 2.2% of the steps' span outside graph capture"));
}

// ---- launch-bound stretches ----------------------------------------------------------------------

/// 40 kernels in a row, each launched by a 5 µs call, inside one 1 ms step.
dlprof::Trace launches_with_kernels_of(std::int64_t kernel_ns) {
  AnalysisTraceBuilder builder;
  builder.step(1, 0, 1'000'000);
  for (std::uint32_t i = 0; i < 40; ++i) {
    const std::int64_t call_start = 10'000 + 6'000 * static_cast<std::int64_t>(i);
    builder.call("cudaLaunchKernel", call_start, call_start + 5'000, i + 1);
    builder.kernel("void add_kernel<float>()", call_start + 5'500, call_start + 5'500 + kernel_ns, i + 1);
  }
  return builder.trace();
}

TEST(RecommendationsTest, LongStretchesOfKernelsShorterThanTheirLaunchAskForCudaGraphs) {
  const auto found = dlprof::analysis::recommendations(launches_with_kernels_of(2'000));
  const Recommendation* bound = find(found, "launch_bound");
  ASSERT_NE(bound, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(bound->text, HasSubstr("CUDA graph"));
  // The stretch runs from the first kernel's start (15.5 µs) to the last one's end (251.5 µs).
  EXPECT_THAT(bound->evidence, HasSubstr("1 stretches of >= 32 kernels, 40 kernels over 0.236 ms"));
  EXPECT_THAT(bound->evidence, HasSubstr("median kernel 2.0 us, median launch call 5.0 us"));
}

// A graph replay: 40 kernels of 2 µs share the one 50 µs cudaGraphLaunch that launched the graph
// (CUPTI gives them its correlation id), 20 % of a 0.5 ms step. Each is shorter than that call,
// but they are in a graph already: "capture the stretch in a CUDA graph" would be wrong.
TEST(RecommendationsTest, AGraphReplayIsNotAdvisedToBecomeAGraph) {
  for (const std::string_view launch : {"cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch"}) {
    AnalysisTraceBuilder builder;
    builder.step(1, 0, 500'000).call(launch, 10'000, 60'000, 1);
    for (std::int64_t i = 0; i < 40; ++i)
      builder.kernel("void add_kernel<float>()", 20'000 + 2'500 * i, 22'000 + 2'500 * i, 1);
    const auto found = dlprof::analysis::recommendations(builder.trace());
    EXPECT_EQ(find(found, "launch_bound"), nullptr) << launch << ": " << ::testing::PrintToString(ids(found));
  }
}

TEST(RecommendationsTest, KernelsLongerThanTheirLaunchAreNotLaunchBound) {
  // 40 × 6 µs launches of 5.9 µs kernels: as many kernels, none shorter than its call.
  EXPECT_EQ(find(dlprof::analysis::recommendations(launches_with_kernels_of(5'900)), "launch_bound"), nullptr);
}

// ---- communication -----------------------------------------------------------------------------------

/// One 1 ms step: an all_reduce whose NCCL kernel runs 200 µs, and a compute kernel placed to
/// overlap it or not; with `backward`, an autograd node after them (a training step).
dlprof::Trace communication_trace(std::int64_t compute_start, bool backward = false) {
  AnalysisTraceBuilder builder;
  builder.step(1, 0, 1'000'000)
      .range("nccl:all_reduce", 10'000, 20'000, dlprof::Category::Communication, 0, 5)
      .call("cudaLaunchKernel", 11'000, 12'000, 1, 5)
      .call("cudaLaunchKernel", 30'000, 31'000, 2)
      .kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 100'000, 300'000, 1, 5, 13)
      .kernel("volta_sgemm_128x64_nn", compute_start, compute_start + 200'000, 2, 0, 7);
  if (backward) builder.op("autograd::engine::evaluate_function: MmBackward0", 700'000, 710'000);
  return builder.trace();
}

TEST(RecommendationsTest, CommunicationAboveTenPercentAndNotOverlappedIsReported) {
  const auto found = dlprof::analysis::recommendations(communication_trace(400'000));
  const Recommendation* heavy = find(found, "communication_heavy");
  ASSERT_NE(heavy, nullptr) << ::testing::PrintToString(ids(found));
  // TensorBoard's Communication role: the NCCL kernel (200 µs) and the collective's own CPU op (10 µs).
  EXPECT_THAT(heavy->text, HasSubstr("21.0% of the step is communication"));
  const Recommendation* overlap = find(found, "low_comm_overlap");
  ASSERT_NE(overlap, nullptr);
  EXPECT_THAT(overlap->text, HasSubstr("Only 0.0% of communication overlaps computation"));
  EXPECT_THAT(overlap->evidence, HasSubstr("communication kernels 0.200 ms, of which overlapped by computation 0.000 ms"));
}

TEST(RecommendationsTest, CommunicationHiddenBehindComputationIsNotLowOverlap) {
  const auto found = dlprof::analysis::recommendations(communication_trace(100'000));
  EXPECT_EQ(find(found, "low_comm_overlap"), nullptr) << ::testing::PrintToString(ids(found));
}

// ---- memory --------------------------------------------------------------------------------------------

dlprof::Trace memory_peaking_at(std::int64_t peak_bytes) {
  dlprof::Trace trace = AnalysisTraceBuilder().device(0, "A100", 8).step(1, 0, 1'000).trace();
  trace.devices[0].total_global_mem = std::int64_t{1} << 30;
  for (const std::int64_t total : {peak_bytes / 2, peak_bytes, peak_bytes / 4}) {
    dlprof::MemoryEvent event;
    event.device_type = dlprof::MemoryDeviceType::CUDA;
    event.device = 0;
    event.total_allocated = total;
    trace.memory_events.push_back(event);
  }
  return trace;
}

TEST(RecommendationsTest, PeakMemoryAboveNinetyPercentOfTheGpuIsReported) {
  const auto found = dlprof::analysis::recommendations(memory_peaking_at((std::int64_t{1} << 30) / 100 * 95));
  const Recommendation* memory = find(found, "memory_near_capacity");
  ASSERT_NE(memory, nullptr) << ::testing::PrintToString(ids(found));
  EXPECT_THAT(memory->text, HasSubstr("GPU 0 peaks at 95.0% of its memory"));
  EXPECT_THAT(memory->text, HasSubstr("checkpointing"));
  EXPECT_THAT(memory->evidence, HasSubstr("of 1.00 GiB on GPU 0"));
}

TEST(RecommendationsTest, PeakMemoryWellBelowTheGpuIsNotReported) {
  EXPECT_THAT(dlprof::analysis::recommendations(memory_peaking_at(std::int64_t{1} << 29)), IsEmpty());
}

// ---- ranks ---------------------------------------------------------------------------------------------

TEST(RecommendationsTest, FindingsOfSeveralRanksNameTheirRank) {
  dlprof::Trace slow_loader = loading_for(100'000);
  slow_loader.distributed.rank = 1;
  const std::vector<dlprof::Trace> ranks = {loading_for(10'000), slow_loader};
  const auto found = dlprof::analysis::recommendations(ranks);
  const Recommendation* loader = find(found, "dataloader_bound");
  ASSERT_NE(loader, nullptr);
  EXPECT_THAT(loader->text, ::testing::StartsWith("rank 1: 10.0% of the step is DataLoader"));
}

// ---- the time a finding saves, the floors, the ranking ---------------------------------------------

// Each rule's saving per step, by hand from its trace: all of the time it removes, half of the
// time it speeds up.
TEST(RecommendationsTest, EachFindingSavesTheTimeItsRuleRemovesOrHalvesPerStep) {
  struct Case {
    dlprof::Trace trace;
    std::string id;
    double impact_ns;  // per step
    double share;      // % of the median step
  };
  const std::vector<Case> cases = {
      // DataLoader 100 µs of each 1 ms step: all of it.
      {loading_for(100'000), "dataloader_bound", 100'000, 10.0},
      // A 0.6 ms pageable copy in a 10 ms step: pinned, it takes half as long.
      {copy_trace("cudaMemcpyAsync", /*Pageable*/ 1), "pageable_copies", 300'000, 3.0},
      // Its 0.8 ms blocking call: all of it.
      {copy_trace("cudaMemcpyAsync", /*Pageable*/ 1), "synchronous_copies", 800'000, 8.0},
      // 100 µs of transposes: all of them, of a step that ends with its last kernel at 1.1 ms.
      {transposes_for(100'000), "layout_transposes", 100'000, 10.0 / 1.1},
      // A 390 µs float32 GEMM: Tensor Cores halve it; misaligned, padding halves it.
      {gemm_trace("volta_sgemm_128x64_nn", 7, "[[32, 64], [64, 128]]"), "fp32_without_tensor_cores", 195'000, 19.5},
      {gemm_trace("volta_h884gemm_64x64_ldg8_nn", 7, "[[30, 64], [64, 100]]", R"(["c10::Half", "c10::Half"])"),
       "gemm_dims_not_multiple_of_8", 195'000, 19.5},
      // A GPU busy 300 µs of a 1 ms step: its 700 µs idle.
      {busy_for(300'000), "low_gpu_utilization", 700'000, 70.0},
      // 40 launch-bound kernels of 2 µs over 236 µs: the 156 µs of gaps between them.
      {launches_with_kernels_of(2'000), "launch_bound", 156'000, 15.6},
      // Communication 210 µs of the 1 ms step (TensorBoard's role); 200 µs of NCCL kernel unhidden.
      {communication_trace(400'000), "communication_heavy", 210'000, 21.0},
      {communication_trace(400'000), "low_comm_overlap", 200'000, 20.0},
  };
  for (const Case& c : cases) {
    const auto found = dlprof::analysis::recommendations(c.trace);
    const Recommendation* finding = find(found, c.id);
    ASSERT_NE(finding, nullptr) << c.id << ": " << ::testing::PrintToString(ids(found));
    EXPECT_DOUBLE_EQ(finding->impact_ns, c.impact_ns) << c.id;
    EXPECT_NEAR(finding->share, c.share, 1e-9) << c.id;
    EXPECT_EQ(finding->severity, c.share >= 10 ? Severity::High : c.share >= 5 ? Severity::Medium : Severity::Low) << c.id;
    EXPECT_THAT(finding->ranks, ElementsAre(0)) << c.id;
    EXPECT_FALSE(finding->action.empty()) << c.id;
  }
  // The others wait 7.3 ms per step for rank 3 (its one late all-to-all), of steps of 19.71,
  // 17.51, 16.11 and 10.61 ms on the four ranks.
  const auto found = dlprof::analysis::recommendations(dlprof_test::ranks_waiting_for_a_late_rank());
  const Recommendation* straggler = find(found, "straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_NEAR(straggler->impact_ns, 7'300'000, 1e-6);
  EXPECT_NEAR(straggler->share, 100.0 * 7.3 / ((19.71 + 17.51 + 16.11 + 10.61) / 4), 1e-9);
  EXPECT_EQ(straggler->worst_rank, 3);
  EXPECT_THAT(straggler->ranks, ElementsAre(3));
}

TEST(RecommendationsTest, FindingsUnderEitherFloorDoNotFire) {
  // 22 µs of unhidden communication in a 10 ms inference step: 0.2 %, under 50 µs.
  const dlprof::Trace inference = AnalysisTraceBuilder()
                                      .step(1, 0, 10'000'000)
                                      .call("cudaLaunchKernel", 11'000, 12'000, 1, 5)
                                      .kernel("ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclWorkElem)", 100'000, 122'000, 1, 5, 13)
                                      .call("cudaLaunchKernel", 30'000, 31'000, 2)
                                      .kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 200'000, 9'800'000, 2, 0, 7)
                                      .trace();
  EXPECT_THAT(ids(dlprof::analysis::recommendations(inference)), IsEmpty());
  // 100 µs of transposes, 9 % of kernel time but 1 % of a 10 ms step: over 50 µs, under 2 %.
  const dlprof::Trace small_share = AnalysisTraceBuilder()
                                        .step(1, 0, 10'000'000)
                                        .call("cudaLaunchKernel", 0, 1'000, 1)
                                        .call("cudaLaunchKernel", 1'000, 2'000, 2)
                                        .kernel("void cudnn::ops::nchwToNhwcKernel<float>()", 10'000, 110'000, 1)
                                        .kernel("sm80_xmma_fprop_implicit_gemm_f16f16", 200'000, 1'200'000, 2)
                                        .trace();
  EXPECT_EQ(find(dlprof::analysis::recommendations(small_share), "layout_transposes"), nullptr);
  // 40 µs of DataLoader, 8 % of a 0.5 ms step: over 2 %, under 50 µs.
  const dlprof::Trace short_step = AnalysisTraceBuilder()
                                       .step(1, 0, 500'000)
                                       .range("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 40'000,
                                              dlprof::Category::DataLoader)
                                       .trace();
  EXPECT_EQ(find(dlprof::analysis::recommendations(short_step), "dataloader_bound"), nullptr);
}

TEST(RecommendationsTest, FindingsAreRankedByTheTimeTheySaveWithRisksAfter) {
  // 1 ms step: DataLoader 100 µs, a kernel of 300 µs (700 µs idle), memory at 95 % of the GPU.
  dlprof::Trace trace = AnalysisTraceBuilder()
                            .device(0, "A100", 8)
                            .step(1, 0, 1'000'000)
                            .range("enumerate(DataLoader)#MnistLoader.__next__", 0, 100'000, dlprof::Category::DataLoader)
                            .call("cudaLaunchKernel", 100'000, 101'000, 1)
                            .kernel("void at::native::vectorized_elementwise_kernel<4>()", 101'000, 401'000, 1)
                            .trace();
  trace.devices[0].total_global_mem = std::int64_t{1} << 30;
  dlprof::MemoryEvent memory;
  memory.device_type = dlprof::MemoryDeviceType::CUDA;
  memory.total_allocated = (std::int64_t{1} << 30) / 100 * 95;
  trace.memory_events.push_back(memory);
  const auto found = dlprof::analysis::recommendations(trace);
  EXPECT_THAT(ids(found), ElementsAre("low_gpu_utilization", "dataloader_bound", "memory_near_capacity"));
  EXPECT_EQ(found.back().severity, Severity::Risk);
  EXPECT_EQ(found.back().impact_ns, 0.0);
}

TEST(RecommendationsTest, ARuleFoundOnSeveralRanksIsOneFindingToldByTheWorstRank) {
  std::vector<dlprof::Trace> ranks;
  for (const auto& [rank, loader_ns] : std::vector<std::pair<int, std::int64_t>>{
           {0, 100'000}, {1, 100'000}, {2, 300'000}, {3, 200'000}, {4, 10'000}, {5, 150'000}}) {
    ranks.push_back(loading_for(loader_ns));
    ranks.back().distributed.rank = rank;
    ranks.back().distributed.world_size = 6;
  }
  const auto found = dlprof::analysis::recommendations(ranks);
  EXPECT_EQ(std::count_if(found.begin(), found.end(), [](const Recommendation& r) { return r.id == "dataloader_bound"; }), 1);
  const Recommendation* loader = find(found, "dataloader_bound");
  ASSERT_NE(loader, nullptr);
  EXPECT_THAT(loader->ranks, ElementsAre(0, 1, 2, 3, 5));  // rank 4 loads 1 % of its step
  EXPECT_EQ(loader->worst_rank, 2);
  EXPECT_DOUBLE_EQ(loader->impact_ns, 300'000);
  EXPECT_THAT(loader->text, ::testing::StartsWith("ranks 0-3, 5 (worst: rank 2): 30.0% of the step is DataLoader"));
  EXPECT_THAT(loader->evidence, ::testing::StartsWith("rank 2: DataLoader 0.300 ms"));
  EXPECT_EQ(dlprof::analysis::detail::rank_list({0, 1, 3, 4, 5, 7}), "0, 1, 3-5, 7");
}

TEST(RecommendationsTest, CommunicationAdviceSpeaksOfGradientsOnlyWithABackwardPass) {
  const auto inference = dlprof::analysis::recommendations(communication_trace(400'000));
  for (const std::string id : {"communication_heavy", "low_comm_overlap"}) {
    const Recommendation* finding = find(inference, id);
    ASSERT_NE(finding, nullptr) << id;
    EXPECT_THAT(finding->text, HasSubstr("with no backward pass")) << id;
    EXPECT_THAT(finding->text, Not(HasSubstr("DDP"))) << id;
    EXPECT_THAT(finding->text, Not(HasSubstr("gradient"))) << id;
  }
  const auto found = dlprof::analysis::recommendations(communication_trace(400'000, /*backward=*/true));
  ASSERT_NE(find(found, "communication_heavy"), nullptr);
  EXPECT_THAT(find(found, "communication_heavy")->text, HasSubstr("DDP buckets"));
  ASSERT_NE(find(found, "low_comm_overlap"), nullptr);
  EXPECT_THAT(find(found, "low_comm_overlap")->text, HasSubstr("backward pass still runs"));
}

}  // namespace
