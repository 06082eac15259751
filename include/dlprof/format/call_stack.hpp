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

#include <fmt/core.h>

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

/// The text of one frame of `trace`: its symbolised text, else its unsymbolised spelling.
inline std::string frame_text(const Trace& trace, const StackFrame& frame) {
  if (frame.text != StackFrame::kNoText) return trace.names[frame.text];
  return detail::unsymbolised_frame_text(trace.modules, frame.address);
}

/// Whether a frame's text names code the user did not write: dlprof's, LibTorch's (ATen, c10,
/// torch), CUDA's libraries', the C++ standard library's or the C library's; of Python frames
/// (torch.profiler's, "file.py(line): function"), torch's own files, installed packages, the
/// standard library's threads and context managers, built-ins ("<built-in method ...>") and
/// module frames ("nn.Module: Linear_0"). A symbolised C++ frame ("file(line): function") is
/// judged by its file and the namespace its function is in, an unsymbolised one
/// ("libfoo.so+0x1a2b", or "function (libfoo.so+0x1a2b)") by its module too.
inline bool is_library_frame(std::string_view text) noexcept {
  static constexpr std::string_view kLibraryModules[] = {
      "libtorch", "libc10", "libcuda", "libcudart", "libcublas", "libcudnn", "libnccl", "libnvrtc", "libcupti",
      "libstdc++", "libc.so", "libm.so", "libgcc_s", "libpthread", "libunwind", "ld-linux", "libgomp"};
  static constexpr std::string_view kLibraryFiles[] = {"/include/dlprof/", "/ATen/", "/c10/", "/torch/csrc/",
                                                       "/include/torch/", "/include/c++/", "/bits/", "/glibc",
                                                       "/sysdeps/", "site-packages/", "dist-packages/", "/lib/python"};
  // Python files as torch.profiler names them: relative to the entry of sys.path holding them.
  static constexpr std::string_view kLibraryPythonFiles[] = {"torch/", "threading.py", "contextlib.py", "runpy.py",
                                                             "functools.py", "concurrent/", "asyncio/",
                                                             "multiprocessing/", "importlib/"};
  static constexpr std::string_view kLibraryNamespaces[] = {"dlprof::", "at::", "c10::", "torch::", "std::",
                                                            "__gnu_cxx::", "caffe2::", "__libc_", "__GI_", "_start",
                                                            "start_thread", "clone"};
  const auto contains_any = [](std::string_view in, const auto& marks) {
    for (const std::string_view mark : marks)
      if (in.find(mark) != std::string_view::npos) return true;
    return false;
  };
  if (text.empty() || text.front() == '<' || text.substr(0, 10) == "nn.Module:") return true;
  const std::size_t plus = text.rfind("+0x");
  if (plus != std::string_view::npos) {  // the module of an unsymbolised frame
    const std::size_t open = text.rfind('(', plus);
    const std::string_view module = text.substr(open == std::string_view::npos ? 0 : open + 1, plus);
    if (contains_any(module, kLibraryModules)) return true;
  }
  std::string_view function = text;
  if (const std::size_t file_end = text.find("): "); file_end != std::string_view::npos) {
    std::string_view file = text.substr(0, file_end);
    file = file.substr(0, file.rfind('('));
    if (contains_any(file, kLibraryFiles)) return true;
    for (const std::string_view python : kLibraryPythonFiles)
      if (file.substr(0, python.size()) == python) return true;
    function = text.substr(file_end + 3);
  }
  // A demangled template function starts with its return type: the name is after the last
  // space outside angle brackets before its parameters.
  const std::size_t parameters = function.find('(');
  const std::string_view head = function.substr(0, parameters);
  std::size_t name_start = 0;
  int depth = 0;
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '<') ++depth;
    if (head[i] == '>') --depth;
    if (head[i] == ' ' && depth == 0) name_start = i + 1;
  }
  const std::string_view name = head.substr(name_start);
  for (const std::string_view space : kLibraryNamespaces)
    if (name.substr(0, space.size()) == space) return true;
  return false;
}

/// The innermost frame of `stack` that is the user's code (not is_library_frame()): the line an
/// op or range came from. Null where every frame is a library's.
inline const StackFrame* innermost_user_frame(const Trace& trace, const CallStack& stack) {
  for (std::uint32_t f = 0; f < stack.depth; ++f) {
    const StackFrame& frame = trace.stack_frames[stack.first + f];
    if (!is_library_frame(frame_text(trace, frame))) return &frame;
  }
  return nullptr;
}

DLPROF_END_NAMESPACE
