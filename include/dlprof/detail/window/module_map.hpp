// dlprof/detail/window/module_map.hpp: the process's loaded modules (the executable and its
// shared libraries) as a window with call stacks closes, so that the trace's return addresses can
// be symbolised offline: each module's path, GNU build id, load bias and executable span.
#pragma once

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The hex text of the GNU build id in a PT_NOTE segment of `size` bytes at `notes`; empty when
/// it holds none. Notes are 4-byte aligned in the 64-bit ABIs' PT_NOTE segments.
inline std::string gnu_build_id(const unsigned char* notes, std::size_t size) {
  constexpr auto align4 = [](std::size_t n) { return (n + 3) & ~std::size_t{3}; };
  std::size_t offset = 0;
  while (offset + sizeof(ElfW(Nhdr)) <= size) {
    const auto* header = reinterpret_cast<const ElfW(Nhdr)*>(notes + offset);
    const std::size_t name_at = offset + sizeof(ElfW(Nhdr));
    const std::size_t desc_at = name_at + align4(header->n_namesz);
    if (desc_at > size || header->n_descsz > size - desc_at) break;
    if (header->n_type == NT_GNU_BUILD_ID && header->n_namesz == 4 &&
        std::string_view(reinterpret_cast<const char*>(notes + name_at), 4) == std::string_view("GNU", 4)) {
      static constexpr char kHex[] = "0123456789abcdef";
      std::string hex;
      hex.reserve(2 * header->n_descsz);
      for (std::size_t i = 0; i < header->n_descsz; ++i) {
        hex.push_back(kHex[notes[desc_at + i] >> 4]);
        hex.push_back(kHex[notes[desc_at + i] & 0xF]);
      }
      return hex;
    }
    offset = desc_at + align4(header->n_descsz);
  }
  return {};
}

/// The path of the running executable, which the dynamic loader names "".
inline std::string executable_path() {
  char path[4096];
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path));
  return length > 0 && static_cast<std::size_t>(length) < sizeof(path) ? std::string(path, static_cast<std::size_t>(length))
                                                                       : std::string();
}

/// The process's modules with executable code, ordered by address.
template <class Deferred = void>
std::vector<LoadedModule> loaded_modules() {
  std::vector<LoadedModule> modules;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* argument) -> int {
        auto& found = *static_cast<std::vector<LoadedModule>*>(argument);
        LoadedModule module;
        module.base = info->dlpi_addr;
        module.start = UINT64_MAX;
        for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X) != 0) {
            module.start = std::min<std::uint64_t>(module.start, info->dlpi_addr + segment.p_vaddr);
            module.end = std::max<std::uint64_t>(module.end, info->dlpi_addr + segment.p_vaddr + segment.p_memsz);
          } else if (segment.p_type == PT_NOTE && module.build_id.empty()) {
            module.build_id = gnu_build_id(reinterpret_cast<const unsigned char*>(info->dlpi_addr + segment.p_vaddr), segment.p_memsz);
          }
        }
        if (module.start >= module.end) return 0;  // no code
        module.path = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' ? std::string(info->dlpi_name) : std::string();
        found.push_back(std::move(module));
        return 0;
      },
      &modules);
  // The executable is the one module the loader names "" (the vDSO has a name of its own).
  for (LoadedModule& module : modules)
    if (module.path.empty()) module.path = executable_path();
  std::sort(modules.begin(), modules.end(), [](const LoadedModule& a, const LoadedModule& b) { return a.start < b.start; });
  return modules;
}

}  // namespace detail
DLPROF_END_NAMESPACE
