// Each step's figures of a trace and of its ops, kernels, shapes and collectives
// (analysis/step_samples.hpp), on hand-built traces: ops and kernels counted in the step they were
// launched in, work outside every step left out, step numbers out of the keys.
#include <dlprof/analysis/step_samples.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::SampleKey;
using dlprof::analysis::StepSamples;
using dlprof_test::kMs;
using dlprof_test::kUs;

/// Steps 7, 8 and 9 of 10 ms. In each, aten::linear (2 ms) holds aten::addmm (1.5 ms), which
/// launches a GEMM that runs from 9 ms to 10.5 ms of the step: past the step's host end. Step k
/// (from 0) calls aten::add k + 1 times, 100 us each, each launching a 10 us kernel. An op before
/// the first step belongs to no step.
dlprof::Trace three_steps() {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.op("aten::zeros", 0, 1 * kMs);
  std::uint32_t correlation = 1;
  std::uint64_t external_id = 1;
  for (std::int64_t k = 0; k < 3; ++k) {
    const std::int64_t t = 5 * kMs + k * 12 * kMs;
    builder.step(7 + k, t, t + 10 * kMs);
    builder.op("aten::linear", t + 1 * kMs, t + 3 * kMs, external_id++)
        .inputs("[[8, 16], [16, 16]]", "[\"float\", \"float\"]", 4096);
    builder.op("aten::addmm", t + 1 * kMs, t + 2500 * kUs, external_id)
        .inputs("[[16], [8, 16], [16, 16]]", "[\"float\", \"float\", \"float\"]");
    builder.call("cudaLaunchKernel", t + 2 * kMs, t + 2100 * kUs, correlation, external_id);
    builder.kernel("ampere_sgemm_32x32_sliced1x4_nn", t + 9 * kMs, t + 10500 * kUs, correlation++, external_id++);
    for (std::int64_t call = 0; call <= k; ++call) {
      const std::int64_t at = t + 4 * kMs + call * 200 * kUs;
      builder.op("aten::add", at, at + 100 * kUs, external_id);
      builder.call("cudaLaunchKernel", at + 10 * kUs, at + 20 * kUs, correlation, external_id);
      builder.kernel(dlprof_test::kBf16AddKernel, at + 30 * kUs, at + 40 * kUs, correlation++, external_id++);
    }
  }
  return builder.trace();
}

StepSamples samples_of(const dlprof::Trace& trace, SampleKey key) {
  return dlprof::analysis::step_samples(trace, dlprof::analysis::step_breakdown(trace), key);
}

TEST(StepSamplesTest, EachOpHasItsFiguresInEachStepAndWorkOutsideTheStepsIsLeftOut) {
  const StepSamples samples = samples_of(three_steps(), SampleKey::Op);
  ASSERT_EQ(samples.steps.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(samples.steps[k].number, 7 + static_cast<std::int64_t>(k));
    // The GEMM ends 0.5 ms after the step's host end: the step lasts until then.
    EXPECT_EQ(samples.steps[k].duration_ns, 10500 * kUs);
    EXPECT_EQ(samples.steps[k].gpu_busy_ns, 1500 * kUs + static_cast<std::int64_t>(k + 1) * 10 * kUs);
    EXPECT_EQ(samples.steps[k].flops, 4096u);
  }
  EXPECT_EQ(samples.find("aten::zeros"), nullptr);
  const auto* addmm = samples.find("aten::addmm");
  ASSERT_NE(addmm, nullptr);
  for (const auto& step : addmm->steps) {
    EXPECT_EQ(step.calls, 1);
    EXPECT_EQ(step.total_ns, 1500 * kUs);
    EXPECT_EQ(step.self_ns, 1500 * kUs);
    EXPECT_EQ(step.gpu_self_ns, 1500 * kUs);
  }
  const auto* linear = samples.find("aten::linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->steps[0].self_ns, 500 * kUs);
  EXPECT_EQ(linear->steps[0].gpu_self_ns, 0);
  EXPECT_EQ(linear->steps[0].gpu_total_ns, 1500 * kUs);
  const auto* add = samples.find("aten::add");
  ASSERT_NE(add, nullptr);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(add->steps[k].calls, static_cast<std::int64_t>(k + 1));
    EXPECT_EQ(add->steps[k].self_ns, static_cast<std::int64_t>(k + 1) * 100 * kUs);
    EXPECT_EQ(add->steps[k].gpu_self_ns, static_cast<std::int64_t>(k + 1) * 10 * kUs);
  }
  // Steps are one key whatever their numbers.
  const auto* step = samples.find("ProfilerStep#*");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->sum().calls, 3);
  EXPECT_EQ(samples.find("ProfilerStep#7"), nullptr);
}

TEST(StepSamplesTest, KernelsCountInTheStepTheirLaunchLiesInByFullOrShortName) {
  const dlprof::Trace trace = three_steps();
  const StepSamples full = samples_of(trace, SampleKey::Kernel);
  const auto* gemm = full.find("ampere_sgemm_32x32_sliced1x4_nn");
  ASSERT_NE(gemm, nullptr);
  for (const auto& step : gemm->steps) {
    EXPECT_EQ(step.calls, 1);
    EXPECT_EQ(step.gpu_self_ns, 1500 * kUs);
    EXPECT_EQ(step.self_ns, 0);
  }
  ASSERT_NE(full.find(dlprof_test::kBf16AddKernel), nullptr);
  EXPECT_EQ(full.find(dlprof_test::kBf16AddKernel)->steps[2].calls, 3);

  const StepSamples short_names = samples_of(trace, SampleKey::KernelShortName);
  const std::string add = dlprof::analysis::short_kernel_name(dlprof_test::kBf16AddKernel);
  EXPECT_LT(add.size(), dlprof_test::kBf16AddKernel.size());
  ASSERT_NE(short_names.find(add), nullptr);
  EXPECT_EQ(short_names.find(add)->sum().calls, 6);
  for (const auto& counts : short_names.kernels_by_type) EXPECT_GT(counts[0] + counts[1] + counts[2], 0);
}

TEST(StepSamplesTest, ShapesSplitAnOpAndDataTypesAreGathered) {
  const StepSamples samples = samples_of(three_steps(), SampleKey::OpAndShapes);
  EXPECT_NE(samples.find("aten::linear [[8, 16], [16, 16]]"), nullptr);
  EXPECT_NE(samples.find("aten::add"), nullptr);  // recorded without shapes
  EXPECT_EQ(samples.dtypes, (std::set<std::string>{"float"}));
}

TEST(StepSamplesTest, CollectivesAreKeyedByNameTypeSizeAndGroup) {
  dlprof_test::AnalysisTraceBuilder builder;
  for (std::int64_t k = 0; k < 2; ++k) {
    const std::int64_t t = k * 10 * kMs;
    builder.step(k, t, t + 9 * kMs);
    dlprof::CollectiveCall call;
    call.name = "allreduce";
    call.dtype = "Float";
    call.in_nelems = 1024;
    call.group_name = "0";
    call.group_desc = "default_pg";
    builder.collective(call, t + 1 * kMs, t + 3 * kMs);
  }
  const StepSamples samples = samples_of(builder.trace(), SampleKey::Collective);
  ASSERT_EQ(samples.keys.size(), 1u);
  EXPECT_EQ(samples.keys[0].key, "allreduce Float\u00d71024 in group 0 (default_pg)");
  EXPECT_EQ(samples.keys[0].steps[1].total_ns, 2 * kMs);
}

TEST(StepSamplesTest, AStepTimeWithoutStepsIsTheWholeTraceAndNoStepGivesNoSamples) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.op("aten::mm", 0, 2 * kMs).op("aten::mm", 3 * kMs, 4 * kMs);
  const StepSamples whole = samples_of(builder.trace(), SampleKey::Op);
  ASSERT_EQ(whole.steps.size(), 1u);
  EXPECT_EQ(whole.steps[0].number, -1);
  ASSERT_NE(whole.find("aten::mm"), nullptr);
  EXPECT_EQ(whole.find("aten::mm")->steps[0].calls, 2);

  const StepSamples empty = samples_of(dlprof::Trace{}, SampleKey::Op);
  EXPECT_TRUE(empty.steps.empty());
  EXPECT_TRUE(empty.keys.empty());
}

}  // namespace
