// dlprof-capture: asks a running job for a trace and prints its path once it is written. The job's
// Profiler runs with DLPROF_MODE=on-demand (the trace is a capture of its next steps) or
// flight-recorder (a dump of the steps it keeps).
//
//   dlprof-capture 4242                      # the signal, or the trigger file, that job 4242 takes
//   dlprof-capture 4242 --steps 20           # on demand: 20 steps (through its trigger file)
//   dlprof-capture --file /shared/job7/dump-now --dir /shared/job7/traces
#include <dlprof/detail/control/capture_signal.hpp>
#include <dlprof/settings.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr std::string_view kProgram = "dlprof-capture";

constexpr std::string_view kUsage = R"(Usage: dlprof-capture PID [--steps N] [--dir DIR] [--timeout SECONDS]
       dlprof-capture --file TRIGGER --dir DIR [--steps N] [--timeout SECONDS]

Asks a running job for a trace, waits until the job has written it, and prints its path. The job's
Profiler runs with DLPROF_MODE=on-demand (the trace records its next steps) or flight-recorder (the
trace holds the steps it keeps in memory).

  PID               the job's process. Its environment (/proc/PID/environ, and the DLPROF_CONFIG
                    file it names) gives its mode, its signal (DLPROF_SIGNAL, SIGUSR2 by default),
                    its trigger file (DLPROF_TRIGGER_FILE) and its trace directory (DLPROF_OUTPUT).
                    The signal asks, or the trigger file where --steps is given or the job takes
                    no signal. No signal is sent to a process that does not catch it (SigCgt in
                    /proc/PID/status): a signal nobody catches kills the process. Such a job is
                    asked through its trigger file, or refused with the reason.
  --file TRIGGER    write the trigger file TRIGGER instead of signalling: for a job of another
                    user, or on another machine that shares the file system
  --steps N         on demand: record N steps (the job's default: 5)
  --dir DIR         the directory the trace appears in (default: the job's DLPROF_OUTPUT)
  --timeout SECONDS give up after this long (default 300)
  -h, --help        this text

Exit status: 0 with the trace's path on standard output; 1 when the job cannot be asked, ends, or
writes no trace in time; 2 for a usage error.
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct CaptureError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::optional<pid_t> pid;
  std::string trigger_file;
  std::string dir;
  std::optional<std::int64_t> steps;
  double timeout_s = 300;
  bool help = false;
};

Options parse_command_line(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "-h" || argument == "--help") {
      options.help = true;
      continue;
    }
    if (argument.substr(0, 1) != "-") {
      const std::optional<std::int64_t> pid = dlprof::detail::parse_count(argument);
      if (!pid || *pid < 1 || *pid > INT32_MAX) throw UsageError(fmt::format("'{}' is not a process id", argument));
      if (options.pid) throw UsageError("one process at a time");
      options.pid = static_cast<pid_t>(*pid);
      continue;
    }
    const std::size_t equals = argument.find('=');
    const std::string_view flag = argument.substr(0, equals);
    if (flag != "--file" && flag != "--dir" && flag != "--steps" && flag != "--timeout")
      throw UsageError(fmt::format("unknown option '{}'", argument));
    std::string_view value;
    if (equals != std::string_view::npos) {
      value = argument.substr(equals + 1);
    } else {
      if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", flag));
      value = argv[++i];
    }
    if (flag == "--file") {
      options.trigger_file = std::string(value);
    } else if (flag == "--dir") {
      options.dir = std::string(value);
    } else if (flag == "--steps") {
      const std::optional<std::int64_t> steps = dlprof::detail::parse_count(value);
      if (!steps || *steps < 1 || *steps > 1'000'000) throw UsageError(fmt::format("--steps expects 1 to 1000000, got '{}'", value));
      options.steps = *steps;
    } else {
      const std::optional<double> seconds = dlprof::detail::parse_factor(value);
      if (!seconds || *seconds <= 0) throw UsageError(fmt::format("--timeout expects a number of seconds, got '{}'", value));
      options.timeout_s = *seconds;
    }
  }
  if (options.help) return options;
  if (!options.pid && options.trigger_file.empty()) throw UsageError("name the job's process id, or its trigger file with --file");
  if (!options.pid && options.dir.empty())
    throw UsageError("--file needs --dir: without a process id, the trace directory cannot be read from the job");
  return options;
}

/// Whether process `pid` catches `signal`, from its caught-signal mask (SigCgt in
/// /proc/PID/status, one bit per signal, signal 1 in the lowest). False where it cannot be read.
bool catches_signal(pid_t pid, int signal) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const std::string hex(dlprof::detail::trimmed(std::string_view(line).substr(7)));
    const int bit = signal - 1;
    const std::size_t digit_from_end = static_cast<std::size_t>(bit / 4);
    if (hex.empty() || digit_from_end >= hex.size()) return false;
    const char digit = hex[hex.size() - 1 - digit_from_end];
    const int value = digit >= '0' && digit <= '9' ? digit - '0' : digit >= 'a' && digit <= 'f' ? digit - 'a' + 10 : 0;
    return (value >> (bit % 4) & 1) != 0;
  }
  return false;
}

/// "SIGUSR2", or "signal 40" for one without a name.
std::string signal_name(int signal) {
  const char* abbreviation = ::sigabbrev_np(signal);
  return abbreviation != nullptr ? fmt::format("SIG{}", abbreviation) : fmt::format("signal {}", signal);
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CaptureError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// What the job was launched with: its DLPROF_* variables, and the paths they name made absolute
/// from its working directory.
struct Job {
  pid_t pid = 0;
  std::string cwd;
  dlprof::detail::Settings settings;

  std::string path_of(const dlprof::detail::Setting& setting) const {
    return setting.value.empty() || setting.value[0] == '/' ? setting.value : cwd + "/" + setting.value;
  }
};

Job read_job(pid_t pid) {
  Job job;
  job.pid = pid;
  if (::kill(pid, 0) != 0 && errno == ESRCH) throw CaptureError(fmt::format("no process {}", pid));
  char cwd[4096] = {};
  const std::string cwd_link = fmt::format("/proc/{}/cwd", pid);
  const ssize_t length = ::readlink(cwd_link.c_str(), cwd, sizeof(cwd) - 1);
  if (length < 0)
    throw CaptureError(fmt::format("cannot read process {}'s working directory ({}): {}; use --file and --dir", pid, cwd_link,
                                   std::strerror(errno)));
  job.cwd.assign(cwd, static_cast<std::size_t>(length));
  const std::string environ_text = read_whole(fmt::format("/proc/{}/environ", pid));
  std::vector<std::string> variables;
  for (std::size_t start = 0; start < environ_text.size();) {
    const std::size_t end = environ_text.find('\0', start);
    std::string variable = environ_text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (variable.rfind("DLPROF_CONFIG=", 0) == 0 && variable.size() > 14 && variable[14] != '/')
      variable = "DLPROF_CONFIG=" + job.cwd + "/" + variable.substr(14);
    if (variable.rfind("DLPROF_", 0) == 0) variables.push_back(std::move(variable));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::vector<const char*> pointers;
  for (const std::string& variable : variables) pointers.push_back(variable.c_str());
  pointers.push_back(nullptr);
  job.settings = dlprof::detail::read_settings(pointers.data());
  return job;
}

/// The trace files of `dir` now (none when it does not exist yet).
std::set<std::string> traces_in(const std::string& dir) {
  std::set<std::string> names;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return names;
  while (const dirent* entry = ::readdir(listing))
    if (dlprof::detail::is_trace_file_name(entry->d_name)) names.insert(entry->d_name);
  ::closedir(listing);
  return names;
}

/// Writes the trigger file whole (a temporary file renamed over it), so the job never reads half.
void write_trigger_file(const std::string& path, std::optional<std::int64_t> steps) {
  const std::string temporary = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream out(temporary, std::ios::trunc);
    dlprof::detail::CaptureRequest request;
    if (steps) request.steps = *steps;
    out << dlprof::detail::format_capture_request(request);
    out.flush();
    if (!out) throw CaptureError(fmt::format("cannot write the trigger file {}: {}", temporary, std::strerror(errno)));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    throw CaptureError(fmt::format("cannot write the trigger file {}: {}", path, std::strerror(error)));
  }
}

int run(const Options& options) {
  std::string dir = options.dir;
  std::string trigger_file = options.trigger_file;
  int signal = 0;
  std::string asked;
  if (options.pid) {
    const Job job = read_job(*options.pid);
    const dlprof::detail::Setting* mode = job.settings.find("DLPROF_MODE");
    const std::optional<dlprof::Mode> job_mode = mode == nullptr ? dlprof::Mode::Scheduled : dlprof::detail::parse_mode(mode->value);
    if (!job_mode || !dlprof::detail::takes_requests(*job_mode))
      throw CaptureError(fmt::format("process {} runs with DLPROF_MODE={}: only on-demand and flight-recorder take requests",
                                     *options.pid, mode == nullptr ? "unset (scheduled)" : dlprof::detail::terminal_text(mode->value)));
    if (options.steps && *job_mode == dlprof::Mode::FlightRecorder)
      throw CaptureError("--steps: a flight recorder dumps the steps it keeps (DLPROF_FLIGHT_STEPS), whatever the request");
    if (dir.empty()) {
      const dlprof::detail::Setting* output = job.settings.find("DLPROF_OUTPUT");
      if (output == nullptr || output->value.empty())
        throw CaptureError(fmt::format("process {} has no DLPROF_OUTPUT: give the directory its handler writes to with --dir",
                                       *options.pid));
      dir = job.path_of(*output);
    }
    if (trigger_file.empty())
      if (const dlprof::detail::Setting* trigger = job.settings.find("DLPROF_TRIGGER_FILE")) trigger_file = job.path_of(*trigger);
    signal = dlprof::detail::launched_capture_signal(job.settings);
    if ((options.steps || signal == 0 || !options.trigger_file.empty()) && trigger_file.empty())
      throw CaptureError(signal == 0 ? fmt::format("process {} takes no signal (DLPROF_SIGNAL=none) and has no trigger file",
                                                   *options.pid)
                                     : fmt::format("--steps needs the job's trigger file (DLPROF_TRIGGER_FILE); its signal "
                                                   "asks for {} steps",
                                                   dlprof::detail::kDefaultCaptureSteps));
    if (signal != 0 && !catches_signal(*options.pid, signal)) {
      if (trigger_file.empty())
        throw CaptureError(fmt::format(
            "process {} does not catch signal {} ({}), so it would kill it: dlprof-capture signals only a process that "
            "catches its signal. A dlprof program launched with DLPROF_MODE={} catches it from the start, unless its own "
            "code handles that signal; this process may not be one. A job launched with DLPROF_TRIGGER_FILE is asked "
            "through that file instead",
            *options.pid, signal, signal_name(signal), dlprof::detail::terminal_text(mode->value)));
      signal = 0;  // the trigger file asks
    }
  }
  const std::set<std::string> before = traces_in(dir);
  if (!trigger_file.empty() && (options.steps || signal == 0 || !options.trigger_file.empty() || !options.pid)) {
    write_trigger_file(trigger_file, options.steps);
    asked = fmt::format("wrote {}", trigger_file);
  } else {
    if (::kill(*options.pid, signal) != 0)
      throw CaptureError(fmt::format("cannot signal process {}: {}", *options.pid, std::strerror(errno)));
    asked = fmt::format("sent signal {} to process {}", signal, *options.pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.timeout_s);
  for (;;) {
    for (const std::string& name : traces_in(dir))
      if (before.count(name) == 0) {
        fmt::print("{}/{}\n", dir, name);
        return 0;
      }
    if (options.pid && ::kill(*options.pid, 0) != 0 && errno == ESRCH)
      throw CaptureError(fmt::format("process {} ended before a new trace appeared in {} ({})", *options.pid, dir, asked));
    if (std::chrono::steady_clock::now() >= deadline)
      throw CaptureError(fmt::format("no new trace in {} after {} s ({}): is the job stepping, or is a capture already "
                                     "running? Its stderr says why a request is refused",
                                     dir, options.timeout_s, asked));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_command_line(argc, argv);
    if (options.help) {
      fmt::print("{}", kUsage);
      return 0;
    }
    return run(options);
  } catch (const UsageError& error) {
    fmt::print(stderr, "{}: {}\nTry '{} --help'.\n", kProgram, error.what(), kProgram);
    return 2;
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: {}\n", kProgram, error.what());
    return 1;
  }
}
