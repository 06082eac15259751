// Running tests/settings/launched_training.cpp, a plain training loop, as a child process under
// the launcher's settings, and what tests judge it by: its exit, its output and the traces it leaves.
#pragma once

#include <dlprof/profiler.hpp>

#include "test_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

extern char** environ;

namespace dlprof_test {

/// Sets variables of this process's environment for its lifetime.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(std::vector<std::pair<std::string, std::string>> variables) : variables_(std::move(variables)) {
    for (const auto& [name, value] : variables_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnvironment() {
    for (const auto& variable : variables_) ::unsetenv(variable.first.c_str());
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  std::vector<std::pair<std::string, std::string>> variables_;
};

/// The ProfilerStep#N names of a trace, in order.
inline std::vector<std::string> recorded_steps(const dlprof::Trace& trace) {
  std::vector<std::string> steps;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Step) steps.push_back(trace.names[event.name]);
  return steps;
}

struct Launched {
  int status = -1;  ///< the exit status, or -1 when the child did not exit
  int signal = 0;   ///< the signal that ended the child, or 0
  std::string out;
  std::string err;
};

/// Starts the training loop for `steps` steps with the environment's variables other than DLPROF_*
/// and `settings` ("NAME=value"), and `arguments` after the steps; its stdout and stderr go to
/// files in `scratch`. Returns its process id, or 0.
inline pid_t spawn_training(const std::vector<std::string>& settings, const std::filesystem::path& scratch, int steps,
                            const std::vector<std::string>& arguments) {
  std::vector<std::string> words{DLPROF_LAUNCHED_TRAINING, std::to_string(steps)};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::vector<std::string> kept;
  for (char** variable = environ; *variable != nullptr; ++variable)
    if (std::string_view(*variable).rfind("DLPROF_", 0) != 0) kept.emplace_back(*variable);
  kept.insert(kept.end(), settings.begin(), settings.end());
  std::vector<char*> env;
  for (std::string& variable : kept) env.push_back(variable.data());
  env.push_back(nullptr);
  const std::filesystem::path out = scratch / "stdout.txt";
  const std::filesystem::path err = scratch / "stderr.txt";
  posix_spawn_file_actions_t files;
  ::posix_spawn_file_actions_init(&files);
  ::posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t child = 0;
  const int spawned = ::posix_spawn(&child, words[0].c_str(), &files, nullptr, argv.data(), env.data());
  ::posix_spawn_file_actions_destroy(&files);
  return spawned == 0 ? child : 0;
}

/// Runs the training loop as spawn_training() starts it, and waits for it.
inline Launched launch(const std::vector<std::string>& settings, const std::filesystem::path& scratch, int steps = 8,
                       const std::vector<std::string>& arguments = {}) {
  Launched result;
  const pid_t child = spawn_training(settings, scratch, steps, arguments);
  if (child == 0) return result;
  int status = 0;
  if (::waitpid(child, &status, 0) == child) {
    if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  }
  result.out = read_file(scratch / "stdout.txt");
  result.err = read_file(scratch / "stderr.txt");
  return result;
}

/// A training loop running in the background until the object goes: then it is killed.
class BackgroundTraining {
 public:
  BackgroundTraining(const std::vector<std::string>& settings, std::filesystem::path scratch, int steps,
                     const std::vector<std::string>& arguments)
      : scratch_(std::move(scratch)), pid_(spawn_training(settings, scratch_, steps, arguments)) {}
  ~BackgroundTraining() {
    if (pid_ == 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  BackgroundTraining(const BackgroundTraining&) = delete;
  BackgroundTraining& operator=(const BackgroundTraining&) = delete;

  pid_t pid() const noexcept { return pid_; }
  /// Waits for it to end: how, and what it printed.
  Launched wait() {
    Launched result;
    int status = 0;
    if (pid_ != 0 && ::waitpid(pid_, &status, 0) == pid_) {
      if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    }
    pid_ = 0;
    result.out = read_file(scratch_ / "stdout.txt");
    result.err = err();
    return result;
  }
  /// Waits up to `seconds` for its stdout to hold `text`.
  bool wait_for_output(std::string_view text, int seconds) const {
    for (int tries = 0; tries < seconds * 20; ++tries) {
      if (read_file(scratch_ / "stdout.txt").find(text) != std::string::npos) return true;
      ::usleep(50'000);
    }
    return false;
  }
  std::string err() const { return read_file(scratch_ / "stderr.txt"); }

 private:
  std::filesystem::path scratch_;
  pid_t pid_;
};

inline std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::exists(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  return files;
}

}  // namespace dlprof_test
