// dlprof/export/chrome_trace.hpp: writes a Trace as the Chrome-trace JSON that torch.profiler
// (Kineto) writes, so TensorBoard's profiler plugin, Holistic Trace Analysis and Perfetto open it
// unchanged. The field-by-field contract is ../shared/TRACE_FORMAT.md §6; in short:
//  * top level in Kineto's order: schemaVersion, deviceProperties, distributedInfo (one line,
//    `"rank": N` with a space, which HTA's rank regex needs), metadata, displayTimeUnit,
//    baseTimeNanoseconds, traceEvents (Record Window End last), traceName;
//  * ts/dur in microseconds with exactly three decimals, relative to baseTimeNanoseconds, which
//    is the window start floored to Kineto's 3-month interval so every rank shares it;
//  * ranges and ProfilerStep#N are `user_annotation` slices with External id / Ev Idx args,
//    Python frames (read from torch's traces) `python_function` slices;
//  * every string valid UTF-8 (a name that is not gets U+FFFD, detail/escape.hpp), and counter
//    samples that are not finite as the strings "NaN", "Infinity" and "-Infinity": the file is
//    JSON that Python, HTA and Perfetto accept.
// Formatting writes into one reused buffer with fmt's integer formatter; nothing is allocated
// per event.
#pragma once

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <iterator>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/escape.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Kineto's ChromeTraceBaseTime: Unix time floored to a 3-month interval, in ns.
inline std::int64_t chrome_trace_base_time_ns(std::int64_t unix_ns) noexcept {
  constexpr std::int64_t kInterval_s = 7'889'238;
  const std::int64_t seconds = unix_ns / 1'000'000'000;
  return (seconds / kInterval_s) * kInterval_s * 1'000'000'000;
}

/// JSON has no NaN or infinity. A counter sample that is not finite is written as the string
/// "NaN", "Infinity" or "-Infinity" (Python's json module and JavaScript spell them so, bare), and
/// the reader takes those strings back as numbers: the file stays valid JSON and the sample
/// round-trips.
inline constexpr std::string_view kNonFiniteNames[] = {"NaN", "Infinity", "-Infinity"};

inline std::string_view non_finite_name(double value) noexcept {
  return std::isnan(value) ? kNonFiniteNames[0] : value > 0 ? kNonFiniteNames[1] : kNonFiniteNames[2];
}

constexpr bool is_non_finite_name(std::string_view text) noexcept {
  return text == kNonFiniteNames[0] || text == kNonFiniteNames[1] || text == kNonFiniteNames[2];
}

class JsonWriter {
 public:
  explicit JsonWriter(fmt::memory_buffer& out) noexcept : out_(out) {}

  /// Appends by growing the buffer and copying: inlined, a literal fragment becomes a few moves
  /// of a known size (buffer::append copies in a loop through a capacity check).
  DLPROF_ALWAYS_INLINE void raw(std::string_view text) {
    const std::size_t size = out_.size();
    out_.resize(size + text.size());
    std::memcpy(out_.data() + size, text.data(), text.size());
  }
  void character(char c) { out_.push_back(c); }

  void integer(std::int64_t value) {
    const fmt::format_int formatted(value);
    raw(std::string_view(formatted.data(), formatted.size()));
  }

  /// Nanoseconds as microseconds with exactly three decimals (Kineto's fmtTs), clamped at 0.
  void microseconds(std::int64_t ns) {
    if (ns < 0) ns = 0;
    integer(ns / 1000);
    const auto fraction = static_cast<int>(ns % 1000);
    const char digits[4] = {'.', static_cast<char>('0' + fraction / 100), static_cast<char>('0' + fraction / 10 % 10),
                            static_cast<char>('0' + fraction % 10)};
    raw(std::string_view(digits, 4));
  }

  /// A finite number in its shortest exact form; NaN and infinities become null (JSON has none).
  void number(double value) {
    if (!std::isfinite(value)) {
      raw("null");
      return;
    }
    fmt::format_to(std::back_inserter(out_), "{}", value);
  }

  /// A counter's sample: a number, or for NaN and the infinities their name as a string
  /// (non_finite_name()), which the reader takes back as the number.
  void sample(double value) {
    if (std::isfinite(value)) {
      fmt::format_to(std::back_inserter(out_), "{}", value);
      return;
    }
    character('"');
    raw(non_finite_name(value));
    character('"');
  }

  /// A JSON string literal (detail/escape.hpp): quotes, backslashes and control characters
  /// escaped, invalid UTF-8 replaced by U+FFFD.
  void string(std::string_view text) { append_json_string(out_, text); }

 private:
  fmt::memory_buffer& out_;
};

/// The start of an event's object, up to its name: `ph` and `cat` by kind.
constexpr std::string_view event_opening(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::Range:
    case EventKind::Step: return "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": ";
    case EventKind::Op: return "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": ";
    case EventKind::PythonFrame: return "  {\"ph\": \"X\", \"cat\": \"python_function\", \"name\": ";
    case EventKind::Instant: return "  {\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"name\": ";
    case EventKind::Counter: return "  {\"ph\": \"C\", \"cat\": \"counter\", \"name\": ";
    case EventKind::OpDetails:
    case EventKind::OpInputs:
    case EventKind::Memory:
    case EventKind::MemoryTotals: break;  // never in a Trace
  }
  return "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": ";
}

inline void write_device_properties(JsonWriter& json, const DeviceProperties& device) {
  json.raw("{\"id\": ");
  json.integer(device.id);
  json.raw(", \"name\": ");
  json.string(device.name);
  const std::pair<std::string_view, std::int64_t> fields[] = {
      {"totalGlobalMem", device.total_global_mem},
      {"computeMajor", device.compute_major},
      {"computeMinor", device.compute_minor},
      {"maxThreadsPerBlock", device.max_threads_per_block},
      {"maxThreadsPerMultiprocessor", device.max_threads_per_multiprocessor},
      {"regsPerBlock", device.regs_per_block},
      {"warpSize", device.warp_size},
      {"sharedMemPerBlock", device.shared_mem_per_block},
      {"numSms", device.num_sms},
      {"regsPerMultiprocessor", device.regs_per_multiprocessor},
      {"sharedMemPerBlockOptin", device.shared_mem_per_block_optin},
      {"sharedMemPerMultiprocessor", device.shared_mem_per_multiprocessor},
  };
  for (const auto& [key, value] : fields) {
    json.raw(", \"");
    json.raw(key);
    json.raw("\": ");
    json.integer(value);
  }
  json.character('}');
}


/// Kineto's spelling of CUPTI's copy and memory kinds, for "Memcpy HtoD (Pageable -> Device)".
constexpr std::string_view memcpy_kind_name(std::uint8_t kind) noexcept {
  constexpr std::string_view kNames[] = {"<unknown>", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                         "AtoD",      "DtoA", "DtoD", "HtoH", "PtoP"};
  return kind < std::size(kNames) ? kNames[kind] : "<unknown>";
}
constexpr std::string_view memory_kind_name(std::uint8_t kind) noexcept {
  constexpr std::string_view kNames[] = {"Unknown", "Pageable", "Pinned", "Device",
                                         "Array",   "Managed",  "Device Static", "Managed Static"};
  return kind < std::size(kNames) ? kNames[kind] : "Unrecognized";
}
/// CUpti_ActivitySynchronizationType as Kineto names it.
constexpr std::string_view sync_kind_name(std::uint8_t type) noexcept {
  switch (type) {
    case 1: return "Event Sync";
    case 2: return "Stream Wait Event";
    case 3: return "Stream Sync";
    case 4: return "Context Sync";
    default: return "Unknown Sync";
  }
}

/// Synchronisations get a row of their own next to their stream's ("stream 7 (sync)"): a CPU-side
/// wait overlaps the kernels it waits for, and slices on one row must nest.
inline constexpr std::int64_t kSyncRowOffset = 1'000'000;
/// GPU processes sort after every CPU process (Kineto's kExceedMaxPid).
inline constexpr std::int64_t kGpuSortIndexOffset = 5'000'000;

inline void write_gpu_collection_stats(JsonWriter& json, const GpuCollectionStats& stats) {
  const std::pair<std::string_view, std::uint64_t> counters[] = {
      {"dlprof_gpu_records", stats.records},
      {"dlprof_gpu_dropped_records", stats.dropped_records},
      {"dlprof_cupti_dropped_records", stats.cupti_dropped_records},
      {"dlprof_gpu_unknown_records", stats.unknown_records},
      {"dlprof_gpu_late_records", stats.late_records},
      {"dlprof_gpu_clipped_annotations", stats.clipped_annotations},
  };
  for (const auto& [key, value] : counters) {
    json.raw(",\n  \"");
    json.raw(key);
    json.raw("\": ");
    json.integer(static_cast<std::int64_t>(value));
  }
  if (!stats.cupti_version.empty()) {
    json.raw(",\n  \"cupti_version\": ");
    json.string(stats.cupti_version);
  }
  if (!stats.driver_version.empty()) {
    json.raw(",\n  \"cuda_driver_version\": ");
    json.string(stats.driver_version);
  }
}

/// Which correlation ids of a trace have an API call and which have device work, for the ac2g
/// flows: a flow is drawn only between two slices that are both in the trace. CUPTI numbers calls
/// consecutively, so a window's ids are dense and a byte per id beats a hash set by far; ids
/// spread too thinly fall back to a sorted list.
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

  /// Syncs are waits, not launched work: Kineto draws no flow to them either.
  static bool is_launched_work(const GpuEvent& work) noexcept {
    return work.correlation != 0 && work.kind != GpuEventKind::Annotation && work.kind != GpuEventKind::Sync;
  }

 private:
  static constexpr std::uint8_t kWork = 1;
  static constexpr std::uint8_t kCall = 2;

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
class FixedFloatCache {
 public:
  std::string_view text(float value) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    Entry& entry = entries_[(bits * 2654435761u) >> (32 - kIndexBits)];
    if (!entry.used || entry.bits != bits) {
      const auto end = fmt::format_to_n(entry.text, sizeof(entry.text), "{:f}", value);
      entry.size = static_cast<std::uint8_t>(std::min(end.size, sizeof(entry.text)));
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
inline std::vector<std::uint32_t> forward_backward_flows(const Trace& trace) {
  struct Key {
    std::uint64_t thread;
    std::int64_t sequence;
    bool operator==(const Key& other) const noexcept { return thread == other.thread && sequence == other.sequence; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return std::hash<std::uint64_t>()(key.thread * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(key.sequence));
    }
  };
  std::unordered_map<Key, std::size_t, KeyHash> forward_of;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind != EventKind::Op || event.sequence_number < 0 || event.category == Category::Backward) continue;
    auto [found, inserted] = forward_of.try_emplace(Key{event.forward_thread_id, event.sequence_number}, i);
    if (!inserted && trace.events[found->second].start_ns <= event.start_ns) found->second = i;
  }
  if (forward_of.empty()) return {};
  std::vector<std::uint32_t> flows(trace.events.size(), 0);
  std::uint32_t next_id = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (event.kind != EventKind::Op || event.sequence_number < 0 || event.category != Category::Backward) continue;
    const auto forward = forward_of.find(Key{event.forward_thread_id, event.sequence_number});
    if (forward == forward_of.end() || flows[forward->second] != 0) continue;
    flows[forward->second] = flows[i] = ++next_id;
  }
  return flows;
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
        trace_.overhead_events.empty())
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
    for (const OverheadEvent& overhead : trace_.overhead_events) {
      maybe_flush();
      write_overhead(overhead);
    }
  }

 private:
  /// `key` is the whole separator and key, `, "device": `: one copy instead of three.
  void integer_arg(std::string_view key, std::int64_t value) {
    json_.raw(key);
    json_.integer(value);
  }
  void slice_opening(std::string_view category, std::uint32_t name, std::int64_t pid, std::int64_t tid,
                     std::int64_t start_ns, std::int64_t duration_ns) {
    json_.raw("  {\"ph\": \"X\", \"cat\": \"");
    json_.raw(category);
    json_.raw("\", \"name\": ");
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
    json_.raw(phase == 'f' ? ", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"},\n"
                           : ", \"cat\": \"ac2g\", \"name\": \"ac2g\"},\n");
  }
  /// Opens args with the External id when there is one (Kineto writes it first, and only then).
  void args_opening(std::uint64_t external_id) {
    json_.raw(", \"args\": {");
    if (external_id != 0) {
      json_.raw("\"External id\": ");
      json_.integer(static_cast<std::int64_t>(external_id));
      json_.raw(", ");
    }
  }
  /// Kineto's "memory bandwidth (GB/s)": bytes per ns, the string "N/A" for an instant copy.
  void bandwidth(std::uint64_t bytes, std::int64_t duration_ns) {
    json_.raw(", \"memory bandwidth (GB/s)\": ");
    if (duration_ns <= 0) {
      json_.raw("\"N/A\"");
      return;
    }
    json_.number(static_cast<double>(bytes) / static_cast<double>(duration_ns));
  }
  /// Kineto's floats, printed with six decimals.
  void float_arg(std::string_view key, float value) {
    json_.raw(key);
    if (!std::isfinite(value)) {
      json_.raw("\"inf\"");
      return;
    }
    json_.raw(floats_.text(value));
  }

  void write_call(const ApiEvent& call) {
    const std::int64_t tid = trace_.threads[call.thread].os_tid;
    slice_opening(call.driver ? "cuda_driver" : "cuda_runtime", call.name, trace_.pid, tid, call.start_ns,
                  call.duration_ns());
    args_opening(call.external_id);
    json_.raw("\"cbid\": ");
    json_.integer(call.cbid);
    integer_arg(", \"correlation\": ", call.correlation);
    json_.raw("}},\n");
    if (correlations_.has_work(call.correlation)) flow('s', call.correlation, trace_.pid, tid, call.start_ns);
  }

  static std::int64_t row_of(const GpuEvent& work) noexcept {
    if (work.kind == GpuEventKind::Sync) return std::max<std::int64_t>(work.stream, 0) + kSyncRowOffset;
    return work.stream;
  }

  void write_work(const GpuEvent& work) {
    const std::int64_t pid = work.device;
    const std::int64_t tid = row_of(work);
    switch (work.kind) {
      case GpuEventKind::Kernel: {
        const KernelDetails& kernel = work.kernel;
        slice_opening("kernel", work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        json_.raw("\"queued\": ");
        json_.integer(kernel.queued_ns / 1000);  // Kineto writes µs, truncated
        integer_arg(", \"device\": ", work.device);
        integer_arg(", \"context\": ", work.context);
        integer_arg(", \"stream\": ", work.stream);
        integer_arg(", \"correlation\": ", work.correlation);
        integer_arg(", \"registers per thread\": ", kernel.registers_per_thread);
        integer_arg(", \"shared memory\": ", std::int64_t{kernel.static_shared_memory} + kernel.dynamic_shared_memory);
        float_arg(", \"blocks per SM\": ", kernel.blocks_per_sm);
        float_arg(", \"warps per SM\": ", kernel.warps_per_sm);
        json_.raw(", \"grid\": ");
        dims(kernel.grid);
        json_.raw(", \"block\": ");
        dims(kernel.block);
        integer_arg(", \"est. achieved occupancy %\": ", kernel.est_achieved_occupancy_percent);
        break;
      }
      case GpuEventKind::Memcpy:
      case GpuEventKind::Memset: {
        const CopyDetails& copy = work.copy;
        slice_opening(work.kind == GpuEventKind::Memcpy ? "gpu_memcpy" : "gpu_memset", work.name, pid, tid,
                      work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        json_.raw("\"device\": ");
        json_.integer(work.device);
        integer_arg(", \"context\": ", work.context);
        integer_arg(", \"stream\": ", work.stream);
        integer_arg(", \"correlation\": ", work.correlation);
        integer_arg(", \"bytes\": ", static_cast<std::int64_t>(copy.bytes));
        bandwidth(copy.bytes, work.duration_ns());
        break;
      }
      case GpuEventKind::MemcpyPeer: {
        const CopyDetails& copy = work.copy;
        slice_opening("gpu_memcpy", work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        json_.raw("\"fromDevice\": ");
        json_.integer(copy.source_device);
        integer_arg(", \"inDevice\": ", work.device);
        integer_arg(", \"toDevice\": ", copy.destination_device);
        integer_arg(", \"fromContext\": ", copy.source_context);
        integer_arg(", \"inContext\": ", work.context);
        integer_arg(", \"toContext\": ", copy.destination_context);
        integer_arg(", \"stream\": ", work.stream);
        integer_arg(", \"correlation\": ", work.correlation);
        integer_arg(", \"bytes\": ", static_cast<std::int64_t>(copy.bytes));
        bandwidth(copy.bytes, work.duration_ns());
        break;
      }
      case GpuEventKind::Sync: {
        slice_opening("cuda_sync", work.name, pid, tid, work.start_ns, work.duration_ns());
        args_opening(work.external_id);
        json_.raw("\"cuda_sync_kind\": ");
        json_.string(sync_kind_name(work.sync.type));
        if (work.sync.type == 1 || work.sync.type == 2) integer_arg(", \"wait_on_cuda_event_id\": ", work.sync.cuda_event_id);
        integer_arg(", \"stream\": ", work.stream);
        integer_arg(", \"correlation\": ", work.correlation);
        integer_arg(", \"device\": ", work.device);
        integer_arg(", \"context\": ", work.context);
        break;
      }
      case GpuEventKind::Annotation:
        slice_opening("gpu_user_annotation", work.name, pid, tid, work.start_ns, work.duration_ns());
        json_.raw(", \"args\": {\"External id\": ");
        json_.integer(static_cast<std::int64_t>(work.external_id));
        break;
    }
    json_.raw("}},\n");
    if (correlations_.has_work(work.correlation) && correlations_.has_call(work.correlation))
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
    json_.raw("  {\"name\": \"");
    json_.raw(name);
    json_.raw("\", \"ph\": \"M\", \"ts\": ");
    json_.microseconds(relative_(trace_.window_start_ns));
    json_.raw(", \"pid\": ");
    json_.integer(pid);
    json_.raw(", \"tid\": ");
    json_.integer(tid);
    json_.raw(", \"args\": {\"");
    json_.raw(arg);
    json_.raw("\": ");
    if (is_text)
      json_.string(text);
    else
      json_.integer(number);
    json_.raw("}},\n");
  }

  /// Kineto's labels: one process per GPU ("GPU 0"), one thread per stream ("stream 7 ").
  void write_gpu_metadata() {
    std::vector<std::pair<std::uint32_t, std::int64_t>> rows;
    for (const GpuEvent& work : trace_.gpu_events) rows.emplace_back(work.device, row_of(work));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::int64_t last_device = -1;
    for (const auto& [device, row] : rows) {
      if (device != last_device) {
        last_device = device;
        metadata("process_name", device, 0, "name", trace_.process_name, 0, true);
        metadata("process_labels", device, 0, "labels", fmt::format("GPU {}", device), 0, true);
        metadata("process_sort_index", device, 0, "sort_index", {}, kGpuSortIndexOffset + device, false);
      }
      const std::string label = row >= kSyncRowOffset ? fmt::format("stream {} (sync)", row - kSyncRowOffset)
                                                      : fmt::format("stream {} ", row);
      metadata("thread_name", device, row, "name", label, 0, true);
      metadata("thread_sort_index", device, row, "sort_index", {}, row, false);
    }
  }

  void write_memory(const MemoryEvent& memory) {
    json_.raw("  {\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\", \"pid\": ");
    json_.integer(trace_.pid);
    json_.raw(", \"tid\": ");
    json_.integer(trace_.threads[memory.thread].os_tid);
    json_.raw(", \"ts\": ");
    json_.microseconds(relative_(memory.time_ns));
    integer_arg(", \"args\": {\"Device Type\": ", static_cast<std::int64_t>(memory.device_type));
    integer_arg(", \"Device Id\": ", memory.device);
    integer_arg(", \"Addr\": ", static_cast<std::int64_t>(memory.address));
    integer_arg(", \"Bytes\": ", memory.bytes);
    integer_arg(", \"Total Allocated\": ", memory.total_allocated);
    integer_arg(", \"Total Reserved\": ", memory.total_reserved);
    json_.raw("}},\n");
  }

  void write_overhead(const OverheadEvent& overhead) {
    slice_opening("overhead", overhead.name, -1, 0, overhead.start_ns, overhead.end_ns - overhead.start_ns);
    json_.raw("},\n");
  }

  const Trace& trace_;
  JsonWriter& json_;
  const WriteName& write_name_;
  const Relative& relative_;
  CorrelationSet correlations_;
  FixedFloatCache floats_;
};

}  // namespace detail

/// Appends the Chrome-trace JSON text of `trace` to `out`. `trace_name` is written as traceName
/// (Kineto writes the output path there). With `flush`, whenever `out` holds more than 1 MiB its
/// content is handed to `flush` and cleared, so a writer to a file needs a bounded buffer; what is
/// left in `out` at the end is the caller's to write.
inline void write_chrome_trace(const Trace& trace, fmt::memory_buffer& out, std::string_view trace_name,
                               const std::function<void(std::string_view)>& flush = nullptr) {
  constexpr std::size_t kFlushBytes = std::size_t{1} << 20;
  detail::JsonWriter json(out);
  const std::int64_t base_ns = detail::chrome_trace_base_time_ns(trace.window_start_ns);
  const auto relative = [base_ns](std::int64_t ns) { return ns - base_ns; };

  json.raw("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [");
  for (std::size_t i = 0; i < trace.devices.size(); ++i) {
    json.raw(i == 0 ? "\n    " : ",\n    ");
    detail::write_device_properties(json, trace.devices[i]);
  }
  json.raw(trace.devices.empty() ? "],\n" : "\n  ],\n");
  json.raw("  \"distributedInfo\": {\"backend\": ");
  json.string(trace.distributed.backend);
  json.raw(", \"rank\": ");
  json.integer(trace.distributed.rank);
  json.raw(", \"world_size\": ");
  json.integer(trace.distributed.world_size);
  json.raw("},\n  \"dlprof_version\": \"" DLPROF_VERSION_STRING "\",\n  \"dlprof_dropped_events\": ");
  json.integer(static_cast<std::int64_t>(trace.dropped_events));
  json.raw(",\n  \"dlprof_clipped_ranges\": ");
  json.integer(static_cast<std::int64_t>(trace.clipped_ranges));
  json.raw(",\n  \"dlprof_overflowed_names\": ");
  json.integer(static_cast<std::int64_t>(trace.overflowed_names));
  json.raw(",\n  \"dlprof_clock\": ");
  json.string(trace.clock_source);
  if (trace.gpu.enabled) detail::write_gpu_collection_stats(json, trace.gpu);
  for (const auto& [key, value] : trace.metadata) {
    json.raw(",\n  ");
    json.string(key);
    json.raw(": ");
    json.raw(value);
  }
  json.raw(",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ");
  json.integer(base_ns);
  json.raw(",\n  \"traceEvents\": [\n");

  // Process and thread names, as Kineto labels a CPU process.
  json.raw("  {\"name\": \"process_name\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative(trace.window_start_ns));
  json.raw(", \"pid\": ");
  json.integer(trace.pid);
  json.raw(", \"tid\": 0, \"args\": {\"name\": ");
  json.string(trace.process_name);
  json.raw("}},\n  {\"name\": \"process_labels\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative(trace.window_start_ns));
  json.raw(", \"pid\": ");
  json.integer(trace.pid);
  json.raw(", \"tid\": 0, \"args\": {\"labels\": \"CPU\"}},\n  {\"name\": \"process_sort_index\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative(trace.window_start_ns));
  json.raw(", \"pid\": ");
  json.integer(trace.pid);
  json.raw(", \"tid\": 0, \"args\": {\"sort_index\": ");
  json.integer(trace.pid);
  json.raw("}},\n");
  for (const ThreadInfo& thread : trace.threads) {
    json.raw("  {\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": ");
    json.microseconds(relative(trace.window_start_ns));
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(thread.os_tid);
    json.raw(", \"args\": {\"name\": ");
    json.string(fmt::format("thread {} ({})", thread.os_tid, thread.name));
    json.raw("}},\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"ts\": ");
    json.microseconds(relative(trace.window_start_ns));
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(thread.os_tid);
    json.raw(", \"args\": {\"sort_index\": ");
    json.integer(thread.os_tid);
    json.raw("}},\n");
  }

  // Names are escaped once, not once per event.
  fmt::memory_buffer escaped_names_buffer;
  std::vector<std::pair<std::size_t, std::size_t>> escaped_names;
  {
    detail::JsonWriter names_json(escaped_names_buffer);
    escaped_names.reserve(trace.names.size());
    for (const std::string& name : trace.names) {
      const std::size_t begin = escaped_names_buffer.size();
      names_json.string(name);
      escaped_names.emplace_back(begin, escaped_names_buffer.size() - begin);
    }
  }
  const auto write_name = [&](std::uint32_t name) {
    json.raw(std::string_view(escaped_names_buffer.data() + escaped_names[name].first, escaped_names[name].second));
  };

  const std::vector<std::uint32_t> fwdbwd = detail::forward_backward_flows(trace);
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
        json.raw(", \"args\": {\"External id\": ");
        json.integer(static_cast<std::int64_t>(event.external_id));
        json.raw(", \"Record function id\": 0, \"Ev Idx\": ");
        json.integer(event_index);
        if (event.sequence_number >= 0) {
          json.raw(", \"Fwd thread id\": ");
          json.integer(static_cast<std::int64_t>(event.forward_thread_id));
          json.raw(", \"Sequence number\": ");
          json.integer(event.sequence_number);
        }
        if (event.inputs != TraceEvent::kNoInputs) {  // JSON texts already, written as they are; empty: absent
          const OpInputs& inputs = trace.op_inputs[event.inputs];
          const std::pair<std::string_view, std::uint32_t> texts[] = {
              {", \"Input Dims\": ", inputs.dims}, {", \"Input type\": ", inputs.types}, {", \"Concrete Inputs\": ", inputs.concrete}};
          for (const auto& [key, text] : texts) {
            if (trace.names[text].empty()) continue;
            json.raw(key);
            json.raw(trace.names[text]);
          }
          if (inputs.flops != 0) {
            json.raw(", \"flops\": ");
            json.integer(static_cast<std::int64_t>(inputs.flops));
          }
        }
        break;
      case EventKind::OpDetails:
      case EventKind::OpInputs:
      case EventKind::Memory:
      case EventKind::MemoryTotals: break;  // never in a Trace
      case EventKind::Instant:
        json.raw(", \"s\": \"t\", \"args\": {\"Ev Idx\": ");
        json.integer(event_index);
        break;
      case EventKind::Counter:
        json.raw(", \"args\": {\"value\": ");
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
      json.raw(backward ? ", \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\", \"bp\": \"e\"},\n"
                        : ", \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\"},\n");
    }
    ++event_index;
  }
  detail::GpuEventWriter gpu_writer(trace, json, write_name, relative);
  gpu_writer.write_all(flush, out, kFlushBytes);
  json.raw("  {\"ph\": \"i\", \"s\": \"g\", \"name\": \"Record Window End\", \"pid\": \"\", \"tid\": \"\", \"ts\": ");
  json.microseconds(relative(trace.window_end_ns));
  json.raw("}\n  ],\n  \"traceName\": ");
  json.string(trace_name);
  json.raw("\n}\n");
}

namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

inline bool ends_with(std::string_view text, std::string_view suffix) noexcept {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

/// SIGPIPE held off the calling thread while it writes to a FIFO: a reader that goes away makes
/// the write fail with EPIPE, as for any other write error, instead of ending the process.
class SigpipeBlocked {
 public:
  SigpipeBlocked() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    already_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &previous_) == 0 && sigismember(&previous_, SIGPIPE) == 0;
  }
  ~SigpipeBlocked() {
    if (!blocked_) return;
    sigset_t pending;
    sigpending(&pending);
    if (!already_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);  // the one our write raised: taken, never delivered
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
  bool already_pending_ = false;
  bool blocked_ = false;
};

/// The file a trace (or a report) is written to; gzip-compressed when asked. A regular file, or
/// a path that does not exist yet, is written under a temporary name in the same directory and
/// renamed into place by commit(), so a reader sees either nothing or the whole file. A symbolic
/// link is followed first: its target is replaced (created when it does not exist) and the link
/// stays a link. A character device or a FIFO is opened and written as it is, never replaced
/// (saving to /dev/null as root must not replace /dev/null; opening a FIFO waits for its reader).
/// Anything else (a directory, a block device, a socket) is refused. Destroyed without commit(),
/// it removes its temporary file. Errors throw std::runtime_error "dlprof: cannot write <what>
/// '<path>': <step>: <reason>", naming the path as given.
class AtomicFile {
 public:
  AtomicFile(std::string path, bool gzip, std::string_view what = "trace")
      : path_(std::move(path)), what_(what), gzip_(gzip) {
    // stat() follows links as open() will, /proc's magic ones (/dev/stdout) included.
    struct stat status {};
    if (::stat(path_.c_str(), &status) == 0 && !S_ISREG(status.st_mode)) {
      if (!S_ISCHR(status.st_mode) && !S_ISFIFO(status.st_mode))
        fail_because(S_ISDIR(status.st_mode) ? "it is a directory"
                                             : "it is not a regular file, a character device or a FIFO");
      direct_ = true;
    }
    errno = 0;
    if (direct_) {
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    } else {
      static std::atomic<std::uint64_t> sequence{0};
      target_ = follow_links();
      temporary_ = fmt::format("{}.tmp.{}.{}", target_, static_cast<long>(::getpid()),
                               sequence.fetch_add(1, std::memory_order_relaxed));
      fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd_ < 0) fail("open", errno);
    if (gzip_) {
      gz_ = gzdopen(fd_, "wb6");
      if (gz_ == nullptr) {
        const int error = errno != 0 ? errno : ENOMEM;
        discard();
        fail("open", error);
      }
      fd_ = -1;  // closed by gzclose
    }
  }

  ~AtomicFile() {
    if (!committed_) discard();
  }

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view bytes) {
    std::optional<SigpipeBlocked> sigpipe;
    if (direct_) sigpipe.emplace();
    while (!bytes.empty()) {
      const std::size_t chunk = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
      errno = 0;
      if (gzip_) {
        const int written = gzwrite(gz_, bytes.data(), static_cast<unsigned>(chunk));
        if (written <= 0) fail("write", errno != 0 ? errno : EIO);
        bytes.remove_prefix(static_cast<std::size_t>(written));
      } else {
        const ssize_t written = ::write(fd_, bytes.data(), chunk);
        if (written < 0 && errno == EINTR) continue;
        if (written < 0) fail("write", errno);
        bytes.remove_prefix(static_cast<std::size_t>(written));
      }
    }
  }

  void commit() {
    std::optional<SigpipeBlocked> sigpipe;
    if (direct_) sigpipe.emplace();
    errno = 0;
    if (gzip_) {
      const int result = gzclose(gz_);
      gz_ = nullptr;
      if (result != Z_OK) fail("close", errno != 0 ? errno : EIO);
    } else {
      const int result = ::close(fd_);
      fd_ = -1;
      if (result != 0) fail("close", errno);
    }
    if (!direct_ && std::rename(temporary_.c_str(), target_.c_str()) != 0) fail("rename", errno);
    committed_ = true;
  }

 private:
  /// The path with its symbolic links followed (at most 40, the kernel's limit), each relative
  /// link from the directory that holds it; the last one's target need not exist. The temporary
  /// file goes beside that target, so that the rename replaces the target and not the link.
  std::string follow_links() const {
    std::string target = path_;
    for (int links = 0; links < 40; ++links) {
      struct stat status {};
      if (::lstat(target.c_str(), &status) != 0 || !S_ISLNK(status.st_mode)) return target;
      char link[PATH_MAX];
      const ssize_t size = ::readlink(target.c_str(), link, sizeof(link));
      if (size < 0) fail("readlink", errno);
      if (static_cast<std::size_t>(size) == sizeof(link)) fail("readlink", ENAMETOOLONG);
      const std::string_view next(link, static_cast<std::size_t>(size));
      const std::size_t slash = target.rfind('/');
      if (next.substr(0, 1) == "/" || slash == std::string::npos)
        target.assign(next);
      else
        target = target.substr(0, slash + 1).append(next);
    }
    fail("open", ELOOP);
  }

  void discard() noexcept {
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
    gz_ = nullptr;
    fd_ = -1;
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
  }

  [[noreturn]] void fail(std::string_view step, int error) const {
    fail_because(fmt::format("{}: {}", step, errno_text(error)));
  }
  [[noreturn]] void fail_because(std::string_view reason) const {
    throw std::runtime_error(fmt::format("dlprof: cannot write {}{}'{}': {}", what_, what_.empty() ? "" : " ", path_, reason));
  }

  std::string path_;
  std::string what_;
  std::string target_;     // where the temporary file is renamed to (path_ with its links followed)
  std::string temporary_;  // empty when the file is written directly
  bool gzip_;
  bool direct_ = false;  // a character device or a FIFO: written in place, never renamed over
  gzFile gz_ = nullptr;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace detail

inline void Trace::save(const std::string& path) const {
  // Streams through a bounded buffer: memory stays flat however many events the trace holds.
  detail::AtomicFile file(path, detail::ends_with(path, ".gz"));
  fmt::memory_buffer buffer;
  write_chrome_trace(*this, buffer, path, [&file](std::string_view chunk) { file.write(chunk); });
  file.write(std::string_view(buffer.data(), buffer.size()));
  file.commit();
}

DLPROF_END_NAMESPACE
