// dlprof/schedule.hpp: when a Profiler records. Its mode, and in the scheduled mode the steps its
// schedule selects, with torch.profiler.schedule's exact semantics (skip_first, wait, warmup,
// active, repeat, skip_first_wait).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string_view>

#include <fmt/core.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE

/// When the Profiler records (ProfilerOptions::mode, DLPROF_MODE).
///  * Scheduled: the steps its schedule selects.
///  * Off: never; every range stays idle, and start(), step() and stop() count steps and do
///    nothing else, allocating nothing.
///  * OnDemand: when asked, the next steps (Profiler::capture(), the capture signal, the trigger
///    file), then it goes back to idle and can be asked again.
///  * FlightRecorder: always, into memory that holds the last steps; a trace of them is written
///    when asked (Profiler::dump(), the signal, the trigger file), after a slow step, when an
///    exception leaves a ProfilingScope, on std::terminate and on a fatal signal.
enum class Mode : std::uint8_t { Scheduled, Off, OnDemand, FlightRecorder };

/// The mode's name, which is also its DLPROF_MODE word (format/launch_protocol.hpp):
/// "scheduled", "off", "on-demand" or "flight-recorder".
constexpr std::string_view to_string(Mode mode) noexcept {
  switch (mode) {
    case Mode::Scheduled: return "scheduled";
    case Mode::Off: return "off";
    case Mode::OnDemand: return "on-demand";
    case Mode::FlightRecorder: return "flight-recorder";
  }
  return "scheduled";
}

/// What the profiler does during a step. Values match torch.profiler.ProfilerAction.
enum class Action : std::uint8_t {
  None = 0,          ///< not profiling
  Warmup = 1,        ///< backends armed, nothing recorded
  Record = 2,        ///< recording
  RecordAndSave = 3  ///< recording; the trace is handed to on_trace_ready when this step ends
};

constexpr std::string_view to_string(Action action) noexcept {
  switch (action) {
    case Action::None: return "None";
    case Action::Warmup: return "Warmup";
    case Action::Record: return "Record";
    case Action::RecordAndSave: return "RecordAndSave";
  }
  return "None";
}

/// What torch.profiler's action map does to the trace on the step from one action to the next.
struct ActionMapSteps {
  bool save = false;     ///< the window ends and its trace goes to the handlers
  bool discard = false;  ///< the window ends and its events are dropped, unsaved
  bool warn = false;     ///< torch warns "Incorrect schedule" (the steps are discarded)
  bool arm = false;      ///< the collectors are prepared for a window
  bool start = false;    ///< a window begins recording
};

/// The action map's steps from `previous` to `current`: RecordAndSave saves its window (and
/// prepares, or starts, the next); a recording window left for None or Warmup is discarded with
/// a warning, as is a warm-up followed by None; None leaving for Warmup or a recording action
/// prepares the collectors, and a recording action after a non-recording one starts the window.
constexpr ActionMapSteps action_map_steps(Action previous, Action current) noexcept {
  const bool was_recording = previous == Action::Record || previous == Action::RecordAndSave;
  const bool recording = current == Action::Record || current == Action::RecordAndSave;
  ActionMapSteps steps;
  if (previous == Action::RecordAndSave) {
    steps.save = true;
    steps.arm = current != Action::None;
    steps.start = recording;
  } else if (was_recording && !recording) {
    steps.discard = true;
    steps.warn = true;
  } else if (previous == Action::Warmup && current == Action::None) {
    steps.warn = true;
  } else {
    steps.arm = previous == Action::None && current != Action::None;
    steps.start = !was_recording && recording;
  }
  return steps;
}

/// A pure function from step number to Action. Default-constructed, it records every step
/// (torch's default when no schedule is given).
class Schedule {
 public:
  Schedule() = default;

  Action operator()(std::int64_t step) const noexcept {
    if (!cycles_) return Action::Record;
    if (step < skip_first_) return Action::None;
    step -= skip_first_;
    if (skip_first_wait_) step = step > INT64_MAX - wait_ ? INT64_MAX : step + wait_;
    const std::int64_t period = wait_ + warmup_ + active_;
    // torch compares step / period >= repeat in floating point; for non-negative integers that is
    // the same as integer division.
    if (repeat_ > 0 && step / period >= repeat_) return Action::None;
    const std::int64_t phase = step % period;
    if (phase < wait_) return Action::None;
    if (phase < wait_ + warmup_) return Action::Warmup;
    return phase < period - 1 ? Action::Record : Action::RecordAndSave;
  }

  /// False for the default schedule (record everything, no ProfilerStep events).
  bool has_cycles() const noexcept { return cycles_; }

  std::int64_t wait() const noexcept { return wait_; }
  std::int64_t warmup() const noexcept { return warmup_; }
  std::int64_t active() const noexcept { return active_; }
  std::int64_t repeat() const noexcept { return repeat_; }
  std::int64_t skip_first() const noexcept { return skip_first_; }
  bool skip_first_wait() const noexcept { return skip_first_wait_; }

 private:
  friend Schedule schedule(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool);

  bool cycles_ = false;
  std::int64_t wait_ = 0;
  std::int64_t warmup_ = 0;
  std::int64_t active_ = 1;
  std::int64_t repeat_ = 0;
  std::int64_t skip_first_ = 0;
  bool skip_first_wait_ = false;
};

/// The schedule torch.profiler.schedule(wait=, warmup=, active=, repeat=, skip_first=,
/// skip_first_wait=) describes: skip `skip_first` steps, then repeat cycles of `wait` idle steps,
/// `warmup` warm-up steps and `active` recorded steps, `repeat` times (0: until stopped). The
/// last active step of a cycle is RecordAndSave. With `skip_first_wait` the first cycle skips its
/// wait phase. Throws std::invalid_argument naming the first invalid argument.
inline Schedule schedule(std::int64_t wait, std::int64_t warmup, std::int64_t active, std::int64_t repeat = 0,
                         std::int64_t skip_first = 0, bool skip_first_wait = false) {
  // A bound on each phase keeps every sum the schedule forms (the period, a step plus wait) in
  // range: a cycle of 2^60 steps is far beyond any training run.
  constexpr std::int64_t kMaxSteps = std::int64_t{1} << 60;
  const auto require_in_range = [&](std::string_view name, std::int64_t value, std::int64_t least) {
    if (value < least || value > kMaxSteps)
      throw std::invalid_argument(fmt::format("dlprof::schedule: {} must be in [{}, 2^60], got {}", name, least, value));
  };
  require_in_range("wait", wait, 0);
  require_in_range("warmup", warmup, 0);
  require_in_range("active", active, 1);
  require_in_range("repeat", repeat, 0);
  require_in_range("skip_first", skip_first, 0);
  Schedule result;
  result.cycles_ = true;
  result.wait_ = wait;
  result.warmup_ = warmup;
  result.active_ = active;
  result.repeat_ = repeat;
  result.skip_first_ = skip_first;
  result.skip_first_wait_ = skip_first_wait;
  return result;
}

DLPROF_END_NAMESPACE
