// dlprof/profiler.hpp: the include of the file that owns the training loop. Ranges (range.hpp),
// schedules (schedule.hpp), traces (trace.hpp), the summary table (key_averages.hpp), the options
// (profiler_options.hpp), ProfilingScope (profiling_scope.hpp) and the Profiler that ties them
// together. The Profiler is the state machine; its parts live in rooms of their own:
//   - the recording window and its steps: detail/window/window_recorder.hpp;
//   - a closed window's trace, built and handed to the handlers off the training thread:
//     detail/window/closed_window.hpp, detail/window/publisher.hpp;
//   - the flight recorder: detail/window/flight_recorder.hpp;
//   - on-demand capture and the requests that ask for captures and dumps:
//     detail/control/on_demand.hpp, detail/control/capture_requests.hpp;
//   - the launcher's settings over the options: detail/control/launched_options.hpp;
//   - the watcher thread: detail/control/watcher.hpp; the lock of start(), step() and stop():
//     detail/control/control_lock.hpp; what the schedule's actions do: schedule.hpp;
//   - fork and exit: detail/window/lifecycle.hpp.
// This header declares the Profiler; what its members do is detail/profiler_runtime.hpp, which it
// includes unless DLPROF_RUNTIME_LIBRARY is 1 (config.hpp): then the program links the
// dlprof::runtime library, where the runtime is compiled once, and a file that includes this
// header parses the declarations alone.
// The report (prof.report()) needs <dlprof/report.hpp> in the file that calls it:
//
//   dlprof::Profiler prof(dlprof::ProfilerOptions{}
//       .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/3, /*repeat=*/1))
//       .on_trace_ready(dlprof::tensorboard_trace_handler("./log/run")));
//   prof.start();
//   for (...) { DLPROF_RANGE("train_step"); ...; prof.step(); }
//   prof.stop();
//   fmt::print("{}", prof.key_averages());   // per-name table, as torch's
//   fmt::print("{}", prof.report());         // where the step time went, and what to change
//
// The Profiler follows torch.profiler.profile's state machine exactly (docs/trace-format.md §1.2):
// ProfilerStep#N carries the absolute step number, warm-up steps are never recorded,
// on_trace_ready fires inside the step() that leaves a RecordAndSave step and in stop() while
// recording, and a window that ends without RecordAndSave is discarded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "dlprof/annotate.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/stack_symbols.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/range.hpp"
#include "dlprof/schedule.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

struct ReportOptions;
namespace analysis {
enum class StackMetric : std::uint8_t;
}

namespace detail {
/// The text report of a trace, for Profiler::report(): defined for ReportOptions by
/// <dlprof/report.hpp>.
template <class Options>
struct TextReport;
/// The folded call stacks of a trace, for Profiler::export_stacks(): defined by
/// <dlprof/export/folded_stacks.hpp>.
template <class Metric>
struct FoldedStacks;

template <class T, class = void>
inline constexpr bool is_complete_v = false;
template <class T>
inline constexpr bool is_complete_v<T, std::void_t<decltype(sizeof(T))>> = true;

// The Profiler's parts (detail/profiler_runtime.hpp includes them).
class CaptureRequests;
class ControlLock;
template <class Deferred>
class BasicOnDemandCapture;
template <class Deferred>
class BasicWatcher;
template <class Deferred>
class BasicWindowRecorder;
template <class Deferred>
class BasicFlightRecorder;
template <class Deferred>
class TracePublisher;
struct ClosedWindow;
}  // namespace detail

/// Collects a trace of the calling process over the steps a schedule selects. start(), step()
/// and stop() are meant for one thread (the training loop's); calls from several threads are
/// serialised, each counting as it would alone. Ranges may be recorded from any thread.
///
/// Process lifecycle: a Profiler may be a global, or still be started when the process exits
/// (its destructor saves the window); a trace whose window closed is on disk before exit()
/// ends the process. After fork(), a Profiler inherited by the child records and writes nothing
/// there (start() throws); a Profiler made in the child records the child's own trace.
///
/// The launcher has the last word: the DLPROF_* environment variables and the DLPROF_CONFIG file
/// override the options given here (settings.hpp), and DLPROF_MODE=off makes a Profiler that
/// counts steps and records nothing.
///
/// Profiler is BasicProfiler<>: a class template whose members are defined apart from it
/// (detail/profiler_runtime.hpp), so that they compile only where a Profiler runs, and once for a
/// whole program that links dlprof::runtime (explicitly instantiated there).
template <class Deferred = void>
class BasicProfiler {
 public:
  /// Records CPU activity from start() to stop(), no schedule, no handler.
  BasicProfiler() : BasicProfiler(ProfilerOptions{}) {}
  explicit BasicProfiler(ProfilerOptions options);
  ~BasicProfiler();

  BasicProfiler(const BasicProfiler&) = delete;
  BasicProfiler& operator=(const BasicProfiler&) = delete;

  /// Starts (or resumes) the schedule at the current step: 0 the first time; after stop(), step
  /// numbers keep counting step() calls since construction, as in torch.profiler. Throws
  /// std::logic_error if this or another Profiler is already started, from a handler, and in a
  /// fork's child for a Profiler made in the parent.
  void start();

  /// Ends step N and begins step N+1, running the transition the schedule asks for. Throws
  /// std::logic_error when not started, or from an on_trace_ready handler.
  void step();

  /// Ends the current step; a trace still recording is saved (handlers run). Waits until
  /// background handlers have finished. From an on_trace_ready handler, the Profiler stops once
  /// the step() that runs the handler is done, dropping the window that step() had just begun (a
  /// background handler: at the next step()).
  void stop();

  /// DLPROF_MODE=on-demand: asks for the next `steps` steps to be recorded and handed to the
  /// handlers. The step() after the call warms up, the `steps` after it are recorded, and the
  /// Profiler then goes back to idle. Returns false and asks nothing when this Profiler is not on
  /// demand or a capture is already asked for or running (a signal or trigger file that asks
  /// meanwhile is refused with a warning). Any thread may call it. Throws std::invalid_argument
  /// for `steps` outside [1, 1000000].
  bool capture(std::int64_t steps);
  /// capture() of as many steps as the capture signal asks for (5).
  bool capture();

  /// DLPROF_MODE=on-demand: asks for a capture of `duration`, for a program that does not call
  /// step() (a server, a data pipeline): recording begins at the next step(), or within 200 ms
  /// when no step() has come for a second, and the trace is handed over `duration` later. As
  /// capture() otherwise; throws std::invalid_argument for a duration outside (0, 24 h].
  template <class Rep, class Period>
  bool capture_for(std::chrono::duration<Rep, Period> duration) {
    return capture_for_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count());
  }

  /// DLPROF_MODE=flight-recorder: writes the steps kept in memory, and the current one so far,
  /// as a trace marked as a flight-recorder dump with `reason`, and hands it to the handlers. The
  /// next dump holds the steps after this one. Returns false and writes nothing when this Profiler
  /// is not a started flight recorder. Any thread may call it, but not a handler.
  bool dump(std::string_view reason = "prof.dump()");

  /// Flight-recorder dumps written since construction, and slow steps not dumped because one was
  /// dumped less than a minute before.
  std::uint64_t dumps() const noexcept;
  std::uint64_t slow_steps_not_dumped() const noexcept;
  /// Capture or dump requests by signal this Profiler refused: signals that arrived together with
  /// the one taken (they ask once), and those within 10 s after it (one is taken per 10 s at most).
  std::uint64_t signals_refused() const noexcept;

  bool started() const noexcept { return started_; }
  /// step() calls since construction: the N of the current ProfilerStep#N.
  std::int64_t step_num() const noexcept { return step_num_; }
  Action current_action() const noexcept { return action_; }
  /// The options in effect: the program's, with the launcher's settings over them.
  const ProfilerOptions& options() const noexcept { return options_; }
  Mode mode() const noexcept { return mode_; }

  /// The trace of the most recently closed window, or null. A trace still being built on the
  /// writer thread is waited for (except from a background handler, which is handed its trace).
  std::shared_ptr<const Trace> last_trace() const;

  /// Per-name summary of the most recent trace; empty before the first one. In a program that
  /// links dlprof::symbolize, the frames of group_by_stack() are functions and lines.
  template <bool Symbolise = DLPROF_DETAIL_SYMBOLISE_STACKS>
  KeyAverages key_averages() const {
    const auto trace = last_trace();
    if (trace == nullptr) return KeyAverages();
    Trace copy;
    return KeyAverages(detail::StackSymbols<Symbolise>::of(*trace, copy));
  }

  /// Writes the call stacks of the most recent trace (with_stack) to `path` in the folded format
  /// that flamegraph.pl and speedscope read, weighted by `metric` (analysis::StackMetric; self CPU
  /// time by default), as torch.profiler's export_stacks(); see export/folded_stacks.hpp, which
  /// the file that calls it includes. Throws std::logic_error before the first trace,
  /// std::invalid_argument when it has no call stacks, and std::runtime_error naming the path
  /// when it cannot write it.
  template <class Metric = analysis::StackMetric, bool Symbolise = DLPROF_DETAIL_SYMBOLISE_STACKS>
  void export_stacks(const std::string& path, Metric metric = Metric{}) const {
    static_assert(detail::is_complete_v<detail::FoldedStacks<Metric>>,
                  "Profiler::export_stacks() needs #include <dlprof/export/folded_stacks.hpp>");
    const auto trace = last_trace();
    if (trace == nullptr) throw std::logic_error("dlprof: export_stacks: no trace yet: no recording window has been closed");
    detail::FoldedStacks<Metric>::template save<Symbolise>(*trace, path, metric);
  }

  /// The text report of the most recent trace: step-time breakdown, GPU summary, top ops and
  /// kernels, recommendations; its call stacks' lines symbolised in a program that links
  /// dlprof::symbolize. The file that calls it includes <dlprof/report.hpp>, so that the
  /// report's analyses and renderers are compiled only there, not in every file that includes the
  /// Profiler. A handler of on_trace_ready, which is given its trace, prints
  /// dlprof::report(trace) instead.
  template <class Options = ReportOptions, bool Symbolise = DLPROF_DETAIL_SYMBOLISE_STACKS>
  std::string report() const {
    static_assert(detail::is_complete_v<detail::TextReport<Options>>, "Profiler::report() needs #include <dlprof/report.hpp>");
    return report<Options, Symbolise>(Options{});
  }
  template <class Options, bool Symbolise = DLPROF_DETAIL_SYMBOLISE_STACKS>
  std::string report(const Options& options) const {
    static_assert(detail::is_complete_v<detail::TextReport<Options>>, "Profiler::report() needs #include <dlprof/report.hpp>");
    const auto trace = last_trace();
    if (trace == nullptr) return "dlprof report: no trace yet: no recording window has been closed\n";
    Trace copy;
    return detail::TextReport<Options>::of(detail::StackSymbols<Symbolise>::of(*trace, copy), options);
  }

  /// Messages of handlers that threw (an unwritable trace directory, for example), the first 256
  /// and then how many more. Training keeps running when a handler fails; the first failure of
  /// each handler is also printed to stderr.
  std::vector<std::string> errors() const;

 private:
  detail::ControlLock lock_control(const char* method);
  bool inherited() const noexcept;
  bool capture_for_ns(std::int64_t ns);
  void stop_locked(bool save = true);
  void stop_if_requested();
  void transit(Action previous, Action current);
  void trace_ready();
  void hand_over(std::shared_ptr<detail::ClosedWindow> window, bool handlers_here);
  void start_flight_recorder();
  static bool dump_on_terminate(void* profiler, const char* reason);
  void flight_step();
  void flight_dump(std::string reason, bool handlers_here);
  Action planned_action(std::int64_t step) const noexcept;
  bool ask_for_capture(std::int64_t amount);
  void watch();
  void take_capture_requests(bool stepping);
  void end_timed_capture();
  void warn_of_refused_signals(bool flush);
  void open_step();
  void close_step();

  ProfilerOptions options_;
  Mode mode_ = Mode::Scheduled;
  std::unique_ptr<detail::CaptureRequests> requests_;  // on demand and flight recorder: what asks for a capture or dump
  std::unique_ptr<detail::BasicOnDemandCapture<Deferred>> on_demand_;  // DLPROF_MODE=on-demand
  std::unique_ptr<detail::BasicWatcher<Deferred>> watcher_;  // on demand and flight recorder: looks at the job between steps
  const std::uint32_t generation_;  // the fork generation this Profiler was made in
  std::mutex control_mutex_;
  std::atomic<std::thread::id> controller_{};  // the thread inside start(), step() or stop(), if any
  std::atomic<bool> stop_requested_{false};    // stop() from a handler, done when its caller returns
  bool started_ = false;
  std::int64_t step_num_ = 0;
  Action action_ = Action::None;
  std::unique_ptr<detail::BasicWindowRecorder<Deferred>> window_;
  std::unique_ptr<detail::BasicFlightRecorder<Deferred>> flight_;  // DLPROF_MODE=flight-recorder
  // Last: its writer thread, which builds traces and runs handlers with the members above, ends
  // before they do.
  std::unique_ptr<detail::TracePublisher<Deferred>> publisher_;
};

using Profiler = BasicProfiler<>;

DLPROF_END_NAMESPACE

#include "dlprof/profiling_scope.hpp"

#if !DLPROF_RUNTIME_LIBRARY
#  include "dlprof/detail/profiler_runtime.hpp"
#endif

#if defined(DLPROF_HAS_CUPTI) && DLPROF_HAS_CUPTI
#  include "dlprof/cupti.hpp"
#endif
#if defined(DLPROF_HAS_TORCH) && DLPROF_HAS_TORCH
#  include "dlprof/torch.hpp"
#endif
