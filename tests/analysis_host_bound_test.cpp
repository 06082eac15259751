// Host-bound and launch-bound runs on hand-built traces: the GPU waiting for the host to launch
// short kernels (one finding, for CUDA graphs and fusion, in place of the batch-size and
// launch-bound ones), TensorBoard's short-kernel count, and an optimizer that updates its
// parameters one at a time; each saving by hand.
#include <dlprof/analysis/recommendations.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"
#include "findings.hpp"

namespace {

using dlprof::analysis::Recommendation;
using dlprof_test::AnalysisTraceBuilder;
using dlprof_test::kMs;
using dlprof_test::kUs;
using ::testing::HasSubstr;

using dlprof_test::finding_ids;
using dlprof_test::finding_with_id;

/// One 10 ms step of an eager decode: 200 kernels of `kernel_ns`, each launched by a 40 us call
/// that starts 1 us into its 50 us slot, after the kernel before it ended.
dlprof::Trace eager_launches(std::int64_t kernel_ns, std::string_view gpu = "NVIDIA B200",
                             std::string_view launch = "cudaLaunchKernel") {
  AnalysisTraceBuilder builder;
  builder.device(0, gpu, gpu.find("AMD") != std::string_view::npos ? 9 : 10).step(1, 0, 10 * kMs);
  for (std::int64_t i = 0; i < 200; ++i) {
    const std::int64_t slot = i * 50 * kUs;
    const auto correlation = static_cast<std::uint32_t>(i + 1);
    builder.call(launch, slot + 1 * kUs, slot + 41 * kUs, correlation)
        .kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >()",
                slot + 50 * kUs - kernel_ns, slot + 50 * kUs, correlation);
  }
  return builder.trace();
}

TEST(HostBoundTest, ShortKernelsTheGpuWaitsForTheHostToLaunchAskForGraphsAndFusion) {
  const auto found = dlprof::analysis::recommendations(eager_launches(5 * kUs));
  const Recommendation* host = finding_with_id(found, "host_bound");
  ASSERT_NE(host, nullptr) << finding_ids(found);
  // Idle 9 of the 10 ms; every gap between two kernels waits for the next launch call.
  EXPECT_DOUBLE_EQ(host->impact_ns, 9.0 * kMs);
  EXPECT_DOUBLE_EQ(host->share, 90.0);
  EXPECT_THAT(host->text, HasSubstr("CUDA graph"));
  // Inference: no optimizer to fuse.
  EXPECT_THAT(host->text, ::testing::Not(HasSubstr("optimizer")));
  EXPECT_THAT(host->evidence, HasSubstr("GPU 0 idle 90.0% of the steps, 100.0% of its idle time waiting for the host"));
  EXPECT_THAT(host->evidence, HasSubstr("median kernel 5.0 us, median launch call 40.0 us"));
  EXPECT_THAT(host->evidence, HasSubstr("200 of 200 kernels are short (< 10 us)"));
  // One finding for the one cause: neither a larger batch nor the launch-bound stretches apart.
  EXPECT_EQ(finding_with_id(found, "low_gpu_utilization"), nullptr);
  EXPECT_EQ(finding_with_id(found, "launch_bound"), nullptr);
}

TEST(HostBoundTest, OnAnAmdGpuTheGraphIsAHipGraph) {
  const auto found = dlprof::analysis::recommendations(eager_launches(5 * kUs, "AMD Instinct MI300X", "hipLaunchKernel"));
  const Recommendation* host = finding_with_id(found, "host_bound");
  ASSERT_NE(host, nullptr) << finding_ids(found);
  EXPECT_THAT(host->text, HasSubstr("HIP graph"));
  EXPECT_EQ(host->action, "capture the step in a HIP graph; fuse kernels");
}

TEST(HostBoundTest, KernelsLongerThanTheirLaunchAreNotHostBound) {
  // 45 us kernels behind 40 us calls: the GPU is busy 90 % of the step.
  const auto found = dlprof::analysis::recommendations(eager_launches(45 * kUs));
  EXPECT_EQ(finding_with_id(found, "host_bound"), nullptr) << finding_ids(found);
  EXPECT_EQ(finding_with_id(found, "low_gpu_utilization"), nullptr);
}

TEST(HostBoundTest, AnIdleGpuThatWaitsOnSomethingElseGetsTheBatchSizeAdvice) {
  // Each 0.8 ms kernel is launched long before the previous one ends and waits 1.2 ms on an
  // event: idle 60 % of the step, none of it for the host.
  AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA H100", 9).step(1, 0, 20 * kMs);
  for (std::int64_t i = 0; i < 10; ++i) {
    const auto correlation = static_cast<std::uint32_t>(i + 1);
    builder.call("cudaLaunchKernel", i * 10 * kUs, i * 10 * kUs + 5 * kUs, correlation)
        .kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", i * 2 * kMs + 1 * kMs, i * 2 * kMs + 1'800 * kUs, correlation);
  }
  const auto found = dlprof::analysis::recommendations(builder.trace());
  EXPECT_EQ(finding_with_id(found, "host_bound"), nullptr) << finding_ids(found);
  EXPECT_NE(finding_with_id(found, "low_gpu_utilization"), nullptr);
}

/// Two 20 ms steps, each ending in an optimizer step range of 8 ms holding `params` parameters'
/// updates: mul_, add_, addcmul_, addcdiv_ each, 1 us apart; `foreach` adds one multi-tensor op.
dlprof::Trace optimizer_steps(std::int64_t params, bool foreach) {
  AnalysisTraceBuilder builder;
  for (std::int64_t s = 0; s < 2; ++s) {
    const std::int64_t base = s * 20 * kMs;
    builder.step(s + 1, base, base + 20 * kMs)
        .op("aten::mm", base + 1 * kMs, base + 10 * kMs)
        .range("Optimizer.step#AdamW.step", base + 12 * kMs, base + 20 * kMs, dlprof::Category::Optimizer);
    std::int64_t at = base + 12 * kMs + 10 * kUs;
    for (std::int64_t p = 0; p < params; ++p)
      for (const char* op : {"aten::mul_", "aten::add_", "aten::addcmul_", "aten::addcdiv_"}) {
        builder.op(op, at, at + 1 * kUs);
        at += 2 * kUs;
      }
    if (foreach) builder.op("aten::_foreach_add_", at, at + 5 * kUs);
  }
  return builder.trace();
}

TEST(HostBoundTest, AnOptimizerThatUpdatesOneParameterAtATimeAsksForForeachOrFused) {
  const auto found = dlprof::analysis::recommendations(optimizer_steps(100, false));
  const Recommendation* loop = finding_with_id(found, "per_parameter_optimizer");
  ASSERT_NE(loop, nullptr) << finding_ids(found);
  EXPECT_THAT(loop->text, HasSubstr("400 element-wise ops per optimizer step"));
  EXPECT_THAT(loop->text, HasSubstr("fused=True"));
  EXPECT_THAT(loop->evidence, HasSubstr("Optimizer.step#AdamW.step: 2 steps, 800 update ops"));
  EXPECT_THAT(loop->evidence, HasSubstr("aten::mul_ x200"));
  EXPECT_THAT(loop->evidence, HasSubstr("8.000 ms per step in the optimizer"));
  EXPECT_DOUBLE_EQ(loop->impact_ns, 4.0 * kMs);  // half of the 8 ms optimizer step
  EXPECT_DOUBLE_EQ(loop->share, 20.0);
}

TEST(HostBoundTest, AForeachOptimizerOrAFewParametersAreFine) {
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(optimizer_steps(100, true)), "per_parameter_optimizer"), nullptr);
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(optimizer_steps(7, false)), "per_parameter_optimizer"), nullptr);
}

}  // namespace
