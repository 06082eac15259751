// Short kernel names on names from real traces: PyTorch's element-wise kernels told apart by their
// functor or lambda, DeepGEMM's by their shapes, Tensile's and CUTLASS's by their tile, plain C
// kernels without parameters; and short_kernel_names keeping every name of a table apart in the
// table's width.
#include <dlprof/analysis/short_kernel_name.hpp>
#include <dlprof/detail/text.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::short_kernel_name;
using dlprof::analysis::short_kernel_names;

constexpr std::string_view kAddKernel = dlprof_test::kBf16AddKernel;
constexpr std::string_view kMulKernel = dlprof_test::kBf16MulKernel;
constexpr std::string_view kCopyFloatKernel =
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1>)";
constexpr std::string_view kSumReduceKernel =
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
    "float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
    "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)";
constexpr std::string_view kSoftmaxKernel =
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, int, int, "
    "int, bool const*, int, bool)";
constexpr std::string_view kLogSoftmaxKernel =
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, "
    "int, bool const*, int, bool)";

TEST(ShortKernelNameTest, ElementwiseKernelsShowTheirFunctorOrLambda) {
  EXPECT_EQ(short_kernel_name(kAddKernel), "vectorized_elementwise_kernel<CUDAFunctor_add<BFloat16>>");
  EXPECT_EQ(short_kernel_name(kMulKernel), "vectorized_elementwise_kernel<MulFunctor<float>>");
  EXPECT_EQ(short_kernel_name(kCopyFloatKernel), "unrolled_elementwise_kernel<direct_copy_kernel_cuda lambda(float)>");
  EXPECT_EQ(short_kernel_name(kSumReduceKernel), "reduce_kernel<sum_functor<float, float, float> lambda(float, float)>");
  EXPECT_EQ(short_kernel_name(kSoftmaxKernel), "softmax_warp_forward<float>");
}

TEST(ShortKernelNameTest, LibraryKernelsKeepTheirTileAndPlainKernelsLoseTheirParameters) {
  EXPECT_EQ(short_kernel_name("void deep_gemm::fp8_gemm_kernel<7168u, 4096u, 128u, 160u, 128u, 1u, 5u, (deep_gemm::GemmType)0>"
                              "(float*, int*, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap)"),
            "fp8_gemm_kernel<7168u, 4096u, 128u, ...>");
  EXPECT_EQ(short_kernel_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nt_align1>(cutlass_80_"
                              "tensorop_s1688gemm_128x128_32x3_nt_align1::Params)"),
            "cutlass_80_tensorop_s1688gemm_128x128_32x3_nt_align1");
  EXPECT_EQ(short_kernel_name("matmul_naive(float const*, float const*, float*, int, int, int)"), "matmul_naive");
  EXPECT_EQ(short_kernel_name("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  // A return type before the function.
  EXPECT_EQ(short_kernel_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, "
                              "float, false, true, true, false, 7, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched"
                              "<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
                              "float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
                              "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)"),
            "kernel<int>");
}

TEST(ShortKernelNamesTest, ATablesNamesFitItsWidthAndStayApart) {
  constexpr std::string_view kTensile128 =
      "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
      "DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSU0_GSUAMB_GSUC0_GSUWGMRR0_GLS0_ISA942_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0";
  constexpr std::string_view kTensile256 =
      "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
      "DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSU0_GSUAMB_GSUC0_GSUWGMRR0_GLS0_ISA942_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0";
  // Two variants of one Tensile tile, as cut alike by any head-and-tail cut.
  const std::string tensile_a = std::string(kTensile128) + "_WG32_8_1";
  const std::string tensile_b = std::string(kTensile128) + "_WG16_16_1";
  const std::vector<std::string_view> names = {kAddKernel,      kMulKernel,      kCopyFloatKernel, kSumReduceKernel,   kSoftmaxKernel,
                                               kLogSoftmaxKernel, kTensile128, kTensile256, tensile_a, tensile_b};
  const std::vector<std::string> shorts = short_kernel_names(names, 48);
  ASSERT_EQ(shorts.size(), names.size());
  for (const std::string& name : shorts) EXPECT_LE(dlprof::detail::text_width(name), 48u) << name;
  EXPECT_EQ(std::set<std::string>(shorts.begin(), shorts.end()).size(), names.size());
  // The functor survives the width: the function's name gives way first.
  EXPECT_NE(shorts[0].find("CUDAFunctor_add<BFloat16>>"), std::string::npos) << shorts[0];
  EXPECT_NE(shorts[1].find("MulFunctor<float>>"), std::string::npos) << shorts[1];
  // Two softmax kernels differ in short arguments: those are shown.
  EXPECT_EQ(shorts[4], "softmax_warp_forward<float> (false)");
  EXPECT_EQ(shorts[5], "softmax_warp_forward<float> (true)");
  // Tensile's tile is kept; kernels of one tile are numbered.
  EXPECT_NE(shorts[6].find("_MT128x128x64_MI16x16x1"), std::string::npos) << shorts[6];
  EXPECT_NE(shorts[7].find("_MT256x128x64_MI16x16x1"), std::string::npos) << shorts[7];
  EXPECT_NE(shorts[8].find(" #"), std::string::npos) << shorts[8];
}

}  // namespace
