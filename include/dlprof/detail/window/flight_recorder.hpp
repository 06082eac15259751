// dlprof/detail/window/flight_recorder.hpp: the flight recorder (DLPROF_MODE=flight-recorder).
// It keeps one recording window open for as long as the Profiler runs, and the last steps of it
// in the threads' rings, which are its log (flight_log.hpp). A step that runs slow, a step that
// hangs, a request (prof.dump(), the dump signal, the trigger file) or std::terminate dumps the
// kept steps and the step in progress as one trace; a fatal signal writes them to a crash file
// (crash_file.hpp), which dlprof-report turns into the trace afterwards; with a trace directory the
// rings live in the flight log's file there (flight_log_file.hpp), which a process killed without
// a chance to dump leaves behind for dlprof-report. The Profiler says when
// steps end and when to dump (profiler.hpp); the rules for slow and hung steps are the slow-step
// policy's (detail/control/slow_step_policy.hpp).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/control/slow_step_policy.hpp"
#include "dlprof/detail/control/launched_options.hpp"
#include "dlprof/detail/control/watchdog.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/detail/window/crash_file.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/detail/window/flight_log.hpp"
#include "dlprof/detail/window/flight_log_file.hpp"
#include "dlprof/detail/window/publisher.hpp"
#include "dlprof/detail/window/window_recorder.hpp"
#include "dlprof/distributed.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/profiler_options.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// One Profiler's flight recorder, over its window recorder. Used by one thread at a time (the
/// Profiler's control lock); a fatal signal's handler reads the crash target it arms.
template <class Deferred = void>
class BasicFlightRecorder {
 public:
  /// std::terminate's dump: run by the terminate handler with the Profiler it was armed with and
  /// the reason; false when it cannot dump (the Profiler is busy on this very thread), and the
  /// crash file is written instead.
  using DumpOnTerminate = bool (*)(void* profiler, const char* reason);

  /// `window` and `options`: the Profiler's, which outlive the recorder.
  BasicFlightRecorder(BasicWindowRecorder<Deferred>& window, const ProfilerOptions& options)
      : window_(window), options_(options), slow_steps_(options.slow_step_factor()) {}

  BasicFlightRecorder(const BasicFlightRecorder&) = delete;
  BasicFlightRecorder& operator=(const BasicFlightRecorder&) = delete;

  /// Records from now on into the flight log, from step `step` (which the caller then opens), and
  /// arms the dumps of a crash. `generation`: the fork generation the Profiler was made in.
  void start(std::int64_t step, std::uint32_t generation, DumpOnTerminate dump_on_terminate, void* profiler) {
    // From now on each thread that attaches a ring gets an alternate signal stack, and so does
    // this one, whose ring may be attached already: the crash handler must run on an overflowed
    // stack too.
    g_threads_need_signal_stacks.store(true, std::memory_order_relaxed);
    open_log_file(step);  // before arm(), which attaches this thread's ring: there
    window_.arm(/*keep_newest=*/true);
    give_this_thread_a_signal_stack();
    window_.start();
    origin_ = window_.window_start();
    crash_target_.reset();  // a restart: its log goes, and a crash meanwhile finds no target
    log_ = std::make_unique<FlightLog>(options_.flight_steps(), origin_.ticks, file_.get());
    if (file_ != nullptr) {
      FlightLogHeader& header = file_->header();
      header.origin = origin_;
      header.last_step_end = origin_;
      header.last_seen = origin_;
      header.window_start_tick = origin_.ticks;
      header.ns_per_tick = process_ns_per_tick();
    }
    arm_crash_dumps(step, generation, dump_on_terminate, profiler);
  }

  /// Stops recording, once the caller has closed the step in progress. The steps after the last
  /// dump are dropped: nothing asked for them.
  void stop() {
    g_crash_target.store(nullptr, std::memory_order_release);
    window_.abandon();
    window_.disable_collectors();
    close_log_file();
  }


  /// Step `step`, which the window recorder has just closed, is kept in the log. Returns why it is
  /// dumped (it ran slow), or nothing.
  std::optional<std::string> end_step(std::int64_t step) {
    log_->end_step(step, now_ticks());
    window_.discard_before(log_->window_start_tick());
    return slow_steps_.step_ended(step, window_.last_step_ticks(), process_ns_per_tick(), clock_ns(CLOCK_MONOTONIC),
                                  std::exchange(dumped_in_step_, false));
  }

  /// The step in progress is numbered `step` from now on, for a crash.
  void number_step(std::int64_t step) {
    crash_target_->step.store(step, std::memory_order_relaxed);
    if (file_ != nullptr) file_->step_numbered(step);
  }

  /// The window recorder has opened the step in progress: a crash's trace ends it at the crash.
  void step_opened() {
    const std::int64_t start_tick = window_.step_recorded() ? window_.step_start_ticks() : INT64_MIN;
    if (crash_target_ != nullptr) crash_target_->step_start_tick.store(start_tick);
    if (file_ != nullptr && crash_target_ != nullptr)
      file_->step_began(crash_target_->step.load(std::memory_order_relaxed), start_tick);
  }

  /// Notes in the flight log's file that the process is alive, and writes the names the threads'
  /// events used since it last did: the watcher's, every 200 ms, off the training thread. A
  /// process killed mid-step leaves the names of the step in progress but its last 200 ms.
  void note_progress() {
    if (file_ == nullptr) return;
    RingRegistry::instance().visit_all([&](ThreadRing& ring) {
      if (ring.file_slot() != nullptr) file_->write_new_names(ring);
    });
    file_->note_alive();
  }

  /// Why step `step`, in progress, is dumped while it runs, or nothing: one that has run longer
  /// than slow_step_factor times the median of the steps before it, and half a second more, is
  /// dumped once, with what every thread is inside (detail/control/watchdog.hpp). It shares the
  /// slow steps' limit of one dump a minute: a hang found sooner after one is dumped once that
  /// minute has passed, if the step still runs.
  std::optional<std::string> hang(std::int64_t step) {
    if (!window_.step_recorded()) return std::nullopt;
    const std::int64_t now_tick = now_ticks();
    const double ns_per_tick = process_ns_per_tick();
    const std::int64_t running = now_tick - window_.step_start_ticks();
    if (!slow_steps_.step_running(running, ns_per_tick, clock_ns(CLOCK_MONOTONIC))) return std::nullopt;
    return hang_reason(step, running, *slow_steps_.median_ticks(), ns_per_tick, crash_target_->header.step_os_tid,
                       threads_inside_now(), now_tick);
  }

  /// The kept steps, and step `step` in progress so far, as one window marked with `reason`; the
  /// log starts over.
  std::shared_ptr<ClosedWindow> dump(std::string reason, std::int64_t step) {
    const ClockSample now = sample_clocks();
    const std::int64_t from = log_->window_start_tick();
    DrainedEvents kept = log_->take(now.ticks);
    if (window_.step_recorded()) window_.sample_thread_cpu();  // the step in progress, so far; the next dump's first reading
    if (window_.step_recorded()) {  // the step in progress, so far
      const std::int64_t stepping_tid = crash_target_->header.step_os_tid;
      auto stepping = std::find_if(kept.threads.begin(), kept.threads.end(),
                                   [&](const DrainedEvents::Thread& t) { return t.os_tid == stepping_tid; });
      if (stepping == kept.threads.end()) {
        kept.threads.push_back({stepping_tid, thread_ordinal(), {}, {}});
        stepping = kept.threads.end() - 1;
      }
      stepping->events.push_back(
          Event{static_cast<NameId>(step), window_.step_start_ticks(), {now.ticks}, RecordKind::Step, Category::Step, 0});
      ++kept.clipped_open;
    }
    auto window = std::make_shared<ClosedWindow>();
    window->drained = std::move(kept);
    window->thread_cpu = window_.take_thread_cpu(from, /*keep_last_round=*/true);
    window->device_activity = window_.take_device_activity();
    window->clock = ClockMap::through(origin_, now, process_ns_per_tick());
    window->start_ns = window->clock.to_realtime_ns(from);
    window->end_ns = now.realtime_ns;
    window->overflowed_names = window_.take_overflowed_names();
    window->stackless_events = window_.take_stackless_events();
    window->flight_reason = std::move(reason);
    window_.describe(*window);
    ++dumps_;
    dumped_in_step_ = true;
    return window;
  }

  /// Dumps written since construction, and slow steps not dumped because one was dumped less than
  /// a minute before.
  std::uint64_t dumps() const noexcept { return dumps_; }
  std::uint64_t slow_steps_not_dumped() const noexcept { return slow_steps_.slow_steps_not_dumped(); }

 private:
  /// Prepares what a fatal signal's handler writes, which may then only fill in the moment.
  void arm_crash_dumps(std::int64_t step, std::uint32_t generation, DumpOnTerminate dump_on_terminate, void* profiler) {
    auto target = std::make_unique<CrashTarget>();
    target->log = log_.get();
    target->names_seen = std::make_unique<WrittenNames>();
    target->generation = generation;
    CrashHeader& header = target->header;
    std::memcpy(header.magic, kCrashMagic, sizeof(header.magic));
    header.version = kCrashFileVersion;
    header.header_bytes = sizeof(CrashHeader);
    fill_identity(header);
    header.origin = origin_;
    header.ns_per_tick = process_ns_per_tick();
    target->step.store(step, std::memory_order_relaxed);
    target->dump = dump_on_terminate;
    target->profiler = profiler;
    target->flight_log_file = file_.get();
    if (const std::optional<TraceDirectory> crash_files = options_.crash_file_directory()) {
      const std::string prefix = fmt::format("{}/{}.", crash_files->directory, crash_files->worker);
      if (const int error = make_directories(crash_files->directory); error != 0)
        print_warning_once(fmt::format("flight recorder: cannot create the trace directory '{}' ({}): a crash will leave no file",
                                       terminal_text(crash_files->directory), errno_text(error)));
      else if (prefix.size() + 48 > sizeof(target->path_prefix))
        print_warning_once(fmt::format("flight recorder: the trace directory's path is longer than {} bytes: a crash will "
                                       "leave no file",
                                       sizeof(target->path_prefix) - 48));
      else
        std::memcpy(target->path_prefix, prefix.data(), prefix.size());
    }
    install_fatal_signal_handlers();
    install_terminate_handler();
    install_exit_note();
    crash_target_ = std::move(target);
    g_crash_target.store(crash_target_.get(), std::memory_order_release);
  }

  /// The process, as the crash file's header and the flight log's name it: the same fields in both.
  template <class Header>
  static void fill_identity(Header& header) {
    header.clock_is_tsc = g_use_tsc.load(std::memory_order_relaxed) ? 1 : 0;
    header.pid = static_cast<std::int64_t>(::getpid());
    header.step_os_tid = current_os_tid();
    const DistributedInfo distributed = distributed_info_from_environment();
    header.rank = distributed.rank;
    header.world_size = distributed.world_size;
    const std::string process = process_name();
    std::memcpy(header.process_name, process.data(), std::min(process.size(), sizeof(header.process_name) - 1));
  }

  /// With a trace directory, the rings of the threads that record from now on live in a new
  /// flight log file there (flight_log_file.hpp); without one, or where it cannot be made (said
  /// once), on the heap.
  void open_log_file(std::int64_t step) {
    close_log_file();
    const std::optional<TraceDirectory> directory = options_.crash_file_directory();
    if (!directory || make_directories(directory->directory) != 0) return;  // arm_crash_dumps() says so
    FlightLogHeader identity{};
    fill_identity(identity);
    const ProcessBirth birth = this_process_birth();
    identity.process_start_ticks = birth.start_ticks;
    std::memcpy(identity.boot_id, birth.boot_id, sizeof(identity.boot_id));
    identity.step = step;
    identity.step_start_tick = INT64_MIN;
    std::string problem;
    file_ = FlightLogFile::create(directory->directory, directory->worker, round_up_to_power_of_two(options_.events_per_thread()),
                                  identity, problem);
    if (file_ == nullptr) {
      print_warning_once(fmt::format("flight recorder: {}: a process killed without a chance to dump (SIGKILL, the OOM "
                                     "killer) will leave no log",
                                     terminal_text(problem)));
      return;
    }
    RingRegistry::instance().place_rings(file_);
  }

  /// The rings go back to the heap, and the file is deleted: nothing is left to read in it. The
  /// file stays mapped while a thread holds a ring placed in it.
  void close_log_file() {
    if (file_ == nullptr) return;
    RingRegistry::instance().place_rings(nullptr);
    file_->remove();
    file_.reset();
  }

  BasicWindowRecorder<Deferred>& window_;
  const ProfilerOptions& options_;
  std::shared_ptr<FlightLogFile> file_;        // where the rings live, with a trace directory
  std::unique_ptr<FlightLog> log_;             // the last steps
  std::unique_ptr<CrashTarget> crash_target_;  // what a fatal signal writes
  ClockSample origin_{};                       // when recording began: the crash file's clock
  SlowStepPolicy slow_steps_;
  std::uint64_t dumps_ = 0;
  bool dumped_in_step_ = false;  // a dump ran in the step in progress
};

using FlightRecorder = BasicFlightRecorder<>;

}  // namespace detail
DLPROF_END_NAMESPACE
