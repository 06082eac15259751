// The kernel taxonomy on today's kernels, with names from published traces, profiler tables and
// the libraries' sources: FP8 and FP4 GEMMs and attention on Hopper and Blackwell, communication
// beyond NCCL (counted as such by default, as HTA counts it under hta_compat), PyTorch 1.x's
// convolution ops, the architecture a trace without deviceProperties names in its kernels, and
// "n/a" for a vendor whose kernels no list judges.
#include <dlprof/analysis/analysis.hpp>
#include <dlprof/analysis/collectives.hpp>
#include <dlprof/analysis/recommendations.hpp>
#include <dlprof/report.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::KernelType;
using dlprof::analysis::MatrixUnits;
using dlprof_test::AnalysisTraceBuilder;
using dlprof_test::kMs;
using dlprof_test::kUs;
using ::testing::HasSubstr;

constexpr std::string_view kDeepEpDispatch =
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, "
    "float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, void**, int, int, int)";
constexpr std::string_view kMultimemAllReduce =
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16, 4>(c10::BFloat16*, unsigned long, "
    "unsigned long, unsigned int**, unsigned long, unsigned long)";

TEST(KernelTaxonomyTest, FpEightAndFpFourGemmsAndAttentionOfHopperAndBlackwellUseTensorCores) {
  constexpr std::string_view kTensorCoreKernels[] = {
      // DeepGEMM on Hopper (DeepSeek-V3's FP8 training) and its Blackwell build.
      "void deep_gemm::fp8_gemm_kernel<128u, 128u, 128u, 1u, 8u, 128u, 4u, (deep_gemm::GemmType)0>(float*, int*, "
      "unsigned int, CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, CUtensorMap_st)",
      "void deep_gemm::sm100_fp8_gemm_1d1d_impl<(cute::UMMA::Major)0, 0u, 0u, 0u, 128u, 256u, 128u, 1u>(int*, "
      "unsigned int, unsigned int, unsigned int, CUtensorMap_st, CUtensorMap_st)",
      // CUTLASS 3 on Blackwell: a UMMA mainloop; and a CUTLASS 3 GEMM that names no MMA at all.
      "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
      "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm100TmaUmmaWarpSpecialized<5, 2, 2, "
      "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> > > > > >(cutlass::gemm::kernel::GemmUniversal::Params)",
      "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
      "sm90_fp8_block_scaled_collective, cutlass::epilogue::collective::DefaultEpilogue> >(Params)",
      // TensorRT-LLM's generated batched GEMMs (B200 decode: FP8, FP4, bfloat16 activations) and attention.
      "bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100a",
      "bmm_E2m1_E2m1E2m1_Fp32_t128x8x256u2_s4_et64x8_m64x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100a",
      "bmm_Bfloat16_E4m3E4m3_Fp32_t128x16x128u2_s6_et64x16_m64x16x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100a",
      "fmhaSm100Kernel_QkvE4m3OBfloat16H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext",
      // cuBLAS 12 and FlashAttention 3, FlashInfer's prefill.
      "nvjet_sm100_tst_256x128_64x4_2x1_2cta_v_bz_TNT",
      "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
      "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> >, "
      "128, cutlass::float_e4m3_t, float, cutlass::arch::Sm90, true, false> > > >(Params)",
      "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 2u, "
      "4u, 8u, 8u, 1u, 4u>, flashinfer::PagedParams>(flashinfer::PagedParams)",
  };
  for (const std::string_view name : kTensorCoreKernels) EXPECT_TRUE(dlprof::analysis::uses_tensor_cores(name)) << name;
  constexpr std::string_view kOtherKernels[] = {
      // CUTLASS's SIMT GEMMs, 2 and 3, and FlashInfer's decode on the CUDA cores.
      "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaSimt<float>, true> >(Params)",
      "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
      "cutlass::gemm::collective::CollectiveMma<cute::TiledMMA<cute::MMA_Atom<cute::UniversalFMA<float, float, float, "
      "float> > > > > >(Params)",
      "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u>()",
      // TensorRT-LLM's batched GEMM of another architecture is not claimed by the sm100 patterns.
      "bmm_Fp32_Fp32Fp32_t128x8x32_simt",
  };
  for (const std::string_view name : kOtherKernels) EXPECT_FALSE(dlprof::analysis::uses_tensor_cores(name)) << name;
}

TEST(KernelTaxonomyTest, CommunicationBeyondNcclIsCommunicationUnlessHtaCompat) {
  constexpr std::string_view kCommunicationKernels[] = {
      kDeepEpDispatch,
      "void deep_ep::internode::combine<true, 8, 4, 128>(int4*, float*, int4 const*, float const*, int*, void*)",
      "void dpsk::ep::dispatch_kernel<8>(void*)",
      "void nvshmemi_transfer_rma_nbi_kernel<(nvshmemi_op_t)1>(void*, void const*, unsigned long, int)",
      kMultimemAllReduce,
      "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**, float*, unsigned long, int)",
      "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
      "__nv_bfloat16*, int, int)",
      "void sglang::cross_device_reduce_2stage<half, 4>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, half*, int, int)",
      "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>(Params)",
      "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, false>(AllReduceParams)",
      "mscclKernel_Sum_half_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)",
      "void mscclpp::allreduce_allpairs<__half>(__half*, mscclpp::DeviceHandle<mscclpp::SmChannel>*, unsigned long)",
      // RCCL's kernels keep NCCL's names.
      "ncclDevKernel_Generic_4(ncclDevComm*, unsigned long, ncclWork*)",
  };
  dlprof::analysis::AnalysisOptions hta;
  hta.hta_compat = true;
  for (const std::string_view name : kCommunicationKernels) {
    EXPECT_TRUE(dlprof::analysis::is_communication_kernel(name)) << name;
    EXPECT_EQ(dlprof::analysis::kernel_type(name, dlprof::analysis::AnalysisOptions{}), KernelType::Communication) << name;
    EXPECT_FALSE(dlprof::analysis::collective_of_kernel(name).empty()) << name;
  }
  // Under hta_compat, HTA 0.5.0's rule: only ^nccl.*Kernel.
  EXPECT_EQ(dlprof::analysis::kernel_type(kDeepEpDispatch, hta), KernelType::Computation);
  EXPECT_EQ(dlprof::analysis::kernel_type(kMultimemAllReduce, hta), KernelType::Computation);
  EXPECT_EQ(dlprof::analysis::kernel_type("ncclDevKernel_Generic_4(ncclDevComm*)", hta), KernelType::Communication);
  // Neither the reductions of PyTorch nor copies are communication.
  for (const std::string_view name :
       {std::string_view("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper<float> > >()"),
        std::string_view("Memcpy DtoD (Device -> Device)")})
    EXPECT_FALSE(dlprof::analysis::is_communication_kernel(name)) << name;
  EXPECT_EQ(dlprof::analysis::collective_of_kernel(kDeepEpDispatch), "alltoall");
  EXPECT_EQ(dlprof::analysis::collective_of_kernel(kMultimemAllReduce), "allreduce");
  EXPECT_EQ(dlprof::analysis::collective_of_kernel("mscclKernel_Sum_half_Simple_false(ncclDevComm*)"), "msccl");
  EXPECT_EQ(dlprof::analysis::collective_of_kernel("void nvshmemi_transfer_rma_nbi_kernel<1>(void*)"), "nvshmem");
}

/// One 10 ms step on an H800: a 4 ms GEMM, then DeepEP's 4.6 ms dispatch launched by a custom op
/// (no nccl:* op around it), alone on its stream.
dlprof::Trace expert_parallel_step() {
  return AnalysisTraceBuilder()
      .device(0, "NVIDIA H800", 9)
      .step(1, 0, 10 * kMs)
      .op("aten::mm", 100 * kUs, 300 * kUs, 1)
      .call("cudaLaunchKernel", 150 * kUs, 160 * kUs, 1, 1)
      .kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 200 * kUs, 4'200 * kUs, 1, 1)
      .op("deep_ep::dispatch", 400 * kUs, 500 * kUs, 2)
      .call("cudaLaunchKernel", 450 * kUs, 460 * kUs, 2, 2)
      .kernel(kDeepEpDispatch, 4'300 * kUs, 8'900 * kUs, 2, 2, 9)
      .trace();
}

TEST(KernelTaxonomyTest, DeepEpIsCommunicationInTheStepAndHtasBreakdownsByDefault) {
  const dlprof::Trace trace = expert_parallel_step();
  const auto steps = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(steps.steps.size(), 1u);
  EXPECT_EQ(steps.steps[0].role_ns[static_cast<std::size_t>(dlprof::analysis::StepRole::Communication)], 4'600 * kUs);
  EXPECT_EQ(steps.steps[0].role_ns[static_cast<std::size_t>(dlprof::analysis::StepRole::Kernel)], 4'000 * kUs);

  const auto temporal = dlprof::analysis::temporal_breakdown(trace);
  EXPECT_EQ(temporal.compute_ns, 4'000 * kUs);
  EXPECT_EQ(temporal.non_compute_ns, 4'600 * kUs);
  const auto overlap = dlprof::analysis::comm_comp_overlap(trace);
  EXPECT_EQ(overlap.communication_ns, 4'600 * kUs);
  const auto types = dlprof::analysis::kernel_type_breakdown(trace);
  ASSERT_FALSE(types.times.empty());
  // HTA 0.5.0's rule under hta_compat: all of it computation.
  dlprof::analysis::AnalysisOptions hta;
  hta.hta_compat = true;
  EXPECT_EQ(dlprof::analysis::temporal_breakdown(trace, hta).compute_ns, 8'600 * kUs);
  EXPECT_EQ(dlprof::analysis::comm_comp_overlap(trace, hta).communication_ns, 0);

  const dlprof::Report report = dlprof::make_report(trace);
  EXPECT_EQ(report.verdict.bound, dlprof::analysis::Bound::CommunicationWait);
  bool listed = false;
  for (const dlprof::KernelTotal& kernel : report.ranks[0].top_kernels)
    if (kernel.name == kDeepEpDispatch) {
      listed = true;
      EXPECT_EQ(kernel.type, KernelType::Communication);
    }
  EXPECT_TRUE(listed);
}

TEST(KernelTaxonomyTest, KernelNamesGiveTheArchitecture) {
  using dlprof::analysis::compute_major_of_kernel_name;
  EXPECT_EQ(compute_major_of_kernel_name("volta_sgemm_128x64_nn"), 7);
  EXPECT_EQ(compute_major_of_kernel_name("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1"), 7);
  EXPECT_EQ(compute_major_of_kernel_name("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn"), 7);
  EXPECT_EQ(compute_major_of_kernel_name("ampere_sgemm_128x64_nn"), 8);
  EXPECT_EQ(compute_major_of_kernel_name("maxwell_scudnn_128x64_relu_interior_nn"), 5);
  EXPECT_EQ(compute_major_of_kernel_name("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8"), 8);
  EXPECT_EQ(compute_major_of_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"), 9);
  EXPECT_EQ(compute_major_of_kernel_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>()"), 8);
  EXPECT_EQ(compute_major_of_kernel_name("cutlass3x_sm100_tensorop_gemm_e4m3_e4m3_f32_f32_bf16_128x128x128"), 10);
  EXPECT_EQ(compute_major_of_kernel_name("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_schedS_sm100a"), 10);
  // No architecture: a name without one, "sm" not followed by its number, a number too long.
  EXPECT_EQ(compute_major_of_kernel_name("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"), 0);
  EXPECT_EQ(compute_major_of_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::relu>()"), 0);
  EXPECT_EQ(compute_major_of_kernel_name("smem_transpose_kernel"), 0);
  EXPECT_EQ(compute_major_of_kernel_name("prism8000_kernel"), 0);
  EXPECT_EQ(compute_major_of_kernel_name("asm90_kernel"), 0);
}

/// A V100 ResNet step of PyTorch 1.x without deviceProperties: a float32 convolution forward and
/// its backward ops' cuDNN kernels, none on Tensor Cores.
dlprof::Trace pytorch_one_backward_convolutions() {
  return AnalysisTraceBuilder()
      .step(1, 0, 10 * kMs)
      .op("aten::cudnn_convolution", 100 * kUs, 200 * kUs, 1)
      .call("cudaLaunchKernel", 110 * kUs, 120 * kUs, 1, 1)
      .kernel("volta_scudnn_128x64_relu_interior_nn_v1", 300 * kUs, 2'300 * kUs, 1, 1)
      .op("aten::cudnn_convolution_backward_input", 2'400 * kUs, 2'500 * kUs, 2)
      .call("cudaLaunchKernel", 2'410 * kUs, 2'420 * kUs, 2, 2)
      .kernel("volta_scudnn_128x128_stridedB_splitK_small_nn_v1", 2'500 * kUs, 6'500 * kUs, 2, 2)
      .op("aten::cudnn_convolution_backward_weight", 6'600 * kUs, 6'700 * kUs, 3)
      .call("cudaLaunchKernel", 6'610 * kUs, 6'620 * kUs, 3, 3)
      .kernel("void cudnn::detail::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>()", 6'700 * kUs,
              9'700 * kUs, 3, 3)
      .trace();
}

TEST(KernelTaxonomyTest, PyTorchOneBackwardConvolutionsWithoutDevicePropertiesAskForMixedPrecision) {
  const dlprof::Trace trace = pytorch_one_backward_convolutions();
  EXPECT_EQ(dlprof::analysis::compute_major_from_kernel_names(trace), 7);
  EXPECT_EQ(dlprof::analysis::matrix_units_of(trace), MatrixUnits::TensorCores);
  const auto found = dlprof::analysis::recommendations(trace);
  const dlprof::analysis::Recommendation* amp = nullptr;
  for (const auto& finding : found)
    if (finding.id == "fp32_without_tensor_cores") amp = &finding;
  ASSERT_NE(amp, nullptr);
  EXPECT_THAT(amp->text, HasSubstr("compute capability 7.x, from its kernels' names"));
  // All three convolutions' 9 ms, forward and backward, of 9 ms of kernels; half of it saved.
  EXPECT_THAT(amp->evidence, HasSubstr("9.000 ms of float32 GEMM/conv kernels (100.0% of kernel time)"));
  EXPECT_DOUBLE_EQ(amp->impact_ns, 4'500'000.0);
}

/// MTIA-like GPU work: a device that is neither NVIDIA's nor AMD's, its own runtime's calls.
dlprof::Trace another_vendors_trace() {
  return AnalysisTraceBuilder()
      .step(1, 0, 10 * kMs)
      .op("aten::mm", 100 * kUs, 300 * kUs, 1)
      .call("mtiaLaunchKernel", 150 * kUs, 160 * kUs, 1, 1)
      .kernel("mtia_fbgemm_gemm_fp16_k128", 200 * kUs, 8 * kMs, 1, 1)
      .trace();
}

TEST(KernelTaxonomyTest, AnotherVendorsMatrixUnitsAreNotJudged) {
  const dlprof::Trace trace = another_vendors_trace();
  EXPECT_EQ(dlprof::analysis::matrix_units_of(trace), MatrixUnits::Unknown);
  const auto steps = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(steps.devices.size(), 1u);
  EXPECT_FALSE(steps.devices[0].tensor_core_percent.has_value());
  EXPECT_THAT(steps.table(), HasSubstr("matrix units (dlprof's kernel list) n/a"));

  const dlprof::Report report = dlprof::make_report(trace);
  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, HasSubstr("MU (dlprof)"));
  EXPECT_THAT(text, ::testing::ContainsRegex("mtia_fbgemm_gemm_fp16_k128 +COMPUTATION +n/a"));
  const nlohmann::json json = nlohmann::json::parse(dlprof::render_json(report));
  const nlohmann::json& rank = json.at("ranks").at(0);
  EXPECT_EQ(rank.at("matrix_units"), "matrix units");
  EXPECT_TRUE(rank.at("gpus").at(0).at("dlprof_tensor_core_pct").is_null());
  EXPECT_TRUE(rank.at("top_kernels").at(0).at("tensor_cores").is_null());
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("<td>n/a</td>"));

  // An NVIDIA trace is judged: 0.0 %, not n/a.
  const auto nvidia = dlprof::analysis::step_breakdown(expert_parallel_step());
  ASSERT_TRUE(nvidia.devices.at(0).tensor_core_percent.has_value());
  EXPECT_EQ(dlprof::analysis::matrix_units_of(expert_parallel_step()), MatrixUnits::TensorCores);
}

}  // namespace
