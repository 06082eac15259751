#include <dlprof/flops.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <string_view>

namespace dlprof {

inline bool operator==(const OpCost& a, const OpCost& b) { return a.flops == b.flops && a.bytes == b.bytes; }

// Lets GoogleTest print a cost in failure messages.
inline void PrintTo(const OpCost& cost, std::ostream* os) {
  *os << "OpCost{flops " << cost.flops << ", bytes ";
  if (cost.bytes) *os << *cost.bytes; else *os << "unknown";
  *os << "}";
}

}  // namespace dlprof

namespace {

using dlprof::OpCost;

std::optional<OpCost> cost(std::string_view op, std::string_view dims, std::string_view types,
                           std::string_view concrete = "") {
  return dlprof::estimate_op_cost(op, dims, types, concrete);
}

// ---- values measured with PyTorch's with_flops -----------------------------------------------

TEST(FlopsTest, MmMatchesPyTorch) {
  // 2*m*k*n = 2*2*10*128 = 5120; bytes (2*10 + 10*128 read + 2*128 written) * 4 = 1556*4 = 6224
  EXPECT_EQ(cost("aten::mm", "[[2, 10], [10, 128]]", R"(["float", "float"])", R"(["", ""])"), (OpCost{5120, 6224}));
}

TEST(FlopsTest, AddmmCountsOnlyTheProductLikePyTorch) {
  // bias [10], m1 [2, 128], m2 [128, 10]: 2*2*128*10 = 5120;
  // bytes (10 + 256 + 1280 read + 20 written) * 4 = 1566*4 = 6264
  EXPECT_EQ(cost("aten::addmm", "[[10], [2, 128], [128, 10], [], []]",
                 R"(["float", "float", "float", "Scalar", "Scalar"])", R"(["", "", "", "1", "1"])"),
            (OpCost{5120, 6264}));
}

TEST(FlopsTest, Conv2dMatchesPyTorch) {
  // P = Q = floor((8 + 2*1 - 1*(3-1) - 1)/2) + 1 = 4; 2*N*K*P*Q*(C/g)*R*S = 2*2*8*16*3*9 = 13824.
  // bytes: input 384 + weight 216 + bias 8 read, output 2*8*4*4 = 256 written: 864*4 = 3456
  EXPECT_EQ(cost("aten::conv2d", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])"),
            (OpCost{13824, 3456}));
}

TEST(FlopsTest, GroupedConv2dMatchesPyTorch) {
  // P = Q = 8 - 3 + 1 = 6; 2*2*6*(6*6)*(4/2)*9 = 15552
  const auto grouped = cost("aten::conv2d", "[[2, 4, 8, 8], [6, 2, 3, 3], [], [], [], [], []]",
                            R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                            R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "2"])");
  ASSERT_TRUE(grouped);
  EXPECT_EQ(grouped->flops, 15552u);
  // bytes: input 512 + weight 108 read, output 2*6*6*6 = 432 written: 1052*4 = 4208
  EXPECT_EQ(grouped->bytes, 4208u);
}

TEST(FlopsTest, ConvolutionBackwardMatchesPyTorch) {
  // The forward conv of Conv2dMatchesPyTorch (13824), once: only grad_weight is asked for.
  // bytes: grad_output 256 + input 384 + weight 216 read; grad_weight 216 + grad_bias 8 written:
  // 1080*4 = 4320
  EXPECT_EQ(cost("aten::convolution_backward", "[[2, 8, 4, 4], [2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], [], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", ""])",
                 R"(["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"])"),
            (OpCost{13824, 4320}));
}

TEST(FlopsTest, MulAndAddMatchPyTorch) {
  // 2*3*8*8 = 384 elements; mul reads 384 and writes 384 floats: 3072 bytes
  EXPECT_EQ(cost("aten::mul", "[[2, 3, 8, 8], []]", R"(["float", "Scalar"])", R"(["", "2"])"), (OpCost{384, 3072}));
  // add reads two and writes one: 3*384*4 = 4608
  EXPECT_EQ(cost("aten::add", "[[2, 3, 8, 8], [2, 3, 8, 8], []]", R"(["float", "float", "Scalar"])",
                 R"(["", "", "1"])"),
            (OpCost{384, 4608}));
}

// ---- matrix products -------------------------------------------------------------------------

TEST(FlopsTest, BmmAndBaddbmm) {
  // 2*b*m*k*n = 2*3*4*5*6 = 720; bytes (60 + 90 read + 72 written) * 4 = 888
  EXPECT_EQ(cost("aten::bmm", "[[3, 4, 5], [3, 5, 6]]", R"(["float", "float"])"), (OpCost{720, 888}));
  // baddbmm reads its [3, 4, 6] bias too: 888 + 72*4 = 1176
  EXPECT_EQ(cost("aten::baddbmm", "[[3, 4, 6], [3, 4, 5], [3, 5, 6], [], []]",
                 R"(["float", "float", "float", "Scalar", "Scalar"])"),
            (OpCost{720, 1176}));
  // Batch sizes must agree (bmm does not broadcast).
  EXPECT_EQ(cost("aten::bmm", "[[3, 4, 5], [2, 5, 6]]", R"(["float", "float"])"), std::nullopt);
  EXPECT_EQ(cost("aten::bmm", "[[4, 5], [5, 6]]", R"(["float", "float"])"), std::nullopt);
}

TEST(FlopsTest, MatmulPromotesOneDimensionalOperands) {
  // dot: 2*k = 14; bytes (7 + 7 read + 1 written) * 4 = 60
  EXPECT_EQ(cost("aten::matmul", "[[7], [7]]", R"(["float", "float"])"), (OpCost{14, 60}));
  // [4] x [4, 5] as [1, 4] x [4, 5]: 2*1*4*5 = 40
  EXPECT_EQ(cost("aten::matmul", "[[4], [4, 5]]", R"(["float", "float"])")->flops, 40u);
  // [3, 4] x [4] as [3, 4] x [4, 1]: 2*3*4*1 = 24
  EXPECT_EQ(cost("aten::matmul", "[[3, 4], [4]]", R"(["float", "float"])")->flops, 24u);
  // [2, 3] x [3, 5] is mm: 2*2*3*5 = 60
  EXPECT_EQ(cost("aten::matmul", "[[2, 3], [3, 5]]", R"(["float", "float"])")->flops, 60u);
  // [4] x [2, 4, 5]: batch 2 of [1, 4] x [4, 5]: 2*2*1*4*5 = 80
  EXPECT_EQ(cost("aten::matmul", "[[4], [2, 4, 5]]", R"(["float", "float"])")->flops, 80u);
}

TEST(FlopsTest, MatmulBroadcastsBatchDimensions) {
  // batch [2, 1] with [5] -> [2, 5] = 10; 2*10*3*4*6 = 1440;
  // bytes (2*3*4 = 24 + 5*4*6 = 120 read + 10*3*6 = 180 written) * 4 = 1296
  EXPECT_EQ(cost("aten::matmul", "[[2, 1, 3, 4], [5, 4, 6]]", R"(["float", "float"])"), (OpCost{1440, 1296}));
  EXPECT_EQ(cost("aten::matmul", "[[2, 3, 4], [5, 4, 6]]", R"(["float", "float"])"), std::nullopt);  // 2 vs 5
  EXPECT_EQ(cost("aten::matmul", "[[3, 4], [5, 6]]", R"(["float", "float"])"), std::nullopt);        // k 4 vs 5
  EXPECT_EQ(cost("aten::matmul", "[[], [4]]", R"(["float", "float"])"), std::nullopt);               // 0-D
}

TEST(FlopsTest, MmRejectsMismatchedOrMissingOperands) {
  EXPECT_EQ(cost("aten::mm", "[[2, 10], [11, 128]]", R"(["float", "float"])"), std::nullopt);
  EXPECT_EQ(cost("aten::mm", "[[2, 10]]", R"(["float"])"), std::nullopt);
  EXPECT_EQ(cost("aten::mm", "[[2, 10], []]", R"(["float", ""])"), std::nullopt);
  EXPECT_EQ(cost("aten::mm", "[[2, 2, 10], [10, 128]]", R"(["float", "float"])"), std::nullopt);
  EXPECT_EQ(cost("aten::addmm", "[[10], [2, 128]]", R"(["float", "float"])"), std::nullopt);
}

TEST(FlopsTest, MmWithAnEmptyInnerDimensionDoesNoWork) {
  // 2*2*0*3 = 0 FLOPs; bytes 2*3 written * 4 = 24
  EXPECT_EQ(cost("aten::mm", "[[2, 0], [0, 3]]", R"(["float", "float"])"), (OpCost{0, 24}));
}

TEST(FlopsTest, Linear) {
  // input [8, 16, 32], weight [64, 32]: 128 rows, 2*128*32*64 = 524288;
  // bytes (4096 + 2048 + 64 read + 128*64 = 8192 written) * 4 = 14400*4 = 57600
  EXPECT_EQ(cost("aten::linear", "[[8, 16, 32], [64, 32], [64]]", R"(["float", "float", "float"])"),
            (OpCost{524288, 57600}));
  // A 1-D input is one row: 2*32*64 = 4096; bias None
  EXPECT_EQ(cost("aten::linear", "[[32], [64, 32], []]", R"(["float", "float", ""])")->flops, 4096u);
  EXPECT_EQ(cost("aten::linear", "[[8, 31], [64, 32], []]", R"(["float", "float", ""])"), std::nullopt);
}

// ---- convolutions ----------------------------------------------------------------------------

TEST(FlopsTest, Conv1dWithStridePaddingDilationAndGroups) {
  // input [4, 6, 20], weight [12, 3, 5], stride 2, padding 1, dilation 2, groups 2:
  // P = floor((20 + 2 - 2*4 - 1)/2) + 1 = 7; 2*4*12*7*(6/2)*5 = 10080
  const auto conv = cost("aten::conv1d", "[[4, 6, 20], [12, 3, 5], [], [], [], [], []]",
                         R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                         R"(["", "", "", "[2]", "[1]", "[2]", "2"])");
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->flops, 10080u);
  // bytes (480 + 180 read + 4*12*7 = 336 written) * 4 = 996*4 = 3984
  EXPECT_EQ(conv->bytes, 3984u);
}

TEST(FlopsTest, Conv3dWithDifferentParametersPerDimension) {
  // input [1, 4, 6, 8, 10], weight [8, 4, 3, 3, 3], stride [1, 2, 3], padding [1, 0, 1],
  // dilation [1, 1, 2]:
  // D = (6 + 2 - 2 - 1)/1 + 1 = 6; H = (8 + 0 - 2 - 1)/2 + 1 = 3; W = (10 + 2 - 4 - 1)/3 + 1 = 3
  // 2*1*8*(6*3*3)*4*27 = 93312
  EXPECT_EQ(cost("aten::conv3d", "[[1, 4, 6, 8, 10], [8, 4, 3, 3, 3], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[1, 2, 3]", "[1, 0, 1]", "[1, 1, 2]", "1"])")
                ->flops,
            93312u);
}

TEST(FlopsTest, OneElementListsBroadcastToEverySpatialDimension) {
  EXPECT_EQ(cost("aten::conv2d", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[2]", "[1]", "[1]", "1"])")
                ->flops,
            13824u);
}

TEST(FlopsTest, MissingTrailingConvArgumentsTakeTorchDefaults) {
  // stride 1, padding 0, dilation 1, groups 1: P = Q = 6; 2*2*8*36*3*9 = 31104
  EXPECT_EQ(cost("aten::conv2d", "[[2, 3, 8, 8], [8, 3, 3, 3]]", R"(["float", "float"])", R"(["", ""])")->flops,
            31104u);
}

TEST(FlopsTest, UnbatchedConvolution) {
  // [3, 8, 8] is one image: 13824 / 2
  EXPECT_EQ(cost("aten::conv2d", "[[3, 8, 8], [8, 3, 3, 3], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])")
                ->flops,
            6912u);
}

TEST(FlopsTest, ConvolutionAndUnderscoreConvolutionReadTheirOwnArgumentOrder) {
  // The conv of Conv2dMatchesPyTorch through (input, weight, bias, stride, padding, dilation,
  // transposed, output_padding, groups[, benchmark, deterministic, cudnn_enabled, allow_tf32]).
  EXPECT_EQ(cost("aten::convolution", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])"),
            (OpCost{13824, 3456}));
  EXPECT_EQ(cost("aten::_convolution", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], [], [], [], [], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "False", "False", "True", "True"])")
                ->flops,
            13824u);
  // aten::convolution has no defaults: an op cut short has no estimate.
  EXPECT_EQ(cost("aten::convolution", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]"])"),
            std::nullopt);
}

TEST(FlopsTest, CudnnAndMkldnnConvolutionTakePaddingBeforeStride) {
  // cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic,
  // allow_tf32): padding [1, 1], stride [2, 2] is the conv of Conv2dMatchesPyTorch.
  EXPECT_EQ(cost("aten::cudnn_convolution", "[[2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], [], [], []]",
                 R"(["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"])",
                 R"(["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])")
                ->flops,
            13824u);
  // mkldnn_convolution(self, weight, bias, padding, stride, dilation, groups)
  const char* mkldnn_concrete = R"(["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"])";
  const char* dims = "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], []]";
  const char* types = R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"])";
  EXPECT_EQ(cost("aten::mkldnn_convolution", dims, types, mkldnn_concrete), (OpCost{13824, 3456}));
  // Read in conv2d's order, the same texts mean stride 1, padding 2: P = Q = (8 + 4 - 2 - 1) + 1 = 10,
  // 2*2*8*100*27 = 86400.
  EXPECT_EQ(cost("aten::conv2d", dims, types, mkldnn_concrete)->flops, 86400u);
}

TEST(FlopsTest, TransposedConvolutionCostsTheForwardConvolutionItInverts) {
  // conv_transpose2d(input [2, 8, 4, 4], weight [8, 3, 3, 3], stride 2, padding 1,
  // output_padding 1, groups 1, dilation 1): out = (4-1)*2 - 2*1 + 1*(3-1) + 1 + 1 = 8, so it
  // maps [2, 8, 4, 4] back to [2, 3, 8, 8], inverting the conv of Conv2dMatchesPyTorch:
  // 2*N*C_in*(in spatial)*(K/groups)*kernel = 2*2*8*16*3*9 = 13824.
  // bytes (256 + 216 read + 2*3*8*8 = 384 written) * 4 = 3424
  EXPECT_EQ(cost("aten::conv_transpose2d", "[[2, 8, 4, 4], [8, 3, 3, 3], [], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1", "[1, 1]"])"),
            (OpCost{13824, 3424}));
  // The same through aten::convolution with transposed True.
  EXPECT_EQ(cost("aten::convolution", "[[2, 8, 4, 4], [8, 3, 3, 3], [], [], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"])"),
            (OpCost{13824, 3424}));
  // cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation, groups, ...)
  EXPECT_EQ(cost("aten::cudnn_convolution_transpose", "[[2, 8, 4, 4], [8, 3, 3, 3], [], [], [], [], [], [], [], []]",
                 R"(["float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"])",
                 R"(["", "", "[1, 1]", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])")
                ->flops,
            13824u);
}

TEST(FlopsTest, GroupedTransposedConvolutionEqualsItsForwardConvolution) {
  // conv_transpose1d(input [1, 4, 5], weight [4, 3, 3], groups 2): K = 3*2 = 6,
  // out = (5-1)*1 + (3-1) + 1 = 7; 2*1*4*5*3*3 = 360.
  EXPECT_EQ(cost("aten::conv_transpose1d", "[[1, 4, 5], [4, 3, 3], [], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"])",
                 R"(["", "", "", "[1]", "[0]", "[0]", "2", "[1]"])")
                ->flops,
            360u);
  // Its forward: conv1d([1, 6, 7], weight [4, 3, 3], groups 2): P = 5, 2*1*4*5*(6/2)*3 = 360.
  EXPECT_EQ(cost("aten::conv1d", "[[1, 6, 7], [4, 3, 3], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[1]", "[0]", "[1]", "2"])")
                ->flops,
            360u);
}

TEST(FlopsTest, ConvolutionBackwardCountsOneForwardConvolutionPerGradient) {
  const char* dims = "[[2, 8, 4, 4], [2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], [], [], [], []]";
  const char* types =
      R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", ""])";
  const auto with_mask = [&](std::string_view mask) {
    const std::string concrete = std::string(R"(["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", ")") +
                                 std::string(mask) + "\"]";
    return cost("aten::convolution_backward", dims, types, concrete);
  };
  // grad input and grad weight: 2*13824 = 27648; writes input 384 + weight 216: (856 + 600)*4 = 5824
  EXPECT_EQ(with_mask("[True, True, False]"), (OpCost{27648, 5824}));
  // grad input only: 13824; writes 384: (856 + 384)*4 = 4960
  EXPECT_EQ(with_mask("[True, False, False]"), (OpCost{13824, 4960}));
  // grad bias only: a sum, not counted; writes 8: (856 + 8)*4 = 3456
  EXPECT_EQ(with_mask("[False, False, True]"), (OpCost{0, 3456}));
  EXPECT_EQ(with_mask("[True, True]"), std::nullopt);
  EXPECT_EQ(with_mask(""), std::nullopt);
}

TEST(FlopsTest, ConvolutionBackwardOfATransposedConvolution) {
  // The transposed conv of TransposedConvolutionCostsTheForwardConvolutionItInverts, grad_output
  // [2, 3, 8, 8]: both gradients, 2*13824 = 27648.
  EXPECT_EQ(cost("aten::convolution_backward", "[[2, 3, 8, 8], [2, 8, 4, 4], [8, 3, 3, 3], [], [], [], [], [], [], [], []]",
                 R"(["float", "float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", ""])",
                 R"(["", "", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1", "[True, True, False]"])")
                ->flops,
            27648u);
}

TEST(FlopsTest, ConvolutionBackwardRejectsAGradientOfAnotherShape) {
  // grad_output [2, 8, 5, 5] is not what this convolution produces ([2, 8, 4, 4]).
  EXPECT_EQ(cost("aten::convolution_backward", "[[2, 8, 5, 5], [2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], [], [], [], []]",
                 R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", ""])",
                 R"(["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"])"),
            std::nullopt);
}

TEST(FlopsTest, ConvRejectsArgumentsThatDoNotFit) {
  const char* dims = "[[2, 4, 8, 8], [6, 2, 3, 3], [], [], [], [], []]";
  const char* types = R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])";
  const auto conv2d = [&](std::string_view concrete) { return cost("aten::conv2d", dims, types, concrete); };
  ASSERT_TRUE(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "2"])"));
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"])"), std::nullopt);   // C/groups 4 vs weight 2
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "0"])"), std::nullopt);   // groups 0
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "-2"])"), std::nullopt);  // groups < 0
  EXPECT_EQ(conv2d(R"(["", "", "", "[0, 1]", "[0, 0]", "[1, 1]", "2"])"), std::nullopt);   // stride 0
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[-1, 0]", "[1, 1]", "2"])"), std::nullopt);  // padding < 0
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[0, 1]", "2"])"), std::nullopt);   // dilation 0
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1, 1]", "[0, 0]", "[1, 1]", "2"])"), std::nullopt);  // 3 strides, 2 dims
  EXPECT_EQ(conv2d(R"(["", "", "", "[]", "[0, 0]", "[1, 1]", "2"])"), std::nullopt);         // no strides
  EXPECT_EQ(conv2d(R"(["", "", "", "", "[0, 0]", "[1, 1]", "2"])"), std::nullopt);           // stride unknown
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[5, 5]", "2"])"), std::nullopt);   // kernel spans 11 > 8
  EXPECT_EQ(conv2d(R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "0.5"])"), std::nullopt);
  EXPECT_EQ(conv2d(""), std::nullopt);  // concrete inputs not recorded
  // weight of the wrong rank, input missing
  EXPECT_EQ(cost("aten::conv2d", "[[2, 4, 8, 8], [6, 2, 3], [], [], [], [], []]", types,
                 R"(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "2"])"),
            std::nullopt);
  EXPECT_EQ(cost("aten::conv2d", "[[2, 4, 8, 8]]", R"(["float"])", R"([""])"), std::nullopt);
}

// ---- elementwise -----------------------------------------------------------------------------

TEST(FlopsTest, ElementwiseCountsTheBroadcastOutput) {
  // [4, 1, 5] + [3, 1] -> [4, 3, 5] = 60; bytes (20 + 3 read + 60 written) * 4 = 332
  EXPECT_EQ(cost("aten::add", "[[4, 1, 5], [3, 1], []]", R"(["float", "float", "Scalar"])"), (OpCost{60, 332}));
  // A 0-D tensor broadcasts: [2, 3] * [] -> 6; bytes (6 + 1 + 6) * 4 = 52
  EXPECT_EQ(cost("aten::mul", "[[2, 3], []]", R"(["float", "float"])"), (OpCost{6, 52}));
  // A scalar base: pow(Scalar, Tensor [5]) -> 5
  EXPECT_EQ(cost("aten::pow", "[[], [5]]", R"(["Scalar", "float"])")->flops, 5u);
  EXPECT_EQ(cost("aten::add", "[[4, 3], [5], []]", R"(["float", "float", "Scalar"])"), std::nullopt);
  EXPECT_EQ(cost("aten::add", "[[], []]", R"(["Scalar", "Scalar"])"), std::nullopt);  // no tensor
}

TEST(FlopsTest, ElementwiseOpsIncludingInPlaceAndBackward) {
  // in place: reads 10, writes 10: 80 bytes
  EXPECT_EQ(cost("aten::relu_", "[[10]]", R"(["float"])"), (OpCost{10, 80}));
  // threshold_backward(grad_output, self, threshold): 12 elements; (12 + 12 + 12) * 4 = 144
  EXPECT_EQ(cost("aten::threshold_backward", "[[3, 4], [3, 4], []]", R"(["float", "float", "Scalar"])"),
            (OpCost{12, 144}));
  // addcmul_(self, tensor1, tensor2, value): one per element, (4 * 5) * 4 = 80
  EXPECT_EQ(cost("aten::addcmul_", "[[5], [5], [5], []]", R"(["float", "float", "float", "Scalar"])"),
            (OpCost{5, 80}));
  for (const char* op : {"aten::sigmoid", "aten::tanh", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt",
                         "aten::gelu", "aten::silu", "aten::neg", "aten::sub_", "aten::div_"})
    EXPECT_EQ(cost(op, "[[7]]", R"(["float"])")->flops, 7u) << op;
}

// ---- bytes -----------------------------------------------------------------------------------

TEST(FlopsTest, BytesFollowTheElementType) {
  // half: the add of MulAndAddMatchPyTorch moves 3*384*2 = 2304 bytes
  EXPECT_EQ(cost("aten::add", "[[2, 3, 8, 8], [2, 3, 8, 8], []]", R"(["c10::Half", "c10::Half", "Scalar"])"),
            (OpCost{384, 2304}));
  // the conv of Conv2dMatchesPyTorch in half: 864*2 = 1728
  EXPECT_EQ(cost("aten::conv2d", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], []]",
                 R"(["c10::Half", "c10::Half", "c10::Half", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])"),
            (OpCost{13824, 1728}));
  // bfloat16 2, double 8, long int 8, unsigned char 1
  EXPECT_EQ(cost("aten::mm", "[[2, 10], [10, 128]]", R"(["c10::BFloat16", "c10::BFloat16"])")->bytes, 1556u * 2);
  EXPECT_EQ(cost("aten::mm", "[[2, 10], [10, 128]]", R"(["double", "double"])")->bytes, 1556u * 8);
  EXPECT_EQ(cost("aten::neg", "[[3]]", R"(["long int"])")->bytes, 48u);
  EXPECT_EQ(cost("aten::neg", "[[3]]", R"(["unsigned char"])")->bytes, 6u);
  EXPECT_EQ(cost("aten::neg", "[[3]]", R"(["c10::complex<float>"])")->bytes, 48u);
}

TEST(FlopsTest, UnknownElementTypeGivesFlopsButNoBytes) {
  EXPECT_EQ(cost("aten::add", "[[2, 3, 8, 8], [2, 3, 8, 8], []]", R"(["c10::Float4_e2m1fn_x2", "float", "Scalar"])"),
            (OpCost{384, std::nullopt}));
}

// ---- the bytes model: reductions, softmax, norms, attention, gathers, copies ------------------

TEST(FlopsTest, ReductionsWriteTheInputWithoutTheReducedDimensions) {
  // aten::sum of a [4096, 8192] bf16 over dim 0 (a PyTorch 2.11 trace's record): 4096*8192 adds;
  // 2*(4096*8192 read + 8192 written) bytes.
  EXPECT_EQ(cost("aten::sum", "[[4096, 8192], [], [], []]", R"(["c10::BFloat16", "ScalarList", "Scalar", ""])",
                 R"(["", "[0]", "True", ""])"),
            (OpCost{33'554'432, 2 * (33'554'432 + 8192)}));
  // Negative dimensions count from the end; the mean over the last two of [2, 3, 4] writes 2.
  EXPECT_EQ(cost("aten::mean", "[[2, 3, 4], [], [], []]", R"(["float", "ScalarList", "Scalar", ""])",
                 R"(["", "[-1, -2]", "False", ""])"),
            (OpCost{24, 4 * (24 + 2)}));
  // No dimension (sum(self, dtype)) or an empty list: every dimension, one element written.
  EXPECT_EQ(cost("aten::sum", "[[2, 3], []]", R"(["float", ""])", R"(["", ""])"), (OpCost{6, 4 * 7}));
  EXPECT_EQ(cost("aten::amax", "[[2, 3], [], []]", R"(["float", "ScalarList", "Scalar"])", R"(["", "[]", "False"])"),
            (OpCost{6, 4 * 7}));
  // One integer dimension (prod(self, dim, keepdim, dtype)); a norm's square-and-add is 2 FLOPs.
  EXPECT_EQ(cost("aten::prod", "[[5, 7], [], [], []]", R"(["float", "Scalar", "Scalar", ""])", R"(["", "1", "False", ""])"),
            (OpCost{35, 4 * (35 + 5)}));
  EXPECT_EQ(cost("aten::linalg_vector_norm", "[[5, 7], [], [], [], []]",
                 R"(["float", "Scalar", "ScalarList", "Scalar", ""])", R"(["", "2", "[0]", "False", ""])"),
            (OpCost{70, 4 * (35 + 7)}));
  // A dimension out of range, or one not recorded, gives no estimate.
  EXPECT_EQ(cost("aten::sum", "[[2, 3], [], []]", R"(["float", "ScalarList", "Scalar"])", R"(["", "[2]", "False"])"),
            std::nullopt);
  EXPECT_EQ(cost("aten::sum", "[[2, 3], [], []]", R"(["float", "ScalarList", "Scalar"])"), std::nullopt);
}

TEST(FlopsTest, SoftmaxNormsAndDropoutCountTheirPassesPerElement) {
  // softmax: 5 per element, read and written once; a PyTorch 2.11 trace's bf16 [8192, 8192].
  EXPECT_EQ(cost("aten::_softmax", "[[8192, 8192], [], []]", R"(["c10::BFloat16", "Scalar", "Scalar"])",
                 R"(["", "-1", "False"])"),
            (OpCost{5ull * 8192 * 8192, 2ull * 2 * 8192 * 8192}));
  // its backward reads the gradient and the output: 4 per element, 3 tensors of 4096*8192 floats
  EXPECT_EQ(cost("aten::_log_softmax_backward_data", "[[4096, 8192], [4096, 8192], [], []]",
                 R"(["float", "float", "Scalar", "Scalar"])", R"(["", "", "1", "6"])"),
            (OpCost{4ull * 4096 * 8192, 3ull * 4 * 4096 * 8192}));
  // layer norm (input, normalized_shape, weight, bias, eps): 7 per element; input, weight and
  // bias read, the output written (bf16).
  EXPECT_EQ(cost("aten::native_layer_norm", "[[1, 141, 512], [], [512], [512], []]",
                 R"(["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"])",
                 R"(["", "[512]", "", "", "1e-05"])"),
            (OpCost{7ull * 141 * 512, 2ull * (2 * 141 * 512 + 2 * 512)}));
  EXPECT_EQ(cost("aten::rms_norm", "[[8, 64], [], [64], []]", R"(["float", "ScalarList", "float", ""])",
                 R"(["", "[64]", "", ""])")->flops,
            4u * 8 * 64);
  // dropout writes its output and a byte of mask per element
  EXPECT_EQ(cost("aten::native_dropout", "[[16, 256, 512], [], []]", R"(["c10::BFloat16", "Scalar", "Scalar"])",
                 R"(["", "0.1", "True"])"),
            (OpCost{16ull * 256 * 512, 16ull * 256 * 512 * (2 + 2 + 1)}));
}

TEST(FlopsTest, NormBackwardsWriteTheGradientsTheirMaskAsksFor) {
  // native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, mask)
  // of a PyTorch 2.11 trace: 14 FLOPs per element; reads 2*2M + 2*4096 + 2*512 floats, writes
  // the input's gradient and those of weight and bias.
  const char* dims = "[[16, 256, 512], [16, 256, 512], [], [16, 256, 1], [16, 256, 1], [512], [512], []]";
  const char* types = R"(["float", "float", "ScalarList", "float", "float", "float", "float", "ScalarList"])";
  const std::uint64_t elements = 16ull * 256 * 512;
  const std::uint64_t read = 2 * elements + 2 * 4096 + 2 * 512;
  EXPECT_EQ(cost("aten::native_layer_norm_backward", dims, types,
                 R"(["", "", "[512]", "", "", "", "", "[True, True, True]"])"),
            (OpCost{14 * elements, 4 * (read + elements + 2 * 512)}));
  EXPECT_EQ(cost("aten::native_layer_norm_backward", dims, types,
                 R"(["", "", "[512]", "", "", "", "", "[True, False, False]"])")->bytes,
            4 * (read + elements));
  // cuDNN's batch norm backward has no mask: all three gradients; the bias's has the weight's shape.
  EXPECT_EQ(cost("aten::cudnn_batch_norm_backward", "[[2, 8, 4, 4], [2, 8, 4, 4], [8], [8], [8], [8], [8], [], [0]]",
                 R"(["float", "float", "float", "float", "float", "float", "float", "Scalar", "unsigned char"])",
                 R"(["", "", "", "", "", "", "", "1e-05", ""])"),
            (OpCost{14 * 256, 4 * (2 * 256 + 5 * 8) + (256 + 2 * 8) * 4}));
  // a mask that is not recorded gives no estimate
  EXPECT_EQ(cost("aten::native_layer_norm_backward", dims, types), std::nullopt);
}

TEST(FlopsTest, AttentionCountsItsTwoProductsAndTheBackwardsFour) {
  // A PyTorch 2.11 trace's cuDNN attention, [B, H, L, E] = [16, 8, 256, 64] bf16, not causal:
  // 2 * 16*8*256*256 * (64 + 64) FLOPs; q, k, v read, the output written.
  const std::uint64_t forward = 2ull * 16 * 8 * 256 * 256 * 128;
  const std::uint64_t tensor = 16ull * 8 * 256 * 64;
  EXPECT_EQ(cost("aten::_cudnn_attention_forward", "[[16, 8, 256, 64], [16, 8, 256, 64], [16, 8, 256, 64], [], [], [], [], [], [], [], [], [], []]",
                 R"(["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""])",
                 R"(["", "", "", "", "", "", "256", "256", "True", "0.1", "False", "False", ""])"),
            (OpCost{forward, 2 * 4 * tensor}));
  // Its backward: twice the FLOPs; reads grad_out, q, k, v, out, the float logsumexp and the
  // two 0-dimensional long philox tensors, writes dq, dk, dv.
  EXPECT_EQ(cost("aten::_cudnn_attention_backward",
                 "[[16, 8, 256, 64], [16, 8, 256, 64], [16, 8, 256, 64], [16, 8, 256, 64], [16, 8, 256, 64], [16, 8, 256, 1], [], [], [], [], [], [], [], [], [], []]",
                 R"(["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float", "long int", "long int", "", "", "", "Scalar", "Scalar", "Scalar", "Scalar", ""])",
                 R"(["", "", "", "", "", "", "", "", "", "", "", "256", "256", "0.1", "False", ""])"),
            (OpCost{2 * forward, 2 * 5 * tensor + 4 * 16 * 8 * 256 + 2 * 8 + 2 * 3 * tensor}));
  // The flash kernel's own op takes [B, L, H, E]; causal leaves half the scores: a ROCm trace's
  // [1, 141, 8, 64] with is_causal.
  const std::string flash_dims = "[[1, 141, 8, 64], [1, 141, 8, 64], [1, 141, 8, 64], [], [], [], [], [], [], [], []]";
  const std::string flash_types = R"(["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""])";
  EXPECT_EQ(cost("aten::_flash_attention_forward", flash_dims, flash_types,
                 R"(["", "", "", "", "", "141", "141", "0.", "True", "False", ""])")->flops,
            2ull * 8 * 141 * 141 * 128 / 2);
  EXPECT_EQ(cost("aten::_flash_attention_forward", flash_dims, flash_types,
                 R"(["", "", "", "", "", "141", "141", "0.", "False", "False", ""])")->flops,
            2ull * 8 * 141 * 141 * 128);
  // Grouped-query attention: keys and values of 2 heads serve 8 query heads.
  EXPECT_EQ(cost("aten::scaled_dot_product_attention", "[[1, 8, 10, 16], [1, 2, 20, 16], [1, 2, 20, 16], [], [], [], [], []]",
                 R"(["float", "float", "float", "", "Scalar", "Scalar", "", "Scalar"])",
                 R"(["", "", "", "", "0.", "False", "", "True"])"),
            (OpCost{2ull * 8 * 10 * 20 * 32, 4 * (8 * 10 * 16 + 2 * 2 * 20 * 16 + 8 * 10 * 16)}));
  // Variable-length batches ([total, H, E]), heads that do not divide, or an unrecorded is_causal
  // give no estimate.
  EXPECT_EQ(cost("aten::_flash_attention_forward", "[[141, 8, 64], [141, 8, 64], [141, 8, 64], [], [], [], [], [], [], [], []]",
                 flash_types, R"(["", "", "", "", "", "141", "141", "0.", "False", "False", ""])"),
            std::nullopt);
  EXPECT_EQ(cost("aten::scaled_dot_product_attention", "[[1, 8, 10, 16], [1, 3, 20, 16], [1, 3, 20, 16], [], [], [], [], []]",
                 R"(["float", "float", "float", "", "Scalar", "Scalar", "", "Scalar"])",
                 R"(["", "", "", "", "0.", "False", "", "True"])"),
            std::nullopt);
  EXPECT_EQ(cost("aten::_flash_attention_forward", flash_dims, flash_types), std::nullopt);
}

TEST(FlopsTest, GathersReadTheRowsTheyPickAndCopiesDoNotReadTheirDestination) {
  // embedding of a [8192, 512] float table by [16, 256] long indices: the indices read, 4096
  // rows of 512 read and written; no FLOPs. The table itself is not read whole.
  EXPECT_EQ(cost("aten::embedding", "[[8192, 512], [16, 256], [], [], []]",
                 R"(["float", "long int", "Scalar", "Scalar", "Scalar"])", R"(["", "", "-1", "False", "False"])"),
            (OpCost{0, 8 * 4096 + 2 * 4 * 4096 * 512}));
  EXPECT_EQ(cost("aten::index_select", "[[30522, 512], [], [141]]", R"(["c10::BFloat16", "Scalar", "long int"])",
                 R"(["", "0", ""])"),
            (OpCost{0, 8 * 141 + 2 * 2 * 141 * 512}));
  EXPECT_EQ(cost("aten::gather", "[[8192, 512], [], [4096, 512], []]", R"(["float", "Scalar", "long int", "Scalar"])",
                 R"(["", "0", "", "False"])"),
            (OpCost{0, 8 * 4096 * 512 + 2 * 4 * 4096 * 512}));
  // embedding's backward adds the gradient rows into a num_weights-row table.
  EXPECT_EQ(cost("aten::embedding_dense_backward", "[[16, 256, 512], [16, 256], [], [], []]",
                 R"(["float", "long int", "Scalar", "Scalar", "Scalar"])", R"(["", "", "8192", "-1", "False"])"),
            (OpCost{16 * 256 * 512, 4 * 16 * 256 * 512 + 8 * 16 * 256 + 4 * 8192 * 512}));
  // copy_ casting float to bf16: the float source read, the bf16 destination written.
  EXPECT_EQ(cost("aten::copy_", "[[16, 256, 8192], [16, 256, 8192], []]", R"(["c10::BFloat16", "float", "Scalar"])",
                 R"(["", "", "False"])"),
            (OpCost{0, 16ull * 256 * 8192 * (4 + 2)}));
  // fill_ and zero_ only write
  EXPECT_EQ(cost("aten::fill_", "[[4096, 8192], []]", R"(["float", "Scalar"])", R"(["", "0"])"),
            (OpCost{0, 4ull * 4096 * 8192}));
  EXPECT_EQ(cost("aten::zero_", "[[4096, 8192]]", R"(["float"])", R"([""])"), (OpCost{0, 4ull * 4096 * 8192}));
}

TEST(FlopsTest, AnExpandedInputIsReadOnceNotOncePerIndex) {
  // A PyTorch 2.11 trace's gather of a [50304, 4096] bf16 table by an index expanded from
  // [16384, 1] (Input Strides [1, 0]): the index holds 16384 longs, not 16384 * 4096.
  const char* dims = "[[50304, 4096], [], [16384, 4096], [], [16384, 4096]]";
  const char* types = R"(["c10::BFloat16", "Scalar", "long int", "Scalar", "c10::BFloat16"])";
  const char* concrete = R"(["", "0", "", "False", ""])";
  const std::uint64_t picked = 16384ull * 4096;
  EXPECT_EQ(cost("aten::gather", dims, types, concrete)->bytes, 8 * picked + 2 * 2 * picked);
  EXPECT_EQ(dlprof::estimate_op_cost("aten::gather", dims, types, concrete,
                                     "[[4096, 1], [], [1, 0], [], [4096, 1]]"),
            (OpCost{0, 8 * 16384 + 2 * 2 * picked}));
  // A bias broadcast by strides reads its 512 elements once.
  EXPECT_EQ(dlprof::estimate_op_cost("aten::add", "[[64, 512], [64, 512], []]", R"(["float", "float", "Scalar"])",
                                     R"(["", "", "1"])", "[[512, 1], [0, 1], []]"),
            (OpCost{64 * 512, 4 * (64 * 512 + 512 + 64 * 512)}));
  // Strides that do not match the dims, or do not parse, are ignored: inputs are read whole.
  for (const char* strides : {"[[512, 1], [0], []]", "[[512, 1], [0, 1]]", "[[512, 1], [0, 1], []", "nonsense"})
    EXPECT_EQ(dlprof::estimate_op_cost("aten::add", "[[64, 512], [64, 512], []]", R"(["float", "float", "Scalar"])",
                                       R"(["", "", "1"])", strides),
              (OpCost{64 * 512, 4 * 3 * 64 * 512}))
        << strides;
}

TEST(FlopsTest, TensorListOpsHaveNoEstimateForTheirListsHaveNoElementType) {
  EXPECT_EQ(cost("aten::_foreach_mul_", "[[[8192, 512], [1536]], []]", R"(["TensorList", "Scalar"])", R"(["", "0.9"])"),
            std::nullopt);
  EXPECT_EQ(cost("aten::cat", "[[[2, 3], [2, 3]], []]", R"(["TensorList", "Scalar"])", R"(["", "0"])"), std::nullopt);
}

// ---- bad input -------------------------------------------------------------------------------

TEST(FlopsTest, UnknownOpHasNoEstimate) {
  EXPECT_EQ(cost("aten::nll_loss_forward", "[[2, 3], [2], [], [], []]", R"(["float", "long int", "", "Scalar", "Scalar"])"),
            std::nullopt);
  EXPECT_EQ(cost("", "[[2, 3]]", R"(["float"])"), std::nullopt);
  EXPECT_EQ(cost("aten::mm ", "[[2, 10], [10, 128]]", R"(["float", "float"])"), std::nullopt);
}

TEST(FlopsTest, MalformedDimsAreRejected) {
  const char* types = R"(["float", "float"])";
  for (const char* dims : {"", "[", "]", "[[2, 10], [10, 128]", "[[2, 10], [10, 128]]]", "[[2,10], [10, 128]]",
                           "[[2, 10],[10, 128]]", " [[2, 10], [10, 128]]", "[[2, 10], [10, 128]] ",
                           "[[2, 10], [10, 128]]x", "[[02, 10], [10, 128]]", "[[2.5, 10], [10, 128]]",
                           "[[+2, 10], [10, 128]]", "[[2, 10], [10, 128], ]", "[[2, , 10], [10, 128]]",
                           "[[2, 10], 7]", "[[2, 10], [10, 128e0]]", "[[\"2\", 10], [10, 128]]", "[[-], [10, 128]]",
                           "[[[[1]]], [10, 128]]", "[[[1], [2]], [[3], [4]]"})
    EXPECT_EQ(cost("aten::mm", dims, types), std::nullopt) << dims;
}

TEST(FlopsTest, MalformedTypesAndConcreteInputsAreRejected) {
  const char* dims = "[[2, 10], [10, 128]]";
  for (const char* types : {"", "[float, float]", R"(["float", "float")", R"(["float"])",
                            R"(["float", "float", "float"])", R"(["float","float"])", R"(["float", "float\"])",
                            "[\"float\", \"fl\x01oat\"]", R"(["float", "float"] )", R"(["float", 1])"})
    EXPECT_EQ(cost("aten::mm", dims, types), std::nullopt) << types;
  for (const char* concrete : {"[", R"([""])", R"(["", "", ""])", R"(["", "\"])", "[\"\", \"\\"})
    EXPECT_EQ(cost("aten::mm", dims, R"(["float", "float"])", concrete), std::nullopt) << concrete;
  // Escapes are valid JSON and are kept: such a value is read as no number.
  EXPECT_TRUE(cost("aten::mm", dims, R"(["float", "float"])", R"(["\"a\\b\"", ""])"));
}

TEST(FlopsTest, ConcreteInputsMayBeAbsentWhereNoFormulaNeedsThem) {
  EXPECT_EQ(cost("aten::mm", "[[2, 10], [10, 128]]", R"(["float", "float"])", ""), (OpCost{5120, 6224}));
}

TEST(FlopsTest, TensorListInputsInTorchProfilerFormAreNoTensors) {
  // torch.profiler writes a TensorList's shapes as a list of lists.
  EXPECT_EQ(cost("aten::add", "[[[2, 3], [], [4]], [2, 3]]", R"(["TensorList", "float"])")->flops, 6u);
  EXPECT_EQ(cost("aten::add", "[[[2, 3], [4]], [2, 3]]", R"(["float", "float"])")->flops, 6u);
}

TEST(FlopsTest, NegativeOrHugeDimsAreRejected) {
  const char* types = R"(["float", "float"])";
  EXPECT_EQ(cost("aten::mm", "[[-2, 10], [10, 128]]", types), std::nullopt);
  EXPECT_EQ(cost("aten::mm", "[[-9223372036854775808, 10], [10, 128]]", types), std::nullopt);
  EXPECT_EQ(cost("aten::mm", "[[9223372036854775808, 10], [10, 128]]", types), std::nullopt);  // > INT64_MAX
  EXPECT_EQ(cost("aten::mm", "[[99999999999999999999999, 10], [10, 128]]", types), std::nullopt);
  // The largest size parses.
  EXPECT_TRUE(cost("aten::neg", "[[9223372036854775807]]", R"(["unsigned char"])"));
}

TEST(FlopsTest, OverflowingCountsHaveNoEstimate) {
  const char* types = R"(["float", "float"])";
  // 2 * 2^32 * 2^32 * 2^32 overflows 64 bits.
  EXPECT_EQ(cost("aten::mm", "[[4294967296, 4294967296], [4294967296, 4294967296]]", types), std::nullopt);
  // 2^62 FLOPs fit but the 2^62 float output's bytes (2^64 + ...) do not.
  EXPECT_EQ(cost("aten::neg", "[[4611686018427387904]]", R"(["float"])"), std::nullopt);
  // The flops of 2^31 * 2^31 * 2 * 2 = 2^64 overflow exactly at the factor 2.
  EXPECT_EQ(cost("aten::mm", "[[2147483648, 2], [2, 2147483648]]", R"(["unknown", "unknown"])"), std::nullopt);
  // Without the factor 2 it would fit: 2^62 elements of an unknown type have an estimate.
  EXPECT_EQ(cost("aten::neg", "[[4611686018427387904]]", R"(["unknown"])"), (OpCost{4611686018427387904u, std::nullopt}));
  // A convolution's padding so large that the padded size overflows.
  EXPECT_EQ(cost("aten::conv2d", "[[2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
                 R"(["", "", "", "[1, 1]", "[9223372036854775807, 1]", "[1, 1]", "1"])"),
            std::nullopt);
  // groups * weight[1] overflows for a transposed convolution.
  EXPECT_EQ(cost("aten::conv_transpose1d", "[[1, 4, 5], [4, 4611686018427387904, 3], [], [], [], [], [], []]",
                 R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"])",
                 R"(["", "", "", "[1]", "[0]", "[0]", "4", "[1]"])"),
            std::nullopt);
}

TEST(FlopsTest, BeyondTheFixedCapacitiesThereIsNoEstimate) {
  // 17 inputs
  std::string dims = "[";
  std::string types = "[";
  for (int i = 0; i < 17; ++i) {
    dims += i == 0 ? "[2]" : ", [2]";
    types += i == 0 ? "\"float\"" : ", \"float\"";
  }
  EXPECT_EQ(cost("aten::add", dims + "]", types + "]"), std::nullopt);
  // 17 dimensions
  EXPECT_EQ(cost("aten::neg", "[[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]]", R"(["float"])"), std::nullopt);
  EXPECT_EQ(cost("aten::neg", "[[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]]", R"(["float"])")->flops, 2u);
}

TEST(FlopsTest, TruncatedOrMutatedTextsNeverCrash) {
  const std::string dims = "[[2, 8, 4, 4], [2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], [], [], [], []]";
  const std::string types =
      R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar", ""])";
  const std::string concrete =
      R"(["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"])";
  const char* op = "aten::convolution_backward";
  ASSERT_TRUE(cost(op, dims, types, concrete));
  // Every proper prefix of a text is malformed.
  for (std::size_t n = 0; n < dims.size(); ++n) EXPECT_EQ(cost(op, dims.substr(0, n), types, concrete), std::nullopt);
  for (std::size_t n = 0; n < types.size(); ++n) EXPECT_EQ(cost(op, dims, types.substr(0, n), concrete), std::nullopt);
  for (std::size_t n = 1; n < concrete.size(); ++n)
    EXPECT_EQ(cost(op, dims, types, concrete.substr(0, n)), std::nullopt);
  // Random byte changes: any answer, no crash (the sanitizer builds check the "no crash").
  std::mt19937 rng(12345);
  const char alphabet[] = "[]\", 0123456789-TrueFalsx\\";
  for (int round = 0; round < 20000; ++round) {
    std::string texts[3] = {dims, types, concrete};
    std::string& text = texts[round % 3];
    for (int edits = 1 + round % 3; edits > 0; --edits)
      text[rng() % text.size()] = alphabet[rng() % (sizeof alphabet - 1)];
    (void)cost(op, texts[0], texts[1], texts[2]);
    (void)cost("aten::matmul", texts[0], texts[1], texts[2]);
    (void)cost("aten::add", texts[0], texts[1], texts[2]);
  }
}

}  // namespace
