// dlprof/profiler.hpp: the include of the file that owns the training loop. Ranges (range.hpp), schedules (schedule.hpp), traces
// (trace.hpp), the summary table (key_averages.hpp) and the Profiler that ties them together.
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
#include "dlprof/detail/control/capture_signal.hpp"
#include "dlprof/detail/control/watchdog.hpp"
#include "dlprof/detail/window/assemble.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/detail/window/crash_file.hpp"
#include "dlprof/detail/window/flight_log.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/window/gpu_merge.hpp"
#include "dlprof/detail/window/lifecycle.hpp"
#include "dlprof/detail/backends/op_observer.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/distributed.hpp"
#include "dlprof/export/chrome_trace.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
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

/// Something to do with each finished trace. Any callable converts to a handler that runs on the
/// thread calling step()/stop(); a handler marked `background` (tensorboard_trace_handler is)
/// runs on the Profiler's writer thread instead, so writing files stays off the training thread.
struct TraceHandler {
  std::function<void(const Trace&)> callback;
  bool background = false;
  /// The directory it writes traces to, and the worker name of its files, when it is a
  /// directory handler: the flight recorder writes its crash file there.
  std::string directory;
  std::string worker;

  TraceHandler() = default;
  template <class Callable, class = std::enable_if_t<std::is_invocable_v<Callable&, const Trace&> &&
                                                     !std::is_same_v<std::decay_t<Callable>, TraceHandler>>>
  TraceHandler(Callable&& callable, bool run_in_background = false)  // NOLINT: implicit by design
      : callback(std::forward<Callable>(callable)), background(run_in_background) {}
};

/// Options of a Profiler, set with chained calls:
///   dlprof::ProfilerOptions{}.schedule(dlprof::schedule(1, 1, 3)).on_trace_ready(handler)
class ProfilerOptions {
 public:
  /// 2^28 events: 8 GiB per thread, far beyond any useful window.
  static constexpr std::size_t kMaxEventsPerThread = std::size_t{1} << 28;
  static constexpr std::size_t kMinNameTableBytes = 4096;
  static constexpr std::size_t kMaxFlightSteps = 10'000;
  static constexpr std::size_t kDefaultFlightSteps = 5;
  static constexpr double kDefaultSlowStepFactor = 3.0;

  ProfilerOptions& activities(std::initializer_list<Activity> kinds) {
    activities_.assign(kinds.begin(), kinds.end());
    return *this;
  }
  /// The same, chosen at run time (e.g. CUDA only when a device is present).
  ProfilerOptions& activities(std::vector<Activity> kinds) {
    activities_ = std::move(kinds);
    return *this;
  }
  ProfilerOptions& schedule(Schedule value) {
    schedule_ = value;
    return *this;
  }
  /// Adds a handler; several may be set and run in the order given.
  ProfilerOptions& on_trace_ready(TraceHandler handler) {
    if (!handler.callback) throw std::invalid_argument("dlprof::ProfilerOptions::on_trace_ready: empty handler");
    handlers_.push_back(std::move(handler));
    return *this;
  }
  /// Capacity of each thread's ring, in events (32 bytes each), rounded up to a power of two.
  /// When a ring is full, further events of the window are dropped and counted.
  ProfilerOptions& events_per_thread(std::size_t count) {
    if (count < 2 || count > kMaxEventsPerThread)
      throw std::invalid_argument(fmt::format("dlprof::ProfilerOptions::events_per_thread must be in [2, {}], got {}",
                                              kMaxEventsPerThread, count));
    events_per_thread_ = count;
    return *this;
  }
  /// Heap memory the process's table of run-time names may take (DLPROF_RANGE_F and
  /// ScopedRange(std::string_view) names, marks, counters, op and module names), shared by every
  /// Profiler. Names are kept for the life of the process; a new name past the limit is recorded
  /// as "<dlprof: name table full>" and counted in its window's trace (dlprof_overflowed_names)
  /// and report. Literal names (DLPROF_RANGE) never enter the table.
  ProfilerOptions& name_table_bytes(std::size_t bytes) {
    if (bytes < kMinNameTableBytes || bytes > detail::kMaxNameTableBytes)
      throw std::invalid_argument(fmt::format("dlprof::ProfilerOptions::name_table_bytes must be in [{}, {}], got {}",
                                              kMinNameTableBytes, detail::kMaxNameTableBytes, bytes));
    name_table_bytes_ = bytes;
    return *this;
  }
  /// With Activity::CUDA: GPU records (kernels, copies, API calls, ...) one window may hold,
  /// about 150 bytes each, allocated as they arrive. Further records are dropped and counted.
  ProfilerOptions& gpu_records_per_window(std::size_t count) {
    if (count < 1 || count > kMaxEventsPerThread)
      throw std::invalid_argument(fmt::format("dlprof::ProfilerOptions::gpu_records_per_window must be in [1, {}], got {}",
                                              kMaxEventsPerThread, count));
    gpu_records_per_window_ = count;
    return *this;
  }
  /// With Activity::CUDA, where the driver's NVML is present: how often each GPU's SM and memory
  /// clocks, power and clock limits are read while a window records (20 ms by default; zero
  /// never). They are written as counter tracks on the GPU's row.
  ProfilerOptions& device_counter_period(std::chrono::milliseconds period) {
    if (period.count() < 0 || period > std::chrono::hours(1))
      throw std::invalid_argument(fmt::format(
          "dlprof::ProfilerOptions::device_counter_period must be in [0 ms, 1 h], got {} ms", period.count()));
    device_counter_period_ = period;
    return *this;
  }
  ProfilerOptions& record_shapes(bool on) {
    record_shapes_ = on;
    return *this;
  }
  ProfilerOptions& profile_memory(bool on) {
    profile_memory_ = on;
    return *this;
  }
  ProfilerOptions& with_flops(bool on) {
    with_flops_ = on;
    return *this;
  }
  /// When the Profiler records (settings.hpp); DLPROF_MODE overrides it.
  ProfilerOptions& mode(Mode value) {
    mode_ = value;
    return *this;
  }
  /// Mode::FlightRecorder: the last steps kept in memory, at most kMaxFlightSteps. The recorder's
  /// memory is fixed when it starts: besides the rings, a log of flight_steps × events_per_thread
  /// events (32 bytes each; 10 MiB by default), which keeps fewer steps when they hold more.
  ProfilerOptions& flight_steps(std::size_t steps) {
    if (steps < 1 || steps > kMaxFlightSteps)
      throw std::invalid_argument(
          fmt::format("dlprof::ProfilerOptions::flight_steps must be in [1, {}], got {}", kMaxFlightSteps, steps));
    flight_steps_ = steps;
    return *this;
  }
  /// Mode::FlightRecorder: a step longer than `factor` times the median of the recent steps is
  /// dumped with the steps before it (at most one such dump a minute); 0 turns this off.
  ProfilerOptions& slow_step_factor(double factor) {
    if (!(factor == 0 || (factor > 1 && factor <= 1e6)))
      throw std::invalid_argument(
          fmt::format("dlprof::ProfilerOptions::slow_step_factor must be 0 (off) or in (1, 1e6], got {}", factor));
    slow_step_factor_ = factor;
    return *this;
  }
  /// Backend written in distributedInfo (torch writes the process group's, e.g. "nccl").
  ProfilerOptions& distributed_backend(std::string backend) {
    distributed_backend_ = std::move(backend);
    return *this;
  }

  const std::vector<Activity>& activities() const noexcept { return activities_; }
  const Schedule& schedule() const noexcept { return schedule_; }
  const std::vector<TraceHandler>& handlers() const noexcept { return handlers_; }
  std::size_t events_per_thread() const noexcept { return events_per_thread_; }
  std::size_t gpu_records_per_window() const noexcept { return gpu_records_per_window_; }
  std::chrono::milliseconds device_counter_period() const noexcept { return device_counter_period_; }
  std::size_t name_table_bytes() const noexcept { return name_table_bytes_; }
  bool record_shapes() const noexcept { return record_shapes_; }
  bool profile_memory() const noexcept { return profile_memory_; }
  bool with_flops() const noexcept { return with_flops_; }
  const std::string& distributed_backend() const noexcept { return distributed_backend_; }
  Mode mode() const noexcept { return mode_; }
  std::size_t flight_steps() const noexcept { return flight_steps_; }
  double slow_step_factor() const noexcept { return slow_step_factor_; }
  bool wants(Activity kind) const noexcept {
    for (Activity a : activities_)
      if (a == kind) return true;
    return false;
  }

 private:
  std::vector<Activity> activities_{Activity::CPU};
  Schedule schedule_;
  std::vector<TraceHandler> handlers_;
  std::size_t events_per_thread_ = detail::kDefaultEventsPerThread;
  std::size_t gpu_records_per_window_ = detail::kDefaultGpuRecordsPerWindow;
  std::chrono::milliseconds device_counter_period_{20};
  std::size_t name_table_bytes_ = detail::kDefaultNameTableBytes;
  bool record_shapes_ = false;
  bool profile_memory_ = false;
  bool with_flops_ = false;
  std::string distributed_backend_;
  Mode mode_ = Mode::Scheduled;
  std::size_t flight_steps_ = kDefaultFlightSteps;
  double slow_step_factor_ = kDefaultSlowStepFactor;
};

namespace detail {

inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

inline std::string process_name() {
#if defined(__GLIBC__)
  return program_invocation_short_name;
#else
  return "process";
#endif
}

}  // namespace detail

/// torch.profiler.tensorboard_trace_handler: writes each trace to
/// `<dir>/<worker>.<unix_time_ns>.pt.trace.json[.gz]`, creating `dir` if needed, on the
/// Profiler's background writer. `worker` defaults to "<hostname>_<pid>". A failure (directory
/// not writable, disk full) is reported through Profiler::errors() and stderr; training goes on.
/// A template for the reason BasicProfiler is one: the writer compiles where a handler is made.
template <class Deferred = void>
TraceHandler tensorboard_trace_handler(std::string dir, std::string worker = "", bool gzip = false) {
  if (dir.empty()) throw std::invalid_argument("dlprof::tensorboard_trace_handler: dir is empty");
  if (worker.empty()) worker = fmt::format("{}_{}", detail::host_name(), static_cast<long>(::getpid()));
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

namespace detail {

/// How often step() looks for the trigger file, at most.
inline constexpr std::int64_t kTriggerFilePeriodNs = 200'000'000;

/// The options a Profiler runs with: the program's, with the settings of the environment and of
/// the DLPROF_CONFIG file over them (settings.hpp), and what was wrong with those settings.
struct LaunchedOptions {
  ProfilerOptions options;
  Mode mode = Mode::Scheduled;
  int capture_signal = kDefaultCaptureSignal;  ///< on demand: the signal that asks for a capture (0: none)
  std::string trigger_file;      ///< on demand: the file whose appearance asks for a capture
  std::vector<std::string> warnings;
};

template <class Deferred = void>
LaunchedOptions apply_settings(ProfilerOptions options, const Settings& settings) {
  const Mode program_mode = options.mode();
  LaunchedOptions launched{std::move(options), program_mode, kDefaultCaptureSignal, {}, settings.warnings};
  ProfilerOptions& set = launched.options;
  const auto refuse = [&launched](const Setting& setting, std::string_view problem, std::string_view kept) {
    launched.warnings.push_back(fmt::format("{}: {}; keeping {}", setting.described(), problem, kept));
  };
  if (const Setting* mode = settings.find("DLPROF_MODE")) {
    if (const std::optional<Mode> parsed = parse_mode(mode->value))
      launched.mode = *parsed;
    else
      refuse(*mode, "expected scheduled, off, on-demand or flight-recorder", "the program's mode");
  }
  set.mode(launched.mode);
  if (const Setting* signal = settings.find("DLPROF_SIGNAL")) {
    if (const std::optional<int> number = parse_signal_setting(signal->value))
      launched.capture_signal = *number;
    else
      refuse(*signal, "expected a signal that asks for nothing else, such as USR1, USR2 or a number, or none", "SIGUSR2");
  }
  if (const Setting* trigger = settings.find("DLPROF_TRIGGER_FILE")) launched.trigger_file = trigger->value;
  if (!takes_requests(launched.mode))
    for (const std::string_view name : {"DLPROF_SIGNAL", "DLPROF_TRIGGER_FILE"})
      if (const Setting* unused = settings.find(name))
        launched.warnings.push_back(unused->described() +
                                    ": asks for captures and dumps, which only DLPROF_MODE=on-demand and flight-recorder take");
  if (launched.mode != Mode::FlightRecorder)
    for (const std::string_view name : {"DLPROF_FLIGHT_STEPS", "DLPROF_SLOW_STEP_FACTOR"})
      if (const Setting* unused = settings.find(name))
        launched.warnings.push_back(unused->described() + ": sets the flight recorder, which only DLPROF_MODE=flight-recorder runs");
  if (const Setting* factor = settings.find("DLPROF_SLOW_STEP_FACTOR")) {
    const std::optional<double> value = parse_factor(factor->value);
    try {
      if (!value) throw std::invalid_argument("expected a number, such as 3 or 2.5, or 0 for off");
      set.slow_step_factor(*value);
    } catch (const std::invalid_argument& error) {
      refuse(*factor, error.what(), fmt::format("{}", set.slow_step_factor()));
    }
  }
  if (const Setting* schedule = settings.find("DLPROF_SCHEDULE")) {
    std::string problem;
    if (const std::optional<Schedule> parsed = parse_schedule(schedule->value, problem))
      set.schedule(*parsed);
    else
      refuse(*schedule, problem, "the program's schedule");
  }
  if (const Setting* activities = settings.find("DLPROF_ACTIVITIES")) {
    if (std::optional<std::vector<Activity>> kinds = parse_activities(activities->value))
      set.activities(std::move(*kinds));
    else
      refuse(*activities, "expected cpu, cuda or cpu,cuda", "the program's activities");
  }
  const auto flag = [&](std::string_view name, bool current, auto&& apply) {
    const Setting* setting = settings.find(name);
    if (setting == nullptr) return;
    if (const std::optional<bool> on = parse_flag(setting->value))
      apply(*on);
    else
      refuse(*setting, "expected 1 or 0 (true/false, yes/no, on/off)", current ? "on" : "off");
  };
  flag("DLPROF_RECORD_SHAPES", set.record_shapes(), [&](bool on) { set.record_shapes(on); });
  flag("DLPROF_PROFILE_MEMORY", set.profile_memory(), [&](bool on) { set.profile_memory(on); });
  flag("DLPROF_WITH_FLOPS", set.with_flops(), [&](bool on) { set.with_flops(on); });
  const auto count = [&](std::string_view name, std::size_t current, auto&& apply) {
    const Setting* setting = settings.find(name);
    if (setting == nullptr) return;
    const std::optional<std::int64_t> value = parse_count(setting->value);
    if (!value) {
      refuse(*setting, "expected a count", std::to_string(current));
      return;
    }
    try {
      apply(static_cast<std::size_t>(*value));
    } catch (const std::invalid_argument& error) {
      refuse(*setting, error.what(), std::to_string(current));
    }
  };
  count("DLPROF_EVENTS_PER_THREAD", set.events_per_thread(), [&](std::size_t n) { set.events_per_thread(n); });
  count("DLPROF_GPU_RECORDS", set.gpu_records_per_window(), [&](std::size_t n) { set.gpu_records_per_window(n); });
  count("DLPROF_FLIGHT_STEPS", set.flight_steps(), [&](std::size_t n) { set.flight_steps(n); });

  const Setting* output = settings.find("DLPROF_OUTPUT");
  const Setting* worker = settings.find("DLPROF_WORKER");
  const Setting* gzip = settings.find("DLPROF_GZIP");
  bool compressed = false;
  if (gzip != nullptr) {
    if (const std::optional<bool> on = parse_flag(gzip->value))
      compressed = *on;
    else
      refuse(*gzip, "expected 1 or 0 (true/false, yes/no, on/off)", "uncompressed traces");
  }
  if (output == nullptr) {
    for (const Setting* alone : {worker, gzip})
      if (alone != nullptr)
        launched.warnings.push_back(alone->described() + ": names how DLPROF_OUTPUT writes, and DLPROF_OUTPUT is not set");
  } else if (trimmed(output->value).empty()) {
    refuse(*output, "is empty", "no trace directory");
  } else if (!set.handlers().empty()) {
    launched.warnings.push_back(output->described() +
                                ": the program sets its own on_trace_ready handlers; no directory handler is added");
  } else {
    set.on_trace_ready(tensorboard_trace_handler(output->value, worker != nullptr ? worker->value : "", compressed));
  }
  return launched;
}

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

/// A closed window's events and what turning them into a Trace needs, taken on the training
/// thread so the trace can be built on another.
struct ClosedWindow {
  DrainedEvents drained;
  std::optional<DeviceActivity> device_activity;
  ClockMap clock;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t overflowed_names = 0;
  std::string clock_source;
  std::string flight_reason;  ///< a flight recorder's dump: why it was written
  bool record_shapes = false;  ///< the options it was recorded with
  bool profile_memory = false;
  bool with_flops = false;
};

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
    mode_ = launched.mode;
    if (detail::takes_requests(mode_)) {
      trigger_file_ = std::move(launched.trigger_file);
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
      static_cast<void>(writer_.release());
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
        (writer_ != nullptr && writer_->on_writer_thread())) {
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
  std::uint64_t slow_steps_not_dumped() const noexcept { return slow_steps_not_dumped_; }
  /// Capture or dump requests by signal this Profiler refused: signals that arrived together with
  /// the one taken (they ask once), and those within 10 s after it (one is taken per 10 s at most).
  std::uint64_t signals_refused() const noexcept { return signal_requests_.refused(); }

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
    std::unique_lock<std::mutex> lock(results_mutex_);
    if (writer_ == nullptr || !writer_->on_writer_thread())
      trace_published_.wait(lock, [this] { return traces_in_progress_ == 0; });
    return last_trace_;
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
    std::lock_guard<std::mutex> lock(results_mutex_);
    std::vector<std::string> all = errors_;
    if (errors_left_out_ != 0) all.push_back(fmt::format("{} more errors left out", errors_left_out_));
    return all;
  }

 private:
  /// Serialises start(), step() and stop() across threads, and refuses them from a handler that
  /// one of them is running on the same thread (which would otherwise deadlock or re-enter).
  class ControlLock {
   public:
    ControlLock(BasicProfiler& profiler, const char* method) : profiler_(profiler) {
      if (profiler.controller_.load(std::memory_order_acquire) == std::this_thread::get_id() ||
          (profiler.writer_ != nullptr && profiler.writer_->on_writer_thread()))
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
    if (started_ && detail::takes_requests(mode_)) warn_of_refused_signals(/*flush=*/true);
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
            device_activity_.reset();
          }
          break;
      }
      disable_collectors();
      timed_capture_end_ns_ = 0;
      if (mode_ == Mode::OnDemand) end_capture();
      started_ = false;
      detail::g_started_profiler.store(nullptr);
      if (writer_) writer_->wait_idle();
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
    detail::install_recording_slow_path();  // before kRecording: Profilers constructed while the program starts
    detail::g_active.fetch_or(flags, std::memory_order_relaxed);
  }

  void stop_trace() {
    detail::g_active.fetch_and(~(detail::kRecording | detail::kCorrelating), std::memory_order_relaxed);
    const detail::ClockSample window_end = detail::sample_clocks();
    drained_ = detail::drain_rings(window_start_.ticks, window_end.ticks);
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

  /// Builds the window's trace and hands it to the handlers: on the writer thread, unless a
  /// handler must run on this one or `handlers_here` asks for all of them here (std::terminate).
  void hand_over(std::shared_ptr<detail::ClosedWindow> window, bool handlers_here) {
    const auto& handlers = options_.handlers();
    const bool runs_here = handlers_here || std::any_of(handlers.begin(), handlers.end(), [](const TraceHandler& h) { return !h.background; });
    if (!runs_here) {
      {
        std::lock_guard<std::mutex> lock(results_mutex_);
        ++traces_in_progress_;
      }
      background_writer().submit([this, window] {
        std::shared_ptr<const Trace> finished;
        try {
          finished = build(std::move(*window));
        } catch (const std::exception& error) {
          record_error(fmt::format("building the trace failed: {}", error.what()), kBuildingTraces);
        } catch (...) {
          record_error("building the trace failed: unknown exception", kBuildingTraces);
        }
        publish(finished, /*was_in_progress=*/true);
        if (finished != nullptr)
          for (const TraceHandler& handler : options_.handlers()) run_handler(handler, *finished);
      });
      return;
    }
    const std::shared_ptr<const Trace> finished = build(std::move(*window));
    publish(finished, /*was_in_progress=*/false);
    for (const TraceHandler& handler : handlers) {
      if (handler.background && !handlers_here)
        background_writer().submit([this, finished, &handler] { run_handler(handler, *finished); });
      else
        run_handler(handler, *finished);
    }
  }

  std::shared_ptr<const Trace> build(detail::ClosedWindow&& window) const {
    auto trace = std::make_shared<Trace>(detail::assemble_trace(std::move(window.drained), window.clock, window.start_ns,
                                                                window.end_ns, detail::InternedNames()));
    if (window.with_flops) detail::estimate_op_costs(*trace);
    const auto pushed_to_trace = detail::assign_external_ids(*trace);
    if (window.device_activity)
      detail::merge_device_activity(*trace, std::move(*window.device_activity), window.clock, pushed_to_trace);
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

  /// Makes `trace` the last one (null: its build failed, the previous one stays).
  void publish(std::shared_ptr<const Trace> trace, bool was_in_progress) {
    {
      std::lock_guard<std::mutex> lock(results_mutex_);
      if (trace != nullptr) last_trace_ = std::move(trace);
      if (was_in_progress) --traces_in_progress_;
    }
    trace_published_.notify_all();
  }

  /// Runs one handler; a failure is recorded and training goes on.
  void run_handler(const TraceHandler& handler, const Trace& trace) {
    const auto source = static_cast<std::size_t>(&handler - options_.handlers().data());
    try {
      handler.callback(trace);
    } catch (const std::exception& error) {
      record_error(fmt::format("on_trace_ready handler failed: {}", error.what()), source);
    } catch (...) {
      record_error("on_trace_ready handler failed: unknown exception", source);
    }
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
    if (gpu_enabled_) gpu_backend_->end_window();
    disable_collectors();
    started_ = false;
    detail::g_started_profiler.store(nullptr);
    if (writer_) writer_->wait_idle();
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
    const auto handler = std::find_if(options_.handlers().begin(), options_.handlers().end(),
                                      [](const TraceHandler& h) { return !h.directory.empty(); });
    if (handler != options_.handlers().end()) {
      const std::string prefix = fmt::format("{}/{}.", handler->directory, handler->worker);
      if (const int error = detail::make_directories(handler->directory); error != 0)
        detail::print_warning_once(fmt::format("flight recorder: cannot create the trace directory '{}' ({}): a crash "
                                               "will leave no file",
                                               detail::terminal_text(handler->directory), detail::errno_text(error)));
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
    std::string reason = slow_step_reason();
    if (signal_requests_.take(detail::clock_ns(CLOCK_MONOTONIC)) && reason.empty()) reason = "the dump signal";
    warn_of_refused_signals(/*flush=*/false);
    if (trigger_file_request() && reason.empty()) reason = "the trigger file";
    hang_dumped_in_step_ = false;
    ++step_num_;
    crash_target_->step.store(step_num_, std::memory_order_relaxed);
    if (!reason.empty()) flight_dump(reason, /*handlers_here=*/false);
    open_step();
  }

  /// Why the step just ended is dumped as a slow step: it took more than slow_step_factor times
  /// the median of the 21 steps before it and over a millisecond more than it, and no slow step
  /// or hang was dumped in the last minute. Empty otherwise. No step is judged before 21 have
  /// ended: warm-up steps vary too much to be a baseline. A step in which a dump ran is not
  /// judged, since dlprof slowed it; every other step joins the steps the median is taken over.
  std::string slow_step_reason() {
    const std::int64_t ticks = last_step_ticks_;
    std::string reason;
    if (std::exchange(dumped_in_step_, false)) return reason;
    const std::optional<std::int64_t> median = recent_steps_.median();
    if (options_.slow_step_factor() != 0 && median) {
      const double ns_per_tick = detail::process_ns_per_tick();
      if (static_cast<double>(ticks) > options_.slow_step_factor() * static_cast<double>(*median) &&
          static_cast<double>(ticks - *median) * ns_per_tick > kSlowStepMinExcessNs) {
        const std::int64_t now = detail::clock_ns(CLOCK_MONOTONIC);
        if (now >= next_slow_step_dump_ns_) {
          const double ms_per_tick = ns_per_tick / 1e6;
          reason = fmt::format("slow step {}: {:.3f} ms, {:.1f}x the median {:.3f} ms of the {} steps before it", step_num_,
                               static_cast<double>(ticks) * ms_per_tick,
                               static_cast<double>(ticks) / static_cast<double>(std::max<std::int64_t>(*median, 1)),
                               static_cast<double>(*median) * ms_per_tick, detail::RecentSteps::kCount);
          next_slow_step_dump_ns_ = now + kSlowStepDumpIntervalNs;
        } else {
          ++slow_steps_not_dumped_;
        }
      }
    }
    recent_steps_.add(ticks);
    return reason;
  }

  /// The watcher's look at a flight recorder's step in progress: one that has run longer than
  /// slow_step_factor times the median of the steps before it, and half a second more, is dumped
  /// while it runs, once, with what every thread is inside (detail/control/watchdog.hpp). It
  /// shares the slow steps' limit of one dump a minute: a hang found sooner after one is dumped
  /// once that minute has passed, if the step still runs.
  void dump_if_hung() {
    if (!step_recorded_ || hang_dumped_in_step_) return;
    const std::optional<std::int64_t> median = recent_steps_.median();
    if (!median) return;
    const std::int64_t now_tick = detail::now_ticks();
    const double ns_per_tick = detail::process_ns_per_tick();
    const std::int64_t running = now_tick - step_start_ticks_;
    if (!detail::is_hung(static_cast<double>(running) * ns_per_tick, static_cast<double>(*median) * ns_per_tick,
                         options_.slow_step_factor()))
      return;
    const std::int64_t now = detail::clock_ns(CLOCK_MONOTONIC);
    if (now < next_slow_step_dump_ns_) return;
    next_slow_step_dump_ns_ = now + kSlowStepDumpIntervalNs;
    hang_dumped_in_step_ = true;
    flight_dump(detail::hang_reason(step_num_, running, *median, ns_per_tick, crash_target_->header.step_os_tid,
                                    detail::threads_inside_now(), now_tick),
                /*handlers_here=*/false);
  }

  /// Writes the kept steps, and the current step so far, as one trace; the log starts over.
  void flight_dump(std::string reason, bool handlers_here) {
    const detail::ClockSample now = detail::sample_clocks();
    const std::int64_t from = flight_log_->window_start_tick();
    detail::DrainedEvents partial = detail::drain_rings(from, now.ticks);
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
    if (mode_ != Mode::OnDemand || capturing_.load(std::memory_order_acquire)) return false;
    std::int64_t none = 0;
    if (!requested_capture_.compare_exchange_strong(none, amount, std::memory_order_acq_rel)) return false;
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
    std::vector<detail::CaptureRequest> requests;
    if (const std::int64_t amount = requested_capture_.exchange(0, std::memory_order_acq_rel); amount != 0) {
      detail::CaptureRequest request;
      request.source = amount > 0 ? "prof.capture()" : "prof.capture_for()";
      if (amount > 0) request.steps = amount;
      if (amount < 0) request.duration_ns = -amount;
      requests.push_back(std::move(request));
    }
    if (signal_requests_.take(detail::clock_ns(CLOCK_MONOTONIC))) {
      detail::CaptureRequest request;
      request.source = "the capture signal";
      requests.push_back(std::move(request));
    }
    warn_of_refused_signals(/*flush=*/false);
    if (std::optional<detail::CaptureRequest> request = trigger_file_request()) requests.push_back(std::move(*request));
    for (detail::CaptureRequest& request : requests) {
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

  /// Says how many requests by signal were refused, once per 10 s at most (a storm of signals
  /// prints one line), or now with `flush`.
  void warn_of_refused_signals(bool flush) {
    const std::uint64_t refused = signal_requests_.refusals_to_report(detail::clock_ns(CLOCK_MONOTONIC), flush);
    if (refused == 0) return;
    detail::print_warning(fmt::format("{} {} request{} by signal refused: signals that arrive together ask once, and one "
                                      "request by signal is taken every {} s at most",
                                      refused, mode_ == Mode::OnDemand ? "capture" : "dump", refused == 1 ? "" : "s",
                                      detail::kCaptureSignalIntervalNs / 1'000'000'000));
  }

  /// What the trigger file asks for, reading and removing it when it is there; nothing when it is
  /// not, or when it was looked for less than kTriggerFilePeriodNs ago.
  std::optional<detail::CaptureRequest> trigger_file_request() {
    if (trigger_file_.empty()) return std::nullopt;
    const std::int64_t now = detail::clock_ns(CLOCK_MONOTONIC);
    if (now < next_trigger_check_ns_) return std::nullopt;
    next_trigger_check_ns_ = now + detail::kTriggerFilePeriodNs;
    const int fd = ::open(trigger_file_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno != ENOENT && !trigger_file_warned_) {
        trigger_file_warned_ = true;
        detail::print_warning(fmt::format("DLPROF_TRIGGER_FILE={}: cannot read it: {}", detail::terminal_text(trigger_file_),
                                          detail::errno_text(errno)));
      }
      return std::nullopt;
    }
    std::string text;
    char chunk[256];
    for (ssize_t read = 0; text.size() < 4096 && (read = ::read(fd, chunk, sizeof(chunk))) > 0;)
      text.append(chunk, static_cast<std::size_t>(read));
    ::close(fd);
    if (::unlink(trigger_file_.c_str()) != 0 && errno != ENOENT) {
      if (!trigger_file_warned_)
        detail::print_warning(fmt::format("DLPROF_TRIGGER_FILE={}: cannot remove it ({}): it asks for nothing until it is "
                                          "removed",
                                          detail::terminal_text(trigger_file_), detail::errno_text(errno)));
      trigger_file_warned_ = true;
      return std::nullopt;
    }
    std::vector<std::string> problems;
    detail::CaptureRequest request = detail::parse_capture_request(text, problems);
    for (const std::string& problem : problems) detail::print_warning(problem);
    return request;
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
  }

  void warn_incorrect_schedule(Action previous, Action current) {
    detail::print_warning(fmt::format("Incorrect schedule: {} followed by {} at step {}; the recorded steps are discarded",
                             to_string(previous), to_string(current), step_num_));
  }

  /// What failed, for record_error: a handler's index in the options, or the building of traces.
  static constexpr std::size_t kBuildingTraces = SIZE_MAX;
  /// Errors kept for errors(); later ones are counted.
  static constexpr std::size_t kMaxErrorsKept = 256;

  /// Keeps `message` for errors() and prints it if it is the first failure of `source`: a handler
  /// that fails on every window (a full disk) prints once, not once per window.
  void record_error(std::string message, std::size_t source) {
    std::lock_guard<std::mutex> lock(results_mutex_);
    if (std::find(failed_sources_.begin(), failed_sources_.end(), source) == failed_sources_.end()) {
      failed_sources_.push_back(source);
      detail::print_warning(fmt::format("{} (later failures of it are kept in Profiler::errors(), not printed)", message));
    }
    if (errors_.size() < kMaxErrorsKept)
      errors_.push_back(std::move(message));
    else
      ++errors_left_out_;
  }

  detail::BackgroundWriter<>& background_writer() {
    if (!writer_) writer_ = std::make_unique<detail::BackgroundWriter<>>();
    return *writer_;
  }

  static constexpr std::int64_t kSlowStepDumpIntervalNs = 60'000'000'000;
  static constexpr double kSlowStepMinExcessNs = 1e6;
  /// On demand: a program that has not called step() for this long is served by the watcher.
  static constexpr std::int64_t kNoStepsNs = 1'000'000'000;

  ProfilerOptions options_;
  Mode mode_ = Mode::Scheduled;
  std::unique_ptr<detail::FlightLog> flight_log_;      // the flight recorder's steps
  std::unique_ptr<detail::CrashTarget> crash_target_;  // what a fatal signal writes
  detail::ClockSample flight_origin_{};
  std::int64_t last_step_ticks_ = 0;  // the duration of the step that ended last
  detail::RecentSteps recent_steps_;  // the steps a slow step or a hang is judged against
  std::int64_t next_slow_step_dump_ns_ = 0;
  std::uint64_t dumps_ = 0;
  std::uint64_t slow_steps_not_dumped_ = 0;
  bool dumped_in_step_ = false;  // a dump ran in the step in progress
  bool hang_dumped_in_step_ = false;  // the step in progress was dumped as a hang
  detail::CaptureSignalRequests signal_requests_;
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
  std::atomic<std::int64_t> requested_capture_{0};  // set by capture() (steps) or capture_for() (-ns), taken by step()
  std::int64_t last_step_call_ns_ = 0;     // CLOCK_MONOTONIC of the last step() (or start())
  std::unique_ptr<std::thread> watcher_;   // on demand: ends timed captures, serves programs without steps
  std::mutex watcher_mutex_;
  std::condition_variable watcher_wake_;
  bool watcher_stopping_ = false;
  std::string trigger_file_;
  std::int64_t next_trigger_check_ns_ = 0;
  bool trigger_file_warned_ = false;  // an unreadable or stuck trigger file is warned about once
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
  mutable std::mutex results_mutex_;  // guards last_trace_, traces_in_progress_ and errors_ (the writer thread sets them)
  mutable std::condition_variable trace_published_;
  std::shared_ptr<const Trace> last_trace_;
  int traces_in_progress_ = 0;  // windows closed whose trace is not yet last_trace_
  std::vector<std::string> errors_;
  std::uint64_t errors_left_out_ = 0;
  std::vector<std::size_t> failed_sources_;  // what has failed and been printed once
  std::unique_ptr<detail::BackgroundWriter<>> writer_;  // last: joined before the members it uses die
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
