// dlprof/analysis/call_stacks.hpp: a trace's call stacks (with_stack, or torch.profiler's `Call
// stack` and Python frames) as flame graphs and as the line of the user's code each op came from.
//
// folded_stacks() writes the folded format that Brendan Gregg's flamegraph.pl, speedscope and
// Perfetto read: one line per distinct stack, its frames from the outermost to the innermost,
// then the op or range itself as the leaf, separated by ';', a space and the value, as
// torch.profiler's export_stacks writes them (which leaves out the leaf). The value is each
// event's self time on the CPU (its time less its child slices'), or the GPU time of the work it
// launched itself, in microseconds; or the bytes it allocated itself.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
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
  /// The bytes each op or range allocated while it was the innermost slice on its thread
  /// (profile_memory's allocations, CPU and device); releases are not subtracted.
  SelfBytesAllocated,
};

constexpr std::string_view to_string(StackMetric metric) noexcept {
  switch (metric) {
    case StackMetric::SelfGpuTime: return "self_gpu_time";
    case StackMetric::SelfBytesAllocated: return "self_bytes_allocated";
    case StackMetric::SelfCpuTime: break;
  }
  return "self_cpu_time";
}

/// Whether `metric` measures time (in ns in analyses, µs in folded stacks) rather than bytes.
constexpr bool is_time(StackMetric metric) noexcept { return metric != StackMetric::SelfBytesAllocated; }

namespace detail {

/// The slice that launched `work`: the one whose External id it carries, else the innermost
/// slice around its launch call; SliceTree::kNone where neither is in the trace.
inline std::uint32_t launcher_of(const SliceTree& tree, const GpuEvent& work) {
  const std::uint32_t linked = tree.with_external_id(work.external_id);
  if (linked != SliceTree::kNone) return linked;
  const ApiEvent* call = tree.call_with_correlation(work.correlation);
  return call == nullptr ? SliceTree::kNone : tree.innermost_at(call->thread, call->start_ns);
}

/// Whether `work` is a graph's replay of a node whose capturing scope and stack the trace names:
/// its time is that scope's, not its launcher's.
inline bool has_capture_stack(const Trace& trace, const GpuEvent& work) noexcept {
  return work.captured_by < trace.names.size() && work.capture_stack < trace.stacks.size();
}

/// Each slice's `metric` by event index (0 for other events): its self CPU time; the GPU time of
/// the work it launched itself (launcher_of()), but for work with a capture stack; or the bytes
/// allocated on its thread while it was the innermost slice there.
inline std::vector<std::int64_t> value_of_each_slice(const Trace& trace, const SliceTree& tree, StackMetric metric) {
  std::vector<std::int64_t> value(trace.events.size(), 0);
  if (metric == StackMetric::SelfBytesAllocated) {
    for (const MemoryEvent& memory : trace.memory_events) {
      if (memory.bytes <= 0) continue;
      if (const std::uint32_t slice = tree.innermost_at(memory.thread, memory.time_ns); slice != SliceTree::kNone)
        value[slice] += memory.bytes;
    }
    return value;
  }
  if (metric == StackMetric::SelfCpuTime) {
    for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
      if (!is_slice(trace.events[i].kind)) continue;
      value[i] += trace.events[i].duration_ns();
      if (const std::uint32_t parent = tree.parent(i); parent != SliceTree::kNone) value[parent] -= trace.events[i].duration_ns();
    }
    return value;
  }
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation || has_capture_stack(trace, work)) continue;
    if (const std::uint32_t launcher = launcher_of(tree, work); launcher != SliceTree::kNone)
      value[launcher] += work.end_ns - work.start_ns;
  }
  return value;
}

}  // namespace detail

namespace detail {

/// Each distinct stack of `trace`'s ops and ranges with its op or range as the leaf, its frames
/// outermost first and separated by ';', with `metric` summed over its events, in text order;
/// stacks of zero are left out. A ';' in a frame's text becomes ',' so that it separates no frames.
/// By GPU time, work a graph replayed counts on the stack and scope that captured its node.
inline std::map<std::string, std::int64_t> folded_paths(const Trace& trace, StackMetric metric) {
  const SliceTree tree(trace);
  const std::vector<std::int64_t> value = detail::value_of_each_slice(trace, tree, metric);
  const auto clean = [](std::string text) {
    std::replace(text.begin(), text.end(), kineto::arg::kCallStackSeparator, ',');
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
  };
  std::vector<std::string> stack_lines(trace.stacks.size());  // each stack's frames, outermost first
  const auto frames_of = [&](std::uint32_t index) -> const std::string& {
    std::string& frames = stack_lines[index];
    if (frames.empty()) {
      const CallStack& stack = trace.stacks[index];
      for (std::uint32_t f = stack.depth; f-- > 0;) {
        frames += clean(frame_text(trace, trace.stack_frames[stack.first + f]));
        frames.push_back(kineto::arg::kCallStackSeparator);
      }
    }
    return frames;
  };
  std::map<std::string, std::int64_t> lines;
  for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.stack == TraceEvent::kNoStack || value[i] <= 0) continue;
    lines[frames_of(event.stack) + clean(std::string(trace.name_of(event)))] += value[i];
  }
  if (metric == StackMetric::SelfGpuTime)
    for (const GpuEvent& work : trace.gpu_events)
      if (has_capture_stack(trace, work) && work.kind != GpuEventKind::Sync && work.kind != GpuEventKind::Annotation)
        lines[frames_of(work.capture_stack) + clean(trace.names[work.captured_by])] += work.end_ns - work.start_ns;
  return lines;
}

}  // namespace detail

/// The folded stacks of `trace`'s ops and ranges that have a stack (see the header comment), one
/// line per distinct stack in text order; times in µs, bytes as they are.
inline std::string folded_stacks(const Trace& trace, StackMetric metric) {
  std::string text;
  for (const auto& [line, value] : detail::folded_paths(trace, metric)) {
    if (is_time(metric))
      fmt::format_to(std::back_inserter(text), "{} {}.{:03}\n", line, value / 1000, value % 1000);
    else
      fmt::format_to(std::back_inserter(text), "{} {}\n", line, value);
  }
  return text;
}

/// One box of a flame graph. Its place and width are in the metric's unit: ns, or bytes.
struct FlameFrame {
  std::string text;          ///< the frame, or the op or range at the top of a stack
  std::int64_t start = 0;    ///< from the graph's left edge
  std::int64_t value = 0;    ///< its width: the metric of everything in it and above it
  std::uint32_t depth = 0;   ///< 0: the outermost frames
  bool op = false;           ///< an op or range, where its stack ends (not a frame of code)
};

/// A flame graph of a trace's call stacks, as flamegraph.pl draws the folded stacks: each row
/// one frame deeper, siblings in text order, each box as wide as the metric below it.
struct FlameGraph {
  StackMetric metric = StackMetric::SelfCpuTime;
  std::int64_t total = 0;  ///< the metric of the whole graph: ns, or bytes
  std::vector<FlameFrame> frames;  ///< each before the frames above it
  std::size_t frames_left_out = 0;  ///< too narrow to draw: under the share asked for
  std::uint32_t depth = 0;          ///< rows

  bool empty() const noexcept { return frames.empty(); }
};

/// The flame graph of `trace`'s call stacks by `metric`, without the boxes narrower than
/// `min_share` of the whole (flamegraph.pl's --minwidth) and then, widest first, at most
/// `max_frames` boxes, so that a page stays light whatever the trace.
inline FlameGraph flame_graph(const Trace& trace, StackMetric metric, double min_share = 0.001, std::size_t max_frames = 4000) {
  FlameGraph graph;
  graph.metric = metric;
  const std::map<std::string, std::int64_t> paths = detail::folded_paths(trace, metric);
  for (const auto& [path, value] : paths) graph.total += value;
  if (graph.total <= 0) return graph;
  // Paths in text order: those sharing a prefix are neighbours, and each frame of the prefix one box.
  std::vector<FlameFrame> all;
  std::vector<std::size_t> open;  // the boxes of the previous path, outermost first
  std::vector<std::string_view> previous;
  std::vector<std::string_view> frames;
  std::int64_t x = 0;
  for (const auto& [path, value] : paths) {
    frames.clear();
    for (std::size_t begin = 0;;) {
      const std::size_t end = path.find(kineto::arg::kCallStackSeparator, begin);
      frames.push_back(std::string_view(path).substr(begin, end == std::string::npos ? std::string::npos : end - begin));
      if (end == std::string::npos) break;
      begin = end + 1;
    }
    std::size_t shared = 0;
    // The op at a path's end is a box of its own even where a frame of another path has its text.
    while (shared + 1 < frames.size() && shared + 1 < previous.size() && frames[shared] == previous[shared]) ++shared;
    for (std::size_t depth = shared; depth < open.size(); ++depth) all[open[depth]].value = x - all[open[depth]].start;
    open.resize(shared);
    for (std::size_t depth = shared; depth < frames.size(); ++depth) {
      open.push_back(all.size());
      all.push_back(FlameFrame{std::string(frames[depth]), x, 0, static_cast<std::uint32_t>(depth), depth + 1 == frames.size()});
    }
    x += value;
    previous.swap(frames);
  }
  for (const std::size_t box : open) all[box].value = x - all[box].start;
  // A box is never wider than the one below it, so a width threshold keeps every kept box's base.
  auto threshold = static_cast<std::int64_t>(min_share * static_cast<double>(graph.total));
  if (all.size() > max_frames) {
    std::vector<std::int64_t> widths;
    widths.reserve(all.size());
    for (const FlameFrame& frame : all) widths.push_back(frame.value);
    std::nth_element(widths.begin(), widths.begin() + static_cast<std::ptrdiff_t>(max_frames - 1), widths.end(), std::greater<>());
    threshold = std::max(threshold, widths[max_frames - 1]);
  }
  for (FlameFrame& frame : all) {
    if (frame.value < threshold || graph.frames.size() == max_frames) {
      ++graph.frames_left_out;
      continue;
    }
    graph.depth = std::max(graph.depth, frame.depth + 1);
    graph.frames.push_back(std::move(frame));
  }
  return graph;
}

/// The ops of one line of the user's code: the innermost frame of their stacks that is not a
/// library's.
struct CodeLine {
  std::string line;              ///< "train.cpp(142): Block::forward(at::Tensor)", or "libx.so+0x1a2b" unsymbolised
  std::int64_t self_cpu_ns = 0;  ///< the self CPU time of its ops
  std::int64_t gpu_ns = 0;       ///< the GPU time of the work its ops launched, graph replays of what they captured included
  std::uint64_t ops = 0;         ///< op calls
  std::string top_op;            ///< its op with the most self CPU time
  std::string top_kernel;        ///< the kernel (or copy, fill) with the most time its ops launched
};

/// The ops with a stack by the line of the user's code they came from.
struct CodeLines {
  std::vector<CodeLine> by_cpu;  ///< by self CPU time, at most the rows asked for
  std::vector<CodeLine> by_gpu;  ///< those with GPU time, by it, at most the rows asked for
  std::size_t lines = 0;         ///< distinct lines
  std::uint64_t ops_with_stacks = 0;
  std::uint64_t ops_in_libraries = 0;  ///< whose every frame is a library's: in no line
  std::int64_t self_cpu_ns = 0;        ///< all ops' with a stack
  std::int64_t gpu_ns = 0;

  bool empty() const noexcept { return ops_with_stacks == 0; }
};

/// `trace`'s ops grouped by the innermost frame of the user's code in their stacks (the kernel
/// table's and top kernels' "line"), the `rows` first of each ranking.
inline CodeLines code_lines(const Trace& trace, std::size_t rows) {
  CodeLines result;
  const bool has_stacks = std::any_of(trace.events.begin(), trace.events.end(), [](const TraceEvent& event) {
    return event.kind == EventKind::Op && event.stack != TraceEvent::kNoStack;
  });
  if (!has_stacks) return result;
  const detail::SliceTree tree(trace);
  const std::vector<std::int64_t> cpu = detail::value_of_each_slice(trace, tree, StackMetric::SelfCpuTime);
  // Each kernel's time by the slice that launched it, to name the top kernel of each line; work
  // a graph replayed by the stack that captured its node.
  std::vector<std::pair<std::uint32_t, const GpuEvent*>> launched;
  std::vector<const GpuEvent*> captured;
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
    if (detail::has_capture_stack(trace, work))
      captured.push_back(&work);
    else if (const std::uint32_t launcher = detail::launcher_of(tree, work); launcher != detail::SliceTree::kNone)
      launched.emplace_back(launcher, &work);
  }
  struct Tally {
    CodeLine line;
    std::map<std::string_view, std::int64_t> op_cpu;
    std::map<std::string_view, std::int64_t> kernel_gpu;
  };
  std::map<std::string, Tally> by_line;
  std::vector<std::optional<std::string>> line_of_stack(trace.stacks.size());
  std::vector<bool> line_known(trace.stacks.size(), false);
  const auto line_of = [&](std::uint32_t stack) -> const std::optional<std::string>& {
    if (!line_known[stack]) {
      if (const StackFrame* frame = innermost_user_frame(trace, trace.stacks[stack])) line_of_stack[stack] = frame_text(trace, *frame);
      line_known[stack] = true;
    }
    return line_of_stack[stack];
  };
  std::vector<Tally*> tally_of_event(trace.events.size(), nullptr);
  for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind != EventKind::Op || event.stack == TraceEvent::kNoStack) continue;
    ++result.ops_with_stacks;
    result.self_cpu_ns += cpu[i];
    const std::optional<std::string>& line = line_of(event.stack);
    if (!line) {
      ++result.ops_in_libraries;
      continue;
    }
    Tally& tally = by_line[*line];
    tally.line.line = *line;
    tally.line.self_cpu_ns += cpu[i];
    ++tally.line.ops;
    tally.op_cpu[trace.name_of(event)] += cpu[i];
    tally_of_event[i] = &tally;
  }
  for (const auto& [launcher, work] : launched) {
    Tally* tally = tally_of_event[launcher];
    const std::int64_t ns = work->end_ns - work->start_ns;
    if (trace.events[launcher].stack != TraceEvent::kNoStack && trace.events[launcher].kind == EventKind::Op) result.gpu_ns += ns;
    if (tally == nullptr) continue;
    tally->line.gpu_ns += ns;
    tally->kernel_gpu[trace.names[work->name]] += ns;
  }
  for (const GpuEvent* work : captured) {
    const std::int64_t ns = work->end_ns - work->start_ns;
    result.gpu_ns += ns;
    const std::optional<std::string>& line = line_of(work->capture_stack);
    if (!line) continue;
    Tally& tally = by_line[*line];
    tally.line.line = *line;
    tally.line.gpu_ns += ns;
    tally.kernel_gpu[trace.names[work->name]] += ns;
    tally.op_cpu.try_emplace(trace.names[work->captured_by], 0);  // its op, where the trace has none of its own
  }
  const auto top_of = [](const std::map<std::string_view, std::int64_t>& totals) {
    const auto top = std::max_element(totals.begin(), totals.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    return top == totals.end() ? std::string() : std::string(top->first);
  };
  std::vector<CodeLine> lines;
  for (auto& [text, tally] : by_line) {
    tally.line.top_op = top_of(tally.op_cpu);
    tally.line.top_kernel = top_of(tally.kernel_gpu);
    lines.push_back(std::move(tally.line));
  }
  result.lines = lines.size();
  const auto first_rows = [rows](std::vector<CodeLine> ranked, auto key) {
    std::stable_sort(ranked.begin(), ranked.end(), [&](const CodeLine& a, const CodeLine& b) { return key(a) > key(b); });
    ranked.erase(std::remove_if(ranked.begin(), ranked.end(), [&](const CodeLine& line) { return key(line) <= 0; }), ranked.end());
    if (ranked.size() > rows) ranked.resize(rows);
    return ranked;
  };
  result.by_cpu = first_rows(lines, [](const CodeLine& line) { return line.self_cpu_ns; });
  result.by_gpu = first_rows(std::move(lines), [](const CodeLine& line) { return line.gpu_ns; });
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
