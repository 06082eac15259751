// dlprof/export/chrome_trace.hpp: writes a Trace as the Chrome-trace JSON that torch.profiler
// (Kineto) writes, so TensorBoard's profiler plugin, Holistic Trace Analysis and Perfetto open it
// unchanged. The field-by-field contract is docs/trace-format.md §6; in short:
//  * top level in Kineto's order: schemaVersion, deviceProperties, distributedInfo (one line,
//    `"rank": N` with a space, which HTA's rank regex needs), metadata, displayTimeUnit,
//    baseTimeNanoseconds, traceEvents (Record Window End last), traceName;
//  * ts/dur in microseconds with exactly three decimals, relative to baseTimeNanoseconds, which
//    is the window start floored to Kineto's 3-month interval so every rank shares it;
//  * ranges and ProfilerStep#N are `user_annotation` slices with External id / Ev Idx args,
//    Python frames (read from torch's traces) `python_function` slices;
//  * every string valid UTF-8 (a name that is not gets U+FFFD, format/json_text.hpp), and
//    counter samples that are not finite as the strings "NaN", "Infinity" and "-Infinity": the
//    file is JSON that Python, HTA and Perfetto accept.
// Every category, key, arg and name is format/vocabulary.hpp's, which the reader reads by.
// Formatting writes into one reused buffer with fmt's integer formatter; nothing is allocated
// per event. save_chrome_trace() writes a file through format/atomic_file.hpp.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/memory_timeline.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/forward_ops.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/format/json_text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// `  {"ph": "<phase>", "cat": "<category>", "name": `: the start of an event's object, up to its
/// name, in Kineto's field order.
template <class Deferred = void>
std::string object_opening(char phase, std::string_view category) {
  std::string text = "  {\"ph\": \"";
  text.push_back(phase);
  text.append("\", \"cat\": \"").append(category).append("\", \"name\": ");
  return text;
}

/// The start of an event's object by kind: ranges and steps are user_annotation slices, ops
/// cpu_op slices, and so on. Put together once, so that each event starts with one copy, and
/// never destroyed: a Profiler's background writer may still be writing a trace while the
/// program exits and runs the destructors of statics.
template <class Deferred = void>
std::string_view event_opening(EventKind kind) {
  static const std::string* const kOpenings = new const std::string[5]{
      object_opening('X', kineto::cat::kUserAnnotation), object_opening('X', kineto::cat::kCpuOp),
      object_opening('X', kineto::cat::kPythonFunction), object_opening('i', kineto::cat::kCpuInstantEvent),
      object_opening('C', kineto::cat::kCounter)};
  switch (kind) {
    case EventKind::Range:
    case EventKind::Step: return kOpenings[0];
    case EventKind::Op: return kOpenings[1];
    case EventKind::PythonFrame: return kOpenings[2];
    case EventKind::Instant: return kOpenings[3];
    case EventKind::Counter: return kOpenings[4];
  }
  return kOpenings[0];
}

/// A collective's args after its op's own, as c10d's record_param_comms writes them (the lists
/// are JSON text in strings, as there).
template <class Deferred = void>
void write_collective_args(JsonWriter& json, const CollectiveCall& call) {
  namespace field = kineto::arg;
  json.key(", ", field::kCollectiveName);
  json.string(call.name);
  json.key(", ", field::kDtype);
  json.string(call.dtype);
  json.key(", ", field::kInMsgNelems);
  json.integer(call.in_nelems);
  json.key(", ", field::kOutMsgNelems);
  json.integer(call.out_nelems);
  json.key(", ", field::kInSplitSize);
  json.string(call.in_split);
  json.key(", ", field::kOutSplitSize);
  json.string(call.out_split);
  json.key(", ", field::kGroupSize);
  json.integer(call.group_size);
  json.key(", ", field::kProcessGroupName);
  json.string(call.group_name);
  json.key(", ", field::kProcessGroupDesc);
  json.string(call.group_desc);
  json.key(", ", field::kProcessGroupRanks);
  json.string(call.group_ranks);
  json.key(", ", field::kCommRank);
  json.integer(call.rank);
  if (call.peer >= 0) {
    json.key(", ", call.name == "recv" ? field::kSrcRank : field::kDstRank);
    json.integer(call.peer);
  }
  if (call.seq >= 0) {
    json.key(", ", field::kSeq);
    json.integer(call.seq);
  }
}

/// distributedInfo's pg_count, pg_config and nccl_version, when the process registered groups.
template <class Deferred = void>
void write_process_groups(JsonWriter& json, const DistributedInfo& distributed) {
  namespace top = kineto::key;
  if (distributed.groups.empty()) return;
  json.key(", ", top::kPgCount);
  json.integer(static_cast<std::int64_t>(distributed.groups.size()));
  json.key(", ", top::kPgConfig);
  json.character('[');
  for (std::size_t i = 0; i < distributed.groups.size(); ++i) {
    const ProcessGroupInfo& group = distributed.groups[i];
    json.key(i == 0 ? "{" : ", {", top::kPgName);
    json.string(group.name);
    json.key(", ", top::kPgDesc);
    json.string(group.desc);
    json.key(", ", top::kBackendConfig);
    json.string(group.backend_config);
    json.key(", ", top::kPgSize);
    json.integer(group.size);
    json.key(", ", top::kRanks);
    json.character('[');
    for (std::size_t r = 0; r < group.ranks.size(); ++r) {
      if (r != 0) json.raw(", ");
      json.integer(group.ranks[r]);
    }
    json.raw("]}");
  }
  json.character(']');
  if (!distributed.nccl_version.empty()) {
    json.key(", ", top::kNcclVersion);
    json.string(distributed.nccl_version);
  }
}

template <class Deferred = void>
void write_device_properties(JsonWriter& json, const DeviceProperties& device) {
  namespace field = kineto::device;
  json.key("{", field::kId);
  json.integer(device.id);
  json.key(", ", field::kName);
  json.string(device.name);
  const std::pair<std::string_view, std::int64_t> fields[] = {
      {field::kTotalGlobalMem, device.total_global_mem},
      {field::kComputeMajor, device.compute_major},
      {field::kComputeMinor, device.compute_minor},
      {field::kMaxThreadsPerBlock, device.max_threads_per_block},
      {field::kMaxThreadsPerMultiprocessor, device.max_threads_per_multiprocessor},
      {field::kRegsPerBlock, device.regs_per_block},
      {field::kWarpSize, device.warp_size},
      {field::kSharedMemPerBlock, device.shared_mem_per_block},
      {field::kNumSms, device.num_sms},
      {field::kRegsPerMultiprocessor, device.regs_per_multiprocessor},
      {field::kSharedMemPerBlockOptin, device.shared_mem_per_block_optin},
      {field::kSharedMemPerMultiprocessor, device.shared_mem_per_multiprocessor},
  };
  for (const auto& [name, value] : fields) {
    json.key(", ", name);
    json.integer(value);
  }
  json.character('}');
}

/// A metadata event ("ph": "M": a process's or a thread's name, label or sort index), up to its
/// args' value: `  {"name": "<name>", "ph": "M", "ts": <ts>, "pid": <pid>, "tid": <tid>,
/// "args": {"<arg>": `.
template <class Deferred = void>
void metadata_opening(JsonWriter& json, std::string_view name, std::int64_t relative_ns, std::int64_t pid,
                             std::int64_t tid, std::string_view arg) {
  json.raw("  {\"name\": \"");
  json.raw(name);
  json.raw("\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative_ns);
  json.raw(", \"pid\": ");
  json.integer(pid);
  json.raw(", \"tid\": ");
  json.integer(tid);
  json.key(", \"args\": {", arg);
}

/// Synchronisations get a row of their own next to their stream's ("stream 7 (sync)"): a CPU-side
/// wait overlaps the kernels it waits for, and slices on one row must nest.
inline constexpr std::int64_t kSyncRowOffset = 1'000'000;
/// GPU processes sort after every CPU process (Kineto's kExceedMaxPid).
inline constexpr std::int64_t kGpuSortIndexOffset = 5'000'000;

template <class Deferred = void>
void write_gpu_collection_stats(JsonWriter& json, const GpuCollectionStats& stats) {
  namespace top = kineto::key;
  const std::pair<std::string_view, std::uint64_t> counters[] = {
      {top::kGpuRecords, stats.records},
      {top::kGpuDroppedRecords, stats.dropped_records},
      {top::kCuptiDroppedRecords, stats.cupti_dropped_records},
      {top::kGpuUnknownRecords, stats.unknown_records},
      {top::kGpuLateRecords, stats.late_records},
      {top::kGpuClippedAnnotations, stats.clipped_annotations},
      {top::kDroppedDeviceCounters, stats.dropped_device_counters},
  };
  for (const auto& [name, value] : counters) {
    json.key(",\n  ", name);
    json.integer(static_cast<std::int64_t>(value));
  }
  if (!stats.cupti_version.empty()) {
    json.key(",\n  ", top::kCuptiVersion);
    json.string(stats.cupti_version);
  }
  if (!stats.driver_version.empty()) {
    json.key(",\n  ", top::kCudaDriverVersion);
    json.string(stats.driver_version);
  }
}

/// Each recording thread's CPU-time track (kineto::name::kThreadCpuPrefix): at each reading but
/// the last, the shares of the time until the next that the thread ran and waited for a CPU.
template <class Relative>
void write_thread_cpu(JsonWriter& json, const Trace& trace, const Relative& relative) {
  namespace arg = kineto::arg;
  const std::vector<ThreadCpuSample>& samples = trace.thread_cpu;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const ThreadCpuSample& sample = samples[i];
    if (sample.thread >= trace.threads.size()) continue;
    const ThreadInfo& thread = trace.threads[sample.thread];
    json.raw("  {\"ph\": \"C\", \"cat\": \"");
    json.raw(kineto::cat::kCounter);
    json.raw("\", \"name\": ");
    json.string(std::string(kineto::name::kThreadCpuPrefix) + thread_label(thread.os_tid, thread.name));
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(thread.os_tid);
    json.raw(", \"ts\": ");
    json.microseconds(relative(sample.time_ns));
    const bool last = i + 1 == samples.size() || samples[i + 1].thread != sample.thread;
    const std::int64_t span = last ? 0 : samples[i + 1].time_ns - sample.time_ns;
    const auto share = [&](std::int64_t from, std::int64_t to) {
      return span > 0 ? 100.0 * static_cast<double>(to - from) / static_cast<double>(span) : 0.0;
    };
    json.key(", \"args\": {", arg::kRunningPercent);
    json.sample(last ? 0.0 : share(sample.cpu_ns, samples[i + 1].cpu_ns));
    if (sample.run_delay_ns >= 0 && (last || samples[i + 1].run_delay_ns >= 0)) {
      json.key(", ", arg::kWaitingForCpuPercent);
      json.sample(last ? 0.0 : share(sample.run_delay_ns, samples[i + 1].run_delay_ns));
    }
    json.raw("}},\n");
  }
}

/// Each device's allocated memory by category (analysis/memory_timeline.hpp) as a counter track
/// on the process, at most kMemoryCounterPoints points a device, its peaks kept.
template <class Relative>
void write_memory_by_category(JsonWriter& json, const Trace& trace, const Relative& relative) {
  constexpr std::size_t kMemoryCounterPoints = 10000;
  if (trace.memory_events.empty()) return;
  const analysis::MemoryBlocks blocks = analysis::memory_blocks(trace);
  for (const analysis::DeviceMemoryTimeline& timeline : analysis::memory_timelines(trace, blocks, kMemoryCounterPoints)) {
    const std::string name =
        std::string(kineto::name::kMemoryByCategoryPrefix).append(device_label(timeline.device_type, timeline.device)).append(")");
    for (const analysis::MemoryTimelinePoint& point : timeline.points) {
      json.raw("  {\"ph\": \"C\", \"cat\": \"");
      json.raw(kineto::cat::kCounter);
      json.raw("\", \"name\": ");
      json.string(name);
      json.raw(", \"pid\": ");
      json.integer(trace.pid);
      json.raw(", \"tid\": 0, \"ts\": ");
      json.microseconds(relative(point.time_ns));
      for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
        json.key(c == 0 ? ", \"args\": {" : ", ", to_string(static_cast<MemoryCategory>(c)));
        json.integer(point.by_category[c]);
      }
      json.raw("}},\n");
    }
  }
}

/// Fixed JSON text of the device events, joined to vocabulary names at compile time.
namespace chrome_piece {
inline constexpr std::string_view kSliceOpening = "  {\"ph\": \"X\", \"cat\": \"";
inline constexpr std::string_view kCounterOpening = "  {\"ph\": \"C\", \"cat\": \"";
inline constexpr std::string_view kNameKey = "\", \"name\": ";
inline constexpr std::string_view kFlowCategory = ", \"cat\": \"";
inline constexpr std::string_view kFlowName = "\", \"name\": \"";
inline constexpr std::string_view kFlowBoundEnd = "\", \"bp\": \"e\"},\n";
inline constexpr std::string_view kFlowEnd = "\"},\n";
}  // namespace chrome_piece

/// Which correlation ids of a trace have an API call and which have device work, for the ac2g
/// flows: a flow is drawn only between two slices that are both in the trace. CUPTI numbers calls
/// consecutively, so a window's ids are dense and a byte per id beats a hash set by far; ids
/// spread too thinly fall back to a sorted list.
template <class Deferred = void>
class CorrelationSet {
 public:
  void build(const Trace& trace) {
    std::uint32_t low = UINT32_MAX;
    std::uint32_t high = 0;
    std::size_t count = 0;
    const auto see = [&](std::uint32_t id) {
      low = std::min(low, id);
      high = std::max(high, id);
      ++count;
    };
    for (const GpuEvent& work : trace.gpu_events)
      if (is_launched_work(work)) see(work.correlation);
    for (const ApiEvent& call : trace.api_events) see(call.correlation);
    if (count == 0) return;
    low_ = low;
    dense_ = std::uint64_t{high} - low < 64 * std::uint64_t{count} + 4096;
    if (dense_) flags_.assign(std::size_t{high} - low + 1, 0);
    for (const GpuEvent& work : trace.gpu_events)
      if (is_launched_work(work)) mark(work.correlation, kWork);
    for (const ApiEvent& call : trace.api_events) mark(call.correlation, kCall);
    if (!dense_) std::sort(sparse_.begin(), sparse_.end());
  }

  bool has_work(std::uint32_t id) const noexcept { return (flags_of(id) & kWork) != 0; }
  bool has_call(std::uint32_t id) const noexcept { return (flags_of(id) & kCall) != 0; }

  /// Whether the flow of `id` ends here: true for its first work only. A graph launch's kernels
  /// share its correlation, and a flow has one end.
  bool end_flow(std::uint32_t id) noexcept {
    if (dense_) {
      if (id < low_ || id - low_ >= flags_.size() || (flags_[id - low_] & kEnded) != 0) return false;
      flags_[id - low_] |= kEnded;
      return true;
    }
    const auto it = std::lower_bound(sparse_.begin(), sparse_.end(), std::make_pair(id, std::uint8_t{0}));
    if (it == sparse_.end() || it->first != id || (it->second & kEnded) != 0) return false;
    it->second |= kEnded;
    return true;
  }

  /// Syncs are waits, not launched work: Kineto draws no flow to them either.
  static bool is_launched_work(const GpuEvent& work) noexcept {
    return work.correlation != 0 && work.kind != GpuEventKind::Annotation && work.kind != GpuEventKind::Sync;
  }

 private:
  static constexpr std::uint8_t kWork = 1;
  static constexpr std::uint8_t kCall = 2;
  static constexpr std::uint8_t kEnded = 4;

  void mark(std::uint32_t id, std::uint8_t flag) {
    if (dense_)
      flags_[id - low_] |= flag;
    else
      sparse_.emplace_back(id, flag);
  }

  std::uint8_t flags_of(std::uint32_t id) const noexcept {
    if (dense_) return id >= low_ && id - low_ < flags_.size() ? flags_[id - low_] : 0;
    std::uint8_t flags = 0;
    for (auto it = std::lower_bound(sparse_.begin(), sparse_.end(), std::make_pair(id, std::uint8_t{0}));
         it != sparse_.end() && it->first == id; ++it)
      flags |= it->second;
    return flags;
  }

  bool dense_ = true;
  std::uint32_t low_ = 0;
  std::vector<std::uint8_t> flags_;
  std::vector<std::pair<std::uint32_t, std::uint8_t>> sparse_;
};

/// Floats as Kineto prints them ("{:f}": six decimals), remembered by value: a window's kernels
/// repeat a few launch configurations, and fixed-precision formatting is the slow path of fmt.
template <class Deferred = void>
class FixedFloatCache {
 public:
  std::string_view text(float value) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    Entry& entry = entries_[(bits * 2654435761u) >> (32 - kIndexBits)];
    if (!entry.used || entry.bits != bits) {
      // std::to_chars, libstdc++'s compiled formatter, prints what fmt's "{:f}" does; fmt::format_to_n
      // would compile fmt's whole formatter into the file that writes traces.
      const std::to_chars_result end =
          std::to_chars(entry.text, entry.text + sizeof(entry.text), static_cast<double>(value), std::chars_format::fixed, 6);
      entry.size = static_cast<std::uint8_t>(end.ec == std::errc() ? end.ptr - entry.text : 0);
      entry.bits = bits;
      entry.used = true;
    }
    return std::string_view(entry.text, entry.size);
  }

 private:
  static constexpr unsigned kIndexBits = 6;
  struct Entry {
    std::uint32_t bits = 0;
    bool used = false;
    std::uint8_t size = 0;
    char text[54] = {};  // the largest finite float in "{:f}" takes 46 characters
  };
  Entry entries_[std::size_t{1} << kIndexBits];
};

/// The fwdbwd flow of each event, by index (0: none): a backward op (category Backward) with a
/// sequence number ends a flow that starts at the forward op with the same (forward thread,
/// sequence number), the latest-starting one when several match, as torch's collection.cpp
/// links them. Ids count up from 1; empty when the trace has no op with a sequence number.
template <class Deferred = void>
std::vector<std::uint32_t> forward_backward_flows(const Trace& trace) {
  const std::vector<std::uint32_t> forward = forward_op_of_each_backward_op(trace);
  if (forward.empty()) return {};
  std::vector<std::uint32_t> flows(trace.events.size(), 0);
  std::uint32_t next_id = 0;
  for (std::size_t i = 0; i < forward.size(); ++i) {
    if (forward[i] == kNoForwardOp || flows[forward[i]] != 0) continue;
    flows[forward[i]] = flows[i] = ++next_id;
  }
  return flows;
}

/// The text of `stack`'s `Call stack` arg (format/call_stack.hpp).
inline std::string call_stack_text(const Trace& trace, const CallStack& stack) {
  std::string text;
  for (std::uint32_t i = 0; i < stack.depth; ++i) {
    const StackFrame& frame = trace.stack_frames[stack.first + i];
    if (i != 0) text.push_back(kineto::arg::kCallStackSeparator);
    if (frame.text != StackFrame::kNoText)
      text += trace.names[frame.text];
    else
      text += unsymbolised_frame_text(trace.modules, frame.address);
  }
  return text;
}

/// Writes the GPU side of a trace: API calls on their threads, device work on (device, stream)
/// rows, ac2g flows between them, allocations and CUPTI's overhead.
template <class WriteName, class Relative>
class GpuEventWriter {
 public:
  GpuEventWriter(const Trace& trace, JsonWriter& json, const WriteName& write_name, const Relative& relative)
      : trace_(trace), json_(json), write_name_(write_name), relative_(relative) {}

  void write_all(const std::function<void(std::string_view)>& flush, fmt::memory_buffer& out, std::size_t flush_bytes) {
    if (trace_.api_events.empty() && trace_.gpu_events.empty() && trace_.memory_events.empty() &&
        trace_.memory_tags.empty() && trace_.out_of_memory.empty() && trace_.overhead_events.empty() &&
        trace_.device_counters.empty())
      return;
    // A flow is drawn only between two slices that are both in the trace.
    correlations_.build(trace_);
    const auto maybe_flush = [&] {
      if (flush && out.size() >= flush_bytes) {
        flush(std::string_view(out.data(), out.size()));
        out.clear();
      }
    };
    for (const ApiEvent& call : trace_.api_events) {
      maybe_flush();
      write_call(call);
    }
    write_gpu_metadata();
    for (const GpuEvent& work : trace_.gpu_events) {
      maybe_flush();
      write_work(work);
    }
    for (const MemoryEvent& memory : trace_.memory_events) {
      maybe_flush();
      write_memory(memory);
    }
    for (const MemoryTag& tag : trace_.memory_tags) {
      maybe_flush();
      write_memory_tag(tag);
    }
    for (const OutOfMemoryEvent& failure : trace_.out_of_memory) {
      maybe_flush();
      write_out_of_memory(failure);
    }
    for (const OverheadEvent& overhead : trace_.overhead_events) {
      maybe_flush();
      write_overhead(overhead);
    }
    for (const DeviceCounterSample& sample : trace_.device_counters) {
      maybe_flush();
      write_device_counter(sample);
    }
  }

 private:
  /// `<Before>"<Key>": <value>`.
  template <const std::string_view& Before, const std::string_view& Key>
  void integer_arg(std::int64_t value) {
    json_.raw(key_text<Before, Key>);
    json_.integer(value);
  }
  template <const std::string_view& Category>
  void slice_opening(std::uint32_t name, std::int64_t pid, std::int64_t tid, std::int64_t start_ns,
                     std::int64_t duration_ns) {
    json_.raw(joined_text<chrome_piece::kSliceOpening, Category, chrome_piece::kNameKey>);
    write_name_(name);
    json_.raw(", \"pid\": ");
    json_.integer(pid);
    json_.raw(", \"tid\": ");
    json_.integer(tid);
    json_.raw(", \"ts\": ");
    json_.microseconds(relative_(start_ns));
    json_.raw(", \"dur\": ");
    json_.microseconds(duration_ns);
  }
  /// A flow's start ('s', at the launch) or end ('f', bound to the GPU work it enters).
  void flow(char phase, std::uint32_t correlation, std::int64_t pid, std::int64_t tid, std::int64_t ns) {
    json_.raw("  {\"ph\": \"");
    json_.character(phase);
    json_.raw("\", \"id\": ");
    json_.integer(correlation);
    json_.raw(", \"pid\": ");
    json_.integer(pid);
    json_.raw(", \"tid\": ");
    json_.integer(tid);
    json_.raw(", \"ts\": ");
    json_.microseconds(relative_(ns));
    using namespace chrome_piece;
    json_.raw(phase == 'f' ? joined_text<kFlowCategory, kineto::cat::kAc2g, kFlowName, kineto::cat::kAc2g, kFlowBoundEnd>
                           : joined_text<kFlowCategory, kineto::cat::kAc2g, kFlowName, kineto::cat::kAc2g, kFlowEnd>);
  }
  /// Opens args with the External id when there is one (Kineto writes it first, and only then):
  /// the next key needs no comma before it.
  void args_opening(std::uint64_t external_id) {
    json_.raw(", \"args\": {");
    if (external_id != 0) {
      integer_arg<json_piece::kNothing, kineto::arg::kExternalId>(static_cast<std::int64_t>(external_id));
      json_.raw(", ");
    }
  }
  /// Kineto's "memory bandwidth (GB/s)": bytes per ns, the string "N/A" for an instant copy.
  void bandwidth(std::uint64_t bytes, std::int64_t duration_ns) {
    json_.raw(key_text<json_piece::kComma, kineto::arg::kMemoryBandwidth>);
    if (duration_ns <= 0) {
      json_.raw("\"N/A\"");
      return;
    }
    json_.number(static_cast<double>(bytes) / static_cast<double>(duration_ns));
  }
  /// Kineto's floats, printed with six decimals.
  template <const std::string_view& Key>
  void float_arg(float value) {
    json_.raw(key_text<json_piece::kComma, Key>);
    if (!std::isfinite(value)) {
      json_.raw("\"inf\"");
      return;
    }
    json_.raw(floats_.text(value));
  }

  void write_call(const ApiEvent& call) {
    namespace arg = kineto::arg;
    const std::int64_t tid = trace_.threads[call.thread].os_tid;
    if (call.driver)
      slice_opening<kineto::cat::kCudaDriver>(call.name, trace_.pid, tid, call.start_ns, call.duration_ns());
    else
      slice_opening<kineto::cat::kCudaRuntime>(call.name, trace_.pid, tid, call.start_ns, call.duration_ns());
    args_opening(call.external_id);
    integer_arg<json_piece::kNothing, arg::kCbid>(call.cbid);
    integer_arg<json_piece::kComma, arg::kCorrelation>(call.correlation);
    json_.raw("}},\n");
    if (correlations_.has_work(call.correlation)) flow('s', call.correlation, trace_.pid, tid, call.start_ns);
  }

  static std::int64_t row_of(const GpuEvent& work) noexcept {
    if (work.kind == GpuEventKind::Sync) return std::max<std::int64_t>(work.stream, 0) + kSyncRowOffset;
    return work.stream;
  }

  /// A graph's work: its graph and node, as Kineto writes them on CUDA 12+, and the op or range
  /// that captured its node, with that scope's call stack, where known.
  void graph_args(const GpuEvent& work) {
    if (work.graph_id == 0 && work.graph_node_id == 0) return;
    integer_arg<json_piece::kComma, kineto::arg::kGraphId>(work.graph_id);
    integer_arg<json_piece::kComma, kineto::arg::kGraphNodeId>(static_cast<std::int64_t>(work.graph_node_id));
    if (work.captured_by < trace_.names.size()) {
      json_.raw(key_text<json_piece::kComma, kineto::arg::kCapturedBy>);
      write_name_(work.captured_by);
    }
    if (work.capture_stack < trace_.stacks.size()) {
      // A graph replays its nodes over and over: each stack's text is made once.
      if (capture_stack_texts_.empty()) capture_stack_texts_.resize(trace_.stacks.size());
      std::optional<std::string>& text = capture_stack_texts_[work.capture_stack];
      if (!text) text = call_stack_text(trace_, trace_.stacks[work.capture_stack]);
      json_.raw(key_text<json_piece::kComma, kineto::arg::kCaptureCallStack>);
      json_.string(*text);
    }
  }

  void write_work(const GpuEvent& work) {
    namespace arg = kineto::arg;
    namespace cat = kineto::cat;
    const std::int64_t pid = work.device;
    const std::int64_t tid = row_of(work);
    switch (work.kind) {
      case GpuEventKind::Kernel: {
        const KernelDetails& kernel = work.kernel;
        slice_opening<cat::kKernel>(work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        integer_arg<json_piece::kNothing, arg::kQueued>(kernel.queued_ns / 1000);  // Kineto writes µs, truncated
        integer_arg<json_piece::kComma, arg::kDevice>(work.device);
        integer_arg<json_piece::kComma, arg::kContext>(work.context);
        integer_arg<json_piece::kComma, arg::kStream>(work.stream);
        integer_arg<json_piece::kComma, arg::kCorrelation>(work.correlation);
        integer_arg<json_piece::kComma, arg::kRegistersPerThread>(kernel.registers_per_thread);
        integer_arg<json_piece::kComma, arg::kSharedMemory>(std::int64_t{kernel.static_shared_memory} + kernel.dynamic_shared_memory);
        float_arg<arg::kBlocksPerSm>(kernel.blocks_per_sm);
        float_arg<arg::kWarpsPerSm>(kernel.warps_per_sm);
        json_.raw(key_text<json_piece::kComma, arg::kGrid>);
        dims(kernel.grid);
        json_.raw(key_text<json_piece::kComma, arg::kBlock>);
        dims(kernel.block);
        integer_arg<json_piece::kComma, arg::kAchievedOccupancy>(kernel.est_achieved_occupancy_percent);
        graph_args(work);
        break;
      }
      case GpuEventKind::Memcpy:
      case GpuEventKind::Memset: {
        const CopyDetails& copy = work.copy;
        if (work.kind == GpuEventKind::Memcpy)
          slice_opening<cat::kGpuMemcpy>(work.name, pid, tid, work.start_ns, work.duration_ns());
        else
          slice_opening<cat::kGpuMemset>(work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        integer_arg<json_piece::kNothing, arg::kDevice>(work.device);
        integer_arg<json_piece::kComma, arg::kContext>(work.context);
        integer_arg<json_piece::kComma, arg::kStream>(work.stream);
        integer_arg<json_piece::kComma, arg::kCorrelation>(work.correlation);
        integer_arg<json_piece::kComma, arg::kBytes>(static_cast<std::int64_t>(copy.bytes));
        bandwidth(copy.bytes, work.duration_ns());
        graph_args(work);
        break;
      }
      case GpuEventKind::MemcpyPeer: {
        const CopyDetails& copy = work.copy;
        slice_opening<cat::kGpuMemcpy>(work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        integer_arg<json_piece::kNothing, arg::kFromDevice>(copy.source_device);
        integer_arg<json_piece::kComma, arg::kInDevice>(work.device);
        integer_arg<json_piece::kComma, arg::kToDevice>(copy.destination_device);
        integer_arg<json_piece::kComma, arg::kFromContext>(copy.source_context);
        integer_arg<json_piece::kComma, arg::kInContext>(work.context);
        integer_arg<json_piece::kComma, arg::kToContext>(copy.destination_context);
        integer_arg<json_piece::kComma, arg::kStream>(work.stream);
        integer_arg<json_piece::kComma, arg::kCorrelation>(work.correlation);
        integer_arg<json_piece::kComma, arg::kBytes>(static_cast<std::int64_t>(copy.bytes));
        bandwidth(copy.bytes, work.duration_ns());
        graph_args(work);
        break;
      }
      case GpuEventKind::Sync: {
        slice_opening<cat::kCudaSync>(work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        json_.raw(key_text<json_piece::kNothing, arg::kCudaSyncKind>);
        json_.string(sync_kind_name(work.sync.type));
        if (work.sync.type == 1 || work.sync.type == 2) integer_arg<json_piece::kComma, arg::kWaitOnCudaEventId>(work.sync.cuda_event_id);
        integer_arg<json_piece::kComma, arg::kStream>(work.stream);
        integer_arg<json_piece::kComma, arg::kCorrelation>(work.correlation);
        integer_arg<json_piece::kComma, arg::kDevice>(work.device);
        integer_arg<json_piece::kComma, arg::kContext>(work.context);
        break;
      }
      case GpuEventKind::Annotation:
        slice_opening<cat::kGpuUserAnnotation>(work.name, pid, tid, work.start_ns, work.duration_ns());
        integer_arg<json_piece::kArgsOpening, arg::kExternalId>(static_cast<std::int64_t>(work.external_id));
        break;
    }
    json_.raw("}},\n");
    if (correlations_.has_work(work.correlation) && correlations_.has_call(work.correlation) && correlations_.end_flow(work.correlation))
      flow('f', work.correlation, pid, tid, work.start_ns);
  }

  void dims(const std::uint32_t (&xyz)[3]) {
    json_.character('[');
    json_.integer(xyz[0]);
    json_.raw(", ");
    json_.integer(xyz[1]);
    json_.raw(", ");
    json_.integer(xyz[2]);
    json_.character(']');
  }

  void metadata(std::string_view name, std::int64_t pid, std::int64_t tid, std::string_view arg, std::string_view text,
                std::int64_t number, bool is_text) {
    metadata_opening(json_, name, relative_(trace_.window_start_ns), pid, tid, arg);
    if (is_text)
      json_.string(text);
    else
      json_.integer(number);
    json_.raw("}},\n");
  }

  /// Kineto's labels: one process per GPU ("GPU 0"), one thread per stream ("stream 7 ").
  void write_gpu_metadata() {
    namespace name = kineto::name;
    namespace arg = kineto::arg;
    constexpr std::int64_t kNoRow = -1;  // a device with counters only
    std::vector<std::pair<std::uint32_t, std::int64_t>> rows;
    for (const GpuEvent& work : trace_.gpu_events) rows.emplace_back(work.device, row_of(work));
    for (const DeviceCounterSample& sample : trace_.device_counters) rows.emplace_back(sample.device, kNoRow);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::int64_t last_device = -1;
    for (const auto& [device, row] : rows) {
      if (device != last_device) {
        last_device = device;
        metadata(name::kProcessName, device, 0, arg::kName, trace_.process_name, 0, true);
        metadata(name::kProcessLabels, device, 0, arg::kLabels, fmt::format("GPU {}", device), 0, true);
        metadata(name::kProcessSortIndex, device, 0, arg::kSortIndex, {}, kGpuSortIndexOffset + device, false);
      }
      if (row == kNoRow) continue;
      const std::string label = row >= kSyncRowOffset ? fmt::format("stream {} (sync)", row - kSyncRowOffset)
                                                      : fmt::format("stream {} ", row);
      metadata(name::kThreadName, device, row, arg::kName, label, 0, true);
      metadata(name::kThreadSortIndex, device, row, arg::kSortIndex, {}, row, false);
    }
  }

  /// The opening of a memory instant (`[memory]`, `[OutOfMemory]`, `[memory category]`) on the
  /// thread that recorded it, up to its args.
  void memory_instant_opening(std::string_view name, std::uint32_t thread, std::int64_t time_ns) {
    json_.raw("  {\"ph\": \"i\", \"cat\": \"");
    json_.raw(kineto::cat::kCpuInstantEvent);
    json_.raw("\", \"s\": \"t\", \"name\": \"");
    json_.raw(name);
    json_.raw("\", \"pid\": ");
    json_.integer(trace_.pid);
    json_.raw(", \"tid\": ");
    json_.integer(trace_.threads[thread].os_tid);
    json_.raw(", \"ts\": ");
    json_.microseconds(relative_(time_ns));
  }

  void write_memory(const MemoryEvent& memory) {
    namespace arg = kineto::arg;
    memory_instant_opening(kineto::name::kMemory, memory.thread, memory.time_ns);
    integer_arg<json_piece::kArgsOpening, arg::kDeviceType>(static_cast<std::int64_t>(memory.device_type));
    integer_arg<json_piece::kComma, arg::kDeviceId>(memory.device);
    integer_arg<json_piece::kComma, arg::kAddr>(static_cast<std::int64_t>(memory.address));
    integer_arg<json_piece::kComma, arg::kMemoryBytes>(memory.bytes);
    integer_arg<json_piece::kComma, arg::kTotalAllocated>(memory.total_allocated);
    integer_arg<json_piece::kComma, arg::kTotalReserved>(memory.total_reserved);
    json_.raw("}},\n");
  }

  void write_out_of_memory(const OutOfMemoryEvent& failure) {
    namespace arg = kineto::arg;
    memory_instant_opening(kineto::name::kOutOfMemory, failure.thread, failure.time_ns);
    integer_arg<json_piece::kArgsOpening, arg::kDeviceType>(static_cast<std::int64_t>(failure.device_type));
    integer_arg<json_piece::kComma, arg::kDeviceId>(failure.device);
    integer_arg<json_piece::kComma, arg::kMemoryBytes>(failure.bytes);
    integer_arg<json_piece::kComma, arg::kTotalAllocated>(failure.total_allocated);
    integer_arg<json_piece::kComma, arg::kTotalReserved>(failure.total_reserved);
    json_.raw("}},\n");
  }

  void write_memory_tag(const MemoryTag& tag) {
    namespace arg = kineto::arg;
    memory_instant_opening(kineto::name::kMemoryCategoryTag, tag.thread, tag.time_ns);
    integer_arg<json_piece::kArgsOpening, arg::kDeviceType>(static_cast<std::int64_t>(tag.device_type));
    integer_arg<json_piece::kComma, arg::kDeviceId>(tag.device);
    integer_arg<json_piece::kComma, arg::kAddr>(static_cast<std::int64_t>(tag.address));
    integer_arg<json_piece::kComma, arg::kMemoryBytes>(tag.bytes);
    json_.raw(", \"");
    json_.raw(arg::kMemoryCategory);
    json_.raw("\": ");
    json_.string(to_string(tag.category));
    json_.raw("}},\n");
  }

  /// A counter on the GPU's process, which Perfetto draws as a graph beside its streams.
  void write_device_counter(const DeviceCounterSample& sample) {
    static_assert(std::size(kineto::name::kDeviceCounters) ==
                  static_cast<std::size_t>(DeviceCounterKind::LimitedOtherwise) + 1);
    json_.raw(joined_text<chrome_piece::kCounterOpening, kineto::cat::kCounter, chrome_piece::kNameKey>);
    json_.string(kineto::name::kDeviceCounters[static_cast<std::size_t>(sample.kind)]);
    json_.raw(", \"pid\": ");
    json_.integer(sample.device);
    json_.raw(", \"tid\": 0, \"ts\": ");
    json_.microseconds(relative_(sample.time_ns));
    json_.raw(key_text<json_piece::kArgsOpening, kineto::arg::kValue>);
    json_.sample(sample.value);
    json_.raw("}},\n");
  }

  void write_overhead(const OverheadEvent& overhead) {
    slice_opening<kineto::cat::kOverhead>(overhead.name, -1, 0, overhead.start_ns, overhead.end_ns - overhead.start_ns);
    json_.raw("},\n");
  }

  const Trace& trace_;
  JsonWriter& json_;
  const WriteName& write_name_;
  const Relative& relative_;
  std::vector<std::optional<std::string>> capture_stack_texts_;  // by stack, as graph_args() needs them
  CorrelationSet<> correlations_;
  FixedFloatCache<> floats_;
};


/// The trace's modules and stackless events, where it has them (vocabulary.hpp's kModules).
template <class Deferred = void>
void write_modules(JsonWriter& json, const Trace& trace) {
  namespace top = kineto::key;
  if (trace.stackless_events != 0) {
    json.key(",\n  ", top::kStacklessEvents);
    json.integer(static_cast<std::int64_t>(trace.stackless_events));
  }
  if (trace.modules.empty()) return;
  json.key(",\n  ", top::kModules);
  json.character('[');
  for (std::size_t i = 0; i < trace.modules.size(); ++i) {
    const LoadedModule& module = trace.modules[i];
    json.raw(i == 0 ? "\n    " : ",\n    ");
    json.key("{", top::kModulePath);
    json.string(module.path);
    json.key(", ", top::kModuleBuildId);
    json.string(module.build_id);
    json.key(", ", top::kModuleBase);
    json.integer(static_cast<std::int64_t>(module.base));
    json.key(", ", top::kModuleStart);
    json.integer(static_cast<std::int64_t>(module.start));
    json.key(", ", top::kModuleEnd);
    json.integer(static_cast<std::int64_t>(module.end));
    json.character('}');
  }
  json.raw("\n  ]");
}

/// The fixed fragments of a CPU event, put together once from the vocabulary: the writer copies
/// each with one move, as it would a literal. Never destroyed: the writer thread may still be
/// writing a trace while an exiting process destroys its statics, and a static made on that
/// thread, after the exit hook that waits for it was installed, is destroyed before the hook runs.
template <class Deferred = void>
struct CpuEventFragments {
  std::string slice_args;     ///< `, "args": {"External id": `
  std::string after_external; ///< `, "Record function id": 0, "Ev Idx": `
  std::string forward_thread; ///< `, "Fwd thread id": `
  std::string sequence;       ///< `, "Sequence number": `
  std::string input_keys[4];  ///< `, "Input Dims": `, `, "Input type": `, `, "Concrete Inputs": `, `, "Input Strides": `
  std::string flops;          ///< `, "flops": `
  std::string instant_args;   ///< `, "s": "t", "args": {"Ev Idx": `
  std::string counter_args;   ///< `, "args": {"value": `
  std::string flow_end;       ///< `, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},\n`
  std::string flow_start;     ///< `, "cat": "fwdbwd", "name": "fwdbwd"},\n`

  static const CpuEventFragments& get() {
    static const CpuEventFragments* const fragments = [] {
      namespace arg = kineto::arg;
      const auto key = [](std::string_view before, std::string_view name) {
        return std::string(before).append("\"").append(name).append("\": ");
      };
      CpuEventFragments f;
      f.slice_args = key(", \"args\": {", arg::kExternalId);
      f.after_external = key(", ", arg::kRecordFunctionId).append("0").append(key(", ", arg::kEvIdx));
      f.forward_thread = key(", ", arg::kFwdThreadId);
      f.sequence = key(", ", arg::kSequenceNumber);
      f.input_keys[0] = key(", ", arg::kInputDims);
      f.input_keys[1] = key(", ", arg::kInputType);
      f.input_keys[2] = key(", ", arg::kConcreteInputs);
      f.input_keys[3] = key(", ", arg::kInputStrides);
      f.flops = key(", ", arg::kFlops);
      f.instant_args = key(", \"s\": \"t\", \"args\": {", arg::kEvIdx);
      f.counter_args = key(", \"args\": {", arg::kValue);
      const std::string flow = std::string(", \"cat\": \"").append(kineto::cat::kFwdbwd).append("\", \"name\": \"")
                                   .append(kineto::cat::kFwdbwd).append("\"");
      f.flow_end = flow + ", \"bp\": \"e\"},\n";
      f.flow_start = flow + "},\n";
      return new const CpuEventFragments(std::move(f));
    }();
    return *fragments;
  }
};

}  // namespace detail

/// Appends the Chrome-trace JSON text of `trace` to `out`. `trace_name` is written as traceName
/// (Kineto writes the output path there). With `flush`, whenever `out` holds more than 1 MiB its
/// content is handed to `flush` and cleared, so a writer to a file needs a bounded buffer; what is
/// left in `out` at the end is the caller's to write.
template <class Deferred = void>
void write_chrome_trace(const Trace& trace, fmt::memory_buffer& out, std::string_view trace_name,
                               const std::function<void(std::string_view)>& flush = nullptr) {
  namespace top = kineto::key;
  namespace arg = kineto::arg;
  namespace name = kineto::name;
  constexpr std::size_t kFlushBytes = std::size_t{1} << 20;
  detail::JsonWriter json(out);
  const std::int64_t base_ns = detail::chrome_trace_base_time_ns(trace.window_start_ns);
  const auto relative = [base_ns](std::int64_t ns) { return ns - base_ns; };

  json.key("{\n  ", top::kSchemaVersion);
  json.raw("1");
  json.key(",\n  ", top::kDeviceProperties);
  json.character('[');
  for (std::size_t i = 0; i < trace.devices.size(); ++i) {
    json.raw(i == 0 ? "\n    " : ",\n    ");
    detail::write_device_properties(json, trace.devices[i]);
  }
  json.raw(trace.devices.empty() ? "],\n" : "\n  ],\n");
  // One line, `"rank": N` with a space: HTA finds the rank with a regular expression.
  json.key("  ", top::kDistributedInfo);
  json.key("{", top::kBackend);
  json.string(trace.distributed.backend);
  json.key(", ", top::kRank);
  json.integer(trace.distributed.rank);
  json.key(", ", top::kWorldSize);
  json.integer(trace.distributed.world_size);
  detail::write_process_groups(json, trace.distributed);
  json.key("},\n  ", top::kDlprofVersion);
  json.raw("\"" DLPROF_VERSION_STRING "\"");
  json.key(",\n  ", top::kDroppedEvents);
  json.integer(static_cast<std::int64_t>(trace.dropped_events));
  json.key(",\n  ", top::kClippedRanges);
  json.integer(static_cast<std::int64_t>(trace.clipped_ranges));
  json.key(",\n  ", top::kOverflowedNames);
  json.integer(static_cast<std::int64_t>(trace.overflowed_names));
  json.key(",\n  ", top::kClock);
  json.string(trace.clock_source);
  if (const std::optional<ClockOffset>& offset = trace.distributed.clock_offset) {
    json.key(",\n  ", top::kClockOffset);
    json.key("{", top::kReferenceRank);
    json.integer(offset->reference_rank);
    json.key(", ", top::kOffsetNs);
    json.integer(offset->offset_ns);
    json.key(", ", top::kUncertaintyNs);
    json.integer(offset->uncertainty_ns);
    json.key(", ", top::kRoundTrips);
    json.integer(offset->round_trips);
    json.character('}');
  }
  if (!trace.flight_recorder_dump.empty()) {
    json.key(",\n  ", top::kFlightRecorder);
    json.string(trace.flight_recorder_dump);
  }
  if (trace.gpu.enabled) detail::write_gpu_collection_stats(json, trace.gpu);
  if (trace.dropped_thread_cpu_readings != 0) {
    json.key(",\n  ", top::kDroppedThreadCpuReadings);
    json.integer(static_cast<std::int64_t>(trace.dropped_thread_cpu_readings));
  }
  detail::write_modules(json, trace);
  for (const auto& [metadata_key, value] : trace.metadata) {
    json.raw(",\n  ");
    json.string(metadata_key);
    json.raw(": ");
    json.raw(value);
  }
  json.key(",\n  ", top::kDisplayTimeUnit);
  json.raw("\"ms\"");
  json.key(",\n  ", top::kBaseTimeNanoseconds);
  json.integer(base_ns);
  json.key(",\n  ", top::kTraceEvents);
  json.raw("[\n");

  // Process and thread names, as Kineto labels a CPU process.
  const std::int64_t start = relative(trace.window_start_ns);
  detail::metadata_opening(json, name::kProcessName, start, trace.pid, 0, arg::kName);
  json.string(trace.process_name);
  json.raw("}},\n");
  detail::metadata_opening(json, name::kProcessLabels, start, trace.pid, 0, arg::kLabels);
  json.string(name::kCpuLabel);
  json.raw("}},\n");
  detail::metadata_opening(json, name::kProcessSortIndex, start, trace.pid, 0, arg::kSortIndex);
  json.integer(trace.pid);
  json.raw("}},\n");
  for (const ThreadInfo& thread : trace.threads) {
    detail::metadata_opening(json, name::kThreadName, start, trace.pid, thread.os_tid, arg::kName);
    json.string(detail::thread_label(thread.os_tid, thread.name));
    json.raw("}},\n");
    detail::metadata_opening(json, name::kThreadSortIndex, start, trace.pid, thread.os_tid, arg::kSortIndex);
    json.integer(thread.os_tid);
    json.raw("}},\n");
  }

  // Names are escaped once, not once per event.
  fmt::memory_buffer escaped_names_buffer;
  std::vector<std::pair<std::size_t, std::size_t>> escaped_names;
  {
    detail::JsonWriter names_json(escaped_names_buffer);
    escaped_names.reserve(trace.names.size());
    for (const std::string& text : trace.names) {
      const std::size_t begin = escaped_names_buffer.size();
      names_json.string(text);
      escaped_names.emplace_back(begin, escaped_names_buffer.size() - begin);
    }
  }
  const auto write_name = [&](std::uint32_t index) {
    json.raw(std::string_view(escaped_names_buffer.data() + escaped_names[index].first, escaped_names[index].second));
  };

  // Each stack's `Call stack` arg, key and all, spelled once.
  std::vector<std::string> call_stack_args;
  call_stack_args.reserve(trace.stacks.size());
  for (const CallStack& stack : trace.stacks) {
    fmt::memory_buffer arg_text;
    detail::JsonWriter arg_json(arg_text);
    arg_json.key(", ", arg::kCallStack);
    arg_json.string(detail::call_stack_text(trace, stack));
    call_stack_args.emplace_back(arg_text.data(), arg_text.size());
  }

  const detail::CpuEventFragments<>& fragments = detail::CpuEventFragments<>::get();
  const std::vector<std::uint32_t> fwdbwd = detail::forward_backward_flows(trace);
  std::map<std::pair<std::uint32_t, std::int64_t>, std::size_t> collective_at;  // (thread, start) of its op
  for (std::size_t i = 0; i < trace.collectives.size(); ++i)
    collective_at.emplace(std::make_pair(trace.collectives[i].thread, trace.collectives[i].start_ns), i);
  std::int64_t event_index = 0;
  for (const TraceEvent& event : trace.events) {
    if (flush && out.size() >= kFlushBytes) {
      flush(std::string_view(out.data(), out.size()));
      out.clear();
    }
    // Kineto's field order: ph, cat, name, pid, tid, ts, then what the kind adds.
    json.raw(detail::event_opening(event.kind));
    write_name(event.name);
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(trace.threads[event.thread].os_tid);
    json.raw(", \"ts\": ");
    json.microseconds(relative(event.start_ns));
    switch (event.kind) {
      case EventKind::Range:
      case EventKind::Step:
      case EventKind::Op:
      case EventKind::PythonFrame:
        json.raw(", \"dur\": ");
        json.microseconds(event.duration_ns());
        json.raw(fragments.slice_args);
        json.integer(static_cast<std::int64_t>(event.external_id));
        json.raw(fragments.after_external);
        json.integer(event_index);
        if (event.sequence_number >= 0) {
          json.raw(fragments.forward_thread);
          json.integer(static_cast<std::int64_t>(event.forward_thread_id));
          json.raw(fragments.sequence);
          json.integer(event.sequence_number);
        }
        if (event.inputs != TraceEvent::kNoInputs) {  // JSON texts already, written as they are; empty: absent
          const OpInputs& inputs = trace.op_inputs[event.inputs];
          const std::uint32_t texts[] = {inputs.dims, inputs.types, inputs.concrete, inputs.strides};
          for (std::size_t i = 0; i < std::size(texts); ++i) {
            if (texts[i] == OpInputs::kNoText || trace.names[texts[i]].empty()) continue;
            json.raw(fragments.input_keys[i]);
            json.raw(trace.names[texts[i]]);
          }
          if (inputs.flops != 0) {
            json.raw(fragments.flops);
            json.integer(static_cast<std::int64_t>(inputs.flops));
          }
        }
        if (event.stack < call_stack_args.size()) json.raw(call_stack_args[event.stack]);
        if (event.kind == EventKind::Range && event.category != Category::User) {
          json.key(", ", arg::kDlprofCategory);
          json.string(to_string(event.category));
        }
        if (event.kind == EventKind::Op && event.category == Category::Communication && !collective_at.empty()) {
          const auto call = collective_at.find(std::make_pair(event.thread, event.start_ns));
          if (call != collective_at.end()) detail::write_collective_args(json, trace.collectives[call->second]);
        }
        break;
      case EventKind::Instant:
        json.raw(fragments.instant_args);
        json.integer(event_index);
        break;
      case EventKind::Counter:
        json.raw(fragments.counter_args);
        json.sample(event.value);
        break;
    }
    json.raw("}},\n");
    if (!fwdbwd.empty() && fwdbwd[static_cast<std::size_t>(event_index)] != 0) {
      // Flows follow their slice; only the end binds to its enclosing slice.
      const bool backward = event.category == Category::Backward;
      json.raw(backward ? "  {\"ph\": \"f\", \"id\": " : "  {\"ph\": \"s\", \"id\": ");
      json.integer(fwdbwd[static_cast<std::size_t>(event_index)]);
      json.raw(", \"pid\": ");
      json.integer(trace.pid);
      json.raw(", \"tid\": ");
      json.integer(trace.threads[event.thread].os_tid);
      json.raw(", \"ts\": ");
      json.microseconds(relative(event.start_ns));
      json.raw(backward ? fragments.flow_end : fragments.flow_start);
    }
    ++event_index;
  }
  detail::write_thread_cpu(json, trace, relative);
  detail::write_memory_by_category(json, trace, relative);
  detail::GpuEventWriter gpu_writer(trace, json, write_name, relative);
  gpu_writer.write_all(flush, out, kFlushBytes);
  json.raw("  {\"ph\": \"i\", \"s\": \"g\", \"name\": \"");
  json.raw(name::kRecordWindowEnd);
  json.raw("\", \"pid\": \"\", \"tid\": \"\", \"ts\": ");
  json.microseconds(relative(trace.window_end_ns));
  json.key("}\n  ],\n  ", top::kTraceName);
  json.string(trace_name);
  json.raw("\n}\n");
}

/// Writes `trace` to `path` as torch.profiler/Kineto Chrome-trace JSON (gzip when `path` ends in
/// ".gz"), atomically (format/atomic_file.hpp): a temporary file in the same directory, then a
/// rename. A symbolic link is written through (its target replaced, the link kept); a character
/// device or a FIFO is written in place, never replaced. Streams through a bounded buffer, so
/// memory stays flat however many events the trace holds. Throws std::runtime_error naming the
/// path and the reason when it cannot.
template <class Deferred = void>
void save_chrome_trace(const Trace& trace, const std::string& path) {
  detail::AtomicFile file(path, detail::ends_with(path, ".gz"));
  fmt::memory_buffer buffer;
  write_chrome_trace(trace, buffer, path, [&file](std::string_view chunk) { file.write(chunk); });
  file.write(std::string_view(buffer.data(), buffer.size()));
  file.commit();
}

DLPROF_END_NAMESPACE
