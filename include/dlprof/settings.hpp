// dlprof/settings.hpp: the settings a job's launcher gives a Profiler without recompiling it. A
// setting comes from, in this order of precedence:
//   1. the environment: DLPROF_SCHEDULE=1,1,3 and the other DLPROF_* variables;
//   2. the file DLPROF_CONFIG names, in the spirit of Kineto's KINETO_CONFIG: one
//      `DLPROF_NAME = value` per line, `#` starting a comment;
//   3. the ProfilerOptions the program sets.
// A value that does not parse, or that the Profiler refuses, is warned about (the variable, the
// value, where it came from and what is kept) and changes nothing: the job never dies over a
// profiler setting. An unknown DLPROF_* name is warned about too, in case it is a misspelling.
// The names and the words of their values are format/launch_protocol.hpp's; README.md ("Leave
// it on") lists them. detail/control/launched_options.hpp lays them over a program's options.
#pragma once

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
#include "dlprof/format/launch_protocol.hpp"

DLPROF_BEGIN_NAMESPACE

namespace detail {

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
      settings.warnings.push_back(
          is_build_option_name(name)
              ? terminal_text(name) + " is an option of dlprof's CMake build, not a setting: dlprof ignores it in the environment"
              : "unknown variable " + terminal_text(name) + " in the environment: dlprof ignores it");
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
