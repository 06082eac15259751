// dlprof/profiler_options.hpp: what a Profiler is asked to do. ProfilerOptions, the handlers it
// runs on each finished trace (TraceHandler, tensorboard_trace_handler), and the launcher's word
// over both: apply_settings() lays the DLPROF_* settings (settings.hpp, format/launch_protocol.hpp)
// over the program's options. The Profiler itself is profiler.hpp's.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/export/chrome_trace.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/format/launch_protocol.hpp"
#include "dlprof/schedule.hpp"
#include "dlprof/settings.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

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

/// "<hostname>_<pid>": the worker name of trace files when none is given, as torch.profiler's.
inline std::string default_worker_name() { return fmt::format("{}_{}", host_name(), static_cast<long>(::getpid())); }

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

/// A directory traces go to, and the worker name their files start with
/// (`<worker>.<unix_time_ns>.pt.trace.json`, as tensorboard_trace_handler names them).
struct TraceDirectory {
  std::string directory;
  std::string worker;
};

/// Something to do with each finished trace. Any callable converts to a handler that runs on the
/// thread calling step()/stop(); a handler marked `background` (tensorboard_trace_handler is)
/// runs on the Profiler's writer thread instead, so writing files stays off the training thread.
struct TraceHandler {
  std::function<void(const Trace&)> callback;
  bool background = false;
  /// The directory it writes traces to, and the worker name of its files, when it is a
  /// directory handler (tensorboard_trace_handler): where a flight recorder's crash file goes
  /// unless ProfilerOptions::crash_directory says otherwise.
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
  /// With Activity::CPU: each recording thread's CPU time and run-queue wait, read from the
  /// kernel's scheduler accounting at each recorded step's end and at the window's ends (on by
  /// default; about a microsecond a thread, and at most 1 % of the time between readings: steps
  /// shorter than that share them). They are written as counter tracks, one per thread.
  ProfilerOptions& thread_cpu(bool on) {
    thread_cpu_ = on;
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
  /// memory is the threads' rings (events_per_thread events of 32 bytes each, 2 MiB by default):
  /// each thread keeps the last steps as far as its ring holds them.
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
  /// Mode::FlightRecorder: where a crash (a fatal signal, std::terminate) leaves its file, and
  /// the worker name the file starts with ("<hostname>_<pid>" when empty). Without it, the crash
  /// file goes where the first directory handler writes (tensorboard_trace_handler, DLPROF_OUTPUT);
  /// with neither, a crash leaves no file.
  ProfilerOptions& crash_directory(std::string dir, std::string worker = "") {
    if (dir.empty()) throw std::invalid_argument("dlprof::ProfilerOptions::crash_directory: dir is empty");
    if (worker.empty()) worker = detail::default_worker_name();
    crash_directory_ = TraceDirectory{std::move(dir), std::move(worker)};
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
  bool thread_cpu() const noexcept { return thread_cpu_; }
  bool record_shapes() const noexcept { return record_shapes_; }
  bool profile_memory() const noexcept { return profile_memory_; }
  bool with_flops() const noexcept { return with_flops_; }
  const std::string& distributed_backend() const noexcept { return distributed_backend_; }
  Mode mode() const noexcept { return mode_; }
  std::size_t flight_steps() const noexcept { return flight_steps_; }
  double slow_step_factor() const noexcept { return slow_step_factor_; }
  /// Where a flight recorder's crash file goes: crash_directory()'s, else the first directory
  /// handler's, else nowhere.
  std::optional<TraceDirectory> crash_file_directory() const {
    if (crash_directory_) return crash_directory_;
    for (const TraceHandler& handler : handlers_)
      if (!handler.directory.empty()) return TraceDirectory{handler.directory, handler.worker};
    return std::nullopt;
  }
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
  bool thread_cpu_ = true;
  bool record_shapes_ = false;
  bool profile_memory_ = false;
  bool with_flops_ = false;
  std::string distributed_backend_;
  Mode mode_ = Mode::Scheduled;
  std::size_t flight_steps_ = kDefaultFlightSteps;
  double slow_step_factor_ = kDefaultSlowStepFactor;
  std::optional<TraceDirectory> crash_directory_;
};

/// torch.profiler.tensorboard_trace_handler: writes each trace to
/// `<dir>/<worker>.<unix_time_ns>.pt.trace.json[.gz]`, creating `dir` if needed, on the
/// Profiler's background writer. `worker` defaults to "<hostname>_<pid>". A failure (directory
/// not writable, disk full) is reported through Profiler::errors() and stderr; training goes on.
/// A template for the reason BasicProfiler is one: the writer compiles where a handler is made.
template <class Deferred = void>
TraceHandler tensorboard_trace_handler(std::string dir, std::string worker = "", bool gzip = false) {
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

namespace detail {

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

}  // namespace detail

DLPROF_END_NAMESPACE
