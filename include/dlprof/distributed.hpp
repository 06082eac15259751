// dlprof/distributed.hpp: this process's place in a distributed job, for the distributedInfo of
// the traces it writes: the launcher's rank variables, and the process groups, NCCL version and
// clock offset the program registers (dlprof/torch_distributed.hpp registers the groups it
// wraps). Process state, kept out of the trace model (trace.hpp) that the reader compiles.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A launcher's variable as an integer from 0; false when absent, empty or anything else.
inline bool parse_non_negative_integer(const char* text, std::int64_t* value) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < 0) return false;
  *value = parsed;
  return true;
}

/// Each window reads the variables again: the same bad value is reported once.
inline void warn_unusable_rank(const char* variable, const char* value) {
  struct Warned {
    std::mutex mutex;  // guards values
    std::set<std::string, std::less<>> values;
  };
  static Warned* const warned = new Warned;  // never destroyed: a Profiler stopped at exit may warn
  {
    const std::lock_guard<std::mutex> lock(warned->mutex);
    if (!warned->values.insert(std::string(variable) + '=' + value).second) return;
  }
  print_warning(std::string(variable) + "='" + value + "' is not a rank (an integer from 0): ignored");
}

/// The process groups a program registered, for the distributedInfo of its traces.
struct ProcessGroupRegistry {
  std::mutex mutex;
  std::vector<ProcessGroupInfo> groups;
  std::string nccl_version;
  std::optional<ClockOffset> clock_offset;
};

inline ProcessGroupRegistry& process_group_registry() {
  static ProcessGroupRegistry* registry = new ProcessGroupRegistry();  // never destroyed: used at exit
  return *registry;
}

}  // namespace detail

/// Reads the launchers' variables, first match wins: torchrun (RANK/WORLD_SIZE), Slurm
/// (SLURM_PROCID/SLURM_NTASKS), Open MPI (OMPI_COMM_WORLD_RANK/_SIZE), MPICH/PMI
/// (PMI_RANK/PMI_SIZE). Otherwise rank 0 of 1. A rank variable whose value is not an integer
/// from 0 ("-5", "abc") is passed over, with a warning on stderr (once per variable and value):
/// the next launcher's variables, or rank 0 of 1, are used instead. A world size that is
/// unusable or not above the rank becomes the rank plus one.
inline DistributedInfo distributed_info_from_environment() {
  static constexpr std::pair<const char*, const char*> kLaunchers[] = {
      {"RANK", "WORLD_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
  };
  DistributedInfo info;
  for (const auto& [rank_variable, size_variable] : kLaunchers) {
    const char* rank_text = std::getenv(rank_variable);
    if (rank_text == nullptr || *rank_text == '\0') continue;
    std::int64_t rank = 0;
    if (!detail::parse_non_negative_integer(rank_text, &rank)) {
      detail::warn_unusable_rank(rank_variable, rank_text);
      continue;
    }
    std::int64_t size = 0;
    info.rank = rank;
    info.world_size =
        detail::parse_non_negative_integer(std::getenv(size_variable), &size) && size > rank ? size : rank + 1;
    return info;
  }
  return info;
}

/// Lists `group` in the distributedInfo of the traces written from now on (a group of the same
/// name is replaced); the first group registered gives the backend. dlprof/torch_distributed.hpp
/// registers the groups it wraps.
inline void register_process_group(ProcessGroupInfo group) {
  detail::ProcessGroupRegistry& registry = detail::process_group_registry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  for (ProcessGroupInfo& known : registry.groups)
    if (known.name == group.name) {
      known = std::move(group);
      return;
    }
  registry.groups.push_back(std::move(group));
}

/// Writes `version` ("2.21.5", c10d::getNcclVersion()) as distributedInfo's nccl_version in the
/// traces written from now on.
inline void register_nccl_version(std::string_view version) {
  detail::ProcessGroupRegistry& registry = detail::process_group_registry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  registry.nccl_version = std::string(version);
}

/// Writes `offset` into the traces written from now on (ProfiledProcessGroup::align_clocks).
inline void set_clock_offset(const ClockOffset& offset) {
  detail::ProcessGroupRegistry& registry = detail::process_group_registry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  registry.clock_offset = offset;
}

/// The environment's rank and world size (distributed_info_from_environment) with the process
/// groups and the clock offset registered so far.
inline DistributedInfo distributed_info_of_this_process() {
  DistributedInfo info = distributed_info_from_environment();
  detail::ProcessGroupRegistry& registry = detail::process_group_registry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  info.groups = registry.groups;
  info.nccl_version = registry.nccl_version;
  info.clock_offset = registry.clock_offset;
  if (!info.groups.empty()) {
    const std::string& config = info.groups.front().backend_config;
    const std::size_t colon = config.find(':');
    info.backend = colon == std::string::npos ? config : config.substr(colon + 1);
  }
  return info;
}

DLPROF_END_NAMESPACE
