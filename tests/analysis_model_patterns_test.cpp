// Model-level patterns on hand-built traces: eager attention around a softmax (SDPA), kernels that
// only cast dtypes, one hand-written float32 kernel that dominates the GPU, random tensors made on
// the CPU inside the step, and the alignment rule that judges N and K, not the token count, and
// believes a kernel's own alignN; each saving by hand.
#include <dlprof/analysis/model_patterns.hpp>
#include <dlprof/analysis/recommendations.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"
#include "findings.hpp"

namespace {

using dlprof::Category;
using dlprof::analysis::Recommendation;
using dlprof_test::AnalysisTraceBuilder;
using dlprof_test::kMs;
using dlprof_test::kUs;
using ::testing::HasSubstr;
using ::testing::Not;

using dlprof_test::finding_ids;
using dlprof_test::finding_with_id;

constexpr std::string_view kHalfGemm = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn";
constexpr std::string_view kHalfDivide =
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::Half, c10::Half, c10::Half, "
    "at::native::binary_internal::DivFunctor<c10::Half> >, std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<c10::Half, c10::Half, c10::Half, at::native::binary_internal::DivFunctor<c10::Half> >, "
    "std::array<char*, 3ul>)";
constexpr std::string_view kSoftmax =
    "void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 7, false, false>(c10::Half*, "
    "c10::Half const*, int, int, int, bool const*, int, bool)";
constexpr std::string_view kCastKernel =
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, "
    "2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
    "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_"
    "cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)"
    "#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned "
    "int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)";
constexpr std::string_view kNoCastCopy =
    "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::direct_"
    "copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::"
    "{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::"
    "{lambda(int, bool)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::"
    "BFloat16)#1}>(at::TensorIteratorBase&)::{lambda(int, bool)#1})";

/// Ops launching one kernel each, back to back on one stream from `start`: (op, kernel, kernel time).
struct OpLaunch {
  std::string_view op;
  std::string_view kernel;
  std::int64_t ns;
  std::string_view dims = {};
  std::string_view types = {};
};

/// One 10 ms step on an A100 whose ops each launch one kernel, in order, from 0.1 ms on.
dlprof::Trace step_of(const std::vector<OpLaunch>& launches, Category category = Category::User) {
  AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA A100-SXM4-80GB", 8).step(1, 0, 10 * kMs);
  std::int64_t gpu_at = 100 * kUs;
  for (std::size_t i = 0; i < launches.size(); ++i) {
    const OpLaunch& launch = launches[i];
    const auto id = static_cast<std::uint32_t>(i + 1);
    const std::int64_t host_at = static_cast<std::int64_t>(i) * 10 * kUs;
    builder.op(launch.op, host_at, host_at + 8 * kUs, id, category);
    if (!launch.dims.empty()) builder.inputs(launch.dims, launch.types);
    builder.call("cudaLaunchKernel", host_at + 1 * kUs, host_at + 5 * kUs, id, id)
        .kernel(launch.kernel, gpu_at, gpu_at + launch.ns, id, id);
    gpu_at += launch.ns;
  }
  return builder.trace();
}

// ---- unfused attention -----------------------------------------------------------------------------

/// A linear, eager attention (scores, scale, softmax, dropout, @ V) and a linear: 6 ms of kernels.
std::vector<OpLaunch> eager_attention(std::int64_t softmax_ns = 1500 * kUs) {
  return {{"aten::addmm", kHalfGemm, 1 * kMs},       {"aten::bmm", kHalfGemm, 1 * kMs},
          {"aten::div", kHalfDivide, 200 * kUs},    {"aten::_softmax", kSoftmax, softmax_ns},
          {"aten::native_dropout", kHalfDivide, 300 * kUs}, {"aten::bmm", kHalfGemm, 1 * kMs},
          {"aten::addmm", kHalfGemm, 1 * kMs}};
}

TEST(ModelPatternsTest, EagerAttentionAroundASoftmaxAsksForSdpa) {
  const dlprof::Trace trace = step_of(eager_attention());
  const auto attention = dlprof::analysis::unfused_attention(dlprof::analysis::kernel_attribution(trace));
  EXPECT_EQ(attention.blocks, 1u);
  EXPECT_EQ(attention.products_ns, 2 * kMs);
  EXPECT_EQ(attention.softmax_ns, 2 * kMs);  // the scale, the softmax and the dropout between the products

  const auto found = dlprof::analysis::recommendations(trace);
  const Recommendation* sdpa = finding_with_id(found, "unfused_attention");
  ASSERT_NE(sdpa, nullptr) << finding_ids(found);
  // 4 of the 6 ms of kernels; SDPA removes the 2 ms between the products, of a 10 ms step.
  EXPECT_THAT(sdpa->text, HasSubstr("66.7% of kernel time is attention computed op by op"));
  EXPECT_THAT(sdpa->text, HasSubstr("around aten::_softmax"));
  EXPECT_THAT(sdpa->text, HasSubstr("scaled_dot_product_attention"));
  EXPECT_DOUBLE_EQ(sdpa->impact_ns, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(sdpa->share, 20.0);
  EXPECT_THAT(sdpa->evidence, HasSubstr("1 attention blocks: products 2.000 ms, softmax and the kernels between them 2.000 ms"));
}

TEST(ModelPatternsTest, AttentionBackwardIsABlockToo) {
  const dlprof::Trace trace =
      step_of({{"aten::bmm", kHalfGemm, 1 * kMs},
               {"aten::native_dropout_backward", kHalfDivide, 300 * kUs},
               {"aten::_softmax_backward_data", kSoftmax, 1 * kMs},
               {"aten::bmm", kHalfGemm, 1 * kMs},
               {"aten::bmm", kHalfGemm, 1 * kMs}},
              Category::Backward);
  const auto attention = dlprof::analysis::unfused_attention(dlprof::analysis::kernel_attribution(trace));
  EXPECT_EQ(attention.blocks, 1u);
  EXPECT_EQ(attention.softmax_ns, 1300 * kUs);
  EXPECT_EQ(attention.products_ns, 2 * kMs);  // the product right after the softmax closes the block
}

TEST(ModelPatternsTest, FusedAttentionALossSoftmaxOrAttentionUnderFifteenPercentAreFine) {
  // SDPA: one fused kernel, no softmax.
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(step_of(
                                {{"aten::addmm", kHalfGemm, 1 * kMs},
                                 {"aten::_scaled_dot_product_flash_attention",
                                  "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >(Flash_fwd_params)",
                                  3 * kMs}})),
                            "unfused_attention"),
            nullptr);
  // A classifier's log_softmax after its linear is a loss, not attention.
  EXPECT_EQ(dlprof::analysis::unfused_attention(
                dlprof::analysis::kernel_attribution(step_of({{"aten::bmm", kHalfGemm, 1 * kMs},
                                                              {"aten::_log_softmax", kSoftmax, 2 * kMs},
                                                              {"aten::bmm", kHalfGemm, 1 * kMs}})))
                .blocks,
            0u);
  // A softmax with no product within the window after it.
  std::vector<OpLaunch> far_apart = {{"aten::bmm", kHalfGemm, 1 * kMs}, {"aten::_softmax", kSoftmax, 1 * kMs}};
  for (int i = 0; i < 9; ++i) far_apart.push_back({"aten::add", kHalfDivide, 10 * kUs});
  far_apart.push_back({"aten::bmm", kHalfGemm, 1 * kMs});
  EXPECT_EQ(dlprof::analysis::unfused_attention(dlprof::analysis::kernel_attribution(step_of(far_apart))).blocks, 0u);
  // 1.2 of 9.2 ms of kernels (13 %): under the 15 % floor.
  std::vector<OpLaunch> small = {{"aten::addmm", kHalfGemm, 8 * kMs}, {"aten::bmm", kHalfGemm, 500 * kUs},
                               {"aten::_softmax", kSoftmax, 200 * kUs}, {"aten::bmm", kHalfGemm, 500 * kUs}};
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(step_of(small)), "unfused_attention"), nullptr);
}

// ---- GEMM alignment --------------------------------------------------------------------------------

const Recommendation* alignment_finding(const std::vector<OpLaunch>& launches, Category category = Category::User) {
  static std::vector<Recommendation> found;
  found = dlprof::analysis::recommendations(step_of(launches, category));
  return finding_with_id(found, "gemm_dims_not_multiple_of_8");
}

constexpr std::string_view kHalves = R"(["c10::Half", "c10::Half"])";
constexpr std::string_view kHalvesOfAddmm = R"(["c10::Half", "c10::Half", "c10::Half", "Scalar", "Scalar"])";

TEST(ModelPatternsTest, TheTokenCountDecidesNoAlignment) {
  // M=5185 tokens with N=K=1024 is aligned.
  EXPECT_EQ(alignment_finding({{"aten::mm", kHalfGemm, 4 * kMs, "[[5185, 1024], [1024, 1024]]", kHalves}}), nullptr);
  // The weight gradient takes the token count as K, of transposed views: aligned too.
  AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA A100-SXM4-80GB", 8).step(1, 0, 10 * kMs);
  builder.op("aten::mm", 0, 8 * kUs, 1).inputs("[[5185, 1024], [1024, 1024]]", kHalves);
  builder.call("cudaLaunchKernel", 1 * kUs, 5 * kUs, 1, 1).kernel(kHalfGemm, 100 * kUs, 2 * kMs, 1, 1);
  builder.op("aten::mm", 10 * kUs, 18 * kUs, 2, Category::Backward).inputs("[[1024, 5185], [5185, 1024]]", kHalves);
  builder.call("cudaLaunchKernel", 11 * kUs, 15 * kUs, 2, 2).kernel(kHalfGemm, 2 * kMs, 4 * kMs, 2, 2);
  const auto found = dlprof::analysis::recommendations(builder.trace());
  EXPECT_EQ(finding_with_id(found, "gemm_dims_not_multiple_of_8"), nullptr) << finding_ids(found);
}

TEST(ModelPatternsTest, AVocabularyOfOddSizeAsksForPadding) {
  // N=50257: 4 ms of 4 ms of GEMM time misaligned, half of it saved, of a 10 ms step.
  const Recommendation* padding =
      alignment_finding({{"aten::addmm", kHalfGemm, 4 * kMs, "[[50257], [2048, 768], [768, 50257], [], []]", kHalvesOfAddmm}});
  ASSERT_NE(padding, nullptr);
  EXPECT_DOUBLE_EQ(padding->impact_ns, 2.0 * kMs);
  EXPECT_THAT(padding->text, HasSubstr("100% of matrix-product kernel time"));
  EXPECT_THAT(padding->text, HasSubstr("pad the hidden, head and vocabulary sizes"));
  EXPECT_THAT(padding->evidence, HasSubstr("aten::addmm with M=2048 N=50257 K=768 (c10::Half: rows need multiples of 8)"));
  // A reduction size K of 100 in half precision is misaligned too.
  EXPECT_NE(alignment_finding({{"aten::mm", kHalfGemm, 4 * kMs, "[[64, 100], [100, 64]]", kHalves}}), nullptr);
}

TEST(ModelPatternsTest, AKernelsOwnAlignmentOutweighsTheDims) {
  constexpr std::string_view kAlign2 = "cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_nn_align2";
  constexpr std::string_view kAlign8 = "cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_nn_align8";
  const Recommendation* padding = alignment_finding({{"aten::mm", kAlign2, 4 * kMs, "[[64, 64], [64, 64]]", kHalves}});
  ASSERT_NE(padding, nullptr);
  EXPECT_THAT(padding->evidence, HasSubstr("on a kernel for rows aligned to 2 elements (align2)"));
  EXPECT_EQ(alignment_finding({{"aten::mm", kAlign8, 4 * kMs, "[[64, 100], [100, 64]]", kHalves}}), nullptr);
  // float32 GEMMs off Tensor Cores are not judged; on them (TF32), rows need multiples of 4.
  EXPECT_EQ(alignment_finding({{"aten::mm", "ampere_sgemm_128x64_nn", 4 * kMs, "[[64, 100], [100, 66]]",
                                R"(["float", "float"])"}}),
            nullptr);
  const Recommendation* tf32 = alignment_finding({{"aten::mm", "ampere_sgemm_tf32_128x64_nn_s1688gemm", 4 * kMs,
                                                   "[[64, 100], [100, 66]]", R"(["float", "float"])"}});
  ASSERT_NE(tf32, nullptr);
  EXPECT_THAT(tf32->evidence, HasSubstr("(float: rows need multiples of 4)"));
}

TEST(ModelPatternsTest, MisalignedAttentionProductsAskForSdpaNotPadding) {
  // A 77-token sequence: the products' N is 77. Attention is 1.2 + 0.2 of 9.4 ms of kernels, under
  // its own finding's floor; its misaligned products are 1.2 of 9.2 ms of GEMM time (13 %), half saved.
  constexpr std::string_view kScores = "[[12, 77, 64], [12, 64, 77]]";
  const Recommendation* sdpa = alignment_finding({{"aten::addmm", kHalfGemm, 8 * kMs, "[[512], [77, 512], [512, 512], [], []]", kHalvesOfAddmm},
                                                  {"aten::bmm", kHalfGemm, 600 * kUs, kScores, kHalves},
                                                  {"aten::_softmax", kSoftmax, 200 * kUs},
                                                  {"aten::bmm", kHalfGemm, 600 * kUs, "[[12, 77, 77], [12, 77, 64]]", kHalves}});
  ASSERT_NE(sdpa, nullptr);
  EXPECT_DOUBLE_EQ(sdpa->impact_ns, 600.0 * kUs);
  EXPECT_THAT(sdpa->text, HasSubstr("attention's batched products"));
  EXPECT_THAT(sdpa->text, HasSubstr("scaled_dot_product_attention"));
  EXPECT_THAT(sdpa->text, Not(HasSubstr("pad the hidden")));
  EXPECT_EQ(sdpa->action, "use scaled_dot_product_attention");
}

// ---- dtype casts -----------------------------------------------------------------------------------

/// A 5 ms GEMM and `casts` 500 us casting copies run for aten::_to_copy (each its aten::copy_).
dlprof::Trace gemm_and_casts(int casts, std::string_view cast_kernel = kCastKernel) {
  AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA A100-SXM4-80GB", 8).step(1, 0, 10 * kMs);
  builder.op("aten::mm", 0, 8 * kUs, 1).call("cudaLaunchKernel", 1 * kUs, 5 * kUs, 1, 1).kernel(kHalfGemm, 0, 5 * kMs, 1, 1);
  for (int i = 0; i < casts; ++i) {
    const auto id = static_cast<std::uint32_t>(i + 2);
    const std::int64_t host = (i + 1) * 20 * kUs;
    const std::int64_t gpu = 5 * kMs + i * 500 * kUs;
    builder.op("aten::_to_copy", host, host + 15 * kUs).op("aten::copy_", host + 2 * kUs, host + 12 * kUs, id);
    builder.call("cudaLaunchKernel", host + 3 * kUs, host + 8 * kUs, id, id).kernel(cast_kernel, gpu, gpu + 500 * kUs, id, id);
  }
  return builder.trace();
}

TEST(ModelPatternsTest, CastKernelsAboveTenPercentAskToKeepOneDtype) {
  const auto found = dlprof::analysis::recommendations(gemm_and_casts(3));
  const Recommendation* casts = finding_with_id(found, "dtype_casts");
  ASSERT_NE(casts, nullptr) << finding_ids(found);
  // 1.5 of 6.5 ms of kernels; half of the 1.5 ms saved, of a 10 ms step.
  EXPECT_THAT(casts->text, HasSubstr("23.1% of kernel time converts tensors"));
  EXPECT_DOUBLE_EQ(casts->impact_ns, 750.0 * kUs);
  EXPECT_THAT(casts->evidence, HasSubstr("3 cast kernels, 1.500 ms of 6.500 ms kernel time; the longest 0.500 ms in aten::copy_ "
                                         "under aten::_to_copy"));
  // One cast: 0.5 of 5.5 ms, 9 %.
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(gemm_and_casts(1)), "dtype_casts"), nullptr);
}

TEST(ModelPatternsTest, ACastIsToldByItsKernelOrItsOp) {
  dlprof::analysis::AttributedKernel kernel;
  kernel.name = kCastKernel;
  EXPECT_TRUE(dlprof::analysis::is_dtype_cast_kernel(kernel));
  kernel.name =
      "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
      "{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
      "{lambda(float)#1}, std::array<char*, 2ul>)";
  EXPECT_TRUE(dlprof::analysis::is_dtype_cast_kernel(kernel));
  kernel.name = "triton_poi_fused__to_copy_1";
  EXPECT_TRUE(dlprof::analysis::is_dtype_cast_kernel(kernel));
  kernel.name = "triton_poi_fused__to_copy_add_mul_3";  // fused with arithmetic: not only a cast
  EXPECT_FALSE(dlprof::analysis::is_dtype_cast_kernel(kernel));
  // A copy whose kernel does not say is a cast when aten::_to_copy ran it, not when .contiguous() did.
  kernel.name = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda>";
  kernel.op = "aten::copy_";
  kernel.parent_op = "aten::_to_copy";
  EXPECT_TRUE(dlprof::analysis::is_dtype_cast_kernel(kernel));
  kernel.parent_op = "aten::clone";
  EXPECT_FALSE(dlprof::analysis::is_dtype_cast_kernel(kernel));
  kernel.name = kNoCastCopy;
  kernel.parent_op = "aten::_to_copy";
  EXPECT_FALSE(dlprof::analysis::is_dtype_cast_kernel(kernel));
}

TEST(ModelPatternsTest, CopiesThatCastNothingAreNoFinding) {
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(gemm_and_casts(3, kNoCastCopy)), "dtype_casts"), nullptr);
}

// ---- a dominant custom kernel ----------------------------------------------------------------------

/// A raw CUDA program: `custom` for 8 ms and a 2 ms cuBLAS GEMM in a 10 ms step, no ops.
dlprof::Trace custom_kernel_step(std::string_view custom, int compute_major = 8) {
  return AnalysisTraceBuilder()
      .device(0, "NVIDIA A100-SXM4-80GB", compute_major)
      .step(1, 0, 10 * kMs)
      .call("cudaLaunchKernel", 1 * kUs, 5 * kUs, 1)
      .kernel(custom, 10 * kUs, 8 * kMs + 10 * kUs, 1)
      .call("cudaLaunchKernel", 6 * kUs, 9 * kUs, 2)
      .kernel("ampere_sgemm_128x64_nn", 8 * kMs + 10 * kUs, 10 * kMs, 2)
      .trace();
}

TEST(ModelPatternsTest, AHandWrittenFloat32KernelAboveHalfTheGpuAsksForCublas) {
  const auto found =
      dlprof::analysis::recommendations(custom_kernel_step("matmul_naive(float const*, float const*, float*, int, int, int)"));
  const Recommendation* custom = finding_with_id(found, "dominant_custom_kernel");
  ASSERT_NE(custom, nullptr) << finding_ids(found);
  // 8 of ~10 ms of kernels; half of the 8 ms saved.
  EXPECT_DOUBLE_EQ(custom->impact_ns, 4.0 * kMs);
  EXPECT_THAT(custom->text, HasSubstr("float32 on the CUDA cores, not on the Tensor Cores this GPU has"));
  EXPECT_THAT(custom->text, HasSubstr("compare it with cuBLAS or cuBLASLt"));
  EXPECT_THAT(custom->text, HasSubstr("in TF32 or bfloat16 on Tensor Cores"));
  EXPECT_THAT(custom->evidence, HasSubstr("matmul_naive: 1 launches, 8.000 ms of 9.990 ms kernel time"));
  // A Pascal GPU has no Tensor Cores to name.
  const auto pascal = dlprof::analysis::recommendations(
      custom_kernel_step("matmul_naive(float const*, float const*, float*, int, int, int)", 6));
  ASSERT_NE(finding_with_id(pascal, "dominant_custom_kernel"), nullptr);
  EXPECT_THAT(finding_with_id(pascal, "dominant_custom_kernel")->text, Not(HasSubstr("Tensor Core")));
}

TEST(ModelPatternsTest, LibraryOrHalfPrecisionKernelsAreNoCustomKernel) {
  for (const std::string_view name :
       {std::string_view("matmul_naive(__half const*, __half const*, __half*, int, int, int)"),
        std::string_view("ampere_sgemm_64x32_sliced1x4_nn"),
        std::string_view("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
                         "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
                         "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
                         "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
                         "unsigned int, float, 4>)")}) {
    const auto found = dlprof::analysis::recommendations(custom_kernel_step(name));
    EXPECT_EQ(finding_with_id(found, "dominant_custom_kernel"), nullptr) << name;
  }
}

// ---- random tensors made on the CPU ---------------------------------------------------------------

/// A 10 ms step: a GEMM runs 0.2-2 ms; the host then draws aten::randn on the CPU from 1 to 4 ms
/// (its aten::normal_ inside) and copies it in aten::to at 4.1 ms. `randn_on_gpu` gives randn a
/// kernel of its own.
dlprof::Trace randn_then_copy(bool randn_on_gpu = false, bool in_loader = false) {
  AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA A100-SXM4-80GB", 8).step(1, 0, 10 * kMs);
  builder.op("aten::mm", 100 * kUs, 160 * kUs, 1).call("cudaLaunchKernel", 110 * kUs, 150 * kUs, 1, 1)
      .kernel(kHalfGemm, 200 * kUs, 2 * kMs, 1, 1);
  if (in_loader) builder.range("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 900 * kUs, 4050 * kUs);
  builder.op("aten::randn", 1 * kMs, 4 * kMs).op("aten::normal_", 1100 * kUs, 3900 * kUs, 3);
  if (randn_on_gpu)
    builder.call("cudaLaunchKernel", 1200 * kUs, 1210 * kUs, 3, 3)
        .kernel("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4>", 1300 * kUs,
                1400 * kUs, 3, 3);
  builder.op("aten::to", 4100 * kUs, 4500 * kUs, 2)
      .call("cudaMemcpyAsync", 4200 * kUs, 4400 * kUs, 2, 2)
      .memcpy(1, 4300 * kUs, 4400 * kUs, 2, 1 << 20, 2);
  return builder.trace();
}

TEST(ModelPatternsTest, RandomTensorsMadeOnTheCpuAndCopiedAskForTheGpu) {
  const auto found = dlprof::analysis::recommendations(randn_then_copy());
  const Recommendation* creation = finding_with_id(found, "cpu_tensor_creation");
  ASSERT_NE(creation, nullptr) << finding_ids(found);
  // randn holds the host 3 ms; the GPU is busy for the first 1 ms of it, idle for the other 2.
  EXPECT_DOUBLE_EQ(creation->impact_ns, 2.0 * kMs);
  EXPECT_THAT(creation->text, HasSubstr("random tensors on the CPU (aten::randn)"));
  EXPECT_THAT(creation->evidence, HasSubstr("1 random op on the CPU followed by a host-to-device copy: 3.000 ms on the "
                                            "host, the GPU idle 2.000 ms of it"));
}

TEST(ModelPatternsTest, RandomTensorsMadeOnTheGpuOrInTheLoaderAreNoFinding) {
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(randn_then_copy(true)), "cpu_tensor_creation"), nullptr);
  EXPECT_EQ(finding_with_id(dlprof::analysis::recommendations(randn_then_copy(false, true)), "cpu_tensor_creation"),
            nullptr);
}

}  // namespace
