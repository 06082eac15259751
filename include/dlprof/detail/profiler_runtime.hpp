// dlprof/detail/profiler_runtime.hpp: what the Profiler's members do (profiler.hpp declares
// them), and the directory handler that writes its traces. profiler.hpp includes this unless
// DLPROF_RUNTIME_LIBRARY is 1; the dlprof::runtime library compiles it once and instantiates
// BasicProfiler<> and tensorboard_trace_handler<> there (src/profiler_runtime.cpp).
#pragma once

#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/control/capture_requests.hpp"
#include "dlprof/detail/control/capture_signal.hpp"
#include "dlprof/detail/control/control_lock.hpp"
#include "dlprof/detail/control/launched_options.hpp"
#include "dlprof/detail/control/on_demand.hpp"
#include "dlprof/detail/control/watcher.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/detail/window/closed_window.hpp"
#include "dlprof/detail/window/flight_recorder.hpp"
#include "dlprof/detail/window/lifecycle.hpp"
#include "dlprof/detail/window/publisher.hpp"
#include "dlprof/detail/window/window_recorder.hpp"
#include "dlprof/export/chrome_trace.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/format/launch_protocol.hpp"
#include "dlprof/profiler.hpp"
#include "dlprof/settings.hpp"

DLPROF_BEGIN_NAMESPACE

/// torch.profiler.tensorboard_trace_handler: writes each trace to
/// `<dir>/<worker>.<unix_time_ns>.pt.trace.json[.gz]`, creating `dir` if needed, on the
/// Profiler's background writer. `worker` defaults to "<hostname>_<pid>". A failure (directory
/// not writable, disk full) is reported through Profiler::errors() and stderr; training goes on.
template <class Deferred>
TraceHandler tensorboard_trace_handler(std::string dir, std::string worker, bool gzip) {
  if (dir.empty()) throw std::invalid_argument("dlprof::tensorboard_trace_handler: dir is empty");
  if (worker.empty()) worker = detail::default_worker_name();
  TraceHandler handler(
      [dir, worker, gzip](const Trace& trace) {
        if (const int error = detail::make_directories(dir); error != 0)
          throw std::runtime_error(fmt::format("cannot create trace directory '{}': {}", dir, detail::errno_text(error)));
        const std::string path =
            fmt::format("{}/{}.{}{}{}", dir, worker, detail::clock_ns(CLOCK_REALTIME), detail::kTraceFileSuffix,
                        gzip ? detail::kGzipSuffix : std::string_view());
        save_chrome_trace(trace, path);
      },
      /*run_in_background=*/true);
  handler.directory = std::move(dir);
  handler.worker = std::move(worker);
  return handler;
}

template <class Deferred>
BasicProfiler<Deferred>::BasicProfiler(ProfilerOptions options) : generation_(detail::fork_generation()) {
  // Named here so that a program that makes a Profiler catches the capture signal from the
  // moment it is loaded (detail/control/capture_signal.hpp).
  static_cast<void>(detail::g_capture_signal_at_load<Deferred>);
  detail::LaunchedOptions launched = detail::apply_settings(std::move(options), detail::read_settings(::environ));
  detail::take_requests_as_launched(launched, requests_);
  options_ = std::move(launched.options);
  window_ = std::make_unique<detail::BasicWindowRecorder<Deferred>>(options_);
  watcher_ = std::make_unique<detail::BasicWatcher<Deferred>>();
  publisher_ = std::make_unique<detail::TracePublisher<Deferred>>(
      options_.handlers(), [this](detail::ClosedWindow&& window) {
        return detail::assemble_window(std::move(window), options_.distributed_backend());
      });
  mode_ = launched.mode;
  if (mode_ == Mode::FlightRecorder) flight_ = std::make_unique<detail::BasicFlightRecorder<Deferred>>(*window_, options_);
  if (mode_ == Mode::OnDemand) on_demand_ = std::make_unique<detail::BasicOnDemandCapture<Deferred>>(options_);
  for (const std::string& warning : launched.warnings) detail::print_warning_once(warning);
  if (mode_ == Mode::Off) return;
  detail::install_lifecycle_hooks();
  detail::select_clock();
  detail::process_ns_per_tick();  // starts the long calibration baseline now, not mid-window
  window_->find_collectors();
}

template <class Deferred>
BasicProfiler<Deferred>::~BasicProfiler() {
  if (inherited()) {
    // The parent's writer and watcher threads do not exist here and their locks may be held
    // for good: they are left as they are, never waited for or destroyed.
    publisher_->abandon_in_child();
    watcher_->abandon_in_child();
    return;
  }
  if (started_) {
    try {
      stop();
    } catch (...) {  // a destructor must not throw; stop() already reported handler errors
    }
  }
  watcher_->stop();
}

template <class Deferred>
void BasicProfiler<Deferred>::start() {
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
    if (options_.slow_step_factor() != 0) watcher_->start([this] { watch(); });
    stop_if_requested();
    return;
  }
  if (on_demand_) {
    on_demand_->stepped(detail::clock_ns(CLOCK_MONOTONIC));
    watcher_->start([this] { watch(); });
  }
  action_ = planned_action(step_num_);
  transit(Action::None, action_);
  open_step();
  stop_if_requested();
}

template <class Deferred>
void BasicProfiler<Deferred>::step() {
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

template <class Deferred>
void BasicProfiler<Deferred>::stop() {
  if (inherited()) {
    started_ = false;
    return;
  }
  if (controller_.load(std::memory_order_acquire) == std::this_thread::get_id() || publisher_->on_writer_thread()) {
    stop_requested_.store(true, std::memory_order_release);
    return;
  }
  const detail::ControlLock control = lock_control("stop");
  stop_locked();
}

template <class Deferred>
bool BasicProfiler<Deferred>::capture(std::int64_t steps) {
  if (steps < 1 || steps > detail::kMaxCaptureSteps)
    throw std::invalid_argument(
        fmt::format("dlprof::Profiler::capture: steps must be in [1, {}], got {}", detail::kMaxCaptureSteps, steps));
  return ask_for_capture(steps);
}

template <class Deferred>
bool BasicProfiler<Deferred>::capture() {
  return capture(detail::kDefaultCaptureSteps);
}

template <class Deferred>
bool BasicProfiler<Deferred>::capture_for_ns(std::int64_t ns) {
  if (ns <= 0 || ns > detail::kMaxCaptureNs)
    throw std::invalid_argument(fmt::format("dlprof::Profiler::capture_for: the duration must be in (0, 24 h], got {} ns", ns));
  return ask_for_capture(-ns);
}

template <class Deferred>
bool BasicProfiler<Deferred>::dump(std::string_view reason) {
  if (inherited()) return false;
  const detail::ControlLock control = lock_control("dump");
  if (mode_ != Mode::FlightRecorder || !started_) return false;
  flight_dump(std::string(reason), /*handlers_here=*/false);
  return true;
}

template <class Deferred>
std::uint64_t BasicProfiler<Deferred>::dumps() const noexcept {
  return flight_ ? flight_->dumps() : 0;
}

template <class Deferred>
std::uint64_t BasicProfiler<Deferred>::slow_steps_not_dumped() const noexcept {
  return flight_ ? flight_->slow_steps_not_dumped() : 0;
}

template <class Deferred>
std::uint64_t BasicProfiler<Deferred>::signals_refused() const noexcept {
  return requests_ ? requests_->signals_refused() : 0;
}

template <class Deferred>
std::shared_ptr<const Trace> BasicProfiler<Deferred>::last_trace() const {
  if (inherited()) return nullptr;  // the parent's, guarded by a lock its writer may hold for good
  return publisher_->last_trace();
}

template <class Deferred>
std::vector<std::string> BasicProfiler<Deferred>::errors() const {
  if (inherited()) return {};
  return publisher_->errors();
}

/// Serialises start(), step() and stop() across threads (detail/control/control_lock.hpp).
template <class Deferred>
detail::ControlLock BasicProfiler<Deferred>::lock_control(const char* method) {
  return detail::ControlLock(control_mutex_, controller_, publisher_->on_writer_thread(), method);
}

template <class Deferred>
bool BasicProfiler<Deferred>::inherited() const noexcept {
  return generation_ != detail::fork_generation();
}

/// `save`: whether a window still recording is saved (handlers run) or dropped.
template <class Deferred>
void BasicProfiler<Deferred>::stop_locked(bool save) {
  if (started_ && requests_) warn_of_refused_signals(/*flush=*/true);
  if (started_) {
    close_step();
    if (flight_) {
      flight_->stop();  // the steps after the last dump are dropped: nothing asked for them
    } else {
      // A recording window is saved or dropped; torch starts and stops an empty trace at a
      // warm-up step: nothing to save.
      if (action_ == Action::Record || action_ == Action::RecordAndSave) {
        window_->stop();
        if (save)
          trace_ready();
        else
          window_->discard();
      }
      window_->disable_collectors();
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

/// A stop() asked for by a handler during start() or step(): the window the call has just begun
/// holds nothing yet and is dropped, not saved as an empty trace.
template <class Deferred>
void BasicProfiler<Deferred>::stop_if_requested() {
  if (stop_requested_.load(std::memory_order_acquire)) stop_locked(/*save=*/false);
}

/// What torch.profiler's action map does on the step from `previous` to `current`
/// (action_map_steps(), schedule.hpp); the collectors are switched off for a step that records
/// nothing.
template <class Deferred>
void BasicProfiler<Deferred>::transit(Action previous, Action current) {
  const ActionMapSteps steps = action_map_steps(previous, current);
  if (steps.warn)
    detail::print_warning(fmt::format("Incorrect schedule: {} followed by {} at step {}; the recorded steps are discarded",
                                      to_string(previous), to_string(current), step_num_));
  if (steps.save || steps.discard) window_->stop();
  if (steps.save) trace_ready();
  if (steps.discard) window_->discard();
  if (steps.arm) window_->arm(/*keep_newest=*/false);
  if (steps.start) window_->start();
  if (current == Action::None) window_->disable_collectors();
}

/// The window just closed becomes a Trace for last_trace() and the handlers. Built on the writer
/// thread unless a handler must run on this one, so that prof.step() only drains the rings:
/// building costs as much again per recorded op.
template <class Deferred>
void BasicProfiler<Deferred>::trace_ready() {
  hand_over(window_->close(), /*handlers_here=*/false);
}

/// The window's trace goes to last_trace() and the handlers (detail/window/publisher.hpp).
template <class Deferred>
void BasicProfiler<Deferred>::hand_over(std::shared_ptr<detail::ClosedWindow> window, bool handlers_here) {
  publisher_->publish(std::move(window), handlers_here);
}

// The flight recorder (Mode::FlightRecorder).

template <class Deferred>
void BasicProfiler<Deferred>::start_flight_recorder() {
  flight_->start(step_num_, generation_, &BasicProfiler::dump_on_terminate, this);
  open_step();
}

/// CrashTarget::dump: std::terminate's dump, with every handler run on the terminating thread,
/// since the process ends when it returns.
template <class Deferred>
bool BasicProfiler<Deferred>::dump_on_terminate(void* profiler, const char* reason) {
  BasicProfiler& self = *static_cast<BasicProfiler*>(profiler);
  if (!self.control_mutex_.try_lock()) return false;
  const std::lock_guard<std::mutex> control(self.control_mutex_, std::adopt_lock);
  if (!self.started_ || self.mode_ != Mode::FlightRecorder) return false;
  self.flight_dump(reason, /*handlers_here=*/true);
  return true;
}

/// step() of a flight recorder: the step ends in the log, and a dump follows when the step was
/// slow or one was asked for. One dump answers all of these, and its reason names each.
template <class Deferred>
void BasicProfiler<Deferred>::flight_step() {
  close_step();
  std::string reason = flight_->end_step(step_num_).value_or("");
  for (const detail::CaptureRequest& request : requests_->take_all(detail::clock_ns(CLOCK_MONOTONIC), "dump"))
    reason.append(reason.empty() ? "" : "; ").append(request.source);
  ++step_num_;
  flight_->number_step(step_num_);
  if (!reason.empty()) flight_dump(reason, /*handlers_here=*/false);
  open_step();
}

template <class Deferred>
void BasicProfiler<Deferred>::flight_dump(std::string reason, bool handlers_here) {
  hand_over(flight_->dump(std::move(reason), step_num_), handlers_here);
}

/// What step `step` does: the schedule's action, or on demand the current capture's.
template <class Deferred>
Action BasicProfiler<Deferred>::planned_action(std::int64_t step) const noexcept {
  return on_demand_ ? on_demand_->action(step) : options_.schedule()(step);
}

/// A request from code: `amount` steps, or -amount ns. False when one is pending or running.
template <class Deferred>
bool BasicProfiler<Deferred>::ask_for_capture(std::int64_t amount) {
  if (!on_demand_ || on_demand_->capturing() || !requests_->ask(amount)) return false;
  watcher_->wake();
  return true;
}

/// The watcher's look (detail/control/watcher.hpp): on demand, ends a timed capture that is due
/// and, when no step() has come for a second (a program without steps), takes the requests
/// step() would; in a flight recorder, notes its progress in the flight log's file and dumps a
/// step that hangs. Only tries the control lock, so
/// that start(), step() and stop() never wait for it.
template <class Deferred>
void BasicProfiler<Deferred>::watch() {
  if (!control_mutex_.try_lock()) return;
  const std::lock_guard<std::mutex> control(control_mutex_, std::adopt_lock);
  if (!started_) return;
  controller_.store(std::this_thread::get_id(), std::memory_order_release);
  if (flight_) {
    flight_->note_progress();
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
template <class Deferred>
void BasicProfiler<Deferred>::take_capture_requests(bool stepping) {
  if (!on_demand_->take(*requests_, step_num_, stepping)) return;
  window_->arm(/*keep_newest=*/false);
  window_->start();
  action_ = Action::Record;
}

/// A timed capture is due: its trace is handed over, and recording stops.
template <class Deferred>
void BasicProfiler<Deferred>::end_timed_capture() {
  on_demand_->end_timed();
  window_->stop();
  trace_ready();
  window_->disable_collectors();
  action_ = Action::None;
}

template <class Deferred>
void BasicProfiler<Deferred>::warn_of_refused_signals(bool flush) {
  requests_->warn_of_refused_signals(detail::clock_ns(CLOCK_MONOTONIC), flush, mode_ == Mode::OnDemand ? "capture" : "dump");
}

template <class Deferred>
void BasicProfiler<Deferred>::open_step() {
  // No schedule: no ProfilerStep events, like torch. On demand, captures have them.
  window_->open_step(step_num_, mode_ != Mode::Scheduled || options_.schedule().has_cycles());
  if (flight_) flight_->step_opened();
}

template <class Deferred>
void BasicProfiler<Deferred>::close_step() {
  window_->close_step(step_num_);
}

DLPROF_END_NAMESPACE
