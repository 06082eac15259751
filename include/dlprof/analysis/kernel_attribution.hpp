// dlprof/analysis/kernel_attribution.hpp: every kernel, copy and fill of a trace tied to the step,
// layer and op it ran for, with PyProf2's columns: step, layer, op, direction, input shapes and
// types, kernel, silicon time, Tensor Cores, grid, block, stream, FLOPs, bytes, achieved TFLOP/s.
//
// How each piece of GPU work is tied:
// - op: the Op whose External id it carries (Kineto and dlprof give work the External id of the
//   innermost op around its launch); failing that, the innermost Op around its launch call
//   (matched by correlation id).
// - layer: the innermost Forward range or Python frame (module ranges: `nn.Module: Conv2d_features.0`,
//   dlprof's annotate_modules; torch's module frames with with_stack) around the op, else the
//   innermost range or Python frame around it. Backward ops run outside any module range, on
//   autograd's thread: they take the layer of their forward op, found as the fwdbwd flow finds it
//   (the autograd node's forward thread and sequence number; the latest forward op with both).
// - step: the ProfilerStep#N whose span holds the launch call's start (any thread: autograd's
//   threads launch too).
// - direction: backward when the op or anything around it is in the Backward category.
// - FLOPs and bytes: those of the op (the trace's with_flops figures, else flops.hpp's estimate from
//   its shapes), or of the nearest op around it that has them, shared among that op's kernels by
//   duration (among its copies and fills where it ran no kernel: a cuBLAS call's workspace memset
//   does none of the product); so the TFLOP/s of each kernel is the op's FLOPs over the op's
//   kernel time, and the column adds up to the ops' FLOPs. Unknown where no op around it has them
//   (never 0).
// - line: with call stacks, the innermost frame of the user's code in the launching op's stack
//   (format/call_stack.hpp), the line the kernel came from.
// - CUDA graphs: work a graph replayed whose node dlprof saw captured takes the op or range that
//   captured it, and the line of that scope's stack, instead of the graph launch's; step, layer
//   and direction stay those of the launch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/op_costs.hpp"
#include "dlprof/analysis/detail/per_name.hpp"
#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/analysis/short_kernel_name.hpp"
#include "dlprof/analysis/tensor_cores.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/forward_ops.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

enum class Direction : std::uint8_t { Forward, Backward };

constexpr std::string_view to_string(Direction direction) noexcept {
  return direction == Direction::Backward ? "bwd" : "fwd";
}

/// One piece of GPU work and what it ran for.
struct AttributedKernel {
  const GpuEvent* work = nullptr;   ///< the kernel, copy or fill
  std::string_view name;
  std::int64_t step = -1;           ///< N of the ProfilerStep#N holding the launch; -1 if none
  std::string_view layer;           ///< empty when no range is around the op
  std::string_view op;              ///< empty when no op launched it
  std::string_view parent_op;       ///< the op around `op` (aten::_to_copy around aten::copy_); empty if none
  /// The line of the user's code it came from: the innermost user frame (innermost_user_frame())
  /// of its op's call stack, or of the nearest slice around the op with one, as "train.cpp(142):
  /// Block::forward(at::Tensor)"; empty without stacks.
  std::string_view line;
  /// Replayed by a CUDA graph, with `op` and `line` those of the scope that captured its node.
  bool from_capture = false;
  Direction direction = Direction::Forward;
  std::string_view input_dims;      ///< the op's record_shapes texts; empty without them
  std::string_view input_types;
  std::int64_t duration_ns = 0;     ///< silicon time
  bool tensor_cores = false;
  std::optional<std::uint64_t> flops;  ///< this work's share of the op's FLOPs
  std::optional<std::uint64_t> bytes;  ///< this work's share of the op's bytes

  /// Achieved TFLOP/s: FLOPs per ps.
  double tflops_per_second() const noexcept {
    return flops && duration_ns > 0 ? static_cast<double>(*flops) / static_cast<double>(duration_ns) / 1e3 : 0.0;
  }
};

struct KernelAttribution {
  std::vector<AttributedKernel> kernels;  ///< by start time
  /// The texts of lines that are unsymbolised frames ("train+0x1a2b"), which the trace does not
  /// hold as names: AttributedKernel::line views them, in copies of this too.
  std::shared_ptr<const std::deque<std::string>> line_texts;

  /// The first `row_limit` rows (0: all), long texts cut to `text_width`, kernels by their short
  /// names (short_kernel_name.hpp).
  std::string table(std::size_t row_limit = 0, std::size_t text_width = 40) const {
    const auto cut = [text_width](std::string_view text) {
      return text.size() > text_width ? text.substr(0, text_width) : text;
    };
    fmt::memory_buffer out;
    auto line = std::back_inserter(out);
    fmt::format_to(line, "{:>5}  {:<{}}  {:<{}}  {:<3}  {:<{}}  {:>10}  {:<2}  {:>14}  {:>14}  {:>6}  {:>10}  {:>8}  {}\n",
                   "Step", "Layer", text_width, "Op", text_width, "Dir", "Kernel", text_width, "Time", "TC", "Grid",
                   "Block", "Stream", "FLOPs", "TFLOP/s", "Input dims / types");
    const std::size_t shown = row_limit == 0 ? kernels.size() : std::min(row_limit, kernels.size());
    for (std::size_t i = 0; i < shown; ++i) {
      const AttributedKernel& kernel = kernels[i];
      const KernelDetails& launch = kernel.work->kernel;
      const bool is_kernel = kernel.work->kind == GpuEventKind::Kernel;
      fmt::format_to(line, "{:>5}  {:<{}}  {:<{}}  {:<3}  {:<{}}  {:>10}  {:<2}  {:>14}  {:>14}  {:>6}  {:>10}  {:>8.3f}  {} {}\n",
                     kernel.step < 0 ? std::string("-") : std::to_string(kernel.step), cut(kernel.layer), text_width,
                     cut(kernel.op), text_width, to_string(kernel.direction),
                     is_kernel ? dlprof::detail::shorten(short_kernel_name(kernel.name), text_width) : std::string(cut(kernel.name)),
                     text_width,
                     KeyAverages::format_duration(kernel.duration_ns), kernel.tensor_cores ? "TC" : "-",
                     is_kernel ? fmt::format("{}x{}x{}", launch.grid[0], launch.grid[1], launch.grid[2]) : std::string("-"),
                     is_kernel ? fmt::format("{}x{}x{}", launch.block[0], launch.block[1], launch.block[2]) : std::string("-"),
                     kernel.work->stream, kernel.flops ? KeyAverages::format_count(*kernel.flops) : std::string("-"),
                     kernel.tflops_per_second(), kernel.input_dims, kernel.input_types);
    }
    return fmt::to_string(out);
  }
};

/// Every kernel, copy and fill of `trace` with the step, layer and op it ran for.
inline KernelAttribution kernel_attribution(const Trace& trace) {
  constexpr std::uint32_t kNone = detail::SliceTree::kNone;
  const detail::SliceTree tree(trace);
  const auto is_op = [](const TraceEvent& event) { return event.kind == EventKind::Op; };
  const auto is_range = [](const TraceEvent& event) {
    return event.kind == EventKind::Range || event.kind == EventKind::PythonFrame;
  };
  const auto is_layer = [&](const TraceEvent& event) { return is_range(event) && event.category == Category::Forward; };
  const auto is_backward = [](const TraceEvent& event) { return event.category == Category::Backward; };
  const auto inputs_of = [&](std::uint32_t op) -> const OpInputs* {
    return op == kNone || trace.events[op].inputs == TraceEvent::kNoInputs ? nullptr
                                                                            : &trace.op_inputs[trace.events[op].inputs];
  };
  const detail::OpCosts costs(trace);
  const auto has_cost = [&](const TraceEvent& event) {
    if (event.kind != EventKind::Op) return false;
    const detail::KnownCost& cost = costs.of(event);
    return cost.flops.has_value() || cost.bytes.has_value();
  };

  // Each backward op's forward op, as the trace's fwdbwd flows pair them.
  const std::vector<std::uint32_t> forward_of = dlprof::detail::forward_op_of_each_backward_op(trace);
  const auto forward_op_of = [&](std::uint32_t node) {
    return forward_of.empty() || forward_of[node] == dlprof::detail::kNoForwardOp ? kNone : forward_of[node];
  };
  std::vector<std::uint32_t> steps;
  for (std::uint32_t i = 0; i < trace.events.size(); ++i)
    if (trace.events[i].kind == EventKind::Step) steps.push_back(i);
  std::sort(steps.begin(), steps.end(),
            [&](std::uint32_t a, std::uint32_t b) { return trace.events[a].start_ns < trace.events[b].start_ns; });
  const auto step_at = [&](std::int64_t time) -> std::int64_t {
    auto after = std::upper_bound(steps.begin(), steps.end(), time,
                                  [&](std::int64_t t, std::uint32_t step) { return t < trace.events[step].start_ns; });
    if (after == steps.begin()) return -1;
    const TraceEvent& step = trace.events[*(after - 1)];
    return step.end_ns < time ? -1 : dlprof::detail::profiler_step_number(trace.names[step.name]);
  };
  const auto layer_of = [&](std::uint32_t slice) {
    std::uint32_t layer = tree.self_or_ancestor(slice, is_layer);
    if (layer == kNone) layer = tree.self_or_ancestor(slice, is_range);
    return layer;
  };

  // The line of each call stack, found once per stack.
  auto line_texts = std::make_shared<std::deque<std::string>>();
  std::vector<std::optional<std::string_view>> line_of_stack(trace.stacks.size());
  const auto line_of_stack_at = [&](std::uint32_t stack) -> std::string_view {
    std::optional<std::string_view>& line = line_of_stack[stack];
    if (!line) {
      const StackFrame* frame = innermost_user_frame(trace, trace.stacks[stack]);
      line = frame == nullptr                      ? std::string_view()
             : frame->text != StackFrame::kNoText ? std::string_view(trace.names[frame->text])
                                                  : std::string_view(line_texts->emplace_back(frame_text(trace, *frame)));
    }
    return *line;
  };
  const auto line_of = [&](std::uint32_t slice) -> std::string_view {
    const std::uint32_t with_stack =
        tree.self_or_ancestor(slice, [](const TraceEvent& event) { return event.stack != TraceEvent::kNoStack; });
    return with_stack == kNone ? std::string_view() : line_of_stack_at(trace.events[with_stack].stack);
  };

  detail::PerName<bool> tensor_core_kernel(trace, uses_tensor_cores);
  KernelAttribution result;
  result.kernels.reserve(trace.gpu_events.size());
  std::vector<std::uint32_t> costed_op;  // per row: the op whose FLOPs it shares, or kNone
  costed_op.reserve(trace.gpu_events.size());
  // Per op: its kernels' time, and its copies' and fills'.
  std::vector<std::pair<std::int64_t, std::int64_t>> costed_op_time(trace.events.size());
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
    const ApiEvent* call = tree.call_with_correlation(work.correlation);
    const std::uint32_t linked = tree.with_external_id(work.external_id);
    const std::uint32_t around_call = call == nullptr ? kNone : tree.innermost_at(call->thread, call->start_ns);
    std::uint32_t op = linked != kNone && is_op(trace.events[linked]) ? linked : tree.self_or_ancestor(around_call, is_op);
    // Where to look for layer and direction when no op launched it: the range it is linked to.
    const std::uint32_t anchor = op != kNone ? op : linked != kNone ? linked : around_call;

    AttributedKernel row;
    row.work = &work;
    row.name = trace.names[work.name];
    row.duration_ns = work.duration_ns();
    row.tensor_cores = work.kind == GpuEventKind::Kernel && tensor_core_kernel(work.name);
    row.step = step_at(call != nullptr ? call->start_ns : anchor != kNone ? trace.events[anchor].start_ns : work.start_ns);
    row.direction = tree.self_or_ancestor(anchor, is_backward) != kNone ? Direction::Backward : Direction::Forward;
    std::uint32_t layer = layer_of(anchor);
    if (row.direction == Direction::Backward) {
      const std::uint32_t node = tree.self_or_ancestor(op, [](const TraceEvent& event) {
        return event.kind == EventKind::Op && event.sequence_number >= 0;
      });
      const std::uint32_t forward = node == kNone ? kNone : forward_op_of(node);
      if (forward != kNone) layer = layer_of(forward);
    }
    if (layer != kNone) row.layer = trace.names[trace.events[layer].name];
    if (!trace.stacks.empty()) row.line = line_of(anchor);
    if (op != kNone) {
      row.op = trace.names[trace.events[op].name];
      const std::uint32_t parent = tree.self_or_ancestor(tree.parent(op), is_op);
      if (parent != kNone) row.parent_op = trace.names[trace.events[parent].name];
    }
    if (const OpInputs* inputs = inputs_of(op)) {
      row.input_dims = trace.names[inputs->dims];
      row.input_types = trace.names[inputs->types];
    }
    if (work.captured_by < trace.names.size()) {
      row.from_capture = true;
      row.op = trace.names[work.captured_by];
      row.parent_op = row.input_dims = row.input_types = {};
      row.line = work.capture_stack < trace.stacks.size() ? line_of_stack_at(work.capture_stack) : std::string_view();
    }
    const std::uint32_t costed = tree.self_or_ancestor(op, has_cost);
    if (costed != kNone)
      (work.kind == GpuEventKind::Kernel ? costed_op_time[costed].first : costed_op_time[costed].second) += row.duration_ns;
    costed_op.push_back(costed);
    result.kernels.push_back(row);
  }
  for (std::size_t i = 0; i < result.kernels.size(); ++i) {
    if (costed_op[i] == kNone) continue;
    const detail::KnownCost& cost = costs.of(trace.events[costed_op[i]]);
    const auto [kernel_time, other_time] = costed_op_time[costed_op[i]];
    const bool is_kernel = result.kernels[i].work->kind == GpuEventKind::Kernel;
    if (kernel_time > 0 && !is_kernel) continue;  // the op's kernels carry its cost
    const std::int64_t op_time = is_kernel ? kernel_time : other_time;
    const double share = op_time > 0 ? static_cast<double>(result.kernels[i].duration_ns) / static_cast<double>(op_time) : 0.0;
    const auto part = [share](std::uint64_t whole) {
      return static_cast<std::uint64_t>(static_cast<double>(whole) * share + 0.5);
    };
    if (cost.flops) result.kernels[i].flops = part(*cost.flops);
    if (cost.bytes) result.kernels[i].bytes = part(*cost.bytes);
  }
  dlprof::detail::stable_sort_runs(result.kernels.begin(), result.kernels.end(), [](const AttributedKernel& a, const AttributedKernel& b) {
    return a.work->start_ns < b.work->start_ns;
  });
  result.line_texts = std::move(line_texts);
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
