// Where the host waits for the GPU (analysis/host_syncs.hpp) on hand-built traces: scalar reads,
// synchronize calls and copies that wait, each named by its op and its line; what each saves, by
// hand; the findings they give and the copy rules that no longer blame a copy for a wait.
#include <dlprof/analysis/host_syncs.hpp>
#include <dlprof/analysis/recommendations.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "analysis_trace_builder.hpp"
#include "findings.hpp"

namespace {

using dlprof::analysis::HostSyncs;
using dlprof::analysis::Recommendation;
using dlprof::analysis::SyncKind;
using dlprof::analysis::SyncSite;
using dlprof_test::AnalysisTraceBuilder;
using dlprof_test::kMs;
using ::testing::HasSubstr;

using dlprof_test::kUs;

using dlprof_test::finding_ids;
using dlprof_test::finding_with_id;

TEST(HostSyncsTest, ScalarReadsAreOnePointEachNamedByTheOpAndTheUsersLine) {
  const dlprof::Trace trace = dlprof_test::steps_reading_a_scalar();
  const HostSyncs syncs = dlprof::analysis::host_syncs(trace);
  ASSERT_EQ(syncs.sites.size(), 1u);
  const SyncSite& site = syncs.sites[0];
  EXPECT_EQ(site.kind, SyncKind::ScalarRead);
  EXPECT_EQ(site.op, "aten::item");
  // The built-in and torch's own frame are passed over for the innermost frame of the user's code.
  EXPECT_EQ(site.frame, "model.py(143): forward");
  EXPECT_EQ(site.count, 4u);
  EXPECT_EQ(syncs.points, 4u);
  // Per read: the copy call's 7.150 ms less its 1 us transfer, and the 50 us synchronize call.
  EXPECT_EQ(site.wait_ns, 4 * (7'149 + 50) * kUs);
  EXPECT_EQ(site.longest_wait_ns, 7'149 * kUs);
  EXPECT_EQ(site.call, "cudaMemcpyAsync");
  // From the synchronize call's end (8.25 ms) to the next kernel (9.0 ms).
  EXPECT_EQ(site.gpu_idle_after_ns, 4 * 750 * kUs);
  EXPECT_EQ(site.saving_ns, 4 * 750 * kUs);
  EXPECT_EQ(syncs.saving_ns, 4 * 750 * kUs);
}

TEST(HostSyncsTest, IfTensorIsNamedByTheOutermostScalarRead) {
  const dlprof::Trace trace = dlprof_test::steps_reading_a_scalar("aten::is_nonzero");
  const HostSyncs syncs = dlprof::analysis::host_syncs(trace);
  ASSERT_EQ(syncs.sites.size(), 1u);
  EXPECT_EQ(syncs.sites[0].op, "aten::is_nonzero");
  EXPECT_EQ(syncs.sites[0].count, 4u);
}

TEST(HostSyncsTest, ScalarReadsGiveAFindingThatSavesTheIdleTimeAfterThem) {
  const auto found = dlprof::analysis::recommendations(dlprof_test::steps_reading_a_scalar());
  const Recommendation* reads = finding_with_id(found, "scalar_read_syncs");
  ASSERT_NE(reads, nullptr) << finding_ids(found);
  EXPECT_DOUBLE_EQ(reads->impact_ns, 750'000.0);  // 0.75 ms of each 10 ms step
  EXPECT_DOUBLE_EQ(reads->share, 7.5);
  EXPECT_THAT(reads->text, HasSubstr("Tensor.item()"));
  EXPECT_THAT(reads->evidence,
              HasSubstr("4 scalar reads (28.796 ms of waiting, the GPU idle 3.000 ms after them) in aten::item from "
                        "model.py(143): forward"));
  EXPECT_THAT(reads->evidence, HasSubstr("0.750 ms per step saved once gone"));
  // The 4-byte copies are not the problem, and the rules say nothing of them.
  EXPECT_EQ(finding_with_id(found, "copies_wait_for_gpu"), nullptr);
  EXPECT_EQ(finding_with_id(found, "synchronize_calls"), nullptr);
}

TEST(HostSyncsTest, PointsOutsideTheStepsAreLeftOut) {
  dlprof::Trace trace = AnalysisTraceBuilder()
                            .step(1, 10 * kMs, 20 * kMs)
                            .call("cudaDeviceSynchronize", 1 * kMs, 5 * kMs, 1)
                            .kernel("warmup", 0, 5 * kMs, 2)
                            .kernel("gemm", 12 * kMs, 18 * kMs, 3)
                            .trace();
  EXPECT_TRUE(dlprof::analysis::host_syncs(trace).empty());
}

/// One 10 ms step of a C++ loop: a 6 ms kernel from 0.1 ms, then cudaDeviceSynchronize in the
/// range "log_metrics" from 0.2 to 6.1 ms, after which the GPU idles until 7.1 ms; then a
/// cudaStreamSynchronize of stream 7 from 7.2 to 7.6 ms while stream 9 runs until 9 ms.
dlprof::Trace synchronize_calls() {
  return AnalysisTraceBuilder()
      .step(1, 0, 10 * kMs)
      .call("cudaLaunchKernel", 50 * kUs, 90 * kUs, 1)
      .kernel("gemm", 100 * kUs, 6'100 * kUs, 1)
      .range("log_metrics", 150 * kUs, 6'150 * kUs)
      .call("cudaDeviceSynchronize", 200 * kUs, 6'100 * kUs, 2)
      .sync("Context Sync", 200 * kUs, 6'100 * kUs, 2, -1)
      .call("cudaLaunchKernel", 7'000 * kUs, 7'050 * kUs, 3)
      .kernel("relu", 7'100 * kUs, 7'150 * kUs, 3)
      .call("cudaLaunchKernel", 7'060 * kUs, 7'090 * kUs, 4)
      .kernel("softmax", 7'100 * kUs, 9'000 * kUs, 4, 0, 9)
      .call("cudaStreamSynchronize", 7'200 * kUs, 7'600 * kUs, 5)
      .sync("Stream Sync", 7'200 * kUs, 7'600 * kUs, 5)
      .trace();
}

TEST(HostSyncsTest, SynchronizeCallsAreNamedByTheirRangeAndSaveOnlyWhatTheGpuIdlesAfterThem) {
  const dlprof::Trace trace = synchronize_calls();
  const HostSyncs syncs = dlprof::analysis::host_syncs(trace);
  ASSERT_EQ(syncs.sites.size(), 2u);
  const SyncSite& device = syncs.sites[0];
  EXPECT_EQ(device.kind, SyncKind::Explicit);
  EXPECT_EQ(device.call, "cudaDeviceSynchronize");
  EXPECT_EQ(device.range, "log_metrics");
  EXPECT_EQ(device.place(), "log_metrics");
  EXPECT_TRUE(device.op.empty());
  EXPECT_EQ(device.wait_ns, 5'900 * kUs);
  EXPECT_EQ(device.gpu_idle_after_ns, 1'000 * kUs);  // 6.1 to 7.1 ms
  EXPECT_EQ(device.saving_ns, 1'000 * kUs);
  // Stream 9 keeps the GPU busy after the stream synchronisation: it costs the GPU nothing.
  const SyncSite& stream = syncs.sites[1];
  EXPECT_EQ(stream.call, "cudaStreamSynchronize");
  EXPECT_EQ(stream.wait_ns, 400 * kUs);
  EXPECT_EQ(stream.gpu_idle_after_ns, 0);
  EXPECT_EQ(stream.saving_ns, 0);

  const auto found = dlprof::analysis::recommendations(trace);
  const Recommendation* calls = finding_with_id(found, "synchronize_calls");
  ASSERT_NE(calls, nullptr) << finding_ids(found);
  EXPECT_DOUBLE_EQ(calls->impact_ns, 1'000'000.0);
  EXPECT_THAT(calls->text, HasSubstr("CUDA events"));
  EXPECT_THAT(calls->evidence,
              HasSubstr("1 cudaDeviceSynchronize (5.900 ms of waiting, the GPU idle 1.000 ms after them) in range log_metrics"));
}

TEST(HostSyncsTest, ASynchronizeCallAfterAnIdleStretchWaitsForNothingAndSavesNothing) {
  // The GPU had finished long before: the call returns at once, and what follows is not its doing.
  const dlprof::Trace trace = AnalysisTraceBuilder()
                                  .step(1, 0, 10 * kMs)
                                  .call("cudaLaunchKernel", 0, 50 * kUs, 1)
                                  .kernel("gemm", 100 * kUs, 1 * kMs, 1)
                                  .call("hipDeviceSynchronize", 3 * kMs, 3'005 * kUs, 2)
                                  .call("cudaLaunchKernel", 8 * kMs, 8'050 * kUs, 3)
                                  .kernel("relu", 8'100 * kUs, 8'200 * kUs, 3)
                                  .trace();
  const HostSyncs syncs = dlprof::analysis::host_syncs(trace);
  ASSERT_EQ(syncs.sites.size(), 1u);
  EXPECT_EQ(syncs.sites[0].wait_ns, 5 * kUs);
  EXPECT_EQ(syncs.sites[0].saving_ns, 5 * kUs);
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(trace), "synchronize_calls"), nullptr);
}

/// One 600 ms step: 493 ms of kernels, then a blocking 60-byte cudaMemcpy whose call starts at
/// 1 ms and returns at 494 ms (the copy itself: 2 us at 493.998 ms); the GPU idles 40 ms after it.
/// Then a 100 MiB pageable upload whose call (16 ms) is twice its 8 ms transfer.
dlprof::Trace copy_waits(std::uint8_t waiting_copy_kind) {
  return AnalysisTraceBuilder()
      .step(1, 0, 600 * kMs)
      .call("cudaLaunchKernel", 0, 50 * kUs, 1)
      .kernel("train_kernel", 1 * kMs, 493'998 * kUs, 1)
      .op("aten::to", 900 * kUs, 494'100 * kUs)
      .call("cudaMemcpy", 1 * kMs, 494 * kMs, 2)
      .memcpy(waiting_copy_kind, 493'998 * kUs, 494 * kMs, 2, 60, 0, 7, waiting_copy_kind == 1 ? 1 : 3,
              waiting_copy_kind == 1 ? 3 : 1)
      .call("cudaMemcpy", 530 * kMs, 546 * kMs, 3)
      .memcpy(/*HtoD*/ 1, 534 * kMs, 542 * kMs, 3, 100 << 20, 0, 7, /*Pageable*/ 1)
      .call("cudaLaunchKernel", 543 * kMs, 543'050 * kUs, 4)
      .kernel("next_kernel", 544 * kMs, 590 * kMs, 4)
      .trace();
}

TEST(HostSyncsTest, ACopyFarLongerThanItsTransferIsAWaitForTheGpu) {
  const dlprof::Trace trace = copy_waits(/*DtoH*/ 2);
  const HostSyncs syncs = dlprof::analysis::host_syncs(trace);
  ASSERT_EQ(syncs.sites.size(), 1u) << "the upload took its time transferring: no wait";
  const SyncSite& site = syncs.sites[0];
  EXPECT_EQ(site.kind, SyncKind::CopyWait);
  EXPECT_EQ(site.op, "aten::to");
  EXPECT_EQ(site.wait_ns, 492'998 * kUs);
  EXPECT_EQ(site.longest_wait_bytes, 60u);
  EXPECT_EQ(site.gpu_idle_after_ns, 40 * kMs);  // 494 ms to the upload at 534 ms
  EXPECT_EQ(site.saving_ns, 40 * kMs);

  const auto found = dlprof::analysis::recommendations(trace);
  const Recommendation* waits = finding_with_id(found, "copies_wait_for_gpu");
  ASSERT_NE(waits, nullptr) << finding_ids(found);
  EXPECT_THAT(waits->evidence, HasSubstr("the host waited 492.998 ms for the GPU at a 60 B copy (cudaMemcpy) in aten::to"));
  EXPECT_THAT(waits->text, HasSubstr("not the copy"));
  EXPECT_DOUBLE_EQ(waits->impact_ns, 40'000'000.0);
}

TEST(HostSyncsTest, AnUploadThatWaitedIsNotBlamedAsASlowCopy) {
  // The 60-byte upload waited 493 ms for the kernels: the synchronous-copy rule counts its 2 us
  // transfer and the 16 ms pageable upload, not the wait.
  const auto found = dlprof::analysis::recommendations(copy_waits(/*HtoD*/ 1));
  const Recommendation* synchronous = finding_with_id(found, "synchronous_copies");
  ASSERT_NE(synchronous, nullptr) << finding_ids(found);
  EXPECT_THAT(synchronous->evidence, HasSubstr("2 of 2 host-to-device copies synchronous"));
  EXPECT_THAT(synchronous->evidence, HasSubstr("16.002 ms spent in their calls on the CPU"));
  ASSERT_NE(finding_with_id(found, "copies_wait_for_gpu"), nullptr);
}

TEST(HostSyncsTest, ACopyWaitNeedsBothTheRatioAndTheFloor) {
  EXPECT_EQ(dlprof::analysis::copy_wait_ns(8 * kUs, 1 * kUs), 0) << "a launch's overhead is no wait";
  EXPECT_EQ(dlprof::analysis::copy_wait_ns(16 * kMs, 8 * kMs), 0) << "staging a pageable copy is no wait";
  EXPECT_EQ(dlprof::analysis::copy_wait_ns(300 * kUs, 100 * kUs), 200 * kUs);
  EXPECT_EQ(dlprof::analysis::copy_wait_ns(290 * kUs, 100 * kUs), 0);
  EXPECT_EQ(dlprof::analysis::copy_wait_ns(149 * kUs, 100 * kUs), 0);
}

TEST(HostSyncsTest, OnlyLibraryFramesGiveTheInnermostFrame) {
  const dlprof::Trace trace = AnalysisTraceBuilder()
                                  .step(1, 0, 10 * kMs)
                                  .python_frame("torch/nn/modules/module.py(1501): _call_impl", 0, 9 * kMs)
                                  .python_frame("nn.Module: Linear_0", 10 * kUs, 8 * kMs)
                                  .python_frame("<built-in method cuda_synchronize>", 20 * kUs, 7 * kMs)
                                  .call("cudaDeviceSynchronize", 30 * kUs, 6 * kMs, 1)
                                  .call("cudaLaunchKernel", 10 * kUs, 20 * kUs, 2)
                                  .kernel("gemm", 25 * kUs, 5'990 * kUs, 2)
                                  .trace();
  const HostSyncs syncs = dlprof::analysis::host_syncs(trace);
  ASSERT_EQ(syncs.sites.size(), 1u);
  EXPECT_EQ(syncs.sites[0].frame, "<built-in method cuda_synchronize>");
}

TEST(HostSyncsTest, ATraceWithoutCallsHasNoPoints) {
  const dlprof::Trace trace = AnalysisTraceBuilder().step(1, 0, kMs).op("aten::item", 0, 500 * kUs).trace();
  EXPECT_TRUE(dlprof::analysis::host_syncs(trace).empty());
}

}  // namespace
