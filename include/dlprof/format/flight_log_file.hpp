// dlprof/format/flight_log_file.hpp: the layout of the flight log's file, spelled once for the
// writer (detail/window/flight_log_file.hpp, whose rings live in it) and the reader
// (import/crash_dump.hpp, which reads it once its process has gone). A flight recorder with a
// trace directory keeps its rings in a file-backed shared mapping there, so that the kernel keeps
// them when the process dies without running a handler (SIGKILL, the OOM killer). In the machine's
// byte order:
//   FlightLogHeader                                 at 0
//   the names, from names_offset, names_bytes long: FlightLogName records, each followed by its
//     text and padded to 8 bytes; names_used bytes of them are written
//   slot_count ring slots, from slots_offset, slot_bytes apart, each:
//     FlightLogSlot                                 at the slot's start
//     the ring's counters, at the offsets the slot gives: the events pushed (head) and freed
//       (tail) so far, 8 bytes each; the open ranges' depth (4 bytes) and entries
//     the ring's events: `capacity` Events from events_offset, event n at n % capacity
// The file is named `<worker>.<unix_time_ns>` and kFlightLogSuffix. Its process holds a POSIX
// write lock on its first byte for as long as it lives: a reader that finds the lock held reads
// nothing (the log is live). A process that stops its recorder, or leaves a dump when it dies,
// deletes its log. A reader refuses another version or header size.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/format/crash_file.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr char kFlightLogMagic[8] = {'D', 'L', 'P', 'R', 'O', 'F', 'F', 'L'};
inline constexpr std::uint32_t kFlightLogVersion = 1;
inline constexpr std::string_view kFlightLogSuffix = ".dlprof-flight";

struct FlightLogHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;  ///< sizeof(FlightLogHeader): a reader refuses another layout
  std::uint32_t event_bytes;   ///< sizeof(Event)
  std::uint32_t clock_is_tsc;
  std::uint32_t exit_called;   ///< the process called exit() with its recorder running
  std::uint32_t reserved;
  std::int64_t pid;
  std::uint64_t process_start_ticks;  ///< ProcessBirth: with the pid, the process that wrote the log
  char boot_id[40];
  std::uint64_t names_offset;
  std::uint64_t names_bytes;
  std::uint64_t names_used;  ///< bytes of names written, stored after the names themselves
  std::uint64_t slots_offset;
  std::uint64_t slot_bytes;
  std::uint64_t slot_count;
  std::uint64_t threads_outside;  ///< threads whose rings the file had no slot for
  std::int64_t step;              ///< the step in progress
  std::int64_t step_start_tick;   ///< when it began; INT64_MIN while it is not recorded
  std::int64_t step_os_tid;       ///< the thread that calls step()
  std::int64_t window_start_tick; ///< where the kept steps begin
  std::int64_t last_step_ended;   ///< the last step the log has seen end; INT64_MIN: none yet
  ClockSample origin;             ///< taken when the recorder started
  ClockSample last_step_end;      ///< taken when the last step ended
  ClockSample last_seen;          ///< taken at the last step's end or watcher's look: the log ends there
  ClockSample exit_seen;          ///< taken by exit(), where exit_called is set
  double ns_per_tick;
  std::int64_t rank;
  std::int64_t world_size;
  char process_name[64];
};

/// A name's record: its id, then `bytes` of text, then padding to 8 bytes.
struct FlightLogName {
  std::uint64_t id;
  std::uint32_t bytes;
  std::uint32_t reserved;
};

enum class FlightLogSlotState : std::uint32_t { Free = 0, InUse = 1 };

/// A ring's slot. The offsets are from the slot's start; the writer fills them when it places a
/// ring there, and the state last.
struct FlightLogSlot {
  std::uint32_t state;  ///< FlightLogSlotState
  std::uint32_t padding;
  FlightThread thread;
  std::uint64_t capacity;  ///< events: a power of two
  std::uint64_t events_offset;
  std::uint64_t head_offset;
  std::uint64_t tail_offset;
  std::uint64_t open_depth_offset;
  std::uint64_t open_entries_offset;
  std::uint64_t open_entry_bytes;
  std::uint64_t open_name_offset;      ///< within an entry: the range's NameId (8 bytes)
  std::uint64_t open_start_offset;     ///< its start tick (8 bytes)
  std::uint64_t open_category_offset;  ///< its Category (1 byte)
  std::uint64_t open_arguments_offset; ///< a formatted range's two FormatArguments words (16 bytes)
  std::uint64_t open_argument_types_offset;  ///< and their types (4 bytes)
  std::uint32_t open_entries;          ///< entries the slot holds
  std::uint32_t reserved;
};

/// Where a process is in the machine's life: /proc/self/stat's starttime and the boot id, which a
/// reader compares with /proc/<pid>/stat's to tell whether the process is still the one it was.
struct ProcessBirth {
  std::uint64_t start_ticks = 0;
  char boot_id[40] = {};
};

/// Field 22 (starttime) of /proc/<pid>/stat; 0 where it cannot be read, or where the process has
/// ended and waits to be reaped (a zombie).
inline std::uint64_t process_start_ticks(std::int64_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[1024];
  const ssize_t count = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (count <= 0) return 0;
  text[count] = '\0';
  // The command name (field 2) is in parentheses and may hold spaces and parentheses: the fields
  // after it begin after its last ')'.
  const char* at = std::strrchr(text, ')');
  if (at == nullptr || at[1] != ' ' || at[2] == 'Z' || at[2] == 'X') return 0;  // field 3: the state
  ++at;
  for (int field = 3; field < 22; ++field) {
    at = std::strchr(at + 1, ' ');
    if (at == nullptr) return 0;
  }
  return std::strtoull(at + 1, nullptr, 10);
}

inline ProcessBirth this_process_birth() noexcept {
  ProcessBirth birth;
  birth.start_ticks = process_start_ticks(::getpid());
  const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t count = ::read(fd, birth.boot_id, sizeof(birth.boot_id) - 1);
    ::close(fd);
    if (count > 0 && birth.boot_id[count - 1] == '\n') birth.boot_id[count - 1] = '\0';
  }
  return birth;
}

}  // namespace detail
DLPROF_END_NAMESPACE
