// Tensor Core detection on kernel names taken from real traces: the reference traces in
// tests/data/reference-traces (A100, V100) and traces, profiler tables and tuning logs published
// for other GPUs.
#include <dlprof/analysis/tensor_cores.hpp>
#include <dlprof/trace.hpp>

#include <gtest/gtest.h>

#include <string_view>

namespace {

using dlprof::analysis::uses_tensor_cores;

TEST(TensorCoresTest, RecognisesTensorCoreKernelsFromVoltaToHopper) {
  constexpr std::string_view kTensorCoreKernels[] = {
      // Volta (V100): cuBLAS and cuDNN HMMA m8n8k4.
      "volta_h884gemm_128x128_ldg8_nn",
      "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
      "volta_s884cudnn_fp16_256x64_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1",
      // Turing: m16n8k8.
      "turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn",
      "turing_h1688gemm_128x128_ldg8_tn",
      // Ampere (A100): cuBLAS m16n8k16 half and bfloat16, int8 m16n8k32, CUTLASS TF32, cuDNN xmma.
      "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
      "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
      "ampere_int8_i16832gemm_int8_256x128_ldg16_relu_mods_stages_64x3_nt",
      "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>"
      "(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)",
      "cutlass::Kernel2<cutlass_80_tensorop_i16832gemm_s8_128x64_128x3_tn_align4>(...)",
      "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_"
      "g1_tensor16x8x8_alignc4_execute_kernel",
      "sm80_xmma_gemm_bf16bf16_bf16f32_f32",
      // Hopper (H100): cuBLAS 12's xmma and nvjet GEMMs, CUTLASS 3 warp-specialized GMMA.
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
      "cublas",
      "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
      "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
      "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, "
      "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative> > > >"
      "(cutlass::gemm::kernel::GemmUniversal::Params)",
      // Attention kernels.
      "void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, false, false, "
      "cutlass::half_t> >(Flash_fwd_params)",
      "void flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, "
      "cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float> >"
      "(flash::FlashAttnFwdSm90<...>::Params)",
      "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
      "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
      // The CUDA samples' int8 Tensor Core GEMM.
      "compute_gemm_imma(signed char const*, signed char const*, int const*, int*, int, int)",
  };
  for (const std::string_view name : kTensorCoreKernels) EXPECT_TRUE(uses_tensor_cores(name)) << name;
}

TEST(TensorCoresTest, LeavesOtherKernelsOut) {
  constexpr std::string_view kOtherKernels[] = {
      "volta_sgemm_128x32_nt",
      "ampere_sgemm_128x64_nn",
      "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1",
      "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>"
      "(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
      "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
      "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
      "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>()",
      "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
      // xmma kernels on the FMA units, and single-precision memory-efficient attention.
      "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
      "kernel__5x_cublas",
      "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
      "true, 64, 64, 64, true, true>::Params)",
      "Memcpy HtoD (Pageable -> Device)",
  };
  for (const std::string_view name : kOtherKernels) EXPECT_FALSE(uses_tensor_cores(name)) << name;
}

// AMD CDNA's matrix cores: hipBLASLt's and rocBLAS's Tensile GEMMs name their MFMA tile
// ("_MI16x16x1_"), composable kernel's GEMMs their XDL (MFMA) pipeline.
TEST(TensorCoresTest, RecognisesAmdMatrixCoreKernels) {
  constexpr std::string_view kMatrixCoreKernels[] = {
      "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_GRVWA8_GRVWB8_"
      "MIAV0_MIWT8_8_MO40_NTn1_WG32_8_1_WGM8",
      "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_AF0EM8_GRVW8_MIWT2_2_WG32_8_1",
      "Cijk_Ailk_Bljk_SB_MT64x64x16_MFMA_SN_K1",
      "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>, true>"
      "(ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>::Argument)",
      "void ck::kernel_batched_gemm_xdlops_v2r3<ck::GridwiseGemm_k0mk1_k0nk1_mn_xdlops_v2r3<256, ck::half_t>>()",
  };
  for (const std::string_view name : kMatrixCoreKernels) EXPECT_TRUE(uses_tensor_cores(name)) << name;
  constexpr std::string_view kOtherAmdKernels[] = {
      // Tensile's multiply-accumulate kernels; "MIWT" (the wave tile) is no matrix-instruction tile.
      "Cijk_Ailk_Bljk_SB_MT64x64x16_MAC_SN_K1_NLCA1_MIWT4_4",
      "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
      "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
      "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, float const*, int)",
  };
  for (const std::string_view name : kOtherAmdKernels) EXPECT_FALSE(uses_tensor_cores(name)) << name;
}

TEST(TensorCoresTest, AmdGpusCallThemMatrixCores) {
  using dlprof::analysis::MatrixUnits;
  using dlprof::analysis::matrix_units_of;
  dlprof::Trace trace;
  EXPECT_EQ(matrix_units_of(trace), MatrixUnits::TensorCores);
  trace.devices.push_back(dlprof::DeviceProperties{});
  trace.devices.back().name = "NVIDIA A100-SXM4-80GB";
  EXPECT_EQ(matrix_units_of(trace), MatrixUnits::TensorCores);
  trace.devices.back().name = "AMD Instinct MI300X";
  EXPECT_EQ(matrix_units_of(trace), MatrixUnits::MatrixCores);
  trace.devices.back().name = "gfx942";  // a ROCm that names the GPU by its architecture
  trace.devices.back().warp_size = 64;
  EXPECT_EQ(matrix_units_of(trace), MatrixUnits::MatrixCores);
  // No deviceProperties: HIP runtime calls say it.
  dlprof::Trace hip;
  hip.names = {"hipLaunchKernel"};
  hip.api_events.push_back(dlprof::ApiEvent{});
  EXPECT_EQ(matrix_units_of(hip), MatrixUnits::MatrixCores);
  EXPECT_EQ(dlprof::analysis::to_string(MatrixUnits::MatrixCores), "matrix cores");
}

TEST(TensorCoresTest, StarMatchesAnyTextInOrder) {
  using dlprof::analysis::detail::contains_in_order;
  static_assert(contains_in_order("cutlass_80_tensorop_s1688gemm", "cutlass*tensorop"));
  static_assert(!contains_in_order("tensorop_cutlass", "cutlass*tensorop"));
  static_assert(contains_in_order("abc", ""));
  static_assert(uses_tensor_cores("volta_h884gemm_64x64_ldg8_nn"), "usable at compile time");
  EXPECT_TRUE(contains_in_order("a-b-c", "a*b*c"));
  EXPECT_FALSE(contains_in_order("a-c-b", "a*b*c"));
}

}  // namespace
