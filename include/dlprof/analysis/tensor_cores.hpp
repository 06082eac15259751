// dlprof/analysis/tensor_cores.hpp: whether a kernel ran on the GPU's matrix units (NVIDIA's
// Tensor Cores, AMD's matrix cores), from its name, and what a trace's GPUs call those units.
//
// CUPTI says nothing about the units a kernel used, so profilers read the name: TensorBoard's
// profiler plugin (tb_plugin/torch_tb_profiler/profiler/tensor_core.py, after NVIDIA PyProf's
// tc.py) keeps a list of substrings. This is that list, extended to the libraries of Ampere and
// Hopper and to AMD's matrix-core kernels (hipBLASLt and rocBLAS's Tensile GEMMs, composable
// kernel's XDL GEMMs), with the one exclusion its substrings need. Keep it sorted by architecture
// and add to it when a library names its kernels anew; each entry is tested with a real kernel
// name (tests/analysis_tensor_cores_test.cpp).
//
// A pattern matches anywhere in the name, case-sensitively; '*' inside a pattern stands for any
// text ("cutlass*tensorop" is "cutlass", then later "tensorop").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

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
    // Blackwell: CUTLASS 3's UMMA collectives (MainloopSm100TmaUmmaWarpSpecialized...) and the
    // tcgen05 instructions some kernels name; TensorRT-LLM's generated FP8, FP4 and bfloat16
    // batched GEMMs (bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_..._sm100a) and attention kernels
    // (fmhaSm100Kernel_QkvE4m3OBfloat16H128...; fmhaSm90...).
    "Umma", "umma", "tcgen05", "bmm_*E4m3*_sm10", "bmm_*E2m1*_sm10", "bmm_*Bfloat16*_sm10", "bmm_*Fp16*_sm10", "fmhaSm",
    // DeepGEMM's FP8 GEMMs on Hopper and Blackwell (deep_gemm::fp8_gemm_kernel<...>,
    // deep_gemm::sm90_fp8_gemm_1d2d_impl<...>), built on wgmma and UMMA.
    "deep_gemm::",
    // CUTLASS 3's GEMM kernels whatever their collective (cutlass::device_kernel<...GemmUniversal...>):
    // CUTLASS 3 has no FMA mainloop for them but the SIMT ones named "Simt".
    "cutlass::device_kernel<*Gemm",
    // FlashInfer's prefill attention (mma.sync): BatchPrefillWithPagedKVCacheKernel, SinglePrefill...
    "PrefillWith",
    // Attention: FlashAttention 2 (flash_fwd_kernel, flash_bwd_...), FlashAttention 3
    // (FlashAttnFwdSm90), PyTorch's memory-efficient attention in half precision
    // (fmha_cutlassF_bf16_aligned_64x64_rf_sm80; its f32 kernels run on FMA units), cuDNN's SDPA.
    "flash_fwd", "flash_bwd", "FlashAttn", "fmha*f16", "fort_native_sdpa",
    // AMD CDNA (MI100 to MI300): kernels built on the MFMA instructions name them (Tensile's
    // "_MFMA_" solutions, composable kernel's BlockwiseGemmXdlops_...Mfma), and so do
    // composable kernel's XDL GEMMs (kernel_gemm_xdl_cshuffle_v3, DeviceGemmXdl...). Tensile's
    // matrix-instruction tile, "_MI32x32x8x1_" in hipBLASLt's Cijk_... names, is
    // has_matrix_instruction_tile().
    "MFMA", "Mfma", "mfma", "_xdl", "Xdl",
};

/// Kernels that match a pattern but run on the FMA units: xmma FP32 kernels built on FFMA
/// (sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize..._ffma_aligna4_...), CUTLASS's SIMT GEMMs
/// (MmaSimt, CUTLASS 3's UniversalFMA atoms).
inline constexpr std::string_view kTensorCoreKernelExclusions[] = {"ffma", "Simt", "UniversalFMA"};

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

constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

/// Tensile's matrix-instruction tile in a kernel name: "_MI" then <m>x<n>... in digits
/// (Cijk_Alik_Bljk_HHS_BH_MT128x128x64_MI16x16x16x1_SN_...). Only MFMA solutions have one;
/// Tensile's other kernels name their multiply-accumulate "_MAC_".
constexpr bool has_matrix_instruction_tile(std::string_view name) noexcept {
  for (std::size_t at = name.find("_MI"); at != std::string_view::npos; at = name.find("_MI", at + 1)) {
    std::size_t i = at + 3;
    const std::size_t m_digits = i;
    while (i < name.size() && is_digit(name[i])) ++i;
    if (i == m_digits || i >= name.size() || name[i] != 'x') continue;
    if (i + 1 < name.size() && is_digit(name[i + 1])) return true;
  }
  return false;
}

}  // namespace detail

/// Whether a kernel named `kernel_name` ran on Tensor Cores or matrix cores, by
/// kTensorCoreKernelPatterns.
constexpr bool uses_tensor_cores(std::string_view kernel_name) noexcept {
  for (const std::string_view exclusion : kTensorCoreKernelExclusions)
    if (kernel_name.find(exclusion) != std::string_view::npos) return false;
  for (const std::string_view pattern : kTensorCoreKernelPatterns)
    if (detail::contains_in_order(kernel_name, pattern)) return true;
  return detail::has_matrix_instruction_tile(kernel_name);
}

/// The compute capability's major number a kernel's name gives away; 0 where it gives none.
/// cuBLAS and cuDNN prefix their kernels with the architecture (maxwell_ 5, pascal_ 6, volta_
/// and turing_ 7, ampere_ 8, hopper_ 9, blackwell_ 10) or its number (sm80_, sm90_, sm100_: the
/// number's tens), CUTLASS 2 and 3 with the number (cutlass_80_..., cutlass3x_sm90_...). A prefix
/// counts at the name's start or after a character that is not a letter or digit
/// ("void cutlass::Kernel<cutlass_80_tensorop_...>", "cudnn_infer_volta_scudnn_...").
constexpr int compute_major_of_kernel_name(std::string_view name) noexcept {
  struct Prefix {
    std::string_view text;
    int major;  ///< 0: the architecture's number follows the prefix
  };
  constexpr Prefix kPrefixes[] = {{"maxwell_", 5}, {"pascal_", 6}, {"volta_", 7},  {"turing_", 7}, {"ampere_", 8},
                                  {"hopper_", 9},  {"blackwell_", 10}, {"sm", 0}, {"cutlass_", 0}, {"cutlass3x_sm", 0}};
  const auto is_alphanumeric = [](char c) {
    return detail::is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  };
  int major = 0;
  for (std::size_t at = 0; at < name.size(); ++at) {
    if (at != 0 && is_alphanumeric(name[at - 1])) continue;  // a prefix starts a token
    const std::string_view rest = name.substr(at);
    for (const Prefix& prefix : kPrefixes) {
      if (rest.front() != prefix.text.front() || rest.substr(0, prefix.text.size()) != prefix.text) continue;
      if (prefix.major != 0) {
        major = std::max(major, prefix.major);
        continue;
      }
      std::size_t i = prefix.text.size();
      int number = 0;
      while (i < rest.size() && detail::is_digit(rest[i]) && number < 1000) number = number * 10 + (rest[i++] - '0');
      // Two or three digits, then '_' or a letter (sm90a_): sm80_, sm100_, cutlass_80_.
      if (i - prefix.text.size() >= 2 && i - prefix.text.size() <= 3 && i < rest.size() && !detail::is_digit(rest[i]))
        major = std::max(major, number / 10);
    }
  }
  return major;
}

/// The largest compute capability's major number the trace's kernel names give away
/// (compute_major_of_kernel_name); 0 where none does. What a trace without deviceProperties
/// tells of its GPUs.
inline int compute_major_from_kernel_names(const Trace& trace) {
  std::vector<std::int8_t> seen(trace.names.size(), 0);
  int major = 0;
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel || seen[work.name]) continue;
    seen[work.name] = 1;
    major = std::max(major, compute_major_of_kernel_name(trace.names[work.name]));
  }
  return major;
}

/// What the GPUs of a trace call their matrix units; Unknown where the trace's devices are of
/// neither NVIDIA nor AMD (Intel's XPUs, MTIA, ...), whose kernels' names the list cannot judge.
enum class MatrixUnits : std::uint8_t { TensorCores, MatrixCores, Unknown };

constexpr std::string_view to_string(MatrixUnits units) noexcept {
  switch (units) {
    case MatrixUnits::TensorCores: return "Tensor Cores";
    case MatrixUnits::MatrixCores: return "matrix cores";
    case MatrixUnits::Unknown: return "matrix units";
  }
  return "Tensor Cores";
}

/// AMD's matrix cores where the trace says its GPUs are AMD's: deviceProperties names one AMD's
/// ("AMD Instinct MI300X", "Radeon") or gives it 64-wide wavefronts (warpSize 64; NVIDIA's
/// warps are 32 wide), or the trace holds HIP runtime calls (Kineto writes ROCm's hipLaunchKernel
/// ... under cuda_runtime). Tensor Cores where it says they are NVIDIA's: deviceProperties with a
/// compute capability, CUDA runtime or driver calls, or kernel names of NVIDIA's libraries
/// (compute_major_from_kernel_names). Unknown for GPU work of any other device (XPU, MTIA);
/// Tensor Cores for a trace without GPU work, where nothing is judged.
inline MatrixUnits matrix_units_of(const Trace& trace) {
  bool nvidia = false;
  for (const DeviceProperties& device : trace.devices) {
    if (device.warp_size == 64 || device.name.find("AMD") != std::string::npos ||
        device.name.find("Radeon") != std::string::npos || device.name.find("Instinct") != std::string::npos)
      return MatrixUnits::MatrixCores;
    nvidia = nvidia || device.compute_major > 0 || device.name.find("NVIDIA") != std::string::npos;
  }
  std::vector<std::int8_t> seen(trace.names.size(), 0);
  for (const ApiEvent& call : trace.api_events) {
    if (seen[call.name]) continue;
    seen[call.name] = 1;
    const std::string& name = trace.names[call.name];
    if (name.compare(0, 3, "hip") == 0) return MatrixUnits::MatrixCores;
    nvidia = nvidia || name.compare(0, 4, "cuda") == 0 || (name.compare(0, 2, "cu") == 0 && name.size() > 2 &&
                                                            name[2] >= 'A' && name[2] <= 'Z');  // cuLaunchKernel
  }
  if (nvidia || trace.gpu_events.empty()) return MatrixUnits::TensorCores;
  return compute_major_from_kernel_names(trace) > 0 ? MatrixUnits::TensorCores : MatrixUnits::Unknown;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
