// dlprof/analysis/call_stacks.hpp: a trace's call stacks (with_stack, or torch.profiler's `Call
// stack`) as flame graphs and as the line of the user's code each op came from.
//
// folded_stacks() writes the folded format that Brendan Gregg's flamegraph.pl, speedscope and
// Perfetto read: one line per distinct stack, its frames from the outermost to the innermost,
// then the op or range itself as the leaf, separated by ';', a space and the value, as
// torch.profiler's export_stacks writes them (which leaves out the leaf). The value is each
// event's self time on the CPU (its time less its child slices'), or the GPU time of the work it
// launched itself, in microseconds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// What a flame graph's widths are.
enum class StackMetric : std::uint8_t {
  SelfCpuTime,  ///< each op's or range's time less its child slices'
  SelfGpuTime,  ///< the time of the GPU work (kernels, copies, fills) each op or range launched itself
};

constexpr std::string_view to_string(StackMetric metric) noexcept {
  return metric == StackMetric::SelfGpuTime ? "self_gpu_time" : "self_cpu_time";
}

/// The text of one frame of `trace`: its symbolised text, else its unsymbolised spelling.
inline std::string frame_text(const Trace& trace, const StackFrame& frame) {
  if (frame.text != StackFrame::kNoText) return trace.names[frame.text];
  return dlprof::detail::unsymbolised_frame_text(trace.modules, frame.address);
}

/// The folded stacks of `trace`'s ops and ranges that have a stack, `metric` summed per distinct
/// line and the lines in text order; lines of zero are left out. A ';' in a frame's text becomes
/// ',' so that it separates no frames.
inline std::string folded_stacks(const Trace& trace, StackMetric metric) {
  const detail::SliceTree tree(trace);
  std::vector<std::int64_t> value(trace.events.size(), 0);
  if (metric == StackMetric::SelfCpuTime) {
    for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
      if (!is_slice(trace.events[i].kind)) continue;
      value[i] += trace.events[i].duration_ns();
      if (const std::uint32_t parent = tree.parent(i); parent != detail::SliceTree::kNone)
        value[parent] -= trace.events[i].duration_ns();
    }
  } else {
    for (const GpuEvent& work : trace.gpu_events) {
      if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
      std::uint32_t launcher = tree.with_external_id(work.external_id);
      if (launcher == detail::SliceTree::kNone)
        if (const ApiEvent* call = tree.call_with_correlation(work.correlation))
          launcher = tree.innermost_at(call->thread, call->start_ns);
      if (launcher != detail::SliceTree::kNone) value[launcher] += work.end_ns - work.start_ns;
    }
  }
  const auto clean = [](std::string text) {
    std::replace(text.begin(), text.end(), kineto::arg::kCallStackSeparator, ',');
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
  };
  std::vector<std::string> stack_lines(trace.stacks.size());  // each stack's frames, outermost first
  std::map<std::string, std::int64_t> lines;
  for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.stack == TraceEvent::kNoStack || value[i] <= 0) continue;
    std::string& frames = stack_lines[event.stack];
    if (frames.empty()) {
      const CallStack& stack = trace.stacks[event.stack];
      for (std::uint32_t f = stack.depth; f-- > 0;) {
        frames += clean(frame_text(trace, trace.stack_frames[stack.first + f]));
        frames.push_back(kineto::arg::kCallStackSeparator);
      }
    }
    lines[frames + clean(std::string(trace.name_of(event)))] += value[i];
  }
  std::string text;
  for (const auto& [line, ns] : lines) fmt::format_to(std::back_inserter(text), "{} {}.{:03}\n", line, ns / 1000, ns % 1000);
  return text;
}

/// Whether a frame's text names code the user did not write: dlprof's, LibTorch's (ATen, c10,
/// torch), CUDA's libraries', the C++ standard library's or the C library's. A symbolised frame
/// ("file(line): function") is judged by its file and the namespace its function is in, an
/// unsymbolised one ("libfoo.so+0x1a2b", or "function (libfoo.so+0x1a2b)") by its module too.
inline bool is_library_frame(std::string_view text) {
  static constexpr std::string_view kLibraryModules[] = {
      "libtorch", "libc10", "libcuda", "libcudart", "libcublas", "libcudnn", "libnccl", "libnvrtc", "libcupti",
      "libstdc++", "libc.so", "libm.so", "libgcc_s", "libpthread", "libunwind", "ld-linux", "libgomp"};
  static constexpr std::string_view kLibraryFiles[] = {"/dlprof/", "/ATen/", "/c10/", "/torch/csrc/", "/include/c++/",
                                                       "/bits/", "/glibc", "/sysdeps/"};
  static constexpr std::string_view kLibraryNamespaces[] = {"dlprof::", "at::", "c10::", "torch::", "std::",
                                                            "__gnu_cxx::", "caffe2::", "__libc_", "__GI_", "_start",
                                                            "start_thread", "clone"};
  const auto contains_any = [](std::string_view in, const auto& marks) {
    for (const std::string_view mark : marks)
      if (in.find(mark) != std::string_view::npos) return true;
    return false;
  };
  const std::size_t plus = text.rfind("+0x");
  if (plus != std::string_view::npos) {  // the module of an unsymbolised frame
    const std::size_t open = text.rfind('(', plus);
    const std::string_view module = text.substr(open == std::string_view::npos ? 0 : open + 1, plus);
    if (contains_any(module, kLibraryModules)) return true;
  }
  std::string_view function = text;
  if (const std::size_t file_end = text.find("): "); file_end != std::string_view::npos) {
    if (contains_any(text.substr(0, file_end), kLibraryFiles)) return true;
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

/// The innermost frame of `stack` that is the user's code (not is_library_frame()), as its
/// text; nothing where every frame is a library's.
inline std::optional<std::string> innermost_user_frame(const Trace& trace, const CallStack& stack) {
  for (std::uint32_t f = 0; f < stack.depth; ++f) {
    std::string text = frame_text(trace, trace.stack_frames[stack.first + f]);
    if (!is_library_frame(text)) return text;
  }
  return std::nullopt;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
