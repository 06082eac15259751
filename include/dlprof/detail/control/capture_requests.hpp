// dlprof/detail/control/capture_requests.hpp: the three ways a capture (on demand) or a dump (a
// flight recorder) is asked for, and how each is taken: a call from the program (prof.capture(),
// prof.capture_for()), the capture signal (capture_signal.hpp), and the trigger file
// (DLPROF_TRIGGER_FILE, format/launch_protocol.hpp's grammar). The Profiler takes them at each
// step() and from its watcher thread, under its control lock; only ask() comes from other threads.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/control/capture_signal.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/format/launch_protocol.hpp"
#include "dlprof/detail/control/launched_options.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// How often the trigger file is looked for, at most: a stat per step would cost a training
/// loop of short steps.
inline constexpr std::int64_t kTriggerFilePeriodNs = 200'000'000;

/// The trigger file's text is read up to this many bytes: its grammar needs a few dozen.
inline constexpr std::size_t kTriggerFileMaxBytes = 4096;

class CaptureRequests {
 public:
  /// `trigger_file`: the file whose appearance asks (DLPROF_TRIGGER_FILE); empty for none.
  explicit CaptureRequests(std::string trigger_file = {}) : trigger_file_(std::move(trigger_file)) {}

  const std::string& trigger_file() const noexcept { return trigger_file_; }

  /// A request from the program, from any thread: `amount` steps (> 0), or -amount ns (< 0).
  /// False while an earlier one has not been taken.
  bool ask(std::int64_t amount) noexcept {
    std::int64_t none = 0;
    return amount != 0 && from_code_.compare_exchange_strong(none, amount, std::memory_order_acq_rel);
  }

  /// The program's request since the last look, if any.
  std::optional<CaptureRequest> take_from_code() noexcept {
    const std::int64_t amount = from_code_.exchange(0, std::memory_order_acq_rel);
    if (amount == 0) return std::nullopt;
    CaptureRequest request;
    request.source = amount > 0 ? "prof.capture()" : "prof.capture_for()";
    if (amount > 0) request.steps = amount;
    if (amount < 0) request.duration_ns = -amount;
    return request;
  }

  /// Whether the capture signal has asked since the last look: signals that arrive together ask
  /// once, and one is taken every kCaptureSignalIntervalNs at most.
  bool take_signal(std::int64_t now_ns) noexcept { return signal_.take(now_ns); }

  std::uint64_t signals_refused() const noexcept { return signal_.refused(); }

  /// Says how many requests by signal were refused, once per kCaptureSignalIntervalNs at most (a
  /// storm of signals prints one line), or now with `flush`. `what`: "capture" or "dump".
  void warn_of_refused_signals(std::int64_t now_ns, bool flush, std::string_view what) {
    const std::uint64_t refused = signal_.refusals_to_report(now_ns, flush);
    if (refused == 0) return;
    print_warning(fmt::format("{} {} request{} by signal refused: signals that arrive together ask once, and one "
                              "request by signal is taken every {} s at most",
                              refused, what, refused == 1 ? "" : "s", kCaptureSignalIntervalNs / 1'000'000'000));
  }

  /// What the trigger file asks for, reading and removing it when it is there; nothing when it
  /// is not, or when it was looked for less than kTriggerFilePeriodNs ago. A file that cannot be
  /// read or removed is warned about once, and asks for nothing.
  std::optional<CaptureRequest> take_trigger_file(std::int64_t now_ns) {
    if (trigger_file_.empty() || now_ns < next_trigger_check_ns_) return std::nullopt;
    next_trigger_check_ns_ = now_ns + kTriggerFilePeriodNs;
    const int fd = ::open(trigger_file_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno != ENOENT) warn_once(fmt::format("cannot read it: {}", errno_text(errno)));
      return std::nullopt;
    }
    std::string text;
    char chunk[256];
    for (ssize_t read = 0; text.size() < kTriggerFileMaxBytes && (read = ::read(fd, chunk, sizeof(chunk))) > 0;)
      text.append(chunk, static_cast<std::size_t>(read));
    ::close(fd);
    if (::unlink(trigger_file_.c_str()) != 0 && errno != ENOENT) {
      warn_once(fmt::format("cannot remove it ({}): it asks for nothing until it is removed", errno_text(errno)));
      return std::nullopt;
    }
    std::vector<std::string> problems;
    CaptureRequest request = parse_capture_request(text, problems);
    for (const std::string& problem : problems) print_warning(problem);
    return request;
  }

  /// Everything asked since the last look, in this order: the program, the signal, the trigger
  /// file. `what` ("capture" or "dump") words the signal's source and the refused signals' warning.
  std::vector<CaptureRequest> take_all(std::int64_t now_ns, std::string_view what) {
    std::vector<CaptureRequest> requests;
    if (std::optional<CaptureRequest> request = take_from_code()) requests.push_back(std::move(*request));
    if (take_signal(now_ns)) {
      CaptureRequest request;
      request.source = fmt::format("the {} signal", what);
      requests.push_back(std::move(request));
    }
    warn_of_refused_signals(now_ns, /*flush=*/false, what);
    if (std::optional<CaptureRequest> request = take_trigger_file(now_ns)) requests.push_back(std::move(*request));
    return requests;
  }

 private:
  void warn_once(const std::string& problem) {
    if (std::exchange(trigger_file_warned_, true)) return;
    print_warning(fmt::format("DLPROF_TRIGGER_FILE={}: {}", terminal_text(trigger_file_), problem));
  }

  std::atomic<std::int64_t> from_code_{0};
  CaptureSignalRequests signal_;
  std::string trigger_file_;
  std::int64_t next_trigger_check_ns_ = 0;
  bool trigger_file_warned_ = false;
};

/// Makes `requests` those a Profiler launched as `launched` takes: on demand and in a flight
/// recorder, the program's, the capture signal's (installed here) and the trigger file's; none
/// otherwise. What cannot ask, and a Profiler with nowhere to put what it is asked for, add to its
/// warnings.
template <class Deferred = void>
void take_requests_as_launched(LaunchedOptions& launched, std::unique_ptr<CaptureRequests>& requests) {
  if (!takes_requests(launched.mode)) return;
  const bool on_demand = launched.mode == Mode::OnDemand;
  if (launched.capture_signal != 0)
    if (const std::string problem = install_capture_signal(launched.capture_signal); !problem.empty())
      launched.warnings.push_back(fmt::format("signal {} cannot ask for {}: {}; {} and DLPROF_TRIGGER_FILE still can",
                                              launched.capture_signal, on_demand ? "captures" : "dumps", problem,
                                              on_demand ? "prof.capture()" : "prof.dump()"));
  if (launched.options.handlers().empty())
    launched.warnings.push_back(on_demand ? "DLPROF_MODE=on-demand with no DLPROF_OUTPUT and no on_trace_ready handler: captures "
                                            "are kept for last_trace() only"
                                          : "DLPROF_MODE=flight-recorder with no DLPROF_OUTPUT and no on_trace_ready handler: "
                                            "dumps are kept for last_trace() only, and a crash leaves no file");
  requests = std::make_unique<CaptureRequests>(std::move(launched.trigger_file));
}

}  // namespace detail
DLPROF_END_NAMESPACE
