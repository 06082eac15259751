// dlprof/key_averages.hpp: the per-name summary of a trace, like torch's
// prof.key_averages().table(): calls, total, self, average, min and max time, and the share of
// the recording window, for every range name; with GPU activity, also the device time of the
// work each range launched itself (torch's "Self CUDA" of an op) and of the work launched inside it
// as well (torch's "CUDA total"); with with_flops, the FLOPs of ops
// (torch's "Total MFLOPs"); with profile_memory, the memory each name's ranges allocated less
// what they released, on the CPU and on the device, total and self (torch's "CPU Mem", "Self CPU
// Mem", "CUDA Mem" and "Self CUDA Mem"), and the peak memory of every device. With with_stack,
// group_by_stack(n) splits each name by the n innermost frames of the user's code in its stacks,
// as torch's key_averages(group_by_stack_n=n). Printed with fmt:
//
//   fmt::print("{}", prof.key_averages().sort_by(dlprof::SortBy::SelfTime).table(10));
//   fmt::print("{}", prof.key_averages().group_by_stack(3).sort_by(dlprof::SortBy::SelfTime).table(10));
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// Bytes allocated less bytes released (profile_memory's `[memory]` events), on the CPU and on the
/// GPU (CUDA or HIP), in some ranges and in them alone (self: less the ranges nested directly
/// inside them).
struct MemoryUsage {
  std::int64_t cpu_bytes = 0;
  std::int64_t self_cpu_bytes = 0;
  std::int64_t device_bytes = 0;
  std::int64_t self_device_bytes = 0;

  MemoryUsage& operator+=(const MemoryUsage& other) noexcept {
    cpu_bytes += other.cpu_bytes;
    self_cpu_bytes += other.self_cpu_bytes;
    device_bytes += other.device_bytes;
    self_device_bytes += other.self_device_bytes;
    return *this;
  }
};

/// Aggregated time of every range sharing one name.
struct KeyAverage {
  std::string name;
  Category category = Category::User;
  std::uint64_t calls = 0;
  std::int64_t total_ns = 0;  ///< sum of durations
  std::int64_t self_ns = 0;   ///< total minus the time of ranges nested directly inside
  std::int64_t min_ns = 0;
  std::int64_t max_ns = 0;
  /// Device time of the kernels, copies and fills launched directly inside these ranges (not in
  /// ranges nested in them): the work whose External id is theirs, and the work whose External
  /// id is no range's (absent, or ids of CPU and GPU that disagree) launched by a call made
  /// directly inside them, as TensorBoard's plugin ties it by time.
  std::int64_t gpu_ns = 0;
  /// gpu_ns plus the device time of the work launched by the ranges nested in these ones, at any
  /// depth: everything the ranges caused on the GPU.
  std::int64_t gpu_total_ns = 0;
  /// Estimated floating-point operations of these ops (with_flops; flops.hpp), where they are not
  /// part of an enclosing op's (the aten::convolution inside an aten::conv2d adds nothing), so
  /// that the column adds up to KeyAverages::total_flops().
  std::uint64_t flops = 0;
  /// torch's memory columns: the allocations and releases whose time lies inside these ranges
  /// (their ends included), on any thread, as torch's key_averages() counts them.
  MemoryUsage memory;
  /// The same, of the allocations and releases made on the ranges' own thread: another thread's
  /// (a data loader's, autograd's, a collective's) that happen to fall inside them are left out.
  MemoryUsage memory_on_thread;
  /// group_by_stack(n): the innermost n frames of the user's code (is_library_frame() left out)
  /// that these ranges' stacks share, the innermost first; empty when not grouped by stack, or
  /// for ranges without a stack or whose every frame is a library's.
  std::vector<std::string> stack;

  std::int64_t average_ns() const noexcept { return calls == 0 ? 0 : total_ns / static_cast<std::int64_t>(calls); }
};

enum class SortBy {
  TotalTime,
  SelfTime,
  Calls,
  AverageTime,
  MaxTime,
  GpuTime,
  Flops,
  Name,
  GpuTotalTime,
  CpuMemory,         ///< KeyAverage::memory.cpu_bytes
  SelfCpuMemory,
  DeviceMemory,      ///< KeyAverage::memory.device_bytes
  SelfDeviceMemory,
};

/// The most memory a device held during the window, from its `[memory]` events (profile_memory).
struct PeakMemory {
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;
  std::int64_t allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
};

namespace detail {

/// Allocations and releases by time, with running sums of their bytes (CPU and GPU apart): the
/// bytes of those inside any interval in two binary searches.
class MemoryTimeline {
 public:
  void add(std::int64_t time_ns, std::int64_t bytes, bool gpu) { events_.push_back({time_ns, bytes, gpu}); }

  /// Sorts what was added; call once, before between().
  void finish() {
    std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) { return a.time_ns < b.time_ns; });
    times_.reserve(events_.size());
    cpu_sums_.assign(1, 0);
    device_sums_.assign(1, 0);
    for (const Event& event : events_) {
      times_.push_back(event.time_ns);
      cpu_sums_.push_back(cpu_sums_.back() + (event.gpu ? 0 : event.bytes));
      device_sums_.push_back(device_sums_.back() + (event.gpu ? event.bytes : 0));
    }
    events_.clear();
    events_.shrink_to_fit();
  }

  /// The CPU and GPU bytes of the events at times in [start_ns, end_ns].
  std::pair<std::int64_t, std::int64_t> between(std::int64_t start_ns, std::int64_t end_ns) const {
    const auto first = std::lower_bound(times_.begin(), times_.end(), start_ns) - times_.begin();
    const auto last = std::upper_bound(times_.begin(), times_.end(), end_ns) - times_.begin();
    if (last <= first) return {0, 0};
    return {cpu_sums_[static_cast<std::size_t>(last)] - cpu_sums_[static_cast<std::size_t>(first)],
            device_sums_[static_cast<std::size_t>(last)] - device_sums_[static_cast<std::size_t>(first)]};
  }

 private:
  struct Event {
    std::int64_t time_ns;
    std::int64_t bytes;
    bool gpu;
  };
  std::vector<Event> events_;
  std::vector<std::int64_t> times_;
  std::vector<std::int64_t> cpu_sums_, device_sums_;  // [i]: the bytes of the first i events
};

/// What one op or range cost, measured as it closes: torch's figures of one event.
struct MeasuredSlice {
  std::size_t event = 0;  ///< index into Trace::events
  std::int64_t self_ns = 0;  ///< its duration less that of the ranges nested directly inside it
  /// Device time of the work it launched itself (KeyAverage::gpu_ns), and of the work launched
  /// inside it at any depth as well (KeyAverage::gpu_total_ns).
  std::int64_t gpu_self_ns = 0;
  std::int64_t gpu_total_ns = 0;
  std::uint64_t flops = 0;  ///< its FLOPs where no enclosing op has FLOPs, else 0
  MemoryUsage memory;            ///< the process's allocations inside it
  MemoryUsage memory_on_thread;  ///< its own thread's
};

/// What for_each_measured_slice() saw of the trace as a whole.
struct MeasuredTrace {
  bool has_memory = false;         ///< allocations or releases, on the CPU or any device
  bool has_device_memory = false;  ///< on a GPU
  bool hip = false;                ///< the GPU's are HIP's (an AMD trace)
  std::uint64_t total_flops = 0;   ///< each op counted once
};

/// Calls `on_slice(const MeasuredSlice&)` for every op and range of `trace`, each as it closes,
/// once its children are known: self time subtracts, per thread, the duration of each range's
/// direct children (ranges nest strictly on a thread). What the pass holds is the ranges open on
/// one thread, not a value per event. key_averages and the per-step samples of a run
/// (analysis/step_samples.hpp) sum what it measures by their own keys.
template <class OnSlice>
MeasuredTrace for_each_measured_slice(const Trace& trace, OnSlice&& on_slice) {
  MeasuredTrace measured;
  // GPU work counts for the range whose External id it carries (the first, should two share
  // one), and for every range around that one.
  struct GpuWork {
    std::uint64_t external_id;
    std::int64_t ns;
    bool claimed;
  };
  std::vector<GpuWork> gpu_work;
  for (const GpuEvent& work : trace.gpu_events)
    if (work.external_id != 0 && work.kind != GpuEventKind::Annotation && work.kind != GpuEventKind::Sync)
      gpu_work.push_back({work.external_id, work.duration_ns(), false});
  std::sort(gpu_work.begin(), gpu_work.end(), [](const GpuWork& a, const GpuWork& b) { return a.external_id < b.external_id; });
  std::size_t distinct = 0;
  for (const GpuWork& work : gpu_work) {
    if (distinct != 0 && gpu_work[distinct - 1].external_id == work.external_id) gpu_work[distinct - 1].ns += work.ns;
    else gpu_work[distinct++] = work;
  }
  gpu_work.resize(distinct);
  const auto claim_gpu_ns = [&gpu_work](std::uint64_t external_id) -> std::int64_t {
    if (external_id == 0) return 0;
    const auto found = std::lower_bound(gpu_work.begin(), gpu_work.end(), external_id,
                                        [](const GpuWork& work, std::uint64_t id) { return work.external_id < id; });
    if (found == gpu_work.end() || found->external_id != external_id || found->claimed) return 0;
    found->claimed = true;
    return found->ns;
  };
  // Work whose External id is no slice's counts for the innermost slice around the call that
  // launched it (by correlation id): the calls of each thread are walked beside its slices.
  std::vector<std::uint64_t> slice_ids;
  for (const TraceEvent& event : trace.events)
    if (is_slice(event.kind) && event.external_id != 0) slice_ids.push_back(event.external_id);
  std::sort(slice_ids.begin(), slice_ids.end());
  std::vector<std::pair<std::uint32_t, std::int64_t>> unlinked;  // (correlation, device time)
  for (const GpuEvent& work : trace.gpu_events)
    if (work.kind != GpuEventKind::Annotation && work.kind != GpuEventKind::Sync && work.correlation != 0 &&
        !std::binary_search(slice_ids.begin(), slice_ids.end(), work.external_id))
      unlinked.emplace_back(work.correlation, work.duration_ns());
  std::sort(unlinked.begin(), unlinked.end());
  const auto unlinked_ns = [&unlinked](std::uint32_t correlation) -> std::int64_t {
    std::int64_t ns = 0;
    for (auto it = std::lower_bound(unlinked.begin(), unlinked.end(), std::make_pair(correlation, INT64_MIN));
         it != unlinked.end() && it->first == correlation; ++it)
      ns += it->second;
    return ns;
  };
  std::size_t next_call = 0;  // into trace.api_events, by thread then start

  // Memory inside each range: of the whole process (torch's columns) and of its own thread.
  detail::MemoryTimeline process_memory;
  std::vector<detail::MemoryTimeline> thread_memory(trace.threads.size());
  for (const MemoryEvent& memory : trace.memory_events) {
    const bool gpu = is_gpu_memory(memory.device_type);
    measured.has_memory = true;
    measured.has_device_memory = measured.has_device_memory || gpu;
    measured.hip = measured.hip || memory.device_type == MemoryDeviceType::HIP;
    process_memory.add(memory.time_ns, memory.bytes, gpu);
    if (memory.thread < thread_memory.size()) thread_memory[memory.thread].add(memory.time_ns, memory.bytes, gpu);
  }
  process_memory.finish();
  for (detail::MemoryTimeline& timeline : thread_memory) timeline.finish();
  struct MemoryTotals {
    std::int64_t cpu = 0, device = 0, thread_cpu = 0, thread_device = 0;
    void add(const MemoryTotals& other) noexcept {
      cpu += other.cpu;
      device += other.device;
      thread_cpu += other.thread_cpu;
      thread_device += other.thread_device;
    }
  };

  struct OpenRange {
    std::size_t event;
    std::int64_t child_ns;
    std::int64_t gpu_self_ns;
    std::int64_t gpu_total_ns;
    std::uint64_t counted_flops;
    bool has_flops;
    MemoryTotals memory;           // inside the range
    MemoryTotals children_memory;  // inside the ranges nested directly in it
  };
  std::vector<OpenRange> open;  // the enclosing ranges on the current thread, innermost last
  std::size_t open_with_flops = 0;  // how many of them have FLOPs (an op inside one is part of it)
  std::uint32_t thread = UINT32_MAX;
  // A closed range's GPU total is complete (its children closed before it): its parent gets it.
  const auto close_innermost = [&] {
    const OpenRange closed = open.back();
    open.pop_back();
    open_with_flops -= closed.has_flops;
    if (!open.empty()) {
      open.back().gpu_total_ns += closed.gpu_total_ns;
      open.back().children_memory.add(closed.memory);
    }
    MeasuredSlice slice;
    slice.event = closed.event;
    slice.self_ns = trace.events[closed.event].duration_ns() - closed.child_ns;
    slice.gpu_self_ns = closed.gpu_self_ns;
    slice.gpu_total_ns = closed.gpu_total_ns;
    slice.flops = closed.counted_flops;
    slice.memory = MemoryUsage{closed.memory.cpu, closed.memory.cpu - closed.children_memory.cpu, closed.memory.device,
                               closed.memory.device - closed.children_memory.device};
    slice.memory_on_thread = MemoryUsage{closed.memory.thread_cpu, closed.memory.thread_cpu - closed.children_memory.thread_cpu,
                                         closed.memory.thread_device,
                                         closed.memory.thread_device - closed.children_memory.thread_device};
    on_slice(static_cast<const MeasuredSlice&>(slice));
  };
  // The calls of `thread` that start before `until`, their unlinked work given to the innermost
  // open slice around them.
  const auto walk_calls = [&](std::int64_t until) {
    for (; next_call < trace.api_events.size(); ++next_call) {
      const ApiEvent& call = trace.api_events[next_call];
      if (call.thread > thread || (call.thread == thread && call.start_ns >= until)) break;
      if (call.thread < thread || unlinked.empty()) continue;
      while (!open.empty() && trace.events[open.back().event].end_ns < call.start_ns) close_innermost();
      if (open.empty()) continue;
      const std::int64_t ns = unlinked_ns(call.correlation);
      open.back().gpu_self_ns += ns;
      open.back().gpu_total_ns += ns;
    }
  };
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (!is_slice(event.kind)) continue;
    if (event.thread != thread) {
      if (thread != UINT32_MAX) walk_calls(INT64_MAX);  // the last thread's calls after its slices
      while (!open.empty()) close_innermost();
      thread = event.thread;
    }
    walk_calls(event.start_ns);
    // Sorted by start, enclosing first, and nesting strictly: the innermost open range that
    // ends no earlier than this one encloses it.
    while (!open.empty() && trace.events[open.back().event].end_ns < event.end_ns) close_innermost();
    if (!open.empty()) open.back().child_ns += event.duration_ns();
    const std::uint64_t flops = event.inputs == TraceEvent::kNoInputs ? 0 : trace.op_inputs[event.inputs].flops;
    const std::uint64_t counted_flops = open_with_flops == 0 ? flops : 0;  // aten::linear, not also its aten::addmm
    measured.total_flops += counted_flops;
    open_with_flops += flops != 0;
    const std::int64_t gpu_self_ns = claim_gpu_ns(event.external_id);
    MemoryTotals memory;
    if (measured.has_memory) {
      std::tie(memory.cpu, memory.device) = process_memory.between(event.start_ns, event.end_ns);
      if (event.thread < thread_memory.size())
        std::tie(memory.thread_cpu, memory.thread_device) = thread_memory[event.thread].between(event.start_ns, event.end_ns);
    }
    open.push_back({i, 0, gpu_self_ns, gpu_self_ns, counted_flops, flops != 0, memory, {}});
  }
  walk_calls(INT64_MAX);
  while (!open.empty()) close_innermost();
  return measured;
}

}  // namespace detail

/// The summary itself: KeyAverages is BasicKeyAverages<>, a template so that its code compiles
/// only in files that use it (profiler.hpp includes this header for Profiler::key_averages()).
template <class Deferred = void>
class BasicKeyAverages {
 public:
  BasicKeyAverages() = default;

  /// Aggregates the Range, Step and Op events of `trace`, as detail::for_each_measured_slice()
  /// measures them.
  explicit BasicKeyAverages(const Trace& trace)
      : window_ns_(trace.window_ns()), dropped_events_(trace.dropped_events), gpu_(trace.gpu) {
    // Rows in the order their names and stacks first appear, which is their order among equals.
    std::unordered_map<std::uint64_t, std::uint32_t> row_of_key;  // by name and stack: name << 32 | stack
    std::vector<std::uint32_t> row_of_event(trace.events.size(), 0);
    for (std::size_t i = 0; i < trace.events.size(); ++i) {
      const TraceEvent& event = trace.events[i];
      if (!is_slice(event.kind)) continue;
      const auto [found, first] =
          row_of_key.try_emplace((std::uint64_t{event.name} << 32) | event.stack, static_cast<std::uint32_t>(rows_by_stack_.size()));
      row_of_event[i] = found->second;
      if (!first) continue;
      KeyAverage& added = rows_by_stack_.emplace_back();
      added.name = trace.names[event.name];
      added.category = event.category;
      added.min_ns = INT64_MAX;
      stack_of_row_.push_back(event.stack);
    }
    const detail::MeasuredTrace measured = detail::for_each_measured_slice(trace, [&](const detail::MeasuredSlice& slice) {
      const std::int64_t duration = trace.events[slice.event].duration_ns();
      KeyAverage& row = rows_by_stack_[row_of_event[slice.event]];
      ++row.calls;
      row.total_ns += duration;
      row.self_ns += slice.self_ns;
      row.min_ns = std::min(row.min_ns, duration);
      row.max_ns = std::max(row.max_ns, duration);
      row.flops += slice.flops;
      row.gpu_ns += slice.gpu_self_ns;
      row.gpu_total_ns += slice.gpu_total_ns;
      row.memory += slice.memory;
      row.memory_on_thread += slice.memory_on_thread;
    });
    has_memory_ = measured.has_memory;
    has_device_memory_ = measured.has_device_memory;
    hip_ = measured.hip;
    total_flops_ = measured.total_flops;
    for (const MemoryEvent& memory : trace.memory_events) {
      auto peak = std::find_if(peak_memory_.begin(), peak_memory_.end(), [&](const PeakMemory& p) {
        return p.device_type == memory.device_type && p.device == memory.device;
      });
      if (peak == peak_memory_.end()) peak = peak_memory_.insert(peak_memory_.end(), PeakMemory{memory.device_type, memory.device, 0, 0});
      peak->allocated_bytes = std::max(peak->allocated_bytes, memory.total_allocated);
      peak->reserved_bytes = std::max(peak->reserved_bytes, memory.total_reserved);
    }
    user_frames_.resize(trace.stacks.size());
    std::vector<bool> seen(trace.stacks.size(), false);
    for (const std::uint32_t stack : stack_of_row_) {
      if (stack == TraceEvent::kNoStack || seen[stack]) continue;
      seen[stack] = true;
      const CallStack& frames = trace.stacks[stack];
      for (std::uint32_t f = 0; f < frames.depth; ++f) {
        std::string text = frame_text(trace, trace.stack_frames[frames.first + f]);
        if (!is_library_frame(text)) user_frames_[stack].push_back(std::move(text));
      }
    }
    group_by_stack(0);
  }

  /// Splits every name's row by the innermost `frames` frames of the user's code in its ranges'
  /// stacks (KeyAverage::stack), as torch's key_averages(group_by_stack_n); 0 joins them again,
  /// one row per name. Frames are as the trace spells them: symbolise its stacks first
  /// (dlprof::symbolize_stacks, or a Profiler in a program that links dlprof::symbolize) for
  /// functions and lines. The rows keep the order sort_by() last asked for.
  BasicKeyAverages& group_by_stack(std::size_t frames) {
    frames_per_group_ = frames;
    rows_.clear();
    std::unordered_map<std::string, std::size_t> row_of_group;
    for (std::size_t i = 0; i < rows_by_stack_.size(); ++i) {
      const KeyAverage& part = rows_by_stack_[i];
      std::vector<std::string> stack;
      if (frames != 0 && stack_of_row_[i] != TraceEvent::kNoStack) {
        const std::vector<std::string>& user = user_frames_[stack_of_row_[i]];
        stack.assign(user.begin(), user.begin() + static_cast<std::ptrdiff_t>(std::min(frames, user.size())));
      }
      std::string group = part.name;
      for (const std::string& frame : stack) (group += '\n') += frame;
      const auto [found, first] = row_of_group.try_emplace(std::move(group), rows_.size());
      if (first) {
        KeyAverage& row = rows_.emplace_back(part);
        row.stack = std::move(stack);
        continue;
      }
      KeyAverage& row = rows_[found->second];
      row.calls += part.calls;
      row.total_ns += part.total_ns;
      row.self_ns += part.self_ns;
      row.min_ns = std::min(row.min_ns, part.min_ns);
      row.max_ns = std::max(row.max_ns, part.max_ns);
      row.gpu_ns += part.gpu_ns;
      row.gpu_total_ns += part.gpu_total_ns;
      row.flops += part.flops;
      row.memory += part.memory;
      row.memory_on_thread += part.memory_on_thread;
    }
    return sort_by(sort_key_);
  }

  BasicKeyAverages& sort_by(SortBy key) {
    sort_key_ = key;
    const auto by = [key](const KeyAverage& a, const KeyAverage& b) {
      switch (key) {
        case SortBy::TotalTime: return a.total_ns > b.total_ns;
        case SortBy::SelfTime: return a.self_ns > b.self_ns;
        case SortBy::Calls: return a.calls > b.calls;
        case SortBy::AverageTime: return a.average_ns() > b.average_ns();
        case SortBy::MaxTime: return a.max_ns > b.max_ns;
        case SortBy::GpuTime: return a.gpu_ns > b.gpu_ns;
        case SortBy::GpuTotalTime: return a.gpu_total_ns > b.gpu_total_ns;
        case SortBy::Flops: return a.flops > b.flops;
        case SortBy::Name: return a.name < b.name;
        case SortBy::CpuMemory: return a.memory.cpu_bytes > b.memory.cpu_bytes;
        case SortBy::SelfCpuMemory: return a.memory.self_cpu_bytes > b.memory.self_cpu_bytes;
        case SortBy::DeviceMemory: return a.memory.device_bytes > b.memory.device_bytes;
        case SortBy::SelfDeviceMemory: return a.memory.self_device_bytes > b.memory.self_device_bytes;
      }
      return false;
    };
    std::stable_sort(rows_.begin(), rows_.end(), by);
    return *this;
  }

  const std::vector<KeyAverage>& rows() const noexcept { return rows_; }
  std::int64_t window_ns() const noexcept { return window_ns_; }
  std::uint64_t dropped_events() const noexcept { return dropped_events_; }
  /// How GPU activity was collected; `enabled` is false for a CPU-only trace.
  const GpuCollectionStats& gpu() const noexcept { return gpu_; }
  /// FLOPs of the window's ops, each op counted once: an op inside another op with FLOPs (the
  /// aten::addmm of an aten::linear) is part of it.
  std::uint64_t total_flops() const noexcept { return total_flops_; }
  /// Per device, in the order first seen; empty without profile_memory.
  const std::vector<PeakMemory>& peak_memory() const noexcept { return peak_memory_; }
  /// Whether the trace has allocations or releases (profile_memory), on the CPU or any device,
  /// and on a GPU.
  bool has_memory() const noexcept { return has_memory_; }
  bool has_device_memory() const noexcept { return has_device_memory_; }
  /// What the GPU memory columns are called: "HIP" where the trace's GPU memory is HIP's (an AMD
  /// trace), else "CUDA", as torch names them.
  std::string_view device_memory_name() const noexcept { return hip_ ? "HIP" : "CUDA"; }

  /// The first row named `name` in the current order, or nullptr.
  const KeyAverage* find(std::string_view name) const noexcept {
    for (const KeyAverage& row : rows_)
      if (row.name == name) return &row;
    return nullptr;
  }

  /// A fixed-width text table of the first `row_limit` rows (0: all). "GPU total" and "GPU" (self)
  /// columns appear when the trace recorded GPU activity, a FLOPs column when ops have FLOPs, and
  /// torch's memory columns when it recorded allocations ("CPU Mem", "Self CPU Mem", and "CUDA
  /// Mem", "Self CUDA Mem" (HIP's on an AMD trace) where a GPU's are among them).
  /// Grouped by stack, each row's frames follow it, one a line.
  std::string table(std::size_t row_limit = 0) const {
    const std::size_t shown = row_limit == 0 ? rows_.size() : std::min(row_limit, rows_.size());
    const bool gpu = gpu_.enabled;
    const bool flops = total_flops_ != 0;
    // Names as terminal_text(): control characters in them never reach the terminal or break a row.
    std::vector<std::string> names(shown);
    std::size_t name_width = 4;
    for (std::size_t i = 0; i < shown; ++i) {
      names[i] = detail::terminal_text(rows_[i].name);
      if (names[i].size() > 60) {
        std::size_t cut = 57;
        while (cut > 0 && (static_cast<unsigned char>(names[i][cut]) & 0xC0u) == 0x80u) --cut;  // not inside a character
        names[i] = names[i].substr(0, cut) + "...";
      }
      name_width = std::max(name_width, names[i].size());
    }
    // fmt::format runs libfmt's compiled formatter; fmt::format_to into a buffer would compile
    // all of fmt's formatting into the file that prints the table.
    std::string out;
    out += fmt::format("{:<{}}  {:>13}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>8}", "Name", name_width,
                       "Category", "Calls", "Total", "Self", "Avg", "Min", "Max", "% window");
    if (gpu) out += fmt::format("  {:>10}  {:>10}", "GPU total", "GPU");
    if (flops) out += fmt::format("  {:>10}", "FLOPs");
    const std::string device_mem = fmt::format("{} Mem", device_memory_name());
    if (has_memory_) out += fmt::format("  {:>11}  {:>13}", "CPU Mem", "Self CPU Mem");
    if (has_device_memory_) out += fmt::format("  {:>11}  {:>13}", device_mem, "Self " + device_mem);
    out += '\n';
    const std::size_t rule = name_width + 13 + 8 + 10 * 5 + 8 + 2 * 8 + (gpu ? 24 : 0) + (flops ? 12 : 0) +
                             (has_memory_ ? 28 : 0) + (has_device_memory_ ? 28 : 0);
    out += fmt::format("{:-<{}}\n", "", rule);
    for (std::size_t i = 0; i < shown; ++i) {
      const KeyAverage& row = rows_[i];
      const std::string& name = names[i];
      const double share = window_ns_ > 0 ? 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(window_ns_) : 0.0;
      out += fmt::format("{:<{}}  {:>13}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7.2f}%", name, name_width,
                         to_string(row.category), row.calls, format_duration(row.total_ns), format_duration(row.self_ns),
                         format_duration(row.average_ns()), format_duration(row.min_ns), format_duration(row.max_ns), share);
      if (gpu) out += fmt::format("  {:>10}  {:>10}", format_duration(row.gpu_total_ns), format_duration(row.gpu_ns));
      if (flops) out += fmt::format("  {:>10}", row.flops == 0 ? std::string("--") : format_count(row.flops));
      if (has_memory_)
        out += fmt::format("  {:>11}  {:>13}", format_bytes(row.memory.cpu_bytes), format_bytes(row.memory.self_cpu_bytes));
      if (has_device_memory_)
        out += fmt::format("  {:>11}  {:>13}", format_bytes(row.memory.device_bytes), format_bytes(row.memory.self_device_bytes));
      out += '\n';
      for (const std::string& frame : row.stack) {
        std::string text = detail::terminal_text(frame);
        if (text.size() > 160) {
          std::size_t cut = 157;
          while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;
          text = text.substr(0, cut) + "...";
        }
        out += fmt::format("    {}\n", text);
      }
    }
    out += fmt::format("{:-<{}}\n", "", rule);
    out += fmt::format("Window: {}  ({} {}", format_duration(window_ns_), rows_.size(),
                       frames_per_group_ == 0 ? "names" : "names and stacks");
    if (shown < rows_.size()) out += fmt::format(", {} shown", shown);
    out += fmt::format(")  Dropped events: {}\n", dropped_events_);
    if (gpu)
      out += fmt::format("GPU records: {}  dropped: {} (by CUPTI: {})  unknown kinds: {}  late: {}\n", gpu_.records,
                         gpu_.dropped_records, gpu_.cupti_dropped_records, gpu_.unknown_records, gpu_.late_records);
    if (flops) {
      const double seconds = static_cast<double>(window_ns_) / 1e9;
      out += fmt::format("FLOPs: {} in the window ({}FLOP/s)\n", format_count(total_flops_),
                         seconds > 0 ? format_count(static_cast<std::uint64_t>(static_cast<double>(total_flops_) / seconds)) : "0 ");
    }
    if (!peak_memory_.empty()) {
      out += "Peak memory:";
      for (const PeakMemory& peak : peak_memory_) {
        if (peak.device_type == MemoryDeviceType::CPU) {
          out += fmt::format("  CPU {} allocated", format_bytes(peak.allocated_bytes));
        } else {
          out += fmt::format("  {}:{} {} allocated, {} reserved", peak.device_type == MemoryDeviceType::HIP ? "HIP" : "CUDA",
                             peak.device, format_bytes(peak.allocated_bytes), format_bytes(peak.reserved_bytes));
        }
      }
      out += '\n';
    }
    return out;
  }

  /// "1.234G", "56.700M", "999": three decimals in the largest SI unit below the count.
  static std::string format_count(std::uint64_t count) {
    const double value = static_cast<double>(count);
    if (count >= 1'000'000'000'000ull) return fmt::format("{:.3f}T", value / 1e12);
    if (count >= 1'000'000'000ull) return fmt::format("{:.3f}G", value / 1e9);
    if (count >= 1'000'000ull) return fmt::format("{:.3f}M", value / 1e6);
    if (count >= 1'000ull) return fmt::format("{:.3f}K", value / 1e3);
    return fmt::format("{}", count);
  }

  /// "12.50 MiB", "-4.00 KiB": binary units, as torch's memory columns; negative where more was
  /// released than allocated.
  static std::string format_bytes(std::int64_t bytes) {
    const double value = static_cast<double>(bytes);
    const std::int64_t magnitude = bytes < 0 ? -bytes : bytes;
    if (magnitude >= (std::int64_t{1} << 50)) return fmt::format("{:.2f} PiB", value / static_cast<double>(std::int64_t{1} << 50));
    if (magnitude >= (std::int64_t{1} << 40)) return fmt::format("{:.2f} TiB", value / static_cast<double>(std::int64_t{1} << 40));
    if (magnitude >= (std::int64_t{1} << 30)) return fmt::format("{:.2f} GiB", value / (1 << 30));
    if (magnitude >= (std::int64_t{1} << 20)) return fmt::format("{:.2f} MiB", value / (1 << 20));
    if (magnitude >= (std::int64_t{1} << 10)) return fmt::format("{:.2f} KiB", value / (1 << 10));
    return fmt::format("{} B", bytes);
  }

  /// "12.345ms", "678.900us", "42ns", "1.234s": three significant decimals in a readable unit.
  static std::string format_duration(std::int64_t ns) {
    const double value = static_cast<double>(ns);
    if (ns >= 1'000'000'000 || ns <= -1'000'000'000) return fmt::format("{:.3f}s", value / 1e9);
    if (ns >= 1'000'000 || ns <= -1'000'000) return fmt::format("{:.3f}ms", value / 1e6);
    if (ns >= 1'000 || ns <= -1'000) return fmt::format("{:.3f}us", value / 1e3);
    return fmt::format("{}ns", ns);
  }

 private:
  std::vector<KeyAverage> rows_;
  std::vector<KeyAverage> rows_by_stack_;   // one per name and stack, in the order first seen
  std::vector<std::uint32_t> stack_of_row_;  // each of rows_by_stack_'s Trace::stacks index, or kNoStack
  std::vector<std::vector<std::string>> user_frames_;  // by Trace::stacks index: its user frames, innermost first
  std::size_t frames_per_group_ = 0;
  SortBy sort_key_ = SortBy::TotalTime;
  std::int64_t window_ns_ = 0;
  std::uint64_t dropped_events_ = 0;
  GpuCollectionStats gpu_;
  std::uint64_t total_flops_ = 0;
  std::vector<PeakMemory> peak_memory_;
  bool has_memory_ = false;
  bool has_device_memory_ = false;
  bool hip_ = false;
};

using KeyAverages = BasicKeyAverages<>;

DLPROF_END_NAMESPACE

/// `fmt::print("{}", averages)` prints table(). It takes no format spec, and writes through the
/// output iterator, which <fmt/core.h> alone provides.
template <>
struct fmt::formatter<dlprof::KeyAverages> {
  constexpr auto parse(fmt::format_parse_context& context) { return context.begin(); }
  template <class FormatContext>
  auto format(const dlprof::KeyAverages& averages, FormatContext& context) const {
    const std::string table = averages.table();
    return std::copy(table.begin(), table.end(), context.out());
  }
};
