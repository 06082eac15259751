// The verdict on hand-built traces: what bounds the step, the median and mean step, GPU busy and
// the top actions, each worked out by hand.
#include <dlprof/analysis/verdict.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::Bound;
using dlprof::analysis::Recommendation;
using dlprof::analysis::Severity;
using dlprof::analysis::StepBreakdown;
using dlprof::analysis::Verdict;
using dlprof_test::AnalysisTraceBuilder;

/// Steps of the given lengths, back to back, each with one kernel running `kernel_share` of it.
dlprof::Trace steps_of(const std::vector<std::int64_t>& lengths, double kernel_share) {
  AnalysisTraceBuilder builder;
  builder.device(0, "A100", 8);
  std::int64_t start = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const auto correlation = static_cast<std::uint32_t>(i + 1);
    const auto kernel_ns = static_cast<std::int64_t>(kernel_share * static_cast<double>(lengths[i]));
    builder.step(static_cast<std::int64_t>(i + 1), start, start + lengths[i])
        .call("cudaLaunchKernel", start, start + 1'000, correlation)
        .kernel("void at::native::vectorized_elementwise_kernel<4>()", start + 1'000, start + 1'000 + kernel_ns, correlation);
    start += lengths[i];
  }
  return builder.trace();
}

Verdict verdict_of(const dlprof::Trace& trace, const std::vector<Recommendation>& findings = {}) {
  const StepBreakdown steps = dlprof::analysis::step_breakdown(trace);
  return dlprof::analysis::verdict({{0, &steps, nullptr}}, findings);
}

TEST(VerdictTest, AStepWhoseKernelsRunMostOfItIsBoundByGpuCompute) {
  // Kernels 80 % of each 1 ms step.
  const Verdict verdict = verdict_of(steps_of({1'000'000, 1'000'000, 1'000'000}, 0.8));
  EXPECT_EQ(verdict.bound, Bound::GpuCompute);
  EXPECT_DOUBLE_EQ(verdict.bound_share, 80.0);
  EXPECT_EQ(verdict.steps, 3u);
  EXPECT_DOUBLE_EQ(verdict.median_step_ns, 1'000'000);
  EXPECT_FALSE(verdict.mean_differs());
  ASSERT_TRUE(verdict.gpu_busy.has_value());
  EXPECT_NEAR(*verdict.gpu_busy, 0.8, 1e-9);
}

TEST(VerdictTest, AStepWhoseGpuIdlesWhileTheCpuWorksIsBoundByTheHost) {
  // Kernels 30 % of each step; the launch call 1 µs (Runtime); the rest CPU work.
  const Verdict verdict = verdict_of(steps_of({1'000'000, 1'000'000}, 0.3));
  EXPECT_EQ(verdict.bound, Bound::Host);
  EXPECT_NEAR(verdict.bound_share, 70.0, 1e-9);
}

TEST(VerdictTest, TheMedianStepComesWithTheMeanWhenTheyDiffer) {
  // 1, 1 and 4 ms: median 1 ms, mean 2 ms.
  const Verdict verdict = verdict_of(steps_of({1'000'000, 1'000'000, 4'000'000}, 0.8));
  EXPECT_DOUBLE_EQ(verdict.median_step_ns, 1'000'000);
  EXPECT_DOUBLE_EQ(verdict.mean_step_ns, 2'000'000);
  EXPECT_TRUE(verdict.mean_differs());
}

TEST(VerdictTest, InputBoundsAStepMostlySpentInTheDataLoader) {
  const dlprof::Trace trace = AnalysisTraceBuilder()
                                  .step(1, 0, 1'000'000)
                                  .range("enumerate(DataLoader)#MnistLoader.__next__", 0, 600'000, dlprof::Category::DataLoader)
                                  .trace();
  const Verdict verdict = verdict_of(trace);
  EXPECT_EQ(verdict.bound, Bound::Input);
  EXPECT_DOUBLE_EQ(verdict.bound_share, 60.0);
  EXPECT_FALSE(verdict.gpu_busy.has_value()) << "no kernels, no GPU busy";
}

TEST(VerdictTest, TheTopActionsAreTheFirstThreeFindingsThatSaveTime) {
  const dlprof::Trace trace = steps_of({1'000'000}, 0.8);
  std::vector<Recommendation> findings(5);
  for (Recommendation& finding : findings) finding.severity = Severity::Medium;
  EXPECT_EQ(verdict_of(trace, findings).top_actions, 3u);
  findings.resize(2);
  EXPECT_EQ(verdict_of(trace, findings).top_actions, 2u);
  findings[1].severity = Severity::Risk;  // a risk saves no time: not an action
  EXPECT_EQ(verdict_of(trace, findings).top_actions, 1u);
  findings[0].severity = Severity::Note;
  EXPECT_EQ(verdict_of(trace, findings).top_actions, 0u);
}

TEST(VerdictTest, NoStepNoVerdict) {
  const Verdict verdict = dlprof::analysis::verdict({}, {});
  EXPECT_EQ(verdict.bound, Bound::NoSteps);
  EXPECT_EQ(verdict.steps, 0u);
  EXPECT_EQ(verdict.top_actions, 0u);
}

}  // namespace
