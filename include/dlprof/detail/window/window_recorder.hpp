// dlprof/detail/window/window_recorder.hpp: the recording window. The window recorder arms the
// collectors (the rings, the op observer, the GPU backend), opens and closes the window and the
// steps inside it, reads the recording threads' CPU time at their edges, and hands over what a
// closed window holds (ClosedWindow, publisher.hpp) to be assembled off the training thread. The
// Profiler's state machine says when (profiler.hpp); the flight recorder keeps one window open
// across its steps and takes dumps out of it (flight_recorder.hpp).
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/backends/op_observer.hpp"
#include "dlprof/detail/backends/thread_cpu_sampler.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/nvtx.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/recording/slow_path.hpp"
#include "dlprof/detail/recording/stack_table.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/detail/window/module_map.hpp"
#include "dlprof/detail/window/publisher.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/range.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// One Profiler's recording window and its steps. Used by one thread at a time (the Profiler's
/// control lock); the rings it drains are filled by every thread. A class template, as everything
/// the Profiler alone uses (profiler.hpp).
template <class Deferred = void>
class BasicWindowRecorder {
 public:
  /// A reading of the threads' CPU time this recent stands for the moment a step begins or ends.
  static constexpr double kFreshReadingNs = 20'000;
  /// Readings at steps' edges take at most 1 % of the time between them: a step's edge is read
  /// once this many times the last reading's cost has passed since it, or kEdgeReadingIntervalNs,
  /// whichever is less. Steps far shorter than a reading (tens of microseconds) then share
  /// readings, and analysis::thread_cpu interpolates between them.
  static constexpr std::int64_t kReadingCostsBetweenReadings = 100;
  /// Steps this long have readings at both edges whatever a reading costs (one that opens the
  /// files of new threads costs more than the next).
  static constexpr double kEdgeReadingIntervalNs = 1'000'000;

  /// `options`: the Profiler's, which outlive the recorder. They are read when the window is
  /// armed, started and closed, so that an on-demand capture's options apply to its window.
  explicit BasicWindowRecorder(const ProfilerOptions& options) : options_(options) {}

  BasicWindowRecorder(const BasicWindowRecorder&) = delete;
  BasicWindowRecorder& operator=(const BasicWindowRecorder&) = delete;

  /// Arms collection ahead of recording: rings get the configured capacity, and the calling
  /// thread's ring is allocated and pre-faulted now rather than inside the first recorded step.
  /// GPU collection is switched on here too, during warm-up when the schedule has one, so that
  /// CUPTI's start-up cost falls outside the recorded steps. `keep_newest`: a window that fills
  /// its GPU records drops the oldest (the flight recorder, which wants the last steps).
  void arm(bool keep_newest) {
    RingRegistry::instance().set_capacity(options_.events_per_thread());
    InternTable::instance().set_limit_bytes(options_.name_table_bytes());
    if (t_ring == nullptr || t_ring->retired()) {
      try {
        attach_thread_ring();
      } catch (const std::bad_alloc&) {  // each event of this thread tries again, and is counted as dropped if it fails
        print_warning(fmt::format("cannot allocate a ring of {} events for this thread: its events are dropped and counted",
                                  options_.events_per_thread()));
      }
    }
    find_collectors();
    if (op_observer_ != nullptr && !op_observer_enabled_ && options_.wants(Activity::CPU)) {
      op_observer_->enable(OpObserverOptions{options_.record_shapes(), options_.with_flops(), options_.profile_memory()});
      op_observer_enabled_ = true;
    }
    if (gpu_backend_ != nullptr && !gpu_enabled_ && options_.wants(Activity::CUDA)) {
      gpu_enabled_ = gpu_backend_->enable(
          // A framework's allocator reports its own allocations (a caching allocator's tensors rather
          // than its cudaMalloc blocks): CUPTI's memory records would count them twice.
          GpuCollectionOptions{options_.profile_memory() && op_observer_ == nullptr, options_.gpu_records_per_window(),
                               keep_newest, options_.device_counter_period()});
      if (!gpu_enabled_) {  // unavailable: warned once, CPU only from now on
        gpu_backend_ = nullptr;
        gpu_unavailable_ = true;
      }
    }
  }

  /// Finds the op observer and the GPU backend the options ask for, where the program links them.
  void find_collectors() {
    if (op_observer_ == nullptr && options_.wants(Activity::CPU))
      if (const OpObserverAccessor observer = g_op_observer.load(std::memory_order_acquire)) op_observer_ = &observer();
    if (gpu_backend_ == nullptr && !gpu_unavailable_ && options_.wants(Activity::CUDA)) {
      if (const GpuBackendAccessor backend = g_gpu_backend.load(std::memory_order_acquire)) {
        gpu_backend_ = &backend();
      } else {
        gpu_unavailable_ = true;
        static std::once_flag warned;  // once per process, however many profilers ask
        std::call_once(warned, [] {
          print_warning("Activity::CUDA requested, but this program does not link dlprof::cupti: recording CPU only");
        });
      }
    }
  }

  /// Opens the window: every thread records from now on.
  void start() {
    std::uint32_t flags = kRecording;
    if (gpu_enabled_) {
      gpu_backend_->begin_window();
      flags |= kCorrelating;
    }
    if (options_.with_stack()) {
      g_stack_capture.depth.store(static_cast<std::uint32_t>(options_.stack_depth()), std::memory_order_relaxed);
      g_stack_capture.by_frame_pointers.store(options_.stack_unwinder() == StackUnwinder::FramePointers,
                                              std::memory_order_relaxed);
      flags |= kWithStack;
    }
    overflowed_names_before_window_ = InternTable::instance().overflowed();
    stacks_lost_before_window_ = StackTable::instance().lost();
    window_start_ = sample_clocks();
    sample_thread_cpu();
    install_recording_slow_path();  // before kRecording: Profilers constructed while the program starts
    g_active.fetch_or(flags, std::memory_order_relaxed);
  }

  /// Closes the window: recording stops, and what it recorded is kept for close() or discard().
  void stop() {
    g_active.fetch_and(~kWindowFlags, std::memory_order_relaxed);
    if (!step_end_sampled_) sample_thread_cpu();  // no steps, ended inside one, or the last end unread
    const ClockSample window_end = sample_clocks();
    drained_ = drain_rings(window_start_.ticks, window_end.ticks);
    thread_cpu_readings_ = thread_cpu_.take(window_start_.ticks, /*keep_last_round=*/false);
    window_end_ = window_end;
    overflowed_names_in_window_ = InternTable::instance().overflowed() - overflowed_names_before_window_;
    stacks_lost_in_window_ = StackTable::instance().lost() - stacks_lost_before_window_;
    if (gpu_enabled_) device_activity_ = gpu_backend_->end_window();
  }

  /// Drops what the window stop() closed recorded.
  void discard() {
    drained_ = {};
    thread_cpu_readings_ = {};
    device_activity_.reset();
  }

  /// Stops recording and drops everything recorded since the window opened, unread: the flight
  /// recorder's steps after its last dump, which nothing asked for.
  void abandon() {
    g_active.fetch_and(~kWindowFlags, std::memory_order_relaxed);
    drain_rings(INT64_MIN, INT64_MAX);
    thread_cpu_.clear();
    if (gpu_enabled_) gpu_backend_->end_window();
  }

  /// Idle steps pay nothing for CUPTI or the op observer.
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

  /// What the window stop() closed holds, to be assembled into its trace.
  std::shared_ptr<ClosedWindow> close() {
    auto window = std::make_shared<ClosedWindow>();
    window->drained = std::exchange(drained_, {});
    window->thread_cpu = std::exchange(thread_cpu_readings_, {});
    window->device_activity = std::move(device_activity_);
    device_activity_.reset();
    window->clock = ClockMap::through(window_start_, window_end_, process_ns_per_tick());
    window->start_ns = window_start_.realtime_ns;
    window->end_ns = window_end_.realtime_ns;
    window->overflowed_names = overflowed_names_in_window_;
    window->stackless_events = stacks_lost_in_window_;
    describe(*window);
    return window;
  }

  /// The recording's clock and the options it was recorded with, for a window made elsewhere (a
  /// flight-recorder dump); with stacks, the modules their addresses are in, read now, before a
  /// library the window's stacks point into can be unloaded by the program going on.
  void describe(ClosedWindow& window) const {
    window.clock_source = g_use_tsc.load(std::memory_order_relaxed) ? "tsc" : "clock_monotonic";
    window.record_shapes = options_.record_shapes();
    window.profile_memory = options_.profile_memory();
    window.with_flops = options_.with_flops();
    window.with_stack = options_.with_stack();
    if (window.with_stack) {
      try {
        window.modules = loaded_modules();
      } catch (const std::bad_alloc&) {  // the trace says its stacks' modules are not known
        window.modules.clear();
      }
    }
  }

  /// Begins step `step`: ProfilerStep#N is an NVTX range whenever a tool listens, and an event
  /// when the window records. `marks_steps`: false for a Profiler without a schedule, which
  /// marks no steps, as torch's.
  void open_step(std::int64_t step, bool marks_steps) {
    if (!marks_steps) return;
    const std::uint32_t flags = active_flags();
    step_nvtx_pushed_ = (flags & kNvtxAttached) != 0;
    if (step_nvtx_pushed_) nvtx_push(profiler_step_name(step), Category::Step);
    step_recorded_ = (flags & kRecording) != 0;
    step_correlation_sequence_ =
        step_recorded_ && (flags & kCorrelating) != 0
            ? push_external_correlation(static_cast<std::uint64_t>(step), 0, RecordKind::Step)
            : 0;
    step_end_sampled_ = false;
    if (step_recorded_) sample_thread_cpu_if_due();
    step_start_ticks_ = now_ticks();
  }

  /// Ends step `step`, begun by open_step().
  void close_step(std::int64_t step) {
    if (step_nvtx_pushed_) {
      step_nvtx_pushed_ = false;
      nvtx_pop();
    }
    if (!step_recorded_) return;
    step_recorded_ = false;
    const std::int64_t end = now_ticks();
    last_step_ticks_ = end - step_start_ticks_;
    push_event(Event{static_cast<NameId>(step), step_start_ticks_, {end}, RecordKind::Step, Category::Step,
                     step_correlation_sequence_});
    if (step_correlation_sequence_ != 0) pop_external_correlation();
    step_correlation_sequence_ = 0;
    step_end_sampled_ = sample_thread_cpu_if_due();
  }

  /// Reads the recording threads' CPU time and run-queue wait (detail/backends/thread_cpu_sampler.hpp).
  void sample_thread_cpu() {
    if (!options_.thread_cpu() || !options_.wants(Activity::CPU)) return;
    last_thread_cpu_tick_ = now_ticks();
    thread_cpu_.sample(last_thread_cpu_tick_);
    last_reading_cost_ticks_ = now_ticks() - last_thread_cpu_tick_;
  }

  /// The readings taken since `from`; `keep_last_round`: the last one stays, as the next take's
  /// first (a flight dump, after which the window goes on).
  ThreadCpuReadings take_thread_cpu(std::int64_t from, bool keep_last_round) {
    return thread_cpu_.take(from, keep_last_round);
  }

  /// A window that stays open (the flight recorder's) forgets what it recorded before `tick`.
  void discard_before(std::int64_t tick) {
    if (gpu_enabled_) gpu_backend_->discard_before(tick);
    thread_cpu_.discard_before(tick);
  }

  /// The GPU activity since the window began or since the last call, the window going on.
  std::optional<DeviceActivity> take_device_activity() {
    if (!gpu_enabled_) return std::nullopt;
    std::optional<DeviceActivity> activity = gpu_backend_->end_window();
    gpu_backend_->begin_window();
    return activity;
  }

  /// Names recorded under kOverflowName since the window began or since the last call.
  std::uint64_t take_overflowed_names() {
    const std::uint64_t overflowed = InternTable::instance().overflowed();
    return overflowed - std::exchange(overflowed_names_before_window_, overflowed);
  }

  /// Stacks the stack table could not keep since the window began or since the last call.
  std::uint64_t take_stackless_events() {
    const std::uint64_t lost = StackTable::instance().lost();
    return lost - std::exchange(stacks_lost_before_window_, lost);
  }

  const ClockSample& window_start() const noexcept { return window_start_; }
  /// Whether the step in progress is recorded, and when it began, in ticks.
  bool step_recorded() const noexcept { return step_recorded_; }
  std::int64_t step_start_ticks() const noexcept { return step_start_ticks_; }
  /// How long the step that ended last took, in ticks.
  std::int64_t last_step_ticks() const noexcept { return last_step_ticks_; }

 private:
  /// A step begins or ends: the threads are read unless the last reading is fresh
  /// (kFreshReadingNs) or recent against its own cost (kReadingCostsBetweenReadings,
  /// kEdgeReadingIntervalNs). The analysis reads each step's edges off the readings around them,
  /// which is exact only when nothing ran between the reading and the edge: a thread preempted
  /// there, or a window handed over there, would have its CPU time spread over the gap. Returns
  /// whether it read.
  bool sample_thread_cpu_if_due() {
    const std::int64_t since = now_ticks() - last_thread_cpu_tick_;
    const double since_ns = static_cast<double>(since) * process_ns_per_tick();
    if (since_ns <= kFreshReadingNs ||
        (since < kReadingCostsBetweenReadings * last_reading_cost_ticks_ && since_ns < kEdgeReadingIntervalNs))
      return false;
    sample_thread_cpu();
    return true;
  }

  const ProfilerOptions& options_;
  GpuBackend* gpu_backend_ = nullptr;  // set when CUDA activity is asked for and a backend is linked
  bool gpu_enabled_ = false;
  bool gpu_unavailable_ = false;  // asked for, and not linked or failed to start: CPU only from then on
  OpObserver* op_observer_ = nullptr;  // set when CPU activity is asked for and an observer is linked
  bool op_observer_enabled_ = false;
  ClockSample window_start_{};
  ClockSample window_end_{};
  std::uint64_t overflowed_names_before_window_ = 0;
  std::uint64_t overflowed_names_in_window_ = 0;  // new names the window recorded under kOverflowName
  std::uint64_t stacks_lost_before_window_ = 0;
  std::uint64_t stacks_lost_in_window_ = 0;  // events the window recorded without their stacks
  DrainedEvents drained_;                          // what the window stop() closed recorded
  std::optional<DeviceActivity> device_activity_;
  ThreadCpuSampler thread_cpu_;           // the recording threads' CPU time, read at steps' edges
  ThreadCpuReadings thread_cpu_readings_;
  bool step_recorded_ = false;
  bool step_nvtx_pushed_ = false;  // ProfilerStep#N is an NVTX range too, whether recorded or not
  bool step_end_sampled_ = false;  // the step that just closed read them: the window's end need not
  std::int64_t step_start_ticks_ = 0;
  std::int64_t last_step_ticks_ = 0;
  std::int64_t last_thread_cpu_tick_ = 0;  // when the threads were last read, in ticks (0: never)
  std::int64_t last_reading_cost_ticks_ = 0;  // how long that reading took
  std::uint32_t step_correlation_sequence_ = 0;
};

using WindowRecorder = BasicWindowRecorder<>;

}  // namespace detail
DLPROF_END_NAMESPACE
