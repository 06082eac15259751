// dlprof/format/call_stack.hpp: how a call stack's frames are spelled in a trace's `Call stack`
// arg (vocabulary.hpp's kCallStack): a symbolised frame as its text, an unsymbolised one as its
// module's file name and its ELF address ("libtorch_cpu.so+0x1a2b3c"), or as its address alone
// where no module of the trace holds it ("0x7f0012345678"). The writer spells them, the reader
// reads the address of an unsymbolised frame back from the modules the trace carries.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The module of `modules` (ordered by start, as Trace::modules is) whose code holds `address`;
/// null when none does.
inline const LoadedModule* module_holding(const std::vector<LoadedModule>& modules, std::uint64_t address) noexcept {
  const auto after = std::upper_bound(modules.begin(), modules.end(), address,
                                      [](std::uint64_t value, const LoadedModule& module) { return value < module.start; });
  if (after == modules.begin()) return nullptr;
  const LoadedModule& module = *(after - 1);
  return address < module.end ? &module : nullptr;
}

/// The last component of a module's path.
inline std::string_view module_file_name(std::string_view path) noexcept {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

/// The text of an unsymbolised frame at `address`.
inline std::string unsymbolised_frame_text(const std::vector<LoadedModule>& modules, std::uint64_t address) {
  if (const LoadedModule* module = module_holding(modules, address))
    return fmt::format("{}+{:#x}", module_file_name(module->path), address - module->base);
  return fmt::format("{:#x}", address);
}

/// The address in the recording process of a frame whose text is an unsymbolised frame's, where
/// `modules` tells it; nothing for any other text (a symbolised frame, a Python frame).
inline std::optional<std::uint64_t> unsymbolised_frame_address(const std::vector<LoadedModule>& modules,
                                                                std::string_view text) noexcept {
  const auto hex = [](std::string_view digits) -> std::optional<std::uint64_t> {
    std::uint64_t value = 0;
    if (digits.empty()) return std::nullopt;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
    if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return value;
  };
  const std::size_t plus = text.rfind("+0x");
  if (plus == std::string_view::npos) {
    if (text.substr(0, 2) != "0x") return std::nullopt;
    return hex(text.substr(2));
  }
  const std::optional<std::uint64_t> offset = hex(text.substr(plus + 3));
  if (!offset) return std::nullopt;
  const std::string_view file = text.substr(0, plus);
  for (const LoadedModule& module : modules)
    if (module_file_name(module.path) == file) return module.base + *offset;
  return std::nullopt;
}

}  // namespace detail
DLPROF_END_NAMESPACE
