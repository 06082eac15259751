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
//   - the watcher thread: detail/control/watcher.hpp; the lock of start(), step() and stop():
//     detail/control/control_lock.hpp; what the schedule's actions do: schedule.hpp;
//   - fork and exit: detail/window/lifecycle.hpp.
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

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/annotate.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/control/capture_requests.hpp"
#include "dlprof/detail/control/capture_signal.hpp"
#include "dlprof/detail/control/control_lock.hpp"
#include "dlprof/detail/control/on_demand.hpp"
#include "dlprof/detail/control/watcher.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/window/closed_window.hpp"
#include "dlprof/detail/window/flight_recorder.hpp"
#include "dlprof/detail/window/lifecycle.hpp"
#include "dlprof/detail/window/publisher.hpp"
#include "dlprof/detail/window/window_recorder.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/range.hpp"
#include "dlprof/schedule.hpp"
#include "dlprof/settings.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

struct ReportOptions;

namespace detail {
/// The text report of a trace, for Profiler::report(): defined for ReportOptions by
/// <dlprof/report.hpp>.
template <class Options>
struct TextReport;

template <class T, class = void>
inline constexpr bool is_complete_v = false;
template <class T>
inline constexpr bool is_complete_v<T, std::void_t<decltype(sizeof(T))>> = true;
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
/// Profiler is BasicProfiler<>: a class template so that its members, the window's assembly and
/// the trace writer are compiled only in the file that runs a Profiler, and a file that includes
/// this header without one pays little more than their parse (bench/compile_time.py).
template <class Deferred = void>
class BasicProfiler {
 public:
  /// Records CPU activity from start() to stop(), no schedule, no handler.
  BasicProfiler() : BasicProfiler(ProfilerOptions{}) {}

  explicit BasicProfiler(ProfilerOptions options) : generation_(detail::fork_generation()) {
    // Named here so that a program that makes a Profiler catches the capture signal from the
    // moment it is loaded (detail/control/capture_signal.hpp).
    static_cast<void>(detail::g_capture_signal_at_load<Deferred>);
    detail::LaunchedOptions launched = detail::apply_settings(std::move(options), detail::read_settings(::environ));
    detail::take_requests_as_launched(launched, requests_);
    options_ = std::move(launched.options);
    publisher_.emplace(options_.handlers(), [this](detail::ClosedWindow&& window) {
      return detail::assemble_window(std::move(window), options_.distributed_backend());
    });
    mode_ = launched.mode;
    if (mode_ == Mode::FlightRecorder) flight_.emplace(window_, options_);
    if (mode_ == Mode::OnDemand) on_demand_.emplace(options_);
    for (const std::string& warning : launched.warnings) detail::print_warning_once(warning);
    if (mode_ == Mode::Off) return;
    detail::install_lifecycle_hooks();
    detail::select_clock();
    detail::process_ns_per_tick();  // starts the long calibration baseline now, not mid-window
    window_.find_collectors();
  }

  ~BasicProfiler() {
    if (inherited()) {
      // The parent's writer and watcher threads do not exist here and their locks may be held
      // for good: they are left as they are, never waited for or destroyed.
      publisher_->abandon_in_child();
      watcher_.abandon_in_child();
      return;
    }
    if (started_) {
      try {
        stop();
      } catch (...) {  // a destructor must not throw; stop() already reported handler errors
      }
    }
    watcher_.stop();
  }

  BasicProfiler(const BasicProfiler&) = delete;
  BasicProfiler& operator=(const BasicProfiler&) = delete;

  /// Starts (or resumes) the schedule at the current step: 0 the first time; after stop(), step
  /// numbers keep counting step() calls since construction, as in torch.profiler. Throws
  /// std::logic_error if this or another Profiler is already started, from a handler, and in a
  /// fork's child for a Profiler made in the parent.
  void start() {
    if (inherited())
      throw std::logic_error(
          "dlprof::Profiler::start(): this Profiler was made before fork() and records nothing in the child; make a "
          "new Profiler in the child process");
    const detail::ControlLock control = lock_control("start");
    const void* expected = nullptr;
    if (!detail::g_started_profiler.compare_exchange_strong(expected, this))
      throw std::logic_error(expected == this ? "dlprof::Profiler::start(): already started"
                                              : "dlprof::Profiler::start(): another Profiler is already started");
    started_ = true;
    if (mode_ == Mode::Off) return;
    if (mode_ == Mode::FlightRecorder) {
      start_flight_recorder();
      if (options_.slow_step_factor() != 0) watcher_.start([this] { watch(); });
      stop_if_requested();
      return;
    }
    if (on_demand_) {
      on_demand_->stepped(detail::clock_ns(CLOCK_MONOTONIC));
      watcher_.start([this] { watch(); });
    }
    action_ = planned_action(step_num_);
    transit(Action::None, action_);
    open_step();
    stop_if_requested();
  }

  /// Ends step N and begins step N+1, running the transition the schedule asks for. Throws
  /// std::logic_error when not started, or from an on_trace_ready handler.
  void step() {
    if (inherited()) {  // a fork's child: counts, records nothing
      ++step_num_;
      return;
    }
    const detail::ControlLock control = lock_control("step");
    if (!started_) throw std::logic_error("dlprof::Profiler::step(): the profiler is not started");
    if (mode_ == Mode::Off) {
      ++step_num_;
      return;
    }
    if (mode_ == Mode::FlightRecorder) {
      flight_step();
      stop_if_requested();
      return;
    }
    std::int64_t now_ns = 0;
    if (on_demand_) {
      now_ns = detail::clock_ns(CLOCK_MONOTONIC);
      on_demand_->stepped(now_ns);
      take_capture_requests(/*stepping=*/true);
    }
    close_step();
    const Action previous = action_;
    ++step_num_;
    if (on_demand_ && on_demand_->timed_capture_due(now_ns)) {
      end_timed_capture();
    } else {
      action_ = planned_action(step_num_);
      transit(previous, action_);
    }
    if (on_demand_ && !on_demand_->running(step_num_)) on_demand_->end();
    open_step();
    stop_if_requested();
  }

  /// Ends the current step; a trace still recording is saved (handlers run). Waits until
  /// background handlers have finished. From an on_trace_ready handler, the Profiler stops once
  /// the step() that runs the handler is done, dropping the window that step() had just begun (a
  /// background handler: at the next step()).
  void stop() {
    if (inherited()) {
      started_ = false;
      return;
    }
    if (controller_.load(std::memory_order_acquire) == std::this_thread::get_id() ||
        publisher_->on_writer_thread()) {
      stop_requested_.store(true, std::memory_order_release);
      return;
    }
    const detail::ControlLock control = lock_control("stop");
    stop_locked();
  }

  /// DLPROF_MODE=on-demand: asks for the next `steps` steps to be recorded and handed to the
  /// handlers. The step() after the call warms up, the `steps` after it are recorded, and the
  /// Profiler then goes back to idle. Returns false and asks nothing when this Profiler is not on
  /// demand or a capture is already asked for or running (a signal or trigger file that asks
  /// meanwhile is refused with a warning). Any thread may call it. Throws std::invalid_argument
  /// for `steps` outside [1, 1000000].
  bool capture(std::int64_t steps = detail::kDefaultCaptureSteps) {
    if (steps < 1 || steps > detail::kMaxCaptureSteps)
      throw std::invalid_argument(
          fmt::format("dlprof::Profiler::capture: steps must be in [1, {}], got {}", detail::kMaxCaptureSteps, steps));
    return ask_for_capture(steps);
  }

  /// DLPROF_MODE=on-demand: asks for a capture of `duration`, for a program that does not call
  /// step() (a server, a data pipeline): recording begins at the next step(), or within 200 ms
  /// when no step() has come for a second, and the trace is handed over `duration` later. As
  /// capture() otherwise; throws std::invalid_argument for a duration outside (0, 24 h].
  template <class Rep, class Period>
  bool capture_for(std::chrono::duration<Rep, Period> duration) {
    const std::int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count();
    if (ns <= 0 || ns > detail::kMaxCaptureNs)
      throw std::invalid_argument(fmt::format("dlprof::Profiler::capture_for: the duration must be in (0, 24 h], got {} ns", ns));
    return ask_for_capture(-ns);
  }

  /// DLPROF_MODE=flight-recorder: writes the steps kept in memory, and the current one so far,
  /// as a trace marked as a flight-recorder dump with `reason`, and hands it to the handlers. The
  /// next dump holds the steps after this one. Returns false and writes nothing when this Profiler
  /// is not a started flight recorder. Any thread may call it, but not a handler.
  bool dump(std::string_view reason = "prof.dump()") {
    if (inherited()) return false;
    const detail::ControlLock control = lock_control("dump");
    if (mode_ != Mode::FlightRecorder || !started_) return false;
    flight_dump(std::string(reason), /*handlers_here=*/false);
    return true;
  }

  /// Flight-recorder dumps written since construction, and slow steps not dumped because one was
  /// dumped less than a minute before.
  std::uint64_t dumps() const noexcept { return flight_ ? flight_->dumps() : 0; }
  std::uint64_t slow_steps_not_dumped() const noexcept { return flight_ ? flight_->slow_steps_not_dumped() : 0; }
  /// Capture or dump requests by signal this Profiler refused: signals that arrived together with
  /// the one taken (they ask once), and those within 10 s after it (one is taken per 10 s at most).
  std::uint64_t signals_refused() const noexcept { return requests_ ? requests_->signals_refused() : 0; }

  bool started() const noexcept { return started_; }
  /// step() calls since construction: the N of the current ProfilerStep#N.
  std::int64_t step_num() const noexcept { return step_num_; }
  Action current_action() const noexcept { return action_; }
  /// The options in effect: the program's, with the launcher's settings over them.
  const ProfilerOptions& options() const noexcept { return options_; }
  Mode mode() const noexcept { return mode_; }

  /// The trace of the most recently closed window, or null. A trace still being built on the
  /// writer thread is waited for (except from a background handler, which is handed its trace).
  std::shared_ptr<const Trace> last_trace() const {
    if (inherited()) return nullptr;  // the parent's, guarded by a lock its writer may hold for good
    return publisher_->last_trace();
  }

  /// Per-name summary of the most recent trace; empty before the first one.
  KeyAverages key_averages() const {
    const auto trace = last_trace();
    return trace ? KeyAverages(*trace) : KeyAverages();
  }

  /// The text report of the most recent trace: step-time breakdown, GPU summary, top ops and
  /// kernels, recommendations. The file that calls it includes <dlprof/report.hpp>, so that the
  /// report's analyses and renderers are compiled only there, not in every file that includes the
  /// Profiler. A handler of on_trace_ready, which is given its trace, prints
  /// dlprof::report(trace) instead.
  template <class Options = ReportOptions>
  std::string report() const {
    static_assert(detail::is_complete_v<detail::TextReport<Options>>, "Profiler::report() needs #include <dlprof/report.hpp>");
    return report(Options{});
  }
  template <class Options>
  std::string report(const Options& options) const {
    static_assert(detail::is_complete_v<detail::TextReport<Options>>, "Profiler::report() needs #include <dlprof/report.hpp>");
    const auto trace = last_trace();
    if (trace == nullptr) return "dlprof report: no trace yet: no recording window has been closed\n";
    return detail::TextReport<Options>::of(*trace, options);
  }

  /// Messages of handlers that threw (an unwritable trace directory, for example), the first 256
  /// and then how many more. Training keeps running when a handler fails; the first failure of
  /// each handler is also printed to stderr.
  std::vector<std::string> errors() const {
    if (inherited()) return {};
    return publisher_->errors();
  }

 private:
  /// Serialises start(), step() and stop() across threads (detail/control/control_lock.hpp).
  detail::ControlLock lock_control(const char* method) {
    return detail::ControlLock(control_mutex_, controller_, publisher_->on_writer_thread(), method);
  }

  bool inherited() const noexcept { return generation_ != detail::fork_generation(); }

  /// `save`: whether a window still recording is saved (handlers run) or dropped.
  void stop_locked(bool save = true) {
    if (started_ && requests_) warn_of_refused_signals(/*flush=*/true);
    if (started_) {
      close_step();
      if (flight_) {
        flight_->stop();  // the steps after the last dump are dropped: nothing asked for them
      } else {
        // A recording window is saved or dropped; torch starts and stops an empty trace at a
        // warm-up step: nothing to save.
        if (action_ == Action::Record || action_ == Action::RecordAndSave) {
          window_.stop();
          if (save)
            trace_ready();
          else
            window_.discard();
        }
        window_.disable_collectors();
        if (on_demand_) {
          on_demand_->end_timed();
          on_demand_->end();
        }
      }
      started_ = false;
      detail::g_started_profiler.store(nullptr);
      publisher_->wait_idle();
    }
    stop_requested_.store(false, std::memory_order_release);  // also a request made by the handlers just run
  }

  /// A stop() asked for by a handler during start() or step(): the window the call has just
  /// begun holds nothing yet and is dropped, not saved as an empty trace.
  void stop_if_requested() {
    if (stop_requested_.load(std::memory_order_acquire)) stop_locked(/*save=*/false);
  }

  /// What torch.profiler's action map does on the step from `previous` to `current`
  /// (action_map_steps(), schedule.hpp); the collectors are switched off for a step that records
  /// nothing.
  void transit(Action previous, Action current) {
    const ActionMapSteps steps = action_map_steps(previous, current);
    if (steps.warn)
      detail::print_warning(fmt::format("Incorrect schedule: {} followed by {} at step {}; the recorded steps are discarded",
                                        to_string(previous), to_string(current), step_num_));
    if (steps.save || steps.discard) window_.stop();
    if (steps.save) trace_ready();
    if (steps.discard) window_.discard();
    if (steps.arm) window_.arm(/*keep_newest=*/false);
    if (steps.start) window_.start();
    if (current == Action::None) window_.disable_collectors();
  }

  /// The window just closed becomes a Trace for last_trace() and the handlers. Built on the
  /// writer thread unless a handler must run on this one, so that prof.step() only drains the
  /// rings: building costs as much again per recorded op.
  void trace_ready() { hand_over(window_.close(), /*handlers_here=*/false); }

  /// The window's trace goes to last_trace() and the handlers (detail/window/publisher.hpp).
  void hand_over(std::shared_ptr<detail::ClosedWindow> window, bool handlers_here) {
    publisher_->publish(std::move(window), handlers_here);
  }

  // The flight recorder (Mode::FlightRecorder).

  void start_flight_recorder() {
    flight_->start(step_num_, generation_, &BasicProfiler::dump_on_terminate, this);
    open_step();
  }

  /// CrashTarget::dump: std::terminate's dump, with every handler run on the terminating thread,
  /// since the process ends when it returns.
  static bool dump_on_terminate(void* profiler, const char* reason) {
    BasicProfiler& self = *static_cast<BasicProfiler*>(profiler);
    if (!self.control_mutex_.try_lock()) return false;
    const std::lock_guard<std::mutex> control(self.control_mutex_, std::adopt_lock);
    if (!self.started_ || self.mode_ != Mode::FlightRecorder) return false;
    self.flight_dump(reason, /*handlers_here=*/true);
    return true;
  }

  /// step() of a flight recorder: the step ends in the log, and a dump follows when the step was
  /// slow or one was asked for. One dump answers all of these, and its reason names each.
  void flight_step() {
    close_step();
    std::string reason = flight_->end_step(step_num_).value_or("");
    for (const detail::CaptureRequest& request : requests_->take_all(detail::clock_ns(CLOCK_MONOTONIC), "dump"))
      reason.append(reason.empty() ? "" : "; ").append(request.source);
    ++step_num_;
    flight_->number_step(step_num_);
    if (!reason.empty()) flight_dump(reason, /*handlers_here=*/false);
    open_step();
  }

  void flight_dump(std::string reason, bool handlers_here) {
    hand_over(flight_->dump(std::move(reason), step_num_), handlers_here);
  }

  /// What step `step` does: the schedule's action, or on demand the current capture's.
  Action planned_action(std::int64_t step) const noexcept {
    return on_demand_ ? on_demand_->action(step) : options_.schedule()(step);
  }

  /// A request from code: `amount` steps, or -amount ns. False when one is pending or running.
  bool ask_for_capture(std::int64_t amount) {
    if (!on_demand_ || on_demand_->capturing() || !requests_->ask(amount)) return false;
    watcher_.wake();
    return true;
  }

  /// The watcher's look (detail/control/watcher.hpp): on demand, ends a timed capture that is due
  /// and, when no step() has come for a second (a program without steps), takes the requests
  /// step() would; in a flight recorder, dumps a step that hangs. Only tries the control lock, so
  /// that start(), step() and stop() never wait for it.
  void watch() {
    if (!control_mutex_.try_lock()) return;
    const std::lock_guard<std::mutex> control(control_mutex_, std::adopt_lock);
    if (!started_) return;
    controller_.store(std::this_thread::get_id(), std::memory_order_release);
    if (flight_) {
      if (std::optional<std::string> reason = flight_->hang(step_num_)) flight_dump(std::move(*reason), /*handlers_here=*/false);
    } else {
      const std::int64_t now = detail::clock_ns(CLOCK_MONOTONIC);
      if (on_demand_->timed_capture_due(now)) end_timed_capture();
      if (on_demand_->without_steps(now)) take_capture_requests(/*stepping=*/false);
      if (!on_demand_->running(step_num_)) on_demand_->end();
    }
    controller_.store(std::thread::id(), std::memory_order_release);
    if (stop_requested_.load(std::memory_order_acquire)) stop_locked();
  }

  /// On demand: the requests made since the last look (OnDemandCapture::take); a timed capture
  /// records from now.
  void take_capture_requests(bool stepping) {
    if (!on_demand_->take(*requests_, step_num_, stepping)) return;
    window_.arm(/*keep_newest=*/false);
    window_.start();
    action_ = Action::Record;
  }

  /// A timed capture is due: its trace is handed over, and recording stops.
  void end_timed_capture() {
    on_demand_->end_timed();
    window_.stop();
    trace_ready();
    window_.disable_collectors();
    action_ = Action::None;
  }

  void warn_of_refused_signals(bool flush) {
    requests_->warn_of_refused_signals(detail::clock_ns(CLOCK_MONOTONIC), flush,
                                       mode_ == Mode::OnDemand ? "capture" : "dump");
  }

  void open_step() {
    // No schedule: no ProfilerStep events, like torch. On demand, captures have them.
    window_.open_step(step_num_, mode_ != Mode::Scheduled || options_.schedule().has_cycles());
    if (flight_) flight_->step_opened();
  }

  void close_step() { window_.close_step(step_num_); }

  ProfilerOptions options_;
  Mode mode_ = Mode::Scheduled;
  std::optional<detail::CaptureRequests> requests_;  // on demand and flight recorder: what asks for a capture or dump
  std::optional<detail::OnDemandCapture> on_demand_;  // DLPROF_MODE=on-demand
  detail::Watcher watcher_;  // on demand and flight recorder: looks at the job between steps
  const std::uint32_t generation_;  // the fork generation this Profiler was made in
  std::mutex control_mutex_;
  std::atomic<std::thread::id> controller_{};  // the thread inside start(), step() or stop(), if any
  std::atomic<bool> stop_requested_{false};    // stop() from a handler, done when its caller returns
  bool started_ = false;
  std::int64_t step_num_ = 0;
  Action action_ = Action::None;
  detail::WindowRecorder window_{options_};
  std::optional<detail::FlightRecorder> flight_;  // DLPROF_MODE=flight-recorder
  // Last: its writer thread, which builds traces and runs handlers with the members above, ends
  // before they do.
  std::optional<detail::TracePublisher<>> publisher_;
};

using Profiler = BasicProfiler<>;

DLPROF_END_NAMESPACE

#include "dlprof/profiling_scope.hpp"

#if defined(DLPROF_HAS_CUPTI) && DLPROF_HAS_CUPTI
#  include "dlprof/cupti.hpp"
#endif
#if defined(DLPROF_HAS_TORCH) && DLPROF_HAS_TORCH
#  include "dlprof/torch.hpp"
#endif
