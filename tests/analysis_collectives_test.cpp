// Collectives across ranks (analysis/collectives.hpp): instances matched across ranks (by Seq, or
// by the order of the communication kernels in each step where the trace names no collective),
// arrival skew and the last rank (ends aligned on the device, starts on the host), waiting and
// transfer inside collectives, nccl-tests' bandwidths, the straggler with its evidence, and the
// problems of a set of ranks (missing, from another job, other steps).
#include <dlprof/analysis/collectives.hpp>
#include <dlprof/analysis/rank_comparison.hpp>
#include <dlprof/analysis/recommendations.hpp>

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
    EXPECT_EQ(instance.skew_ns, 20 * kMs);
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

TEST(CollectiveAnalysisTest, NcclAndRcclKernelsNameTheirCollective) {
  EXPECT_EQ(analysis::collective_of_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"), "allreduce");
  EXPECT_EQ(analysis::collective_of_kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"),
            "reduce_scatter");
  EXPECT_EQ(analysis::collective_of_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"), "allgather");
  EXPECT_EQ(analysis::collective_of_kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)"), "broadcast");
  EXPECT_EQ(analysis::collective_of_kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), "sendrecv");
  EXPECT_EQ(analysis::collective_of_kernel("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"), "nccl");
  EXPECT_EQ(analysis::collective_of_kernel("ampere_sgemm_128x64_nn"), "");
  EXPECT_EQ(analysis::collective_of_kernel("ncclFooBar"), "") << "HTA's rule: nccl...Kernel";
}

// The traces name no collective: each rank's communication kernels are its calls, matched across
// the ranks by their order in each step, and the ranks' clocks need not agree.
TEST(CollectiveAnalysisTest, KernelsAloneAreMatchedByTheirOrderAndEndAligned) {
  const std::vector<dlprof::Trace> traces = dlprof_test::ranks_waiting_for_a_late_rank();
  std::vector<RankCollectives> ranks;
  for (const dlprof::Trace& trace : traces) ranks.push_back(analysis::summarize_collectives(trace));
  ASSERT_EQ(ranks[2].calls.size(), 2u);
  EXPECT_EQ(ranks[2].calls[0].name, "sendrecv");
  EXPECT_EQ(ranks[2].calls[0].step, 5);
  EXPECT_EQ(ranks[2].calls[1].step, 6);
  EXPECT_TRUE(ranks[2].calls[0].on_device);
  EXPECT_EQ(ranks[2].calls[0].group_size, 4);
  EXPECT_EQ(ranks[2].calls[0].bytes, 0) << "sizes are unknown";

  const analysis::CollectiveAnalysis result = analysis::analyze_collectives(ranks);
  EXPECT_TRUE(result.problems.empty()) << fmt::format("{}", fmt::join(result.problems, "\n"));
  ASSERT_EQ(result.instances.size(), 2u);
  for (const analysis::CollectiveInstance& instance : result.instances) {
    EXPECT_EQ(instance.ranks, 4u);
    EXPECT_EQ(instance.last_rank, 3);
    EXPECT_EQ(instance.transfer_ns, 10'000) << "rank 3's kernel: it did not wait";
    EXPECT_EQ(instance.skew_ns, 7'300'000) << "rank 0 waited 7.6 - 0.3 ms";
    EXPECT_EQ(instance.waiting_ns, 7'300'000 + 6'500'000 + 5'200'000);
  }
  ASSERT_EQ(result.ranks.size(), 4u);
  const double waited[] = {7'300'000, 6'500'000, 5'200'000, 0};
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(result.ranks[r].waiting_ns, waited[r]) << "rank " << r << ", per step";
    EXPECT_DOUBLE_EQ(result.ranks[r].transfer_ns, 10'000) << "rank " << r << ", per step";
  }
  EXPECT_EQ(result.ranks[3].last_arrivals, 2u);
  ASSERT_EQ(result.types.size(), 1u);
  const analysis::CollectiveTypeStats& all_to_all = result.types[0];
  EXPECT_EQ(all_to_all.calls, 2u);
  EXPECT_FALSE(all_to_all.has_bytes());
  EXPECT_DOUBLE_EQ(all_to_all.latency_ns(), 10'000);
  EXPECT_DOUBLE_EQ(all_to_all.mean_waiting_ns, (7'300'000 + 6'500'000 + 5'200'000) / 4.0);
  EXPECT_EQ(all_to_all.max_skew_ns, 7'300'000);

  ASSERT_TRUE(result.straggler.has_value());
  EXPECT_EQ(result.straggler->rank, 3);
  EXPECT_EQ(result.straggler->last_arrivals, 2u);
  EXPECT_DOUBLE_EQ(result.straggler->mean_lateness_ns, 7'300'000);
  EXPECT_DOUBLE_EQ(result.straggler->held_back_ns, 7'300'000) << "one collective per step";
  EXPECT_FALSE(result.straggler->phase.has_value()) << "the traces annotate no phase";
}

// Step lengths name rank 0, which waits the most; the collectives name rank 3, which everyone waits
// for. The finding is the collectives': balanced, the others stop waiting 7.3 ms per step for it.
TEST(CollectiveAnalysisTest, TheStragglerIsTheLastToArriveNeverTheRankWithTheLongestSteps) {
  const std::vector<dlprof::Trace> traces = dlprof_test::ranks_waiting_for_a_late_rank();
  const analysis::RankComparison by_steps = analysis::compare_ranks(traces);
  ASSERT_FALSE(by_steps.steps.empty());
  EXPECT_EQ(by_steps.steps[0].slowest_rank, 0) << "the rank that waits longest has the longest steps";

  const std::vector<analysis::Recommendation> found = analysis::recommendations(traces);
  std::vector<const analysis::Recommendation*> stragglers;
  for (const analysis::Recommendation& finding : found)
    if (finding.id == "straggler") stragglers.push_back(&finding);
  ASSERT_EQ(stragglers.size(), 1u);
  const analysis::Recommendation& straggler = *stragglers[0];
  EXPECT_EQ(straggler.worst_rank, 3);
  EXPECT_THAT(straggler.ranks, ::testing::ElementsAre(3));
  EXPECT_THAT(straggler.text, HasSubstr("Rank 3 arrives last at 2 of 2 collectives, 7.300 ms after the first rank"));
  EXPECT_THAT(straggler.text, HasSubstr("No annotated phase of its steps is longer than the other ranks'"));
  EXPECT_DOUBLE_EQ(straggler.impact_ns, 7'300'000);
}

// Rank 1 has no trace: ranks 0, 2 and 3 may all be waiting for it, so rank 3 is not named.
TEST(CollectiveAnalysisTest, NoStragglerIsNamedWhileARankOfTheWorldIsMissing) {
  std::vector<RankCollectives> ranks;
  for (const dlprof::Trace& trace : dlprof_test::ranks_waiting_for_a_late_rank())
    if (trace.distributed.rank != 1) ranks.push_back(analysis::summarize_collectives(trace));
  const analysis::CollectiveAnalysis result = analysis::analyze_collectives(ranks);
  EXPECT_EQ(result.world_size, 4);
  EXPECT_EQ(result.missing_ranks, 1u);
  EXPECT_EQ(result.instances.size(), 2u);
  EXPECT_EQ(result.instances[0].last_rank, 3);
  EXPECT_FALSE(result.straggler.has_value());
}

// Without collectives, and without communication kernels, nothing says who waits for whom: a rank
// with longer steps is not called a straggler.
TEST(CollectiveAnalysisTest, RanksWithoutCollectivesHaveNoStragglerWhateverTheirSteps) {
  std::vector<dlprof::Trace> ranks;
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    dlprof_test::AnalysisTraceBuilder builder;
    builder.rank(rank, 2);
    for (std::int64_t n = 0; n < 3; ++n) builder.step(10 + n, n * 2 * kMs, n * 2 * kMs + (rank == 1 ? 1'300'000 : kMs));
    ranks.push_back(builder.trace());
  }
  for (const analysis::Recommendation& finding : analysis::recommendations(ranks)) EXPECT_NE(finding.id, "straggler");
}

// On the device the ends are aligned: the rank with the shortest kernel came last, whatever the
// starts say on clocks that disagree. On the host (c10d's op may return before the collective
// completes) the starts are compared.
TEST(CollectiveAnalysisTest, OnTheDeviceTheShortestCallCameLastOnTheHostTheLatestStart) {
  std::vector<RankCollectives> ranks;
  for (std::int64_t r = 0; r < 2; ++r) {
    RankCollectives summary = rank_of(r, 2, 1, 0, {0, 0});
    RankCollectives::Call& call = summary.calls[0];
    call.on_device = true;
    // Rank 1's clock runs 4 ms ahead: its kernel starts "later" but runs 3 ms, rank 0's 1 ms.
    call.start_ns = r == 0 ? 70 * kMs : 72 * kMs;
    call.end_ns = r == 0 ? 71 * kMs : 75 * kMs;
    ranks.push_back(summary);
  }
  const analysis::CollectiveAnalysis on_device = analysis::analyze_collectives(ranks);
  ASSERT_EQ(on_device.instances.size(), 1u);
  EXPECT_EQ(on_device.instances[0].last_rank, 0);
  EXPECT_EQ(on_device.instances[0].transfer_ns, kMs);
  EXPECT_EQ(on_device.instances[0].skew_ns, 2 * kMs);
  EXPECT_DOUBLE_EQ(on_device.ranks[1].waiting_ns, 2.0 * kMs);

  for (RankCollectives& rank : ranks) rank.calls[0].on_device = false;
  const analysis::CollectiveAnalysis on_host = analysis::analyze_collectives(ranks);
  EXPECT_EQ(on_host.instances[0].last_rank, 1);
  EXPECT_EQ(on_host.instances[0].skew_ns, 2 * kMs);
  EXPECT_EQ(on_host.instances[0].transfer_ns, 3 * kMs) << "from the last start to the last end";
  EXPECT_DOUBLE_EQ(on_host.ranks[0].waiting_ns, 2.0 * kMs);
}

}  // namespace
