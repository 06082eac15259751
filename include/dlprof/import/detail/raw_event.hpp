// dlprof/import/detail/raw_event.hpp: one Chrome-trace event as the JSON parser hands it to the
// mapping: the fields and args the reader uses, as text, each with where it starts in the file
// (for error messages). Keys are recognised once, through small perfect-hash tables.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/format/vocabulary.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

enum class JsonType : std::uint8_t { Null, Bool, Number, String, Array, Object };

/// A value: numbers keep their text (timestamps are read from it exactly), strings are
/// unescaped, arrays and objects that are kept at all are their compact JSON text.
struct RawValue {
  std::string_view text;
  std::size_t offset = 0;  ///< where the value starts in the JSON text
  JsonType type = JsonType::Null;
};

/// Keys found through a 256-slot open-addressing table. A key is identified by its length and
/// its first and last eight bytes, loaded as two integers: keys of up to 16 bytes need no
/// further comparison, longer ones compare their middle. A few dozen keys per table: a lookup is
/// a hash and usually one probe.
template <class Id>
class KeyTable {
 public:
  template <std::size_t N>
  explicit KeyTable(const std::array<std::pair<std::string_view, Id>, N>& keys) {
    static_assert(N < kSlots / 2, "keep the table sparse");
    for (const auto& [key, id] : keys) {
      const Signature signature = signature_of(key);
      std::size_t slot = hash(signature);
      while (slots_[slot].used) slot = (slot + 1) % kSlots;
      slots_[slot] = Slot{signature, key, id, true};
    }
  }

  std::optional<Id> find(std::string_view key) const noexcept {
    if (key.empty()) return std::nullopt;
    const Signature signature = signature_of(key);
    for (std::size_t slot = hash(signature);; slot = (slot + 1) % kSlots) {
      const Slot& entry = slots_[slot];
      if (!entry.used) return std::nullopt;
      if (entry.signature == signature &&
          (key.size() <= 16 || std::memcmp(entry.key.data() + 8, key.data() + 8, key.size() - 16) == 0))
        return entry.id;
    }
  }

 private:
  static constexpr std::size_t kSlots = 256;
  struct Signature {
    std::uint64_t head = 0;
    std::uint64_t tail = 0;
    std::size_t size = 0;
    bool operator==(const Signature& other) const noexcept {
      return head == other.head && tail == other.tail && size == other.size;
    }
  };
  struct Slot {
    Signature signature;
    std::string_view key;
    Id id{};
    bool used = false;
  };
  static Signature signature_of(std::string_view key) noexcept {
    Signature signature;
    signature.size = key.size();
    if (key.size() >= 8) {
      for (std::size_t i = 0; i < 8; ++i) {
        signature.head |= std::uint64_t{static_cast<unsigned char>(key[i])} << (8 * i);
        signature.tail |= std::uint64_t{static_cast<unsigned char>(key[key.size() - 8 + i])} << (8 * i);
      }
    } else {  // a byte loop: a memcpy of variable size is a library call
      for (std::size_t i = 0; i < key.size(); ++i)
        signature.head |= std::uint64_t{static_cast<unsigned char>(key[i])} << (8 * i);
    }
    return signature;
  }
  static std::size_t hash(const Signature& signature) noexcept {
    const std::uint64_t mixed = (signature.head ^ (signature.tail * 31) ^ signature.size) * 0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>(mixed >> 56);
  }
  std::array<Slot, kSlots> slots_{};
};

/// The fields of an event object the reader looks at; flows' `id`/`bp` and the rest are skipped.
enum class EventField : std::uint8_t { Ph, Cat, Name, Pid, Tid, Ts, Dur, Args, Count };

inline const KeyTable<EventField>& event_fields() {
  static const KeyTable<EventField> table(std::array<std::pair<std::string_view, EventField>, 8>{{
      {"ph", EventField::Ph},
      {"cat", EventField::Cat},
      {"name", EventField::Name},
      {"pid", EventField::Pid},
      {"tid", EventField::Tid},
      {"ts", EventField::Ts},
      {"dur", EventField::Dur},
      {"args", EventField::Args},
  }});
  return table;
}

/// The args the mapping reads, under the exact keys Kineto, torch and dlprof write.
enum class Arg : std::uint8_t {
  ExternalId,        // "External id" (TensorBoard also accepts "external id")
  ExternalIdLower,
  SequenceNumber,
  ForwardThreadId,
  InputDims,         // "Input Dims" ("Input dims" in older traces)
  InputDimsLower,
  InputType,
  ConcreteInputs,
  InputStrides,
  Flops,
  Cbid,
  Correlation,
  Device,
  Context,
  Stream,
  SyclQueue,
  Queued,
  Grid,
  Block,
  RegistersPerThread,
  SharedMemory,
  BlocksPerSm,
  WarpsPerSm,
  AchievedOccupancy,
  Bytes,             // "bytes" of copies and fills
  FromDevice,
  InDevice,
  ToDevice,
  FromContext,
  InContext,
  ToContext,
  CudaSyncKind,
  WaitOnCudaEventId,
  MemoryDeviceType,  // the `[memory]` instant's "Device Type", "Device Id", ...
  MemoryDeviceId,
  MemoryAddress,
  MemoryBytes,
  TotalAllocated,
  TotalReserved,
  MemoryCategory,    // a `[memory category]` instant's "memory category"
  MetadataName,      // "name" of process_name / thread_name metadata events
  MetadataLabels,    // "labels" of process_labels
  CollectiveName,    // a collective's record_param_comms op: "Collective name", "dtype", ...
  Dtype,
  InMsgNelems,
  OutMsgNelems,
  InSplitSize,
  OutSplitSize,
  GroupSize,
  ProcessGroupName,
  ProcessGroupDesc,
  ProcessGroupRanks,
  CommRank,
  DstRank,
  SrcRank,
  Seq,
  DlprofCategory,    // "dlprof category" of a range
  CallStack,         // "Call stack" of an op or range
  GraphId,           // "graph id" and "graph node id" of a graph's kernels, copies and fills
  GraphNodeId,
  CapturedBy,        // dlprof's "captured by" and "capture call stack" of replayed work
  CaptureCallStack,
  Count
};
static_assert(static_cast<int>(Arg::Count) <= 64, "RawEvent keeps a 64-bit mask of the args present");

inline const KeyTable<Arg>& event_args() {
  namespace arg = kineto::arg;
  static const KeyTable<Arg> table(std::array<std::pair<std::string_view, Arg>, static_cast<std::size_t>(Arg::Count)>{{
      {arg::kExternalId, Arg::ExternalId},
      {arg::kExternalIdLower, Arg::ExternalIdLower},
      {arg::kSequenceNumber, Arg::SequenceNumber},
      {arg::kFwdThreadId, Arg::ForwardThreadId},
      {arg::kInputDims, Arg::InputDims},
      {arg::kInputDimsLegacy, Arg::InputDimsLower},
      {arg::kInputType, Arg::InputType},
      {arg::kConcreteInputs, Arg::ConcreteInputs},
      {arg::kInputStrides, Arg::InputStrides},
      {arg::kFlops, Arg::Flops},
      {arg::kCbid, Arg::Cbid},
      {arg::kCorrelation, Arg::Correlation},
      {arg::kDevice, Arg::Device},
      {arg::kContext, Arg::Context},
      {arg::kStream, Arg::Stream},
      {arg::kSyclQueue, Arg::SyclQueue},
      {arg::kQueued, Arg::Queued},
      {arg::kGrid, Arg::Grid},
      {arg::kBlock, Arg::Block},
      {arg::kRegistersPerThread, Arg::RegistersPerThread},
      {arg::kSharedMemory, Arg::SharedMemory},
      {arg::kBlocksPerSm, Arg::BlocksPerSm},
      {arg::kWarpsPerSm, Arg::WarpsPerSm},
      {arg::kAchievedOccupancy, Arg::AchievedOccupancy},
      {arg::kBytes, Arg::Bytes},
      {arg::kFromDevice, Arg::FromDevice},
      {arg::kInDevice, Arg::InDevice},
      {arg::kToDevice, Arg::ToDevice},
      {arg::kFromContext, Arg::FromContext},
      {arg::kInContext, Arg::InContext},
      {arg::kToContext, Arg::ToContext},
      {arg::kCudaSyncKind, Arg::CudaSyncKind},
      {arg::kWaitOnCudaEventId, Arg::WaitOnCudaEventId},
      {arg::kDeviceType, Arg::MemoryDeviceType},
      {arg::kDeviceId, Arg::MemoryDeviceId},
      {arg::kAddr, Arg::MemoryAddress},
      {arg::kMemoryBytes, Arg::MemoryBytes},
      {arg::kTotalAllocated, Arg::TotalAllocated},
      {arg::kTotalReserved, Arg::TotalReserved},
      {arg::kMemoryCategory, Arg::MemoryCategory},
      {arg::kName, Arg::MetadataName},
      {arg::kLabels, Arg::MetadataLabels},
      {arg::kCollectiveName, Arg::CollectiveName},
      {arg::kDtype, Arg::Dtype},
      {arg::kInMsgNelems, Arg::InMsgNelems},
      {arg::kOutMsgNelems, Arg::OutMsgNelems},
      {arg::kInSplitSize, Arg::InSplitSize},
      {arg::kOutSplitSize, Arg::OutSplitSize},
      {arg::kGroupSize, Arg::GroupSize},
      {arg::kProcessGroupName, Arg::ProcessGroupName},
      {arg::kProcessGroupDesc, Arg::ProcessGroupDesc},
      {arg::kProcessGroupRanks, Arg::ProcessGroupRanks},
      {arg::kCommRank, Arg::CommRank},
      {arg::kDstRank, Arg::DstRank},
      {arg::kSrcRank, Arg::SrcRank},
      {arg::kSeq, Arg::Seq},
      {arg::kDlprofCategory, Arg::DlprofCategory},
      {arg::kCallStack, Arg::CallStack},
      {arg::kGraphId, Arg::GraphId},
      {arg::kGraphNodeId, Arg::GraphNodeId},
      {arg::kCapturedBy, Arg::CapturedBy},
      {arg::kCaptureCallStack, Arg::CaptureCallStack},
  }});
  return table;
}

/// Args whose value is kept as compact JSON text whatever its type: op inputs are stored as
/// text (Trace::names), launch dimensions are read from it.
constexpr bool is_captured(Arg arg) noexcept {
  return arg == Arg::InputDims || arg == Arg::InputDimsLower || arg == Arg::InputType ||
         arg == Arg::ConcreteInputs || arg == Arg::InputStrides || arg == Arg::Grid || arg == Arg::Block;
}

/// Memory for the texts of one event that the parser does not keep (compact JSON of captured
/// args): chunks that never move, reused from one event to the next.
class ScratchArena {
 public:
  std::string_view copy(std::string_view text) {
    if (text.empty()) return {};
    while (current_ < chunks_.size() && chunks_[current_].size - used_ < text.size()) {
      ++current_;
      used_ = 0;
    }
    if (current_ == chunks_.size()) {
      const std::size_t size = std::max(kChunkBytes, text.size());
      chunks_.push_back(Chunk{std::make_unique<char[]>(size), size});
      used_ = 0;
    }
    char* destination = chunks_[current_].bytes.get() + used_;
    std::memcpy(destination, text.data(), text.size());
    used_ += text.size();
    return std::string_view(destination, text.size());
  }

  /// Forgets every text; keeps the memory.
  void reset() noexcept {
    current_ = 0;
    used_ = 0;
  }

 private:
  static constexpr std::size_t kChunkBytes = 16 * 1024;
  struct Chunk {
    std::unique_ptr<char[]> bytes;
    std::size_t size = 0;
  };
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;
  std::size_t used_ = 0;
};

/// One event object: the fields and args present, and every numeric arg (a counter's series).
struct RawEvent {
  std::size_t offset = 0;  ///< where the event's object starts
  std::uint32_t fields_present = 0;
  std::uint64_t args_present = 0;
  std::array<RawValue, static_cast<std::size_t>(EventField::Count)> fields;
  std::array<RawValue, static_cast<std::size_t>(Arg::Count)> args;
  std::vector<std::pair<std::string_view, RawValue>> numeric_args;

  void clear(std::size_t start) noexcept {
    offset = start;
    fields_present = 0;
    args_present = 0;
    numeric_args.clear();
  }
  void set(EventField field, const RawValue& value) noexcept {
    fields[static_cast<std::size_t>(field)] = value;
    fields_present |= 1u << static_cast<unsigned>(field);
  }
  void set(Arg arg, const RawValue& value) noexcept {
    args[static_cast<std::size_t>(arg)] = value;
    args_present |= std::uint64_t{1} << static_cast<unsigned>(arg);
  }
  const RawValue* field(EventField field) const noexcept {
    return (fields_present >> static_cast<unsigned>(field) & 1u) != 0 ? &fields[static_cast<std::size_t>(field)] : nullptr;
  }
  const RawValue* arg(Arg arg) const noexcept {
    return (args_present >> static_cast<unsigned>(arg) & 1u) != 0 ? &args[static_cast<std::size_t>(arg)] : nullptr;
  }
};

/// Events kept to be given to the TraceBuilder later, in order: what a parse in parts reads of
/// each part after the head. Only the values each event has are kept, in 16 bytes each (half a
/// RawValue: memory new to the process is faulted in as it is written, and that is most of what
/// logging costs); texts of captured args are copied, the rest are where they are in the text.
/// A value is placed by 32-bit counts from the start of its event, so a text of any size is
/// logged in that room; an event of 4 GiB or more cannot be, and makes the log overflowed().
class RawEventLog {
 public:
  /// Forgets every event, keeping the memory, for events of `text`, which starts `text_offset`
  /// bytes into the whole JSON text.
  void reset(const char* text, std::size_t text_offset) noexcept {
    text_ = text;
    text_offset_ = text_offset;
    entries_.clear();
    values_.clear();
    numeric_args_.clear();
    captured_.clear();
    overflowed_ = false;
  }

  /// Whether an event did not fit (4 GiB or more of text, or of captured args): the log cannot
  /// be replayed.
  bool overflowed() const noexcept { return overflowed_; }

  /// Room for the events of `bytes` of JSON text, so that growing never copies them (memory not
  /// written to costs nothing): Kineto writes 200 bytes or more per event, 15 per value.
  void reserve_for(std::size_t bytes) {
    entries_.reserve(bytes / 128);
    values_.reserve(bytes / 12);
  }

  void add(const RawEvent& event) {
    const char* event_text = text_ + (event.offset - text_offset_);
    for (std::uint32_t bits = event.fields_present; bits != 0; bits &= bits - 1)
      values_.push_back(logged(event.fields[static_cast<std::size_t>(__builtin_ctz(bits))], false, event_text, event.offset));
    for (std::uint64_t bits = event.args_present; bits != 0; bits &= bits - 1) {
      const auto arg = static_cast<Arg>(__builtin_ctzll(bits));
      values_.push_back(logged(event.args[static_cast<std::size_t>(arg)], is_captured(arg), event_text, event.offset));
    }
    numeric_args_.insert(numeric_args_.end(), event.numeric_args.begin(), event.numeric_args.end());
    entries_.push_back(Entry{event.offset, event.args_present, event.fields_present,
                             static_cast<std::uint32_t>(event.numeric_args.size())});
  }

  /// Calls `consume(const RawEvent&)` for each event, in the order they were added.
  template <class Consume>
  void replay(Consume&& consume) const {
    RawEvent event;
    std::size_t value = 0;
    std::size_t numeric = 0;
    for (const Entry& entry : entries_) {
      event.clear(entry.offset);
      const char* event_text = text_ + (entry.offset - text_offset_);
      for (std::uint32_t bits = entry.fields_present; bits != 0; bits &= bits - 1)
        event.set(static_cast<EventField>(__builtin_ctz(bits)), raw(values_[value++], event_text, entry.offset));
      for (std::uint64_t bits = entry.args_present; bits != 0; bits &= bits - 1)
        event.set(static_cast<Arg>(__builtin_ctzll(bits)), raw(values_[value++], event_text, entry.offset));
      event.numeric_args.assign(numeric_args_.begin() + static_cast<std::ptrdiff_t>(numeric),
                                numeric_args_.begin() + static_cast<std::ptrdiff_t>(numeric + entry.numeric_args));
      numeric += entry.numeric_args;
      consume(event);
    }
  }

 private:
  struct Entry {
    std::size_t offset;
    std::uint64_t args_present;
    std::uint32_t fields_present;
    std::uint32_t numeric_args;
  };
  /// A RawValue: its text at `start` from its event's "{" in the JSON text, or in `captured_`;
  /// `offset` counts from its event's offset.
  struct Value {
    std::uint32_t start;
    std::uint32_t length;
    std::uint32_t offset;
    JsonType type;
    bool captured;
  };
  static_assert(sizeof(Value) == 16);

  /// A value of the event whose "{" is at `event_text`, `event_offset` bytes into the whole text.
  /// `captured`: the text is the handler's (captured args); so are the texts of true, false and null.
  Value logged(const RawValue& value, bool captured, const char* event_text, std::size_t event_offset) {
    const std::uint64_t length = value.text.size();
    const std::uint64_t offset = value.offset - event_offset;
    if (!captured && value.type != JsonType::Bool && value.type != JsonType::Null) {
      const auto start = static_cast<std::uint64_t>(value.text.data() - event_text);
      if ((start | length | offset) > UINT32_MAX) overflowed_ = true;
      return Value{static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(length), static_cast<std::uint32_t>(offset),
                   value.type, false};
    }
    const std::uint64_t start = captured_.size();
    if (((start + length) | offset) > UINT32_MAX) {
      overflowed_ = true;
      return Value{};
    }
    captured_.append(value.text);
    return Value{static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(length), static_cast<std::uint32_t>(offset),
                 value.type, true};
  }

  RawValue raw(const Value& value, const char* event_text, std::size_t event_offset) const noexcept {
    const char* text = value.captured ? captured_.data() : event_text;
    return RawValue{std::string_view(text + value.start, value.length), event_offset + value.offset, value.type};
  }

  const char* text_ = nullptr;
  std::size_t text_offset_ = 0;
  std::vector<Entry> entries_;
  std::vector<Value> values_;  ///< each event's fields then args, in the order of their bits
  std::vector<std::pair<std::string_view, RawValue>> numeric_args_;
  std::string captured_;
  bool overflowed_ = false;
};

}  // namespace detail::reader
DLPROF_END_NAMESPACE
