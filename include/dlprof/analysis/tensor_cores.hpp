// dlprof/analysis/tensor_cores.hpp: whether a kernel ran on Tensor Cores, from its name.
//
// CUPTI says nothing about the units a kernel used, so profilers read the name: TensorBoard's
// profiler plugin (tb_plugin/torch_tb_profiler/profiler/tensor_core.py, after NVIDIA PyProf's
// tc.py) keeps a list of substrings. This is that list, extended to the libraries of Ampere and
// Hopper, with the one exclusion its substrings need. Keep it sorted by architecture and add to it
// when a library names its kernels anew; each entry is tested with a real kernel name
// (tests/analysis_tensor_cores_test.cpp).
//
// A pattern matches anywhere in the name, case-sensitively; '*' inside a pattern stands for any
// text ("cutlass*tensorop" is "cutlass", then later "tensorop").
#pragma once

#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// Substrings of Tensor Core kernel names.
inline constexpr std::string_view kTensorCoreKernelPatterns[] = {
    // TensorBoard's list (PyProf's): Volta (884 = m8n8k4 HMMA), Turing (1688, 8816 IMMA) and
    // Ampere (16816) cuBLAS/cuDNN kernels, cuDNN's own Tensor Core convolutions, and xmma.
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "dgrad_1x1_stride_2x2", "first_layer_wgrad_kernel",
    "conv1x1", "conv2d_c1_k1", "direct_group", "xmma_implicit_gemm", "xmma_sparse_conv",
    "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm", "c1688",
    // Every xmma kernel (cuBLAS and cuDNN on sm_75 to sm_90: sm80_xmma_fprop_..., sm90_xmma_gemm_...)
    // but the FFMA ones (kTensorCoreKernelExclusions).
    "xmma",
    // Matrix instructions named in kernel names: IMMA (int8: the CUDA samples' compute_gemm_imma),
    // WMMA (the C++ API, CUTLASS's wmma_tensorop), Hopper's warpgroup MMA (wgmma) and CUTLASS 3's
    // MainloopSm90...GmmaWarpSpecialized collectives.
    "imma", "wmma", "gmma", "Gmma",
    // Ampere's int8 shape (m16n8k32): ampere_int8_i16832gemm_int8_...
    "i16832",
    // CUTLASS 2 and 3 Tensor Core kernels: cutlass_80_tensorop_s1688gemm_...,
    // cutlass3x_sm90_tensorop_gemm_...
    "cutlass*tensorop",
    // cuBLAS 12's Hopper GEMMs (nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT, ...).
    "nvjet",
    // Attention: FlashAttention 2 (flash_fwd_kernel, flash_bwd_...), FlashAttention 3
    // (FlashAttnFwdSm90), PyTorch's memory-efficient attention in half precision
    // (fmha_cutlassF_bf16_aligned_64x64_rf_sm80; its f32 kernels run on FMA units), cuDNN's SDPA.
    "flash_fwd", "flash_bwd", "FlashAttn", "fmha*f16", "fort_native_sdpa",
};

/// Kernels that match a pattern but run on the FMA units: xmma FP32 kernels built on FFMA
/// (sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize..._ffma_aligna4_...).
inline constexpr std::string_view kTensorCoreKernelExclusions[] = {"ffma"};

namespace detail {

/// `pattern`'s '*'-separated pieces occur in `text` in order.
constexpr bool contains_in_order(std::string_view text, std::string_view pattern) noexcept {
  std::size_t from = 0;
  while (true) {
    const std::size_t star = pattern.find('*');
    const std::string_view piece = pattern.substr(0, star);
    const std::size_t found = text.find(piece, from);
    if (found == std::string_view::npos) return false;
    if (star == std::string_view::npos) return true;
    from = found + piece.size();
    pattern.remove_prefix(star + 1);
  }
}

}  // namespace detail

/// Whether a kernel named `kernel_name` ran on Tensor Cores, by kTensorCoreKernelPatterns.
constexpr bool uses_tensor_cores(std::string_view kernel_name) noexcept {
  for (const std::string_view exclusion : kTensorCoreKernelExclusions)
    if (kernel_name.find(exclusion) != std::string_view::npos) return false;
  for (const std::string_view pattern : kTensorCoreKernelPatterns)
    if (detail::contains_in_order(kernel_name, pattern)) return true;
  return false;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
