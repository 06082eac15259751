// dlprof/format/crash_file.hpp: the layout of the file the flight recorder leaves when its process
// dies of a fatal signal, spelled once for the writer (detail/window/crash_file.hpp, a signal
// handler) and the reader (import/crash_dump.hpp). In the machine's byte order:
//   CrashHeader
//   records, each a CrashRecordHeader and `bytes` of payload:
//     Thread      a FlightThread
//     Events      a CrashSlot, then Events (the thread's ring records, in order)
//     OpenRanges  a CrashSlot, then OpenRange entries, outermost first
//     Name        a NameId, then the name's bytes
//     End         nothing: the file is whole
// The file is named `<worker>.<unix_time_ns>` and kCrashFileSuffix. A reader refuses another
// version or header size.
#pragma once

#include <cstdint>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/record.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr char kCrashMagic[8] = {'D', 'L', 'P', 'R', 'O', 'F', 'C', 'R'};
inline constexpr std::uint32_t kCrashFileVersion = 2;
inline constexpr std::string_view kCrashFileSuffix = ".dlprof-crash";

struct CrashHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;  ///< sizeof(CrashHeader): a reader refuses another layout
  std::int32_t signal;
  std::uint32_t clock_is_tsc;
  std::int64_t pid;
  std::int64_t step;               ///< the step the process was in
  std::int64_t step_start_tick;    ///< when it began
  std::int64_t step_os_tid;        ///< the thread that began it (the one calling step())
  std::int64_t window_start_tick;  ///< where the kept steps begin
  ClockSample origin;              ///< taken when the recorder started
  ClockSample crash;               ///< taken by the handler
  double ns_per_tick;              ///< the process's tick period when the recorder started
  std::int64_t rank;
  std::int64_t world_size;
  char reason[160];
  char process_name[64];
};

enum class CrashRecordKind : std::uint32_t { Thread = 1, Events = 2, OpenRanges = 3, Name = 4, End = 5 };

struct CrashRecordHeader {
  std::uint32_t kind;
  std::uint32_t bytes;
};

struct CrashSlot {
  std::uint32_t slot;
  std::uint32_t reserved;
};

/// The thread slots of a crash file's records (CrashSlot::slot): 0 to kFlightThreadSlots, one
/// ring each; the rings of more threads are left out.
inline constexpr std::uint32_t kFlightThreadSlots = 1024;

/// A thread whose ring the file holds: plain bytes, so the crash handler writes it as it is.
struct FlightThread {
  std::int64_t os_tid = 0;
  std::uint32_t ordinal = 0;
  std::uint32_t slot = 0;
  char name[64] = {};
};

}  // namespace detail
DLPROF_END_NAMESPACE
