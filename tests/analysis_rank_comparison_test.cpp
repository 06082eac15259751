// Ranks side by side and each step's straggler, on three hand-built ranks.
#include <dlprof/analysis/rank_comparison.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using ::testing::HasSubstr;

// Step times (ns):   step 1   step 2   step 3
//   rank 0             100      100
//   rank 1             150      100             (a kernel in each step)
//   rank 2             120      180      50     (step 3 on this rank only)
std::vector<dlprof::Trace> three_ranks() {
  std::vector<dlprof::Trace> traces;
  traces.push_back(dlprof_test::AnalysisTraceBuilder().rank(2, 3).step(1, 0, 120).step(2, 120, 300).step(3, 300, 350).trace());
  traces.push_back(dlprof_test::AnalysisTraceBuilder().rank(0, 3).step(1, 0, 100).step(2, 100, 200).trace());
  traces.push_back(dlprof_test::AnalysisTraceBuilder()
                       .rank(1, 3)
                       .step(1, 0, 150)
                       .step(2, 150, 250)
                       .call("cudaLaunchKernel", 5, 8, 1)
                       .kernel("k", 10, 60, 1)
                       .call("cudaLaunchKernel", 160, 170, 2)
                       .kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 200, 240, 2)
                       .trace());
  return traces;
}

TEST(RankComparisonTest, SummarisesEveryRank) {
  const auto comparison = dlprof::analysis::compare_ranks(three_ranks());
  ASSERT_EQ(comparison.ranks.size(), 3u);
  EXPECT_EQ(comparison.ranks[0].rank, 0);
  EXPECT_EQ(comparison.ranks[0].steps, 2u);
  EXPECT_DOUBLE_EQ(comparison.ranks[0].step_time_mean_ns, 100.0);
  const auto& rank1 = comparison.ranks[1];
  EXPECT_EQ(rank1.rank, 1);
  EXPECT_DOUBLE_EQ(rank1.step_time_mean_ns, 125.0);
  EXPECT_EQ(rank1.step_time_min_ns, 100);
  EXPECT_EQ(rank1.step_time_max_ns, 150);
  EXPECT_DOUBLE_EQ(rank1.gpu_utilization, 90.0 / 250.0);
  EXPECT_EQ(rank1.temporal.kernel_time_ns, 230);
  EXPECT_EQ(rank1.temporal.idle_ns, 140);
  EXPECT_EQ(rank1.temporal.compute_ns, 50);
  EXPECT_EQ(rank1.overlap.communication_ns, 40);
  EXPECT_EQ(rank1.overlap.overlap_ns, 0);
  EXPECT_EQ(comparison.ranks[2].steps, 3u);
  EXPECT_DOUBLE_EQ(comparison.ranks[2].step_time_mean_ns, 350.0 / 3);
}

TEST(RankComparisonTest, NamesTheSlowestRankOfEachStep) {
  const auto comparison = dlprof::analysis::compare_ranks(three_ranks());
  ASSERT_EQ(comparison.steps.size(), 2u);  // step 3 ran on one rank only
  const auto& first = comparison.steps[0];
  EXPECT_EQ(first.step, 1);
  EXPECT_EQ(first.ranks, 3u);
  EXPECT_EQ(first.slowest_rank, 1);
  EXPECT_EQ(first.slowest_ns, 150);
  EXPECT_EQ(first.fastest_rank, 0);
  EXPECT_EQ(first.fastest_ns, 100);
  EXPECT_DOUBLE_EQ(first.median_ns, 120.0);
  EXPECT_DOUBLE_EQ(first.slowest_over_median_percent(), 25.0);
  EXPECT_DOUBLE_EQ(first.slowest_over_fastest_percent(), 50.0);
  const auto& second = comparison.steps[1];
  EXPECT_EQ(second.slowest_rank, 2);
  EXPECT_EQ(second.fastest_rank, 0);  // ranks 0 and 1 tie: the lower rank
  EXPECT_DOUBLE_EQ(second.median_ns, 100.0);
  EXPECT_DOUBLE_EQ(second.slowest_over_median_percent(), 80.0);

  const std::string table = comparison.table();
  EXPECT_THAT(table, HasSubstr("Step mean (us)"));
  EXPECT_THAT(table, HasSubstr("(r1)"));
}

TEST(RankComparisonTest, EvenRankCountsTakeTheMeanOfTheMiddleTwo) {
  std::vector<dlprof::Trace> traces;
  traces.push_back(dlprof_test::AnalysisTraceBuilder().rank(0, 2).step(7, 0, 100).trace());
  traces.push_back(dlprof_test::AnalysisTraceBuilder().rank(1, 2).step(7, 0, 130).trace());
  const auto step = dlprof::analysis::compare_ranks(traces).steps.at(0);
  EXPECT_DOUBLE_EQ(step.median_ns, 115.0);
  EXPECT_EQ(step.slowest_rank, 1);
  EXPECT_TRUE(dlprof::analysis::compare_ranks({}).ranks.empty());
}

}  // namespace
