// dlprof/import/crash_dump.hpp: the trace in the file a flight recorder leaves when its process
// dies of a fatal signal (format/crash_file.hpp lays it out), and in the flight log's file a
// process killed without a handler leaves (format/flight_log_file.hpp). read_trace() and
// dlprof-report read such a file as they read a JSON trace; `dlprof-report --export FILE` writes
// it as one for other tools. A flight log whose process still runs is never read.
//
// The handler that wrote the file could not stop the process's other threads, so the reader
// checks every record: an event of an unknown kind, a thread slot never introduced or a record
// running past the file's end is left out and counted, and a file cut short (the process was
// killed while writing) gives the records before the cut, with a note.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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
#include "dlprof/format/flight_log_file.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline bool has_crash_magic(std::string_view head) noexcept {
  return head.size() >= sizeof(kCrashMagic) && std::memcmp(head.data(), kCrashMagic, sizeof(kCrashMagic)) == 0;
}

/// The names a crash file or flight log holds; an id it lacks reads as kMissingName. It holds no call stacks:
/// its ranges and ops are read without theirs.
struct CrashFileNames {
  static constexpr std::string_view kMissingName = "<dlprof: name not in the file>";
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

/// What a process that died left of its flight recorder's log, in a crash file or the flight
/// log's file: made into its trace by dead_process_trace().
struct DeadProcess {
  DrainedEvents drained;
  std::vector<OpenRange> open_ranges;           ///< ranges open when it died
  std::vector<std::uint32_t> open_range_threads;  ///< the drained thread of each
  CrashFileNames names;
  ReadResult read;
  std::int64_t from = 0;  ///< ticks: where the kept steps begin
  std::int64_t to = 0;    ///< and where the log ends
  std::int64_t step = 0;  ///< the step in progress, begun at step_start_tick on step_os_tid
  std::int64_t step_start_tick = INT64_MIN;
  std::int64_t step_os_tid = 0;
  ClockMap clock;
  std::int64_t end_ns = 0;  ///< `to` in Unix time
  std::int64_t pid = 0;
  std::string process_name;
  bool clock_is_tsc = false;
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  std::string dump_reason;
};

/// The trace of what a dead process left: events outside the kept steps are left out, and the
/// ranges it was inside and the step in progress end where the log ends, as a window's open
/// ranges end at its end.
inline Trace dead_process_trace(DeadProcess dead) {
  DrainedEvents& drained = dead.drained;
  const std::int64_t from = dead.from;
  const std::int64_t to = dead.to;
  for (DrainedEvents::Thread& thread : drained.threads)
    thread.events.erase(std::remove_if(thread.events.begin(), thread.events.end(),
                                       [&](const Event& event) { return event.start < from || event.start > to; }),
                        thread.events.end());
  for (std::size_t i = 0; i < dead.open_ranges.size(); ++i) {
    const OpenRange& range = dead.open_ranges[i];
    if (range.start < from || range.start > to) continue;
    append_open_range(drained.threads[dead.open_range_threads[i]].events, range, to);
    ++drained.clipped_open;
  }
  const auto stepping = std::find_if(drained.threads.begin(), drained.threads.end(),
                                     [&](const DrainedEvents::Thread& thread) { return thread.os_tid == dead.step_os_tid; });
  if (dead.step_start_tick >= from && dead.step_start_tick <= to && stepping != drained.threads.end()) {
    stepping->events.push_back(
        Event{static_cast<NameId>(dead.step), dead.step_start_tick, {to}, RecordKind::Step, Category::Step, 0});
    ++drained.clipped_open;
  }
  drained.end_tick = to;
  Trace trace = assemble_trace(std::move(drained), dead.clock, dead.clock.to_realtime_ns(from), dead.end_ns, dead.names);
  trace.pid = dead.pid;
  trace.process_name = std::move(dead.process_name);
  trace.clock_source = dead.clock_is_tsc ? "tsc" : "clock_monotonic";
  trace.distributed.rank = dead.rank;
  trace.distributed.world_size = dead.world_size;
  trace.flight_recorder_dump = std::move(dead.dump_reason);
  trace.read_result = std::move(dead.read);
  return trace;
}

/// Whether an event read from a dead process's ring is one a ring holds: a torn or stale slot
/// may hold anything.
inline bool plausible_event(const Event& event) noexcept {
  return static_cast<std::uint8_t>(event.kind) <= static_cast<std::uint8_t>(kLastRecordKind) &&
         static_cast<std::uint8_t>(event.category) <= static_cast<std::uint8_t>(Category::Step);
}

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
          if (!plausible_event(event)) {
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

  DeadProcess dead;
  dead.drained = std::move(drained);
  dead.open_ranges = std::move(open_ranges);
  dead.open_range_threads = std::move(open_range_threads);
  dead.names = std::move(names);
  dead.read = std::move(read);
  dead.from = header.window_start_tick;
  dead.to = header.crash.ticks;
  dead.step = header.step;
  dead.step_start_tick = header.step_start_tick;
  dead.step_os_tid = header.step_os_tid;
  dead.clock = ClockMap::through(header.origin, header.crash, header.ns_per_tick);
  dead.end_ns = header.crash.realtime_ns;
  header.reason[sizeof(header.reason) - 1] = '\0';
  header.process_name[sizeof(header.process_name) - 1] = '\0';
  dead.pid = header.pid;
  dead.process_name = header.process_name;
  dead.clock_is_tsc = header.clock_is_tsc != 0;
  dead.rank = header.rank;
  dead.world_size = header.world_size;
  dead.dump_reason = fmt::format("{} in step {}", header.reason, header.step);
  return dead_process_trace(std::move(dead));
}


inline bool has_flight_log_magic(std::string_view head) noexcept {
  return head.size() >= sizeof(kFlightLogMagic) && std::memcmp(head.data(), kFlightLogMagic, sizeof(kFlightLogMagic)) == 0;
}

/// Reads `size` bytes at `offset` of `fd` into `out`; false where the file holds fewer.
inline bool read_at(int fd, std::uint64_t offset, void* out, std::size_t size) noexcept {
  auto* bytes = static_cast<char*>(out);
  while (size != 0) {
    const ssize_t count = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) return false;
    bytes += count;
    size -= static_cast<std::size_t>(count);
    offset += static_cast<std::uint64_t>(count);
  }
  return true;
}

/// Why a flight log's file is live (its process still runs), or nothing when its process has
/// ended. A log whose process cannot be judged counts as live: it is never read as dead.
inline std::optional<std::string> live_flight_log(int fd, const FlightLogHeader& header) {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = 0;
  probe.l_len = 1;
  const bool locks_kept = ::fcntl(fd, F_GETLK, &probe) == 0;
  if (locks_kept && probe.l_type != F_UNLCK) return fmt::format("process {} still holds it (it is running)", header.pid);
  // This process's own lock does not show, nor does a lock where the file system keeps none: the
  // process itself does, on this machine since its boot.
  const ProcessBirth reader = this_process_birth();
  char boot_id[sizeof(header.boot_id)];
  std::memcpy(boot_id, header.boot_id, sizeof(boot_id));
  boot_id[sizeof(boot_id) - 1] = '\0';
  const bool this_boot = reader.boot_id[0] != '\0' && std::strcmp(reader.boot_id, boot_id) == 0;
  if (this_boot && header.process_start_ticks != 0 && process_start_ticks(header.pid) == header.process_start_ticks)
    return fmt::format("process {} is running", header.pid);
  if (!locks_kept && !this_boot)
    return fmt::format("whether process {} has ended cannot be told: the file system keeps no locks, and the process "
                       "ran on another machine or before this one restarted",
                       header.pid);
  return std::nullopt;
}

/// The trace in the flight log's file `fd` (`size` bytes) that a process left when it died without
/// a dump, or nothing with `problem` set: not such a file, another version, or the log of a process
/// that still runs. Reads with pread alone: a file cut short gives what it holds, and says so.
inline std::optional<Trace> flight_log_trace(int fd, std::uint64_t size, std::string& problem) {
  FlightLogHeader header{};
  if (size < sizeof(header) || !read_at(fd, 0, &header, sizeof(header)) ||
      !has_flight_log_magic(std::string_view(header.magic, sizeof(header.magic)))) {
    problem = "not a dlprof flight log (it is shorter than its header, or the header's mark is missing)";
    return std::nullopt;
  }
  if (header.version != kFlightLogVersion || header.header_bytes != sizeof(FlightLogHeader) ||
      header.event_bytes != sizeof(Event)) {
    problem = fmt::format("a dlprof flight log of version {} with a {}-byte header and {}-byte events; this reader takes "
                          "version {} ({} and {} bytes)",
                          header.version, header.header_bytes, header.event_bytes, kFlightLogVersion,
                          sizeof(FlightLogHeader), sizeof(Event));
    return std::nullopt;
  }
  if (std::optional<std::string> live = live_flight_log(fd, header)) {
    problem = fmt::format("the flight log of a live process: {}. It is read once the process has ended; ask a running "
                          "process for a dump instead (dlprof-capture --dump, or the dump signal)",
                          *live);
    return std::nullopt;
  }
  DeadProcess dead;
  ReadResult& read = dead.read;
  const auto note = [&](std::string text) { read.notes.push_back(std::move(text)); };
  if (size < header.slots_offset + header.slot_count * header.slot_bytes)
    note(fmt::format("the flight log has {} bytes where its header gives {}: it was cut short, and the slots it holds are "
                     "read",
                     size, header.slots_offset + header.slot_count * header.slot_bytes));

  // The names, as far as they were written and the file holds them.
  if (header.names_offset <= size && header.names_used <= header.names_bytes) {
    std::string names(static_cast<std::size_t>(std::min<std::uint64_t>(header.names_used, size - header.names_offset)), '\0');
    if (read_at(fd, header.names_offset, names.data(), names.size())) {
      for (std::size_t at = 0; names.size() - at >= sizeof(FlightLogName);) {
        FlightLogName name{};
        std::memcpy(&name, names.data() + at, sizeof(name));
        const std::size_t record = sizeof(name) + (static_cast<std::size_t>(name.bytes) + 7) / 8 * 8;
        if (name.bytes > 4096 || record > names.size() - at) break;
        dead.names.texts.emplace(name.id, names.substr(at + sizeof(name), name.bytes));
        at += record;
      }
    }
  } else {
    note("the flight log's names lie outside it: its events are read without their names");
  }

  // Each ring's events from its tail to its head, and the ranges it was inside.
  const bool slots_fit = header.slot_bytes >= sizeof(FlightLogSlot) && header.slot_count <= kFlightThreadSlots &&
                         header.slots_offset >= sizeof(header);
  if (!slots_fit) note(fmt::format("the flight log's {} slots of {} bytes are not a layout this reader takes",
                                   header.slot_count, header.slot_bytes));
  for (std::uint64_t index = 0; slots_fit && index < header.slot_count; ++index) {
    const std::uint64_t base = header.slots_offset + index * header.slot_bytes;
    FlightLogSlot slot{};
    if (base + sizeof(slot) > size || !read_at(fd, base, &slot, sizeof(slot))) break;
    if (slot.state != static_cast<std::uint32_t>(FlightLogSlotState::InUse)) continue;
    const auto inside = [&](std::uint64_t offset, std::uint64_t bytes) {
      return offset <= header.slot_bytes && bytes <= header.slot_bytes - offset && base + offset + bytes <= size;
    };
    std::uint64_t head = 0;
    std::uint64_t tail = 0;
    const bool capacity_ok = slot.capacity != 0 && (slot.capacity & (slot.capacity - 1)) == 0 &&
                             slot.capacity <= header.slot_bytes / sizeof(Event);
    if (!capacity_ok || !inside(slot.events_offset, slot.capacity * sizeof(Event)) || !inside(slot.head_offset, 8) ||
        !inside(slot.tail_offset, 8) || !read_at(fd, base + slot.head_offset, &head, 8) ||
        !read_at(fd, base + slot.tail_offset, &tail, 8)) {
      note(fmt::format("slot {} of the flight log does not describe a ring: left out", index));
      continue;
    }
    slot.thread.name[sizeof(slot.thread.name) - 1] = '\0';
    const auto thread = static_cast<std::uint32_t>(dead.drained.threads.size());
    dead.drained.threads.push_back({slot.thread.os_tid, slot.thread.ordinal, slot.thread.name, {}});
    std::vector<Event>& events = dead.drained.threads.back().events;
    if (head < tail || head - tail > slot.capacity) {
      note(fmt::format("the ring of thread {} has counters that do not fit ({} pushed, {} freed): its last {} events are read",
                       slot.thread.os_tid, head, tail, slot.capacity));
      tail = head - std::min<std::uint64_t>(head, slot.capacity);
    }
    std::vector<Event> ring(static_cast<std::size_t>(slot.capacity));
    if (!read_at(fd, base + slot.events_offset, ring.data(), ring.size() * sizeof(Event))) continue;
    for (std::uint64_t position = tail; position != head; ++position) {
      const Event& event = ring[static_cast<std::size_t>(position & (slot.capacity - 1))];
      if (!plausible_event(event)) {
        if (read.skipped_events++ == 0) {
          read.first_skip_reason = fmt::format("an event of unknown kind {} (a ring was being written as the process died)",
                                               static_cast<int>(event.kind));
          read.first_skip_offset = static_cast<std::size_t>(base + slot.events_offset +
                                                            (position & (slot.capacity - 1)) * sizeof(Event));
        }
        continue;
      }
      events.push_back(event);
    }
    // The ranges its thread was inside: a thread that ended inside ranges (exit(), pthread_exit)
    // left them open too.
    std::uint32_t depth = 0;
    if (!inside(slot.open_depth_offset, 4) || !read_at(fd, base + slot.open_depth_offset, &depth, 4)) continue;
    const std::uint64_t entries = std::min<std::uint64_t>(depth, slot.open_entries);
    if (slot.open_entry_bytes == 0 || slot.open_entry_bytes > 4096 || entries > 4096 ||
        !inside(slot.open_entries_offset, entries * slot.open_entry_bytes))
      continue;
    std::string entry_bytes(static_cast<std::size_t>(entries * slot.open_entry_bytes), '\0');
    if (!read_at(fd, base + slot.open_entries_offset, entry_bytes.data(), entry_bytes.size())) continue;
    const auto field = [&](std::uint64_t entry, std::uint64_t offset, void* out, std::size_t bytes) {
      if (offset > slot.open_entry_bytes || bytes > slot.open_entry_bytes - offset) return false;
      std::memcpy(out, entry_bytes.data() + entry * slot.open_entry_bytes + offset, bytes);
      return true;
    };
    for (std::uint64_t entry = 0; entry < entries; ++entry) {
      OpenRange range{};
      std::uint8_t category = 0;
      if (!field(entry, slot.open_name_offset, &range.name, sizeof(range.name)) ||
          !field(entry, slot.open_start_offset, &range.start, sizeof(range.start)) ||
          !field(entry, slot.open_category_offset, &category, 1) ||
          category > static_cast<std::uint8_t>(Category::Step))
        continue;
      range.category = static_cast<Category>(category);
      if (is_format_site_id(range.name) &&
          (!field(entry, slot.open_arguments_offset, range.arguments.words, sizeof(range.arguments.words)) ||
           !field(entry, slot.open_argument_types_offset, &range.arguments.types, sizeof(range.arguments.types))))
        continue;
      dead.open_ranges.push_back(range);
      dead.open_range_threads.push_back(thread);
    }
  }
  if (header.threads_outside != 0)
    note(fmt::format("{} thread{} recorded into rings outside the flight log (its {} slots were taken, or the disk was "
                     "full): their events are not in it",
                     header.threads_outside, header.threads_outside == 1 ? "" : "s", header.slot_count));

  // The log ends when the process was last seen alive (at exit(), where it called it), or at its
  // newest event where that is later.
  const ClockSample last_seen = header.exit_called != 0 && header.exit_seen.ticks > header.last_seen.ticks
                                    ? header.exit_seen
                                    : header.last_seen;
  std::int64_t to = last_seen.ticks;
  for (const DrainedEvents::Thread& thread : dead.drained.threads)
    for (const Event& event : thread.events) {
      const bool has_end = event.kind == RecordKind::Range || event.kind == RecordKind::Step || event.kind == RecordKind::Op ||
                           event.kind == RecordKind::Collective;
      to = std::max(to, has_end ? std::max(event.start, event.end) : event.start);
    }
  for (const OpenRange& range : dead.open_ranges) to = std::max(to, range.start);
  header.process_name[sizeof(header.process_name) - 1] = '\0';
  dead.from = header.window_start_tick;
  dead.to = to;
  dead.step = header.step;
  dead.step_start_tick = header.step_start_tick;
  dead.step_os_tid = header.step_os_tid;
  dead.clock = ClockMap::through(header.origin, last_seen, header.ns_per_tick);
  dead.end_ns = dead.clock.to_realtime_ns(to);
  dead.pid = header.pid;
  dead.process_name = header.process_name;
  dead.clock_is_tsc = header.clock_is_tsc != 0;
  dead.rank = header.rank;
  dead.world_size = header.world_size;
  const std::string last_step = header.last_step_ended == INT64_MIN ? std::string("before its first step ended")
                                                                     : fmt::format("last step {}", header.last_step_ended);
  dead.dump_reason = header.exit_called != 0
                         ? fmt::format("the process (pid {}) ended without a dump, {}; it called exit() with its flight "
                                       "recorder running",
                                       header.pid, last_step)
                         : fmt::format("the process (pid {}) ended without a dump, {}; what ended it ran no handler "
                                       "(SIGKILL, the OOM killer, a memory limit)",
                                       header.pid, last_step);
  return dead_process_trace(std::move(dead));
}

}  // namespace detail
DLPROF_END_NAMESPACE
