// dlprof/settings.hpp: the settings a job's launcher gives a Profiler without recompiling it. A
// setting comes from, in this order of precedence:
//   1. the environment: DLPROF_SCHEDULE=1,1,3 and the other DLPROF_* variables;
//   2. the file DLPROF_CONFIG names, in the spirit of Kineto's KINETO_CONFIG: one
//      `DLPROF_NAME = value` per line, `#` starting a comment;
//   3. the ProfilerOptions the program sets.
// A value that does not parse, or that the Profiler refuses, is warned about (the variable, the
// value, where it came from and what is kept) and changes nothing: the job never dies over a
// profiler setting. An unknown DLPROF_* name is warned about too, in case it is a misspelling.
// The variables are listed in README.md ("Leave it on").
#pragma once

#include <signal.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/schedule.hpp"

DLPROF_BEGIN_NAMESPACE

/// DLPROF_MODE: when the Profiler records.
///  * Scheduled: the steps its schedule selects.
///  * Off: never; every range stays idle, and start(), step() and stop() count steps and do
///    nothing else, allocating nothing.
///  * OnDemand: when asked, the next steps (Profiler::capture(), the capture signal, the trigger
///    file), then it goes back to idle and can be asked again.
///  * FlightRecorder: always, into memory that holds the last steps; a trace of them is written
///    when asked (Profiler::dump(), the signal, the trigger file), after a slow step, when an
///    exception leaves a ProfilingScope, on std::terminate and on a fatal signal.
enum class Mode : std::uint8_t { Scheduled, Off, OnDemand, FlightRecorder };

namespace detail {

/// Every DLPROF_* variable dlprof reads; another name is warned about.
inline constexpr std::string_view kSettingNames[] = {
    "DLPROF_MODE",          "DLPROF_SCHEDULE",       "DLPROF_ACTIVITIES",        "DLPROF_OUTPUT",
    "DLPROF_WORKER",        "DLPROF_GZIP",           "DLPROF_RECORD_SHAPES",     "DLPROF_PROFILE_MEMORY",
    "DLPROF_WITH_FLOPS",    "DLPROF_GPU_RECORDS",    "DLPROF_EVENTS_PER_THREAD", "DLPROF_CONFIG",
    "DLPROF_NVTX",          "DLPROF_CUPTI_LIBRARY",  "DLPROF_SIGNAL",            "DLPROF_TRIGGER_FILE",
    "DLPROF_FLIGHT_STEPS",  "DLPROF_SLOW_STEP_FACTOR"};

inline bool is_setting_name(std::string_view name) noexcept {
  for (const std::string_view known : kSettingNames)
    if (name == known) return true;
  return false;
}

/// One setting and where it came from: "the environment" or "<file>:<line>".
struct Setting {
  std::string name;
  std::string value;
  std::string origin;

  /// `DLPROF_SCHEDULE=abc (from the environment)`, the head of every warning about it.
  std::string described() const { return name + "=" + terminal_text(value) + " (from " + origin + ")"; }
};

/// The settings of one process: the environment's, then those of the DLPROF_CONFIG file that the
/// environment does not also set, with what was wrong with them.
struct Settings {
  std::vector<Setting> values;
  std::vector<std::string> warnings;

  const Setting* find(std::string_view name) const noexcept {
    for (const Setting& setting : values)
      if (setting.name == name) return &setting;
    return nullptr;
  }
};

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

/// DLPROF_MODE's words: scheduled, off, on-demand, flight-recorder (in any case).
inline std::optional<Mode> parse_mode(std::string_view text) {
  const std::string word = lowercase(trimmed(text));
  if (word == "scheduled") return Mode::Scheduled;
  if (word == "off") return Mode::Off;
  if (word == "on-demand") return Mode::OnDemand;
  if (word == "flight-recorder") return Mode::FlightRecorder;
  return std::nullopt;
}

/// The modes that take requests for a capture or a dump, by signal or trigger file.
inline constexpr bool takes_requests(Mode mode) noexcept { return mode == Mode::OnDemand || mode == Mode::FlightRecorder; }

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

/// Reads `DLPROF_NAME = value` lines from `path` into `settings`, leaving out names already set.
template <class Deferred = void>
void read_settings_file(const std::string& path, Settings& settings) {
  std::FILE* file = std::fopen(path.c_str(), "re");
  if (file == nullptr) {
    settings.warnings.push_back("DLPROF_CONFIG=" + terminal_text(path) + ": cannot read it (" + std::strerror(errno) +
                                "); its settings are not applied");
    return;
  }
  std::string text;
  char chunk[4096];
  for (std::size_t read = 0; (read = std::fread(chunk, 1, sizeof(chunk), file)) > 0;) text.append(chunk, read);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    settings.warnings.push_back("DLPROF_CONFIG=" + terminal_text(path) + ": reading it failed; its settings are not applied");
    return;
  }
  std::size_t line_number = 0;
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    ++line_number;
    if (const std::size_t comment = line.find('#'); comment != std::string_view::npos) line = line.substr(0, comment);
    line = trimmed(line);
    if (line.empty()) continue;
    const std::string origin = terminal_text(path) + ":" + std::to_string(line_number);
    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      settings.warnings.push_back(origin + ": expected DLPROF_NAME = value, got '" + terminal_text(line) + "'; line ignored");
      continue;
    }
    const std::string name(trimmed(line.substr(0, equals)));
    const std::string value(trimmed(line.substr(equals + 1)));
    if (!is_setting_name(name)) {
      settings.warnings.push_back(origin + ": unknown setting " + terminal_text(name) + "; line ignored");
      continue;
    }
    if (name == "DLPROF_CONFIG") {
      settings.warnings.push_back(origin + ": DLPROF_CONFIG is read from the environment only; line ignored");
      continue;
    }
    if (settings.find(name) == nullptr) settings.values.push_back(Setting{name, value, origin});
  }
}

/// The settings of `environment` (NAME=value strings, null-terminated, as `environ`) and of the
/// DLPROF_CONFIG file it names.
template <class Deferred = void>
Settings read_settings(const char* const* environment) {
  Settings settings;
  for (const char* const* entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (!starts_with(text, "DLPROF_")) continue;
    const std::size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string name(text.substr(0, equals));
    if (!is_setting_name(name)) {
      settings.warnings.push_back("unknown variable " + terminal_text(name) + " in the environment: dlprof ignores it");
      continue;
    }
    settings.values.push_back(Setting{name, std::string(text.substr(equals + 1)), "the environment"});
  }
  if (const Setting* config = settings.find("DLPROF_CONFIG"); config != nullptr && !config->value.empty()) {
    const std::string path = config->value;  // a copy: reading the file grows settings.values
    read_settings_file(path, settings);
  }
  return settings;
}

}  // namespace detail
DLPROF_END_NAMESPACE
