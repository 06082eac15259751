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
// (TRACE_FORMAT.md §3.5 quotes it); this header follows the released 0.5.0, the version the
// agreement checks run against.
#pragma once

#include <cstdint>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// HTA's kernel types, with HTA's numbering.
enum class KernelType : std::uint8_t { Communication = 0, Memory = 1, Computation = 2, Other = 3 };

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

}  // namespace analysis
DLPROF_END_NAMESPACE
