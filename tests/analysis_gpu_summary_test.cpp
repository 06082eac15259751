// nvprof's "GPU activities" and "API calls" on a hand-built trace.
#include <dlprof/analysis/gpu_summary.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "analysis_trace_builder.hpp"

namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

//   gemm       3 calls: 40, 60, 50 µs   -> 150 µs
//   relu       2 calls: 10, 20 µs       ->  30 µs
//   HtoD copy  2 calls: 5 µs (kind from CUPTI), 7 µs (kind only in the name) -> 12 µs
//   DtoH copy  1 call:  8 µs
//   memset     1 call:  2 µs
//   sync and annotation: not activities
//   API: cudaLaunchKernel 5 calls of 4 µs, cudaMemcpyAsync 3 of 6 µs, cudaMemsetAsync 1 of 3 µs,
//        cudaStreamSynchronize 1 of 100 µs
dlprof::Trace summary_trace() {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.kernel("gemm", 0, 40'000, 1)
      .kernel("gemm", 100'000, 160'000, 2)
      .kernel("gemm", 200'000, 250'000, 3)
      .kernel("relu", 300'000, 310'000, 4)
      .kernel("relu", 400'000, 420'000, 5)
      .memcpy(1, 500'000, 505'000, 6)
      .memcpy(2, 600'000, 608'000, 7, 0, 0, 7, 3, 2)
      .memset(700'000, 702'000, 8)
      .sync("Stream Sync", 800'000, 900'000, 9)
      .annotation("forward", 0, 900'000, 1);
  for (std::uint32_t i = 0; i < 5; ++i) builder.call("cudaLaunchKernel", i * 10'000, i * 10'000 + 4'000, i + 1);
  builder.call("cudaMemcpyAsync", 60'000, 66'000, 6)
      .call("cudaMemcpyAsync", 70'000, 76'000, 7)
      .call("cudaMemcpyAsync", 80'000, 86'000, 10)
      .call("cudaMemsetAsync", 90'000, 93'000, 8)
      .call("cudaStreamSynchronize", 800'000, 900'000, 9);
  // A copy whose trace lost CUPTI's kind (a foreign trace without it): its name still says HtoD.
  builder.memcpy(0, 1'000'000, 1'007'000, 10);
  dlprof::Trace trace = builder.trace();
  for (dlprof::GpuEvent& work : trace.gpu_events)
    if (work.start_ns == 1'000'000) work.name = static_cast<std::uint32_t>(trace.names.size());
  trace.names.emplace_back("Memcpy HtoD (Pinned -> Device)");
  return trace;
}

TEST(GpuSummaryTest, GroupsKernelsByNameAndCopiesByKind) {
  const dlprof::Trace trace = summary_trace();
  const auto summary = dlprof::analysis::gpu_summary(trace);
  ASSERT_EQ(summary.gpu_activities.size(), 5u);
  const auto& gemm = summary.gpu_activities[0];
  EXPECT_EQ(gemm.name, "gemm");
  EXPECT_EQ(gemm.calls, 3u);
  EXPECT_EQ(gemm.total_ns, 150'000);
  EXPECT_EQ(gemm.min_ns, 40'000);
  EXPECT_EQ(gemm.max_ns, 60'000);
  EXPECT_DOUBLE_EQ(gemm.mean_ns, 50'000.0);
  EXPECT_DOUBLE_EQ(gemm.stddev_ns, 10'000.0);
  EXPECT_EQ(summary.gpu_activities[1].name, "relu");
  EXPECT_EQ(summary.gpu_activities[2].name, "[CUDA memcpy HtoD]");
  EXPECT_EQ(summary.gpu_activities[2].calls, 2u);
  EXPECT_EQ(summary.gpu_activities[2].total_ns, 12'000);
  EXPECT_EQ(summary.gpu_activities[3].name, "[CUDA memcpy DtoH]");
  EXPECT_EQ(summary.gpu_activities[4].name, "[CUDA memset]");
  EXPECT_EQ(summary.gpu_activities_ns, 150'000 + 30'000 + 12'000 + 8'000 + 2'000);
  EXPECT_DOUBLE_EQ(dlprof::analysis::GpuSummary::percent(gemm, summary.gpu_activities_ns), 100.0 * 150 / 202);
}

TEST(GpuSummaryTest, GroupsApiCallsByName) {
  const dlprof::Trace trace = summary_trace();
  const auto summary = dlprof::analysis::gpu_summary(trace);
  ASSERT_EQ(summary.api_calls.size(), 4u);
  EXPECT_EQ(summary.api_calls[0].name, "cudaStreamSynchronize");
  EXPECT_EQ(summary.api_calls[1].name, "cudaLaunchKernel");
  EXPECT_EQ(summary.api_calls[1].calls, 5u);
  EXPECT_EQ(summary.api_calls[1].total_ns, 20'000);
  EXPECT_EQ(summary.api_calls[2].name, "cudaMemcpyAsync");
  EXPECT_EQ(summary.api_calls[3].name, "cudaMemsetAsync");
  EXPECT_EQ(summary.api_calls_ns, 100'000 + 20'000 + 18'000 + 3'000);
}

TEST(GpuSummaryTest, PrintsNvprofsColumns) {
  const dlprof::Trace trace = summary_trace();
  const std::string table = dlprof::analysis::gpu_summary(trace).table();
  EXPECT_THAT(table, HasSubstr("Time(%)"));
  EXPECT_THAT(table, ContainsRegex("GPU activities:  +74\\.26%  +150\\.000us +3  +50\\.000us  +40\\.000us  +60\\.000us  gemm"));
  EXPECT_THAT(table, ContainsRegex("API calls:  +70\\.92%  +100\\.000us +1 .* cudaStreamSynchronize"));
  EXPECT_THAT(table, HasSubstr("[CUDA memset]"));
}

}  // namespace
