// dlprof/detail/window/assemble.hpp: a closed window's events, drained from the rings
// (drain.hpp), a flight log or a crash file, made into a Trace: ticks mapped to CLOCK_REALTIME ns,
// names resolved, events ordered per thread and ranges made to nest strictly. A pure function of
// its input: it touches no ring and no process state, so the offline reader compiles it.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/window/formatted_name.hpp"
#include "dlprof/flops.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Events drained from the rings for one window, still in ticks.
struct DrainedEvents {
  struct Thread {
    std::int64_t os_tid;
    std::uint32_t ordinal;  // high half of the external ids its ranges pushed
    std::string name;
    std::vector<Event> events;
  };
  std::vector<Thread> threads;
  std::uint64_t dropped = 0;
  std::uint64_t clipped_open = 0;  ///< ranges still open at the window's end, saved ending there
  std::int64_t end_tick = INT64_MAX;  ///< the window's end, where those ranges end
};

/// A range still open at `end_tick` (a window's end, a crash) as the events that record it ending
/// there: its Range, after its call stack and the arguments its name is formatted with where it
/// has them.
inline void append_open_range(std::vector<Event>& events, const OpenRange& range, std::int64_t end_tick) {
  if (range.stack != 0) events.push_back(stack_event(range.stack, range.start));
  if (is_format_site_id(range.name)) events.push_back(format_arguments_event(range.start, range.arguments));
  events.push_back(Event{range.name, range.start, {end_tick}, RecordKind::Range, range.category, range.correlation_sequence});
}

/// Orders one thread's events (start ascending, enclosing range first) and shortens any range
/// that would end after the range enclosing its start, so that slices nest strictly as
/// Perfetto requires. That happens when a user range straddles a step() call (the loop body's
/// range outlives ProfilerStep#N). Returns how many ranges were shortened, leaving out those that
/// end at `counted_end_ns`: ranges open at the window's end, shortened to it and counted already.
template <class Deferred = void>
std::uint64_t order_and_nest(std::vector<TraceEvent>& events, std::size_t begin, std::size_t end,
                                    std::int64_t counted_end_ns = INT64_MIN) {
  const auto first = events.begin() + static_cast<std::ptrdiff_t>(begin);
  const auto last = events.begin() + static_cast<std::ptrdiff_t>(end);
  std::sort(first, last, [](const TraceEvent& a, const TraceEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    return a.kind == EventKind::Step && b.kind != EventKind::Step;  // a step encloses ranges of equal extent
  });
  std::uint64_t clipped = 0;
  bool shortened = false;
  std::vector<std::int64_t> open_ends;
  for (auto it = first; it != last; ++it) {
    if (!is_slice(it->kind)) continue;
    while (!open_ends.empty() && open_ends.back() <= it->start_ns) open_ends.pop_back();
    if (!open_ends.empty() && it->end_ns > open_ends.back()) {
      if (it->end_ns != counted_end_ns) ++clipped;
      it->end_ns = open_ends.back();
      shortened = true;
    }
    open_ends.push_back(it->end_ns);
  }
  // Clipping can shorten a range below a later sibling with the same start; keep the order.
  if (shortened)
    std::stable_sort(first, last, [](const TraceEvent& a, const TraceEvent& b) {
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      return a.end_ns > b.end_ns;
    });
  return clipped;
}

/// Builds the trace of a window from drained events and the clock map measured around it.
/// A framework allocator's Memory event (and the MemoryTotals before it) as a Trace memory event.
template <class Deferred = void>
MemoryEvent memory_event(const Event& raw, const Event* totals, const ClockMap& clock, std::uint32_t thread) {
  MemoryEvent event;
  event.time_ns = clock.to_realtime_ns(raw.start);
  event.address = raw.name;
  event.bytes = raw.end;
  const auto [device_type, device] = unpack_memory_device(raw.correlation_sequence);
  event.device_type = device_type;
  event.device = device;
  if (totals != nullptr && totals->start == raw.start) {
    event.total_allocated = static_cast<std::int64_t>(totals->name);
    event.total_reserved = totals->end;
  }
  event.thread = thread;
  return event;
}

/// An OutOfMemory record (and the MemoryTotals before it) as a Trace out-of-memory event.
inline OutOfMemoryEvent out_of_memory_event(const Event& raw, const Event* totals, const ClockMap& clock, std::uint32_t thread) {
  OutOfMemoryEvent event;
  event.time_ns = clock.to_realtime_ns(raw.start);
  event.bytes = static_cast<std::int64_t>(raw.name);
  std::tie(event.device_type, event.device) = unpack_memory_device(raw.correlation_sequence);
  if (totals != nullptr && totals->start == raw.start) {
    event.total_allocated = static_cast<std::int64_t>(totals->name);
    event.total_reserved = totals->end;
  }
  event.thread = thread;
  return event;
}

/// A MemoryTag record as a Trace memory tag.
inline MemoryTag memory_tag(const Event& raw, const ClockMap& clock, std::uint32_t thread) {
  MemoryTag tag;
  tag.time_ns = clock.to_realtime_ns(raw.start);
  tag.address = raw.name;
  std::tie(tag.bytes, tag.category) = unpack_memory_tag(raw.end);
  std::tie(tag.device_type, tag.device) = unpack_memory_device(raw.correlation_sequence);
  tag.thread = thread;
  return tag;
}

/// The CollectiveCall a Collective record describes (detail::collective_description's fields).
inline CollectiveCall collective_call(std::string_view description, std::int64_t seq, std::uint32_t thread,
                                      std::int64_t start_ns) {
  std::string_view fields[13];
  std::size_t count = 0;
  for (std::size_t from = 0; count < std::size(fields);) {
    const std::size_t end = description.find(kCollectiveFieldSeparator, from);
    fields[count++] = description.substr(from, end == std::string_view::npos ? std::string_view::npos : end - from);
    if (end == std::string_view::npos) break;
    from = end + 1;
  }
  const auto integer = [](std::string_view text, std::int64_t otherwise) {
    std::int64_t value = otherwise;
    std::from_chars(text.data(), text.data() + text.size(), value);
    return value;
  };
  CollectiveCall call;
  call.thread = thread;
  call.start_ns = start_ns;
  call.name = std::string(fields[0]);
  call.backend = std::string(fields[1]);
  call.dtype = std::string(fields[2]);
  call.in_nelems = integer(fields[3], 0);
  call.out_nelems = integer(fields[4], 0);
  call.group_size = integer(fields[5], 0);
  call.rank = integer(fields[6], -1);
  call.group_name = std::string(fields[7]);
  call.group_desc = std::string(fields[8]);
  call.group_ranks = std::string(fields[9]);
  call.in_split = std::string(fields[10]);
  call.out_split = std::string(fields[11]);
  call.peer = integer(fields[12], -1);
  call.seq = seq;
  return call;
}

/// `names` gives the text of name ids and the frames of stack ids: with_lock(fn) runs fn while
/// they may be read, names(id) is a name's text and names.stack(id) a stack's frames (a pointer
/// and a count; none where it is not known).
template <class Names>
Trace assemble_trace(DrainedEvents&& drained, const ClockMap& clock, std::int64_t window_start_ns,
                     std::int64_t window_end_ns, const Names& names) {
  Trace trace;
  trace.window_start_ns = window_start_ns;
  trace.window_end_ns = window_end_ns;
  trace.dropped_events = drained.dropped;
  trace.clipped_ranges = drained.clipped_open;
  const std::int64_t window_clip_ns =
      drained.clipped_open != 0 ? std::min(clock.to_realtime_ns(drained.end_tick), window_end_ns) : INT64_MIN;

  std::unordered_map<NameId, std::uint32_t> name_index;
  std::unordered_map<std::uint64_t, std::uint32_t> step_name_index;
  const auto index_of_step = [&](std::uint64_t step) {
    auto [found, inserted] = step_name_index.try_emplace(step, static_cast<std::uint32_t>(trace.names.size()));
    if (inserted) trace.names.push_back(profiler_step_name(step));
    return found->second;
  };

  const auto index_of_name = [&](NameId id) {  // call with the intern table's lock held
    auto [found, inserted] = name_index.try_emplace(id, static_cast<std::uint32_t>(trace.names.size()));
    if (inserted) trace.names.emplace_back(names(id));
    return found->second;
  };

  // A DLPROF_RANGE_F's name: its format applied to the arguments recorded just before it; the
  // format alone where they were not recorded (never: they are pushed together).
  std::unordered_map<std::string, std::uint32_t> formatted_index;
  const auto index_of_formatted = [&](NameId format, const Event* arguments) {  // call with the intern table's lock held
    std::string text = arguments != nullptr ? format_with_kept_arguments(names(format), format_arguments_of(*arguments))
                                            : std::string(names(format));
    auto [found, inserted] = formatted_index.try_emplace(std::move(text), static_cast<std::uint32_t>(trace.names.size()));
    if (inserted) trace.names.push_back(found->first);
    return found->second;
  };

  // Ops of one name called with the same inputs share an OpInputs (and later its cost estimate).
  struct InputsKey {
    NameId op, dims;
    std::int64_t types_and_concrete;
    std::uint32_t strides;  // 0: none recorded
    bool operator==(const InputsKey& other) const noexcept {
      return op == other.op && dims == other.dims && types_and_concrete == other.types_and_concrete &&
             strides == other.strides;
    }
  };
  struct InputsKeyHash {
    std::size_t operator()(const InputsKey& key) const noexcept {
      std::uint64_t hash = key.op * 0x9E3779B97F4A7C15ull;
      hash = (hash ^ key.dims) * 0x9E3779B97F4A7C15ull;
      hash = (hash ^ static_cast<std::uint64_t>(key.types_and_concrete)) * 0x9E3779B97F4A7C15ull;
      return static_cast<std::size_t>((hash ^ key.strides) * 0x9E3779B97F4A7C15ull);
    }
  };
  std::unordered_map<InputsKey, std::uint32_t, InputsKeyHash> inputs_index;
  const auto index_of_inputs = [&](NameId op, const Event& inputs) {  // call with the intern table's lock held
    auto [found, inserted] = inputs_index.try_emplace(InputsKey{op, inputs.name, inputs.end, inputs.correlation_sequence},
                                                      static_cast<std::uint32_t>(trace.op_inputs.size()));
    if (inserted) {
      const auto [types, concrete] = unpack_op_input_names(inputs.end);
      OpInputs recorded{index_of_name(inputs.name), index_of_name(types), index_of_name(concrete), index_of_name(op)};
      if (inputs.correlation_sequence != 0) recorded.strides = index_of_name(NameId{inputs.correlation_sequence});
      trace.op_inputs.push_back(recorded);
    }
    return found->second;
  };

  // A stack seen again is the CallStack already made of it.
  std::unordered_map<std::uint64_t, std::uint32_t> stack_index;
  const auto index_of_stack = [&](std::uint64_t id) {  // call with the tables' locks held
    const auto [frames, depth] = names.stack(id);
    if (depth == 0) return TraceEvent::kNoStack;
    auto [found, inserted] = stack_index.try_emplace(id, static_cast<std::uint32_t>(trace.stacks.size()));
    if (inserted) {
      trace.stacks.push_back(CallStack{static_cast<std::uint32_t>(trace.stack_frames.size()), static_cast<std::uint32_t>(depth)});
      for (std::size_t i = 0; i < depth; ++i) trace.stack_frames.push_back(StackFrame{frames[i], StackFrame::kNoText});
    }
    return found->second;
  };

  std::size_t total = 0;
  for (const auto& thread : drained.threads) total += thread.events.size();
  trace.events.reserve(total);

  names.with_lock([&] {
    for (std::size_t t = 0; t < drained.threads.size(); ++t) {
      auto& thread = drained.threads[t];
      trace.threads.push_back(ThreadInfo{thread.os_tid, std::move(thread.name)});
      const std::size_t begin = trace.events.size();
      const Event* details = nullptr;  // the OpDetails and OpInputs just before an Op
      const Event* inputs = nullptr;
      const Event* memory_totals = nullptr;  // the MemoryTotals just before a Memory event
      const Event* collective = nullptr;     // the Collective just before a record_param_comms Op
      const Event* format_arguments = nullptr;  // the FormatArguments just before a DLPROF_RANGE_F's Range
      const Event* stack = nullptr;             // the Stack just before a Range or Op
      for (const Event& raw : thread.events) {
        if (raw.kind == RecordKind::Stack) {
          stack = &raw;
          continue;
        }
        if (raw.kind == RecordKind::FormatArguments) {
          format_arguments = &raw;
          continue;
        }
        if (raw.kind == RecordKind::Collective) {
          collective = &raw;
          continue;
        }
        if (raw.kind == RecordKind::OpDetails) {
          details = &raw;
          continue;
        }
        if (raw.kind == RecordKind::MemoryTotals) {
          memory_totals = &raw;
          continue;
        }
        if (raw.kind == RecordKind::Memory) {
          trace.memory_events.push_back(memory_event(raw, memory_totals, clock, static_cast<std::uint32_t>(t)));
          memory_totals = nullptr;
          continue;
        }
        if (raw.kind == RecordKind::OutOfMemory) {
          trace.out_of_memory.push_back(out_of_memory_event(raw, memory_totals, clock, static_cast<std::uint32_t>(t)));
          memory_totals = nullptr;
          continue;
        }
        if (raw.kind == RecordKind::MemoryTag) {
          trace.memory_tags.push_back(memory_tag(raw, clock, static_cast<std::uint32_t>(t)));
          continue;
        }
        if (raw.kind == RecordKind::OpInputs) {
          inputs = &raw;
          continue;
        }
        TraceEvent event;
        event.kind = event_kind(raw.kind);
        event.category = raw.category;
        event.thread = static_cast<std::uint32_t>(t);
        // The drain kept events that started inside the window in ticks; the clamp keeps them
        // inside it in ns too when a window too short to measure its own tick rate is mapped
        // with the process-wide rate.
        event.start_ns = std::clamp(clock.to_realtime_ns(raw.start), window_start_ns, window_end_ns);
        switch (raw.kind) {
          case RecordKind::Range:
          case RecordKind::Step:
          case RecordKind::Op: {
            // A range that began in the window and ended between its end and the drain ends with it
            // (counted); the clamp alone absorbs the map's rounding at the window's edge.
            const std::int64_t end_ns = clock.to_realtime_ns(raw.end);
            event.end_ns = std::clamp(end_ns, event.start_ns, window_end_ns);
            if (raw.end > drained.end_tick) ++trace.clipped_ranges;
            break;
          }
          case RecordKind::OpDetails:
          case RecordKind::OpInputs:
          case RecordKind::Memory:
          case RecordKind::MemoryTotals:
          case RecordKind::MemoryTag:
          case RecordKind::OutOfMemory:
          case RecordKind::Collective:
          case RecordKind::FormatArguments:
          case RecordKind::Stack: break;  // consumed above
          case RecordKind::Instant: event.end_ns = event.start_ns; break;
          case RecordKind::Counter:
            event.end_ns = event.start_ns;
            event.value = raw.value;
            break;
        }
        if (raw.kind == RecordKind::Op && details != nullptr && details->start == raw.start) {
          event.sequence_number = static_cast<std::int64_t>(details->name);
          event.forward_thread_id = static_cast<std::uint64_t>(details->end);
        }
        if (raw.kind == RecordKind::Op && inputs != nullptr && inputs->start == raw.start)
          event.inputs = index_of_inputs(raw.name, *inputs);
        if ((raw.kind == RecordKind::Range || raw.kind == RecordKind::Op) && stack != nullptr && stack->start == raw.start)
          event.stack = index_of_stack(stack->name);
        if (raw.kind == RecordKind::Op && collective != nullptr && collective->start == raw.start)
          trace.collectives.push_back(collective_call(names(collective->name), collective->end,
                                                      static_cast<std::uint32_t>(t), event.start_ns));
        // The pushed external id for now; assign_external_ids() replaces it.
        if (raw.correlation_sequence != 0) event.external_id = make_external_id(thread.ordinal, raw.correlation_sequence);
        if (raw.kind == RecordKind::Step)
          event.name = index_of_step(raw.name);
        else if (raw.kind == RecordKind::Range && is_format_site_id(raw.name))
          event.name = index_of_formatted(
              raw.name, format_arguments != nullptr && format_arguments->start == raw.start ? format_arguments : nullptr);
        else
          event.name = index_of_name(raw.name);
        details = nullptr;
        inputs = nullptr;
        collective = nullptr;
        format_arguments = nullptr;
        stack = nullptr;
        trace.events.push_back(event);
      }
      trace.clipped_ranges += order_and_nest(trace.events, begin, trace.events.size(), window_clip_ns);
    }
  });
  std::stable_sort(trace.memory_tags.begin(), trace.memory_tags.end(),
                   [](const MemoryTag& a, const MemoryTag& b) { return a.time_ns < b.time_ns; });
  std::stable_sort(trace.out_of_memory.begin(), trace.out_of_memory.end(),
                   [](const OutOfMemoryEvent& a, const OutOfMemoryEvent& b) { return a.time_ns < b.time_ns; });
  return trace;
}

/// with_flops: the estimated FLOPs and bytes of every distinct (op, inputs) of the trace.
template <class Deferred = void>
void estimate_op_costs(Trace& trace) {
  for (OpInputs& inputs : trace.op_inputs) {
    const std::optional<OpCost> cost = estimate_op_cost(trace.names[inputs.op], trace.names[inputs.dims],
                                                        trace.names[inputs.types], trace.names[inputs.concrete]);
    if (!cost) continue;
    inputs.flops = cost->flops;
    inputs.bytes = cost->bytes.value_or(0);
  }
}

/// Gives every slice (range, step, op) its trace `External id`, 1, 2, ... in trace order (as Kineto
/// numbers ops), and returns the map from the ids ranges pushed to CUPTI to those.
template <class Deferred = void>
std::unordered_map<std::uint64_t, std::uint64_t> assign_external_ids(Trace& trace) {
  std::unordered_map<std::uint64_t, std::uint64_t> pushed_to_trace;
  std::uint64_t next = 0;
  for (TraceEvent& event : trace.events) {
    if (!is_slice(event.kind)) continue;
    const std::uint64_t pushed = event.external_id;
    event.external_id = ++next;
    if (pushed != 0) pushed_to_trace.emplace(pushed, event.external_id);
  }
  return pushed_to_trace;
}

}  // namespace detail
DLPROF_END_NAMESPACE
