// dlprof/detail/window/gpu_merge.hpp: joins a window's GPU activity to its CPU trace, the way Kineto
// joins CUPTI's records to PyTorch's ops (docs/trace-format.md §2.4-2.6):
//  * times go through the window's tick map, so CPU and GPU share one axis;
//  * an API call belongs to the window when it started inside it; a kernel, copy or fill when
//    the call that launched it did (or, with no call recorded, when it started inside it);
//  * `External id` of a call and of the work it launched is the trace id of the innermost range
//    around the call, found through CUPTI's external-correlation records;
//  * each range that launched work gets a gpu_user_annotation span per stream, from its first to
//    its last piece of work, widened by 1 ns on each side where that keeps slices nested;
//  * kernels get Kineto's occupancy args from the device's properties;
//  * work a CUDA graph replays gets the op or range that captured its node, and its call stack.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <iterator>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/backends/occupancy.hpp"
#include "dlprof/detail/window/formatted_name.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The name the kernel gave its thread, read from /proc; empty once the thread has exited.
template <class Deferred = void>
std::string os_thread_name(std::int64_t os_tid) {
  const std::string path = fmt::format("/proc/self/task/{}/comm", os_tid);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buffer[64] = {};
  const ssize_t size = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  std::string name(buffer, size > 0 ? static_cast<std::size_t>(size) : 0);
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

/// Fills in Kineto's three occupancy args of a kernel from the properties of its device.
template <class Deferred = void>
void fill_kernel_occupancy(GpuEvent& kernel, const std::vector<DeviceProperties>& devices) {
  const auto device = std::find_if(devices.begin(), devices.end(),
                                   [&](const DeviceProperties& d) { return d.id == static_cast<int>(kernel.device); });
  KernelDetails& details = kernel.kernel;
  if (device == devices.end()) {
    details.est_achieved_occupancy_percent = kKinetoOccupancyUnknown;
    return;
  }
  KernelLaunch launch;
  launch.grid = Dim3{details.grid[0], details.grid[1], details.grid[2]};
  launch.block = Dim3{details.block[0], details.block[1], details.block[2]};
  launch.registers_per_thread = details.registers_per_thread;
  launch.static_shared_memory = details.static_shared_memory;
  launch.dynamic_shared_memory = details.dynamic_shared_memory;
  const KernelOccupancy occupancy = compute_occupancy(launch, *device, SharedMemoryLimit::OptIn);
  details.blocks_per_sm = occupancy.kineto.blocks_per_sm;
  details.warps_per_sm = occupancy.kineto.warps_per_sm;
  details.est_achieved_occupancy_percent = occupancy.kineto.est_achieved_occupancy_percent;
}

/// Builds the gpu_user_annotation spans of the window: for each (range, device, stream), the
/// extent of the work the range launched there. Spans are widened by 1 ns on a side only where
/// the stream's neighbouring work is at least 2 ns away, and a span that would overlap another
/// partially (two threads launching into one stream) is shortened to nest, and counted.
template <class Deferred = void>
void add_gpu_annotations(Trace& trace, const std::unordered_map<std::uint64_t, std::uint32_t>& range_names) {
  struct Key {
    std::uint32_t device;
    std::int64_t stream;
    std::uint64_t external_id;
    bool operator==(const Key& other) const noexcept {
      return device == other.device && stream == other.stream && external_id == other.external_id;
    }
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return std::hash<std::uint64_t>()(key.external_id * 0x9E3779B97F4A7C15ull ^
                                        (std::uint64_t{key.device} << 48) ^ static_cast<std::uint64_t>(key.stream));
    }
  };
  std::unordered_map<Key, GpuEvent, KeyHash> spans;
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.external_id == 0 || work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
    const auto name = range_names.find(work.external_id);
    if (name == range_names.end()) continue;
    auto [span, inserted] = spans.try_emplace(Key{work.device, work.stream, work.external_id});
    if (inserted) {
      span->second = GpuEvent{};
      span->second.kind = GpuEventKind::Annotation;
      span->second.name = name->second;
      span->second.device = work.device;
      span->second.context = work.context;
      span->second.stream = work.stream;
      span->second.external_id = work.external_id;
      span->second.start_ns = work.start_ns;
      span->second.end_ns = work.end_ns;
    } else {
      span->second.start_ns = std::min(span->second.start_ns, work.start_ns);
      span->second.end_ns = std::max(span->second.end_ns, work.end_ns);
    }
  }
  if (spans.empty()) return;

  std::vector<GpuEvent> annotations;
  annotations.reserve(spans.size());
  for (auto& entry : spans) annotations.push_back(entry.second);
  const auto row_order = [](const GpuEvent& a, const GpuEvent& b) {
    return std::tie(a.device, a.stream, a.start_ns) < std::tie(b.device, b.stream, b.start_ns) ||
           (std::tie(a.device, a.stream, a.start_ns) == std::tie(b.device, b.stream, b.start_ns) && a.end_ns > b.end_ns);
  };
  std::sort(annotations.begin(), annotations.end(), row_order);

  // Nest annotations among themselves: a later span that starts inside an earlier one and ends
  // after it is cut at the earlier one's end.
  std::vector<GpuEvent> nested;
  nested.reserve(annotations.size());
  for (std::size_t row_begin = 0; row_begin < annotations.size();) {
    std::size_t row_end = row_begin;
    while (row_end < annotations.size() && annotations[row_end].device == annotations[row_begin].device &&
           annotations[row_end].stream == annotations[row_begin].stream)
      ++row_end;
    std::vector<std::int64_t> open_ends;
    for (std::size_t i = row_begin; i < row_end; ++i) {
      GpuEvent span = annotations[i];
      while (!open_ends.empty() && open_ends.back() <= span.start_ns) open_ends.pop_back();
      if (!open_ends.empty() && span.end_ns > open_ends.back()) {
        span.end_ns = open_ends.back();
        ++trace.gpu.clipped_annotations;
      }
      open_ends.push_back(span.end_ns);
      nested.push_back(span);
    }
    row_begin = row_end;
  }

  // Widen by 1 ns where the neighbouring work on the stream leaves room, so the span strictly
  // encloses its first and last kernel (Perfetto draws equal-start slices in file order). Room
  // means the neighbour is at least 2 ns away: its own span may be widened towards this one too.
  std::vector<std::pair<std::int64_t, std::int64_t>> row_work;  // (start, end) of the row's work
  std::size_t work_index = 0;
  const auto& work = trace.gpu_events;  // sorted by device, stream, start
  for (std::size_t i = 0; i < nested.size();) {
    const std::uint32_t device = nested[i].device;
    const std::int64_t stream = nested[i].stream;
    row_work.clear();
    while (work_index < work.size() && std::tie(work[work_index].device, work[work_index].stream) < std::tie(device, stream))
      ++work_index;
    for (std::size_t w = work_index; w < work.size() && work[w].device == device && work[w].stream == stream; ++w)
      if (work[w].kind != GpuEventKind::Sync) row_work.emplace_back(work[w].start_ns, work[w].end_ns);  // own row
    for (; i < nested.size() && nested[i].device == device && nested[i].stream == stream; ++i) {
      GpuEvent& span = nested[i];
      // Work on one stream runs one piece at a time: the nearest neighbours are the piece just
      // before the span's first and the piece just after its last.
      const auto after = std::lower_bound(row_work.begin(), row_work.end(), std::make_pair(span.start_ns, INT64_MIN));
      const bool room_before = after == row_work.begin() || std::prev(after)->second <= span.start_ns - 2;
      const auto next = std::lower_bound(row_work.begin(), row_work.end(), std::make_pair(span.end_ns, INT64_MIN));
      const bool room_after = next == row_work.end() || next->first >= span.end_ns + 2;
      if (room_before) span.start_ns -= 1;
      if (room_after) span.end_ns += 1;
    }
  }
  trace.gpu_events.insert(trace.gpu_events.end(), nested.begin(), nested.end());
}

/// Adds the GPU activity of a window to its trace. `pushed_to_trace` maps the external ids
/// ranges pushed to their trace External ids (assign_external_ids()).
template <class Deferred = void>
void merge_device_activity(Trace& trace, DeviceActivity&& activity, const ClockMap& clock,
                                  const std::unordered_map<std::uint64_t, std::uint64_t>& pushed_to_trace) {
  trace.gpu = activity.stats;
  trace.gpu.enabled = true;
  trace.devices = std::move(activity.devices);
  const auto to_ns = [&](std::int64_t timestamp) {
    return activity.clock.ticks ? clock.to_realtime_ns(activity.clock.to_ticks(timestamp)) : timestamp;
  };
  const auto in_window = [&](std::int64_t ns) { return ns >= trace.window_start_ns && ns <= trace.window_end_ns; };

  // Names: the backend's table into the trace's, each distinct name once.
  std::unordered_map<std::string, std::uint32_t> name_index;
  name_index.reserve(trace.names.size() + activity.names.size());
  for (std::uint32_t i = 0; i < trace.names.size(); ++i) name_index.emplace(trace.names[i], i);
  std::vector<std::uint32_t> backend_name(activity.names.size());
  for (std::size_t i = 0; i < activity.names.size(); ++i) {
    auto [found, inserted] = name_index.try_emplace(activity.names[i], static_cast<std::uint32_t>(trace.names.size()));
    if (inserted) trace.names.push_back(activity.names[i]);
    backend_name[i] = found->second;
  }
  const auto trace_name = [&](std::uint32_t index) {
    return index < backend_name.size() ? backend_name[index] : 0u;
  };

  // Threads: API calls may come from threads that recorded no range.
  std::unordered_map<std::int64_t, std::uint32_t> thread_index;
  for (std::uint32_t i = 0; i < trace.threads.size(); ++i) thread_index.emplace(trace.threads[i].os_tid, i);
  const auto thread_of = [&](std::int64_t os_tid) {
    auto [found, inserted] = thread_index.try_emplace(os_tid, static_cast<std::uint32_t>(trace.threads.size()));
    if (inserted) trace.threads.push_back(ThreadInfo{os_tid, os_thread_name(os_tid)});
    return found->second;
  };

  std::unordered_map<std::uint32_t, std::uint64_t> external_of_correlation;
  external_of_correlation.reserve(activity.external_correlations.size());
  for (const ExternalCorrelation& link : activity.external_correlations) {
    const auto id = pushed_to_trace.find(link.external_id);
    if (id != pushed_to_trace.end()) external_of_correlation[link.correlation] = id->second;
  }
  const auto external_of = [&](std::uint32_t correlation) -> std::uint64_t {
    const auto found = external_of_correlation.find(correlation);
    return found == external_of_correlation.end() ? 0 : found->second;
  };

  // API calls: kept when they started inside the window.
  std::unordered_set<std::uint32_t> recorded_calls;  // correlation ids of every call CUPTI reported
  std::unordered_map<std::uint32_t, std::uint32_t> kept_call_thread;
  for (const ApiEvent& raw : activity.api) {
    recorded_calls.insert(raw.correlation);
    ApiEvent call = raw;
    call.start_ns = to_ns(raw.start_ns);
    call.end_ns = std::max(call.start_ns, to_ns(raw.end_ns));
    if (!in_window(call.start_ns)) continue;
    call.name = trace_name(raw.name);
    call.thread = thread_of(static_cast<std::int64_t>(raw.thread));
    call.external_id = external_of(raw.correlation);
    kept_call_thread.emplace(call.correlation, call.thread);
    trace.api_events.push_back(call);
  }
  std::sort(trace.api_events.begin(), trace.api_events.end(), [](const ApiEvent& a, const ApiEvent& b) {
    return std::tie(a.thread, a.start_ns) < std::tie(b.thread, b.start_ns) ||
           (std::tie(a.thread, a.start_ns) == std::tie(b.thread, b.start_ns) && a.end_ns > b.end_ns);
  });

  // Device work: kept with the call that launched it.
  const auto belongs = [&](std::uint32_t correlation, std::int64_t start_ns) {
    if (correlation != 0 && recorded_calls.count(correlation) != 0) return kept_call_thread.count(correlation) != 0;
    return in_window(start_ns);
  };
  for (const GpuEvent& raw : activity.gpu) {
    GpuEvent work = raw;
    work.start_ns = to_ns(raw.start_ns);
    work.end_ns = std::max(work.start_ns, to_ns(raw.end_ns));
    if (!belongs(raw.correlation, work.start_ns)) continue;
    work.name = trace_name(raw.name);
    work.external_id = external_of(raw.correlation);
    if (work.kind == GpuEventKind::Kernel) {
      if (work.kernel.queued_ns != 0) work.kernel.queued_ns = to_ns(work.kernel.queued_ns);
      fill_kernel_occupancy(work, trace.devices);
    }
    trace.gpu_events.push_back(work);
  }
  std::sort(trace.gpu_events.begin(), trace.gpu_events.end(), [](const GpuEvent& a, const GpuEvent& b) {
    return std::tie(a.device, a.stream, a.start_ns) < std::tie(b.device, b.stream, b.start_ns);
  });

  std::unordered_map<std::uint64_t, std::uint32_t> range_names;
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Range && event.external_id != 0) range_names.emplace(event.external_id, event.name);
  add_gpu_annotations(trace, range_names);
  std::stable_sort(trace.gpu_events.begin(), trace.gpu_events.end(), [](const GpuEvent& a, const GpuEvent& b) {
    if (std::tie(a.device, a.stream, a.start_ns) != std::tie(b.device, b.stream, b.start_ns))
      return std::tie(a.device, a.stream, a.start_ns) < std::tie(b.device, b.stream, b.start_ns);
    return a.end_ns > b.end_ns;  // the enclosing slice first
  });

  // Allocations: on the thread that made the call, with the device's running total.
  std::vector<RawMemoryEvent> memory = std::move(activity.memory);
  std::stable_sort(memory.begin(), memory.end(),
                   [](const RawMemoryEvent& a, const RawMemoryEvent& b) { return a.timestamp < b.timestamp; });
  std::unordered_map<std::uint32_t, std::int64_t> allocated;
  for (const RawMemoryEvent& raw : memory) {
    MemoryEvent event;
    event.time_ns = to_ns(raw.timestamp);
    if (!belongs(raw.correlation, event.time_ns)) continue;
    event.address = raw.address;
    event.bytes = raw.bytes;
    event.device = static_cast<std::int32_t>(raw.device);
    event.total_allocated = event.total_reserved = allocated[raw.device] += raw.bytes;  // no caching allocator
    const auto call = kept_call_thread.find(raw.correlation);
    event.thread = call != kept_call_thread.end() ? call->second : thread_of(static_cast<std::int64_t>(::getpid()));
    trace.memory_events.push_back(event);
  }

  // Counters: a value holds until the next reading, so the last reading before the window is
  // its value at the start.
  std::vector<DeviceCounterSample> counters = std::move(activity.device_counters);
  for (DeviceCounterSample& sample : counters) sample.time_ns = to_ns(sample.time_ns);
  std::stable_sort(counters.begin(), counters.end(), [](const DeviceCounterSample& a, const DeviceCounterSample& b) {
    return std::tie(a.device, a.kind, a.time_ns) < std::tie(b.device, b.kind, b.time_ns);
  });
  for (std::size_t i = 0; i < counters.size(); ++i) {
    DeviceCounterSample sample = counters[i];
    if (sample.time_ns > trace.window_end_ns) continue;
    if (sample.time_ns < trace.window_start_ns) {
      const bool next_is_before = i + 1 < counters.size() && counters[i + 1].device == sample.device &&
                                  counters[i + 1].kind == sample.kind &&
                                  counters[i + 1].time_ns <= trace.window_start_ns;
      if (next_is_before) continue;
      sample.time_ns = trace.window_start_ns;
    }
    trace.device_counters.push_back(sample);
  }

  for (const OverheadEvent& raw : activity.overhead) {
    OverheadEvent overhead = raw;
    overhead.start_ns = to_ns(raw.start_ns);
    overhead.end_ns = std::max(overhead.start_ns, to_ns(raw.end_ns));
    if (!in_window(overhead.start_ns)) continue;
    overhead.name = trace_name(raw.name);
    trace.overhead_events.push_back(overhead);
  }
}

/// Gives the replayed work of `trace` the op or range that captured its graph node, and that
/// scope's call stack. `names` reads name and stack ids as assemble_trace() has it read them.
template <class Names>
void attribute_graph_replays(Trace& trace, const std::vector<GraphNodeCapture>& captures, const Names& names) {
  if (captures.empty()) return;
  std::unordered_map<std::string, std::uint32_t> name_index;
  const auto index_of_name = [&](std::string text) {
    if (name_index.empty())
      for (std::uint32_t i = 0; i < trace.names.size(); ++i) name_index.emplace(trace.names[i], i);
    auto [found, inserted] = name_index.try_emplace(std::move(text), static_cast<std::uint32_t>(trace.names.size()));
    if (inserted) trace.names.push_back(found->first);
    return found->second;
  };
  // A scope's stack is often one the window's events have already: the same CallStack then.
  std::map<std::vector<std::uint64_t>, std::uint32_t> stack_index;
  const auto index_of_stack = [&](const std::uintptr_t* frames, std::size_t depth) {
    if (stack_index.empty())
      for (std::uint32_t i = 0; i < trace.stacks.size(); ++i) {
        const CallStack& stack = trace.stacks[i];
        std::vector<std::uint64_t> addresses;
        for (std::uint32_t f = 0; f < stack.depth; ++f) addresses.push_back(trace.stack_frames[stack.first + f].address);
        stack_index.emplace(std::move(addresses), i);
      }
    auto [found, inserted] = stack_index.try_emplace(std::vector<std::uint64_t>(frames, frames + depth),
                                                     static_cast<std::uint32_t>(trace.stacks.size()));
    if (inserted) {
      trace.stacks.push_back(CallStack{static_cast<std::uint32_t>(trace.stack_frames.size()), static_cast<std::uint32_t>(depth)});
      for (std::size_t i = 0; i < depth; ++i) trace.stack_frames.push_back(StackFrame{frames[i], StackFrame::kNoText});
    }
    return found->second;
  };

  struct Origin {
    std::uint32_t name;
    std::uint32_t stack;
  };
  std::unordered_map<std::uint64_t, Origin> origin_of_node;
  names.with_lock([&] {
    for (const GraphNodeCapture& capture : captures) {
      const auto id = static_cast<NameId>(capture.name);
      std::string text = capture.kind == RecordKind::Step ? profiler_step_name(static_cast<std::int64_t>(capture.name))
                         : is_format_site_id(id) && capture.has_arguments
                             ? format_with_kept_arguments(names(id), capture.arguments)
                             : std::string(names(id));
      Origin origin{index_of_name(std::move(text)), TraceEvent::kNoStack};
      if (capture.stack != 0) {
        const auto [frames, depth] = names.stack(capture.stack);
        if (depth != 0) origin.stack = index_of_stack(frames, depth);
      }
      origin_of_node.emplace(capture.node, origin);
    }
  });
  for (GpuEvent& work : trace.gpu_events) {
    if (work.graph_node_id == 0) continue;
    const auto origin = origin_of_node.find(work.graph_node_id);
    if (origin == origin_of_node.end()) continue;
    work.captured_by = origin->second.name;
    work.capture_stack = origin->second.stack;
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
