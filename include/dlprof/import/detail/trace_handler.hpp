// dlprof/import/detail/trace_handler.hpp: the reader's view of a Chrome-trace file, as a
// stream of SAX events (start/end of objects and arrays, keys, scalars) that any JSON parser can
// produce. It keeps the nesting it is in, gathers each event object into a RawEvent for the
// TraceBuilder, reads deviceProperties and distributedInfo, and turns the values it keeps as
// text (op inputs, metadata) into compact JSON. Everything else is skipped.
//
// Contract with the parser: string and key views stay valid until the parse ends (in-situ
// parsing keeps them in the text); every call gets the byte offset it concerns, for error
// messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/format/json_text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/import/detail/json_number.hpp"
#include "dlprof/import/detail/raw_event.hpp"
#include "dlprof/import/detail/trace_builder.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

/// Nesting deeper than this is refused: Kineto's deepest value (an arg holding lists of lists)
/// is 6 levels down; a "[[[[..." bomb ends here with an error.
inline constexpr std::size_t kMaxDepth = 256;

class TraceHandler {
 public:
  /// `on_event` is called after each trace event with the offset reached (progress reports).
  TraceHandler(TraceBuilder& builder, std::function<void(std::size_t)> on_event = nullptr)
      : builder_(builder), on_event_(std::move(on_event)) {
    frames_.reserve(16);
  }

  void start_object(std::size_t offset) { open(offset, JsonType::Object); }
  void start_array(std::size_t offset) { open(offset, JsonType::Array); }

  void end_object(std::size_t offset) { close(offset); }
  void end_array(std::size_t offset) { close(offset); }

  /// A key: what it names decides what the value that follows is for (or that it is skipped).
  void key(std::string_view name, std::size_t offset) {
    if (skip_depth_ != 0) return;
    if (capturing()) {
      capture_separator();
      append_json_string(capture_, name);
      capture_ += ": ";
      capture_after_key_ = true;
      return;
    }
    pending_key_ = name;
    switch (frame()) {
      case Frame::TopObject: {
        const std::optional<TopKey> top = top_level_keys().find(name);
        pending_top_ = top.value_or(TopKey::Written);
        if (!top) metadata_key_ = std::string(name);
        pending_metadata_ = !top.has_value();
        return;
      }
      case Frame::Event: {
        const std::optional<EventField> field = phase_ == kIgnoredPhase ? std::nullopt : event_fields().find(name);
        pending_field_ = field.value_or(EventField::Count);
        return;
      }
      case Frame::Args: {
        const std::optional<Arg> arg = event_args().find(name);
        pending_arg_ = arg.value_or(Arg::Count);  // unknown: still a counter's series if numeric
        return;
      }
      case Frame::Device:
        pending_device_ = device_keys().find(name);
        return;
      case Frame::Distributed:
        pending_distributed_ = distributed_keys().find(name);
        return;
      case Frame::Root:
      case Frame::Events:
      case Frame::Devices: break;
    }
    fail_at(offset, "unexpected key");  // RapidJSON reports keys inside objects only
  }

  /// Events go to `log` instead of the builder: a part after the head of a parse in parts.
  void log_events_to(RawEventLog& log) noexcept { log_ = &log; }

  /// Whether the parse is between two events of the events array, where a parse in parts cuts.
  bool between_events() const noexcept { return skip_depth_ == 0 && !capturing() && frame() == Frame::Events; }

  /// Ends the events array, and the object around it, whose rest another parser has read: what
  /// follows them is parsed as a document of its own (a parse in parts' tail). Whether the array was
  /// in an object.
  bool end_events() noexcept {
    const bool in_object = frames_.size() > 1;
    frames_.clear();
    return in_object;
  }

  void string(std::string_view text, std::size_t offset) { scalar(RawValue{text, offset, JsonType::String}); }
  void number(std::string_view text, std::size_t offset) { scalar(RawValue{text, offset, JsonType::Number}); }
  void boolean(bool value, std::size_t offset) {
    scalar(RawValue{value ? std::string_view("true") : std::string_view("false"), offset, JsonType::Bool});
  }
  void null(std::size_t offset) { scalar(RawValue{"null", offset, JsonType::Null}); }

 private:
  enum class Frame : std::uint8_t {
    Root,
    TopObject,    ///< {"traceEvents": ..., ...}
    Events,       ///< the array of events (traceEvents, or the document itself)
    Event,        ///< one event object
    Args,         ///< its args
    Devices,      ///< deviceProperties
    Device,       ///< one of them
    Distributed,  ///< distributedInfo
  };

  Frame frame() const noexcept { return frames_.empty() ? Frame::Root : frames_.back(); }
  bool capturing() const noexcept { return !capture_first_.empty(); }

  void push(Frame frame, std::size_t offset) {
    if (frames_.size() + capture_first_.size() + skip_depth_ >= kMaxDepth)
      fail_at(offset, fmt::format("nested deeper than {} levels", kMaxDepth));
    frames_.push_back(frame);
  }

  [[noreturn]] static void fail_type(std::size_t offset, std::string_view what, std::string_view expected, JsonType found) {
    fail_at(offset, fmt::format("{} must be {}, not {}", what, expected, type_name(found)));
  }

  void open(std::size_t offset, JsonType type) {
    if (skip_depth_ != 0) {
      if (++skip_depth_ + frames_.size() >= kMaxDepth) fail_at(offset, fmt::format("nested deeper than {} levels", kMaxDepth));
      return;
    }
    if (capturing()) {
      capture_separator();
      capture_open(offset, type);
      return;
    }
    switch (frame()) {
      case Frame::Root:
        if (type != JsonType::Object) builder_.found_events_array();
        push(type == JsonType::Object ? Frame::TopObject : Frame::Events, offset);
        return;
      case Frame::TopObject:
        switch (pending_metadata_ ? TopKey::Written : pending_top_) {
          case TopKey::TraceEvents:
            if (type != JsonType::Array) fail_type(offset, quoted(kineto::key::kTraceEvents), "an array", type);
            builder_.found_events_array();
            push(Frame::Events, offset);
            return;
          case TopKey::DeviceProperties:
            if (type == JsonType::Array) {
              device_index_ = 0;
              push(Frame::Devices, offset);
            } else {
              capture_as_metadata(std::string(pending_key_), offset, type,
                                  type_mismatch(quoted(kineto::key::kDeviceProperties), "an array", type));
            }
            return;
          case TopKey::DistributedInfo:
            if (type == JsonType::Object)
              push(Frame::Distributed, offset);
            else
              capture_as_metadata(std::string(pending_key_), offset, type,
                                  type_mismatch(quoted(kineto::key::kDistributedInfo), "an object", type));
            return;
          default: break;
        }
        if (pending_metadata_) {
          capture_target_ = CaptureTarget::Metadata;
          capture_.clear();
          capture_open(offset, type);
          return;
        }
        if (pending_top_ != TopKey::Written) {
          capture_as_metadata(std::string(pending_key_), offset, type,
                              fmt::format("\"{}\" must be a scalar, not {}", pending_key_, type_name(type)));
          return;
        }
        start_skip();
        return;
      case Frame::Events:
        if (type != JsonType::Object) {
          builder_.skip_event(offset, type_mismatch("a trace event", "an object", type));
          start_skip();
          return;
        }
        event_.clear(offset);
        arena_.reset();
        phase_ = 0;
        defect_.clear();
        push(Frame::Event, offset);
        return;
      case Frame::Event:
        if (pending_field_ == EventField::Args) {  // of an event the mapping reads: key() tells
          if (type == JsonType::Object) {
            push(Frame::Args, offset);
          } else {
            builder_.ignore_value(offset, type_mismatch("\"args\"", "an object", type));
            start_skip();
          }
          return;
        }
        if (pending_field_ == EventField::Cat) {  // a category the reader cannot know: the event is ignored
          builder_.ignore_value(offset, fmt::format("\"cat\" must be a scalar, not {}", type_name(type)));
        } else if (pending_field_ != EventField::Count) {
          std::string reason = fmt::format("\"{}\" must be a scalar, not {}", pending_key_, type_name(type));
          if (builder_.strict()) fail_at(offset, std::move(reason));
          if (defect_.empty()) {
            defect_ = std::move(reason);
            defect_offset_ = offset;
          }
        }
        start_skip();
        return;
      case Frame::Args:
        if (pending_arg_ != Arg::Count && is_captured(pending_arg_)) {
          capture_target_ = CaptureTarget::Arg;
          capture_value_offset_ = offset;
          capture_value_type_ = type;
          capture_.clear();
          capture_open(offset, type);
          return;
        }
        // Other known args are scalars; structured values of unknown args (Kineto's
        // "occupancy", "Call stack", ...) are of no use to the mapping.
        if (pending_arg_ != Arg::Count)
          builder_.ignore_value(offset, fmt::format("\"{}\" must be a scalar, not {}", pending_key_, type_name(type)));
        start_skip();
        return;
      case Frame::Devices:
        if (type != JsonType::Object) {
          capture_as_metadata(fmt::format("{}[{}]", kineto::key::kDeviceProperties, device_index_++), offset, type,
                              type_mismatch(fmt::format("a {} entry", kineto::key::kDeviceProperties), "an object", type));
          return;
        }
        device_ = DeviceProperties{};
        push(Frame::Device, offset);
        return;
      case Frame::Device:
      case Frame::Distributed:
        if (frame() == Frame::Distributed && pending_distributed_ == DistributedKey::PgConfig) {
          // Read whole at the end (TraceBuilder::take_process_groups).
          metadata_key_ = nested_key();
          capture_target_ = CaptureTarget::Metadata;
          capture_.clear();
          capture_open(offset, type);
          return;
        }
        if (pending_key_is_kept()) {
          capture_as_metadata(nested_key(), offset, type,
                              fmt::format("\"{}\" must be a scalar, not {}", pending_key_, type_name(type)));
          return;
        }
        start_skip();
        return;
    }
  }

  void close(std::size_t offset) {
    if (skip_depth_ != 0) {
      --skip_depth_;
      return;
    }
    if (capturing()) {
      capture_close();
      return;
    }
    const Frame closed = frame();
    frames_.pop_back();
    switch (closed) {
      case Frame::Event:
        if (!defect_.empty())
          builder_.skip_event(defect_offset_, std::move(defect_));
        else if (log_ == nullptr)
          builder_.add_event(event_);
        else if (phase_ != kIgnoredPhase)  // the builder ignores those
          log_->add(event_);
        if (on_event_ && (++events_seen_ & 0xFFF) == 0) on_event_(offset);
        break;
      case Frame::Device:
        builder_.add_device(std::move(device_));
        ++device_index_;
        break;
      case Frame::Root:
      case Frame::TopObject:
      case Frame::Events:
      case Frame::Args:
      case Frame::Devices:
      case Frame::Distributed: break;
    }
  }

  void scalar(const RawValue& value) {
    if (skip_depth_ != 0) return;
    if (capturing()) {
      capture_separator();
      capture_scalar(value);
      return;
    }
    switch (frame()) {
      case Frame::Root:
        fail_at(value.offset, fmt::format("a trace is a JSON object or array, not {}", type_name(value.type)));
      case Frame::TopObject:
        if (pending_metadata_) {
          capture_.clear();
          capture_scalar(value);
          builder_.add_metadata(std::move(metadata_key_), std::move(capture_));
          capture_ = std::string();
          return;
        }
        switch (pending_top_) {
          case TopKey::BaseTime: builder_.set_base_time(value); return;
          case TopKey::TraceEvents: fail_type(value.offset, quoted(kineto::key::kTraceEvents), "an array", value.type);
          case TopKey::DeviceProperties:
          case TopKey::DistributedInfo:
            if (value.type == JsonType::Null && !builder_.strict()) return;
            keep_scalar_as_metadata(
                std::string(pending_key_), value,
                type_mismatch(quoted(pending_top_ == TopKey::DistributedInfo ? kineto::key::kDistributedInfo
                                                                             : kineto::key::kDeviceProperties),
                              pending_top_ == TopKey::DistributedInfo ? "an object" : "an array", value.type));
            return;
          case TopKey::Written: return;
          default: builder_.set_top_level(pending_top_, value, pending_key_); return;
        }
      case Frame::Events: builder_.skip_event(value.offset, type_mismatch("a trace event", "an object", value.type)); return;
      case Frame::Event:
        if (pending_field_ == EventField::Args) {
          if (value.type != JsonType::Null) builder_.ignore_value(value.offset, type_mismatch("\"args\"", "an object", value.type));
          return;
        }
        if (pending_field_ == EventField::Count) return;
        event_.set(pending_field_, value);
        if (pending_field_ == EventField::Ph) phase_ = phase_of(value);
        return;
      case Frame::Args:
        if (pending_arg_ != Arg::Count) {
          if (is_captured(pending_arg_)) {
            capture_.clear();
            capture_scalar(value);
            event_.set(pending_arg_, RawValue{arena_.copy(capture_), value.offset, value.type});
          } else {
            event_.set(pending_arg_, value);
          }
        }
        if (phase_ == 0 || phase_ == 'C') {
          if (value.type == JsonType::Number)
            event_.numeric_args.emplace_back(pending_key_, value);
          else if (value.type == JsonType::String && is_non_finite_name(value.text))  // the writer's NaN and infinities
            event_.numeric_args.emplace_back(pending_key_, RawValue{value.text, value.offset, JsonType::Number});
        }
        return;
      case Frame::Devices:
        keep_scalar_as_metadata(
            fmt::format("{}[{}]", kineto::key::kDeviceProperties, device_index_++), value,
            type_mismatch(fmt::format("a {} entry", kineto::key::kDeviceProperties), "an object", value.type));
        return;
      case Frame::Device:
        if (pending_device_) read_device_field(*pending_device_, value);
        return;
      case Frame::Distributed:
        if (pending_distributed_) read_distributed_field(*pending_distributed_, value);
        return;
    }
  }

  void read_device_field(DeviceKey key, const RawValue& value) {
    if (key == DeviceKey::Name) {
      if (const std::optional<std::string_view> name = text_of_field(value)) device_.name = std::string(*name);
      return;
    }
    const auto int_field = [&](auto& field, std::int64_t limit) {
      const std::optional<std::int64_t> number = number_of_field(value, limit);
      if (number) field = static_cast<std::remove_reference_t<decltype(field)>>(*number);
    };
    switch (key) {
      case DeviceKey::Id: int_field(device_.id, INT32_MAX); break;
      case DeviceKey::TotalGlobalMem: int_field(device_.total_global_mem, INT64_MAX); break;
      case DeviceKey::ComputeMajor: int_field(device_.compute_major, INT32_MAX); break;
      case DeviceKey::ComputeMinor: int_field(device_.compute_minor, INT32_MAX); break;
      case DeviceKey::MaxThreadsPerBlock: int_field(device_.max_threads_per_block, INT32_MAX); break;
      case DeviceKey::MaxThreadsPerMultiprocessor: int_field(device_.max_threads_per_multiprocessor, INT32_MAX); break;
      case DeviceKey::RegsPerBlock: int_field(device_.regs_per_block, INT32_MAX); break;
      case DeviceKey::RegsPerMultiprocessor: int_field(device_.regs_per_multiprocessor, INT32_MAX); break;
      case DeviceKey::WarpSize: int_field(device_.warp_size, INT32_MAX); break;
      case DeviceKey::SharedMemPerBlock: int_field(device_.shared_mem_per_block, INT64_MAX); break;
      case DeviceKey::SharedMemPerBlockOptin: int_field(device_.shared_mem_per_block_optin, INT64_MAX); break;
      case DeviceKey::SharedMemPerMultiprocessor: int_field(device_.shared_mem_per_multiprocessor, INT64_MAX); break;
      case DeviceKey::NumSms: int_field(device_.num_sms, INT32_MAX); break;
      case DeviceKey::Name: break;
    }
  }

  void read_distributed_field(DistributedKey key, const RawValue& value) {
    DistributedInfo& info = builder_.distributed();
    switch (key) {
      case DistributedKey::Backend:
        if (const std::optional<std::string_view> backend = text_of_field(value)) info.backend = std::string(*backend);
        break;
      case DistributedKey::Rank: info.rank = number_at_least(value, 0).value_or(info.rank); break;
      case DistributedKey::WorldSize: info.world_size = number_at_least(value, 1).value_or(info.world_size); break;
      case DistributedKey::NcclVersion:
        if (const std::optional<std::string_view> version = text_of_field(value)) info.nccl_version = std::string(*version);
        break;
      case DistributedKey::PgConfig:
        if (value.type == JsonType::Null && !builder_.strict()) break;
        keep_scalar_as_metadata(nested_key(), value, type_mismatch(fmt::format("\"{}\"", pending_key_), "an array", value.type));
        break;
    }
  }

  /// The text of a deviceProperties or distributedInfo field (a number's text in a lenient read);
  /// otherwise the value is kept as metadata (or, null, taken as absent).
  std::optional<std::string_view> text_of_field(const RawValue& value) {
    if (value.type == JsonType::Null && !builder_.strict()) return std::nullopt;
    if (const std::optional<std::string_view> text = builder_.text_of(value, pending_key_)) return text;
    keep_scalar_as_metadata(nested_key(), value, type_mismatch(fmt::format("\"{}\"", pending_key_), "a string", value.type));
    return std::nullopt;
  }

  /// The integer of a deviceProperties or distributedInfo field, as text_of_field() for text.
  std::optional<std::int64_t> number_of_field(const RawValue& value, std::int64_t limit) {
    if (builder_.strict()) return signed_of(value, pending_key_, limit);
    if (value.type == JsonType::Null) return std::nullopt;
    try {
      return builder_.signed_of(value, pending_key_, limit);
    } catch (ParseFailure& failure) {
      keep_scalar_as_metadata(nested_key(), value, std::move(failure.message));
      return std::nullopt;
    }
  }

  /// A distributedInfo number that must be at least `low` (a rank from 0, a world size from 1):
  /// below it, the value is kept as metadata, as text_of_field() keeps a value it cannot use,
  /// and the default stays (rank 0 of 1, as HTA assumes without distributedInfo).
  std::optional<std::int64_t> number_at_least(const RawValue& value, std::int64_t low) {
    const std::optional<std::int64_t> number = number_of_field(value, INT64_MAX);
    if (!number || *number >= low) return number;
    keep_scalar_as_metadata(nested_key(), value, fmt::format("\"{}\" must be at least {}, not {}", pending_key_, low, *number));
    return std::nullopt;
  }

  /// A key as a message quotes it: "traceEvents".
  static std::string quoted(std::string_view key) { return fmt::format("\"{}\"", key); }

  static std::string type_mismatch(std::string_view what, std::string_view expected, JsonType found) {
    return fmt::format("{} must be {}, not {}", what, expected, type_name(found));
  }

  /// Where a deviceProperties or distributedInfo field is kept in the metadata when it cannot be
  /// read: "deviceProperties[0].totalGlobalMem", "distributedInfo.rank".
  std::string nested_key() const {
    if (frame() == Frame::Device)
      return fmt::format("{}[{}].{}", kineto::key::kDeviceProperties, device_index_, pending_key_);
    return fmt::format("{}.{}", kineto::key::kDistributedInfo, pending_key_);
  }

  /// A structured value the reader cannot use, kept as JSON text in the metadata (lenient), or
  /// the read's failure (strict).
  void capture_as_metadata(std::string key, std::size_t offset, JsonType type, std::string reason) {
    builder_.keep_as_metadata(key, offset, std::move(reason));
    metadata_key_ = std::move(key);
    capture_target_ = CaptureTarget::Metadata;
    capture_.clear();
    capture_open(offset, type);
  }

  void keep_scalar_as_metadata(std::string key, const RawValue& value, std::string reason) {
    builder_.keep_as_metadata(key, value.offset, std::move(reason));
    std::string json;
    append_json_value(json, value);
    builder_.add_metadata(std::move(key), std::move(json));
  }

  void start_skip() noexcept { skip_depth_ = 1; }

  /// The event's phase once "ph" is read (Kineto and dlprof write it first): events the mapping
  /// ignores (flows, which are a third of Kineto's events) are skipped from there on.
  static char phase_of(const RawValue& value) noexcept {
    if (value.type != JsonType::String) return 0;  // the builder reports it
    if (value.text.size() != 1) return kIgnoredPhase;
    switch (value.text[0]) {
      case 'X':
      case 'i':
      case 'I':
      case 'C':
      case 'M': return value.text[0];
      default: return kIgnoredPhase;
    }
  }

  /// Whether the key just read in a device or distributedInfo object is one the reader keeps
  /// (all of those are scalars).
  bool pending_key_is_kept() const noexcept {
    return frame() == Frame::Device ? pending_device_.has_value() : pending_distributed_.has_value();
  }

  // Compact JSON, as torch writes op inputs: ", " between elements, ": " after keys.
  void capture_open(std::size_t offset, JsonType type) {
    if (frames_.size() + capture_first_.size() + 1 >= kMaxDepth)
      fail_at(offset, fmt::format("nested deeper than {} levels", kMaxDepth));
    capture_.push_back(type == JsonType::Object ? '{' : '[');
    capture_first_.push_back(type == JsonType::Object ? kFirstInObject : kFirstInArray);
  }

  void capture_separator() {
    if (capture_first_.empty()) return;
    char& state = capture_first_.back();
    if (capture_after_key_) {
      capture_after_key_ = false;
      return;
    }
    if (state == kFirstInObject || state == kFirstInArray) {
      state = state == kFirstInObject ? kNextInObject : kNextInArray;
      return;
    }
    capture_ += ", ";
  }

  void capture_scalar(const RawValue& value) {
    if (value.type == JsonType::String)
      append_json_string(capture_, value.text);
    else
      capture_ += value.text;
  }

  void capture_close() {
    const char state = capture_first_.back();
    capture_first_.pop_back();
    capture_.push_back(state == kFirstInObject || state == kNextInObject ? '}' : ']');
    if (!capture_first_.empty()) return;
    switch (capture_target_) {
      case CaptureTarget::Arg:
        event_.set(pending_arg_, RawValue{arena_.copy(capture_), capture_value_offset_, capture_value_type_});
        break;
      case CaptureTarget::Metadata:
        builder_.add_metadata(std::move(metadata_key_), std::move(capture_));
        capture_ = std::string();
        break;
    }
  }

  static constexpr char kFirstInArray = 'a';
  static constexpr char kNextInArray = 'A';
  static constexpr char kFirstInObject = 'o';
  static constexpr char kNextInObject = 'O';
  enum class CaptureTarget : std::uint8_t { Arg, Metadata };

  TraceBuilder& builder_;
  RawEventLog* log_ = nullptr;
  std::function<void(std::size_t)> on_event_;
  std::vector<Frame> frames_;
  std::size_t skip_depth_ = 0;

  TopKey pending_top_ = TopKey::Written;
  bool pending_metadata_ = false;
  std::string metadata_key_;
  EventField pending_field_ = EventField::Count;
  Arg pending_arg_ = Arg::Count;
  std::string_view pending_key_;  ///< the key whose value comes next, for messages and series
  std::optional<DeviceKey> pending_device_;
  std::optional<DistributedKey> pending_distributed_;

  static constexpr char kIgnoredPhase = '-';
  char phase_ = 0;  ///< the current event's "ph", 0 until read
  RawEvent event_;
  ScratchArena arena_;
  DeviceProperties device_;
  std::size_t device_index_ = 0;  ///< of the deviceProperties entry being read
  std::string defect_;            ///< why the current event is unusable; empty while it is not
  std::size_t defect_offset_ = 0;
  std::uint64_t events_seen_ = 0;

  std::string capture_;
  std::string capture_first_;  ///< per open level: first element still to come, array or object
  bool capture_after_key_ = false;
  CaptureTarget capture_target_ = CaptureTarget::Arg;
  std::size_t capture_value_offset_ = 0;
  JsonType capture_value_type_ = JsonType::Array;
};

}  // namespace detail::reader
DLPROF_END_NAMESPACE
