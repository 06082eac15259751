// dlprof/report/timeline.hpp: what the report page's Trace view draws of a trace: a row per CPU
// thread, its ops, ranges, Python frames and runtime calls nested by depth, and a row per GPU
// stream, its kernels, copies and fills; each slice with the ids that link it to others (an op's
// External id to the work it launched, a runtime call's correlation id to its kernel, autograd's
// sequence number from a forward op to its backward) and the details shown when it is clicked.
//
// A browser holds a few hundred thousand slices and stays responsive: past
// TimelineOptions::max_slices the timeline keeps whole steps from the first (or the steps asked
// for) and says what it left out.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/format/json_text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// How a slice is drawn and described.
enum class SliceKind : std::uint8_t { Step, Op, Range, PythonFrame, RuntimeCall, Kernel, Copy, Fill, Annotation };

struct TimelineSlice {
  static constexpr std::uint32_t kNoDetails = UINT32_MAX;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t external_id = 0;   ///< ops and GPU work: the id linking an op to the work it launched
  std::uint32_t correlation = 0;   ///< runtime calls and GPU work: the id linking a launch to its work
  std::int64_t sequence = -1;      ///< ops: autograd's sequence number; -1 if none
  std::uint32_t name = 0;          ///< index into Timeline::texts
  /// Index into Timeline::texts of a JSON object of its details (input shapes, call site; grid,
  /// block, registers, occupancy; bytes), shared by the slices that have the same.
  std::uint32_t details = kNoDetails;
  std::uint16_t depth = 0;
  SliceKind kind = SliceKind::Range;
  bool backward = false;  ///< an op autograd ran in the backward pass (it names its forward thread)
};

struct TimelineRow {
  std::string label;  ///< "thread 4242 (python)", "GPU 0 stream 7"
  bool device = false;
  std::vector<TimelineSlice> slices;  ///< by start
};

struct TimelineStep {
  std::int64_t number = -1;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

struct TimelineOptions {
  std::size_t max_slices = 250'000;
  /// The steps to keep, by number (first and last, both included); none: from the first, as many
  /// as max_slices allows.
  std::optional<std::pair<std::int64_t, std::int64_t>> steps;
};

struct Timeline {
  std::vector<std::string> texts;  ///< names and details, each once
  std::vector<TimelineRow> rows;   ///< CPU threads, then GPU streams by device and stream
  std::vector<TimelineStep> steps; ///< every step of the trace, kept or not
  std::size_t slices_in_trace = 0;
  std::size_t slices_kept = 0;
  /// What was left out and how to see it; empty when the timeline holds every slice.
  std::string left_out;

  bool empty() const noexcept { return rows.empty(); }
};

namespace detail {

/// Texts by their first index.
class TextIndex {
 public:
  explicit TextIndex(std::vector<std::string>& texts) : texts_(texts) {}
  std::uint32_t index(std::string_view text) {
    const auto [found, added] = index_.try_emplace(std::string(text), static_cast<std::uint32_t>(texts_.size()));
    if (added) texts_.emplace_back(text);
    return found->second;
  }

 private:
  std::vector<std::string>& texts_;
  std::unordered_map<std::string, std::uint32_t> index_;
};

/// The details of a slice as one JSON object, members given as (key, value) with the value
/// already JSON text.
inline std::string details_object(const std::vector<std::pair<std::string_view, std::string>>& members) {
  std::string out = "{";
  for (const auto& [key, value] : members) {
    if (out.size() > 1) out += ", ";
    append_json_string(out, key);
    out += ": ";
    out += value;
  }
  return out + "}";
}

inline std::string json_string_text(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

/// Depths of slices sorted by start (the longer first among equal starts): how many earlier
/// slices are still open at each one's start.
inline void nest(std::vector<TimelineSlice>& slices) {
  std::vector<std::int64_t> open_ends;
  for (TimelineSlice& slice : slices) {
    while (!open_ends.empty() && open_ends.back() <= slice.start_ns) open_ends.pop_back();
    slice.depth = static_cast<std::uint16_t>(std::min<std::size_t>(open_ends.size(), UINT16_MAX));
    open_ends.push_back(slice.end_ns);
  }
}

inline void sort_by_start(std::vector<TimelineSlice>& slices) {
  std::stable_sort(slices.begin(), slices.end(), [](const TimelineSlice& a, const TimelineSlice& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
}

inline std::string_view copy_kind_text(std::uint8_t kind) {
  switch (kind) {
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "HtoA";
    case 4: return "AtoH";
    case 5: return "AtoA";
    case 6: return "AtoD";
    case 7: return "DtoA";
    case 8: return "DtoD";
    case 9: return "HtoH";
    case 10: return "PtoP";
    default: return "unknown";
  }
}

/// The time span to keep: all of it where it fits, else whole steps (those asked for, or from the
/// first) until max_slices, else the first max_slices slices by start.
inline std::pair<std::int64_t, std::int64_t> kept_span(std::vector<std::int64_t> starts, const std::vector<TimelineStep>& steps,
                                                       const TimelineOptions& options, std::string& left_out) {
  std::sort(starts.begin(), starts.end());
  const auto slices_between = [&](std::int64_t from, std::int64_t to) {
    return static_cast<std::size_t>(std::lower_bound(starts.begin(), starts.end(), to) -
                                    std::lower_bound(starts.begin(), starts.end(), from));
  };
  constexpr std::pair<std::int64_t, std::int64_t> kAll = {INT64_MIN, INT64_MAX};
  std::optional<std::pair<std::size_t, std::size_t>> chosen;  // first and last step kept, by index
  if (options.steps) {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].number < options.steps->first || steps[i].number > options.steps->second) continue;
      if (!chosen) chosen = std::pair<std::size_t, std::size_t>{i, i};
      chosen->second = i;
    }
    if (!chosen) {
      left_out = fmt::format("No step numbered {} to {} in this trace: the timeline holds what fits from the start. ",
                             options.steps->first, options.steps->second);
    } else {
      // The steps asked for, as many of them as fit.
      std::size_t last = chosen->first;
      while (last < chosen->second &&
             slices_between(steps[chosen->first].start_ns, steps[last + 1].end_ns) <= options.max_slices)
        ++last;
      chosen->second = last;
    }
  }
  if (!chosen && starts.size() <= options.max_slices) return kAll;
  if (!chosen && !steps.empty()) {
    std::size_t last = 0;
    while (last + 1 < steps.size() && slices_between(steps.front().start_ns, steps[last + 1].end_ns) <= options.max_slices) ++last;
    chosen = std::pair<std::size_t, std::size_t>{0, last};
  }
  std::pair<std::int64_t, std::int64_t> span = kAll;
  if (chosen) span = {steps[chosen->first].start_ns, steps[chosen->second].end_ns};
  // One step over the limit, or no steps: the first max_slices slices of the span.
  const auto first = std::lower_bound(starts.begin(), starts.end(), span.first);
  const auto end = std::lower_bound(starts.begin(), starts.end(), span.second);
  if (static_cast<std::size_t>(end - first) > options.max_slices) span = {*first, *(first + static_cast<std::ptrdiff_t>(options.max_slices))};
  if (span == kAll) return span;
  const auto step_at = [&](std::int64_t time) {
    const auto it = std::find_if(steps.begin(), steps.end(), [&](const TimelineStep& step) { return step.end_ns > time; });
    return it == steps.end() ? std::int64_t{-1} : it->number;
  };
  if (chosen && span.second == steps[chosen->second].end_ns)
    left_out += fmt::format("The timeline holds steps {} to {} of {} to {}", steps[chosen->first].number, steps[chosen->second].number,
                            steps.front().number, steps.back().number);
  else
    left_out += fmt::format("The timeline holds the first {} slices of its span (up to step {})", options.max_slices,
                            step_at(span.second));
  return span;
}

}  // namespace detail

/// The timeline of `trace`, its times as they are in the trace.
inline Timeline timeline(const Trace& trace, const TimelineOptions& options = {}) {
  Timeline result;
  detail::TextIndex texts(result.texts);
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Step)
      result.steps.push_back({dlprof::detail::profiler_step_number(trace.name_of(event)), event.start_ns, event.end_ns});
  std::sort(result.steps.begin(), result.steps.end(),
            [](const TimelineStep& a, const TimelineStep& b) { return a.start_ns < b.start_ns; });

  const auto drawn_gpu = [](const GpuEvent& work) { return work.kind != GpuEventKind::Sync; };
  std::vector<std::int64_t> starts;
  for (const TraceEvent& event : trace.events)
    if (is_slice(event.kind)) starts.push_back(event.start_ns);
  for (const ApiEvent& call : trace.api_events) starts.push_back(call.start_ns);
  for (const GpuEvent& work : trace.gpu_events)
    if (drawn_gpu(work)) starts.push_back(work.start_ns);
  result.slices_in_trace = starts.size();
  const auto [keep_from, keep_to] = detail::kept_span(std::move(starts), result.steps, options, result.left_out);
  // What overlaps the span; an instant at its start too.
  const auto kept = [from = keep_from, to = keep_to](std::int64_t start, std::int64_t end) {
    return start < to && (end > from || start >= from);
  };

  // CPU rows: each thread's slices and runtime calls.
  std::vector<TimelineRow> cpu(trace.threads.size());
  std::unordered_map<std::uint64_t, std::uint32_t> details_of;  // by inputs << 32 | stack
  for (const TraceEvent& event : trace.events) {
    if (!is_slice(event.kind) || event.thread >= cpu.size() || !kept(event.start_ns, event.end_ns)) continue;
    TimelineSlice slice;
    slice.start_ns = event.start_ns;
    slice.end_ns = event.end_ns;
    slice.name = texts.index(trace.name_of(event));
    slice.external_id = event.external_id;
    slice.sequence = event.sequence_number;
    slice.backward = event.forward_thread_id != 0;
    slice.kind = event.kind == EventKind::Step ? SliceKind::Step
                 : event.kind == EventKind::Op ? SliceKind::Op
                 : event.kind == EventKind::PythonFrame ? SliceKind::PythonFrame
                                                        : SliceKind::Range;
    if (event.inputs != TraceEvent::kNoInputs || event.stack != TraceEvent::kNoStack) {
      // Ops called with the same inputs from the same place share one text.
      const auto [found, added] = details_of.try_emplace((std::uint64_t{event.inputs} << 32) | event.stack, 0);
      if (added) {
        std::vector<std::pair<std::string_view, std::string>> members;
        members.emplace_back("category", detail::json_string_text(to_string(event.category)));
        if (event.inputs < trace.op_inputs.size()) {
          const OpInputs& inputs = trace.op_inputs[event.inputs];
          if (inputs.dims < trace.names.size()) members.emplace_back("input dims", detail::json_string_text(trace.names[inputs.dims]));
          if (inputs.types < trace.names.size()) members.emplace_back("input types", detail::json_string_text(trace.names[inputs.types]));
          if (inputs.flops != 0) members.emplace_back("FLOPs", std::to_string(inputs.flops));
        }
        if (event.stack < trace.stacks.size())
          if (const StackFrame* frame = innermost_user_frame(trace, trace.stacks[event.stack]))
            members.emplace_back("call site", detail::json_string_text(frame_text(trace, *frame)));
        found->second = texts.index(detail::details_object(members));
      }
      slice.details = found->second;
    }
    cpu[event.thread].slices.push_back(slice);
  }
  // A runtime call or the GPU work it launched: both carry the ids that link them.
  const auto launch_slice = [&](const auto& launch) {
    TimelineSlice slice;
    slice.start_ns = launch.start_ns;
    slice.end_ns = launch.end_ns;
    slice.name = texts.index(trace.names[launch.name]);
    slice.correlation = launch.correlation;
    slice.external_id = launch.external_id;
    return slice;
  };
  for (const ApiEvent& call : trace.api_events) {
    if (call.thread >= cpu.size() || !kept(call.start_ns, call.end_ns)) continue;
    TimelineSlice slice = launch_slice(call);
    slice.kind = SliceKind::RuntimeCall;
    cpu[call.thread].slices.push_back(slice);
  }
  const auto add_row = [&result](TimelineRow&& row) {
    detail::sort_by_start(row.slices);
    detail::nest(row.slices);
    result.slices_kept += row.slices.size();
    result.rows.push_back(std::move(row));
  };
  // The thread that calls step() first, then the others in the trace's order.
  std::vector<std::size_t> thread_order(cpu.size());
  for (std::size_t t = 0; t < cpu.size(); ++t) thread_order[t] = t;
  std::stable_partition(thread_order.begin(), thread_order.end(), [&](std::size_t t) {
    return std::any_of(cpu[t].slices.begin(), cpu[t].slices.end(), [](const TimelineSlice& slice) { return slice.kind == SliceKind::Step; });
  });
  for (const std::size_t t : thread_order) {
    TimelineRow& row = cpu[t];
    if (row.slices.empty()) continue;
    const ThreadInfo& thread = trace.threads[t];
    row.label = thread.name.empty() ? fmt::format("thread {}", thread.os_tid) : fmt::format("thread {} ({})", thread.os_tid, thread.name);
    add_row(std::move(row));
  }

  // GPU rows: each device's streams.
  std::vector<std::pair<std::pair<std::uint32_t, std::int64_t>, TimelineRow>> streams;
  for (const GpuEvent& work : trace.gpu_events) {
    if (!drawn_gpu(work) || !kept(work.start_ns, work.end_ns)) continue;
    const std::pair<std::uint32_t, std::int64_t> key = {work.device, work.stream};
    auto row = std::find_if(streams.begin(), streams.end(), [&](const auto& entry) { return entry.first == key; });
    if (row == streams.end()) {
      row = streams.insert(streams.end(), {key, TimelineRow{}});
      row->second.label = fmt::format("GPU {} stream {}", work.device, work.stream);
      row->second.device = true;
    }
    TimelineSlice slice = launch_slice(work);
    std::vector<std::pair<std::string_view, std::string>> members;
    switch (work.kind) {
      case GpuEventKind::Kernel: {
        slice.kind = SliceKind::Kernel;
        const KernelDetails& kernel = work.kernel;
        members.emplace_back("grid", fmt::format("[{}, {}, {}]", kernel.grid[0], kernel.grid[1], kernel.grid[2]));
        members.emplace_back("block", fmt::format("[{}, {}, {}]", kernel.block[0], kernel.block[1], kernel.block[2]));
        if (kernel.registers_per_thread != 0) members.emplace_back("registers per thread", std::to_string(kernel.registers_per_thread));
        if (kernel.static_shared_memory + kernel.dynamic_shared_memory != 0)
          members.emplace_back("shared memory", std::to_string(kernel.static_shared_memory + kernel.dynamic_shared_memory));
        if (kernel.est_achieved_occupancy_percent >= 0)
          members.emplace_back("est. achieved occupancy %", std::to_string(kernel.est_achieved_occupancy_percent));
        break;
      }
      case GpuEventKind::Memcpy:
      case GpuEventKind::MemcpyPeer:
        slice.kind = SliceKind::Copy;
        members.emplace_back("bytes", std::to_string(work.copy.bytes));
        members.emplace_back("kind", detail::json_string_text(detail::copy_kind_text(work.copy.copy_kind)));
        break;
      case GpuEventKind::Memset:
        slice.kind = SliceKind::Fill;
        members.emplace_back("bytes", std::to_string(work.copy.bytes));
        break;
      case GpuEventKind::Annotation:
      case GpuEventKind::Sync: slice.kind = SliceKind::Annotation; break;
    }
    if (!members.empty()) slice.details = texts.index(detail::details_object(members));
    row->second.slices.push_back(slice);
  }
  std::sort(streams.begin(), streams.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& stream : streams) add_row(std::move(stream.second));
  if (!result.left_out.empty())
    result.left_out += fmt::format(": {} of the trace's {} slices. Choose other steps with dlprof-report --steps FIRST-LAST, or "
                                   "open the trace in Perfetto (ui.perfetto.dev), which holds it all.",
                                   result.slices_kept, result.slices_in_trace);
  return result;
}

DLPROF_END_NAMESPACE
