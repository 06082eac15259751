// dlprof/detail/recording/record.hpp: the fixed-size record a producer writes into its thread's ring.
// Plain data, no pointers to owned memory, so writing one is a few stores and draining
// is a memcpy.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/format_arguments.hpp"
#include "dlprof/memory_category.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Identifies a name without copying it: either the address of a static detail::Site
/// (low bit 0) or an index into the interned-string table shifted left once (low bit 1).
using NameId = std::uint64_t;

/// Set in the id of a DLPROF_RANGE_F's site (low bits 10), whose name is a format: the event's
/// name is that format applied to the arguments in the FormatArguments record before it.
inline constexpr NameId kFormatSiteTag = 2;
inline bool is_format_site_id(NameId id) noexcept { return (id & 3u) == kFormatSiteTag; }

/// What a ring record holds. The first five are the Trace's EventKinds of the same values; the
/// others carry details of the Op or memory record that follows them on the same thread, and the
/// collector folds them into that event.
enum class RecordKind : std::uint8_t {
  Range = 0,    ///< EventKind::Range
  Instant = 1,  ///< EventKind::Instant
  Counter = 2,  ///< EventKind::Counter
  Step = 3,     ///< EventKind::Step
  Op = 4,       ///< EventKind::Op
  /// The sequence number and forward thread of the Op record that follows it.
  OpDetails = 5,
  /// The interned input dims, types and concrete values of the Op record that follows it
  /// (record_shapes, with_flops), and in correlation_sequence its input strides' (0: none).
  OpInputs = 6,
  /// An allocation (bytes > 0) or release reported by a framework's allocator, which becomes one
  /// of Trace::memory_events: name holds the address, end the bytes, correlation_sequence the
  /// device (pack_memory_device()).
  Memory = 7,
  /// The allocator's totals after the Memory record that follows it (name holds the bytes
  /// allocated, end the bytes reserved).
  MemoryTotals = 8,
  /// The collective the Op record that follows it (record_param_comms) made: name holds its
  /// interned description (detail::collective_description), end its sequence number.
  Collective = 9,
  /// The kept arguments of the Range record that follows it, whose name is a DLPROF_RANGE_F's
  /// format (format_site_name_id()): start is the range's, name and end hold the arguments'
  /// bytes (FormatArguments::words), correlation_sequence their types.
  FormatArguments = 10,
  /// The call stack of the Range or Op record that follows it (with_stack): name holds its id in
  /// the process's stack table (stack_table.hpp), start is the range's or op's.
  Stack = 11,
  /// What a piece of memory holds (tag_memory()), which becomes one of Trace::memory_tags: name
  /// holds the address, end the bytes (pack_memory_tag()), correlation_sequence the device
  /// (pack_memory_device()).
  MemoryTag = 12,
  /// An allocation the allocator could not make, which becomes one of Trace::out_of_memory: name
  /// holds the bytes asked for, correlation_sequence the device (pack_memory_device()); the
  /// MemoryTotals record before it the allocator's totals then.
  OutOfMemory = 13,
};
inline constexpr RecordKind kLastRecordKind = RecordKind::OutOfMemory;

/// The separator of the fields of a Collective record's description (ASCII's unit separator).
inline constexpr char kCollectiveFieldSeparator = '\x1f';

/// The Trace event a Range, Instant, Counter, Step or Op record becomes.
constexpr EventKind event_kind(RecordKind kind) noexcept { return static_cast<EventKind>(kind); }
static_assert(static_cast<int>(EventKind::Range) == static_cast<int>(RecordKind::Range) &&
                  static_cast<int>(EventKind::Instant) == static_cast<int>(RecordKind::Instant) &&
                  static_cast<int>(EventKind::Counter) == static_cast<int>(RecordKind::Counter) &&
                  static_cast<int>(EventKind::Step) == static_cast<int>(RecordKind::Step) &&
                  static_cast<int>(EventKind::Op) == static_cast<int>(RecordKind::Op),
              "a record's kind is its event's kind");

struct Event {
  NameId name;
  std::int64_t start;  // ticks, see clock.hpp
  union {
    std::int64_t end;  // ticks; Range and Step
    double value;      // Counter
  };
  RecordKind kind;  // for Step records `name` holds the step number
  Category category;
  /// Ranges and steps recorded while GPU activity was collected: the per-thread sequence number of
  /// the external correlation id they pushed (gpu_activity.hpp); 0 otherwise.
  std::uint32_t correlation_sequence = 0;
};

static_assert(std::is_trivially_copyable_v<Event>, "events are copied as raw bytes");

/// A Memory event's device in its correlation_sequence: type in the high byte, index + 1 (the
/// CPU's index is -1) in the low 24 bits.
constexpr std::uint32_t pack_memory_device(MemoryDeviceType type, std::int32_t index) noexcept {
  return (static_cast<std::uint32_t>(static_cast<std::uint8_t>(type)) << 24) |
         (static_cast<std::uint32_t>(index + 1) & 0xFFFFFFu);
}
constexpr std::pair<MemoryDeviceType, std::int32_t> unpack_memory_device(std::uint32_t packed) noexcept {
  return {static_cast<MemoryDeviceType>(static_cast<std::int8_t>(packed >> 24)), static_cast<std::int32_t>(packed & 0xFFFFFFu) - 1};
}
static_assert(sizeof(Event) == 32, "two events per cache line");

/// A MemoryTag record's bytes (up to 2^56) and category in its one word: the category in the top byte.
constexpr std::int64_t pack_memory_tag(std::uint64_t bytes, MemoryCategory category) noexcept {
  return static_cast<std::int64_t>((bytes & 0x00FFFFFFFFFFFFFFull) | (std::uint64_t{static_cast<std::uint8_t>(category)} << 56));
}
constexpr std::pair<std::int64_t, MemoryCategory> unpack_memory_tag(std::int64_t packed) noexcept {
  const auto bits = static_cast<std::uint64_t>(packed);
  const std::uint64_t category = bits >> 56;  // a damaged crash file's is checked, not trusted
  return {static_cast<std::int64_t>(bits & 0x00FFFFFFFFFFFFFFull),
          category < kMemoryCategoryCount ? static_cast<MemoryCategory>(category) : MemoryCategory::Unknown};
}

/// An OpInputs record's two interned ids (types and concrete values) in its one word: interned
/// ids fit in 32 bits (name_table.hpp).
inline std::int64_t pack_op_input_names(NameId types, NameId concrete) noexcept {
  return static_cast<std::int64_t>((types & 0xFFFFFFFFu) | (concrete << 32));
}
inline std::pair<NameId, NameId> unpack_op_input_names(std::int64_t packed) noexcept {
  const auto bits = static_cast<std::uint64_t>(packed);
  return {bits & 0xFFFFFFFFu, bits >> 32};
}

/// An op's interned input dims and strides in one word (the input text cache's), as
/// pack_op_input_names() packs types and concrete values.
inline std::uint64_t pack_op_input_shape(NameId dims, NameId strides) noexcept {
  return (dims & 0xFFFFFFFFu) | (strides << 32);
}
inline std::pair<NameId, NameId> unpack_op_input_shape(std::uint64_t packed) noexcept {
  return {packed & 0xFFFFFFFFu, packed >> 32};
}

/// A range that began and has not ended: what its thread's ring tracks of it, so that a window
/// closing inside it (or a crash) still shows it. `arguments` are a DLPROF_RANGE_F's kept
/// arguments, read only when its name is a format's (is_format_site_id()). `stack`: with_stack,
/// its StackId (0: none), an id of the recording process's stack table.
struct OpenRange {
  NameId name;
  std::uint32_t stack;
  std::int64_t start;
  Category category;
  std::uint32_t correlation_sequence;
  FormatArguments arguments;
};

/// The FormatArguments record that goes before a formatted range's Range record.
inline Event format_arguments_event(std::int64_t start, const FormatArguments& arguments) noexcept {
  Event event{static_cast<NameId>(arguments.words[0]), start, {static_cast<std::int64_t>(arguments.words[1])},
              RecordKind::FormatArguments, Category::User, arguments.types};
  return event;
}
/// The FormatArguments a FormatArguments record holds.
inline FormatArguments format_arguments_of(const Event& event) noexcept {
  return FormatArguments{{static_cast<std::uint64_t>(event.name), static_cast<std::uint64_t>(event.end)}, event.correlation_sequence};
}

/// The Stack record that goes before a range's or op's record.
inline Event stack_event(std::uint32_t stack_id, std::int64_t start) noexcept {
  return Event{stack_id, start, {0}, RecordKind::Stack, Category::User, 0};
}

/// A range's external correlation id: (thread ordinal << 32 | sequence), unique in the process
/// without a shared counter, and recoverable from the range's event and its ring
/// (correlation.hpp).
constexpr std::uint64_t make_external_id(std::uint32_t thread_ordinal, std::uint32_t sequence) noexcept {
  return (std::uint64_t{thread_ordinal} << 32) | sequence;
}

}  // namespace detail
DLPROF_END_NAMESPACE
