// dlprof/format/launch_protocol.hpp: what a job's launcher, dlprof-capture and the job say to one
// another, spelled once: the DLPROF_* variable names, the words of their values (modes, which
// are the modes' names of schedule.hpp, activities, schedules, flags, counts, signals), the trigger file's grammar (parsed by the
// Profiler, written by dlprof-capture) and the names of the files a job leaves in its trace
// directory. settings.hpp applies the variables to a Profiler; README.md ("Leave it on") lists
// them for users.
#pragma once

#include <signal.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include "dlprof/activity.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/crash_file.hpp"
#include "dlprof/format/flight_log_file.hpp"
#include "dlprof/schedule.hpp"

DLPROF_BEGIN_NAMESPACE

namespace detail {

/// Every DLPROF_* variable dlprof reads; another name is warned about.
inline constexpr std::string_view kSettingNames[] = {
    "DLPROF_MODE",          "DLPROF_SCHEDULE",       "DLPROF_ACTIVITIES",        "DLPROF_OUTPUT",
    "DLPROF_WORKER",        "DLPROF_GZIP",           "DLPROF_RECORD_SHAPES",     "DLPROF_PROFILE_MEMORY",
    "DLPROF_WITH_FLOPS",    "DLPROF_GPU_RECORDS",    "DLPROF_EVENTS_PER_THREAD", "DLPROF_CONFIG",
    "DLPROF_NVTX",          "DLPROF_CUPTI_LIBRARY",  "DLPROF_SIGNAL",            "DLPROF_TRIGGER_FILE",
    "DLPROF_FLIGHT_STEPS",  "DLPROF_SLOW_STEP_FACTOR", "DLPROF_WITH_STACK",       "DLPROF_STACK_DEPTH",
    "DLPROF_STACK_UNWINDER"};

inline bool is_setting_name(std::string_view name) noexcept {
  for (const std::string_view known : kSettingNames)
    if (name == known) return true;
  return false;
}

/// DLPROF_USE_CUDA, DLPROF_BUILD_TESTS, ...: the names of dlprof's CMake options, which a
/// launcher may set in the environment by mistake. (Compile definitions are DLPROF_HAS_*.)
inline bool is_build_option_name(std::string_view name) noexcept {
  return starts_with(name, "DLPROF_USE_") || starts_with(name, "DLPROF_BUILD_");
}

inline std::string_view trimmed(std::string_view text) noexcept {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

inline std::string lowercase(std::string_view text) {
  std::string lower(text);
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return lower;
}

/// 1/0, true/false, yes/no, on/off, in any case.
inline std::optional<bool> parse_flag(std::string_view text) {
  const std::string word = lowercase(trimmed(text));
  if (word == "1" || word == "true" || word == "yes" || word == "on") return true;
  if (word == "0" || word == "false" || word == "no" || word == "off") return false;
  return std::nullopt;
}

/// A decimal count: digits only, at most 2^63 - 1.
inline std::optional<std::int64_t> parse_count(std::string_view text) {
  text = trimmed(text);
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (value > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

/// A decimal number from 0, such as 3 or 2.5.
inline std::optional<double> parse_factor(std::string_view text) {
  const std::string word(trimmed(text));
  if (word.empty() || word.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(word.c_str(), &end);
  if (end != word.c_str() + word.size() || !(value >= 0) || value > 1e9) return std::nullopt;
  return value;
}

/// `wait,warmup,active[,repeat[,skip_first]]`, as torch.profiler.schedule's arguments. Sets
/// `problem` and returns nothing when the text is not one.
inline std::optional<Schedule> parse_schedule(std::string_view text, std::string& problem) {
  std::int64_t fields[5] = {0, 0, 0, 0, 0};
  std::size_t count = 0;
  bool valid = true;
  for_each_field(text, ",", /*skip_empty=*/false, [&](std::string_view piece) {
    const std::optional<std::int64_t> field = parse_count(piece);
    valid = field.has_value() && count < 5;
    if (valid) fields[count++] = *field;
    return valid;
  });
  if (!valid || count < 3) {
    problem = "expected wait,warmup,active[,repeat[,skip_first]]: three to five counts";
    return std::nullopt;
  }
  try {
    return schedule(fields[0], fields[1], fields[2], fields[3], fields[4]);
  } catch (const std::invalid_argument& error) {
    problem = error.what();
    return std::nullopt;
  }
}

/// A DLPROF_MODE word, in any case: a mode's name (to_string(Mode), schedule.hpp).
inline std::optional<Mode> parse_mode(std::string_view text) {
  const std::string word = lowercase(trimmed(text));
  for (const Mode mode : {Mode::Scheduled, Mode::Off, Mode::OnDemand, Mode::FlightRecorder})
    if (word == to_string(mode)) return mode;
  return std::nullopt;
}

/// The modes that take requests for a capture or a dump, by signal or trigger file.
inline constexpr bool takes_requests(Mode mode) noexcept { return mode == Mode::OnDemand || mode == Mode::FlightRecorder; }

/// cpu, cuda or cpu,cuda, as DLPROF_ACTIVITIES and a trigger file's activities= give them.
inline std::optional<std::vector<Activity>> parse_activities(std::string_view text) {
  std::vector<Activity> kinds;
  bool valid = true;
  for_each_field(text, ",", /*skip_empty=*/false, [&](std::string_view piece) {
    const std::string word = lowercase(trimmed(piece));
    if (word == "cpu")
      kinds.push_back(Activity::CPU);
    else if (word == "cuda")
      kinds.push_back(Activity::CUDA);
    else
      valid = false;
    return valid;
  });
  if (!valid) return std::nullopt;
  return kinds;
}

/// The signal that asks for a capture or a dump when DLPROF_SIGNAL does not name one.
inline constexpr int kDefaultCaptureSignal = SIGUSR2;

/// A signal that may ask for a capture: a number, or a name such as USR2 or SIGUSR2. Signals that
/// mean a fault, or that cannot be caught, are refused.
inline std::optional<int> parse_capture_signal(std::string_view text) {
  std::string name = lowercase(trimmed(text));
  if (starts_with(name, "sig")) name.erase(0, 3);
  int signal = 0;
  if (name == "usr1")
    signal = SIGUSR1;
  else if (name == "usr2")
    signal = SIGUSR2;
  else if (name == "hup")
    signal = SIGHUP;
  else if (const std::optional<std::int64_t> number = parse_count(name); number && *number <= SIGRTMAX)
    signal = static_cast<int>(*number);
  for (const int refused : {0, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
    if (signal == refused) return std::nullopt;
  return signal;
}

/// DLPROF_SIGNAL's value: a capture signal (parse_capture_signal), or 0 for `none`.
inline std::optional<int> parse_signal_setting(std::string_view text) {
  if (lowercase(trimmed(text)) == "none") return 0;
  return parse_capture_signal(text);
}

/// On demand: the steps a capture records when the request names no number, and the most it may.
inline constexpr std::int64_t kDefaultCaptureSteps = 5;
inline constexpr std::int64_t kMaxCaptureSteps = 1'000'000;
/// On demand, in a program that does not call step(): how long a capture records when the request
/// says no time, and the most it may.
inline constexpr std::int64_t kDefaultCaptureNs = 10'000'000'000;
inline constexpr std::int64_t kMaxCaptureNs = 86'400'000'000'000;

/// A request for a capture: how many steps (or, with duration_ns, how long), and the options the
/// capture records with where they differ from the Profiler's.
struct CaptureRequest {
  std::int64_t steps = kDefaultCaptureSteps;
  std::int64_t duration_ns = 0;  ///< > 0: a capture of this long, whether or not steps are taken
  std::optional<bool> record_shapes;
  std::optional<bool> profile_memory;
  std::optional<bool> with_flops;
  std::optional<bool> with_stack;
  std::optional<std::vector<Activity>> activities;
  std::string source;  ///< what asked, for messages
};

/// The capture a trigger file asks for. Its text is empty (the defaults) or words of the form
/// key=value between blanks: steps=N, seconds=T (a capture of T seconds instead of steps: for a
/// program that does not call step()), record_shapes=B, profile_memory=B, with_flops=B, with_stack=B (B as
/// DLPROF_RECORD_SHAPES takes it) and activities=cpu|cuda|cpu,cuda. Anything else is warned about
/// through `problems`, and left out of the request.
template <class Deferred = void>
CaptureRequest parse_capture_request(std::string_view text, std::vector<std::string>& problems) {
  CaptureRequest request;
  request.source = "the trigger file";
  for_each_field(text, " \t\r\n", /*skip_empty=*/true, [&](std::string_view word) {
    const std::size_t equals = word.find('=');
    const std::string_view key = word.substr(0, equals);
    const std::string_view value = equals == std::string_view::npos ? std::string_view() : word.substr(equals + 1);
    const auto flag = [&](std::optional<bool>& field) {
      field = parse_flag(value);
      if (!field) problems.push_back(fmt::format("trigger file: '{}': expected {}=1 or {}=0", terminal_text(word), key, key));
    };
    if (key == "steps") {
      const std::optional<std::int64_t> count = parse_count(value);
      if (count && *count >= 1 && *count <= kMaxCaptureSteps)
        request.steps = *count;
      else
        problems.push_back(fmt::format("trigger file: '{}' is not steps=N with N in [1, {}]; capturing {} steps",
                                       terminal_text(word), kMaxCaptureSteps, request.steps));
    } else if (key == "seconds") {
      const std::optional<double> seconds = parse_factor(value);
      if (seconds && *seconds > 0 && *seconds * 1e9 <= static_cast<double>(kMaxCaptureNs))
        request.duration_ns = static_cast<std::int64_t>(*seconds * 1e9);
      else
        problems.push_back(fmt::format("trigger file: '{}' is not seconds=T with T in (0, {}]", terminal_text(word),
                                       kMaxCaptureNs / 1'000'000'000));
    } else if (key == "record_shapes") {
      flag(request.record_shapes);
    } else if (key == "profile_memory") {
      flag(request.profile_memory);
    } else if (key == "with_flops") {
      flag(request.with_flops);
    } else if (key == "with_stack") {
      flag(request.with_stack);
    } else if (key == "activities") {
      request.activities = parse_activities(value);
      if (!request.activities)
        problems.push_back(fmt::format("trigger file: '{}': expected activities=cpu, cuda or cpu,cuda", terminal_text(word)));
    } else {
      problems.push_back(fmt::format("trigger file: '{}' is not one of steps=, seconds=, record_shapes=, profile_memory=, "
                                     "with_flops=, with_stack=, activities=; left out",
                                     terminal_text(word)));
    }
    return true;
  });
  return request;
}

/// The text of a trigger file asking for `request` (its source aside): what parse_capture_request
/// reads back as the same request. An empty text asks for the defaults.
inline std::string format_capture_request(const CaptureRequest& request) {
  std::string text;
  const auto word = [&text](std::string_view key, const std::string& value) {
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", key, value);
  };
  if (request.steps != kDefaultCaptureSteps) word("steps", std::to_string(request.steps));
  if (request.duration_ns > 0) {
    std::string seconds = fmt::format("{}.{:09}", request.duration_ns / 1'000'000'000, request.duration_ns % 1'000'000'000);
    while (seconds.back() == '0') seconds.pop_back();
    if (seconds.back() == '.') seconds.pop_back();
    word("seconds", seconds);
  }
  const auto flag = [&word](std::string_view key, const std::optional<bool>& value) {
    if (value) word(key, *value ? "1" : "0");
  };
  flag("record_shapes", request.record_shapes);
  flag("profile_memory", request.profile_memory);
  flag("with_flops", request.with_flops);
  flag("with_stack", request.with_stack);
  if (request.activities) {
    std::string kinds;
    for (const Activity kind : *request.activities)
      kinds += fmt::format("{}{}", kinds.empty() ? "" : ",", kind == Activity::CPU ? "cpu" : "cuda");
    word("activities", kinds);
  }
  return text.empty() ? text : text + "\n";
}

/// What tensorboard_trace_handler names a trace: `<worker>.<unix_time_ns>` and this, with
/// kGzipSuffix after it when compressed. A crash file ends in kCrashFileSuffix instead.
inline constexpr std::string_view kTraceFileSuffix = ".pt.trace.json";
inline constexpr std::string_view kGzipSuffix = ".gz";

/// Whether a trace directory's file is a trace the reader takes (dlprof-report DIR) and that
/// dlprof-capture waits for: a JSON trace, gzipped or not, whoever wrote it (torch.profiler,
/// dlprof, HTA's samples), or a flight recorder's crash file.
inline bool is_trace_file_name(std::string_view name) noexcept {
  const auto ends_with = [name](std::string_view suffix) {
    return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  return ends_with(".json") || ends_with(kGzipSuffix) || ends_with(kCrashFileSuffix);
}

/// Whether a trace directory's file is a flight log's file (format/flight_log_file.hpp): the
/// reader takes it once its process has ended; dlprof-capture never waits for one.
inline bool is_flight_log_file_name(std::string_view name) noexcept {
  return name.size() > kFlightLogSuffix.size() && name.substr(name.size() - kFlightLogSuffix.size()) == kFlightLogSuffix;
}

}  // namespace detail

DLPROF_END_NAMESPACE
