// Which steps show the steady state (analysis/steady_state.hpp), on hand-built traces: first calls,
// outlier steps and a window that starts mid-flight; the verdict over the steady steps and what it
// says of the others; no batch-size advice for idle time that first calls explain.
#include <dlprof/analysis/recommendations.hpp>
#include <dlprof/analysis/steady_state.hpp>
#include <dlprof/analysis/verdict.hpp>
#include <dlprof/report.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::SteadyState;
using dlprof::analysis::StepFlag;
using dlprof_test::AnalysisTraceBuilder;
using dlprof_test::kMs;
using dlprof_test::kUs;
using ::testing::HasSubstr;

const dlprof::analysis::Recommendation* rule(const std::vector<dlprof::analysis::Recommendation>& found,
                                             const std::string& id) {
  for (const auto& finding : found)
    if (finding.id == id) return &finding;
  return nullptr;
}

/// Steps of `lengths` ns, each a kernel of `busy` of its length launched by a 10 us call at its
/// start; `first_launch_ns` adds to step 1 a first launch of that length before the kernel, during
/// which the GPU idles (lazy module loading).
dlprof::Trace steps_with(const std::vector<std::int64_t>& lengths, double busy, std::int64_t first_launch_ns = 0) {
  AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA A100-SXM4-80GB", 8);
  std::int64_t start = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const auto correlation = static_cast<std::uint32_t>(10 * i + 1);
    const std::int64_t launch_end = start + 10 * kUs + (i == 0 ? first_launch_ns : 0);
    const auto kernel_ns = static_cast<std::int64_t>(busy * static_cast<double>(lengths[i] - (i == 0 ? first_launch_ns : 0)));
    builder.step(static_cast<std::int64_t>(i + 1), start, start + lengths[i])
        .call("cudaLaunchKernel", start, launch_end, correlation)
        .kernel("ampere_sgemm_128x64_nn", launch_end + 5 * kUs, launch_end + 5 * kUs + kernel_ns, correlation);
    start += lengths[i];
  }
  return builder.trace();
}

TEST(SteadyStateTest, AFirstLaunchMakesItsStepAFirstCallAndAnOutlier) {
  // Step 1: a 675 ms first launch, then a 10 ms step; steps 2-5 of 10 ms, the GPU busy 80 %.
  const dlprof::Trace trace = steps_with({685 * kMs, 10 * kMs, 10 * kMs, 10 * kMs, 10 * kMs}, 0.8, 675 * kMs);
  const auto steps = dlprof::analysis::step_breakdown(trace);
  const SteadyState steady = dlprof::analysis::steady_state(trace, steps);
  EXPECT_EQ(steady.steady, (std::vector<bool>{false, true, true, true, true}));
  ASSERT_EQ(steady.flagged.size(), 2u);
  EXPECT_EQ(steady.flagged[0].flag, StepFlag::FirstCalls);
  EXPECT_EQ(steady.flagged[0].number, 1);
  EXPECT_EQ(steady.flagged[0].ns, 675 * kMs + 10 * kUs);
  ASSERT_EQ(steady.flagged[0].calls.size(), 1u);
  EXPECT_EQ(steady.flagged[0].calls[0].name, "cudaLaunchKernel");
  EXPECT_EQ(steady.flagged[1].flag, StepFlag::Outlier);
  EXPECT_DOUBLE_EQ(steady.flagged[1].ratio_to_median, 68.5);
  EXPECT_EQ(steady.first_call_ns, 675 * kMs + 10 * kUs);
  EXPECT_EQ(steady.steady_ns, 40 * kMs);
  ASSERT_EQ(steady.utilization.size(), 1u);
  // Each steady step: 0.8 x (10 ms - 0 ms) of kernel.
  EXPECT_NEAR(steady.utilization[0].utilization, 0.8, 1e-9);
}

TEST(SteadyStateTest, TheVerdictJudgesTheSteadyStepsAndNamesTheOneLeftOut) {
  const dlprof::Trace trace = steps_with({685 * kMs, 10 * kMs, 10 * kMs, 10 * kMs, 10 * kMs}, 0.8, 675 * kMs);
  const dlprof::Report report = dlprof::make_report(trace);
  const dlprof::analysis::Verdict& verdict = report.verdict;
  EXPECT_EQ(verdict.steps, 4u);
  EXPECT_DOUBLE_EQ(verdict.median_step_ns, 10.0 * kMs);
  EXPECT_DOUBLE_EQ(verdict.mean_step_ns, 10.0 * kMs);
  ASSERT_TRUE(verdict.gpu_busy.has_value());
  EXPECT_NEAR(*verdict.gpu_busy, 0.8, 1e-9);
  EXPECT_EQ(verdict.bound, dlprof::analysis::Bound::GpuCompute);
  EXPECT_FALSE(verdict.all_flagged);
  ASSERT_EQ(verdict.left_out.size(), 2u);
  // A single 675 ms first launch is no reason for a larger batch.
  EXPECT_EQ(rule(report.recommendations, "low_gpu_utilization"), nullptr);
  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, HasSubstr("Step 10.0 ms (median of 4); GPU busy 80.0%."));
  EXPECT_THAT(text, HasSubstr("  Left out as not the steady state: step 1 (first calls, 675 ms: cudaLaunchKernel 675 ms);"));
  EXPECT_EQ(dlprof::detail::left_out_sentence(verdict, false),
            "Left out as not the steady state: step 1 (first calls, 675 ms: cudaLaunchKernel 675 ms); step 1 (68.50x the "
            "median step).");
  const nlohmann::json json = nlohmann::json::parse(dlprof::render_json(report)).at("verdict");
  EXPECT_EQ(json.at("steps"), 4);
  EXPECT_EQ(json.at("all_flagged"), false);
  ASSERT_EQ(json.at("left_out").size(), 2u);
  EXPECT_EQ(json.at("left_out").at(0).at("reason"), "first_calls");
  EXPECT_EQ(json.at("left_out").at(0).at("step"), 1);
  EXPECT_EQ(json.at("left_out").at(0).at("calls").at(0).at("name"), "cudaLaunchKernel");
  EXPECT_DOUBLE_EQ(json.at("left_out").at(0).at("calls").at(0).at("duration_us").get<double>(), 675'010.0);
  EXPECT_TRUE(json.at("left_out").at(0).at("ratio_to_median").is_null());
  EXPECT_EQ(json.at("left_out").at(1).at("reason"), "outlier");
  EXPECT_DOUBLE_EQ(json.at("left_out").at(1).at("ratio_to_median").get<double>(), 68.5);
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("Left out as not the steady state: step 1"));
}

TEST(SteadyStateTest, AWindowOfFirstCallsAloneGetsANoteToProfileAfterWarmUpNotALargerBatch) {
  // One 100 ms step, of which a 90 ms first launch; the GPU then busy 4 of the last 10 ms.
  const dlprof::Trace trace = steps_with({100 * kMs}, 0.4, 90 * kMs);
  const auto found = dlprof::analysis::recommendations(trace);
  EXPECT_EQ(rule(found, "low_gpu_utilization"), nullptr);
  const auto* note = rule(found, "first_calls");
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->severity, dlprof::analysis::Severity::Note);
  EXPECT_THAT(note->text, HasSubstr("90.0% of the steps is first calls"));
  EXPECT_THAT(note->evidence, HasSubstr("cudaLaunchKernel 90.010 ms in step 1"));
  const dlprof::Report report = dlprof::make_report(trace);
  EXPECT_TRUE(report.verdict.all_flagged);
  EXPECT_EQ(report.verdict.steps, 1u);
  EXPECT_THAT(dlprof::render_text(report), HasSubstr("No step is steady, so the figures are of every step: step 1 (first calls"));
}

TEST(SteadyStateTest, IdleTimeFirstCallsDoNotExplainStillAsksForMoreWork) {
  // One 100 ms step: a 20 ms first launch, then the GPU busy 10 % of the remaining 80 ms.
  const auto found = dlprof::analysis::recommendations(steps_with({100 * kMs}, 0.1, 20 * kMs));
  EXPECT_EQ(rule(found, "first_calls"), nullptr);
  EXPECT_NE(rule(found, "low_gpu_utilization"), nullptr);
}

TEST(SteadyStateTest, TheSteadyStepsDecideTheUtilizationRule) {
  // Steps 2-5 busy 30 %: a larger batch, judged on them alone; the idle time per steady step is
  // 7 ms of 10.
  const auto found =
      dlprof::analysis::recommendations(steps_with({685 * kMs, 10 * kMs, 10 * kMs, 10 * kMs, 10 * kMs}, 0.3, 675 * kMs));
  const auto* low = rule(found, "low_gpu_utilization");
  ASSERT_NE(low, nullptr);
  EXPECT_THAT(low->evidence, HasSubstr("GPU 0 busy 30.0% of the 4 steady steps (1 left out"));
  EXPECT_NEAR(low->impact_ns, 7.0 * kMs, 1);
  EXPECT_NEAR(low->share, 70.0, 1e-6);
}

TEST(SteadyStateTest, LongCallsInEveryStepAreNotFirstCalls) {
  // A 12 ms cudaMalloc in each of four 20 ms steps: the allocator thrashes, every step.
  AnalysisTraceBuilder builder;
  for (std::int64_t i = 0; i < 4; ++i) {
    const std::int64_t start = i * 20 * kMs;
    const auto correlation = static_cast<std::uint32_t>(10 * i);
    builder.step(i + 1, start, start + 20 * kMs)
        .call("cudaMalloc", start, start + 12 * kMs, correlation + 1)
        .call("cudaLaunchKernel", start + 12 * kMs, start + 12'010 * kUs, correlation + 2)
        .kernel("gemm", start + 12'100 * kUs, start + 19 * kMs, correlation + 2);
  }
  const dlprof::Trace trace = builder.trace();
  const SteadyState steady = dlprof::analysis::steady_state(trace, dlprof::analysis::step_breakdown(trace));
  EXPECT_TRUE(steady.flagged.empty());
  EXPECT_EQ(steady.first_call_ns, 0);
}

TEST(SteadyStateTest, ALongCallWhileTheGpuWorksIsAWaitNotAFirstCall) {
  // cudaFree waits 30 ms for the kernel before it frees: not a first call, and not an outlier.
  const dlprof::Trace trace = AnalysisTraceBuilder()
                                  .step(1, 0, 40 * kMs)
                                  .call("cudaLaunchKernel", 0, 10 * kUs, 1)
                                  .kernel("gemm", 20 * kUs, 30 * kMs, 1)
                                  .call("cudaFree", 100 * kUs, 30'100 * kUs, 2)
                                  .call("cudaStreamSynchronize", 30'200 * kUs, 50 * kMs, 3)
                                  .trace();
  const SteadyState steady = dlprof::analysis::steady_state(trace, dlprof::analysis::step_breakdown(trace));
  EXPECT_TRUE(steady.flagged.empty());
}

TEST(SteadyStateTest, OutliersAreStepsAboveOnePointThreeTimesTheMedian) {
  const dlprof::Trace trace = steps_with({10 * kMs, 13 * kMs, 10 * kMs, 13'001 * kUs, 10 * kMs}, 0.8);
  const SteadyState steady = dlprof::analysis::steady_state(trace, dlprof::analysis::step_breakdown(trace));
  ASSERT_EQ(steady.flagged.size(), 1u);
  EXPECT_EQ(steady.flagged[0].number, 4);
  EXPECT_EQ(steady.flagged[0].flag, StepFlag::Outlier);
  EXPECT_NEAR(steady.flagged[0].ratio_to_median, 1.3001, 1e-9);
}

TEST(SteadyStateTest, AWindowThatStartsMidFlightFlagsItsFirstStep) {
  // Kernel 7 was launched before the window: the trace has no call of its correlation id. It runs
  // 5 ms into step 1, where the host's first call waits for it.
  dlprof::Trace trace = steps_with({10 * kMs, 10 * kMs, 10 * kMs}, 0.5);
  dlprof::GpuEvent early = trace.gpu_events.front();
  early.correlation = 7;
  early.start_ns = 0;
  early.end_ns = 5 * kMs;
  trace.gpu_events.insert(trace.gpu_events.begin(), early);  // the Trace's order: by device, stream, start
  const SteadyState steady = dlprof::analysis::steady_state(trace, dlprof::analysis::step_breakdown(trace));
  ASSERT_EQ(steady.flagged.size(), 1u);
  EXPECT_EQ(steady.flagged[0].flag, StepFlag::MidFlight);
  EXPECT_EQ(steady.flagged[0].number, 1);
  EXPECT_EQ(steady.flagged[0].ns, 5 * kMs);
}

}  // namespace
