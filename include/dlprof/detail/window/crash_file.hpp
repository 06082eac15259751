// dlprof/detail/window/crash_file.hpp: the handler that writes the file the flight recorder
// leaves when the process dies of a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT), in the
// layout format/crash_file.hpp spells for the writer and the reader.
//
// The handler may not allocate, wait for a lock or use stdio, so the file holds raw records
// rather than a trace: every ring's thread, events and open ranges (the flight log is the rings),
// and the text of every name they use. Where another thread holds the rings' lock, the crashing
// thread's ring alone. import/crash_dump.hpp turns it into a Trace (dlprof-report
// reads it directly). The file is `<dir>/<worker>.<unix_time_ns>.dlprof-crash`, beside the traces
// of the directory handler. After writing it, the handler puts back the handler that was there
// before and raises the signal again, so the program's own handler runs, or the process dies of
// the signal with its usual exit status and core dump.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/site.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/window/event_names.hpp"
#include "dlprof/detail/window/flight_log.hpp"
#include "dlprof/detail/window/flight_log_file.hpp"
#include "dlprof/detail/window/lifecycle.hpp"
#include "dlprof/format/crash_file.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Writes through a buffer on the handler's stack with write(2) alone.
class SignalSafeFile {
 public:
  explicit SignalSafeFile(int fd) noexcept : fd_(fd) {}
  SignalSafeFile(const SignalSafeFile&) = delete;
  SignalSafeFile& operator=(const SignalSafeFile&) = delete;

  void put(const void* data, std::size_t size) noexcept {
    const auto* bytes = static_cast<const char*>(data);
    if (size > sizeof(buffer_) - used_) {
      flush();
      if (size > sizeof(buffer_)) {
        write_all(bytes, size);
        return;
      }
    }
    std::memcpy(buffer_ + used_, bytes, size);
    used_ += size;
  }

  void record(CrashRecordKind kind, const void* head, std::size_t head_size, const void* body, std::size_t body_size) noexcept {
    const CrashRecordHeader header{static_cast<std::uint32_t>(kind), static_cast<std::uint32_t>(head_size + body_size)};
    put(&header, sizeof(header));
    if (head_size != 0) put(head, head_size);
    if (body_size != 0) put(body, body_size);
  }

  void flush() noexcept {
    write_all(buffer_, used_);
    used_ = 0;
  }

  bool failed() const noexcept { return failed_; }

 private:
  void write_all(const char* bytes, std::size_t size) noexcept {
    while (size != 0 && !failed_) {
      const ssize_t written = ::write(fd_, bytes, size);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        failed_ = true;
        return;
      }
      bytes += written;
      size -= static_cast<std::size_t>(written);
    }
  }

  int fd_;
  char buffer_[8192];
  std::size_t used_ = 0;
  bool failed_ = false;
};

/// What the crash handler needs, prepared when a flight recorder starts: it only fills in the
/// moment of the crash.
struct CrashTarget {
  const FlightLog* log = nullptr;
  std::unique_ptr<WrittenNames> names_seen;
  std::uint32_t generation = 0;  ///< the fork generation of the recorder: a fork's child writes nothing
  CrashHeader header{};
  char path_prefix[4096] = {};   ///< "<dir>/<worker>."
  std::atomic<std::int64_t> step{0};
  std::atomic<std::int64_t> step_start_tick{INT64_MIN};
  /// Dumps the recorder as a trace, for std::terminate, where allocating is allowed; false when
  /// it cannot (the Profiler is busy on this very thread), and the crash file is written instead.
  bool (*dump)(void* profiler, const char* reason) = nullptr;
  void* profiler = nullptr;
  /// The flight log's file, deleted once a dump holds what it holds; null without one.
  FlightLogFile* flight_log_file = nullptr;
};

/// The recorder a fatal signal dumps; null while none runs.
inline std::atomic<CrashTarget*> g_crash_target{nullptr};
/// Set by the first fatal signal or std::terminate that dumps: one dump per process death.
inline std::atomic<bool> g_crash_dump_taken{false};

/// `value` in decimal at `out`; returns the end.
inline char* append_decimal(char* out, std::uint64_t value) noexcept {
  char digits[20];
  int count = 0;
  do {
    digits[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (count != 0) *out++ = digits[--count];
  return out;
}

/// Writes the crash file of `target`. Async-signal-safe: open, write, close and clock reads only.
/// Returns whether the file is whole.
inline bool write_crash_file(CrashTarget& target, int signal, const char* reason) noexcept {
  if (target.path_prefix[0] == '\0' || target.log == nullptr || target.names_seen == nullptr) return false;  // no trace directory
  CrashHeader header = target.header;
  header.signal = signal;
  header.crash = sample_clocks();
  header.step = target.step.load(std::memory_order_relaxed);
  header.step_start_tick = target.step_start_tick.load(std::memory_order_relaxed);
  header.window_start_tick = target.log->crash_window_start_tick();
  std::strncpy(header.reason, reason, sizeof(header.reason) - 1);

  char path[sizeof(target.path_prefix) + 48];
  const std::size_t prefix = ::strnlen(target.path_prefix, sizeof(target.path_prefix));
  std::memcpy(path, target.path_prefix, prefix);
  char* end = append_decimal(path + prefix, static_cast<std::uint64_t>(header.crash.realtime_ns));
  std::memcpy(end, kCrashFileSuffix.data(), kCrashFileSuffix.size());
  end[kCrashFileSuffix.size()] = '\0';
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;

  SignalSafeFile file(fd);
  file.put(&header, sizeof(header));

  WrittenNames& names = *target.names_seen;
  names.clear();
  const auto write_name = [&](NameId id) {
    if (!names.first_sight(id)) return;
    const char* text = name_text(id);
    if (text == nullptr) return;
    file.record(CrashRecordKind::Name, &id, sizeof(id), text, ::strnlen(text, 4096));
  };
  ThreadRing::TrackedOpenRanges open;

  // Each ring: its thread, its events (the kept steps and the one in progress), the ranges it is
  // inside, and the names of both.
  const ThreadRing* crashing = t_ring;
  bool crashing_written = false;
  std::uint32_t slot = 0;
  const auto write_ring = [&](const ThreadRing& ring) {
    if (slot > kFlightThreadSlots) return;  // the reader's slots
    FlightThread thread;
    thread.os_tid = ring.os_tid();
    thread.ordinal = ring.thread_ordinal();
    thread.slot = slot;
    const std::size_t length = ring.thread_name().size() < sizeof(thread.name) ? ring.thread_name().size() : sizeof(thread.name) - 1;
    std::memcpy(thread.name, ring.thread_name().data(), length);
    file.record(CrashRecordKind::Thread, &thread, sizeof(thread), nullptr, 0);
    const CrashSlot head{slot, 0};
    ring.peek([&](const Event* first, std::size_t count) {
      constexpr std::size_t kEventsPerRecord = 1 << 16;
      for (std::size_t done = 0; done < count; done += kEventsPerRecord) {
        const std::size_t n = count - done < kEventsPerRecord ? count - done : kEventsPerRecord;
        file.record(CrashRecordKind::Events, &head, sizeof(head), first + done, n * sizeof(Event));
      }
      for (std::size_t i = 0; i < count; ++i) for_each_name_of(first[i], write_name);
    });
    if (!ring.exited() && !ring.superseded()) {
      ring.open_ranges(open);
      if (open.size != 0) file.record(CrashRecordKind::OpenRanges, &head, sizeof(head), open.ranges, open.size * sizeof(OpenRange));
      for (std::uint32_t i = 0; i < open.size; ++i) write_name(open.ranges[i].name);
    }
    if (&ring == crashing) crashing_written = true;
    ++slot;
  };
  // The crashing thread's ring needs no lock: no other thread frees it while its thread runs.
  RingRegistry::instance().try_visit_all(write_ring);
  if (crashing != nullptr && !crashing_written) write_ring(*crashing);

  file.record(CrashRecordKind::End, nullptr, 0, nullptr, 0);
  file.flush();
  const bool whole = !file.failed();
  ::close(fd);
  if (whole && target.flight_log_file != nullptr) target.flight_log_file->remove();
  return whole;
}

inline constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
inline constexpr int kFatalSignalCount = sizeof(kFatalSignals) / sizeof(kFatalSignals[0]);
/// The handlers that were there before dlprof's, put back when a fatal signal arrives.
inline struct sigaction g_previous_fatal_actions[kFatalSignalCount];

inline const char* fatal_signal_name(int signal) noexcept {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
  }
}

inline void on_fatal_signal(int signal, siginfo_t*, void*) noexcept {
  const int saved_errno = errno;
  if (!g_crash_dump_taken.exchange(true, std::memory_order_acq_rel)) {
    CrashTarget* target = g_crash_target.load(std::memory_order_acquire);
    if (target != nullptr && target->generation == fork_generation()) write_crash_file(*target, signal, fatal_signal_name(signal));
  }
  for (int i = 0; i < kFatalSignalCount; ++i)
    if (kFatalSignals[i] == signal) ::sigaction(signal, &g_previous_fatal_actions[i], nullptr);
  errno = saved_errno;
  // Blocked while this handler runs: delivered as it returns, to the handler put back.
  ::raise(signal);
}

/// Installs the fatal signals' handler, once per process, keeping the handlers there before it.
inline void install_fatal_signal_handlers() noexcept {
  static const bool installed = [] {
    for (int i = 0; i < kFatalSignalCount; ++i) {
      struct sigaction action {};
      action.sa_sigaction = on_fatal_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_SIGINFO | SA_ONSTACK;
      ::sigaction(kFatalSignals[i], &action, &g_previous_fatal_actions[i]);
    }
    return true;
  }();
  static_cast<void>(installed);
}

/// The terminate handler that was there before dlprof's.
inline std::terminate_handler g_previous_terminate = nullptr;

/// std::terminate: dumps the flight recorder as a trace through its handlers, on this thread, or
/// writes the crash file where the Profiler is busy on this thread; then terminates as before.
[[noreturn]] inline void on_terminate() noexcept {
  if (!g_crash_dump_taken.exchange(true, std::memory_order_acq_rel)) {
    CrashTarget* target = g_crash_target.load(std::memory_order_acquire);
    if (target != nullptr && target->generation == fork_generation()) {
      char reason[sizeof(CrashHeader::reason)] = "std::terminate";
      if (const std::exception_ptr thrown = std::current_exception()) {
        try {
          std::rethrow_exception(thrown);
        } catch (const std::exception& error) {
          std::snprintf(reason, sizeof(reason), "std::terminate: uncaught exception: %s", error.what());
        } catch (...) {
          std::snprintf(reason, sizeof(reason), "std::terminate: uncaught exception of a type not derived from std::exception");
        }
      }
      bool dumped = false;
      try {
        dumped = target->dump != nullptr && target->dump(target->profiler, reason);
      } catch (...) {
      }
      if (!dumped) write_crash_file(*target, 0, reason);
      else if (target->flight_log_file != nullptr) target->flight_log_file->remove();
    }
  }
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

/// Installs the terminate handler, once per process, keeping the one there before it.
inline void install_terminate_handler() noexcept {
  static const bool installed = [] {
    g_previous_terminate = std::set_terminate(on_terminate);
    return true;
  }();
  static_cast<void>(installed);
}

/// Notes in the flight log's file that the process called exit() while a recorder ran, once per
/// process.
inline void install_exit_note() noexcept {
  static const bool installed = [] {
    std::atexit([] {
      CrashTarget* target = g_crash_target.load(std::memory_order_acquire);
      if (target != nullptr && target->generation == fork_generation() && target->flight_log_file != nullptr)
        target->flight_log_file->note_exit();
    });
    return true;
  }();
  static_cast<void>(installed);
}

}  // namespace detail
DLPROF_END_NAMESPACE
