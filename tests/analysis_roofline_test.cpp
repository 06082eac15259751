// The roofline: every figure of the H200 trace's rows checked by hand arithmetic from the file's
// own numbers, a synthetic op above its roof flagged rather than given 130 %, and no op of any
// reference trace with shapes above its roof.
#include <dlprof/analysis/roofline.hpp>
#include <dlprof/import/chrome_trace.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

class H200RooflineTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    trace_ = new Trace(dlprof::read_trace(std::string(DLPROF_TEST_DATA_DIR) + "/h200/roofline-dlprof.pt.trace.json.gz"));
  }
  static void TearDownTestSuite() { delete trace_; }
  static const Trace* trace_;
};
const Trace* H200RooflineTest::trace_ = nullptr;

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

TEST(RooflineTest, NoOpOfAReferenceTraceIsAboveItsRoof) {
  if (dlprof_test::kSanitized)
    GTEST_SKIP() << "arithmetic over every reference trace: the main build runs it, in a tenth of the sanitizers' time";
  for (const auto& set : std::filesystem::directory_iterator(DLPROF_REFERENCE_TRACES_DIR)) {
    if (!set.is_directory()) continue;
    for (const auto& file : std::filesystem::directory_iterator(set.path())) {
      SCOPED_TRACE(file.path().string());
      const Trace trace = dlprof::read_trace(file.path().string());
      for (const RooflineRow& row : roofline(trace).rows)
        EXPECT_TRUE(row.above_roof.empty()) << row.op << " " << row.input_dims << " " << row.input_types << ": "
                                            << row.above_roof;
    }
  }
}

}  // namespace roofline_test
