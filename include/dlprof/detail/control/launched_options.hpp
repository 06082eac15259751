// dlprof/detail/control/launched_options.hpp: the launcher's word over a program's
// ProfilerOptions. apply_settings() lays the DLPROF_* settings of the environment and of the
// DLPROF_CONFIG file (settings.hpp, format/launch_protocol.hpp) over them, and what was wrong with
// those settings becomes warnings, printed once a process.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/launch_protocol.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/settings.hpp"

DLPROF_BEGIN_NAMESPACE
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
  flag("DLPROF_WITH_STACK", set.with_stack(), [&](bool on) { set.with_stack(on); });
  if (const Setting* unwinder = settings.find("DLPROF_STACK_UNWINDER")) {
    if (unwinder->value == to_string(StackUnwinder::UnwindTables))
      set.stack_unwinder(StackUnwinder::UnwindTables);
    else if (unwinder->value == to_string(StackUnwinder::FramePointers))
      set.stack_unwinder(StackUnwinder::FramePointers);
    else
      refuse(*unwinder, "expected unwind_tables or frame_pointers", to_string(set.stack_unwinder()));
  }
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
  count("DLPROF_STACK_DEPTH", set.stack_depth(), [&](std::size_t n) { set.stack_depth(n); });

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
