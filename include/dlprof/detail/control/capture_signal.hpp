// dlprof/detail/control/capture_signal.hpp: the signal that asks an on-demand Profiler for a
// capture and a flight recorder for a dump (DLPROF_SIGNAL, SIGUSR2 by default).
//
// A signal nobody catches kills the process it is sent to. A job launched with
// DLPROF_MODE=on-demand or flight-recorder may spend minutes loading its model before it makes a
// Profiler, so in those modes the signal is caught from the moment the program is loaded: the
// file that makes a Profiler installs the handler while the program's static objects are
// initialised, and the first Profiler takes what arrived before it. A program that installs its
// own handler for the signal keeps it.
//
// The handler only counts. The Profiler looks at the count at its steps: every signal since the
// last look is one request (a burst coalesces), and one request by signal is taken per
// kCaptureSignalIntervalNs at most; the others are refused and counted, so a storm of signals
// gives one capture or dump.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "dlprof/config.hpp"
#include "dlprof/settings.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Capture signals received since the process started: all the handler does is count them.
inline std::atomic<std::uint64_t> g_capture_signals_received{0};
/// Those a Profiler has looked at, taken or refused.
inline std::atomic<std::uint64_t> g_capture_signals_seen{0};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the capture signal's handler adds to it");

inline void note_capture_signal(int) noexcept { g_capture_signals_received.fetch_add(1, std::memory_order_relaxed); }

/// One request by signal is taken per this interval at most.
inline constexpr std::int64_t kCaptureSignalIntervalNs = 10'000'000'000;

/// Makes `signal` ask for a capture, unless the program handles it already. Returns why it could
/// not, or nothing.
template <class Deferred = void>
std::string install_capture_signal(int signal) {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  struct sigaction current {};
  if (::sigaction(signal, nullptr, &current) != 0) return std::strerror(errno);
  if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == note_capture_signal) return {};
  if ((current.sa_flags & SA_SIGINFO) != 0 || (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN))
    return "the program handles that signal itself";
  struct sigaction action {};
  action.sa_handler = note_capture_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(signal, &action, nullptr) != 0) return std::strerror(errno);
  return {};
}

/// The capture signal the launcher's settings ask for (the environment and the DLPROF_CONFIG file
/// it names): 0 unless DLPROF_MODE is on-demand or flight-recorder and DLPROF_SIGNAL is not
/// `none`. A value that does not parse gives the default; the Profiler warns about it.
inline int launched_capture_signal(const Settings& settings) {
  const Setting* mode = settings.find("DLPROF_MODE");
  const std::optional<Mode> launched_mode = mode != nullptr ? parse_mode(mode->value) : std::nullopt;
  if (!launched_mode || !takes_requests(*launched_mode)) return 0;
  const Setting* signal = settings.find("DLPROF_SIGNAL");
  if (signal == nullptr) return kDefaultCaptureSignal;
  return parse_signal_setting(signal->value).value_or(kDefaultCaptureSignal);
}

/// Installs the capture signal's handler when the launcher asks for a mode that takes requests:
/// run while the program is loaded (g_capture_signal_at_load). Returns the signal, or 0.
template <class Deferred = void>
int install_capture_signal_at_load() noexcept {
  try {
    const int signal = launched_capture_signal(read_settings(::environ));
    if (signal != 0 && install_capture_signal(signal).empty()) return signal;
  } catch (...) {  // no memory while the program loads: the Profiler installs it, or warns
  }
  return 0;
}

/// Initialised while the program's static objects are: the Profiler's constructor names it, so
/// every program that makes a Profiler catches the signal from the start.
template <class Deferred = void>
inline const int g_capture_signal_at_load = install_capture_signal_at_load<Deferred>();

/// A Profiler's view of the capture signal: coalesces the signals received since it last looked
/// into one request, takes one request per kCaptureSignalIntervalNs at most, and counts the rest
/// as refused. take() and refusals_to_report() are called under the Profiler's control lock;
/// refused() from any thread.
class CaptureSignalRequests {
 public:
  /// Whether a request by signal is taken at `now_ns` (CLOCK_MONOTONIC).
  bool take(std::int64_t now_ns) noexcept {
    const std::uint64_t received = g_capture_signals_received.load(std::memory_order_relaxed);
    const std::uint64_t fresh = received - g_capture_signals_seen.exchange(received, std::memory_order_relaxed);
    if (fresh == 0) return false;
    if (now_ns < next_taken_ns_) {
      refused_.fetch_add(fresh, std::memory_order_relaxed);
      return false;
    }
    next_taken_ns_ = now_ns + kCaptureSignalIntervalNs;
    refused_.fetch_add(fresh - 1, std::memory_order_relaxed);
    return true;
  }

  /// Signals refused so far: coalesced with the one taken, or within the interval after it.
  std::uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

  /// Refusals not yet reported, for a warning: once per interval at most, or now with `flush`
  /// (the Profiler stops); 0 when there are none to report yet.
  std::uint64_t refusals_to_report(std::int64_t now_ns, bool flush = false) noexcept {
    const std::uint64_t refused = refused_.load(std::memory_order_relaxed);
    if (refused == reported_ || (!flush && now_ns < next_report_ns_)) return 0;
    next_report_ns_ = now_ns + kCaptureSignalIntervalNs;
    const std::uint64_t unreported = refused - reported_;
    reported_ = refused;
    return unreported;
  }

 private:
  std::int64_t next_taken_ns_ = INT64_MIN;
  std::int64_t next_report_ns_ = INT64_MIN;
  std::atomic<std::uint64_t> refused_{0};
  std::uint64_t reported_ = 0;
};

}  // namespace detail
DLPROF_END_NAMESPACE
