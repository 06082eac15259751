// The HTA-style analyses on hand-built traces whose every number is worked out below.
#include <dlprof/analysis/analysis.hpp>
#include <dlprof/analysis/comm_comp_overlap.hpp>
#include <dlprof/analysis/idle_time_breakdown.hpp>
#include <dlprof/analysis/kernel_type.hpp>
#include <dlprof/analysis/kernel_type_breakdown.hpp>
#include <dlprof/analysis/launch_stats.hpp>
#include <dlprof/analysis/temporal_breakdown.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::AnalysisOptions;
using dlprof::analysis::KernelType;
using dlprof::analysis::kernel_type_bit;
using dlprof_test::hta_compat;
using dlprof_test::kNcclAllReduce;
using ::testing::HasSubstr;

constexpr const char* kSgemm = "volta_sgemm_128x64_nn";
constexpr const char* kReduce = "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)";
constexpr const char* kElementwise = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >()";
constexpr const char* kFill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >()";

// Three steps of 100 µs. GPU work (ns), stream 7 unless noted, with the call that launched it:
//   sgemm        [ 20000,  50000]  c1 cudaLaunchKernel  [ 10000,  15000]
//   nccl (s20)   [ 40000,  70000]  c2 cudaLaunchKernel  [ 16000,  18000]
//   reduce       [ 52000,  60000]  c7 cudaLaunchKernel  [ 19000,  19500]
//   memcpy HtoD  [ 80000,  90000]  c3 cudaMemcpyAsync   [ 61000,  62000]
//   elementwise  [150000, 160000]  c4 cudaLaunchKernel  [ 85000,  86000]
//   fill (s21)   [126000, 127000]  c8 cudaLaunchKernel  [120000, 125000]
//   Stream Sync  [161000, 190000]  c5 cudaStreamSynchronize [170000, 190000]
//   elementwise  [210000, 220000]  c6 cudaLaunchKernel  [205000, 206000]   (in the last step)
dlprof::Trace three_step_trace() {
  return dlprof_test::AnalysisTraceBuilder()
      .step(1, 0, 100'000)
      .step(2, 100'000, 200'000)
      .step(3, 200'000, 300'000)
      .call("cudaLaunchKernel", 10'000, 15'000, 1)
      .call("cudaLaunchKernel", 16'000, 18'000, 2)
      .call("cudaLaunchKernel", 19'000, 19'500, 7)
      .call("cudaMemcpyAsync", 61'000, 62'000, 3)
      .call("cudaLaunchKernel", 85'000, 86'000, 4)
      .call("cudaLaunchKernel", 120'000, 125'000, 8)
      .call("cudaStreamSynchronize", 170'000, 190'000, 5)
      .call("cudaLaunchKernel", 205'000, 206'000, 6)
      .kernel(kSgemm, 20'000, 50'000, 1)
      .kernel(kNcclAllReduce, 40'000, 70'000, 2, 0, 20)
      .kernel(kReduce, 52'000, 60'000, 7)
      .memcpy(1, 80'000, 90'000, 3, 4096)
      .kernel(kElementwise, 150'000, 160'000, 4)
      .kernel(kFill, 126'000, 127'000, 8, 0, 21)
      .sync("Stream Sync", 161'000, 190'000, 5)
      .kernel(kElementwise, 210'000, 220'000, 6)
      .trace();
}

TEST(KernelTypeTest, FollowsHta050sPatternsInOrder) {
  using dlprof::analysis::kernel_type;
  EXPECT_EQ(kernel_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
            KernelType::Communication);
  EXPECT_EQ(kernel_type("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), KernelType::Communication);
  // ^nccl.*Kernel: an nccl name without "Kernel" after it is computation in 0.5.0.
  EXPECT_EQ(kernel_type("nccl_custom_reduce"), KernelType::Computation);
  EXPECT_EQ(kernel_type("Memcpy HtoD (Pageable -> Device)"), KernelType::Memory);
  EXPECT_EQ(kernel_type("Memset (Device)"), KernelType::Memory);
  EXPECT_EQ(kernel_type("dma_copy"), KernelType::Memory);
  EXPECT_EQ(kernel_type("Stream Sync"), KernelType::Other);
  EXPECT_EQ(kernel_type("Event Sync"), KernelType::Other);
  EXPECT_EQ(kernel_type("void cub::DeviceMemcpyKernel()"), KernelType::Other);  // .*Memcpy
  EXPECT_EQ(kernel_type(kSgemm), KernelType::Computation);
  EXPECT_EQ(kernel_type("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw"), KernelType::Computation);
}

TEST(TemporalBreakdownTest, AnalysesEveryStepInExactNanosecondsByDefault) {
  const auto temporal = dlprof::analysis::temporal_breakdown(three_step_trace());
  // GPU work with a stream spans [20000, 220000]; busy: [20000,70000] + [80000,90000] +
  // [126000,127000] + [150000,160000] + the sync [161000,190000] + [210000,220000] = 110000.
  EXPECT_EQ(temporal.kernel_time_ns, 200'000);
  EXPECT_EQ(temporal.idle_ns, 200'000 - 110'000);
  // sgemm 30000 + reduce 8000 + fill 1000 + elementwise 2 x 10000.
  EXPECT_EQ(temporal.compute_ns, 59'000);
  // nccl alone [50000,52000] + [60000,70000], the copy, the sync.
  EXPECT_EQ(temporal.non_compute_ns, 12'000 + 10'000 + 29'000);
  EXPECT_DOUBLE_EQ(temporal.idle_percent(), 45.0);
  EXPECT_DOUBLE_EQ(temporal.compute_percent(), 29.5);
  EXPECT_DOUBLE_EQ(temporal.non_compute_percent(), 25.5);
}

TEST(TemporalBreakdownTest, HtaCompatDropsTheLastStepAndTheWorkItLaunched) {
  const auto temporal = dlprof::analysis::temporal_breakdown(three_step_trace(), hta_compat());
  // c6 starts after the last step's start: it and its elementwise kernel are gone.
  EXPECT_EQ(temporal.kernel_time_ns, 190'000 - 20'000);
  EXPECT_EQ(temporal.idle_ns, 170'000 - 100'000);
  EXPECT_EQ(temporal.compute_ns, 49'000);
  EXPECT_EQ(temporal.non_compute_ns, 51'000);
}

TEST(TemporalBreakdownTest, HtaCompatRoundsFractionalMicrosecondsInward) {
  // No steps: nothing is dropped. [1.5, 3.2] µs -> [2, 3]; [5.2, 5.9] -> [6, 5], a negative
  // interval HTA keeps (alone in its merge group it subtracts 1 µs); [7, 9] unchanged.
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .kernel("k", 1'500, 3'200, 1)
                                  .kernel("k", 5'200, 5'900, 2)
                                  .kernel("k", 7'000, 9'000, 3)
                                  .trace();
  const auto compat = dlprof::analysis::temporal_breakdown(trace, hta_compat());
  EXPECT_EQ(compat.kernel_time_ns, 9'000 - 2'000);
  EXPECT_EQ(compat.idle_ns, 7'000 - (1'000 - 1'000 + 2'000));
  EXPECT_EQ(compat.compute_ns, 2'000);
  EXPECT_EQ(compat.non_compute_ns, 0);

  const auto exact = dlprof::analysis::temporal_breakdown(trace);
  EXPECT_EQ(exact.kernel_time_ns, 9'000 - 1'500);
  EXPECT_EQ(exact.idle_ns, 7'500 - (1'700 + 700 + 2'000));
  EXPECT_EQ(exact.compute_ns, 4'400);
}

TEST(TemporalBreakdownTest, HtaCompatRoundsTheFilesOwnNumbers) {
  // A file relative to Kineto's base holds 1.5, 3.2, 10.001 and 12.999 µs: rounded inward,
  // [2, 3] and [11, 12]. The same times in absolute epoch µs (before 2024) are doubles good to
  // 0.25 µs only: 10.001 reads as 10.0 and 12.999 as 13.0, so HTA rounds them to [10, 13].
  const std::int64_t base = std::int64_t{7'889'238} * 1'000'000'000 * 217;  // April 2024
  dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                            .kernel("k", base + 1'500, base + 3'200, 1)
                            .kernel("k", base + 10'001, base + 12'999, 2)
                            .trace();
  trace.file_time_base_ns = base;
  const auto relative = dlprof::analysis::temporal_breakdown(trace, hta_compat());
  EXPECT_EQ(relative.kernel_time_ns, 12'000 - 2'000);
  EXPECT_EQ(relative.compute_ns, 1'000 + 1'000);

  trace.file_time_base_ns = 0;
  const auto absolute = dlprof::analysis::temporal_breakdown(trace, hta_compat());
  EXPECT_EQ(absolute.kernel_time_ns, 13'000 - 2'000);
  EXPECT_EQ(absolute.compute_ns, 1'000 + 3'000);

  // Recorded in-process: the base dlprof's writer would give the file.
  trace.file_time_base_ns.reset();
  trace.window_start_ns = base + 1'000;
  EXPECT_EQ(dlprof::analysis::temporal_breakdown(trace, hta_compat()).compute_ns, 2'000);
}

TEST(TemporalBreakdownTest, NoGpuWorkGivesZeros) {
  const auto temporal = dlprof::analysis::temporal_breakdown(dlprof_test::AnalysisTraceBuilder().step(1, 0, 10).trace());
  EXPECT_EQ(temporal.kernel_time_ns, 0);
  EXPECT_EQ(temporal.idle_percent(), 0.0);
  EXPECT_THAT(temporal.table(), HasSubstr("non-compute"));
}

TEST(KernelTypeBreakdownTest, SplitsTimeByWhichTypesRunTogether) {
  const dlprof::Trace trace = three_step_trace();  // results name its strings
  const auto breakdown = dlprof::analysis::kernel_type_breakdown(trace);
  const auto computation = kernel_type_bit(KernelType::Computation);
  const auto communication = kernel_type_bit(KernelType::Communication);
  const auto memory = kernel_type_bit(KernelType::Memory);
  // Computation alone: [20000,40000] + the fill + both elementwise kernels.
  EXPECT_EQ(breakdown.time_ns(computation), 20'000 + 1'000 + 10'000 + 10'000);
  // With communication: [40000,50000] and the reduce kernel [52000,60000].
  EXPECT_EQ(breakdown.time_ns(computation | communication), 18'000);
  EXPECT_EQ(breakdown.time_ns(communication), 2'000 + 10'000);
  EXPECT_EQ(breakdown.time_ns(memory), 10'000);
  ASSERT_EQ(breakdown.times.size(), 4u);
  EXPECT_EQ(breakdown.times[0].label(), "COMPUTATION");
  EXPECT_DOUBLE_EQ(breakdown.times[0].percent, 100.0 * 41'000 / 81'000);
  EXPECT_EQ(breakdown.times[1].label(), "COMPUTATION overlapping COMMUNICATION");
  EXPECT_EQ(breakdown.times[2].label(), "COMMUNICATION");
  EXPECT_EQ(breakdown.times[3].label(), "MEMORY");

  ASSERT_EQ(breakdown.kernels.size(), 3u);
  const auto& compute_kernels = breakdown.kernels[0].kernels;
  EXPECT_EQ(breakdown.kernels[0].type, KernelType::Computation);
  ASSERT_EQ(compute_kernels.size(), 4u);
  EXPECT_EQ(compute_kernels[0].name, kSgemm);
  EXPECT_EQ(compute_kernels[1].name, kElementwise);
  EXPECT_EQ(compute_kernels[1].calls, 2u);
  EXPECT_EQ(compute_kernels[1].total_ns, 20'000);
  EXPECT_DOUBLE_EQ(compute_kernels[1].stddev_ns, 0.0);
  EXPECT_EQ(compute_kernels[2].name, kReduce);
  EXPECT_EQ(compute_kernels[3].name, kFill);
  EXPECT_EQ(breakdown.kernels[1].kernels.at(0).name, kNcclAllReduce);
  EXPECT_EQ(breakdown.kernels[2].kernels.at(0).total_ns, 10'000);
  EXPECT_THAT(breakdown.table(), HasSubstr("COMPUTATION overlapping COMMUNICATION"));
}

TEST(KernelTypeBreakdownTest, GroupsKernelsPastTheCountIntoOthers) {
  // Totals 30000, 20000, 8000, 1000: cumulated 30000, 50000, 58000, 59000; the 0.8 quantile of
  // those is 58000 + 0.4 * 1000 = 58400, past which only the fill lies.
  AnalysisOptions options;
  options.num_kernels = 3;
  const dlprof::Trace trace = three_step_trace();
  const auto kernels = dlprof::analysis::kernel_type_breakdown(trace, options).kernels[0].kernels;
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_EQ(kernels[2].name, kReduce);
  EXPECT_EQ(kernels[3].name, "others");
  EXPECT_EQ(kernels[3].total_ns, 1'000);

  // With a 0.5 quantile (50000 + 0.5 * 8000 = 54000) the reduce kernel goes too: the others row
  // has the durations of both.
  options.duration_ratio = 0.5;
  const auto fewer = dlprof::analysis::kernel_type_breakdown(trace, options).kernels[0].kernels;
  ASSERT_EQ(fewer.size(), 3u);
  EXPECT_EQ(fewer[2].name, "others");
  EXPECT_EQ(fewer[2].calls, 2u);
  EXPECT_EQ(fewer[2].total_ns, 9'000);
  EXPECT_EQ(fewer[2].min_ns, 1'000);
  EXPECT_EQ(fewer[2].max_ns, 8'000);
  EXPECT_DOUBLE_EQ(fewer[2].mean_ns, 4'500.0);
  EXPECT_NEAR(fewer[2].stddev_ns, 3'500.0 * std::sqrt(2.0), 1e-9);
}

TEST(KernelTypeBreakdownTest, LeavesMemoryOutWhenAsked) {
  AnalysisOptions options;
  options.include_memory_kernels = false;
  const auto breakdown = dlprof::analysis::kernel_type_breakdown(three_step_trace(), options);
  EXPECT_EQ(breakdown.kernels.size(), 2u);
  EXPECT_EQ(breakdown.time_ns(kernel_type_bit(KernelType::Memory)), 0);
  EXPECT_DOUBLE_EQ(breakdown.times[0].percent, 100.0 * 41'000 / 71'000);
}

TEST(IdleTimeBreakdownTest, ClassifiesEachGapOnAStream) {
  const auto idle = dlprof::analysis::idle_time_breakdown(three_step_trace());
  ASSERT_EQ(idle.streams.size(), 3u);
  const auto& stream7 = idle.streams[0];
  EXPECT_EQ(stream7.stream, 7);
  // reduce after sgemm: 2000, launched before sgemm ended -> kernel wait.
  EXPECT_EQ(stream7.kernel_wait_ns, 2'000);
  // memcpy after reduce: 20000, launched at 61000 after reduce ended at 60000 -> host wait;
  // the last elementwise after the first: 50000, launched at 205000 -> host wait.
  EXPECT_EQ(stream7.host_wait_ns, 20'000 + 50'000);
  // elementwise after memcpy: 60000 >= 30 µs, launched at 85000 before the copy ended -> other.
  EXPECT_EQ(stream7.other_ns, 60'000);
  EXPECT_DOUBLE_EQ(stream7.host_wait_ratio(), 70'000.0 / 132'000.0);
  EXPECT_EQ(idle.streams[1].stream, 20);
  EXPECT_EQ(idle.streams[1].idle_ns(), 0);
  EXPECT_EQ(idle.streams[2].stream, 21);

  const auto compat = dlprof::analysis::idle_time_breakdown(three_step_trace(), hta_compat());
  EXPECT_EQ(compat.streams[0].host_wait_ns, 20'000);
  EXPECT_THAT(compat.table(), HasSubstr("Host wait"));
}

// Work that starts before earlier work on its stream has ended follows no gap: HTA's arithmetic
// (this start minus the previous end) would give a negative kernel wait of -3 µs here.
//   sgemm [0, 10000]   reduce [7000, 9000] (inside it)   elementwise [12000, 13000]
TEST(IdleTimeBreakdownTest, OverlappingWorkOnAStreamIsOverlapNotNegativeWait) {
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .call("cudaLaunchKernel", 0, 100, 1)
                                  .call("cudaLaunchKernel", 200, 300, 2)
                                  .call("cudaLaunchKernel", 400, 500, 3)
                                  .kernel(kSgemm, 0, 10'000, 1)
                                  .kernel(kReduce, 7'000, 9'000, 2)
                                  .kernel(kElementwise, 12'000, 13'000, 3)
                                  .trace();
  for (const AnalysisOptions& options : {AnalysisOptions{}, hta_compat()}) {
    const auto idle = dlprof::analysis::idle_time_breakdown(trace, options);
    ASSERT_EQ(idle.streams.size(), 1u);
    const auto& stream = idle.streams[0];
    EXPECT_EQ(stream.overlaps, 1u);
    EXPECT_EQ(stream.overlap_ns, 2'000);
    // The gap before the elementwise kernel runs from the sgemm's end, not the reduce's.
    EXPECT_EQ(stream.kernel_wait_ns, 2'000);
    EXPECT_EQ(stream.host_wait_ns, 0);
    EXPECT_EQ(stream.other_ns, 0);
    EXPECT_DOUBLE_EQ(stream.kernel_wait_ratio(), 1.0);
    EXPECT_THAT(idle.table(), HasSubstr("1 piece of work started before earlier work on the stream ended (2.000 us alongside it)"));
  }
}

// torch.compile's Triton launches are cpu_ops that name a stream. HTA takes them for GPU work
// (stream != -1) and counts their CPU time as computation; dlprof does with hta_compat only.
//   sgemm [10000, 20000] on stream 7; triton_poi_fused_add_0, a CPU op on stream 7, [30000, 40000]
TEST(TemporalBreakdownTest, CpuOpsNamingAStreamAreGpuWorkWithHtaCompatOnly) {
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .call("cudaLaunchKernel", 0, 1'000, 1)
                                  .kernel(kSgemm, 10'000, 20'000, 1)
                                  .op_on_stream("triton_poi_fused_add_0", 30'000, 40'000, 7)
                                  .kernel(kNcclAllReduce, 35'000, 45'000, 2, 0, 20)
                                  .trace();
  const auto exact = dlprof::analysis::hta_analyses(trace);
  EXPECT_EQ(exact.temporal.kernel_time_ns, 35'000);
  EXPECT_EQ(exact.temporal.compute_ns, 10'000);
  EXPECT_EQ(exact.temporal.idle_ns, 15'000);
  EXPECT_EQ(exact.overlap.overlap_ns, 0);
  EXPECT_EQ(exact.cpu_slices_on_streams.count, 1u);
  EXPECT_EQ(exact.cpu_slices_on_streams.total_ns, 10'000);
  EXPECT_FALSE(exact.cpu_slices_on_streams.counted_as_gpu_work);

  const auto compat = dlprof::analysis::hta_analyses(trace, hta_compat());
  EXPECT_EQ(compat.temporal.kernel_time_ns, 35'000);
  EXPECT_EQ(compat.temporal.compute_ns, 20'000);
  EXPECT_EQ(compat.temporal.idle_ns, 10'000);
  EXPECT_EQ(compat.overlap.overlap_ns, 5'000);
  EXPECT_EQ(compat.kernel_types.time_ns(kernel_type_bit(KernelType::Computation)), 15'000);
  EXPECT_TRUE(compat.cpu_slices_on_streams.counted_as_gpu_work);
  // Not a kernel with a gap before it: the idle-time breakdown takes kernels, copies and fills.
  ASSERT_EQ(compat.idle_time.streams.size(), 2u);
  EXPECT_EQ(compat.idle_time.streams[0].idle_ns(), 0);
}

TEST(CommCompOverlapTest, IsTheShareOfCommunicationThatRanWithComputation) {
  const auto overlap = dlprof::analysis::comm_comp_overlap(three_step_trace());
  EXPECT_EQ(overlap.communication_ns, 30'000);
  EXPECT_EQ(overlap.computation_ns, 59'000);
  EXPECT_EQ(overlap.overlap_ns, 10'000 + 8'000);
  EXPECT_DOUBLE_EQ(overlap.overlap_percent(), 60.0);

  const auto none = dlprof::analysis::comm_comp_overlap(
      dlprof_test::AnalysisTraceBuilder().kernel(kSgemm, 0, 10, 1).trace());
  EXPECT_FALSE(none.has_communication());
  EXPECT_EQ(none.overlap_percent(), 0.0);
}

TEST(LaunchStatsTest, JoinsLaunchCallsToTheirWork) {
  const dlprof::Trace trace = three_step_trace();
  const auto stats = dlprof::analysis::launch_stats(trace);
  // The seven launch calls in thread order; cudaStreamSynchronize is not one.
  ASSERT_EQ(stats.launches.size(), 7u);
  const auto& first = stats.launches[0];
  EXPECT_EQ(first.correlation, 1u);
  EXPECT_EQ(first.call, "cudaLaunchKernel");
  EXPECT_EQ(first.work, kSgemm);
  EXPECT_EQ(first.cpu_duration_ns, 5'000);
  EXPECT_EQ(first.gpu_duration_ns, 30'000);
  EXPECT_EQ(first.launch_delay_ns, 20'000 - 10'000 - 5'000);
  std::vector<std::int64_t> delays;
  for (const auto& launch : stats.launches) delays.push_back(launch.launch_delay_ns);
  EXPECT_THAT(delays, ::testing::ElementsAre(5'000, 22'000, 32'500, 18'000, 64'000, 1'000, 4'000));
  EXPECT_EQ(stats.runtime_outliers, 0u);
  EXPECT_EQ(stats.launch_delay_outliers, 0u);
  EXPECT_EQ(stats.short_kernels, 1u);  // the fill: 1 µs of work for a 5 µs call
  EXPECT_EQ(stats.max_launch_delay_ns(), 64'000);

  AnalysisOptions options;
  options.runtime_cutoff_ns = 4'000;
  options.launch_delay_cutoff_ns = 30'000;
  options.include_memory_events = false;
  const auto strict = dlprof::analysis::launch_stats(trace, options);
  EXPECT_EQ(strict.launches.size(), 6u);
  EXPECT_EQ(strict.runtime_outliers, 2u);       // c1 and c8, 5 µs each
  EXPECT_EQ(strict.launch_delay_outliers, 2u);  // 32.5 and 64 µs
  EXPECT_EQ(strict.short_kernels, 0u);          // the fill's call is now an outlier
}

TEST(LaunchStatsTest, DriverLaunchesAreNotCounted) {
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .call("cuLaunchKernel", 0, 10, 1, 0, 0, /*driver=*/true)
                                  .kernel("triton_poi_fused_add_0", 20, 30, 1)
                                  .trace();
  EXPECT_TRUE(dlprof::analysis::launch_stats(trace).launches.empty());
}

// MTIA launches a kernel with runFunction (mtia_runtime), which HTA counts as a launch.
TEST(LaunchStatsTest, MtiaRunFunctionLaunchesAreCounted) {
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .call("runFunction - job_prep_and_submit_for_execution", 0, 4'000, 1)
                                  .kernel("mtia_fused_linear_relu", 6'000, 11'000, 1)
                                  .call("runFunction - job_prep_and_submit_for_execution", 10'000, 12'000, 2)
                                  .kernel("mtia_fused_linear_relu", 20'000, 21'000, 2)
                                  .trace();
  const auto stats = dlprof::analysis::launch_stats(trace);
  ASSERT_EQ(stats.launches.size(), 2u);
  EXPECT_EQ(stats.launches[0].call, "runFunction - job_prep_and_submit_for_execution");
  EXPECT_EQ(stats.launches[0].launch_delay_ns, 2'000);
  EXPECT_EQ(stats.launches[1].launch_delay_ns, 8'000);
  EXPECT_EQ(stats.short_kernels, 1u);  // the second: 1 µs of work for a 2 µs call
}

TEST(HtaAnalysesTest, AllAtOnceEqualOneByOne) {
  const dlprof::Trace trace = three_step_trace();
  for (const AnalysisOptions& options : {AnalysisOptions{}, hta_compat()}) {
    const auto all = dlprof::analysis::hta_analyses(trace, options);
    const auto temporal = dlprof::analysis::temporal_breakdown(trace, options);
    EXPECT_EQ(all.temporal.idle_ns, temporal.idle_ns);
    EXPECT_EQ(all.temporal.compute_ns, temporal.compute_ns);
    EXPECT_EQ(all.kernel_types.times.size(), dlprof::analysis::kernel_type_breakdown(trace, options).times.size());
    EXPECT_EQ(all.idle_time.streams[0].host_wait_ns,
              dlprof::analysis::idle_time_breakdown(trace, options).streams[0].host_wait_ns);
    EXPECT_EQ(all.overlap.overlap_ns, dlprof::analysis::comm_comp_overlap(trace, options).overlap_ns);
    EXPECT_EQ(all.launches.launches.size(), dlprof::analysis::launch_stats(trace, options).launches.size());
  }
}

}  // namespace
