// TensorBoard's step-time breakdown and GPU summary on hand-built traces; every number is worked
// out in the comments.
#include <dlprof/analysis/step_breakdown.hpp>
#include <dlprof/format/vocabulary.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::StepRole;
using ::testing::HasSubstr;

// Two steps on thread 0 (ns):
//   ProfilerStep#5 [0, 1000]
//     enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ [0, 200]
//     aten::conv2d [200, 500] ext 10; cudaLaunchKernel [250, 300] -> h884 gemm [400, 900]
//     nccl:all_reduce [600, 700] ext 20; cudaLaunchKernel [620, 650] -> nccl kernel [950, 1200]
//   ProfilerStep#6 [1000, 2000]
//     aten::relu [1100, 1300] ext 30; cudaLaunchKernel [1150, 1200] -> relu kernel [1400, 1500]
//     cudaMemcpyAsync [1600, 1700] -> copy [1750, 1850]; cudaMemsetAsync [1860, 1880] -> fill [1900, 1950]
// Carried to device time, step 5 ends with the nccl kernel at 1200 and step 6 starts there.
dlprof::Trace two_step_trace() {
  return dlprof_test::AnalysisTraceBuilder()
      .device(0, "Tesla V100-SXM2-32GB", 7)
      .step(5, 0, 1'000)
      .range("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 200, dlprof::Category::DataLoader)
      .op("aten::conv2d", 200, 500, 10)
      .range("nccl:all_reduce", 600, 700, dlprof::Category::Communication, 0, 20)
      .step(6, 1'000, 2'000)
      .op("aten::relu", 1'100, 1'300, 30)
      .call("cudaLaunchKernel", 250, 300, 1, 10)
      .call("cudaLaunchKernel", 620, 650, 2, 20)
      .call("cudaLaunchKernel", 1'150, 1'200, 3, 30)
      .call("cudaMemcpyAsync", 1'600, 1'700, 4)
      .call("cudaMemsetAsync", 1'860, 1'880, 5)
      .kernel("volta_h884gemm_64x64_ldg8_nn", 400, 900, 1, 10)
      .launch(80, 256, 0.5f, 50)
      .kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 950, 1'200, 2, 20)
      .kernel("void at::native::vectorized_elementwise_kernel<4, at::native::relu>()", 1'400, 1'500, 3, 30)
      .launch(160, 256, 2.0f, 100)
      .memcpy(1, 1'750, 1'850, 4, 1 << 20)
      .memset(1'900, 1'950, 5, 4096)
      .trace();
}

TEST(StepBreakdownTest, CarriesStepsToDeviceTimeAndSplitsThemByRolePriority) {
  const dlprof::Trace trace = two_step_trace();
  const auto breakdown = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(breakdown.steps.size(), 2u);
  const auto& first = breakdown.steps[0];
  EXPECT_EQ(first.name, "ProfilerStep#5");
  EXPECT_EQ(first.number, 5);
  EXPECT_EQ(first.start_ns, 0);
  EXPECT_EQ(first.end_ns, 1'200);
  EXPECT_EQ(first[StepRole::Kernel], 500);
  EXPECT_EQ(first[StepRole::Memcpy], 0);
  EXPECT_EQ(first[StepRole::Communication], 250);  // the nccl kernel; its op lies under the gemm
  EXPECT_EQ(first[StepRole::Runtime], 50);         // the other launches lie under kernels
  EXPECT_EQ(first[StepRole::DataLoader], 200);
  EXPECT_EQ(first[StepRole::CpuExec], 150);        // conv2d's [200, 250] and [300, 400]
  EXPECT_EQ(first[StepRole::Other], 50);           // [900, 950]

  const auto& second = breakdown.steps[1];
  EXPECT_EQ(second.number, 6);
  EXPECT_EQ(second.start_ns, 1'200);
  EXPECT_EQ(second.end_ns, 2'000);
  EXPECT_EQ(second[StepRole::Kernel], 100);
  EXPECT_EQ(second[StepRole::Memcpy], 100);
  EXPECT_EQ(second[StepRole::Memset], 50);
  EXPECT_EQ(second[StepRole::Communication], 0);
  EXPECT_EQ(second[StepRole::Runtime], 100 + 20);  // the relu launch lies under the nccl kernel
  EXPECT_EQ(second[StepRole::DataLoader], 0);
  EXPECT_EQ(second[StepRole::CpuExec], 100);       // relu's [1200, 1300]
  EXPECT_EQ(second[StepRole::Other], 330);

  const auto mean = breakdown.average_ns();
  EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(StepRole::Kernel)], 300.0);
  EXPECT_DOUBLE_EQ(breakdown.average_step_ns(), 1'000.0);
}

TEST(StepBreakdownTest, SummarisesEachGpuOverTheSteps) {
  const dlprof::Trace trace = two_step_trace();
  const auto breakdown = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(breakdown.devices.size(), 1u);
  const auto& gpu = breakdown.devices[0];
  EXPECT_EQ(gpu.name, "Tesla V100-SXM2-32GB");
  EXPECT_EQ(gpu.compute_major, 7);
  // Kernels (not copies or fills): 500 + 250 + 100 of the 2000 ns the steps span.
  EXPECT_EQ(gpu.kernel_ns, 850);
  EXPECT_DOUBLE_EQ(gpu.utilization, 850.0 / 2'000.0);
  // min(blocks per SM, 1): 0.5 over the gemm, 1 over the relu kernel; the nccl kernel has none.
  ASSERT_TRUE(gpu.sm_efficiency.has_value());
  EXPECT_DOUBLE_EQ(*gpu.sm_efficiency, (0.5 * 500 + 1.0 * 100) / 2'000.0);
  ASSERT_TRUE(gpu.achieved_occupancy_percent.has_value());
  EXPECT_DOUBLE_EQ(*gpu.achieved_occupancy_percent, (50.0 * 500 + 0.0 * 250 + 100.0 * 100) / 850.0);
  EXPECT_DOUBLE_EQ(gpu.tensor_core_percent.value_or(-1), 100.0 * 500 / 850);

  const std::string table = breakdown.table();
  EXPECT_THAT(table, HasSubstr("CPU Exec"));
  EXPECT_THAT(table, HasSubstr("ProfilerStep#5"));
  EXPECT_THAT(table, HasSubstr("GPU 0 Tesla V100-SXM2-32GB: utilization 42.50%, est. SM efficiency 17.50%"));
}

// A ROCm trace whose kernels run on device 2 while deviceProperties lists only id 0: the GPU is
// the model listed, which the summary says. Its MFMA GEMM is matrix-core time.
TEST(StepBreakdownTest, AGpuDevicePropertiesDoesNotListTakesTheModelItLists) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.device(0, "AMD Instinct MI300X", 9)
      .step(1, 0, 1'000)
      .call("hipLaunchKernel", 1, 2, 1)
      .call("hipLaunchKernel", 3, 4, 2)
      .kernel("Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x1_SN_LDSB1", 10, 310, 1, 0, 1, /*device=*/2)
      .kernel("void at::native::vectorized_elementwise_kernel<4>()", 400, 500, 2, 0, 1, /*device=*/2);
  const dlprof::Trace trace = builder.trace();
  const auto breakdown = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(breakdown.devices.size(), 1u);
  const auto& gpu = breakdown.devices[0];
  EXPECT_EQ(gpu.device, 2u);
  EXPECT_EQ(gpu.name, "AMD Instinct MI300X");
  ASSERT_TRUE(gpu.properties_from_id.has_value());
  EXPECT_EQ(*gpu.properties_from_id, 0);
  EXPECT_EQ(breakdown.matrix_units, dlprof::analysis::MatrixUnits::MatrixCores);
  EXPECT_DOUBLE_EQ(gpu.tensor_core_percent.value_or(-1), 75.0);
  EXPECT_THAT(breakdown.table(), HasSubstr("GPU 2 AMD Instinct MI300X (the model of id 0): utilization 40.00%"));
  EXPECT_THAT(breakdown.table(), HasSubstr("matrix cores (dlprof's kernel list) 75.00% of kernel time"));

  // Two models listed, neither with this id: the trace does not say which.
  builder.device(1, "AMD Instinct MI250X", 9);
  const dlprof::Trace two_models = builder.trace();
  const auto unknown = dlprof::analysis::step_breakdown(two_models).devices.at(0);
  EXPECT_TRUE(unknown.name.empty());
  EXPECT_FALSE(unknown.properties_from_id.has_value());
}

TEST(StepBreakdownTest, OverlappingSmEfficiencyIsCappedAtOne) {
  // Two kernels of 0.75 blocks per SM overlap on [50, 100]: 0.75, then min(1.5, 1), then 0.75.
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .step(1, 0, 200)
                                  .call("cudaLaunchKernel", 1, 2, 1)
                                  .call("cudaLaunchKernel", 3, 4, 2)
                                  .kernel("a", 0, 100, 1)
                                  .launch(1, 1, 0.75f, 10)
                                  .kernel("b", 50, 150, 2, 0, 8)
                                  .launch(1, 1, 0.75f, 30)
                                  .trace();
  const auto gpu = dlprof::analysis::step_breakdown(trace).devices.at(0);
  EXPECT_DOUBLE_EQ(*gpu.sm_efficiency, (0.75 * 50 + 1.0 * 50 + 0.75 * 50) / 200.0);
  EXPECT_DOUBLE_EQ(*gpu.achieved_occupancy_percent, 20.0);
  EXPECT_DOUBLE_EQ(gpu.utilization, 150.0 / 200.0);
  EXPECT_EQ(gpu.tensor_core_percent, 0.0);
}

TEST(StepBreakdownTest, DropsTailStepsThatLaunchedTooLittle) {
  // Steps of 100 ns. A kernel launched before step 1 ends at 20: step 1 starts there. Step 2
  // launches two kernels, step 3 one (< 0.8 x 2: dropped), step 4 none (dropped).
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .step(1, 0, 100)
                                  .step(2, 100, 200)
                                  .step(3, 200, 300)
                                  .step(4, 300, 400)
                                  .call("cudaLaunchKernel", -50, -40, 9)
                                  .call("cudaLaunchKernel", 10, 20, 1)
                                  .call("cudaLaunchKernel", 110, 120, 2)
                                  .call("cudaLaunchKernel", 150, 160, 3)
                                  .call("cudaLaunchKernel", 210, 220, 4)
                                  .kernel("k", -30, 20, 9)
                                  .kernel("k", 30, 60, 1)
                                  .kernel("k", 130, 150, 2)
                                  .kernel("k", 170, 250, 3)
                                  .kernel("k", 260, 270, 4)
                                  .trace();
  const auto breakdown = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(breakdown.steps.size(), 2u);
  EXPECT_EQ(breakdown.steps[0].start_ns, 20);
  EXPECT_EQ(breakdown.steps[0].end_ns, 100);
  EXPECT_EQ(breakdown.steps[0][StepRole::Kernel], 30);
  EXPECT_EQ(breakdown.steps[0][StepRole::Runtime], 0);
  EXPECT_EQ(breakdown.steps[0][StepRole::Other], 50);
  EXPECT_EQ(breakdown.steps[1].start_ns, 100);
  EXPECT_EQ(breakdown.steps[1].end_ns, 250);
  EXPECT_EQ(breakdown.steps[1][StepRole::Kernel], 20 + 80);
  EXPECT_EQ(breakdown.steps[1][StepRole::Runtime], 10 + 10);  // the third launch lies under a kernel
  EXPECT_EQ(breakdown.steps[1][StepRole::Other], 30);
}

TEST(StepBreakdownTest, CpuOnlyTraceKeepsHostStepsAndAnUnsteppedTraceIsOneStep) {
  const dlprof::Trace cpu_only = dlprof_test::AnalysisTraceBuilder()
                                     .step(1, 0, 100)
                                     .range("forward", 10, 60, dlprof::Category::Forward)
                                     .step(2, 100, 150)
                                     .trace();
  const auto stepped = dlprof::analysis::step_breakdown(cpu_only);
  ASSERT_EQ(stepped.steps.size(), 2u);
  EXPECT_EQ(stepped.steps[0][StepRole::CpuExec], 50);
  EXPECT_EQ(stepped.steps[0][StepRole::Other], 50);
  EXPECT_EQ(stepped.steps[1].duration_ns(), 50);
  EXPECT_TRUE(stepped.devices.empty());

  // Without steps, the one step spans the ops, as TensorBoard's does: the range starting before
  // them and the Python frame around them reach outside it.
  const dlprof::Trace unstepped = dlprof_test::AnalysisTraceBuilder()
                                      .python_frame("train.py(12): <module>", 0, 90)
                                      .range("enumerate(DataPipe)#ShardingFilter", 5, 35)
                                      .op("aten::mm", 30, 45)
                                      .op("aten::relu", 60, 70)
                                      .trace();
  const auto whole = dlprof::analysis::step_breakdown(unstepped);
  ASSERT_EQ(whole.steps.size(), 1u);
  EXPECT_EQ(whole.steps[0].number, -1);
  EXPECT_EQ(whole.steps[0].start_ns, 30);
  EXPECT_EQ(whole.steps[0].end_ns, 70);
  EXPECT_EQ(whole.steps[0][StepRole::DataLoader], 5);
  EXPECT_EQ(whole.steps[0][StepRole::CpuExec], 10 + 10);
  EXPECT_EQ(whole.steps[0][StepRole::Other], 15);

  // Without ops either, it spans every CPU slice (TensorBoard's would be empty).
  const dlprof::Trace ranges_only = dlprof_test::AnalysisTraceBuilder()
                                        .range("forward", 10, 40)
                                        .python_frame("train.py(12): <module>", 0, 50)
                                        .trace();
  const auto ranges = dlprof::analysis::step_breakdown(ranges_only);
  ASSERT_EQ(ranges.steps.size(), 1u);
  EXPECT_EQ(ranges.steps[0].start_ns, 0);
  EXPECT_EQ(ranges.steps[0].end_ns, 50);
  EXPECT_EQ(ranges.steps[0][StepRole::CpuExec], 30);
  EXPECT_EQ(ranges.steps[0][StepRole::Other], 20);

  EXPECT_TRUE(dlprof::analysis::step_breakdown(dlprof::Trace{}).steps.empty());
}

TEST(StepBreakdownTest, PythonFramesAreNoRole) {
  // TensorBoard counts no time of its own in a python_function slice: the step's time outside
  // the op is Other, even under the frames.
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .step(1, 0, 100)
                                  .python_frame("train.py(30): train_step", 0, 100)
                                  .python_frame("nn.Module: Linear_0", 10, 60, dlprof::Category::Forward)
                                  .op("aten::addmm", 20, 40)
                                  .trace();
  const auto step = dlprof::analysis::step_breakdown(trace).steps.at(0);
  EXPECT_EQ(step[StepRole::CpuExec], 20);
  EXPECT_EQ(step[StepRole::Other], 80);
}

TEST(StepBreakdownTest, OccupancyIsUnknownWithoutKernelsThatHaveOne) {
  // Kineto writes -99 where it cannot estimate occupancy, and a kernel read from a trace without
  // the arg (ROCm's) gets the same: such kernels count for no occupancy, as in TensorBoard.
  const dlprof::Trace partly = dlprof_test::AnalysisTraceBuilder()
                                   .step(1, 0, 400)
                                   .call("cudaLaunchKernel", 1, 2, 1)
                                   .call("cudaLaunchKernel", 3, 4, 2)
                                   .kernel("a", 0, 100, 1)
                                   .launch(1, 1, 0.5f, 40)
                                   .kernel("b", 100, 400, 2)
                                   .launch(1, 1, 0.5f, -99)
                                   .trace();
  const auto known = dlprof::analysis::step_breakdown(partly).devices.at(0);
  ASSERT_TRUE(known.achieved_occupancy_percent.has_value());
  EXPECT_DOUBLE_EQ(*known.achieved_occupancy_percent, 40.0);

  const dlprof::Trace rocm = dlprof_test::AnalysisTraceBuilder()
                                 .step(1, 0, 400)
                                 .call("cudaLaunchKernel", 1, 2, 1)
                                 .kernel("Cijk_Ailk_Bljk_SB_MT64x64x16", 0, 100, 1)
                                 .launch(1, 1, 0.0f, -99)
                                 .trace();
  const auto breakdown = dlprof::analysis::step_breakdown(rocm);
  const auto& unknown = breakdown.devices.at(0);
  EXPECT_FALSE(unknown.achieved_occupancy_percent.has_value());
  EXPECT_FALSE(unknown.sm_efficiency.has_value());
  EXPECT_THAT(breakdown.table(), HasSubstr("est. SM efficiency unknown, est. achieved occupancy unknown"));
}

TEST(StepBreakdownTest, OnlyNextCallsOfADataLoaderAreDataLoading) {
  // enumerate(DataLoader)#... counts only for __next__; the rest is CPU execution.
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .step(1, 0, 100)
                                  .range("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 30)
                                  .range("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__iter__", 40, 50)
                                  .range("gloo:all_reduce", 60, 80)
                                  .trace();
  const auto step = dlprof::analysis::step_breakdown(trace).steps.at(0);
  EXPECT_EQ(step[StepRole::DataLoader], 30);
  EXPECT_EQ(step[StepRole::CpuExec], 10);
  EXPECT_EQ(step[StepRole::Communication], 20);
}

TEST(StepBreakdownTest, AStepIsProfilerStepHashDigitsAsForTheReader) {
  // The reader makes "ProfilerStep#-1" a range (key averages: category User); the step table
  // must not count it as a step.
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .step(3, 0, 1'000)
                                  .op("aten::mm", 100, 600)
                                  .range("ProfilerStep#-1", 1'000, 2'000)
                                  .range("ProfilerStep#", 2'000, 2'500)
                                  .range("ProfilerStep#x1", 2'500, 2'800)
                                  .trace();
  const auto breakdown = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(breakdown.steps.size(), 1u);
  EXPECT_EQ(breakdown.steps[0].name, "ProfilerStep#3");
  EXPECT_EQ(breakdown.steps[0].number, 3);
}

TEST(StepBreakdownTest, StepNumbersAreTheDigitsAfterTheHash) {
  using dlprof::detail::is_profiler_step;
  using dlprof::detail::profiler_step_number;
  EXPECT_EQ(profiler_step_number("ProfilerStep#0"), 0);
  EXPECT_EQ(profiler_step_number("ProfilerStep#12"), 12);
  EXPECT_EQ(profiler_step_number("ProfilerStep#7 (copy)"), 7);  // `^ProfilerStep#\d+`, as HTA and TensorBoard match
  EXPECT_EQ(profiler_step_number("ProfilerStep#9223372036854775807"), INT64_MAX);
  for (const char* name : {"ProfilerStep#-1", "ProfilerStep#", "ProfilerStep#x1", "ProfilerStep 3", "MyProfilerStep#3"}) {
    EXPECT_FALSE(is_profiler_step(name)) << name;
    EXPECT_EQ(profiler_step_number(name), -1) << name;
  }
  EXPECT_TRUE(is_profiler_step("ProfilerStep#99999999999999999999"));
  EXPECT_EQ(profiler_step_number("ProfilerStep#99999999999999999999"), -1);  // a step without a usable number
}

}  // namespace
