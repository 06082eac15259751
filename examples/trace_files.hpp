// Shared by the examples: where the trace a run just wrote is.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace dlprof_examples {

/// The most recently written `*.pt.trace.json` in `dir` (tensorboard_trace_handler's naming), if any.
inline std::optional<std::filesystem::path> newest_trace_file(const std::filesystem::path& dir) {
  constexpr std::string_view kSuffix = ".pt.trace.json";
  std::optional<std::filesystem::path> newest;
  std::filesystem::file_time_type newest_time{};
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool is_trace =
        name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
    if (!is_trace || !entry.is_regular_file(error)) continue;
    const auto time = entry.last_write_time(error);
    if (error || (newest && time <= newest_time)) continue;
    newest = entry.path();
    newest_time = time;
  }
  return newest;
}

}  // namespace dlprof_examples
