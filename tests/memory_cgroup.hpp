// A memory cgroup of a test's own, under the cgroup this process is in (cgroup v1's memory
// hierarchy or cgroup v2), where the test may make one: a child process moved into it and
// limited is killed by the kernel's OOM killer when it takes more, as a job is in a container.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dlprof_test {

class MemoryCgroup {
 public:
  explicit MemoryCgroup(const std::string& name) {
    namespace fs = std::filesystem;
    std::ifstream cgroups("/proc/self/cgroup");
    std::string v1;
    std::string v2;
    for (std::string line; std::getline(cgroups, line);) {
      const std::size_t first = line.find(':');
      const std::size_t second = line.find(':', first + 1);
      if (first == std::string::npos || second == std::string::npos) continue;
      const std::string controllers = line.substr(first + 1, second - first - 1);
      const std::string path = line.substr(second + 1);
      if ((',' + controllers + ',').find(",memory,") != std::string::npos) v1 = "/sys/fs/cgroup/memory" + path;
      if (controllers.empty()) v2 = (fs::exists("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified") + path;
    }
    for (const std::string& parent : {v1, v2}) {
      if (parent.empty()) continue;
      const fs::path dir = fs::path(parent) / name;
      std::error_code error;
      if (!fs::create_directory(dir, error)) {
        problem_ = "cannot make " + dir.string() + ": " + (error ? error.message() : "it exists");
        continue;
      }
      limit_file_ = fs::exists(dir / "memory.limit_in_bytes") ? "memory.limit_in_bytes"
                    : fs::exists(dir / "memory.max")         ? "memory.max"
                                                             : "";
      if (limit_file_.empty()) {
        problem_ = dir.string() + " has no memory controller";
        fs::remove(dir, error);
        continue;
      }
      dir_ = dir;
      return;
    }
    if (problem_.empty()) problem_ = "this process is in no memory cgroup";
  }

  ~MemoryCgroup() {
    if (dir_.empty()) return;
    for (int tries = 0; tries < 50; ++tries) {  // empty once the child it held is reaped
      std::error_code error;
      if (std::filesystem::remove(dir_, error) || !std::filesystem::exists(dir_)) return;
      ::usleep(20'000);
    }
  }

  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  bool made() const { return !dir_.empty(); }
  const std::string& problem() const { return problem_; }

  /// Limits the cgroup to `bytes` (swap included where the kernel counts it) and moves process
  /// `pid` into it: what it allocates from then on counts.
  bool limit(pid_t pid, std::uint64_t bytes) {
    const bool v1 = limit_file_ == "memory.limit_in_bytes";
    if (!write(limit_file_, std::to_string(bytes))) return false;
    if (v1 && std::filesystem::exists(dir_ / "memory.memsw.limit_in_bytes")) write("memory.memsw.limit_in_bytes", std::to_string(bytes));
    if (!v1 && std::filesystem::exists(dir_ / "memory.swap.max")) write("memory.swap.max", "0");
    return write("cgroup.procs", std::to_string(pid));
  }

 private:
  bool write(const std::string& file, const std::string& value) {
    std::ofstream out(dir_ / file);
    out << value << std::flush;
    if (out) return true;
    problem_ = "cannot write " + value + " to " + (dir_ / file).string() + ": " + std::strerror(errno);
    return false;
  }

  std::filesystem::path dir_;
  std::string limit_file_;
  std::string problem_;
};

}  // namespace dlprof_test
