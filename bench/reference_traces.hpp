// bench/reference_traces.hpp: the traces written by torch.profiler that the reader and analysis
// benchmarks read (tests/data/reference-traces, one directory per set), the largest first.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace dlprof_bench {

struct ReferenceTrace {
  const char* label;
  const char* directory;
};

inline constexpr ReferenceTrace kReferenceTraces[] = {
    {"v100_resnet_ns", "hta-1rank-v100-resnet-ns"},  // 68.7k events, 15 MB of JSON
    {"a100_sampled_rank0", "hta-2rank-a100-sampled"},
    {"a100_simple_add", "hta-1rank-a100-simple-add"},
};

/// The first file of a set, by name (rank 0 of a multi-rank set).
inline std::string first_file(const char* directory) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(DLPROF_REFERENCE_TRACES_DIR) / directory))
    files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files.empty() ? std::string() : files.front();
}

}  // namespace dlprof_bench
