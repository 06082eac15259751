// dlprof/profiler.hpp: the include of the file that owns the training loop. Ranges (range.hpp), schedules (schedule.hpp), traces
// (trace.hpp), the summary table (key_averages.hpp), the options (profiler_options.hpp) and the
// Profiler that ties them together.
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

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/annotate.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/control/capture_requests.hpp"
#include "dlprof/detail/control/capture_signal.hpp"
#include "dlprof/detail/control/slow_step_policy.hpp"
#include "dlprof/detail/control/watchdog.hpp"
#include "dlprof/detail/window/assemble.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/detail/window/crash_file.hpp"
#include "dlprof/detail/window/flight_log.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/backends/thread_cpu_sampler.hpp"
#include "dlprof/detail/window/gpu_merge.hpp"
#include "dlprof/detail/window/lifecycle.hpp"
#include "dlprof/detail/window/publisher.hpp"
#include "dlprof/detail/backends/op_observer.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/distributed.hpp"
#include "dlprof/export/chrome_trace.hpp"
#include "dlprof/format/vocabulary.hpp"
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

namespace detail {

/// Prints `message` unless this process has printed it already: several Profilers made with the
/// same settings warn once.
template <class Deferred = void>
void print_warning_once(const std::string& message) {
  static std::mutex mutex;
  static std::vector<std::string>* printed = new std::vector<std::string>();  // never destroyed: Profilers may be globals
  const std::lock_guard<std::mutex> lock(mutex);
  if (std::find(printed->begin(), printed->end(), message) != printed->end()) return;
  printed->push_back(message);
  print_warning(message);
}

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
    options_ = std::move(launched.options);
    publisher_.emplace(options_.handlers(), [this](detail::ClosedWindow&& window) { return build(std::move(window)); });
    slow_steps_ = detail::SlowStepPolicy(options_.slow_step_factor());
    mode_ = launched.mode;
    if (detail::takes_requests(mode_)) {
      requests_.emplace(std::move(launched.trigger_file));
      if (launched.capture_signal != 0)
        if (const std::string problem = detail::install_capture_signal(launched.capture_signal); !problem.empty())
          launched.warnings.push_back(fmt::format("signal {} cannot ask for {}: {}; {} and DLPROF_TRIGGER_FILE still can",
                                                  launched.capture_signal, mode_ == Mode::OnDemand ? "captures" : "dumps",
                                                  problem, mode_ == Mode::OnDemand ? "prof.capture()" : "prof.dump()"));
      if (options_.handlers().empty())
        launched.warnings.push_back(mode_ == Mode::OnDemand
                                        ? "DLPROF_MODE=on-demand with no DLPROF_OUTPUT and no on_trace_ready handler: captures "
                                          "are kept for last_trace() only"
                                        : "DLPROF_MODE=flight-recorder with no DLPROF_OUTPUT and no on_trace_ready handler: "
                                          "dumps are kept for last_trace() only, and a crash leaves no file");
    }
    for (const std::string& warning : launched.warnings) detail::print_warning_once(warning);
    if (mode_ == Mode::Off) return;
    detail::install_lifecycle_hooks();
    detail::select_clock();
    detail::process_ns_per_tick();  // starts the long calibration baseline now, not mid-window
    find_collectors();
  }

  ~BasicProfiler() {
    if (inherited()) {
      // The parent's writer and watcher threads do not exist here and their locks may be held
      // for good: they are left as they are, never waited for or destroyed.
      publisher_->abandon_in_child();
      static_cast<void>(watcher_.release());
      return;
    }
    if (started_) {
      try {
        stop();
      } catch (...) {  // a destructor must not throw; stop() already reported handler errors
      }
    }
    if (watcher_) {
      {
        const std::lock_guard<std::mutex> lock(watcher_mutex_);
        watcher_stopping_ = true;
      }
      watcher_wake_.notify_all();
      watcher_->join();
    }
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
    const ControlLock control(*this, "start");
    const void* expected = nullptr;
    if (!detail::g_started_profiler.compare_exchange_strong(expected, this))
      throw std::logic_error(expected == this ? "dlprof::Profiler::start(): already started"
                                              : "dlprof::Profiler::start(): another Profiler is already started");
    started_ = true;
    if (mode_ == Mode::Off) return;
    if (mode_ == Mode::FlightRecorder) {
      start_flight_recorder();
      if (options_.slow_step_factor() != 0 && !watcher_) watcher_ = std::make_unique<std::thread>([this] { watch(); });
      stop_if_requested();
      return;
    }
    if (mode_ == Mode::OnDemand) {
      last_step_call_ns_ = detail::clock_ns(CLOCK_MONOTONIC);
      if (!watcher_) watcher_ = std::make_unique<std::thread>([this] { watch(); });
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
    const ControlLock control(*this, "step");
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
    if (mode_ == Mode::OnDemand) {
      last_step_call_ns_ = detail::clock_ns(CLOCK_MONOTONIC);
      take_capture_requests(/*stepping=*/true);
    }
    close_step();
    const Action previous = action_;
    ++step_num_;
    if (timed_capture_end_ns_ != 0 && last_step_call_ns_ >= timed_capture_end_ns_) {
      end_timed_capture();
    } else {
      action_ = planned_action(step_num_);
      transit(previous, action_);
    }
    if (mode_ == Mode::OnDemand && !capture_running()) end_capture();
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
    const ControlLock control(*this, "stop");
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
    const ControlLock control(*this, "dump");
    if (mode_ != Mode::FlightRecorder || !started_) return false;
    flight_dump(std::string(reason), /*handlers_here=*/false);
    return true;
  }

  /// Flight-recorder dumps written since construction, and slow steps not dumped because one was
  /// dumped less than a minute before.
  std::uint64_t dumps() const noexcept { return dumps_; }
  std::uint64_t slow_steps_not_dumped() const noexcept { return slow_steps_.slow_steps_not_dumped(); }
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
  /// Serialises start(), step() and stop() across threads, and refuses them from a handler that
  /// one of them is running on the same thread (which would otherwise deadlock or re-enter).
  class ControlLock {
   public:
    ControlLock(BasicProfiler& profiler, const char* method) : profiler_(profiler) {
      if (profiler.controller_.load(std::memory_order_acquire) == std::this_thread::get_id() ||
          profiler.publisher_->on_writer_thread())
        throw std::logic_error(
            fmt::format("dlprof::Profiler::{}(): called from an on_trace_ready handler; only stop() may be", method));
      profiler.control_mutex_.lock();
      profiler.controller_.store(std::this_thread::get_id(), std::memory_order_release);
    }
    ~ControlLock() {
      profiler_.controller_.store(std::thread::id(), std::memory_order_release);
      profiler_.control_mutex_.unlock();
    }
    ControlLock(const ControlLock&) = delete;
    ControlLock& operator=(const ControlLock&) = delete;

   private:
    BasicProfiler& profiler_;
  };

  bool inherited() const noexcept { return generation_ != detail::fork_generation(); }

  /// `save`: whether a window still recording is saved (handlers run) or dropped.
  void stop_locked(bool save = true) {
    if (started_ && requests_) warn_of_refused_signals(/*flush=*/true);
    if (started_ && mode_ == Mode::FlightRecorder) {
      stop_flight_recorder();
    } else if (started_) {
      close_step();
      switch (action_) {
        case Action::None: break;
        case Action::Warmup: break;  // torch starts and stops an empty trace here: nothing to save
        case Action::Record:
        case Action::RecordAndSave:
          stop_trace();
          if (save) {
            trace_ready();
          } else {
            drained_ = {};
            thread_cpu_readings_ = {};
            device_activity_.reset();
          }
          break;
      }
      disable_collectors();
      timed_capture_end_ns_ = 0;
      if (mode_ == Mode::OnDemand) end_capture();
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

  void transit(Action previous, Action current) {
    run_action_map(previous, current);
    if (current == Action::None) disable_collectors();  // idle steps pay nothing for CUPTI or op observers
  }

  /// What torch.profiler's action map does on the step from `previous` to `current`: prepare,
  /// start, stop and save the trace, or discard a window a schedule left without saving.
  void run_action_map(Action previous, Action current) {
    const bool was_recording = previous == Action::Record || previous == Action::RecordAndSave;
    const bool recording = current == Action::Record || current == Action::RecordAndSave;
    if (previous == Action::RecordAndSave) {
      stop_trace();
      trace_ready();
      if (current != Action::None) prepare_trace();
      if (recording) start_trace();
      return;
    }
    if (was_recording && !recording) {  // Record -> None/Warmup: torch discards the window
      warn_incorrect_schedule(previous, current);
      stop_trace();
      thread_cpu_readings_ = {};
      device_activity_.reset();
      return;
    }
    if (previous == Action::Warmup && current == Action::None) {
      warn_incorrect_schedule(previous, current);
      return;
    }
    if (previous == Action::None && current != Action::None) prepare_trace();
    if (!was_recording && recording) start_trace();
  }

  /// Arms collection ahead of recording: rings get the configured capacity, and the calling
  /// thread's ring is allocated and pre-faulted now rather than inside the first recorded step.
  /// GPU collection is switched on here too, during warm-up when the schedule has one, so that
  /// CUPTI's start-up cost falls outside the recorded steps.
  void prepare_trace() {
    detail::RingRegistry::instance().set_capacity(options_.events_per_thread());
    detail::InternTable::instance().set_limit_bytes(options_.name_table_bytes());
    if (detail::t_ring == nullptr || detail::t_ring->retired()) {
      try {
        detail::attach_thread_ring();
      } catch (const std::bad_alloc&) {  // each event of this thread tries again, and is counted as dropped if it fails
        detail::print_warning(fmt::format("cannot allocate a ring of {} events for this thread: its events are dropped and counted",
                                 options_.events_per_thread()));
      }
    }
    find_collectors();
    if (op_observer_ != nullptr && !op_observer_enabled_ && options_.wants(Activity::CPU)) {
      op_observer_->enable(
          detail::OpObserverOptions{options_.record_shapes(), options_.with_flops(), options_.profile_memory()});
      op_observer_enabled_ = true;
    }
    if (gpu_backend_ != nullptr && !gpu_enabled_ && options_.wants(Activity::CUDA)) {
      gpu_enabled_ = gpu_backend_->enable(
          // A framework's allocator reports its own allocations (a caching allocator's tensors rather
          // than its cudaMalloc blocks): CUPTI's memory records would count them twice.
          detail::GpuCollectionOptions{options_.profile_memory() && op_observer_ == nullptr,
                                       options_.gpu_records_per_window(), mode_ == Mode::FlightRecorder,
                                       options_.device_counter_period()});
      if (!gpu_enabled_) {  // unavailable: warned once, CPU only from now on
        gpu_backend_ = nullptr;
        gpu_unavailable_ = true;
      }
    }
  }

  /// The op observer and the GPU backend the options ask for, where the program links them.
  void find_collectors() {
    if (op_observer_ == nullptr && options_.wants(Activity::CPU))
      if (const detail::OpObserverAccessor observer = detail::g_op_observer.load(std::memory_order_acquire))
        op_observer_ = &observer();
    if (gpu_backend_ == nullptr && !gpu_unavailable_ && options_.wants(Activity::CUDA)) {
      if (const detail::GpuBackendAccessor backend = detail::g_gpu_backend.load(std::memory_order_acquire)) {
        gpu_backend_ = &backend();
      } else {
        gpu_unavailable_ = true;
        static std::once_flag warned;  // once per process, however many profilers ask
        std::call_once(warned, [] {
          detail::print_warning("Activity::CUDA requested, but this program does not link dlprof::cupti: recording CPU only");
        });
      }
    }
  }

  void start_trace() {
    std::uint32_t flags = detail::kRecording;
    if (gpu_enabled_) {
      gpu_backend_->begin_window();
      flags |= detail::kCorrelating;
    }
    overflowed_names_before_window_ = detail::InternTable::instance().overflowed();
    window_start_ = detail::sample_clocks();
    sample_thread_cpu();
    detail::install_recording_slow_path();  // before kRecording: Profilers constructed while the program starts
    detail::g_active.fetch_or(flags, std::memory_order_relaxed);
  }

  /// Reads the recording threads' CPU time and run-queue wait (detail/backends/thread_cpu_sampler.hpp).
  void sample_thread_cpu() {
    if (!options_.thread_cpu() || !options_.wants(Activity::CPU)) return;
    last_thread_cpu_tick_ = detail::now_ticks();
    thread_cpu_.sample(last_thread_cpu_tick_);
  }

  /// A step begins: read again unless the last reading (the step before's end, the window's start)
  /// was just taken. The analysis reads each step's edges off the readings around them, which is
  /// exact only when nothing ran between the reading and the edge: a thread preempted there, or a
  /// window handed over there, would have its CPU time spread over the gap.
  void sample_thread_cpu_at_step_start() {
    const std::int64_t now = detail::now_ticks();
    if (static_cast<double>(now - last_thread_cpu_tick_) * detail::process_ns_per_tick() > kFreshReadingNs)
      sample_thread_cpu();
  }

  void stop_trace() {
    detail::g_active.fetch_and(~(detail::kRecording | detail::kCorrelating), std::memory_order_relaxed);
    const detail::ClockSample window_end = detail::sample_clocks();
    drained_ = detail::drain_rings(window_start_.ticks, window_end.ticks);
    if (!step_end_sampled_) sample_thread_cpu();  // a window without steps, or ended inside one
    thread_cpu_readings_ = thread_cpu_.take(window_start_.ticks, /*keep_last_round=*/false);
    window_end_ = window_end;
    overflowed_names_in_window_ = detail::InternTable::instance().overflowed() - overflowed_names_before_window_;
    if (gpu_enabled_) device_activity_ = gpu_backend_->end_window();
  }

  void disable_collectors() {
    if (op_observer_enabled_) {
      op_observer_->disable();
      op_observer_enabled_ = false;
    }
    if (gpu_enabled_) {
      gpu_backend_->disable();
      gpu_enabled_ = false;
    }
  }

  /// The window just closed becomes a Trace for last_trace() and the handlers. Built on the
  /// writer thread unless a handler must run on this one, so that prof.step() only drains the
  /// rings: building costs as much again per recorded op.
  void trace_ready() { hand_over(close_window(), /*handlers_here=*/false); }

  std::shared_ptr<detail::ClosedWindow> close_window() {
    auto window = std::make_shared<detail::ClosedWindow>();
    window->drained = std::move(drained_);
    drained_ = {};
    window->thread_cpu = std::move(thread_cpu_readings_);
    thread_cpu_readings_ = {};
    window->device_activity = std::move(device_activity_);
    device_activity_.reset();
    window->clock = detail::ClockMap::through(window_start_, window_end_, detail::process_ns_per_tick());
    window->start_ns = window_start_.realtime_ns;
    window->end_ns = window_end_.realtime_ns;
    window->overflowed_names = overflowed_names_in_window_;
    window->clock_source = detail::g_use_tsc.load(std::memory_order_relaxed) ? "tsc" : "clock_monotonic";
    record_options_in(*window);
    return window;
  }

  void record_options_in(detail::ClosedWindow& window) const {
    window.record_shapes = options_.record_shapes();
    window.profile_memory = options_.profile_memory();
    window.with_flops = options_.with_flops();
  }

  /// The window's trace goes to last_trace() and the handlers (detail/window/publisher.hpp).
  void hand_over(std::shared_ptr<detail::ClosedWindow> window, bool handlers_here) {
    publisher_->publish(std::move(window), handlers_here);
  }

  std::shared_ptr<const Trace> build(detail::ClosedWindow&& window) const {
    auto trace = std::make_shared<Trace>(detail::assemble_trace(std::move(window.drained), window.clock, window.start_ns,
                                                                window.end_ns, detail::InternedNames()));
    if (window.with_flops) detail::estimate_op_costs(*trace);
    const auto pushed_to_trace = detail::assign_external_ids(*trace);
    if (window.device_activity)
      detail::merge_device_activity(*trace, std::move(*window.device_activity), window.clock, pushed_to_trace);
    detail::add_thread_cpu(*trace, std::move(window.thread_cpu), window.clock);
    trace->pid = static_cast<std::int64_t>(::getpid());
    trace->process_name = detail::process_name();
    trace->clock_source = std::move(window.clock_source);
    trace->overflowed_names = window.overflowed_names;
    trace->distributed = distributed_info_of_this_process();
    if (!options_.distributed_backend().empty()) trace->distributed.backend = options_.distributed_backend();
    if (window.record_shapes) trace->metadata.emplace_back("record_shapes", "1");
    if (window.profile_memory) trace->metadata.emplace_back("profile_memory", "1");
    if (window.with_flops) trace->metadata.emplace_back("with_flops", "1");
    trace->flight_recorder_dump = std::move(window.flight_reason);
    return trace;
  }

  // The flight recorder (Mode::FlightRecorder).

  /// Records from now on into the flight log, and arms the dumps of a crash.
  void start_flight_recorder() {
    // From now on each thread that attaches a ring gets an alternate signal stack, and so does
    // this one, whose ring may be attached already: the crash handler must run on an overflowed
    // stack too.
    detail::g_threads_need_signal_stacks.store(true, std::memory_order_relaxed);
    prepare_trace();
    detail::give_this_thread_a_signal_stack();
    start_trace();
    flight_origin_ = window_start_;
    const std::size_t capacity =
        std::min(options_.flight_steps() * options_.events_per_thread(), ProfilerOptions::kMaxEventsPerThread);
    crash_target_.reset();  // a restart: its log goes, and a crash meanwhile finds no target
    flight_log_ = std::make_unique<detail::FlightLog>(capacity, options_.flight_steps(), window_start_.ticks);
    arm_crash_dumps();
    open_step();
  }

  void stop_flight_recorder() {
    close_step();
    detail::g_crash_target.store(nullptr, std::memory_order_release);
    detail::g_active.fetch_and(~(detail::kRecording | detail::kCorrelating), std::memory_order_relaxed);
    detail::drain_rings(INT64_MIN, INT64_MAX);  // nothing asked for these: the steps after the last dump are dropped
    thread_cpu_.clear();
    if (gpu_enabled_) gpu_backend_->end_window();
    disable_collectors();
    started_ = false;
    detail::g_started_profiler.store(nullptr);
    publisher_->wait_idle();
  }

  /// Prepares what a fatal signal's handler writes, which may then only fill in the moment.
  void arm_crash_dumps() {
    auto target = std::make_unique<detail::CrashTarget>();
    target->log = flight_log_.get();
    target->generation = generation_;
    detail::CrashHeader& header = target->header;
    std::memcpy(header.magic, detail::kCrashMagic, sizeof(header.magic));
    header.version = detail::kCrashFileVersion;
    header.header_bytes = sizeof(detail::CrashHeader);
    header.clock_is_tsc = detail::g_use_tsc.load(std::memory_order_relaxed) ? 1 : 0;
    header.pid = static_cast<std::int64_t>(::getpid());
    header.step_os_tid = detail::current_os_tid();
    header.origin = flight_origin_;
    header.ns_per_tick = detail::process_ns_per_tick();
    const DistributedInfo distributed = distributed_info_from_environment();
    header.rank = distributed.rank;
    header.world_size = distributed.world_size;
    const std::string process = detail::process_name();
    std::memcpy(header.process_name, process.data(), std::min(process.size(), sizeof(header.process_name) - 1));
    target->step.store(step_num_, std::memory_order_relaxed);
    target->dump = &BasicProfiler::dump_on_terminate;
    target->profiler = this;
    if (const std::optional<TraceDirectory> crash_files = options_.crash_file_directory()) {
      const std::string prefix = fmt::format("{}/{}.", crash_files->directory, crash_files->worker);
      if (const int error = detail::make_directories(crash_files->directory); error != 0)
        detail::print_warning_once(fmt::format("flight recorder: cannot create the trace directory '{}' ({}): a crash "
                                               "will leave no file",
                                               detail::terminal_text(crash_files->directory), detail::errno_text(error)));
      else if (prefix.size() + 48 > sizeof(target->path_prefix))
        detail::print_warning_once(fmt::format("flight recorder: the trace directory's path is longer than {} bytes: a "
                                               "crash will leave no file",
                                               sizeof(target->path_prefix) - 48));
      else
        std::memcpy(target->path_prefix, prefix.data(), prefix.size());
    }
    detail::install_fatal_signal_handlers();
    detail::install_terminate_handler();
    crash_target_ = std::move(target);
    detail::g_crash_target.store(crash_target_.get(), std::memory_order_release);
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
  /// slow or one was asked for.
  void flight_step() {
    close_step();
    flight_log_->append_step(step_num_, detail::now_ticks());
    if (gpu_enabled_) gpu_backend_->discard_before(flight_log_->window_start_tick());
    thread_cpu_.discard_before(flight_log_->window_start_tick());
    std::string reason = slow_steps_
                             .step_ended(step_num_, last_step_ticks_, detail::process_ns_per_tick(),
                                         detail::clock_ns(CLOCK_MONOTONIC), std::exchange(dumped_in_step_, false))
                             .value_or("");
    const std::int64_t now = detail::clock_ns(CLOCK_MONOTONIC);
    if (requests_->take_signal(now) && reason.empty()) reason = "the dump signal";
    warn_of_refused_signals(/*flush=*/false);
    if (requests_->take_trigger_file(now) && reason.empty()) reason = "the trigger file";
    ++step_num_;
    crash_target_->step.store(step_num_, std::memory_order_relaxed);
    if (!reason.empty()) flight_dump(reason, /*handlers_here=*/false);
    open_step();
  }

  /// The watcher's look at a flight recorder's step in progress: one that has run longer than
  /// slow_step_factor times the median of the steps before it, and half a second more, is dumped
  /// while it runs, once, with what every thread is inside (detail/control/watchdog.hpp). It
  /// shares the slow steps' limit of one dump a minute: a hang found sooner after one is dumped
  /// once that minute has passed, if the step still runs.
  void dump_if_hung() {
    if (!step_recorded_) return;
    const std::int64_t now_tick = detail::now_ticks();
    const double ns_per_tick = detail::process_ns_per_tick();
    const std::int64_t running = now_tick - step_start_ticks_;
    if (!slow_steps_.step_running(running, ns_per_tick, detail::clock_ns(CLOCK_MONOTONIC))) return;
    flight_dump(detail::hang_reason(step_num_, running, *slow_steps_.median_ticks(), ns_per_tick,
                                    crash_target_->header.step_os_tid, detail::threads_inside_now(), now_tick),
                /*handlers_here=*/false);
  }

  /// Writes the kept steps, and the current step so far, as one trace; the log starts over.
  void flight_dump(std::string reason, bool handlers_here) {
    const detail::ClockSample now = detail::sample_clocks();
    const std::int64_t from = flight_log_->window_start_tick();
    detail::DrainedEvents partial = detail::drain_rings(from, now.ticks);
    if (step_recorded_) sample_thread_cpu();  // the step in progress, so far; the next dump's first reading
    detail::DrainedEvents kept = flight_log_->take(now.ticks);
    kept.dropped += partial.dropped;
    kept.clipped_open += partial.clipped_open;
    kept.end_tick = partial.end_tick;
    for (detail::DrainedEvents::Thread& thread : partial.threads) {
      const auto same = std::find_if(kept.threads.begin(), kept.threads.end(), [&](const detail::DrainedEvents::Thread& t) {
        return t.os_tid == thread.os_tid && t.ordinal == thread.ordinal;
      });
      if (same == kept.threads.end())
        kept.threads.push_back(std::move(thread));
      else
        same->events.insert(same->events.end(), thread.events.begin(), thread.events.end());
    }
    if (step_recorded_) {  // the step in progress, so far
      const std::int64_t stepping_tid = crash_target_->header.step_os_tid;
      auto stepping = std::find_if(kept.threads.begin(), kept.threads.end(),
                                   [&](const detail::DrainedEvents::Thread& t) { return t.os_tid == stepping_tid; });
      if (stepping == kept.threads.end()) {
        kept.threads.push_back({stepping_tid, detail::thread_ordinal(), {}, {}});
        stepping = kept.threads.end() - 1;
      }
      stepping->events.push_back(detail::Event{static_cast<detail::NameId>(step_num_), step_start_ticks_, {now.ticks},
                                               detail::RecordKind::Step, Category::Step, 0});
      ++kept.clipped_open;
    }
    auto window = std::make_shared<detail::ClosedWindow>();
    window->drained = std::move(kept);
    window->thread_cpu = thread_cpu_.take(from, /*keep_last_round=*/true);
    if (gpu_enabled_) {
      window->device_activity = gpu_backend_->end_window();
      gpu_backend_->begin_window();
    }
    window->clock = detail::ClockMap::through(flight_origin_, now, detail::process_ns_per_tick());
    window->start_ns = window->clock.to_realtime_ns(from);
    window->end_ns = now.realtime_ns;
    const std::uint64_t overflowed = detail::InternTable::instance().overflowed();
    window->overflowed_names = overflowed - overflowed_names_before_window_;
    overflowed_names_before_window_ = overflowed;
    window->clock_source = detail::g_use_tsc.load(std::memory_order_relaxed) ? "tsc" : "clock_monotonic";
    window->flight_reason = std::move(reason);
    record_options_in(*window);
    ++dumps_;
    dumped_in_step_ = true;
    hand_over(std::move(window), handlers_here);
  }

  /// What step `step` does: the schedule's action, or on demand the current capture's.
  Action planned_action(std::int64_t step) const noexcept {
    if (mode_ != Mode::OnDemand) return options_.schedule()(step);
    if (timed_capture_end_ns_ != 0) return Action::Record;
    return capture_ ? (*capture_)(step) : Action::None;
  }

  /// A request from code: `amount` steps, or -amount ns. False when one is pending or running.
  bool ask_for_capture(std::int64_t amount) {
    if (mode_ != Mode::OnDemand || capturing_.load(std::memory_order_acquire) || !requests_->ask(amount)) return false;
    watcher_wake_.notify_all();
    return true;
  }

  /// Whether a capture is under way: a timed one, or the steps of one not yet past.
  bool capture_running() const noexcept {
    return timed_capture_end_ns_ != 0 || (capture_.has_value() && step_num_ <= capture_last_step_);
  }

  /// In a Profiler's own thread, every 200 ms: on demand, ends a timed capture that is due and,
  /// when no step() has come for a second (a program without steps), takes the requests step()
  /// would; in a flight recorder, dumps a step that hangs. Only tries the control lock, so that
  /// start(), step() and stop() never wait for it.
  void watch() {
    std::unique_lock<std::mutex> lock(watcher_mutex_);
    while (!watcher_stopping_) {
      watcher_wake_.wait_for(lock, std::chrono::milliseconds(200));
      if (watcher_stopping_) return;
      lock.unlock();
      if (control_mutex_.try_lock()) {
        const std::lock_guard<std::mutex> control(control_mutex_, std::adopt_lock);
        if (started_) {
          controller_.store(std::this_thread::get_id(), std::memory_order_release);
          if (mode_ == Mode::FlightRecorder) {
            dump_if_hung();
          } else {
            const std::int64_t now = detail::clock_ns(CLOCK_MONOTONIC);
            if (timed_capture_end_ns_ != 0 && now >= timed_capture_end_ns_) end_timed_capture();
            if (now - last_step_call_ns_ >= kNoStepsNs) take_capture_requests(/*stepping=*/false);
            if (!capture_running()) end_capture();
          }
          controller_.store(std::thread::id(), std::memory_order_release);
          if (stop_requested_.load(std::memory_order_acquire)) stop_locked();
        }
      }
      lock.lock();
    }
  }

  /// On demand: takes the requests made since the last look (prof.capture(), prof.capture_for(),
  /// the signal, the trigger file) and begins the first, unless a capture is running. From step()
  /// (`stepping`), a capture of steps begins at the next step; from the watcher, in a program
  /// without steps, every capture is timed.
  void take_capture_requests(bool stepping) {
    for (detail::CaptureRequest& request : requests_->take_all(detail::clock_ns(CLOCK_MONOTONIC), "capture")) {
      if (capture_running()) {
        detail::print_warning(timed_capture_end_ns_ != 0
                                  ? fmt::format("capture asked by {} refused: a timed capture is still running", request.source)
                                  : fmt::format("capture asked by {} refused: the capture of steps {} to {} is still running",
                                                request.source, capture_last_step_ - capture_steps_ + 1, capture_last_step_));
        continue;
      }
      if (!stepping && request.duration_ns == 0) request.duration_ns = detail::kDefaultCaptureNs;
      begin_capture(request);
    }
  }

  /// Applies the request's options for the capture, and begins it: a timed capture now, a capture
  /// of steps at the next step (which warms up; the `steps` after it are recorded).
  void begin_capture(const detail::CaptureRequest& request) {
    options_before_capture_ = CaptureOptions{options_.record_shapes(), options_.profile_memory(), options_.with_flops(),
                                             options_.activities()};
    if (request.record_shapes) options_.record_shapes(*request.record_shapes);
    if (request.profile_memory) options_.profile_memory(*request.profile_memory);
    if (request.with_flops) options_.with_flops(*request.with_flops);
    if (request.activities) options_.activities(*request.activities);
    capturing_.store(true, std::memory_order_release);
    if (request.duration_ns != 0) {
      capture_.reset();
      prepare_trace();
      start_trace();
      action_ = Action::Record;
      timed_capture_end_ns_ = detail::clock_ns(CLOCK_MONOTONIC) + request.duration_ns;
      return;
    }
    capture_ = schedule(0, 1, request.steps, 1, step_num_ + 1);
    capture_steps_ = request.steps;
    capture_last_step_ = step_num_ + 1 + request.steps;
  }

  /// A timed capture is due: its trace is handed over, and recording stops.
  void end_timed_capture() {
    timed_capture_end_ns_ = 0;
    stop_trace();
    trace_ready();
    disable_collectors();
    action_ = Action::None;
  }

  /// After a capture: the Profiler's own options again, and requests are taken again.
  void end_capture() {
    if (options_before_capture_) {
      const CaptureOptions& before = *options_before_capture_;
      options_.record_shapes(before.record_shapes).profile_memory(before.profile_memory).with_flops(before.with_flops);
      options_.activities(before.activities);
      options_before_capture_.reset();
    }
    capturing_.store(false, std::memory_order_release);
  }

  void warn_of_refused_signals(bool flush) {
    requests_->warn_of_refused_signals(detail::clock_ns(CLOCK_MONOTONIC), flush,
                                       mode_ == Mode::OnDemand ? "capture" : "dump");
  }

  void open_step() {
    // No schedule: no ProfilerStep events, like torch. On demand, captures have them.
    if (mode_ == Mode::Scheduled && !options_.schedule().has_cycles()) return;
    const std::uint32_t flags = detail::active_flags();
    step_nvtx_pushed_ = (flags & detail::kNvtxAttached) != 0;
    if (step_nvtx_pushed_) detail::nvtx_push(detail::profiler_step_name(step_num_), Category::Step);
    step_recorded_ = (flags & detail::kRecording) != 0;
    step_correlation_sequence_ =
        step_recorded_ && (flags & detail::kCorrelating) != 0 ? detail::push_external_correlation() : 0;
    step_end_sampled_ = false;
    if (step_recorded_) sample_thread_cpu_at_step_start();
    step_start_ticks_ = detail::now_ticks();
    if (crash_target_ != nullptr) crash_target_->step_start_tick.store(step_recorded_ ? step_start_ticks_ : INT64_MIN);
  }

  void close_step() {
    if (step_nvtx_pushed_) {
      step_nvtx_pushed_ = false;
      detail::nvtx_pop();
    }
    if (!step_recorded_) return;
    step_recorded_ = false;
    const std::int64_t end = detail::now_ticks();
    last_step_ticks_ = end - step_start_ticks_;
    detail::push_event(detail::Event{static_cast<detail::NameId>(step_num_), step_start_ticks_, {end},
                                     detail::RecordKind::Step, Category::Step, step_correlation_sequence_});
    if (step_correlation_sequence_ != 0) detail::pop_external_correlation();
    step_correlation_sequence_ = 0;
    sample_thread_cpu();
    step_end_sampled_ = true;
  }

  void warn_incorrect_schedule(Action previous, Action current) {
    detail::print_warning(fmt::format("Incorrect schedule: {} followed by {} at step {}; the recorded steps are discarded",
                             to_string(previous), to_string(current), step_num_));
  }

  /// A reading of the threads' CPU time this recent stands for the moment a step begins.
  static constexpr double kFreshReadingNs = 20'000;

  /// On demand: a program that has not called step() for this long is served by the watcher.
  static constexpr std::int64_t kNoStepsNs = 1'000'000'000;

  ProfilerOptions options_;
  Mode mode_ = Mode::Scheduled;
  std::unique_ptr<detail::FlightLog> flight_log_;      // the flight recorder's steps
  std::unique_ptr<detail::CrashTarget> crash_target_;  // what a fatal signal writes
  detail::ClockSample flight_origin_{};
  std::int64_t last_step_ticks_ = 0;  // the duration of the step that ended last
  detail::SlowStepPolicy slow_steps_{0};  // the flight recorder's rules, with options_'s factor
  std::uint64_t dumps_ = 0;
  bool dumped_in_step_ = false;  // a dump ran in the step in progress
  std::optional<detail::CaptureRequests> requests_;  // on demand and flight recorder: what asks for a capture or dump
  std::optional<Schedule> capture_;       // on demand: the current or last capture's steps
  std::int64_t capture_steps_ = 0;        // its recorded steps
  std::int64_t capture_last_step_ = -1;   // its last recorded step
  std::int64_t timed_capture_end_ns_ = 0;  // a timed capture: when it ends (CLOCK_MONOTONIC); 0: none
  struct CaptureOptions {
    bool record_shapes, profile_memory, with_flops;
    std::vector<Activity> activities;
  };
  std::optional<CaptureOptions> options_before_capture_;  // the Profiler's own, while a capture changes them
  std::atomic<bool> capturing_{false};    // a capture is asked for or running
  std::int64_t last_step_call_ns_ = 0;     // CLOCK_MONOTONIC of the last step() (or start())
  std::unique_ptr<std::thread> watcher_;   // on demand: ends timed captures, serves programs without steps
  std::mutex watcher_mutex_;
  std::condition_variable watcher_wake_;
  bool watcher_stopping_ = false;
  const std::uint32_t generation_;  // the fork generation this Profiler was made in
  std::mutex control_mutex_;
  std::atomic<std::thread::id> controller_{};  // the thread inside start(), step() or stop(), if any
  std::atomic<bool> stop_requested_{false};    // stop() from a handler, done when its caller returns
  bool started_ = false;
  std::int64_t step_num_ = 0;
  Action action_ = Action::None;
  bool step_recorded_ = false;
  bool step_nvtx_pushed_ = false;  // ProfilerStep#N is an NVTX range too, whether recorded or not
  std::int64_t step_start_ticks_ = 0;
  std::uint32_t step_correlation_sequence_ = 0;
  detail::GpuBackend* gpu_backend_ = nullptr;  // set when CUDA activity is asked for and a backend is linked
  bool gpu_enabled_ = false;
  bool gpu_unavailable_ = false;  // asked for, and not linked or failed to start: CPU only from then on
  detail::OpObserver* op_observer_ = nullptr;  // set when CPU activity is asked for and an observer is linked
  bool op_observer_enabled_ = false;
  std::optional<detail::DeviceActivity> device_activity_;
  detail::ClockSample window_start_{};
  detail::ClockSample window_end_{};
  std::uint64_t overflowed_names_before_window_ = 0;
  std::uint64_t overflowed_names_in_window_ = 0;  // new names the window recorded under kOverflowName
  detail::DrainedEvents drained_;
  detail::ThreadCpuSampler thread_cpu_;  // the recording threads' CPU time, read at each step's end
  detail::ThreadCpuReadings thread_cpu_readings_;  // those of the window stop_trace() closed
  bool step_end_sampled_ = false;  // the step that just closed read them: the window's end need not
  std::int64_t last_thread_cpu_tick_ = 0;  // when they were last read, in ticks (0: never)
  // Last: its writer thread, which builds traces and runs handlers with the members above, ends
  // before they do.
  std::optional<detail::TracePublisher<>> publisher_;
};

using Profiler = BasicProfiler<>;

/// Starts a Profiler on construction and stops it on destruction. A flight recorder left by an
/// exception dumps its steps first.
template <class Deferred = void>
class BasicProfilingScope {
 public:
  explicit BasicProfilingScope(BasicProfiler<Deferred>& profiler)
      : profiler_(profiler), uncaught_exceptions_(std::uncaught_exceptions()) {
    profiler_.start();
  }
  ~BasicProfilingScope() {
    try {
      if (std::uncaught_exceptions() > uncaught_exceptions_) profiler_.dump("an exception left the ProfilingScope");
      profiler_.stop();
    } catch (...) {  // stop() reports handler failures itself; a destructor must not throw
    }
  }
  BasicProfilingScope(const BasicProfilingScope&) = delete;
  BasicProfilingScope& operator=(const BasicProfilingScope&) = delete;

 private:
  BasicProfiler<Deferred>& profiler_;
  int uncaught_exceptions_;
};

using ProfilingScope = BasicProfilingScope<>;

DLPROF_END_NAMESPACE

#if defined(DLPROF_HAS_CUPTI) && DLPROF_HAS_CUPTI
#  include "dlprof/cupti.hpp"
#endif
#if defined(DLPROF_HAS_TORCH) && DLPROF_HAS_TORCH
#  include "dlprof/torch.hpp"
#endif
