// dlprof/profiler_options.hpp: what a Profiler is asked to do. ProfilerOptions and the handlers
// it runs on each finished trace (TraceHandler, tensorboard_trace_handler). The launcher's word
// over them is detail/control/launched_options.hpp's; the Profiler itself is profiler.hpp's.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "dlprof/activity.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/stack_table.hpp"
#include "dlprof/schedule.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// How call stacks are taken (ProfilerOptions::with_stack).
enum class StackUnwinder : std::uint8_t {
  /// By the unwind tables every C++ object carries (libunwind where libunwind.so.8 is present,
  /// else libgcc): right for any code. About 14 ns a frame with libunwind, 200 with libgcc.
  UnwindTables,
  /// By the chain of saved frame pointers: about 3 ns a frame, and right only where every frame
  /// keeps its pointer (the program and the libraries its ranges and ops are called through,
  /// built with -fno-omit-frame-pointer). Elsewhere frames are missed or the walk stops early,
  /// never faulting.
  FramePointers,
};

/// "unwind_tables" or "frame_pointers", as DLPROF_STACK_UNWINDER takes it.
constexpr std::string_view to_string(StackUnwinder unwinder) noexcept {
  return unwinder == StackUnwinder::FramePointers ? "frame_pointers" : "unwind_tables";
}

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
  /// Every recorded range and LibTorch forward op takes its call stack as it begins, written as
  /// its `Call stack` (frames separated by ';', the innermost first, as torch.profiler writes
  /// it) and symbolised by dlprof-report; the trace carries the process's modules for that.
  /// Backward ops carry their forward op's stack. Costs a stack walk per range and op (bench/).
  ProfilerOptions& with_stack(bool on) {
    with_stack_ = on;
    return *this;
  }
  /// with_stack: the innermost frames kept of each stack, 1 to detail::kMaxStackFrames (64 by
  /// default).
  ProfilerOptions& stack_depth(std::size_t frames) {
    if (frames < 1 || frames > detail::kMaxStackFrames)
      throw std::invalid_argument(
          fmt::format("dlprof::ProfilerOptions::stack_depth must be in [1, {}], got {}", detail::kMaxStackFrames, frames));
    stack_depth_ = static_cast<std::uint32_t>(frames);
    return *this;
  }
  /// with_stack: how stacks are taken (StackUnwinder::UnwindTables by default).
  ProfilerOptions& stack_unwinder(StackUnwinder unwinder) {
    stack_unwinder_ = unwinder;
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
  bool with_stack() const noexcept { return with_stack_; }
  std::size_t stack_depth() const noexcept { return stack_depth_; }
  StackUnwinder stack_unwinder() const noexcept { return stack_unwinder_; }
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
  bool with_stack_ = false;
  std::uint32_t stack_depth_ = detail::StackCapture::kDefaultDepth;
  StackUnwinder stack_unwinder_ = StackUnwinder::UnwindTables;
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
/// Defined with the Profiler's runtime (detail/profiler_runtime.hpp), since it runs the trace
/// writer.
template <class Deferred = void>
TraceHandler tensorboard_trace_handler(std::string dir, std::string worker = "", bool gzip = false);

DLPROF_END_NAMESPACE
