// dlprof/import/detail/trace_builder.hpp: the mapping from Chrome-trace events (RawEvent) to a
// dlprof::Trace. import/chrome_trace.hpp documents the mapping for users; the reasons for each
// choice are here, next to the code. Independent of the JSON parser: the parser's handler
// (trace_handler.hpp) fills a RawEvent per event object and calls add_event().
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <rapidjson/document.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/forward_ops.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/category.hpp"
#include "dlprof/import/detail/json_number.hpp"
#include "dlprof/format/json_text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/import/detail/raw_event.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

/// A problem at a byte offset of the JSON text. The public functions turn it into a
/// TraceReadError that names the file, the offset, the line and the column.
struct ParseFailure {
  std::size_t offset;
  std::string message;
};

[[noreturn]] inline void fail_at(std::size_t offset, std::string message) {
  throw ParseFailure{offset, std::move(message)};
}

constexpr std::string_view type_name(JsonType type) noexcept {
  switch (type) {
    case JsonType::Null: return "null";
    case JsonType::Bool: return "a boolean";
    case JsonType::Number: return "a number";
    case JsonType::String: return "a string";
    case JsonType::Array: return "an array";
    case JsonType::Object: return "an object";
  }
  return "a value";
}

/// Appends a scalar's JSON text: a string literal, or a number, true, false or null as written.
inline void append_json_value(std::string& out, const RawValue& value) {
  if (value.type == JsonType::String)
    append_json_string(out, value.text);
  else
    out += value.text;
}

/// Times are nanoseconds in [0, 2^62] (1970 to 2116), before and after adding the file's base
/// time: a start plus a duration fits 64 bits, and the writer can write any trace read back
/// (its relative times stay in range).
inline constexpr std::int64_t kTimeLimitNs = std::int64_t{1} << 62;

/// Reads a value's number, or fails naming the key and what was found instead.
inline std::string_view number_text(const RawValue& value, std::string_view key) {
  if (value.type != JsonType::Number)
    fail_at(value.offset, fmt::format("\"{}\" must be a number, not {}", key, type_name(value.type)));
  return value.text;
}

[[noreturn]] inline void fail_number(const RawValue& value, std::string_view key, NumberError error) {
  switch (error) {
    case NumberError::NotIntegral:
      fail_at(value.offset, fmt::format("\"{}\" must be an integer, not {}", key, value.text));
    case NumberError::OutOfRange:
      fail_at(value.offset, fmt::format("\"{}\" is out of range: {}", key, value.text));
    case NumberError::NotANumber:
    case NumberError::None: break;
  }
  fail_at(value.offset, fmt::format("\"{}\" is not a number: {}", key, value.text));
}

/// Microseconds (ts, dur, queued) to nanoseconds: three decimals exact, rounded beyond.
inline std::int64_t nanoseconds_of(const RawValue& value, std::string_view key) {
  std::int64_t ns = 0;
  const NumberError error = to_int64(number_text(value, key), 3, kTimeLimitNs, /*integral=*/false, &ns);
  if (error != NumberError::None) fail_number(value, key, error);
  return ns;
}

inline std::int64_t signed_of(const RawValue& value, std::string_view key, std::int64_t limit) {
  std::int64_t number = 0;
  const NumberError error = to_int64(number_text(value, key), 0, limit, /*integral=*/true, &number);
  if (error != NumberError::None) fail_number(value, key, error);
  return number;
}

inline std::uint64_t unsigned_of(const RawValue& value, std::string_view key, std::uint64_t limit) {
  std::uint64_t number = 0;
  const NumberError error = to_uint64(number_text(value, key), limit, &number);
  if (error != NumberError::None) fail_number(value, key, error);
  return number;
}

/// Ids where HTA and older writers use -1 for none (External id, correlation): -1 becomes 0.
inline std::uint64_t id_of(const RawValue& value, std::string_view key, std::uint64_t limit) {
  const std::int64_t signed_limit = static_cast<std::int64_t>(std::min<std::uint64_t>(limit, INT64_MAX));
  if (!value.text.empty() && value.text[0] == '-') {
    if (signed_of(value, key, signed_limit) == -1) return 0;
    fail_at(value.offset, fmt::format("\"{}\" must not be negative: {}", key, value.text));
  }
  return unsigned_of(value, key, limit);
}

/// Kineto's occupancy floats; its older versions wrote the string "inf" for blocks per SM.
inline float float_of(const RawValue& value, std::string_view key) {
  if (value.type == JsonType::String) {
    if (value.text == "inf") return std::numeric_limits<float>::infinity();
    if (value.text == "-inf") return -std::numeric_limits<float>::infinity();
    if (value.text == "nan") return std::numeric_limits<float>::quiet_NaN();
  }
  double number = 0;
  const NumberError error = to_double(number_text(value, key), &number);
  if (error != NumberError::None) fail_number(value, key, error);
  return static_cast<float>(number);
}

/// The integer a string id ends with: "stream 7" -> 7 (tids of traces before 2022), "GPU 1" -> 1.
inline std::int64_t trailing_integer(std::string_view text) noexcept {
  std::size_t begin = text.size();
  while (begin > 0 && text.size() - begin < 18 && text[begin - 1] >= '0' && text[begin - 1] <= '9') --begin;
  std::int64_t number = 0;
  for (std::size_t i = begin; i < text.size(); ++i) number = number * 10 + (text[i] - '0');
  return number;
}

/// An autograd node (`MmBackward0`, `Backward\d*$`) or the engine's frame around one.
inline bool is_backward_op(std::string_view name) noexcept {
  if (starts_with(name, kineto::name::kEvaluateFunction)) return true;
  std::size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  constexpr std::string_view kSuffix = "Backward";
  return end >= kSuffix.size() && name.substr(end - kSuffix.size(), kSuffix.size()) == kSuffix;
}

/// A range's category from its name, as TensorBoard and torch name these scopes.
inline Category range_category(std::string_view name) noexcept {
  if (starts_with(name, kineto::name::kDataLoaderPrefix) || starts_with(name, kineto::name::kDataPipePrefix))
    return Category::DataLoader;
  if (starts_with(name, kineto::name::kOptimizerPrefix)) return Category::Optimizer;
  if (is_communication_name(name)) return Category::Communication;
  if (is_module_name(name)) return Category::Forward;
  return Category::User;
}

/// What a category string means to the reader: Kineto's categories for every device it writes
/// (CUDA; ROCm, whose HIP calls and kernels Kineto writes under the CUDA categories; XPU; MTIA;
/// PrivateUse1 backends), as Holistic Trace Analysis 0.6 groups them, and the legacy
/// (PyTorch < 1.10) spellings.
enum class CatMeaning : std::uint8_t {
  Op,             // cpu_op, Operator
  Range,          // user_annotation, cpu_instant_event slices
  PythonFrame,    // python_function
  Runtime,        // cuda_runtime, Runtime, xpu_runtime, mtia_runtime, privateuse1_runtime
  Driver,         // cuda_driver, xpu_driver, privateuse1_driver
  Kernel,         // kernel, Kernel, mtia_ccp_events (MTIA's device work; its copies are "dma..." kernels)
  Memcpy,         // gpu_memcpy, Memcpy
  Memset,         // gpu_memset, Memset
  Sync,           // cuda_sync
  GpuAnnotation,  // gpu_user_annotation
  Overhead,       // overhead (CUPTI's own time)
  Span,           // Trace: Kineto's span of the whole window
  NotWork,        // cuda_event, cuda_profiler_range: markers on device rows, not work
};

inline const KeyTable<CatMeaning>& categories() {
  namespace cat = kineto::cat;
  static const KeyTable<CatMeaning> table(std::array<std::pair<std::string_view, CatMeaning>, 29>{{
      {cat::kCpuOp, CatMeaning::Op},
      {cat::kOperatorLegacy, CatMeaning::Op},
      {cat::kUserAnnotation, CatMeaning::Range},
      {cat::kPythonFunction, CatMeaning::PythonFrame},
      {cat::kCpuInstantEvent, CatMeaning::Range},
      {cat::kCudaRuntime, CatMeaning::Runtime},
      {cat::kRuntimeLegacy, CatMeaning::Runtime},
      {cat::kRuntimeLowerLegacy, CatMeaning::Runtime},
      {cat::kXpuRuntime, CatMeaning::Runtime},
      {cat::kMtiaRuntime, CatMeaning::Runtime},
      {cat::kPrivateUse1Runtime, CatMeaning::Runtime},
      {cat::kCudaDriver, CatMeaning::Driver},
      {cat::kXpuDriver, CatMeaning::Driver},
      {cat::kPrivateUse1Driver, CatMeaning::Driver},
      {cat::kMtiaCcpEvents, CatMeaning::Kernel},
      {cat::kKernel, CatMeaning::Kernel},
      {cat::kKernelLegacy, CatMeaning::Kernel},
      {cat::kGpuMemcpy, CatMeaning::Memcpy},
      {cat::kMemcpyLegacy, CatMeaning::Memcpy},
      {cat::kGpuMemset, CatMeaning::Memset},
      {cat::kMemsetLegacy, CatMeaning::Memset},
      {cat::kCudaSync, CatMeaning::Sync},
      {cat::kGpuUserAnnotation, CatMeaning::GpuAnnotation},
      {cat::kOverhead, CatMeaning::Overhead},
      {cat::kTrace, CatMeaning::Span},
      {cat::kTraceLower, CatMeaning::Span},
      {cat::kCudaEvent, CatMeaning::NotWork},
      {cat::kCudaProfilerRange, CatMeaning::NotWork},
  }});
  return table;
}

/// Top-level keys the reader maps (the rest go to Trace::metadata as they are).
enum class TopKey : std::uint8_t {
  TraceEvents,
  DeviceProperties,
  DistributedInfo,
  BaseTime,
  Written,  // keys the writer writes itself (schemaVersion, ...): kept out of metadata
  DroppedEvents,
  ClippedRanges,
  OverflowedNames,
  Clock,
  FlightRecorder,
  GpuRecords,
  GpuDroppedRecords,
  CuptiDroppedRecords,
  GpuUnknownRecords,
  GpuLateRecords,
  GpuClippedAnnotations,
  DroppedDeviceCounters,
  DroppedThreadCpuReadings,
  CuptiVersion,
  DriverVersion,
  StacklessEvents,
};

inline const KeyTable<TopKey>& top_level_keys() {
  namespace key = kineto::key;
  static const KeyTable<TopKey> table(std::array<std::pair<std::string_view, TopKey>, 24>{{
      {key::kTraceEvents, TopKey::TraceEvents},
      {key::kDeviceProperties, TopKey::DeviceProperties},
      {key::kDistributedInfo, TopKey::DistributedInfo},
      {key::kBaseTimeNanoseconds, TopKey::BaseTime},
      {key::kSchemaVersion, TopKey::Written},
      {key::kDisplayTimeUnit, TopKey::Written},
      {key::kTraceName, TopKey::Written},
      {key::kDlprofVersion, TopKey::Written},
      {key::kDroppedEvents, TopKey::DroppedEvents},
      {key::kClippedRanges, TopKey::ClippedRanges},
      {key::kOverflowedNames, TopKey::OverflowedNames},
      {key::kClock, TopKey::Clock},
      {key::kFlightRecorder, TopKey::FlightRecorder},
      {key::kGpuRecords, TopKey::GpuRecords},
      {key::kGpuDroppedRecords, TopKey::GpuDroppedRecords},
      {key::kCuptiDroppedRecords, TopKey::CuptiDroppedRecords},
      {key::kGpuUnknownRecords, TopKey::GpuUnknownRecords},
      {key::kGpuLateRecords, TopKey::GpuLateRecords},
      {key::kGpuClippedAnnotations, TopKey::GpuClippedAnnotations},
      {key::kDroppedDeviceCounters, TopKey::DroppedDeviceCounters},
      {key::kDroppedThreadCpuReadings, TopKey::DroppedThreadCpuReadings},
      {key::kCuptiVersion, TopKey::CuptiVersion},
      {key::kCudaDriverVersion, TopKey::DriverVersion},
      {key::kStacklessEvents, TopKey::StacklessEvents},
  }});
  return table;
}

/// deviceProperties keys (Kineto's DeviceProperties.cpp).
enum class DeviceKey : std::uint8_t {
  Id,
  Name,
  TotalGlobalMem,
  ComputeMajor,
  ComputeMinor,
  MaxThreadsPerBlock,
  MaxThreadsPerMultiprocessor,
  RegsPerBlock,
  RegsPerMultiprocessor,
  WarpSize,
  SharedMemPerBlock,
  SharedMemPerBlockOptin,
  SharedMemPerMultiprocessor,
  NumSms,
};

inline const KeyTable<DeviceKey>& device_keys() {
  namespace device = kineto::device;
  static const KeyTable<DeviceKey> table(std::array<std::pair<std::string_view, DeviceKey>, 14>{{
      {device::kId, DeviceKey::Id},
      {device::kName, DeviceKey::Name},
      {device::kTotalGlobalMem, DeviceKey::TotalGlobalMem},
      {device::kComputeMajor, DeviceKey::ComputeMajor},
      {device::kComputeMinor, DeviceKey::ComputeMinor},
      {device::kMaxThreadsPerBlock, DeviceKey::MaxThreadsPerBlock},
      {device::kMaxThreadsPerMultiprocessor, DeviceKey::MaxThreadsPerMultiprocessor},
      {device::kRegsPerBlock, DeviceKey::RegsPerBlock},
      {device::kRegsPerMultiprocessor, DeviceKey::RegsPerMultiprocessor},
      {device::kWarpSize, DeviceKey::WarpSize},
      {device::kSharedMemPerBlock, DeviceKey::SharedMemPerBlock},
      {device::kSharedMemPerBlockOptin, DeviceKey::SharedMemPerBlockOptin},
      {device::kSharedMemPerMultiprocessor, DeviceKey::SharedMemPerMultiprocessor},
      {device::kNumSms, DeviceKey::NumSms},
  }});
  return table;
}

/// distributedInfo keys dlprof keeps (DistributedInfo's fields).
enum class DistributedKey : std::uint8_t { Backend, Rank, WorldSize, PgConfig, NcclVersion };

inline const KeyTable<DistributedKey>& distributed_keys() {
  namespace key = kineto::key;
  static const KeyTable<DistributedKey> table(std::array<std::pair<std::string_view, DistributedKey>, 5>{{
      {key::kBackend, DistributedKey::Backend},
      {key::kRank, DistributedKey::Rank},
      {key::kWorldSize, DistributedKey::WorldSize},
      {key::kPgConfig, DistributedKey::PgConfig},
      {key::kNcclVersion, DistributedKey::NcclVersion},
  }});
  return table;
}

/// Builds a Trace from the events of one file, in file order; finish() sorts, links and names.
///
/// Leniency. Traces come from every PyTorch version and device, so a lenient builder (the
/// default) fails only where the analyses cannot go on: an event whose ph, ts, dur, pid, tid or
/// name is unusable is left out and counted (ReadResult::skipped_events, the first with its
/// reason and byte offset), an arg it cannot use is left out of its event, a metadata field is
/// kept as JSON text in Trace::metadata, and a number where text is expected becomes its text
/// (Kineto writes "cupti_version": 28 since PyTorch 2.5), a string holding a number where a
/// number is expected becomes that number. A strict builder throws ParseFailure for each of them.
class TraceBuilder {
 public:
  explicit TraceBuilder(bool strict = false) noexcept : strict_(strict) {}

  bool strict() const noexcept { return strict_; }

  void add_event(const RawEvent& event) {
    if (strict_) return map_event(event);
    try {
      map_event(event);
    } catch (ParseFailure& failure) {
      skip_event(failure.offset, std::move(failure.message));
    }
  }

  /// An event left out: unusable on its own. Throws in a strict read.
  void skip_event(std::size_t offset, std::string reason) {
    if (strict_) fail_at(offset, std::move(reason));
    ReadResult& read = trace_.read_result;
    if (read.skipped_events++ == 0 || offset < read.first_skip_offset) {
      read.first_skip_offset = offset;
      read.first_skip_reason = std::move(reason);
    }
  }

  /// A value of an unexpected type left out. Throws in a strict read.
  void ignore_value(std::size_t offset, std::string reason) {
    if (strict_) fail_at(offset, std::move(reason));
    if (ignored_values_++ == 0 || offset < first_ignored_offset_) {
      first_ignored_offset_ = offset;
      first_ignored_reason_ = std::move(reason);
    }
  }

  /// A metadata value of an unexpected type, about to be kept as JSON text under `key` in
  /// Trace::metadata (add_metadata). Throws in a strict read.
  void keep_as_metadata(std::string_view key, std::size_t offset, std::string reason) {
    if (strict_) fail_at(offset, std::move(reason));
    ++trace_.read_result.ignored_values;
    note(fmt::format("{} (at byte {}); kept in the metadata as \"{}\"", reason, offset, key));
  }

  /// The skips and ignored values of another builder that read part of the same text (the second
  /// thread of a parse in parts), and its notes.
  void merge_read_result(TraceBuilder& other) {
    ReadResult& from = other.trace_.read_result;
    if (from.skipped_events != 0) {
      const std::uint64_t skipped = from.skipped_events;
      const std::uint64_t mine = trace_.read_result.skipped_events;
      skip_event(from.first_skip_offset, std::move(from.first_skip_reason));
      trace_.read_result.skipped_events = mine + skipped;
    }
    if (other.ignored_values_ != 0) {
      const std::uint64_t mine = ignored_values_;
      ignore_value(other.first_ignored_offset_, std::move(other.first_ignored_reason_));
      ignored_values_ = mine + other.ignored_values_;
    }
    trace_.read_result.ignored_values += from.ignored_values;
    for (std::string& line : from.notes) note(std::move(line));
  }

  /// A number: a JSON number, or in a lenient read a string that holds one ("12090").
  RawValue numeric(const RawValue& value) const noexcept {
    if (strict_ || value.type != JsonType::String) return value;
    double number = 0;
    return to_double(value.text, &number) == NumberError::None ? RawValue{value.text, value.offset, JsonType::Number}
                                                               : value;
  }

  /// Text: a JSON string, or in a lenient read the text of a number or a boolean (or nothing).
  std::optional<std::string_view> text_of(const RawValue& value, std::string_view key) const {
    if (value.type == JsonType::String) return value.text;
    if (!strict_ && (value.type == JsonType::Number || value.type == JsonType::Bool)) return value.text;
    if (!strict_) return std::nullopt;
    fail_at(value.offset, fmt::format("\"{}\" must be a string, not {}", key, type_name(value.type)));
  }

  std::int64_t signed_of(const RawValue& value, std::string_view key, std::int64_t limit) const {
    return reader::signed_of(numeric(value), key, limit);
  }
  std::uint64_t unsigned_of(const RawValue& value, std::string_view key, std::uint64_t limit) const {
    return reader::unsigned_of(numeric(value), key, limit);
  }
  std::uint64_t id_of(const RawValue& value, std::string_view key, std::uint64_t limit) const {
    return reader::id_of(numeric(value), key, limit);
  }
  std::int64_t nanoseconds_of(const RawValue& value, std::string_view key) const {
    return reader::nanoseconds_of(numeric(value), key);
  }
  float float_of(const RawValue& value, std::string_view key) const { return reader::float_of(numeric(value), key); }

  /// `convert()`, or nothing when it fails in a lenient read (the value is counted as ignored).
  template <class Convert>
  auto optional(Convert&& convert) -> std::optional<decltype(convert())> {
    if (strict_) return convert();
    try {
      return convert();
    } catch (ParseFailure& failure) {
      ignore_value(failure.offset, std::move(failure.message));
      return std::nullopt;
    }
  }

  void set_base_time(const RawValue& value) {
    const auto fail = [&](std::string reason) {
      keep_as_metadata(kineto::key::kBaseTimeNanoseconds, value.offset, reason + ": times are read as absolute");
      std::string json;
      append_json_value(json, value);
      add_metadata(std::string(kineto::key::kBaseTimeNanoseconds), std::move(json));
    };
    const std::optional<std::int64_t> base =
        optional_quietly([&] { return signed_of(value, kineto::key::kBaseTimeNanoseconds, kTimeLimitNs); });
    if (!base) return fail(conversion_failure_);
    if (*base < 0) {
      if (strict_) fail_at(value.offset, fmt::format("\"{}\" must not be negative", kineto::key::kBaseTimeNanoseconds));
      return fail(fmt::format("\"{}\" is negative: {}", kineto::key::kBaseTimeNanoseconds, value.text));
    }
    base_time_ns_ = *base;
    base_time_offset_ = value.offset;
  }

  void add_device(DeviceProperties device) { trace_.devices.push_back(std::move(device)); }
  DistributedInfo& distributed() noexcept { return trace_.distributed; }

  /// A top-level key the reader maps to a field of the Trace. A value it cannot use is kept in
  /// the metadata (lenient) or fails the read (strict).
  void set_top_level(TopKey key, const RawValue& value, std::string_view name) {
    if (value.type == JsonType::Null && !strict_) return;  // no value: the field keeps its default
    bool used = true;
    const auto count = [&](std::uint64_t& field) {
      const std::optional<std::uint64_t> number = optional_quietly([&] { return unsigned_of(value, name, UINT64_MAX); });
      if (number) field = *number;
      used = number.has_value();
    };
    const auto text = [&](std::string& field) {
      const std::optional<std::string_view> found = text_of(value, name);
      if (found) field = std::string(*found);
      if (!found) conversion_failure_ = fmt::format("\"{}\" must be a string, not {}", name, type_name(value.type));
      used = found.has_value();
    };
    switch (key) {
      case TopKey::DroppedEvents: count(trace_.dropped_events); break;
      case TopKey::ClippedRanges: count(trace_.clipped_ranges); break;
      case TopKey::OverflowedNames: count(trace_.overflowed_names); break;
      case TopKey::Clock: text(trace_.clock_source); break;
      case TopKey::FlightRecorder: text(trace_.flight_recorder_dump); break;
      case TopKey::GpuRecords:
        count(trace_.gpu.records);
        trace_.gpu.enabled = trace_.gpu.enabled || used;
        break;
      case TopKey::GpuDroppedRecords: count(trace_.gpu.dropped_records); break;
      case TopKey::CuptiDroppedRecords: count(trace_.gpu.cupti_dropped_records); break;
      case TopKey::GpuUnknownRecords: count(trace_.gpu.unknown_records); break;
      case TopKey::GpuLateRecords: count(trace_.gpu.late_records); break;
      case TopKey::GpuClippedAnnotations: count(trace_.gpu.clipped_annotations); break;
      case TopKey::DroppedDeviceCounters: count(trace_.gpu.dropped_device_counters); break;
      case TopKey::DroppedThreadCpuReadings: count(trace_.dropped_thread_cpu_readings); break;
      case TopKey::CuptiVersion: text(trace_.gpu.cupti_version); break;
      case TopKey::DriverVersion: text(trace_.gpu.driver_version); break;
      case TopKey::StacklessEvents: count(trace_.stackless_events); break;
      case TopKey::TraceEvents:
      case TopKey::DeviceProperties:
      case TopKey::DistributedInfo:
      case TopKey::BaseTime:
      case TopKey::Written: break;
    }
    if (used) return;
    if (strict_) fail_at(value.offset, conversion_failure_);
    keep_as_metadata(name, value.offset, conversion_failure_);
    std::string json;
    append_json_value(json, value);
    add_metadata(std::string(name), std::move(json));
  }

  /// Room for the events of a text of `total_bytes`, judged from what the first `parsed_bytes`
  /// held, called as the parse goes on: a vector that would soon be full grows to what the rest
  /// of the text will hold at the density seen so far (and at least doubles), so a large trace's
  /// vectors are rarely copied as they grow, even where one kind of event starts late in the file
  /// (Kineto writes the CPU ops first, then the GPU work and the runtime calls). Memory reserved
  /// and not used costs address space only.
  void expect_more(std::size_t parsed_bytes, std::size_t total_bytes) {
    if (parsed_bytes == 0 || total_bytes <= parsed_bytes) return;
    const double scale = 1.25 * static_cast<double>(total_bytes) / static_cast<double>(parsed_bytes);
    const auto room = [&](auto& events) {
      if (events.capacity() - events.size() > events.size() / 8) return;
      const auto projected = static_cast<std::size_t>(static_cast<double>(events.size()) * scale) + 1024;
      events.reserve(std::max(projected, 2 * events.capacity()));
    };
    room(trace_.events);
    room(trace_.gpu_events);
    room(trace_.api_events);
    room(trace_.memory_events);
  }

  /// A line for the report (bounded: a hostile file must not make thousands).
  void note(std::string line) {
    constexpr std::size_t kMaxNotes = 16;
    std::vector<std::string>& notes = trace_.read_result.notes;
    if (notes.size() < kMaxNotes) notes.push_back(std::move(line));
    else ++notes_left_out_;
  }

  void add_metadata(std::string key, std::string json_text) {
    trace_.metadata.emplace_back(std::move(key), std::move(json_text));
  }

  /// The document holds events: it is an array, or an object with "traceEvents".
  void found_events_array() noexcept { events_array_found_ = true; }

  /// The trace: base time applied, threads and the process chosen, everything in the order
  /// trace.hpp promises, ops inside autograd's backward frames in the Backward category. A lenient
  /// read that left out events and kept none fails with the first one's reason; a JSON object
  /// without "traceEvents" is an empty trace that says so (ReadResult::has_trace_events).
  Trace finish() {
    ReadResult& read = trace_.read_result;
    if (!events_array_found_) {
      read.has_trace_events = false;
      note(fmt::format("a JSON object without \"{}\": not a trace, no events read", kineto::key::kTraceEvents));
    }
    if (read.skipped_events != 0 && trace_.events.empty() && trace_.gpu_events.empty() && trace_.api_events.empty() &&
        trace_.memory_events.empty() && trace_.overhead_events.empty())
      fail_at(read.first_skip_offset, read.first_skip_reason);
    if (ignored_values_ != 0) {
      read.ignored_values += ignored_values_;
      note(fmt::format("{} event value{} of an unexpected type left out; the first, at byte {}: {}", ignored_values_,
                       ignored_values_ == 1 ? "" : "s", first_ignored_offset_, first_ignored_reason_));
    }
    for (const auto& [category, count] : unknown_device_slices_)
      note(fmt::format("{} slice{} of category \"{}\", which dlprof does not know, counted as GPU kernels", count,
                       count == 1 ? "" : "s", category));
    if (notes_left_out_ != 0) read.notes.push_back(fmt::format("and {} more", notes_left_out_));
    choose_process();
    remap_threads();
    apply_base_time();
    sort_and_categorise();
    take_python_stacks();
    inherit_forward_stacks(trace_);
    std::stable_sort(trace_.collectives.begin(), trace_.collectives.end(),
                     [](const CollectiveCall& a, const CollectiveCall& b) { return a.start_ns < b.start_ns; });
    take_clock_offset();
    take_process_groups();
    take_modules();
    take_unsymbolised_frames();
    trace_.names.reserve(names_.size());
    for (std::string& name : names_) trace_.names.push_back(std::move(name));
    names_.clear();
    name_index_.clear();
    stack_index_.clear();
    stack_texts_.clear();
    if (!trace_.gpu_events.empty() || !trace_.api_events.empty()) trace_.gpu.enabled = true;
    trace_.file_time_base_ns = base_time_ns_;
    return std::move(trace_);
  }

 private:
  void map_event(const RawEvent& event) {
    const RawValue* phase = event.field(EventField::Ph);
    if (phase == nullptr) return;  // not a trace event; Chrome's viewers skip it too
    if (phase->type != JsonType::String)
      fail_at(phase->offset, fmt::format("\"ph\" must be a string, not {}", type_name(phase->type)));
    if (phase->text.size() != 1) return;
    switch (phase->text[0]) {
      case 'X': add_slice(event); break;
      case 'i':
      case 'I': add_instant(event); break;
      case 'C': add_counter(event); break;
      case 'M': add_metadata_event(event); break;
      default: break;  // flows (ac2g: correlation carries the link; fwdbwd: sequence numbers do), B/E, ...
    }
  }

  /// Like optional(), but a failure is not counted: its message is left in conversion_failure_
  /// for the caller, which keeps the value elsewhere.
  template <class Convert>
  auto optional_quietly(Convert&& convert) -> std::optional<decltype(convert())> {
    if (strict_) return convert();
    try {
      return convert();
    } catch (ParseFailure& failure) {
      conversion_failure_ = std::move(failure.message);
      return std::nullopt;
    }
  }

  /// An arg the event can do without, converted; nothing when absent or, in a lenient read,
  /// unusable (counted).
  template <class Convert>
  auto arg_value(const RawEvent& event, Arg arg, Convert&& convert)
      -> std::optional<decltype(convert(std::declval<const RawValue&>()))> {
    const RawValue* value = event.arg(arg);
    if (value == nullptr) return std::nullopt;
    return optional([&] { return convert(*value); });
  }

  /// A pid or tid: an integer, or a string (Kineto's "Spans", "stream 7" of older traces).
  struct Id {
    std::int64_t number = 0;  ///< the integer, or the integer a string ends with
    std::string_view text;
    bool is_number = true;
  };

  struct ThreadEntry {
    std::int64_t pid = 0;
    std::int64_t tid = 0;
    std::string tid_text;  ///< a string tid: the thread's name unless metadata names it
    std::string name;      ///< from thread_name metadata
    std::uint64_t first_mention = 0;
    std::uint64_t event_count = 0;
    bool pid_is_number = true;
    bool named = false;
  };

  struct PairHash {
    std::size_t operator()(const std::pair<std::int64_t, std::int64_t>& key) const noexcept {
      return static_cast<std::size_t>((static_cast<std::uint64_t>(key.first) * 0x9E3779B97F4A7C15ull) ^
                                      static_cast<std::uint64_t>(key.second));
    }
  };

  struct InputsKey {
    std::uint32_t op, dims, types, concrete, strides;
    std::uint64_t flops;
    bool operator==(const InputsKey& other) const noexcept {
      return op == other.op && dims == other.dims && types == other.types && concrete == other.concrete &&
             strides == other.strides && flops == other.flops;
    }
  };
  struct InputsKeyHash {
    std::size_t operator()(const InputsKey& key) const noexcept {
      std::uint64_t hash = key.op;
      for (const std::uint64_t part : {std::uint64_t{key.dims}, std::uint64_t{key.types}, std::uint64_t{key.concrete},
                                       std::uint64_t{key.strides}, key.flops})
        hash = (hash ^ part) * 0x9E3779B97F4A7C15ull;
      return static_cast<std::size_t>(hash);
    }
  };

  Id id_of_field(const RawValue* value, std::string_view key) const {
    if (value == nullptr) return {};  // Perfetto takes a missing pid or tid as 0
    if (value->type == JsonType::String) return Id{trailing_integer(value->text), value->text, false};
    return Id{reader::signed_of(*value, key, INT64_MAX), {}, true};
  }

  std::uint32_t intern(std::string_view text) {
    const auto found = name_index_.find(text);
    if (found != name_index_.end()) return found->second;
    const auto index = static_cast<std::uint32_t>(names_.size());
    names_.emplace_back(text);
    name_index_.emplace(names_.back(), index);  // a deque's elements never move
    return index;
  }

  std::string_view name_of(const RawEvent& event) const {
    const RawValue* name = event.field(EventField::Name);
    if (name == nullptr || name->type == JsonType::Null) return {};
    const std::optional<std::string_view> text = text_of(*name, "name");
    if (!text) fail_at(name->offset, fmt::format("\"name\" must be a string, not {}", type_name(name->type)));
    return *text;
  }

  std::int64_t start_of(const RawEvent& event) const {
    const RawValue* ts = event.field(EventField::Ts);
    if (ts == nullptr) fail_at(event.offset, "event without \"ts\"");
    return time_of(*ts);
  }

  /// A ts, which Kineto never writes negative (relative times are clamped at 0).
  std::int64_t time_of(const RawValue& ts) const {
    const std::int64_t ns = nanoseconds_of(ts, "ts");
    if (ns < 0) fail_at(ts.offset, fmt::format("\"ts\" must not be negative: {}", ts.text));
    return ns;
  }

  /// End of a slice. Kineto clamps durations at 0; a negative one is someone else's mistake, which
  /// a lenient read does not guess about (the event is left out) and a strict one clamps.
  std::int64_t end_of(const RawEvent& event, std::int64_t start) const {
    const RawValue* dur = event.field(EventField::Dur);
    if (dur == nullptr) return start;
    const std::int64_t duration = nanoseconds_of(*dur, "dur");
    if (duration < 0 && !strict_) fail_at(dur->offset, fmt::format("\"dur\" must not be negative: {}", dur->text));
    const std::int64_t end = start + std::max<std::int64_t>(duration, 0);
    if (end > kTimeLimitNs) fail_at(dur->offset, "\"ts\" plus \"dur\" is beyond 2^62 ns (the year 2116)");
    return end;
  }

  void see_time(std::int64_t start, std::int64_t end) noexcept {
    if (!any_time_) {
      first_ns_ = start;
      last_ns_ = end;
      any_time_ = true;
      return;
    }
    first_ns_ = std::min(first_ns_, start);
    last_ns_ = std::max(last_ns_, end);
  }

  /// The index of a CPU thread, registered on first mention (by an event or by metadata).
  std::uint32_t thread_of(const Id& pid, const Id& tid, bool has_event) {
    std::uint32_t index = 0;
    if (pid.is_number && tid.is_number) {
      const std::pair<std::int64_t, std::int64_t> key{pid.number, tid.number};
      if (last_thread_ != kNoThread && last_thread_key_ == key) {
        index = last_thread_;
      } else {
        const auto [found, inserted] = numeric_threads_.try_emplace(key, static_cast<std::uint32_t>(threads_.size()));
        if (inserted) threads_.push_back(new_thread(pid, tid));
        index = found->second;
        last_thread_ = index;
        last_thread_key_ = key;
      }
    } else {
      std::string key = fmt::format("{}\n{}\n{}\n{}", pid.is_number, pid.is_number ? fmt::format("{}", pid.number) : std::string(pid.text),
                                    tid.is_number, tid.is_number ? fmt::format("{}", tid.number) : std::string(tid.text));
      const auto [found, inserted] = text_threads_.try_emplace(std::move(key), static_cast<std::uint32_t>(threads_.size()));
      if (inserted) threads_.push_back(new_thread(pid, tid));
      index = found->second;
    }
    if (has_event) ++threads_[index].event_count;
    return index;
  }

  ThreadEntry new_thread(const Id& pid, const Id& tid) {
    ThreadEntry entry;
    entry.pid = pid.number;
    entry.pid_is_number = pid.is_number;
    entry.tid = tid.number;
    if (!tid.is_number) entry.tid_text = std::string(tid.text);
    entry.first_mention = mentions_++;
    return entry;
  }

  std::uint32_t event_thread(const RawEvent& event) {
    return thread_of(id_of_field(event.field(EventField::Pid), "pid"), id_of_field(event.field(EventField::Tid), "tid"),
                     true);
  }

  std::uint64_t external_id_of(const RawEvent& event) {
    if (event.arg(Arg::ExternalId) != nullptr)
      return arg_value(event, Arg::ExternalId,
                       [&](const RawValue& id) { return id_of(id, kineto::arg::kExternalId, UINT64_MAX); })
          .value_or(0);
    return arg_value(event, Arg::ExternalIdLower,
                     [&](const RawValue& id) { return id_of(id, kineto::arg::kExternalIdLower, UINT64_MAX); })
        .value_or(0);
  }

  /// CUPTI's correlation ids are 32-bit; -1 (HTA's "none") becomes 0.
  std::uint32_t correlation_of(const RawEvent& event) {
    return static_cast<std::uint32_t>(arg_value(event, Arg::Correlation, [&](const RawValue& id) {
                                        return id_of(id, kineto::arg::kCorrelation, UINT32_MAX);
                                      }).value_or(0));
  }

  std::uint32_t uint32_arg(const RawEvent& event, Arg arg, std::string_view key, std::uint32_t otherwise = 0) {
    return static_cast<std::uint32_t>(
        arg_value(event, arg, [&](const RawValue& value) { return unsigned_of(value, key, UINT32_MAX); }).value_or(otherwise));
  }

  /// The category of a slice whose "cat" the reader does not know: device work, as Holistic Trace
  /// Analysis takes it (a category naming kernels or copies, or a slice on a stream), or nothing.
  static std::optional<CatMeaning> unknown_device_category(std::string_view category, const RawEvent& event) noexcept {
    const auto names = [&](std::string_view word) {
      return std::search(category.begin(), category.end(), word.begin(), word.end(), [](char a, char b) {
               return (a >= 'A' && a <= 'Z' ? static_cast<char>(a - 'A' + 'a') : a) == b;
             }) != category.end();
    };
    if (names("memcpy")) return CatMeaning::Memcpy;
    if (names("memset")) return CatMeaning::Memset;
    if (names("kernel") || event.arg(Arg::Stream) != nullptr) return CatMeaning::Kernel;
    return std::nullopt;
  }

  void add_slice(const RawEvent& event) {
    const RawValue* category_value = event.field(EventField::Cat);
    if (category_value == nullptr || category_value->type != JsonType::String) return;  // no category: unknown
    std::optional<CatMeaning> category = categories().find(category_value->text);
    bool unknown_device = false;
    if (!category) {
      category = unknown_device_category(category_value->text, event);
      if (!category) return;
      unknown_device = true;
    }
    const std::int64_t start = start_of(event);
    const std::int64_t end = end_of(event, start);
    if (*category == CatMeaning::NotWork) return;
    add_slice_of(event, *category, start, end);
    see_time(start, end);  // once the event is in: a skipped one leaves no trace
    if (unknown_device) {
      const auto found = unknown_device_slices_.find(category_value->text);
      if (found != unknown_device_slices_.end())
        ++found->second;
      else
        unknown_device_slices_.emplace(std::string(category_value->text), 1);
    }
  }

  void add_slice_of(const RawEvent& event, CatMeaning category, std::int64_t start, std::int64_t end) {
    switch (category) {
      case CatMeaning::Op:
      case CatMeaning::Range:
      case CatMeaning::PythonFrame: add_cpu_slice(event, category, start, end); break;
      case CatMeaning::Runtime:
      case CatMeaning::Driver: add_api_call(event, category == CatMeaning::Driver, start, end); break;
      case CatMeaning::Kernel:
      case CatMeaning::Memcpy:
      case CatMeaning::Memset:
      case CatMeaning::Sync:
      case CatMeaning::GpuAnnotation: add_gpu_work(event, category, start, end); break;
      case CatMeaning::Overhead: trace_.overhead_events.push_back(OverheadEvent{start, end, intern(name_of(event))}); break;
      case CatMeaning::Span:  // the window: counted by see_time
      case CatMeaning::NotWork: break;
    }
  }

  void add_cpu_slice(const RawEvent& event, CatMeaning category, std::int64_t start, std::int64_t end) {
    const std::string_view name = name_of(event);
    TraceEvent slice;
    slice.start_ns = start;
    slice.end_ns = end;
    slice.name = intern(name);
    slice.thread = event_thread(event);
    slice.external_id = external_id_of(event);
    if (is_profiler_step(name)) {
      slice.kind = EventKind::Step;
      slice.category = Category::Step;
    } else if (category == CatMeaning::Op) {
      slice.kind = EventKind::Op;
      // Ops nested in a backward frame join it in sort_and_categorise().
      slice.category = is_backward_op(name) ? Category::Backward : Category::User;
    } else {
      slice.kind = category == CatMeaning::PythonFrame ? EventKind::PythonFrame : EventKind::Range;
      slice.category = range_category(name);
      if (const RawValue* named = event.arg(Arg::DlprofCategory); named != nullptr && slice.kind == EventKind::Range)
        if (const std::optional<std::string_view> text = text_of(*named, kineto::arg::kDlprofCategory))
          slice.category = category_named(*text).value_or(slice.category);
    }
    slice.sequence_number = arg_value(event, Arg::SequenceNumber, [&](const RawValue& value) {
                              return signed_of(value, kineto::arg::kSequenceNumber, INT64_MAX);
                            }).value_or(-1);
    slice.forward_thread_id = arg_value(event, Arg::ForwardThreadId, [&](const RawValue& value) {
                                return unsigned_of(value, kineto::arg::kFwdThreadId, UINT64_MAX);
                              }).value_or(0);
    slice.inputs = inputs_of(event, slice.name);
    if (const RawValue* stack = event.arg(Arg::CallStack))
      if (const std::optional<std::string_view> text = text_of(*stack, kineto::arg::kCallStack)) slice.stack = stack_of(*text);
    if (slice.kind == EventKind::Op && event.arg(Arg::CollectiveName) != nullptr) {
      slice.category = Category::Communication;
      add_collective(event, slice);
    }
    const std::int64_t stream =
        arg_value(event, Arg::Stream, [&](const RawValue& value) { return stream_of(value); }).value_or(-1);
    if (stream != -1) trace_.cpu_slices_on_streams.push_back(CpuSliceOnStream{start, end, slice.name, stream});
    trace_.events.push_back(slice);
  }

  /// dlprof_clock_offset, which the handler keeps as JSON text with the keys it does not know,
  /// becomes DistributedInfo::clock_offset; one that is not an object of four integers stays in
  /// the metadata, with a note.
  void take_clock_offset() {
    const auto kept = std::find_if(trace_.metadata.begin(), trace_.metadata.end(),
                                   [](const auto& entry) { return entry.first == kineto::key::kClockOffset; });
    if (kept == trace_.metadata.end()) return;
    rapidjson::Document document;
    document.Parse(kept->second.data(), kept->second.size());
    ClockOffset offset;
    const auto field = [&](std::string_view name, std::int64_t& value) {
      if (!document.IsObject()) return false;
      const auto member = document.FindMember(rapidjson::StringRef(name.data(), name.size()));
      if (member == document.MemberEnd() || !member->value.IsInt64()) return false;
      value = member->value.GetInt64();
      return true;
    };
    if (field(kineto::key::kReferenceRank, offset.reference_rank) && field(kineto::key::kOffsetNs, offset.offset_ns) &&
        field(kineto::key::kUncertaintyNs, offset.uncertainty_ns) && field(kineto::key::kRoundTrips, offset.round_trips) &&
        offset.uncertainty_ns >= 0) {
      trace_.distributed.clock_offset = offset;
      trace_.metadata.erase(kept);
      return;
    }
    if (strict_) fail_at(0, fmt::format("\"{}\" must be an object of four integers", kineto::key::kClockOffset));
    note(fmt::format("\"{}\" is not an object of four integers: the rank's clock is taken as the reference's; kept in the metadata",
                     kineto::key::kClockOffset));
  }

  /// The CallStack of a `Call stack` arg's text, its frames' texts interned; the same text twice
  /// is one stack. kNoStack for an empty text.
  std::uint32_t stack_of(std::string_view text) {
    if (text.empty()) return TraceEvent::kNoStack;
    const auto found = stack_index_.find(text);
    if (found != stack_index_.end()) return found->second;
    const auto index = static_cast<std::uint32_t>(trace_.stacks.size());
    CallStack stack{static_cast<std::uint32_t>(trace_.stack_frames.size()), 0};
    for_each_field(text, std::string_view(&kineto::arg::kCallStackSeparator, 1), /*skip_empty=*/false, [&](std::string_view frame) {
      trace_.stack_frames.push_back(StackFrame{0, intern(frame)});
      ++stack.depth;
      return true;
    });
    trace_.stacks.push_back(stack);
    stack_index_.emplace(stack_texts_.emplace_back(text), index);  // a deque's elements never move
    return index;
  }

  /// torch.profiler's with_stack without its experimental `Call stack` args: the Python frames
  /// around each op and range on its thread (python_function slices, which nest them) become its
  /// stack, the innermost first, at most kMaxPythonFrames deep. An op with a `Call stack` keeps it.
  /// Call once the events are sorted.
  void take_python_stacks() {
    constexpr std::size_t kMaxPythonFrames = 256;
    std::vector<std::uint32_t> open;  // the thread's Python frames not yet ended, outermost first
    std::vector<std::uint32_t> frames;
    std::map<std::vector<std::uint32_t>, std::uint32_t> stack_of_frames;  // by frame names, innermost first
    std::uint32_t thread = UINT32_MAX;
    for (std::uint32_t i = 0; i < trace_.events.size(); ++i) {
      TraceEvent& event = trace_.events[i];
      if (event.thread != thread) {
        open.clear();
        thread = event.thread;
      }
      if (!is_slice(event.kind)) continue;
      while (!open.empty() && trace_.events[open.back()].end_ns <= event.start_ns) open.pop_back();
      if (event.kind == EventKind::PythonFrame) {
        open.push_back(i);
        continue;
      }
      if ((event.kind != EventKind::Op && event.kind != EventKind::Range) || event.stack != TraceEvent::kNoStack) continue;
      frames.clear();
      // Frames that only overlap the event (a malformed file) are not around it.
      for (std::size_t f = open.size(); f-- > 0 && frames.size() < kMaxPythonFrames;)
        if (trace_.events[open[f]].end_ns >= event.end_ns) frames.push_back(trace_.events[open[f]].name);
      if (frames.empty()) continue;
      const auto [found, first] = stack_of_frames.try_emplace(frames, static_cast<std::uint32_t>(trace_.stacks.size()));
      if (first) {
        trace_.stacks.push_back(CallStack{static_cast<std::uint32_t>(trace_.stack_frames.size()), static_cast<std::uint32_t>(frames.size())});
        for (const std::uint32_t name : frames) trace_.stack_frames.push_back(StackFrame{0, name});
      }
      event.stack = found->second;
    }
  }

  /// dlprof_modules, which the handler keeps as JSON text in the metadata, becomes
  /// Trace::modules: an array of objects with a path, a build id and three addresses. A list it
  /// cannot read whole stays in the metadata, with a note, and the stacks' frames keep their text.
  void take_modules() {
    const auto kept = std::find_if(trace_.metadata.begin(), trace_.metadata.end(),
                                   [](const auto& entry) { return entry.first == kineto::key::kModules; });
    if (kept == trace_.metadata.end()) return;
    rapidjson::Document document;
    document.Parse(kept->second.data(), kept->second.size());
    std::vector<LoadedModule> modules;
    bool whole = document.IsArray();
    for (rapidjson::SizeType i = 0; whole && i < document.Size(); ++i) {
      const rapidjson::Value& entry = document[i];
      const auto member = [&](std::string_view name) -> const rapidjson::Value* {
        if (!entry.IsObject()) return nullptr;
        const auto found = entry.FindMember(rapidjson::StringRef(name.data(), name.size()));
        return found == entry.MemberEnd() ? nullptr : &found->value;
      };
      const rapidjson::Value* path = member(kineto::key::kModulePath);
      const rapidjson::Value* build_id = member(kineto::key::kModuleBuildId);
      const rapidjson::Value* base = member(kineto::key::kModuleBase);
      const rapidjson::Value* start = member(kineto::key::kModuleStart);
      const rapidjson::Value* end = member(kineto::key::kModuleEnd);
      whole = path != nullptr && path->IsString() && (build_id == nullptr || build_id->IsString()) && base != nullptr &&
              base->IsUint64() && start != nullptr && start->IsUint64() && end != nullptr && end->IsUint64() &&
              start->GetUint64() <= end->GetUint64();
      if (!whole) break;
      LoadedModule module;
      module.path.assign(path->GetString(), path->GetStringLength());
      if (build_id != nullptr) module.build_id.assign(build_id->GetString(), build_id->GetStringLength());
      module.base = base->GetUint64();
      module.start = start->GetUint64();
      module.end = end->GetUint64();
      modules.push_back(std::move(module));
    }
    if (!whole) {
      if (strict_) fail_at(0, fmt::format("\"{}\" must be an array of modules, each with a path and three addresses", kineto::key::kModules));
      note(fmt::format("\"{}\" is not an array of modules, each with a path and three addresses: call stacks keep "
                       "their frames' text; kept in the metadata",
                       kineto::key::kModules));
      return;
    }
    std::sort(modules.begin(), modules.end(), [](const LoadedModule& a, const LoadedModule& b) { return a.start < b.start; });
    trace_.modules = std::move(modules);
    trace_.metadata.erase(kept);
  }

  /// A frame spelled as an unsymbolised one ("libfoo.so+0x1a2b") of a module the trace names
  /// becomes its address, to be symbolised (format/call_stack.hpp); other frames keep their text.
  void take_unsymbolised_frames() {
    if (trace_.modules.empty()) return;
    for (StackFrame& frame : trace_.stack_frames) {
      if (const std::optional<std::uint64_t> address = unsymbolised_frame_address(trace_.modules, names_[frame.text])) {
        frame.address = *address;
        frame.text = StackFrame::kNoText;
      }
    }
  }

  /// distributedInfo's pg_config, which the handler keeps as JSON text in the metadata: the process
  /// groups, each {pg_name, pg_desc, backend_config, pg_size, ranks}, into
  /// Trace::distributed.groups. Names and sizes may be numbers or text, as the writers' versions
  /// differ. A list it cannot read whole stays in the metadata, with a note.
  void take_process_groups() {
    const std::string key = fmt::format("{}.{}", kineto::key::kDistributedInfo, kineto::key::kPgConfig);
    const auto kept = std::find_if(trace_.metadata.begin(), trace_.metadata.end(), [&](const auto& entry) { return entry.first == key; });
    if (kept == trace_.metadata.end()) return;
    rapidjson::Document document;
    document.Parse(kept->second.data(), kept->second.size());
    const auto text = [](const rapidjson::Value& value) -> std::optional<std::string> {
      if (value.IsString()) return std::string(value.GetString(), value.GetStringLength());
      if (value.IsInt64()) return std::to_string(value.GetInt64());
      return std::nullopt;
    };
    const auto integer = [](const rapidjson::Value& value) -> std::optional<std::int64_t> {
      if (value.IsInt64()) return value.GetInt64();
      std::int64_t number = 0;
      if (!value.IsString()) return std::nullopt;
      const std::string_view digits(value.GetString(), value.GetStringLength());
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
      if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
      return number;
    };
    const auto group_of = [&](const rapidjson::Value& entry) -> std::optional<ProcessGroupInfo> {
      if (!entry.IsObject()) return std::nullopt;
      const auto member = [&](std::string_view name) -> const rapidjson::Value* {
        const auto found = entry.FindMember(rapidjson::StringRef(name.data(), name.size()));
        return found == entry.MemberEnd() ? nullptr : &found->value;
      };
      ProcessGroupInfo group;
      const rapidjson::Value* name = member(kineto::key::kPgName);
      const rapidjson::Value* size = member(kineto::key::kPgSize);
      const rapidjson::Value* ranks = member(kineto::key::kRanks);
      if (name == nullptr || size == nullptr || ranks == nullptr || !ranks->IsArray()) return std::nullopt;
      std::optional<std::string> name_text = text(*name);
      std::optional<std::int64_t> size_number = integer(*size);
      if (!name_text || !size_number) return std::nullopt;
      group.name = std::move(*name_text);
      group.size = *size_number;
      const rapidjson::Value* desc = member(kineto::key::kPgDesc);
      group.desc = desc == nullptr ? std::string() : text(*desc).value_or(std::string());
      const rapidjson::Value* backend = member(kineto::key::kBackendConfig);
      group.backend_config = backend == nullptr ? std::string() : text(*backend).value_or(std::string());
      for (const rapidjson::Value& rank : ranks->GetArray()) {
        const std::optional<std::int64_t> number = integer(rank);
        if (!number) return std::nullopt;
        group.ranks.push_back(*number);
      }
      return group;
    };
    std::vector<ProcessGroupInfo> groups;
    bool whole = document.IsArray();
    if (whole)
      for (const rapidjson::Value& entry : document.GetArray()) {
        std::optional<ProcessGroupInfo> group = group_of(entry);
        if (!group) {
          whole = false;
          break;
        }
        groups.push_back(std::move(*group));
      }
    if (whole) {
      trace_.distributed.groups = std::move(groups);
      trace_.metadata.erase(kept);
      return;
    }
    if (strict_)
      fail_at(0, fmt::format("\"{}\" must be a list of process groups, each with {}, {} and {}", kineto::key::kPgConfig,
                             kineto::key::kPgName, kineto::key::kPgSize, kineto::key::kRanks));
    note(fmt::format("\"{}\" is not a list of process groups with {}, {} and {}: the rank's groups are not compared with the "
                     "others'; kept in the metadata",
                     kineto::key::kPgConfig, kineto::key::kPgName, kineto::key::kPgSize, kineto::key::kRanks));
  }

  /// The collective a record_param_comms op describes; finish() puts its thread and start where
  /// the op's go.
  void add_collective(const RawEvent& event, const TraceEvent& op) {
    CollectiveCall call;
    call.thread = op.thread;
    call.start_ns = op.start_ns;
    const auto text = [&](Arg arg, std::string_view key, std::string& field) {
      const RawValue* value = event.arg(arg);
      if (value == nullptr) return;
      if (const std::optional<std::string_view> converted = text_of(*value, key)) field = std::string(*converted);
    };
    const auto integer = [&](Arg arg, std::string_view key, std::int64_t& field) {
      if (const auto value = arg_value(event, arg, [&](const RawValue& raw) { return signed_of(raw, key, INT64_MAX); }))
        field = *value;
    };
    namespace field = kineto::arg;
    text(Arg::CollectiveName, field::kCollectiveName, call.name);
    text(Arg::Dtype, field::kDtype, call.dtype);
    integer(Arg::InMsgNelems, field::kInMsgNelems, call.in_nelems);
    integer(Arg::OutMsgNelems, field::kOutMsgNelems, call.out_nelems);
    text(Arg::InSplitSize, field::kInSplitSize, call.in_split);
    text(Arg::OutSplitSize, field::kOutSplitSize, call.out_split);
    integer(Arg::GroupSize, field::kGroupSize, call.group_size);
    text(Arg::ProcessGroupName, field::kProcessGroupName, call.group_name);
    text(Arg::ProcessGroupDesc, field::kProcessGroupDesc, call.group_desc);
    text(Arg::ProcessGroupRanks, field::kProcessGroupRanks, call.group_ranks);
    integer(Arg::CommRank, field::kCommRank, call.rank);
    integer(call.name == "recv" ? Arg::SrcRank : Arg::DstRank, call.name == "recv" ? field::kSrcRank : field::kDstRank, call.peer);
    integer(Arg::Seq, field::kSeq, call.seq);
    trace_.collectives.push_back(std::move(call));
  }

  /// The op's inputs as texts in Trace::names (an empty text where the trace has none), shared
  /// by every op of that name called with the same inputs.
  std::uint32_t inputs_of(const RawEvent& event, std::uint32_t op) {
    const RawValue* dims = event.arg(Arg::InputDims);
    if (dims == nullptr) dims = event.arg(Arg::InputDimsLower);
    const RawValue* types = event.arg(Arg::InputType);
    const RawValue* concrete = event.arg(Arg::ConcreteInputs);
    const RawValue* strides = event.arg(Arg::InputStrides);
    const RawValue* flops = event.arg(Arg::Flops);
    if (dims == nullptr && types == nullptr && concrete == nullptr && flops == nullptr) return TraceEvent::kNoInputs;
    const auto text = [&](const RawValue* value) { return intern(value == nullptr ? std::string_view{} : value->text); };
    const InputsKey key{op, text(dims), text(types), text(concrete), strides == nullptr ? OpInputs::kNoText : text(strides),
                        arg_value(event, Arg::Flops, [&](const RawValue& value) {
                          return unsigned_of(value, kineto::arg::kFlops, UINT64_MAX);
                        }).value_or(0)};
    const auto [found, inserted] = inputs_index_.try_emplace(key, static_cast<std::uint32_t>(trace_.op_inputs.size()));
    if (inserted) trace_.op_inputs.push_back(OpInputs{key.dims, key.types, key.concrete, key.op, key.flops, 0, key.strides});
    return found->second;
  }

  void add_api_call(const RawEvent& event, bool driver, std::int64_t start, std::int64_t end) {
    ApiEvent call;
    call.start_ns = start;
    call.end_ns = end;
    call.external_id = external_id_of(event);
    call.name = intern(name_of(event));
    call.thread = event_thread(event);
    call.cbid = uint32_arg(event, Arg::Cbid, kineto::arg::kCbid);
    call.correlation = correlation_of(event);
    call.driver = driver;
    trace_.api_events.push_back(call);
  }

  /// CUDA stream ids; CUPTI writes "no stream" as (uint32_t)-1.
  std::int64_t stream_of(const RawValue& value) const {
    const std::int64_t stream = signed_of(value, kineto::arg::kStream, INT64_MAX);
    return stream == std::int64_t{UINT32_MAX} ? -1 : stream;
  }

  void add_gpu_work(const RawEvent& event, CatMeaning category, std::int64_t start, std::int64_t end) {
    const std::string_view name = name_of(event);
    const Id pid = id_of_field(event.field(EventField::Pid), "pid");
    const Id tid = id_of_field(event.field(EventField::Tid), "tid");
    gpu_rows_.emplace(pid.number, tid.number);
    GpuEvent work;
    work.start_ns = start;
    work.end_ns = end;
    work.external_id = external_id_of(event);
    work.name = intern(name);
    work.correlation = correlation_of(event);
    // pid = device is the fallback: gpu_user_annotation has no args.device.
    work.device = static_cast<std::uint32_t>(pid.number < 0 || pid.number > UINT32_MAX ? 0 : pid.number);
    if (event.arg(Arg::Device) != nullptr)
      work.device = uint32_arg(event, Arg::Device, kineto::arg::kDevice, work.device);
    else
      work.device = uint32_arg(event, Arg::InDevice, kineto::arg::kInDevice, work.device);
    work.context = uint32_arg(event, Arg::Context, kineto::arg::kContext,
                              uint32_arg(event, Arg::InContext, kineto::arg::kInContext));
    std::optional<std::int64_t> stream = arg_value(event, Arg::Stream, [&](const RawValue& value) { return stream_of(value); });
    if (!stream)
      stream = arg_value(event, Arg::SyclQueue, [&](const RawValue& value) {
        return signed_of(value, kineto::arg::kSyclQueue, INT64_MAX);
      });
    // Without a stream in its args, the row is the stream only where Kineto puts work on its
    // stream's row without naming it: gpu_user_annotation spans, and the "stream 7" rows of traces
    // before 2022. Any other row is a thread (MTIA's dma_request copies), and the work is on no
    // stream (-1), as HTA reads it.
    const bool row_is_stream = category == CatMeaning::GpuAnnotation || !tid.is_number;
    work.stream = stream.value_or(row_is_stream ? tid.number : -1);
    work.graph_id = uint32_arg(event, Arg::GraphId, kineto::arg::kGraphId);
    work.graph_node_id = arg_value(event, Arg::GraphNodeId, [&](const RawValue& value) {
                           return unsigned_of(value, kineto::arg::kGraphNodeId, UINT64_MAX);
                         }).value_or(0);
    if (const RawValue* captured_by = event.arg(Arg::CapturedBy))
      if (const std::optional<std::string_view> text = text_of(*captured_by, kineto::arg::kCapturedBy))
        work.captured_by = intern(*text);
    if (const RawValue* stack = event.arg(Arg::CaptureCallStack))
      if (const std::optional<std::string_view> text = text_of(*stack, kineto::arg::kCaptureCallStack))
        work.capture_stack = stack_of(*text);
    switch (category) {
      case CatMeaning::Kernel:
        work.kind = GpuEventKind::Kernel;
        work.kernel = kernel_details(event);
        break;
      case CatMeaning::Memcpy: {
        work.kind = GpuEventKind::Memcpy;
        work.copy.bytes = bytes_of(event);
        const CopyKinds kinds = copy_kinds_of(name);  // "Memcpy HtoD (Pageable -> Device)"
        work.copy.copy_kind = kinds.copy_kind;
        work.copy.source_kind = kinds.source_kind;
        work.copy.destination_kind = kinds.destination_kind;
        const RawValue* from_device = event.arg(Arg::FromDevice);
        const RawValue* to_device = event.arg(Arg::ToDevice);
        if (work.copy.copy_kind == kineto::kMemcpyKindPeer || from_device != nullptr || to_device != nullptr) {
          work.kind = GpuEventKind::MemcpyPeer;
          work.copy.source_device = uint32_arg(event, Arg::FromDevice, kineto::arg::kFromDevice);
          work.copy.destination_device = uint32_arg(event, Arg::ToDevice, kineto::arg::kToDevice);
          work.copy.source_context = uint32_arg(event, Arg::FromContext, kineto::arg::kFromContext);
          work.copy.destination_context = uint32_arg(event, Arg::ToContext, kineto::arg::kToContext);
        }
        break;
      }
      case CatMeaning::Memset: {
        work.kind = GpuEventKind::Memset;
        work.copy.bytes = bytes_of(event);
        work.copy.destination_kind = fill_kind_of(name);  // "Memset (Device)"
        break;
      }
      case CatMeaning::Sync: {
        work.kind = GpuEventKind::Sync;
        const RawValue* kind = event.arg(Arg::CudaSyncKind);
        work.sync.type = sync_type_of(kind != nullptr && kind->type == JsonType::String ? kind->text : name);
        work.sync.cuda_event_id = uint32_arg(event, Arg::WaitOnCudaEventId, kineto::arg::kWaitOnCudaEventId);
        // A synchronisation's row is not its stream (dlprof's "stream N (sync)" rows, Kineto's
        // context syncs on tid -1): the stream comes from args alone.
        work.stream = stream.value_or(-1);
        break;
      }
      case CatMeaning::GpuAnnotation: work.kind = GpuEventKind::Annotation; break;
      case CatMeaning::Op:
      case CatMeaning::Range:
      case CatMeaning::PythonFrame:
      case CatMeaning::Runtime:
      case CatMeaning::Driver:
      case CatMeaning::Overhead:
      case CatMeaning::Span:
      case CatMeaning::NotWork: break;
    }
    trace_.gpu_events.push_back(work);
  }

  std::uint64_t bytes_of(const RawEvent& event) {
    return arg_value(event, Arg::Bytes,
                     [&](const RawValue& value) { return unsigned_of(value, kineto::arg::kBytes, UINT64_MAX); })
        .value_or(0);
  }

  /// "[512, 1, 1]" (compact text from the handler) into x, y, z; missing dimensions are 1.
  static std::array<std::uint32_t, 3> dims_of(const RawValue& value, std::string_view key) {
    if (value.type != JsonType::Array)
      fail_at(value.offset, fmt::format("\"{}\" must be an array, not {}", key, type_name(value.type)));
    std::array<std::uint32_t, 3> xyz{1, 1, 1};
    std::string_view rest = value.text.substr(1, value.text.size() - 2);
    for (std::size_t i = 0; !rest.empty(); ++i) {
      if (i == 3) fail_at(value.offset, fmt::format("\"{}\" has more than 3 dimensions: {}", key, value.text));
      const std::size_t comma = rest.find(',');
      const RawValue element{rest.substr(0, comma), value.offset, JsonType::Number};
      std::uint64_t dimension = 0;
      const NumberError error = to_uint64(element.text, UINT32_MAX, &dimension);
      if (error != NumberError::None) fail_number(value, key, error);
      xyz[i] = static_cast<std::uint32_t>(dimension);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 2);  // ", "
    }
    return xyz;
  }

  KernelDetails kernel_details(const RawEvent& event) {
    KernelDetails kernel;
    const auto dims = [&](Arg arg, std::string_view key, std::uint32_t (&xyz)[3]) {
      if (const auto found = arg_value(event, arg, [&](const RawValue& value) { return dims_of(value, key); }))
        std::copy(found->begin(), found->end(), xyz);
    };
    dims(Arg::Grid, kineto::arg::kGrid, kernel.grid);
    dims(Arg::Block, kineto::arg::kBlock, kernel.block);
    kernel.registers_per_thread = uint32_arg(event, Arg::RegistersPerThread, kineto::arg::kRegistersPerThread);
    // Kineto writes static + dynamic as one figure; it is read back as static.
    kernel.static_shared_memory = uint32_arg(event, Arg::SharedMemory, kineto::arg::kSharedMemory);
    kernel.queued_ns = arg_value(event, Arg::Queued, [&](const RawValue& value) {
                         return nanoseconds_of(value, kineto::arg::kQueued);
                       }).value_or(0);
    kernel.blocks_per_sm = arg_value(event, Arg::BlocksPerSm, [&](const RawValue& value) {
                             return float_of(value, kineto::arg::kBlocksPerSm);
                           }).value_or(0.0f);
    kernel.warps_per_sm = arg_value(event, Arg::WarpsPerSm, [&](const RawValue& value) {
                            return float_of(value, kineto::arg::kWarpsPerSm);
                          }).value_or(0.0f);
    kernel.est_achieved_occupancy_percent = static_cast<int>(
        arg_value(event, Arg::AchievedOccupancy, [&](const RawValue& value) {
          return signed_of(value, kineto::arg::kAchievedOccupancy, INT32_MAX);
        }).value_or(kineto::arg::kOccupancyUnknown));
    return kernel;
  }

  void add_instant(const RawEvent& event) {
    const std::int64_t time = start_of(event);
    const std::string_view name = name_of(event);
    const RawValue* pid = event.field(EventField::Pid);
    if (pid != nullptr && pid->type == JsonType::String) {  // Kineto's own marks: "Record Window End", ...
      see_time(time, time);
      return;
    }
    if (name == kineto::name::kMemory) {
      add_memory(event, time);
    } else if (name == kineto::name::kMemoryCategoryTag) {
      add_memory_tag(event, time);
    } else if (name == kineto::name::kOutOfMemory) {
      add_out_of_memory(event, time);
    } else {
      TraceEvent instant;
      instant.start_ns = instant.end_ns = time;
      instant.name = intern(name);
      instant.thread = event_thread(event);
      instant.kind = EventKind::Instant;
      trace_.events.push_back(instant);
    }
    see_time(time, time);
  }

  /// The args the memory instants share (`[memory]`, `[OutOfMemory]`, `[memory category]`); 0 for
  /// one that is absent or unusable.
  struct MemoryArgs {
    MemoryDeviceType device_type = MemoryDeviceType::CPU;
    std::int32_t device = 0;
    std::uint64_t address = 0;
    std::int64_t bytes = 0;
    std::int64_t total_allocated = 0;
    std::int64_t total_reserved = 0;
  };

  MemoryArgs memory_args(const RawEvent& event) {
    const auto signed_arg = [&](Arg arg, std::string_view key, std::int64_t limit) -> std::int64_t {
      return arg_value(event, arg, [&](const RawValue& value) { return signed_of(value, key, limit); }).value_or(0);
    };
    MemoryArgs args;
    args.device_type = static_cast<MemoryDeviceType>(signed_arg(Arg::MemoryDeviceType, kineto::arg::kDeviceType, INT8_MAX));
    args.device = static_cast<std::int32_t>(signed_arg(Arg::MemoryDeviceId, kineto::arg::kDeviceId, INT32_MAX));
    args.address = arg_value(event, Arg::MemoryAddress, [&](const RawValue& value) {
                     return unsigned_of(value, kineto::arg::kAddr, UINT64_MAX);
                   }).value_or(0);
    args.bytes = signed_arg(Arg::MemoryBytes, kineto::arg::kMemoryBytes, INT64_MAX);
    args.total_allocated = signed_arg(Arg::TotalAllocated, kineto::arg::kTotalAllocated, INT64_MAX);
    args.total_reserved = signed_arg(Arg::TotalReserved, kineto::arg::kTotalReserved, INT64_MAX);
    return args;
  }

  void add_memory(const RawEvent& event, std::int64_t time) {
    const MemoryArgs args = memory_args(event);
    MemoryEvent memory;
    memory.time_ns = time;
    memory.thread = event_thread(event);
    memory.device_type = args.device_type;
    memory.device = args.device;
    memory.address = args.address;
    memory.bytes = args.bytes;
    memory.total_allocated = args.total_allocated;
    memory.total_reserved = args.total_reserved;
    trace_.memory_events.push_back(memory);
  }

  void add_out_of_memory(const RawEvent& event, std::int64_t time) {
    const MemoryArgs args = memory_args(event);
    OutOfMemoryEvent failure;
    failure.time_ns = time;
    failure.thread = event_thread(event);
    failure.device_type = args.device_type;
    failure.device = args.device;
    failure.bytes = args.bytes;
    failure.total_allocated = args.total_allocated;
    failure.total_reserved = args.total_reserved;
    trace_.out_of_memory.push_back(failure);
  }

  void add_memory_tag(const RawEvent& event, std::int64_t time) {
    const RawValue* named = event.arg(Arg::MemoryCategory);
    const std::optional<std::string_view> text = named == nullptr ? std::nullopt : text_of(*named, kineto::arg::kMemoryCategory);
    const std::optional<MemoryCategory> category = text ? memory_category_named(*text) : std::nullopt;
    if (!category) {
      if (!unknown_memory_category_noted_)
        note(fmt::format("a {} event without a known \"{}\" (parameters, gradients, optimizer state, activations, temporaries, "
                         "inputs, unknown): left out, as any other like it",
                         kineto::name::kMemoryCategoryTag, kineto::arg::kMemoryCategory));
      unknown_memory_category_noted_ = true;
      return;
    }
    const MemoryArgs args = memory_args(event);
    MemoryTag tag;
    tag.time_ns = time;
    tag.thread = event_thread(event);
    tag.category = *category;
    tag.device_type = args.device_type;
    tag.device = args.device;
    tag.address = args.address;
    tag.bytes = args.bytes;
    trace_.memory_tags.push_back(tag);
  }

  /// One Counter event per series: `{"value": v}` (dlprof's) keeps the counter's name, any other
  /// series is "<name> <series>" as Perfetto names its tracks.
  void add_counter(const RawEvent& event) {
    const std::int64_t time = start_of(event);
    const std::string_view name = name_of(event);
    if (add_device_counter(event, time, name)) return;
    if (starts_with(name, kineto::name::kThreadCpuPrefix)) return add_thread_cpu_share(event, time);
    if (starts_with(name, kineto::name::kMemoryByCategoryPrefix)) {  // derived from the memory events, derived again
      see_time(time, time);
      return;
    }
    const std::uint32_t thread = event_thread(event);
    see_time(time, time);
    for (const auto& [series, value] : event.numeric_args) {
      TraceEvent counter;
      counter.start_ns = counter.end_ns = time;
      const std::optional<double> sample = optional([&, &series = series, &value = value] {
        double number = 0;
        const NumberError error = to_double(value.text, &number);
        if (error != NumberError::None) fail_number(value, series, error);
        return number;
      });
      if (!sample) continue;
      counter.value = *sample;
      counter.name = series == "value" ? intern(name) : intern(fmt::format("{} {}", name, series));
      counter.thread = thread;
      counter.kind = EventKind::Counter;
      trace_.events.push_back(counter);
    }
  }

  /// A reading of a thread's CPU-time track (kThreadCpuPrefix): its shares of the time until the
  /// thread's next, which thread_cpu_samples() turns into Trace::thread_cpu once all are read.
  void add_thread_cpu_share(const RawEvent& event, std::int64_t time) {
    ThreadCpuShare share{event_thread(event), time, 0, -1};
    see_time(time, time);
    bool running = false;
    for (const auto& [series, value] : event.numeric_args) {
      const bool is_running = series == kineto::arg::kRunningPercent;
      if (!is_running && series != kineto::arg::kWaitingForCpuPercent) continue;
      const std::optional<double> percent = optional([&, &series = series, &value = value] {
        double number = 0;
        const NumberError error = to_double(value.text, &number);
        if (error != NumberError::None) fail_number(value, series, error);
        if (!(number >= 0 && number <= 1e6))
          fail_at(value.offset, fmt::format("\"{}\" of a thread's CPU track must be a share in percent, not {}", series,
                                            value.text));
        return number;
      });
      if (!percent) continue;
      (is_running ? share.running_percent : share.waiting_percent) = *percent;
      running = running || is_running;
    }
    if (running) thread_cpu_shares_.push_back(share);
  }

  /// Each thread's CPU-time track as readings counted from its first: a share of the time to the
  /// next reading adds that much.
  void thread_cpu_samples(const std::vector<std::uint32_t>& final_index) {
    for (ThreadCpuShare& share : thread_cpu_shares_) share.thread = final_index[share.thread];
    std::stable_sort(thread_cpu_shares_.begin(), thread_cpu_shares_.end(), [](const ThreadCpuShare& a, const ThreadCpuShare& b) {
      return a.thread != b.thread ? a.thread < b.thread : a.time_ns < b.time_ns;
    });
    trace_.thread_cpu.reserve(thread_cpu_shares_.size());
    for (std::size_t i = 0; i < thread_cpu_shares_.size(); ++i) {
      const ThreadCpuShare& share = thread_cpu_shares_[i];
      const bool first = i == 0 || thread_cpu_shares_[i - 1].thread != share.thread;
      ThreadCpuSample sample{share.time_ns, 0, share.waiting_percent >= 0 ? 0 : -1, share.thread};
      if (!first) {
        const ThreadCpuShare& before = thread_cpu_shares_[i - 1];
        const ThreadCpuSample& previous = trace_.thread_cpu.back();
        const double span = static_cast<double>(share.time_ns - before.time_ns);
        sample.cpu_ns = previous.cpu_ns + std::llround(before.running_percent / 100 * span);
        sample.run_delay_ns = previous.run_delay_ns >= 0 && before.waiting_percent >= 0
                                  ? previous.run_delay_ns + std::llround(before.waiting_percent / 100 * span)
                                  : -1;
      }
      trace_.thread_cpu.push_back(sample);
    }
    std::vector<ThreadCpuShare>().swap(thread_cpu_shares_);
  }

  /// dlprof's GPU counters (kDeviceCounters, `{"value": v}` on the device's pid) are the
  /// device's; false for any other counter.
  bool add_device_counter(const RawEvent& event, std::int64_t time, std::string_view name) {
    const auto* known = std::find(std::begin(kineto::name::kDeviceCounters), std::end(kineto::name::kDeviceCounters), name);
    if (known == std::end(kineto::name::kDeviceCounters)) return false;
    const Id pid = id_of_field(event.field(EventField::Pid), "pid");
    constexpr std::int64_t kMaxDevice = 4095;  // a process id is no device
    if (!pid.is_number || pid.number < 0 || pid.number > kMaxDevice) return false;
    see_time(time, time);
    for (const auto& [series, value] : event.numeric_args) {
      if (series != kineto::arg::kValue) continue;
      double number = 0;
      if (to_double(value.text, &number) != NumberError::None) return false;
      trace_.device_counters.push_back(
          {time, number, static_cast<std::uint32_t>(pid.number),
           static_cast<DeviceCounterKind>(known - std::begin(kineto::name::kDeviceCounters))});
    }
    return true;
  }

  void add_metadata_event(const RawEvent& event) {
    const RawValue* ts = event.field(EventField::Ts);
    const std::int64_t time = ts != nullptr ? time_of(*ts) : 0;
    const std::string_view kind = name_of(event);
    const auto text_arg = [&](Arg arg, std::string_view key) -> std::string_view {
      return arg_value(event, arg, [&](const RawValue& value) {
               const std::optional<std::string_view> text = text_of(value, key);
               if (!text) fail_at(value.offset, fmt::format("\"{}\" must be a string, not {}", key, type_name(value.type)));
               return *text;
             }).value_or(std::string_view{});
    };
    const Id pid = id_of_field(event.field(EventField::Pid), "pid");
    if (ts != nullptr) see_time(time, time);
    if (kind == kineto::name::kProcessName) {
      if (pid.is_number) process_names_[pid.number] = std::string(text_arg(Arg::MetadataName, kineto::arg::kName));
    } else if (kind == kineto::name::kProcessLabels) {
      if (pid.is_number && text_arg(Arg::MetadataLabels, kineto::arg::kLabels) == kineto::name::kCpuLabel &&
          !cpu_pid_label_)
        cpu_pid_label_ = pid.number;
    } else if (kind == kineto::name::kThreadName) {
      const Id tid = id_of_field(event.field(EventField::Tid), "tid");
      ThreadEntry& thread = threads_[thread_of(pid, tid, false)];
      thread.name = std::string(text_arg(Arg::MetadataName, kineto::arg::kName));
      thread.named = true;
    }
  }

  /// Trace::pid is the pid most CPU events carry (ties: the first seen); a trace without CPU
  /// events takes the process Kineto labels "CPU".
  void choose_process() {
    std::unordered_map<std::int64_t, std::uint64_t> events_per_pid;
    std::uint64_t best_count = 0;
    std::uint64_t best_mention = UINT64_MAX;
    bool found = false;
    for (const ThreadEntry& thread : threads_) {
      if (!thread.pid_is_number || thread.event_count == 0) continue;
      events_per_pid[thread.pid] += thread.event_count;
    }
    for (const ThreadEntry& thread : threads_) {
      if (!thread.pid_is_number || thread.event_count == 0) continue;
      const std::uint64_t count = events_per_pid[thread.pid];
      if (count > best_count || (count == best_count && thread.first_mention < best_mention)) {
        best_count = count;
        best_mention = thread.first_mention;
        trace_.pid = thread.pid;
        found = true;
      }
    }
    if (!found && cpu_pid_label_) trace_.pid = *cpu_pid_label_;
    const auto name = process_names_.find(trace_.pid);
    if (name != process_names_.end()) trace_.process_name = name->second;
  }

  /// Threads with events, plus threads of the process that only metadata names (GPU rows excluded),
  /// in order of first mention; events are re-pointed at the final indices.
  void remap_threads() {
    std::vector<std::uint32_t> kept;
    for (std::uint32_t i = 0; i < threads_.size(); ++i) {
      const ThreadEntry& thread = threads_[i];
      const bool named_thread_of_process = thread.pid_is_number && thread.pid == trace_.pid &&
                                           gpu_rows_.count({thread.pid, thread.tid}) == 0;
      if (thread.event_count != 0 || named_thread_of_process) kept.push_back(i);
    }
    std::sort(kept.begin(), kept.end(),
              [&](std::uint32_t a, std::uint32_t b) { return threads_[a].first_mention < threads_[b].first_mention; });
    std::vector<std::uint32_t> final_index(threads_.size(), 0);
    trace_.threads.reserve(kept.size());
    for (const std::uint32_t i : kept) {
      ThreadEntry& thread = threads_[i];
      final_index[i] = static_cast<std::uint32_t>(trace_.threads.size());
      ThreadInfo info;
      info.os_tid = thread.tid;
      // Kineto and dlprof write "thread <tid> (<native name>)"; the native name is what was named.
      info.name = thread.named ? native_thread_name(thread.name, thread.tid) : std::move(thread.tid_text);
      trace_.threads.push_back(std::move(info));
    }
    for (TraceEvent& event : trace_.events) event.thread = final_index[event.thread];
    for (ApiEvent& call : trace_.api_events) call.thread = final_index[call.thread];
    for (MemoryEvent& memory : trace_.memory_events) memory.thread = final_index[memory.thread];
    for (MemoryTag& tag : trace_.memory_tags) tag.thread = final_index[tag.thread];
    for (OutOfMemoryEvent& failure : trace_.out_of_memory) failure.thread = final_index[failure.thread];
    for (CollectiveCall& call : trace_.collectives) call.thread = final_index[call.thread];
    thread_cpu_samples(final_index);
  }

  /// Relative times (Kineto since 2024) become absolute; baseTimeNanoseconds may come after the
  /// events in the file, so it is applied at the end.
  void apply_base_time() {
    const std::int64_t base = base_time_ns_;
    trace_.file_time_base_ns = base;
    const auto shift = [&](std::int64_t& ns) {
      if (__builtin_add_overflow(ns, base, &ns) || ns > kTimeLimitNs)  // 2^62 + 2^62 overflows
        fail_at(base_time_offset_, fmt::format("\"{}\" plus a timestamp is beyond 2^62 ns (the year 2116)",
                                              kineto::key::kBaseTimeNanoseconds));
    };
    if (any_time_) {
      shift(first_ns_);
      shift(last_ns_);
      trace_.window_start_ns = first_ns_;
      trace_.window_end_ns = last_ns_;
    }
    if (base == 0) return;
    for (TraceEvent& event : trace_.events) {
      shift(event.start_ns);
      shift(event.end_ns);
    }
    for (GpuEvent& work : trace_.gpu_events) {
      shift(work.start_ns);
      shift(work.end_ns);
    }
    for (ApiEvent& call : trace_.api_events) {
      shift(call.start_ns);
      shift(call.end_ns);
    }
    for (MemoryEvent& memory : trace_.memory_events) shift(memory.time_ns);
    for (MemoryTag& tag : trace_.memory_tags) shift(tag.time_ns);
    for (OutOfMemoryEvent& failure : trace_.out_of_memory) shift(failure.time_ns);
    for (DeviceCounterSample& sample : trace_.device_counters) shift(sample.time_ns);
    for (ThreadCpuSample& sample : trace_.thread_cpu) shift(sample.time_ns);
    for (OverheadEvent& overhead : trace_.overhead_events) {
      shift(overhead.start_ns);
      shift(overhead.end_ns);
    }
    for (CpuSliceOnStream& slice : trace_.cpu_slices_on_streams) {
      shift(slice.start_ns);
      shift(slice.end_ns);
    }
    for (CollectiveCall& call : trace_.collectives) shift(call.start_ns);
  }

  /// trace.hpp's orders (stable: file order breaks the remaining ties), then the Backward
  /// category for every op nested (same thread, time containment) in a backward op.
  void sort_and_categorise() {
    stable_sort_runs(trace_.events.begin(), trace_.events.end(), [](const TraceEvent& a, const TraceEvent& b) {
      if (a.thread != b.thread) return a.thread < b.thread;
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
      return a.kind == EventKind::Step && b.kind != EventKind::Step;  // a step encloses ranges of equal extent
    });
    struct Open {
      std::int64_t start_ns;
      std::int64_t end_ns;
      bool backward;  ///< inside a backward op, or one itself
    };
    std::vector<Open> open;
    std::uint32_t thread = UINT32_MAX;
    for (TraceEvent& event : trace_.events) {
      if (event.thread != thread) {
        open.clear();
        thread = event.thread;
      }
      if (!is_slice(event.kind)) continue;
      while (!open.empty() && open.back().end_ns <= event.start_ns && open.back().start_ns < event.start_ns) open.pop_back();
      // The innermost slice containing this one; slices that only overlap it are not parents.
      // Looked for among the 64 innermost open slices: slices that overlap partially pile up
      // on the stack, and a file of them must not make this quadratic.
      constexpr std::size_t kDeepestParent = 64;
      bool inside_backward = false;
      for (std::size_t depth = 0; depth < open.size() && depth < kDeepestParent; ++depth) {
        const Open& parent = open[open.size() - 1 - depth];
        if (parent.end_ns >= event.end_ns) {
          inside_backward = parent.backward;
          break;
        }
      }
      // A collective launched from backward (DDP's bucket hooks) stays communication.
      if (event.kind == EventKind::Op && inside_backward && event.category != Category::Communication)
        event.category = Category::Backward;
      const bool backward = inside_backward || (event.kind == EventKind::Op && event.category == Category::Backward);
      open.push_back(Open{event.start_ns, event.end_ns, backward});
    }
    stable_sort_runs(trace_.gpu_events.begin(), trace_.gpu_events.end(), [](const GpuEvent& a, const GpuEvent& b) {
      if (a.device != b.device) return a.device < b.device;
      if (a.stream != b.stream) return a.stream < b.stream;
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      return a.end_ns > b.end_ns;
    });
    stable_sort_runs(trace_.api_events.begin(), trace_.api_events.end(), [](const ApiEvent& a, const ApiEvent& b) {
      return a.thread != b.thread ? a.thread < b.thread : a.start_ns < b.start_ns;
    });
    stable_sort_runs(trace_.memory_events.begin(), trace_.memory_events.end(),
                     [](const MemoryEvent& a, const MemoryEvent& b) { return a.time_ns < b.time_ns; });
    stable_sort_runs(trace_.memory_tags.begin(), trace_.memory_tags.end(),
                     [](const MemoryTag& a, const MemoryTag& b) { return a.time_ns < b.time_ns; });
    stable_sort_runs(trace_.out_of_memory.begin(), trace_.out_of_memory.end(),
                     [](const OutOfMemoryEvent& a, const OutOfMemoryEvent& b) { return a.time_ns < b.time_ns; });
    stable_sort_runs(trace_.overhead_events.begin(), trace_.overhead_events.end(),
                     [](const OverheadEvent& a, const OverheadEvent& b) { return a.start_ns < b.start_ns; });
    stable_sort_runs(trace_.device_counters.begin(), trace_.device_counters.end(),
                     [](const DeviceCounterSample& a, const DeviceCounterSample& b) {
                       return std::tie(a.device, a.kind, a.time_ns) < std::tie(b.device, b.kind, b.time_ns);
                     });
    stable_sort_runs(trace_.cpu_slices_on_streams.begin(), trace_.cpu_slices_on_streams.end(),
                     [](const CpuSliceOnStream& a, const CpuSliceOnStream& b) { return a.start_ns < b.start_ns; });
  }

  static constexpr std::uint32_t kNoThread = UINT32_MAX;

  struct ThreadCpuShare {
    std::uint32_t thread = 0;
    std::int64_t time_ns = 0;
    double running_percent = 0;
    double waiting_percent = -1;  ///< -1: not in the file
  };

  Trace trace_;
  std::vector<ThreadCpuShare> thread_cpu_shares_;
  std::deque<std::string> names_;
  std::unordered_map<std::string_view, std::uint32_t> name_index_;
  std::deque<std::string> stack_texts_;
  std::unordered_map<std::string_view, std::uint32_t> stack_index_;  // a `Call stack` text's CallStack
  std::unordered_map<InputsKey, std::uint32_t, InputsKeyHash> inputs_index_;
  std::vector<ThreadEntry> threads_;
  std::unordered_map<std::pair<std::int64_t, std::int64_t>, std::uint32_t, PairHash> numeric_threads_;
  std::unordered_map<std::string, std::uint32_t> text_threads_;
  std::uint32_t last_thread_ = kNoThread;
  std::pair<std::int64_t, std::int64_t> last_thread_key_{};
  std::unordered_set<std::pair<std::int64_t, std::int64_t>, PairHash> gpu_rows_;  ///< (pid, tid) of GPU events
  std::unordered_map<std::int64_t, std::string> process_names_;
  std::optional<std::int64_t> cpu_pid_label_;
  std::uint64_t mentions_ = 0;
  bool strict_ = false;
  bool events_array_found_ = false;
  std::uint64_t ignored_values_ = 0;  ///< event values; metadata kept as text counts in read_result itself
  std::size_t first_ignored_offset_ = 0;
  std::string first_ignored_reason_;
  std::string conversion_failure_;  ///< optional_quietly()'s last failure
  std::size_t notes_left_out_ = 0;
  bool unknown_memory_category_noted_ = false;
  std::map<std::string, std::uint64_t, std::less<>> unknown_device_slices_;  ///< category -> slices
  std::int64_t base_time_ns_ = 0;
  std::size_t base_time_offset_ = 0;
  std::int64_t first_ns_ = 0;
  std::int64_t last_ns_ = 0;
  bool any_time_ = false;
};

}  // namespace detail::reader
DLPROF_END_NAMESPACE
