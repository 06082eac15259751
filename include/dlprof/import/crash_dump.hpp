// dlprof/import/crash_dump.hpp: the trace in the file a flight recorder leaves when its process
// dies of a fatal signal (format/crash_file.hpp lays it out). read_trace() and
// dlprof-report read such a file as they read a JSON trace; `dlprof-report --export FILE` writes
// it as one for other tools.
//
// The handler that wrote the file could not stop the process's other threads, so the reader
// checks every record: an event of an unknown kind, a thread slot never introduced or a record
// running past the file's end is left out and counted, and a file cut short (the process was
// killed while writing) gives the records before the cut, with a note.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/window/assemble.hpp"
#include "dlprof/format/crash_file.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline bool has_crash_magic(std::string_view head) noexcept {
  return head.size() >= sizeof(kCrashMagic) && std::memcmp(head.data(), kCrashMagic, sizeof(kCrashMagic)) == 0;
}

/// The names a crash file holds; an id it lacks reads as kMissingName. It holds no call stacks:
/// its ranges and ops are read without theirs.
struct CrashFileNames {
  static constexpr std::string_view kMissingName = "<dlprof: name not in the crash file>";
  std::unordered_map<NameId, std::string> texts;

  template <class Fn>
  void with_lock(Fn&& fn) const {
    fn();
  }
  std::string_view operator()(NameId id) const {
    const auto found = texts.find(id);
    return found == texts.end() ? kMissingName : std::string_view(found->second);
  }
  std::pair<const std::uintptr_t*, std::size_t> stack(std::uint64_t) const { return {nullptr, 0}; }
};

/// The trace of a crash file's bytes, or nothing with `problem` set when they are not one.
inline std::optional<Trace> crash_dump_trace(std::string_view bytes, std::string& problem) {
  CrashHeader header{};
  if (bytes.size() < sizeof(header) || !has_crash_magic(bytes)) {
    problem = "not a dlprof crash file (it is shorter than its header, or the header's mark is missing)";
    return std::nullopt;
  }
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (header.version != kCrashFileVersion || header.header_bytes != sizeof(CrashHeader)) {
    problem = fmt::format("a dlprof crash file of version {} with a {}-byte header; this reader takes version {} ({} bytes)",
                          header.version, header.header_bytes, kCrashFileVersion, sizeof(CrashHeader));
    return std::nullopt;
  }
  ReadResult read;
  const auto skip = [&read](std::string reason, std::size_t offset) {
    if (read.skipped_events++ == 0) {
      read.first_skip_reason = std::move(reason);
      read.first_skip_offset = offset;
    }
  };

  constexpr std::uint32_t kSlots = kFlightThreadSlots + 1;
  std::vector<std::int32_t> thread_of_slot(kSlots, -1);
  DrainedEvents drained;
  std::vector<OpenRange> open_ranges;
  std::vector<std::uint32_t> open_range_threads;
  CrashFileNames names;
  bool whole = false;
  std::size_t at = sizeof(header);
  while (at < bytes.size()) {
    CrashRecordHeader record{};
    if (bytes.size() - at < sizeof(record)) break;
    std::memcpy(&record, bytes.data() + at, sizeof(record));
    const std::size_t payload = at + sizeof(record);
    if (record.bytes > bytes.size() - payload) break;
    const std::string_view body = bytes.substr(payload, record.bytes);
    at = payload + record.bytes;
    switch (static_cast<CrashRecordKind>(record.kind)) {
      case CrashRecordKind::Thread: {
        FlightThread thread;
        if (body.size() != sizeof(thread)) break;
        std::memcpy(&thread, body.data(), sizeof(thread));
        if (thread.slot >= kSlots) break;
        thread.name[sizeof(thread.name) - 1] = '\0';
        thread_of_slot[thread.slot] = static_cast<std::int32_t>(drained.threads.size());
        drained.threads.push_back({thread.os_tid, thread.ordinal, thread.name, {}});
        break;
      }
      case CrashRecordKind::Events: {
        CrashSlot slot{};
        if (body.size() < sizeof(slot)) break;
        std::memcpy(&slot, body.data(), sizeof(slot));
        const std::size_t count = (body.size() - sizeof(slot)) / sizeof(Event);
        if (slot.slot >= kSlots || thread_of_slot[slot.slot] < 0) {
          skip(fmt::format("{} events of thread slot {}, which the file never introduces", count, slot.slot), payload);
          read.skipped_events += count == 0 ? 0 : count - 1;
          break;
        }
        std::vector<Event>& events = drained.threads[static_cast<std::size_t>(thread_of_slot[slot.slot])].events;
        for (std::size_t i = 0; i < count; ++i) {
          Event event;
          const std::size_t offset = payload + sizeof(slot) + i * sizeof(Event);
          std::memcpy(&event, bytes.data() + offset, sizeof(event));
          if (static_cast<std::uint8_t>(event.kind) > static_cast<std::uint8_t>(kLastRecordKind) ||
              static_cast<std::uint8_t>(event.category) > static_cast<std::uint8_t>(Category::Step)) {
            skip(fmt::format("an event of unknown kind {} (a ring was being written as the process died)",
                             static_cast<int>(event.kind)),
                 offset);
            continue;
          }
          events.push_back(event);
        }
        break;
      }
      case CrashRecordKind::OpenRanges: {
        CrashSlot slot{};
        if (body.size() < sizeof(slot)) break;
        std::memcpy(&slot, body.data(), sizeof(slot));
        if (slot.slot >= kSlots || thread_of_slot[slot.slot] < 0) break;
        for (std::size_t i = 0; i < (body.size() - sizeof(slot)) / sizeof(OpenRange); ++i) {
          OpenRange range;
          std::memcpy(&range, body.data() + sizeof(slot) + i * sizeof(range), sizeof(range));
          range.stack = 0;  // an id of the dead process's stack table, which the file does not hold
          open_ranges.push_back(range);
          open_range_threads.push_back(static_cast<std::uint32_t>(thread_of_slot[slot.slot]));
        }
        break;
      }
      case CrashRecordKind::Name: {
        NameId id = 0;
        if (body.size() < sizeof(id)) break;
        std::memcpy(&id, body.data(), sizeof(id));
        names.texts.emplace(id, std::string(body.substr(sizeof(id))));
        break;
      }
      case CrashRecordKind::End: whole = true; break;
    }
    if (whole) break;
  }
  if (!whole)
    read.notes.push_back(fmt::format("the crash file ends at byte {} before its last record: the process stopped while "
                                     "writing it, and the records before are kept",
                                     at));

  // Ranges the crashing thread was inside end at the crash, as a window's open ranges end at its end.
  const std::int64_t from = header.window_start_tick;
  const std::int64_t to = header.crash.ticks;
  for (DrainedEvents::Thread& thread : drained.threads)
    thread.events.erase(std::remove_if(thread.events.begin(), thread.events.end(),
                                       [&](const Event& event) { return event.start < from || event.start > to; }),
                        thread.events.end());
  for (std::size_t i = 0; i < open_ranges.size(); ++i) {
    const OpenRange& range = open_ranges[i];
    if (range.start < from || range.start > to) continue;
    append_open_range(drained.threads[open_range_threads[i]].events, range, to);
    ++drained.clipped_open;
  }
  // So does the step it was in.
  const auto stepping = std::find_if(drained.threads.begin(), drained.threads.end(),
                                     [&](const DrainedEvents::Thread& thread) { return thread.os_tid == header.step_os_tid; });
  if (header.step_start_tick >= from && header.step_start_tick <= to && stepping != drained.threads.end()) {
    stepping->events.push_back(
        Event{static_cast<NameId>(header.step), header.step_start_tick, {to}, RecordKind::Step, Category::Step, 0});
    ++drained.clipped_open;
  }
  drained.end_tick = to;

  const ClockMap clock = ClockMap::through(header.origin, header.crash, header.ns_per_tick);
  header.reason[sizeof(header.reason) - 1] = '\0';
  header.process_name[sizeof(header.process_name) - 1] = '\0';
  Trace trace = assemble_trace(std::move(drained), clock, clock.to_realtime_ns(from), header.crash.realtime_ns, names);
  trace.pid = header.pid;
  trace.process_name = header.process_name;
  trace.clock_source = header.clock_is_tsc != 0 ? "tsc" : "clock_monotonic";
  trace.distributed.rank = header.rank;
  trace.distributed.world_size = header.world_size;
  trace.flight_recorder_dump = fmt::format("{} in step {}", header.reason, header.step);
  trace.read_result = std::move(read);
  return trace;
}

}  // namespace detail
DLPROF_END_NAMESPACE
