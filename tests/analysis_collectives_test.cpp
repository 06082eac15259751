// Collectives across ranks (analysis/collectives.hpp): instances matched across ranks, arrival
// skew and the last rank, waiting inside collectives, nccl-tests' bandwidths, the straggler with
// its evidence, and the problems of a set of ranks (missing, from another job, other steps).
#include <dlprof/analysis/collectives.hpp>

#include "analysis_trace_builder.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace analysis = dlprof::analysis;
using analysis::RankCollectives;
using analysis::StepPhase;
using ::testing::HasSubstr;
using dlprof_test::kMs;

/// `steps` steps of 100 ms from t = 0 on `rank` of `world`: forward 30 ms (+ `extra_forward`),
/// backward 40 ms, then one all-reduce of 1 Mi floats per step, entered at the end of backward,
/// which ends for everyone 1 ms after the last rank enters (`late` of each rank given).
RankCollectives rank_of(std::int64_t rank, std::int64_t world, int steps, std::int64_t extra_forward,
                        const std::vector<std::int64_t>& late) {
  RankCollectives summary;
  summary.rank = rank;
  summary.world_size = world;
  std::int64_t latest = 0;
  for (const std::int64_t l : late) latest = std::max(latest, l);
  for (int s = 0; s < steps; ++s) {
    const std::int64_t t0 = s * 100 * kMs;
    RankCollectives::Step step;
    step.number = s;
    step.duration_ns = 100 * kMs;
    step.phase_ns[static_cast<std::size_t>(StepPhase::Forward)] = 30 * kMs + extra_forward;
    step.phase_ns[static_cast<std::size_t>(StepPhase::Backward)] = 40 * kMs;
    summary.steps.push_back(step);
    RankCollectives::Call call;
    call.group = "0";
    call.name = "allreduce";
    call.seq = s;
    call.step = s;
    call.group_size = world;
    call.bytes = 4 << 20;
    call.start_ns = t0 + 70 * kMs + late[static_cast<std::size_t>(rank)];
    call.end_ns = t0 + 70 * kMs + latest + kMs;
    summary.steps.back().phase_ns[static_cast<std::size_t>(StepPhase::Communication)] = call.end_ns - call.start_ns;
    summary.calls.push_back(call);
  }
  return summary;
}

TEST(CollectiveAnalysisTest, TheRankThatArrivesLastIsTheStragglerWithThePhaseThatMakesItLate) {
  const std::vector<std::int64_t> late{0, 1 * kMs, 20 * kMs, 2 * kMs};
  std::vector<RankCollectives> ranks;
  for (std::int64_t r = 0; r < 4; ++r) ranks.push_back(rank_of(r, 4, 3, r == 2 ? 20 * kMs : 0, late));
  const analysis::CollectiveAnalysis result = analysis::analyze_collectives(ranks);
  EXPECT_TRUE(result.problems.empty());
  ASSERT_EQ(result.instances.size(), 3u);
  for (const analysis::CollectiveInstance& instance : result.instances) {
    EXPECT_EQ(instance.ranks, 4u);
    EXPECT_EQ(instance.last_rank, 2);
    EXPECT_EQ(instance.skew_ns(), 20 * kMs);
    EXPECT_EQ(instance.transfer_ns, kMs);
  }
  ASSERT_TRUE(result.straggler.has_value());
  const analysis::Straggler& straggler = *result.straggler;
  EXPECT_EQ(straggler.rank, 2);
  EXPECT_EQ(straggler.last_arrivals, 3u);
  EXPECT_EQ(straggler.instances, 3u);
  EXPECT_DOUBLE_EQ(straggler.mean_lateness_ns, 20.0 * kMs);
  EXPECT_EQ(straggler.phase, StepPhase::Forward);
  EXPECT_DOUBLE_EQ(straggler.excess_ns(), 20.0 * kMs);
  ASSERT_EQ(result.ranks.size(), 4u);
  EXPECT_DOUBLE_EQ(result.ranks[0].waiting_ns, 20.0 * kMs) << "rank 0 waits for rank 2 in every step";
  EXPECT_DOUBLE_EQ(result.ranks[1].waiting_ns, 19.0 * kMs);
  EXPECT_DOUBLE_EQ(result.ranks[2].waiting_ns, 0.0);
  EXPECT_DOUBLE_EQ(result.ranks[2].communication_ns, 1.0 * kMs);
}

TEST(CollectiveAnalysisTest, BandwidthsAreNcclTestsAlgorithmAndBusBandwidths) {
  std::vector<RankCollectives> ranks;
  for (std::int64_t r = 0; r < 4; ++r) ranks.push_back(rank_of(r, 4, 2, 0, {0, 0, 0, 0}));
  const analysis::CollectiveAnalysis result = analysis::analyze_collectives(ranks);
  ASSERT_EQ(result.types.size(), 1u);
  const analysis::CollectiveTypeStats& all_reduce = result.types[0];
  EXPECT_EQ(all_reduce.name, "allreduce");
  EXPECT_EQ(all_reduce.calls, 2u);
  EXPECT_EQ(all_reduce.bytes, 2 * (4 << 20));
  EXPECT_EQ(all_reduce.transfer_ns, 2 * kMs);
  EXPECT_NEAR(all_reduce.algorithm_gbps(), 4.194304, 1e-9);  // 4 MiB in 1 ms
  EXPECT_NEAR(all_reduce.bus_gbps(), 4.194304 * 1.5, 1e-9);  // 2(n-1)/n on 4 ranks
  EXPECT_FALSE(result.straggler.has_value()) << "nobody arrives last: no straggler";
  EXPECT_DOUBLE_EQ(analysis::bus_bandwidth_factor("allgather", 4), 0.75);
  EXPECT_DOUBLE_EQ(analysis::bus_bandwidth_factor("broadcast", 4), 1.0);
  EXPECT_EQ(analysis::dtype_bytes("BFloat16"), 2);
  EXPECT_EQ(analysis::dtype_bytes("NoSuchType"), 0);
}

TEST(CollectiveAnalysisTest, MissingRanksOtherJobsAndOtherStepsAreNamed) {
  std::vector<RankCollectives> ranks;
  ranks.push_back(rank_of(0, 4, 3, 0, {0, 0, 0, 0}));
  ranks.push_back(rank_of(1, 4, 3, 0, {0, 0, 0, 0}));
  RankCollectives other_steps = rank_of(2, 4, 3, 0, {0, 0, 0, 0});
  for (auto& step : other_steps.steps) step.number += 1;
  ranks.push_back(other_steps);
  ranks.push_back(rank_of(5, 8, 3, 0, {0, 0, 0, 0, 0, 0, 0, 0}));  // another job's rank 5
  const analysis::CollectiveAnalysis result = analysis::analyze_collectives(ranks);
  ASSERT_EQ(result.problems.size(), 3u);
  EXPECT_THAT(result.problems[0], HasSubstr("rank 5 says the world has 8 ranks, the others 4"));
  EXPECT_THAT(result.problems[1], HasSubstr("no trace of rank 3 of 4"));
  EXPECT_THAT(result.problems[2], HasSubstr("ranks 0, 1: steps 0, 1, 2; rank 2: steps 1, 2, 3"));
  EXPECT_EQ(result.ranks.size(), 3u);
  EXPECT_EQ(result.instances.size(), 3u) << "matched by Seq whatever the step numbers";
}

// A rank of another job with the same world size lists other members in a group that the other
// ranks list too; groups a rank does not list (subgroups it is not in) are not held against it.
TEST(CollectiveAnalysisTest, ARankWhoseProcessGroupDiffersIsFromAnotherJob) {
  const dlprof::ProcessGroupInfo world{"0", "default_pg", "cpu:gloo", 4, {0, 1, 2, 3}};
  std::vector<RankCollectives> ranks;
  for (std::int64_t r = 0; r < 4; ++r) {
    ranks.push_back(rank_of(r, 4, 2, 0, {0, 0, 0, 0}));
    ranks.back().groups = {world, dlprof::ProcessGroupInfo{r < 2 ? "1" : "2", "", "cpu:gloo", 2, {r / 2 * 2, r / 2 * 2 + 1}}};
  }
  ranks.push_back(rank_of(3, 4, 2, 0, {0, 0, 0, 0}));
  ranks.back().groups = {dlprof::ProcessGroupInfo{"0", "default_pg", "cpu:gloo", 4, {0, 1, 2, 4}}};
  ranks.push_back(rank_of(2, 4, 2, 0, {0, 0, 0, 0}));  // lists no groups: not compared
  const analysis::CollectiveAnalysis result = analysis::analyze_collectives(ranks);
  ASSERT_EQ(result.problems.size(), 2u) << fmt::format("{}", fmt::join(result.problems, "\n"));
  EXPECT_EQ(result.problems[0],
            "rank 3's process group \"0\" is cpu:gloo of 4 ranks [0, 1, 2, 4], the other ranks' cpu:gloo of 4 ranks [0, 1, 2, 3]: "
            "it is from another job, left out");
  EXPECT_THAT(result.problems[1], HasSubstr("rank 2 has more than one trace in this window"));
  EXPECT_EQ(result.ranks.size(), 4u);
}

/// An all-reduce of 1000 floats in group "0" of two ranks, as its record_param_comms op says.
dlprof::CollectiveCall all_reduce_of_two(std::string_view backend, std::int64_t seq) {
  dlprof::CollectiveCall call;
  call.name = "allreduce";
  call.backend = std::string(backend);
  call.dtype = "Float";
  call.in_nelems = call.out_nelems = 1000;
  call.group_size = 2;
  call.group_name = "0";
  call.seq = seq;
  return call;
}

TEST(CollectiveAnalysisTest, ATracesCollectivesAreSummarizedOnTheReferenceClock) {
  const dlprof::CollectiveCall call = all_reduce_of_two("gloo", 9);
  dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                            .rank(1, 2)
                            .step(3, 100 * kMs, 200 * kMs)
                            .range("forward", 110 * kMs, 150 * kMs, dlprof::Category::Forward)
                            .collective(call, 160 * kMs, 170 * kMs)
                            .trace();
  trace.distributed.clock_offset = dlprof::ClockOffset{0, -5 * kMs, 10'000, 8};
  const RankCollectives summary = analysis::summarize_collectives(trace);
  ASSERT_EQ(summary.steps.size(), 1u);
  EXPECT_EQ(summary.steps[0].number, 3);
  EXPECT_EQ(summary.steps[0].phase_ns[static_cast<std::size_t>(StepPhase::Forward)], 40 * kMs);
  EXPECT_EQ(summary.steps[0].phase_ns[static_cast<std::size_t>(StepPhase::Communication)], 10 * kMs);
  EXPECT_EQ(summary.steps[0].compute_ns, 40 * kMs);
  EXPECT_EQ(summary.steps[0].exposed_communication_ns, 10 * kMs);
  ASSERT_EQ(summary.calls.size(), 1u);
  EXPECT_EQ(summary.calls[0].start_ns, 155 * kMs) << "5 ms earlier on rank 0's clock";
  EXPECT_EQ(summary.calls[0].end_ns, 165 * kMs);
  EXPECT_EQ(summary.calls[0].bytes, 4000);
  EXPECT_EQ(summary.calls[0].step, 3);
  EXPECT_FALSE(summary.calls[0].on_device);
}

// NCCL: the host launches the all-reduce and goes on; the kernel waits on the device for the other
// ranks. A call that launched kernels (linked to c10d's nccl:all_reduce op inside its
// record_param_comms) arrives when its first kernel starts and ends when its last one ends.
TEST(CollectiveAnalysisTest, ACallThatLaunchedKernelsIsTimedOnTheDevice) {
  const dlprof::CollectiveCall call = all_reduce_of_two("nccl", 4);
  dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                            .rank(1, 2)
                            .step(3, 100 * kMs, 200 * kMs)
                            .collective(call, 160 * kMs, 161 * kMs)
                            .op("nccl:all_reduce", 160 * kMs + 10'000, 161 * kMs - 10'000, 77, dlprof::Category::Communication)
                            .call("cudaLaunchKernel", 160 * kMs + 20'000, 160 * kMs + 30'000, 5, 77)
                            .kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 175 * kMs, 182 * kMs, 5, 77, 21)
                            .kernel("void gemm<float>()", 150 * kMs, 159 * kMs, 6, 0)
                            .trace();
  trace.distributed.clock_offset = dlprof::ClockOffset{0, 2 * kMs, 10'000, 8};
  const RankCollectives summary = analysis::summarize_collectives(trace);
  ASSERT_EQ(summary.calls.size(), 1u);
  EXPECT_TRUE(summary.calls[0].on_device);
  EXPECT_EQ(summary.calls[0].start_ns, 177 * kMs) << "the kernel's start, on rank 0's clock";
  EXPECT_EQ(summary.calls[0].end_ns, 184 * kMs);
}

}  // namespace
