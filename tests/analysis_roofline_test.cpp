// The roofline, the kernel table and MFU: every figure of the H200 traces' rows checked by hand
// arithmetic from the files' own numbers, a synthetic op above its roof flagged rather than given
// 130 %, data the cache holds told from a counting error, and no op of any reference trace with
// shapes above its roof.
#include <dlprof/analysis/device_clock.hpp>
#include <dlprof/analysis/kernel_table.hpp>
#include <dlprof/analysis/recommendations.hpp>
#include <dlprof/analysis/roofline.hpp>
#include <dlprof/import/chrome_trace.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "sanitized.hpp"

namespace roofline_test {

using dlprof::Trace;
using dlprof::analysis::RoofBound;
using dlprof::analysis::Precision;
using dlprof::analysis::roofline;
using dlprof::analysis::RooflineRow;

const RooflineRow* row_of(const dlprof::analysis::Roofline& result, std::string_view op, std::string_view dims,
                          bool matrix_units) {
  for (const RooflineRow& row : result.rows)
    if (row.op == op && row.input_dims == dims && row.matrix_units == matrix_units) return &row;
  return nullptr;
}
// A row points into its roofline, which must outlive it.
const RooflineRow* row_of(dlprof::analysis::Roofline&&, std::string_view, std::string_view, bool) = delete;

Trace read_h200_trace(std::string_view file) {
  return dlprof::read_trace(std::string(DLPROF_TEST_DATA_DIR) + "/h200/" + std::string(file));
}

/// The span of a trace's ProfilerSteps: [first start, last end).
std::pair<std::int64_t, std::int64_t> steps_span(const Trace& trace) {
  std::int64_t begin = INT64_MAX;
  std::int64_t end = INT64_MIN;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Step) {
      begin = std::min(begin, event.start_ns);
      end = std::max(end, event.end_ns);
    }
  return {begin, end};
}

class H200RooflineTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    trace_ = new Trace(read_h200_trace("roofline-dlprof.pt.trace.json.gz"));
    torch_trace_ = new Trace(read_h200_trace("roofline-torch.pt.trace.json.gz"));
  }
  static void TearDownTestSuite() {
    delete trace_;
    delete torch_trace_;
  }
  static const Trace* trace_;        ///< dlprof's LibTorch observer: no Input Strides
  static const Trace* torch_trace_;  ///< LibTorch's Kineto, PyTorch 2.11: Input Strides
};
const Trace* H200RooflineTest::trace_ = nullptr;
const Trace* H200RooflineTest::torch_trace_ = nullptr;

TEST_F(H200RooflineTest, TheBf16MatmulIsComputeBoundAt72PercentOfTheDensePeakAndTopsTheTimeLost) {
  const auto result = roofline(*trace_);
  EXPECT_EQ(result.unknown_device_ns, 0);
  const RooflineRow* mm = row_of(result, "aten::mm", "[[8192, 8192], [8192, 8192]]", true);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(&result.rows.front(), mm) << "the most time lost";
  EXPECT_EQ(mm->precision, Precision::BF16);
  EXPECT_EQ(mm->calls, 200);
  EXPECT_EQ(mm->kernel_ns, 308'504'229);
  EXPECT_EQ(mm->flops, 200ull * 2 * 8192 * 8192 * 8192);
  // Two BF16 inputs read and one output written: 3 x 8192^2 x 2 bytes a call.
  EXPECT_EQ(mm->bytes, 200ull * 3 * 8192 * 8192 * 2);
  EXPECT_NEAR(*mm->intensity(), 2.0 * 8192 / 6, 1e-9);  // 2730.7 FLOPs a byte
  EXPECT_NEAR(mm->tflops(), 219'902'325'555'200.0 / 308'504'229 / 1e3, 1e-9);  // 712.80
  EXPECT_EQ(mm->peak_tflops, 989.4);
  EXPECT_EQ(mm->memory_tb_per_s, 4.8);
  EXPECT_EQ(mm->bound, RoofBound::Compute);  // 2730.7 is far above the ridge, 989.4 / 4.8 = 206.1
  ASSERT_TRUE(mm->efficiency.has_value());
  EXPECT_NEAR(*mm->efficiency, 712.7993 / 989.4, 1e-5);
  EXPECT_NEAR(static_cast<double>(mm->time_lost_ns), 308'504'229 * (1 - 712.7993 / 989.4), 2e3);  // 86.2 ms
  EXPECT_FALSE(mm->mamf_share.has_value()) << "no MAMF is published for the H200";
  EXPECT_TRUE(mm->above_roof.empty());
}

TEST_F(H200RooflineTest, AShapeNotAMultipleOfEightRunsAnOlderKernelAtAnEighthOfThePeak) {
  const auto result = roofline(*trace_);
  const RooflineRow* odd = row_of(result, "aten::mm", "[[8191, 8191], [8191, 8191]]", true);
  ASSERT_NE(odd, nullptr);
  EXPECT_EQ(odd->flops, 5ull * 2 * 8191 * 8191 * 8191);
  EXPECT_EQ(odd->kernel_ns, 45'192'713);
  EXPECT_NEAR(odd->tflops(), 121.60, 0.01);
  EXPECT_NEAR(*odd->efficiency, 121.60 / 989.4, 1e-4);
}

TEST_F(H200RooflineTest, Fp32MatmulsSplitByTheUnitsTheirKernelsRanOn) {
  const auto result = roofline(*trace_);
  const RooflineRow* tf32 = row_of(result, "aten::mm", "[[4096, 4096], [4096, 4096]]", true);
  const RooflineRow* fp32 = row_of(result, "aten::mm", "[[4096, 4096], [4096, 4096]]", false);
  ASSERT_NE(tf32, nullptr);
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(tf32->precision, Precision::TF32);
  EXPECT_EQ(tf32->peak_tflops, 494.7);
  EXPECT_EQ(fp32->precision, Precision::FP32);  // cuBLAS's FFMA kernel: TF32 was off
  EXPECT_EQ(fp32->peak_tflops, 67);
  EXPECT_EQ(tf32->calls, 5);
  EXPECT_EQ(fp32->calls, 5);
  EXPECT_EQ(tf32->kernel_ns + fp32->kernel_ns, 19'228'383);
  EXPECT_TRUE(fp32->above_roof.empty()) << fp32->above_roof;
  EXPECT_LT(fp32->tflops(), 67);
  EXPECT_GT(tf32->tflops(), fp32->tflops());
}

TEST_F(H200RooflineTest, TheBigAddIsMemoryBoundAtNinetyTwoPercentOfHbm) {
  const auto result = roofline(*trace_);
  const RooflineRow* add = row_of(result, "aten::add", "[[268435456], [268435456], []]", false);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->flops, 5ull << 28);  // one FLOP an element
  EXPECT_EQ(add->bytes, 5ull * 3 * (1ull << 28) * 2);
  EXPECT_EQ(add->kernel_ns, 1'824'889);
  EXPECT_EQ(add->bound, RoofBound::Memory);
  EXPECT_NEAR(add->tb_per_s(), 8'053'063'680.0 / 1'824'889 / 1e3, 1e-9);  // 4.413 TB/s
  EXPECT_NEAR(*add->efficiency, 4.41292 / 4.8, 1e-4);
}

TEST_F(H200RooflineTest, AGatherByAnExpandedIndexIsMemoryBoundOnceItsStridesAreKnown) {
  // gather(table [50304, 4096] bf16, 0, index [16384, 1] expanded to [16384, 4096]): with the
  // strides, the index's 16384 longs are read, and 2 x 16384 x 4096 bf16 gathered and written.
  const auto torch_rows = roofline(*torch_trace_);
  const RooflineRow* gather = row_of(torch_rows, "aten::gather",
                                     "[[50304, 4096], [], [16384, 4096], [], [16384, 4096]]", false);
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->calls, 5);
  EXPECT_EQ(gather->bytes, 5ull * (8 * 16384 + 2 * 2 * 16384 * 4096));
  EXPECT_EQ(gather->flops, 0u);
  EXPECT_EQ(gather->bound, RoofBound::Memory);
  EXPECT_TRUE(gather->above_roof.empty()) << gather->above_roof;
  ASSERT_TRUE(gather->efficiency.has_value());
  EXPECT_NEAR(*gather->efficiency, gather->tb_per_s() / 4.8, 1e-12);
  EXPECT_LT(*gather->efficiency, 1.0);
  // dlprof's observer records no strides: the expanded index counts whole, 8 x 16384 x 4096
  // bytes more, and the figure passes the roof: flagged, not given an efficiency.
  const auto dlprof_rows = roofline(*trace_);
  const RooflineRow* whole = row_of(dlprof_rows, "aten::gather",
                                    "[[50304, 4096], [], [16384, 4096], [], [16384, 4096]]", false);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->bytes, 5ull * (8 * 16384 * 4096 + 2 * 2 * 16384 * 4096));
  EXPECT_THAT(whole->above_roof, testing::HasSubstr("is above the memory bandwidth of 4.8 TB/s"));
  EXPECT_FALSE(whole->efficiency.has_value());
}

TEST_F(H200RooflineTest, ModelFlopUtilizationOfTheStepsByHand) {
  const auto [begin, end] = steps_span(*torch_trace_);
  const auto mfu = dlprof::analysis::model_flops_utilization(*torch_trace_, begin, end);
  ASSERT_TRUE(mfu.has_value());
  // 200 BF16 8192^3 and 5 8191^3 matmuls, 10 FP32/TF32 4096^3 ones, 5 attention forwards
  // (2 x 8 x 16 x 4096^2 x 256), the convolution's, softmax's (5 per element), layer norm's (7)
  // and the add's (1) FLOPs.
  const std::uint64_t flops = 200ull * 2 * 8192 * 8192 * 8192 + 5ull * 2 * 8191 * 8191 * 8191 +
                              10ull * 2 * 4096 * 4096 * 4096 + 5ull * 2 * 8 * 16 * 4096 * 4096 * 256 +
                              591'900'180'480 + 5ull * 5 * 8192 * 8192 + 5ull * 7 * 8192 * 8192 + (5ull << 28);
  EXPECT_EQ(mfu->flops, flops);
  EXPECT_EQ(mfu->unknown_ops, 0u);
  EXPECT_EQ(mfu->span_ns, end - begin);
  EXPECT_EQ(mfu->precision, Precision::BF16);  // most FLOPs: the BF16 matmuls
  EXPECT_TRUE(mfu->matrix_units);
  EXPECT_EQ(mfu->peak_tflops, 989.4);
  EXPECT_EQ(mfu->devices, 1u);
  EXPECT_NEAR(mfu->utilization(), static_cast<double>(flops) / static_cast<double>(end - begin) / 1e3 / 989.4, 1e-12);
  EXPECT_NEAR(mfu->utilization(), 0.595, 0.001);
  // No span, or one without ops: none.
  EXPECT_FALSE(dlprof::analysis::model_flops_utilization(*torch_trace_, end, begin).has_value());
  EXPECT_FALSE(dlprof::analysis::model_flops_utilization(*torch_trace_, end, end + 1).has_value());
}

TEST_F(H200RooflineTest, TheKernelTableJudgesEachKernelAgainstItsOpsRoof) {
  const auto table = dlprof::analysis::kernel_table(*torch_trace_);
  EXPECT_EQ(table.unknown_device_ns, 0);
  ASSERT_FALSE(table.rows.empty());
  const dlprof::analysis::KernelTableRow& top = table.rows.front();  // the most time lost
  EXPECT_EQ(top.kernel, "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT");
  EXPECT_EQ(top.op, "aten::mm");
  EXPECT_EQ(top.input_dims, "[[8192, 8192], [8192, 8192]]");
  EXPECT_EQ(top.calls, 200);
  EXPECT_TRUE(top.matrix_units);
  EXPECT_EQ(top.precision, Precision::BF16);
  // One kernel an op: its whole cost; the workspace memsets cuBLAS runs before some get none.
  EXPECT_EQ(top.flops, 200ull * 2 * 8192 * 8192 * 8192);
  EXPECT_EQ(top.bound, RoofBound::Compute);
  const auto ops = roofline(*torch_trace_);
  const RooflineRow* op = row_of(ops, "aten::mm", "[[8192, 8192], [8192, 8192]]", true);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(top.kernel_ns, op->kernel_ns);
  EXPECT_DOUBLE_EQ(*top.efficiency, *op->efficiency);
  EXPECT_EQ(top.time_lost_ns, op->time_lost_ns);
  EXPECT_GT(top.grid[0], 0u);
  EXPECT_GT(top.block[0], 0u);
  std::int64_t sum = 0;
  for (const auto& row : table.rows) {
    sum += row.kernel_ns;
    EXPECT_TRUE(row.above_roof.empty()) << row.kernel << " " << row.above_roof;
  }
  EXPECT_EQ(sum, table.kernel_ns);
}

TEST_F(H200RooflineTest, TheClockTheGpuRanAtTakesTheMatmulFrom72To92PercentOfItsPeak) {
  // NVML's readings in the steps: 39 SM clocks summing to 60,795 MHz, 1,515 to 1,605; the power
  // cap held the clocks down in every reading, heat in none.
  const auto [begin, end] = steps_span(*trace_);
  const auto clocks = dlprof::analysis::device_clocks(*trace_, begin, end);
  ASSERT_EQ(clocks.size(), 1u);
  const dlprof::analysis::DeviceClock& clock = clocks.front();
  EXPECT_EQ(clock.clock_readings, 39u);
  EXPECT_DOUBLE_EQ(clock.mean_sm_mhz, 60'795.0 / 39);
  EXPECT_EQ(clock.min_sm_mhz, 1515);
  EXPECT_EQ(clock.max_sm_mhz, 1605);
  EXPECT_EQ(clock.boost_mhz, 1980);
  EXPECT_EQ(clock.power_limited, 1.0);
  EXPECT_EQ(clock.temperature_limited, 0.0);
  ASSERT_TRUE(clock.mean_power_watts.has_value());
  EXPECT_DOUBLE_EQ(*clock.clock_share(), 60'795.0 / 39 / 1980);
  const auto rows = roofline(*trace_);
  const RooflineRow* mm = row_of(rows, "aten::mm", "[[8192, 8192], [8192, 8192]]", true);
  ASSERT_NE(mm, nullptr);
  EXPECT_NEAR(*clock.at_clock(*mm->efficiency), 0.7204 / (60'795.0 / 39 / 1980), 1e-3);  // 91.5 %
  // torch.profiler's own trace has no NVML readings.
  EXPECT_TRUE(dlprof::analysis::device_clocks(*torch_trace_, begin, end).empty());
}

TEST_F(H200RooflineTest, Float32MatmulsOnCudaCoresBesideTensorCoreKernelsAskForTf32) {
  // The H200 trace: 5 float32 4096^3 products on cuBLAS's FFMA kernel while BF16 products use
  // Tensor Cores.
  const auto found = dlprof::analysis::recommendations(*torch_trace_);
  const auto tf32 = std::find_if(found.begin(), found.end(), [](const auto& r) { return r.id == "fp32_matmuls_on_cuda_cores"; });
  ASSERT_NE(tf32, found.end());
  EXPECT_THAT(tf32->text, testing::HasSubstr("setAllowTF32CuBLAS(true)"));
  EXPECT_THAT(tf32->evidence, testing::HasSubstr("17.120 ms of float32 GEMM/conv kernels off Tensor Cores; the longest: aten::mm "
                                        "[[4096, 4096], [4096, 4096]] (5 calls, 17.120 ms, 40.1 TFLOP/s: 60% of the CUDA "
                                        "cores' 67 TFLOP/s)"));
  EXPECT_NEAR(tf32->impact_ns, 17'120'205.0 / 5 / 2, 1.0);  // half their time, over the trace's 5 steps
}

TEST(DeviceClockTest, MeansAndSharesOfTheReadingsInTheSpan) {
  Trace trace;
  dlprof::DeviceProperties h100;
  h100.name = "NVIDIA H100 80GB HBM3";
  h100.compute_major = 9;
  h100.num_sms = 132;
  trace.devices.push_back(h100);
  dlprof::DeviceProperties unknown;
  unknown.id = 1;
  unknown.name = "NVIDIA GeForce RTX 4090";
  trace.devices.push_back(unknown);
  using Kind = dlprof::DeviceCounterKind;
  trace.device_counters = {{10, 1000, 0, Kind::SmClockMhz},   {20, 1500, 0, Kind::SmClockMhz},
                           {10, 1, 0, Kind::LimitedByPower},  {20, 0, 0, Kind::LimitedByPower},
                           {20, 400, 0, Kind::PowerWatts},    {500, 100, 0, Kind::SmClockMhz},
                           {15, 1200, 1, Kind::SmClockMhz}};
  const auto clocks = dlprof::analysis::device_clocks(trace, 0, 100);
  ASSERT_EQ(clocks.size(), 2u);
  const dlprof::analysis::DeviceClock& first = clocks[0];
  EXPECT_EQ(first.clock_readings, 2u);  // the reading at 500 is outside the span
  EXPECT_EQ(first.mean_sm_mhz, 1250);
  EXPECT_EQ(first.min_sm_mhz, 1000);
  EXPECT_EQ(first.max_sm_mhz, 1500);
  EXPECT_EQ(first.power_limited, 0.5);
  EXPECT_FALSE(first.temperature_limited.has_value()) << "not read: unknown, not 0";
  EXPECT_EQ(first.mean_power_watts, 400);
  EXPECT_DOUBLE_EQ(*first.clock_share(), 1250.0 / 1980);
  EXPECT_DOUBLE_EQ(*first.at_clock(0.5), 0.5 / (1250.0 / 1980));
  // Device 1 is a GPU dlprof has no peaks of: no boost clock, no share.
  EXPECT_EQ(clocks[1].mean_sm_mhz, 1200);
  EXPECT_FALSE(clocks[1].clock_share().has_value());
  // The peaks a user gives stand for every device's.
  const auto given = dlprof::analysis::parse_device_peaks("bf16=100, memory=1, boost_mhz=2400");
  EXPECT_DOUBLE_EQ(*dlprof::analysis::device_clocks(trace, 0, 100, &given)[1].clock_share(), 0.5);
}

TEST(RooflineTest, DataACallMovesThatFitsInTheCacheIsNoCountingError) {
  // A PyTorch 2.11 transformer's in-place add of two [3, 256, 16, 512] bf16 tensors: 37.7 MB a
  // call, under the H200's 50 MB L2, moved at more than HBM's 4.8 TB/s.
  const Trace trace = read_h200_trace("pt2.11-transformer.pt.trace.json.gz");
  const auto rows = roofline(trace);
  const RooflineRow* add = row_of(rows, "aten::add_", "[[3, 256, 16, 512], [3, 256, 16, 512], []]", false);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(*add->bytes / static_cast<std::uint64_t>(add->calls), 3ull * 3 * 256 * 16 * 512 * 2);
  EXPECT_GT(add->tb_per_s(), 4.8);
  EXPECT_TRUE(add->cache_resident);
  EXPECT_TRUE(add->above_roof.empty()) << add->above_roof;
  EXPECT_FALSE(add->efficiency.has_value());
  EXPECT_EQ(add->time_lost_ns, 0);
}

TEST(RooflineTest, AFigureAboveItsRoofIsFlaggedNotGivenAnEfficiency) {
  // An FP16 matmul of 2 x 1024^3 FLOPs whose kernel took 1 us: 2,147 TFLOP/s on an H100 SXM,
  // whose dense FP16 peak is 989.4 (a sparse peak or a wrong formula would give this).
  Trace trace;
  trace.names = {"aten::mm", "[[1024, 1024], [1024, 1024]]", "[\"c10::Half\", \"c10::Half\"]", "[\"\", \"\"]",
                 "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n"};
  trace.op_inputs.push_back(dlprof::OpInputs{1, 2, 3, 0, 0, 0});
  dlprof::TraceEvent op;
  op.kind = dlprof::EventKind::Op;
  op.name = 0;
  op.inputs = 0;
  op.external_id = 9;
  op.end_ns = 10'000;
  trace.events.push_back(op);
  dlprof::GpuEvent kernel;
  kernel.name = 4;
  kernel.external_id = 9;
  kernel.start_ns = 2'000;
  kernel.end_ns = 3'000;
  trace.gpu_events.push_back(kernel);
  dlprof::DeviceProperties h100;
  h100.name = "NVIDIA H100 80GB HBM3";
  h100.compute_major = 9;
  h100.num_sms = 132;
  trace.devices.push_back(h100);
  const auto result = roofline(trace);
  ASSERT_EQ(result.rows.size(), 1u);
  const RooflineRow& row = result.rows.front();
  EXPECT_EQ(row.precision, Precision::FP16);
  EXPECT_TRUE(row.matrix_units);
  EXPECT_EQ(row.flops, 2ull * 1024 * 1024 * 1024);
  EXPECT_EQ(row.above_roof, "2147.5 TFLOP/s is above FP16's matrix peak of 989.4 TFLOP/s");
  EXPECT_FALSE(row.efficiency.has_value());
  EXPECT_EQ(row.time_lost_ns, 0);

  trace.devices.front().name = "NVIDIA GeForce RTX 4090";
  const auto unknown = roofline(trace);
  EXPECT_EQ(unknown.unknown_device_ns, 1'000);
  EXPECT_EQ(unknown.rows.front().peak_tflops, 0);
  EXPECT_EQ(unknown.rows.front().bound, RoofBound::Unknown);
}

TEST(RooflineTest, NoOpOrKernelOfAReferenceTraceIsAboveItsRoof) {
  if (dlprof_test::kSanitized)
    GTEST_SKIP() << "arithmetic over every reference trace: the main build runs it, in a tenth of the sanitizers' time";
  std::vector<std::string> files;
  for (const auto& set : std::filesystem::directory_iterator(DLPROF_REFERENCE_TRACES_DIR))
    if (set.is_directory())
      for (const auto& file : std::filesystem::directory_iterator(set.path())) files.push_back(file.path().string());
  // The H200's traces by torch.profiler, which records strides (dlprof's observer does not yet).
  for (const char* file : {"roofline-torch.pt.trace.json.gz", "pt2.11-transformer.pt.trace.json.gz",
                           "pt2.11-leak.pt.trace.json.gz"})
    files.push_back(std::string(DLPROF_TEST_DATA_DIR) + "/h200/" + file);
  std::size_t judged = 0;
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const Trace trace = dlprof::read_trace(file);
    for (const RooflineRow& row : roofline(trace).rows) {
      EXPECT_TRUE(row.above_roof.empty()) << row.op << " " << row.input_dims << " " << row.input_types << ": "
                                          << row.above_roof;
      judged += row.efficiency.has_value();
    }
    for (const auto& row : dlprof::analysis::kernel_table(trace).rows)
      EXPECT_TRUE(row.above_roof.empty()) << row.kernel << " of " << row.op << " " << row.input_dims << ": "
                                          << row.above_roof;
  }
  EXPECT_GT(judged, 100u) << "the check has rows to judge";
}

}  // namespace roofline_test
