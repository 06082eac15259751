// Shared by the examples: command lines of `--flag value` and `--flag=value` arguments.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace dlprof_examples {

/// A command line the program cannot run with; the message says what is wrong.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `text` as an integer in [min, max], or a UsageError naming `flag`.
inline int parse_int(std::string_view flag, std::string_view text, int min, int max) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max)
    throw UsageError(fmt::format("{} expects an integer from {} to {}, got '{}'", flag, min, max, text));
  return value;
}

/// Calls `on_flag(flag, value)` for every `--flag value` or `--flag=value` argument whose flag is
/// in `known`, and `on_flag(flag, "")` for every flag in `switches`, which takes no value; `-h`
/// and `--help` set `help`. Anything else, or a flag without a value, is a UsageError.
template <class OnFlag>
void for_each_flag(int argc, char** argv, std::initializer_list<std::string_view> known,
                   std::initializer_list<std::string_view> switches, bool& help, OnFlag&& on_flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
      continue;
    }
    if (std::find(switches.begin(), switches.end(), arg) != switches.end()) {
      on_flag(arg, std::string_view());
      continue;
    }
    const std::size_t equals = arg.find('=');
    const std::string_view flag = arg.substr(0, equals);
    if (std::find(known.begin(), known.end(), flag) == known.end())
      throw UsageError(fmt::format("unknown option '{}'", arg));
    std::string_view value;
    if (equals != std::string_view::npos) value = arg.substr(equals + 1);
    else if (i + 1 < argc) value = argv[++i];
    else throw UsageError(fmt::format("{} needs a value", flag));
    on_flag(flag, value);
  }
}

/// As above, without switches.
template <class OnFlag>
void for_each_flag(int argc, char** argv, std::initializer_list<std::string_view> known, bool& help, OnFlag&& on_flag) {
  for_each_flag(argc, argv, known, {}, help, std::forward<OnFlag>(on_flag));
}

}  // namespace dlprof_examples
