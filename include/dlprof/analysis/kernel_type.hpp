// dlprof/analysis/kernel_type.hpp: Holistic Trace Analysis's kernel types, by name alone.
//
// HTA 0.5.0 (hta/utils/utils.py, get_kernel_type) tries, with Python's re.match (anchored at the
// start of the name), in this order:
//   COMMUNICATION  ^nccl.*Kernel                       ncclKernel_AllReduce_..., ncclDevKernel_...
//   MEMORY         (^Memcpy)|(^Memset)|(^dma)          Kineto's "Memcpy HtoD (...)", "Memset (...)"
//   OTHER          (.*Memcpy)|(^Memset)|(.*Sync)       what matches (^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)
//                                                      and is neither of the above: "Stream Sync", ...
//   COMPUTATION    everything else
// The patterns are matched by hand: no regular expression runs per event.
//
// HTA's main branch has since widened COMMUNICATION to (^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)
// (docs/trace-format.md §3.5 quotes it); kernel_type(name) follows the released 0.5.0, the version the
// agreement checks run against.
//
// HTA's rule counts today's communication kernels outside NCCL as computation: DeepEP's
// dispatch and combine, NVSHMEM's, PyTorch's symmetric-memory all-reduce, vLLM's, SGLang's and
// TensorRT-LLM's custom all-reduce, MSCCL's and MSCCL++'s. kernel_type(name, options) counts them
// as COMMUNICATION too (kCommunicationKernelPatterns), and keeps HTA's rule under
// AnalysisOptions::hta_compat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// HTA's kernel types, with HTA's numbering.
enum class KernelType : std::uint8_t { Communication = 0, Memory = 1, Computation = 2, Other = 3 };
inline constexpr std::size_t kKernelTypeCount = 4;

/// HTA's spelling: "COMMUNICATION", "MEMORY", "COMPUTATION", "OTHER".
constexpr std::string_view to_string(KernelType type) noexcept {
  switch (type) {
    case KernelType::Communication: return "COMMUNICATION";
    case KernelType::Memory: return "MEMORY";
    case KernelType::Computation: return "COMPUTATION";
    case KernelType::Other: return "OTHER";
  }
  return "OTHER";
}

/// The type HTA 0.5.0 gives GPU work named `name` (a kernel, a copy, a fill or a sync).
constexpr KernelType kernel_type(std::string_view name) noexcept {
  using dlprof::detail::starts_with;
  constexpr std::string_view kNccl = "nccl";
  if (starts_with(name, kNccl) && name.find("Kernel", kNccl.size()) != std::string_view::npos)
    return KernelType::Communication;
  if (starts_with(name, "Memcpy") || starts_with(name, "Memset") || starts_with(name, "dma")) return KernelType::Memory;
  if (name.find("Memcpy") != std::string_view::npos || name.find("Sync") != std::string_view::npos)
    return KernelType::Other;
  return KernelType::Computation;
}

/// Substrings of communication kernels' names that HTA 0.5.0's ^nccl.*Kernel misses; each is
/// tested with a real kernel name (tests/analysis_hta_test.cpp).
inline constexpr std::string_view kCommunicationKernelPatterns[] = {
    // DeepEP's expert-parallel all-to-all (deep_ep::intranode::dispatch<...>,
    // deep_ep::internode::combine<...>; dpsk::ep:: in DeepSeek's own builds).
    "deep_ep::", "dpsk::ep::",
    // NVSHMEM's collectives and its device-initiated transfers (nvshmemi_..., nvshmem_...).
    "nvshmem",
    // PyTorch's symmetric memory (multimem_all_reduce_kernel, one_shot_all_reduce_kernel, ...),
    // TensorRT-LLM's and FlashInfer's (oneShotAllReduceKernel, twoShotAllReduceKernel,
    // allreduce_fusion_kernel...) custom all-reduce.
    "multimem_", "all_reduce_kernel", "AllReduceKernel", "allreduce_fusion",
    // vLLM's and SGLang's custom all-reduce (vllm::cross_device_reduce_1stage<...>,
    // sglang::cross_device_reduce_2stage<...>).
    "cross_device_reduce",
    // MSCCL's (mscclKernel_Sum_...) and MSCCL++'s (mscclpp::...) kernels.
    "msccl",
};

/// Whether GPU work named `name` communicates: HTA 0.5.0's rule or kCommunicationKernelPatterns.
constexpr bool is_communication_kernel(std::string_view name) noexcept {
  if (kernel_type(name) == KernelType::Communication) return true;
  for (const std::string_view pattern : kCommunicationKernelPatterns)
    if (name.find(pattern) != std::string_view::npos) return true;
  return false;
}

/// The kernel type of GPU work named `name`: HTA 0.5.0's under `options.hta_compat`; otherwise
/// HTA's with every kernel of kCommunicationKernelPatterns counted as COMMUNICATION.
constexpr KernelType kernel_type(std::string_view name, const AnalysisOptions& options) noexcept {
  const KernelType hta = kernel_type(name);
  if (options.hta_compat || hta != KernelType::Computation) return hta;
  return is_communication_kernel(name) ? KernelType::Communication : KernelType::Computation;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
