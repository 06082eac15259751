// dlprof-report: the report of a run's traces on the command line, as terminal tables, JSON or a
// self-contained HTML page. Reads traces written by dlprof or by torch.profiler (any era of
// Kineto's Chrome-trace JSON, gzip or not), one file per rank and window, or directories of them.
//
//   dlprof-report log/run                               # every rank, text, the latest window
//   dlprof-report --window 1 log/run                    # the first window of a repeating schedule
//   dlprof-report --rank 0 --format html -o r0.html log/run
//   dlprof-report --hta-compat --format json rank0.pt.trace.json.gz
//   dlprof-report --export-trace crash.pt.trace.json log/run/host_12.1716423322.dlprof-crash
//   dlprof-report --kernels --format csv -o kernels.csv log/run
//   dlprof-report --peaks "bf16=165.2, fp32=82.6, memory=1.008" log/run   # a GPU dlprof does not know
//   dlprof-report --stacks cpu log/run > cpu.folded && flamegraph.pl cpu.folded > cpu.svg
//   dlprof-report --diff log/before log/after                # what changed, per step, beyond noise
//   dlprof-report --baseline log/main --fail-if-slower 3% --junit gate.xml log/pr   # a CI gate
//   dlprof-report --baseline log/main-1 --baseline log/main-2 --baseline log/main-3 log/pr-1 log/pr-2
//
// Exit status: 0 done, 1 an input or output problem (a trace that cannot be read, a rank not in
// the input, an output file that cannot be written), 2 a command line it cannot run (an output
// file that is one of the input traces, or a window the input does not have, included); with
// --baseline, 0 every check passed, 3 a regression, 4 runs that cannot be compared.

// RapidJSON's SSE2 scans of whitespace and strings, part of every x86-64 CPU, read traces faster.
// The switch is set before any header includes RapidJSON and this file is the program's only one,
// so every use of RapidJSON in it has the same body.
#if defined(__SSE2__) && !defined(RAPIDJSON_SSE2)
#  define RAPIDJSON_SSE2
#endif

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dlprof/analysis/call_stacks.hpp>
#include <dlprof/analysis/hta_trace_diff.hpp>
#include <dlprof/analysis/regression_gate.hpp>
#include <dlprof/analysis/step_samples.hpp>
#include <dlprof/detail/text.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/format/atomic_file.hpp>
#include <dlprof/import/chrome_trace.hpp>
#include <dlprof/report.hpp>
#if defined(DLPROF_HAS_SYMBOLIZE)
#  include <dlprof/import/symbolize.hpp>
#endif

namespace {

constexpr std::string_view kProgram = "dlprof-report";

constexpr std::string_view kUsage = R"(Usage: dlprof-report [--rank N] [--window N|last] [--format text|json|html] [--hta-compat] [--strict]
                     [--peaks PEAKS] [--steps N[-M]] [-o FILE] PATH...
       dlprof-report --kernels [--format text|csv|json|html] [--top N] [--peaks PEAKS] [-o FILE] PATH...
       dlprof-report --stacks cpu|gpu|memory [--rank N] [--window N|last] [-o FILE] PATH...
       dlprof-report --export-trace OUT TRACE
       dlprof-report --diff BASE NEW [--by KEY] [--rank N] [--window N|last] [--base-rank N] [--new-rank N]
                     [--base-window N|last] [--new-window N|last] [--format text|json|html] [--top N] [-o FILE]
       dlprof-report --baseline BASE... [--fail-if-slower P%] [--fail-if CHECK]... [--false-alarm-rate P%]
                     [--no-machine-speed] [--junit FILE] [--by KEY] [--base-rank N] [--new-rank N] [-o FILE] NEW...
Where the time of each training step went, and what to change: the step-time breakdown, the GPU
summary, Holistic Trace Analysis's breakdowns, the top ops and kernels, the ranks compared and
recommendations, from traces written by dlprof or torch.profiler.

  PATH              a trace file (.json or .json.gz, or a flight recorder's .dlprof-crash) or a
                    directory of them, one file per rank and window
  --rank N          report on rank N only
  --window N|last   the window to report on when ranks have several trace files (a schedule
                    that repeats writes one per window): each rank's files in time order are
                    windows 1, 2, ...; the default is the last, and the report says which it
                    shows of how many
  --format FORMAT   text: terminal tables (the default); json: for scripts (docs/report-json.md);
                    html: one self-contained page to open in a browser, the views of
                    TensorBoard's profiler plugin (overview, ops, kernels, the timeline, memory,
                    modules, ranks); csv: the kernel table only
  --kernels         no report: PyProf's kernel table, each kernel with its layer, op,
                    direction, shapes, precision, grid, block, calls, time, FLOPs and bytes,
                    and where it stands against the GPU's roofs, by the time it lost (every
                    row, or --top N of each rank)
  --peaks PEAKS     the roofs of the GPUs, for one dlprof does not know or to replace the
                    table's: a file, or its text inline, of key=value pairs such as
                    "bf16=989.4, tf32=494.7, fp32=67, memory=3.35" (dense TFLOP/s on the
                    matrix units, fp32 on the vector units, TB/s; also fp64, fp16, fp8,
                    int8, vector.P and matrix.P, mamf, boost_mhz, cache_mb)
  --stacks cpu|gpu|memory
                    no report: the call stacks of the ops and ranges (with_stack, or torch's
                    `Call stack`) folded for flamegraph.pl and speedscope, one line per
                    stack, outermost frame first and the op as the leaf, weighed by self CPU
                    time or by the GPU time of the work each op launched, in microseconds,
                    or by the bytes each op allocated itself (profile_memory)
  --symbols lines|functions|none
                    how the stacks' addresses are symbolised from the modules the trace names
                    (lines: functions, files, lines and inlined calls, the default; functions:
                    names only, faster; none: addresses as module+offset). A module missing,
                    stripped or rebuilt since the run is named, and its frames kept as addresses
  --hta-compat      HTA's conventions: drop the last ProfilerStep when there are two or more and
                    round fractional microseconds inward, so that numbers compare with HTA's one
                    to one (by default every complete step is analysed, in exact nanoseconds).
                    With --diff: HTA's TraceDiff.compare_traces instead of the per-step diff: the
                    first ProfilerStep of one rank a side, every event in it counted and its
                    durations summed by name (steps are one row, ProfilerStep#*, whatever their N)
  --top N           rows of the longer tables and charts (default 10; with --kernels, all)
  --steps N[-M]     with --format html: the steps (by number) the page's timeline holds, where
                    the trace holds more than a browser draws at ease (250,000 slices); by
                    default the timeline holds every slice, else whole steps from the first
  --strict          refuse a trace with any event or value the reader cannot use as written (by
                    default such events are left out and such values ignored, and the report
                    says how many and why)
  -o, --output FILE write the report to FILE (replaced whole, never half-written; a link is
                    written through, a device or FIFO in place), not stdout; FILE may not be
                    one of the input traces
  --diff BASE NEW   no report: what changed from run BASE to run NEW (each a trace file or a
                    directory), per step: the step time and the few changes that explain it, the
                    runs' overviews side by side, and every key's change in calls and time a step,
                    classified as HTA's TraceDiff does (added, deleted, increased, decreased,
                    unchanged) and tested against the steps' noise (Mann-Whitney, with at most 5 %
                    false discoveries among the changes called significant). Each side compares one
                    rank (the lowest, or --rank / --base-rank / --new-rank) of one window (the
                    last, or --window / --base-window / --new-window)
  --by KEY          what --diff compares: op (the default), shapes (op and input shapes), kernel,
                    short-kernel (without namespaces, parameters and most template arguments),
                    module, stack (the op and the innermost frame of the user's code; --frames N
                    frames) or collective (name, data type, elements and process group)
  --baseline BASE   no report: a regression gate for CI. NEW (the PATHs, each a run) fails where a
                    figure moved the worse way beyond the noise and by at least half its threshold.
                    One BASE run: the noise of the steps (a one-sided Mann-Whitney test at the
                    false-alarm rate); --baseline given again, a run each time: the noise of the
                    runs (a one-sided t-test of each run's median), which also holds a machine that
                    is slower one minute than the next. It says the smallest change it could catch
                    and the steps or runs it needs, and names the keys (--by) that made a slower
                    step slower. Runs that lost events, whose steps run other kinds of kernels, or
                    too few steps to judge are not comparable
  --no-machine-speed  with several BASE runs, judge the step time as it is, not after the speed at
                    which each run did the same work (the ops every run calls equally often)
  --fail-if-slower P%  the step time check: fail where NEW's steps are P % slower (the default: 2%)
  --fail-if CHECK   another check, as FIGURE>P% or FIGURE<-P%: step_time, gpu_busy (the share of
                    the step the GPU works), exposed_comm, mfu or memory_peak, e.g. "mfu<-3%"
  --false-alarm-rate P%  how often a check may fail two runs of one distribution (default 1%)
  --junit FILE      also write the gate's checks as JUnit XML, for CI systems to show
  --export-trace OUT  no report: write the one trace TRACE reads to OUT as Kineto's Chrome-trace
                    JSON (.gz: compressed), for Perfetto, HTA and TensorBoard, its call stacks
                    symbolised (--symbols); what turns a flight recorder's crash file into a
                    trace they open
  -h, --help        this text

Exit status: 0 done (with --baseline: every check passed); 1 a trace cannot be read, a rank is
not in the input or FILE cannot be written; 2 a bad command line (FILE an input trace, or a window
the input does not have, included); with --baseline, 3 a regression, 4 runs not comparable.
)";

/// A command line that cannot run: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The gate's verdicts, as exit statuses.
constexpr int kExitRegression = 3;
constexpr int kExitNotComparable = 4;

/// A problem with the input or the output: exit status 1.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A library error's message without its "dlprof: ": the program's own name replaces it.
std::string without_library_prefix(std::string_view message) {
  constexpr std::string_view kPrefix = "dlprof: ";
  return std::string(dlprof::detail::starts_with(message, kPrefix) ? message.substr(kPrefix.size()) : message);
}

enum class Format { Text, Json, Html, Csv };
enum class Symbols { Lines, Functions, None };

struct Options {
  std::vector<std::string> paths;
  std::optional<std::int64_t> rank;
  std::optional<std::size_t> window;  // from 1; none: the last
  Format format = Format::Text;
  bool hta_compat = false;
  bool strict = false;
  bool kernels = false;
  std::optional<dlprof::analysis::StackMetric> stacks;  // --stacks: folded stacks instead of a report
  Symbols symbols = Symbols::Lines;
  std::optional<dlprof::analysis::DevicePeaks> peaks;
  std::optional<std::size_t> top_rows;
  std::optional<std::pair<std::int64_t, std::int64_t>> steps;  // --steps: the page's timeline
  std::string output;  // empty: stdout
  std::string export_trace;  // --export-trace: the file the trace is written to instead of a report
  // --diff BASE NEW: two runs compared instead of a report; each side's rank and window.
  std::optional<std::pair<std::string, std::string>> diff;
  dlprof::analysis::SampleKey diff_key = dlprof::analysis::SampleKey::Op;
  std::size_t call_site_frames = 1;
  std::optional<std::int64_t> base_rank, new_rank;
  std::optional<std::size_t> base_window, new_window;
  bool base_window_last = false, new_window_last = false;
  // --baseline BASE (once a run): the regression gate on NEW (the paths, a run each) instead of a report.
  std::vector<std::string> baselines;
  dlprof::analysis::GateOptions gate;
  bool machine_speed_flag = false;  // --no-machine-speed given
  std::string junit;
  bool help = false;
};

template <class Integer>
Integer parse_integer(std::string_view flag, std::string_view text, Integer min, Integer max) {
  Integer value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min || value > max)
    throw UsageError(fmt::format("{} expects an integer from {} to {}, got '{}'", flag, min, max, text));
  return value;
}

/// A window number from 1, as --window takes it.
std::size_t parse_window(std::string_view text, std::string_view flag = "--window") {
  std::size_t window = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), window);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || window == 0)
    throw UsageError(fmt::format("{} expects a window number from 1, or 'last', got '{}'", flag, text));
  return window;
}

/// --peaks: the text of a file, where `value` names one (it has no '='), else the pairs inline.
dlprof::analysis::DevicePeaks parse_peaks(std::string_view value) {
  constexpr std::uint64_t kMaxPeaksFileBytes = 1 << 20;
  std::string text(value);
  if (value.find('=') == std::string_view::npos) {
    try {
      const auto bytes = dlprof::detail::reader::read_file(text, kMaxPeaksFileBytes);
      text.assign(bytes.data(), bytes.size());
    } catch (const dlprof::detail::reader::FileFailure& failure) {
      throw UsageError(fmt::format("--peaks '{}': no key=value pairs, and no file to read them from: {}",
                                   dlprof::detail::terminal_text(value), failure.message));
    }
  }
  try {
    return dlprof::analysis::parse_device_peaks(text);
  } catch (const std::invalid_argument& error) {
    throw UsageError(fmt::format("--{}", dlprof::detail::terminal_text(error.what())));  // "--peaks: ..."
  }
}

/// A relative threshold as "2%", "2", "+2%" or "-0.5%": its magnitude, from 0 to 10 (1000 %).
double parse_percent(std::string_view flag, std::string_view text) {
  std::string_view number = text;
  if (!number.empty() && number.back() == '%') number.remove_suffix(1);
  if (!number.empty() && (number.front() == '+' || number.front() == '-')) number.remove_prefix(1);
  double value = 0;
  const std::string copy(number);  // std::from_chars of double is missing from GCC 10's library
  char* end = nullptr;
  if (!copy.empty()) value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(value > 0) || value > 1000)
    throw UsageError(fmt::format("{} expects a percentage above 0 and at most 1000, as 2%, got '{}'", flag, text));
  return value / 100;
}

/// --fail-if FIGURE>P% or FIGURE<-P%.
dlprof::analysis::GateCheck parse_gate_check(std::string_view text) {
  const std::size_t op = text.find_first_of("<>");
  const auto figure = op == std::string_view::npos ? std::nullopt : dlprof::analysis::gate_figure_of(text.substr(0, op));
  if (!figure)
    throw UsageError(fmt::format("--fail-if expects FIGURE>P% or FIGURE<-P% with FIGURE step_time, gpu_busy, exposed_comm, mfu or "
                                 "memory_peak, got '{}'", text));
  dlprof::analysis::GateCheck check;
  check.figure = *figure;
  check.higher_is_worse = text[op] == '>';
  check.threshold = parse_percent("--fail-if", text.substr(op + 1));
  return check;
}

/// Flags as `--flag value` or `--flag=value`; `--` ends them.
Options parse_command_line(int argc, char** argv) {
  Options options;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (flags_ended || argument == "-" || argument.substr(0, 1) != "-") {
      options.paths.emplace_back(argument);
      continue;
    }
    if (argument == "--") {
      flags_ended = true;
      continue;
    }
    if (argument == "-h" || argument == "--help") {
      options.help = true;
      continue;
    }
    if (argument == "--hta-compat") {
      options.hta_compat = true;
      continue;
    }
    if (argument == "--strict") {
      options.strict = true;
      continue;
    }
    if (argument == "--no-machine-speed") {
      options.gate.machine_speed = false;
      options.machine_speed_flag = true;
      continue;
    }
    if (argument == "--kernels") {
      options.kernels = true;
      continue;
    }
    if (argument == "--diff") {
      if (i + 2 >= argc) throw UsageError("--diff needs two runs: --diff BASE NEW");
      options.diff.emplace(argv[i + 1], argv[i + 2]);
      i += 2;
      continue;
    }
    const std::size_t equals = argument.substr(0, 2) == "--" ? argument.find('=') : std::string_view::npos;
    const std::string_view flag = argument.substr(0, equals);
    if (flag != "--rank" && flag != "--window" && flag != "--format" && flag != "--top" && flag != "-o" &&
        flag != "--output" && flag != "--export-trace" && flag != "--peaks" && flag != "--stacks" && flag != "--symbols" &&
        flag != "--by" && flag != "--frames" && flag != "--base-rank" && flag != "--new-rank" && flag != "--base-window" &&
        flag != "--new-window" && flag != "--baseline" && flag != "--fail-if-slower" && flag != "--fail-if" &&
        flag != "--false-alarm-rate" && flag != "--junit" && flag != "--steps")
      throw UsageError(fmt::format("unknown option '{}'", argument));
    std::string_view value;
    if (equals != std::string_view::npos) {
      value = argument.substr(equals + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw UsageError(fmt::format("{} needs a value", flag));
    }
    if (flag == "--rank") {
      options.rank = parse_integer<std::int64_t>(flag, value, 0, INT64_MAX);
    } else if (flag == "--window") {
      if (value != "last") options.window = parse_window(value);
    } else if (flag == "--base-rank") {
      options.base_rank = parse_integer<std::int64_t>(flag, value, 0, INT64_MAX);
    } else if (flag == "--new-rank") {
      options.new_rank = parse_integer<std::int64_t>(flag, value, 0, INT64_MAX);
    } else if (flag == "--base-window") {
      options.base_window_last = value == "last";
      if (value != "last") options.base_window = parse_window(value, flag);
    } else if (flag == "--new-window") {
      options.new_window_last = value == "last";
      if (value != "last") options.new_window = parse_window(value, flag);
    } else if (flag == "--by") {
      const std::optional<dlprof::analysis::SampleKey> key = dlprof::analysis::sample_key_of(value);
      if (!key)
        throw UsageError(fmt::format("--by expects op, shapes, kernel, short-kernel, module, stack or collective, got '{}'", value));
      options.diff_key = *key;
    } else if (flag == "--baseline") {
      if (value.empty()) throw UsageError("--baseline needs the baseline run: a trace file or directory");
      options.baselines.emplace_back(value);
    } else if (flag == "--fail-if-slower") {
      dlprof::analysis::GateCheck check;
      check.threshold = parse_percent(flag, value);
      options.gate.checks.push_back(check);
    } else if (flag == "--fail-if") {
      options.gate.checks.push_back(parse_gate_check(value));
    } else if (flag == "--false-alarm-rate") {
      options.gate.false_alarm_rate = parse_percent(flag, value);
      if (options.gate.false_alarm_rate >= 0.5)
        throw UsageError(fmt::format("--false-alarm-rate expects a percentage below 50%, got '{}'", value));
    } else if (flag == "--junit") {
      if (value.empty()) throw UsageError("--junit needs a file name");
      options.junit = std::string(value);
    } else if (flag == "--steps") {
      const std::size_t dash = value.find('-', 1);
      const std::int64_t first = parse_integer<std::int64_t>(flag, value.substr(0, dash), 0, INT64_MAX);
      const std::int64_t last =
          dash == std::string_view::npos ? first : parse_integer<std::int64_t>(flag, value.substr(dash + 1), 0, INT64_MAX);
      if (last < first) throw UsageError(fmt::format("--steps {}: the last step comes before the first", value));
      options.steps = std::pair<std::int64_t, std::int64_t>{first, last};
    } else if (flag == "--frames") {
      options.call_site_frames = parse_integer<std::size_t>(flag, value, 1, 64);
    } else if (flag == "--top") {
      options.top_rows = parse_integer<std::size_t>(flag, value, 1, 10'000);
    } else if (flag == "--format") {
      if (value == "text") options.format = Format::Text;
      else if (value == "json") options.format = Format::Json;
      else if (value == "html") options.format = Format::Html;
      else if (value == "csv") options.format = Format::Csv;
      else throw UsageError(fmt::format("--format expects text, json, html or csv, got '{}'", value));
    } else if (flag == "--peaks") {
      options.peaks = parse_peaks(value);
    } else if (flag == "--stacks") {
      if (value == "cpu") options.stacks = dlprof::analysis::StackMetric::SelfCpuTime;
      else if (value == "gpu") options.stacks = dlprof::analysis::StackMetric::SelfGpuTime;
      else if (value == "memory") options.stacks = dlprof::analysis::StackMetric::SelfBytesAllocated;
      else throw UsageError(fmt::format("--stacks expects cpu, gpu or memory, got '{}'", value));
    } else if (flag == "--symbols") {
      if (value == "lines") options.symbols = Symbols::Lines;
      else if (value == "functions") options.symbols = Symbols::Functions;
      else if (value == "none") options.symbols = Symbols::None;
      else throw UsageError(fmt::format("--symbols expects lines, functions or none, got '{}'", value));
    } else if (flag == "--export-trace") {
      if (value.empty()) throw UsageError("--export-trace needs a file name");
      options.export_trace = std::string(value);
    } else {
      if (value.empty()) throw UsageError(fmt::format("{} needs a file name", flag));
      options.output = std::string(value);
    }
  }
  if (options.diff) {
    if (!options.paths.empty())
      throw UsageError(fmt::format("--diff compares two runs, BASE and NEW: '{}' is a third", options.paths.front()));
    if (options.kernels || options.stacks || !options.export_trace.empty())
      throw UsageError("--diff goes with neither --kernels, --stacks nor --export-trace");
    if (options.format == Format::Csv) throw UsageError("--format csv is the kernel table's: --diff writes text, json or html");
    if (options.hta_compat && options.diff_key != dlprof::analysis::SampleKey::Op)
      throw UsageError("--diff --hta-compat compares by name, as HTA's TraceDiff does: --by goes without --hta-compat");
    if (!options.baselines.empty() || !options.gate.checks.empty() || !options.junit.empty() || options.machine_speed_flag)
      throw UsageError("--diff compares two runs; --baseline, --fail-if-slower, --fail-if, --no-machine-speed and --junit gate one: "
                       "choose one");
    return options;
  }
  if (!options.baselines.empty()) {
    if (options.paths.empty()) throw UsageError("--baseline gates NEW: name its run (a trace file or directory), or several");
    if (options.kernels || options.stacks || !options.export_trace.empty() || options.format != Format::Text)
      throw UsageError("--baseline writes the gate's verdict as text (and --junit's XML): it goes with no other output");
    if (options.hta_compat) throw UsageError("--baseline compares per step: HTA's selection (--hta-compat) is not available with it");
    if (options.gate.checks.empty()) options.gate.checks.push_back({});  // the step time, 2 %
    return options;
  }
  if (!options.gate.checks.empty() || !options.junit.empty() || options.machine_speed_flag)
    throw UsageError("--fail-if-slower, --fail-if, --no-machine-speed and --junit are the regression gate's: add --baseline BASE");
  if (options.base_rank || options.new_rank || options.base_window || options.new_window || options.base_window_last ||
      options.new_window_last)
    throw UsageError("--base-rank, --new-rank, --base-window and --new-window choose the sides of --diff and --baseline");
  if (!options.help && options.paths.empty()) throw UsageError("no trace given: name trace files or directories");
  if (!options.export_trace.empty() && options.paths.size() != 1)
    throw UsageError("--export-trace writes one trace: name exactly one trace file");
  if (options.format == Format::Csv && !options.kernels)
    throw UsageError("--format csv is the kernel table's: add --kernels");
  if (options.steps && (options.format != Format::Html || options.kernels || options.stacks || !options.export_trace.empty()))
    throw UsageError("--steps chooses the steps of the page's timeline: it goes with --format html");
  if (options.stacks && (options.kernels || !options.export_trace.empty()))
    throw UsageError("--stacks writes folded stacks: it goes with neither --kernels nor --export-trace");
  return options;
}

/// Where a long load has got, on stderr: redrawn in place on a terminal; elsewhere (a log), a line
/// a second once the load has taken a second, so that short loads print nothing.
class LoadProgress {
 public:
  LoadProgress() : terminal_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;
  ~LoadProgress() { finish(); }

  void operator()(const dlprof::ReadProgress& progress) {
    const Clock::time_point now = Clock::now();
    if (!terminal_ && now - start_ < std::chrono::seconds(1)) return;
    if (shown_ && now - last_shown_ < (terminal_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000))) return;
    const double percent = progress.bytes_total == 0 ? 100.0
                                                     : 100.0 * static_cast<double>(progress.bytes_done) /
                                                           static_cast<double>(progress.bytes_total);
    const std::string message =
        fmt::format("{}: {} {} ({} of {}): {:.0f}%", kProgram,
                    progress.stage == dlprof::ReadProgress::Stage::Decompressing ? "inflating" : "parsing",
                    dlprof::detail::terminal_text(std::filesystem::path(std::string(progress.source)).filename().string()),
                    progress.file_index + 1, progress.file_count, percent);
    if (terminal_) {
      fmt::print(stderr, "\r\x1b[K{}", message);
    } else {
      fmt::print(stderr, "{}\n", message);
    }
    std::fflush(stderr);
    shown_ = true;
    last_shown_ = now;
  }

  /// Clears the terminal's progress line.
  void finish() {
    if (terminal_ && shown_) fmt::print(stderr, "\r\x1b[K");
    shown_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool terminal_;
  Clock::time_point start_;
  Clock::time_point last_shown_;
  bool shown_ = false;
};

/// Refuses an output file that is one of the input traces (the same device and inode: through a
/// link, another spelling of the path, or a file of an input directory): writing the report
/// would replace the trace it is made from.
void refuse_output_onto_input(const Options& options, const std::vector<std::string>& paths) {
  struct stat output {};
  if (options.output.empty() || ::stat(options.output.c_str(), &output) != 0) return;  // a new file is no input
  for (const std::string& input : dlprof::trace_set_files(paths)) {
    struct stat status {};
    if (::stat(input.c_str(), &status) == 0 && status.st_dev == output.st_dev && status.st_ino == output.st_ino)
      throw UsageError(fmt::format("-o '{}' is the input trace '{}': write the report to another file", options.output, input));
  }
}

/// The ranks to report on: one window's, of every rank or of --rank's, each analysed as it was
/// read and kept without its events, so that a run of many ranks is never held whole.
struct Input {
  std::vector<dlprof::AnalysedRank> ranks;
  std::size_t window = 1;   ///< which, from 1
  std::size_t windows = 1;  ///< of how many
};

dlprof::ReportOptions report_options(const Options& options) {
  dlprof::ReportOptions report;
  report.analysis.hta_compat = options.hta_compat;
  report.top_rows = options.top_rows.value_or(report.top_rows);
  report.peaks = options.peaks;
  if (options.format == Format::Html) report.views = dlprof::rank_views_of;
  report.timeline.steps = options.steps;
  return report;
}

/// Which traces of an input to use: its paths, a window (none: the last) and a rank (none: all),
/// and the flags that chose them, for messages.
struct Selection {
  std::vector<std::string> paths;
  std::optional<std::size_t> window;
  std::optional<std::int64_t> rank;
  std::string_view window_flag = "--window";
  std::string_view rank_flag = "--rank";
  std::string input = "the input";  ///< how messages name the paths
};

Selection selection_of(const Options& options) { return {options.paths, options.window, options.rank}; }

/// The window the selection chooses of `windows`, and of it the ranks it chooses.
template <class Rank, class RankOf>
std::vector<Rank> choose_ranks(const Selection& selection, std::vector<dlprof::TraceWindow<Rank>>& windows, RankOf rank_of,
                               std::size_t& window_number, std::vector<std::string>& notes) {
  window_number = selection.window.value_or(windows.size());
  if (window_number > windows.size()) {
    const std::string inputs = fmt::format("'{}'", fmt::join(selection.paths, "' '"));
    if (windows.size() == 1)
      throw UsageError(fmt::format("{} {}: {} hold{} one window (one trace file per rank)", selection.window_flag, window_number,
                                   inputs, selection.paths.size() == 1 ? "s" : ""));
    throw UsageError(fmt::format("{} {}: {} hold{} {} windows (each rank's trace files, in time order): choose 1 to {}, "
                                 "or last",
                                 selection.window_flag, window_number, inputs, selection.paths.size() == 1 ? "s" : "",
                                 windows.size(), windows.size()));
  }
  dlprof::TraceWindow<Rank>& window = windows[window_number - 1];
  notes = std::move(window.notes);
  if (!selection.rank) return std::move(window.ranks);
  const auto ranked =
      std::find_if(window.ranks.begin(), window.ranks.end(), [&](const Rank& rank) { return rank_of(rank) == *selection.rank; });
  if (ranked == window.ranks.end()) {
    std::vector<std::int64_t> found;
    for (const Rank& rank : window.ranks) found.push_back(rank_of(rank));
    throw InputError(fmt::format("{} {}: no trace of that rank in {} (it has rank{} {})", selection.rank_flag, *selection.rank,
                                 windows.size() > 1 ? fmt::format("window {} of {}", window_number, selection.input) : selection.input,
                                 found.size() == 1 ? "" : "s", fmt::join(found, ", ")));
  }
  std::vector<Rank> chosen;
  chosen.push_back(std::move(*ranked));
  return chosen;
}

/// Every window of the input at `paths`, each trace summarized by `summarize` as it is read.
template <class Summarize>
auto read_windows(const Options& options, const std::vector<std::string>& paths, Summarize&& summarize) {
  LoadProgress progress;
  dlprof::ReadOptions read_options;
  read_options.strict = options.strict;
  read_options.progress = [&progress](const dlprof::ReadProgress& at) { progress(at); };
  try {
    refuse_output_onto_input(options, paths);
    auto windows = dlprof::read_trace_windows(paths, read_options, std::forward<Summarize>(summarize));
    progress.finish();
    return windows;
  } catch (const dlprof::TraceReadError& error) {
    progress.finish();
    throw InputError(without_library_prefix(error.what()));
  }
}

/// Symbolises `trace`'s call stacks as --symbols asks, where this program was built with libdw;
/// what could not be read becomes notes of the trace.
void symbolize(dlprof::Trace& trace, Symbols symbols) {
  if (symbols == Symbols::None || trace.modules.empty()) return;
#if defined(DLPROF_HAS_SYMBOLIZE)
  dlprof::SymbolizeOptions symbolize_options;
  symbolize_options.lines = symbols == Symbols::Lines;
  dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace, symbolize_options);
  for (std::string& problem : result.problems) trace.read_result.notes.push_back("call stacks: " + problem);
#else
  trace.read_result.notes.push_back(
      "call stacks: not symbolised (this dlprof-report was built without elfutils' libdw): frames are module+offset");
#endif
}

/// --stacks: the folded stacks of each rank chosen; each line starts with its rank's frame where
/// several ranks are shown.
std::string render_folded_stacks(const Options& options) {
  struct RankStacks {
    std::int64_t rank = 0;
    std::string folded;
  };
  auto windows = read_windows(options, options.paths, [&](dlprof::Trace&& trace) {
    RankStacks stacks;
    stacks.rank = trace.distributed.rank;
    if (options.rank && trace.distributed.rank != *options.rank) return stacks;
    symbolize(trace, options.symbols);
    for (const std::string& note : trace.read_result.notes)
      fmt::print(stderr, "{}: rank {}: {}\n", kProgram, stacks.rank, dlprof::detail::terminal_text(note));
    stacks.folded = dlprof::analysis::folded_stacks(trace, *options.stacks);
    return stacks;
  });
  std::size_t window = 1;
  std::vector<std::string> notes;
  std::vector<RankStacks> ranks =
      choose_ranks(selection_of(options), windows, [](const RankStacks& rank) { return rank.rank; }, window, notes);
  for (const std::string& note : notes) fmt::print(stderr, "{}: {}\n", kProgram, dlprof::detail::terminal_text(note));
  std::sort(ranks.begin(), ranks.end(), [](const RankStacks& a, const RankStacks& b) { return a.rank < b.rank; });
  std::string text;
  for (const RankStacks& rank : ranks) {
    if (ranks.size() == 1) {
      text += rank.folded;
      continue;
    }
    const std::string prefix = fmt::format("rank {};", rank.rank);
    for (std::size_t from = 0; from < rank.folded.size();) {
      const std::size_t end = rank.folded.find('\n', from);
      text += prefix;
      text.append(rank.folded, from, end - from + 1);
      from = end + 1;
    }
  }
  if (text.empty())
    fmt::print(stderr, "{}: no op or range has a call stack: record with ProfilerOptions::with_stack (DLPROF_WITH_STACK=1) "
                       "or torch.profiler's with_stack\n", kProgram);
  return text;
}

/// --kernels: the kernel table of each rank chosen, in the format asked for.
std::string render_kernel_tables(const Options& options) {
  const dlprof::analysis::DevicePeaks* peaks = options.peaks ? &*options.peaks : nullptr;
  auto windows = read_windows(options, options.paths, [&](dlprof::Trace&& trace) {
    if (options.rank && trace.distributed.rank != *options.rank) {
      dlprof::RankKernelTable other;
      other.rank = trace.distributed.rank;
      return other;
    }
    return dlprof::rank_kernel_table(std::move(trace), peaks);
  });
  std::size_t window = 1;
  std::vector<std::string> notes;
  std::vector<dlprof::RankKernelTable> ranks =
      choose_ranks(selection_of(options), windows, [](const dlprof::RankKernelTable& rank) { return rank.rank; }, window, notes);
  for (const std::string& note : notes) fmt::print(stderr, "{}: {}\n", kProgram, dlprof::detail::terminal_text(note));
  std::sort(ranks.begin(), ranks.end(),
            [](const dlprof::RankKernelTable& a, const dlprof::RankKernelTable& b) { return a.rank < b.rank; });
  switch (options.format) {
    case Format::Csv: return dlprof::render_kernel_table_csv(ranks);
    case Format::Json: return dlprof::render_kernel_table_json(ranks);
    case Format::Html: return dlprof::render_kernel_table_html(ranks, fmt::format("{}", fmt::join(options.paths, " ")));
    case Format::Text: break;
  }
  return dlprof::render_kernel_table_text(ranks, options.top_rows.value_or(0));
}

Input read_ranks(const Options& options) {
  const dlprof::ReportOptions analysis_options = report_options(options);
  // Another rank than --rank's is only counted: its rank is all the window needs of it.
  auto windows = read_windows(options, options.paths, [&](dlprof::Trace&& trace) {
    if (options.rank && trace.distributed.rank != *options.rank) {
      dlprof::AnalysedRank other;
      other.report.rank = trace.distributed.rank;
      return other;
    }
    symbolize(trace, options.symbols);
    return dlprof::analyse_rank(std::move(trace), analysis_options);
  });
  Input input;
  input.windows = windows.size();
  std::vector<std::string> window_notes;
  input.ranks = choose_ranks(selection_of(options), windows, [](const dlprof::AnalysedRank& rank) { return rank.report.rank; },
                             input.window, window_notes);
  std::vector<std::string>& notes = input.ranks.front().report.read.notes;
  notes.insert(notes.end(), window_notes.begin(), window_notes.end());
  return input;
}

std::string render(const Options& options, Input input) {
  dlprof::ReportOptions report_options = ::report_options(options);
  report_options.title = fmt::format("{}", fmt::join(options.paths, " "));
  std::vector<std::string> selected;
  if (input.windows > 1) selected.push_back(fmt::format("window {} of {}", input.window, input.windows));
  if (options.rank) selected.push_back(fmt::format("rank {}", *options.rank));
  if (!selected.empty()) report_options.title += fmt::format(" ({})", fmt::join(selected, ", "));
  const dlprof::Report report = dlprof::make_report(std::move(input.ranks), report_options);
  switch (options.format) {
    case Format::Json: return dlprof::render_json(report);
    case Format::Html: return dlprof::render_html(report);
    case Format::Csv:  // refused without --kernels
    case Format::Text: break;
  }
  return dlprof::render_text(report);
}

/// One side of --diff: the rank and window chosen of the run at `path`, its report and samples.
dlprof::DiffSide read_diff_side(const Options& options, std::string_view side, const std::string& path,
                                std::optional<std::int64_t> rank, std::optional<std::size_t> window, std::string_view rank_flag,
                                std::string_view window_flag, std::vector<std::string>& notes, bool refuse_empty = true) {
  struct RankRun {
    std::int64_t rank = 0;
    dlprof::AnalysedRank analysed;
    dlprof::analysis::StepSamples samples;
  };
  const dlprof::ReportOptions analysis_options = report_options(options);
  auto windows = read_windows(options, {path}, [&](dlprof::Trace&& trace) {
    RankRun run;
    run.rank = trace.distributed.rank;
    if (rank && run.rank != *rank) return run;
    if (options.diff_key == dlprof::analysis::SampleKey::CallSite) symbolize(trace, options.symbols);
    run.samples = dlprof::analysis::step_samples(trace, dlprof::analysis::step_breakdown(trace), options.diff_key,
                                                 options.call_site_frames);
    run.analysed = dlprof::analyse_rank(std::move(trace), analysis_options);
    return run;
  });
  Selection selection{{path}, window, rank, window_flag, rank_flag, fmt::format("{} '{}'", side, path)};
  std::size_t window_number = 1;
  std::vector<std::string> window_notes;
  std::vector<RankRun> ranks = choose_ranks(selection, windows, [](const RankRun& run) { return run.rank; }, window_number, window_notes);
  for (const std::string& note : window_notes) notes.push_back(fmt::format("{}: {}", side, note));
  std::sort(ranks.begin(), ranks.end(), [](const RankRun& a, const RankRun& b) { return a.rank < b.rank; });
  RankRun& chosen = ranks.front();  // a window holds one trace at least
  if (ranks.size() > 1)
    notes.push_back(fmt::format("{} has {} ranks ({} to {}): rank {} is compared ({} N for another)", side, ranks.size(),
                                ranks.front().rank, ranks.back().rank, chosen.rank, rank_flag));
  if (refuse_empty && chosen.samples.steps.empty())
    throw InputError(fmt::format("{} '{}' (rank {}): no step to compare: the trace holds no op or range", side, path, chosen.rank));
  std::vector<std::string> selected{fmt::format("rank {}", chosen.rank)};
  if (windows.size() > 1) selected.push_back(fmt::format("window {} of {}", window_number, windows.size()));
  dlprof::DiffSide result;
  result.title = fmt::format("{} ({})", path, fmt::join(selected, ", "));
  result.samples = std::move(chosen.samples);
  std::vector<dlprof::AnalysedRank> analysed;
  analysed.push_back(std::move(chosen.analysed));
  result.report = dlprof::make_report(std::move(analysed), analysis_options);
  return result;
}

/// The two runs of --diff or --baseline, each side's rank and window chosen.
std::pair<dlprof::DiffSide, dlprof::DiffSide> read_runs(const Options& options, const std::string& base_path,
                                                        const std::string& new_path, std::vector<std::string>& notes,
                                                        bool refuse_empty) {
  dlprof::DiffSide base = read_diff_side(options, "BASE", base_path, options.base_rank ? options.base_rank : options.rank,
                                         options.base_window ? options.base_window : options.window,
                                         options.base_rank ? "--base-rank" : "--rank",
                                         options.base_window ? "--base-window" : "--window", notes, refuse_empty);
  dlprof::DiffSide next = read_diff_side(options, "NEW", new_path, options.new_rank ? options.new_rank : options.rank,
                                         options.new_window ? options.new_window : options.window,
                                         options.new_rank ? "--new-rank" : "--rank",
                                         options.new_window ? "--new-window" : "--window", notes, refuse_empty);
  return {std::move(base), std::move(next)};
}

/// One side of --diff --hta-compat: HTA's rank (the one chosen, else the lowest) and iteration
/// (the lowest step number of any rank of the window, as HTA's symbol table holds them all).
std::pair<dlprof::HtaDiffSide, dlprof::analysis::HtaIterations> read_hta_diff_side(
    const Options& options, std::string_view side, const std::string& path, std::optional<std::int64_t> rank,
    std::optional<std::size_t> window, std::string_view rank_flag, std::string_view window_flag, std::int64_t& iteration,
    std::vector<std::string>& notes) {
  auto windows = read_windows(options, {path}, [](dlprof::Trace&& trace) { return dlprof::analysis::hta_iterations(trace); });
  std::optional<std::int64_t> first;
  const std::size_t window_number = window.value_or(windows.size());
  if (window_number >= 1 && window_number <= windows.size())
    for (const dlprof::analysis::HtaIterations& ranked : windows[window_number - 1].ranks)
      if (const auto own = ranked.first_iteration(); own && (!first || *own < *first)) first = own;
  Selection selection{{path}, window, rank, window_flag, rank_flag, fmt::format("{} '{}'", side, path)};
  std::size_t chosen_window = 1;
  std::vector<std::string> window_notes;
  std::vector<dlprof::analysis::HtaIterations> ranks =
      choose_ranks(selection, windows, [](const dlprof::analysis::HtaIterations& run) { return run.rank; }, chosen_window, window_notes);
  for (const std::string& note : window_notes) notes.push_back(fmt::format("{}: {}", side, note));
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  dlprof::analysis::HtaIterations& chosen = ranks.front();
  if (ranks.size() > 1)
    notes.push_back(fmt::format("{} has {} ranks ({} to {}): rank {} is compared, HTA's first ({} N for another)", side, ranks.size(),
                                ranks.front().rank, ranks.back().rank, chosen.rank, rank_flag));
  for (const std::string& name : chosen.unnumbered_steps)
    notes.push_back(fmt::format("{}: '{}' starts like a step's name but holds no number: not a step here, and HTA cannot read it",
                                side, name));
  if (!first)
    throw InputError(fmt::format("{} '{}': no ProfilerStep#N to compare: HTA's TraceDiff compares one iteration, and the trace "
                                 "names none",
                                 side, path));
  iteration = *first;
  if (chosen.iterations.count(iteration) == 0)
    throw InputError(fmt::format("{} '{}' (rank {}): nothing in ProfilerStep#{}, the first iteration of the run's ranks: HTA's table "
                                 "would be empty ({} N chooses another rank)",
                                 side, path, chosen.rank, iteration, rank_flag));
  dlprof::HtaDiffSide heading;
  heading.title = windows.size() > 1 ? fmt::format("{} (window {} of {})", path, chosen_window, windows.size()) : path;
  heading.rank = chosen.rank;
  return {std::move(heading), std::move(chosen)};
}

/// --diff --hta-compat BASE NEW: HTA's TraceDiff table.
std::string render_hta_diff(const Options& options) {
  dlprof::HtaDiffReport report;
  std::int64_t base_iteration = 0, next_iteration = 0;
  auto [base, base_runs] = read_hta_diff_side(options, "BASE", options.diff->first, options.base_rank ? options.base_rank : options.rank,
                                              options.base_window ? options.base_window : options.window,
                                              options.base_rank ? "--base-rank" : "--rank",
                                              options.base_window ? "--base-window" : "--window", base_iteration, report.notes);
  auto [next, next_runs] = read_hta_diff_side(options, "NEW", options.diff->second, options.new_rank ? options.new_rank : options.rank,
                                              options.new_window ? options.new_window : options.window,
                                              options.new_rank ? "--new-rank" : "--rank",
                                              options.new_window ? "--new-window" : "--window", next_iteration, report.notes);
  report.base = std::move(base);
  report.next = std::move(next);
  report.diff = dlprof::analysis::hta_trace_diff(base_runs, base_iteration, next_runs, next_iteration);
  report.top_rows = options.top_rows.value_or(report.top_rows);
  switch (options.format) {
    case Format::Json: return dlprof::render_hta_diff_json(report);
    case Format::Html: return dlprof::render_hta_diff_html(report);
    case Format::Csv:  // refused with --diff
    case Format::Text: break;
  }
  return dlprof::render_hta_diff_text(report);
}

/// --diff BASE NEW: the comparison in the format asked for.
std::string render_diff(const Options& options) {
  if (options.hta_compat) return render_hta_diff(options);
  std::vector<std::string> notes;
  auto [base, next] = read_runs(options, options.diff->first, options.diff->second, notes, /*refuse_empty=*/true);
  dlprof::DiffReport report = dlprof::make_diff_report(std::move(base), std::move(next));
  report.diff.notes.insert(report.diff.notes.end(), notes.begin(), notes.end());
  switch (options.format) {
    case Format::Json: return dlprof::render_diff_json(report);
    case Format::Html: return dlprof::render_diff_html(report);
    case Format::Csv:  // refused with --diff
    case Format::Text: break;
  }
  return dlprof::render_diff_text(report);
}

/// The peak FLOP/s of a run's GPUs, from its MFU; none where its report has none.
std::optional<double> peak_flops_per_second(const dlprof::Report& report) {
  if (report.ranks.empty() || !report.ranks.front().mfu) return std::nullopt;
  const dlprof::analysis::ModelFlopsUtilization& mfu = *report.ranks.front().mfu;
  if (mfu.peak_tflops <= 0 || mfu.devices == 0) return std::nullopt;
  return mfu.peak_tflops * 1e12 * static_cast<double>(mfu.devices);
}

/// Writes `text` to `path` as dlprof writes traces (format/atomic_file.hpp): a regular file
/// through a temporary file beside it and a rename, so that `path` is never seen half-written and
/// an earlier file survives a failure; a symbolic link through to its target; a character device
/// or a FIFO (/dev/stdout, a pipe) in place, never replaced.
void write_file(const std::string& path, const std::string& text) {
  try {
    dlprof::detail::AtomicFile file(path, /*gzip=*/false, /*what=*/"");
    file.write(text);
    file.commit();
  } catch (const std::runtime_error& error) {
    throw InputError(without_library_prefix(error.what()));
  }
}

/// --baseline BASE... NEW...: the gate's verdict, written where -o says, its JUnit XML where --junit
/// says; the exit status is the verdict's.
int run_gate(const Options& options) {
  std::vector<std::string> notes;
  const auto read_side = [&](std::string_view side, const std::vector<std::string>& paths, bool is_base) {
    std::vector<dlprof::DiffSide> runs;
    for (const std::string& path : paths) {
      const std::optional<std::int64_t> rank = is_base ? (options.base_rank ? options.base_rank : options.rank)
                                                       : (options.new_rank ? options.new_rank : options.rank);
      const std::optional<std::size_t> window = is_base ? (options.base_window ? options.base_window : options.window)
                                                        : (options.new_window ? options.new_window : options.window);
      const std::string_view rank_flag = (is_base ? options.base_rank : options.new_rank) ? (is_base ? "--base-rank" : "--new-rank") : "--rank";
      const std::string_view window_flag =
          (is_base ? options.base_window : options.new_window) ? (is_base ? "--base-window" : "--new-window") : "--window";
      runs.push_back(read_diff_side(options, side, path, rank, window, rank_flag, window_flag, notes, /*refuse_empty=*/false));
    }
    return runs;
  };
  std::vector<dlprof::DiffSide> base = read_side("BASE", options.baselines, true);
  std::vector<dlprof::DiffSide> next = read_side("NEW", options.paths, false);
  std::vector<dlprof::analysis::StepSamples> base_samples, next_samples;
  std::vector<std::string> base_titles, next_titles;
  for (dlprof::DiffSide& run : base) {
    base_samples.push_back(std::move(run.samples));
    base_titles.push_back(run.title);
  }
  for (dlprof::DiffSide& run : next) {
    next_samples.push_back(std::move(run.samples));
    next_titles.push_back(run.title);
  }
  dlprof::GateOutcome outcome;
  outcome.gate = dlprof::analysis::regression_gate(base_samples, next_samples, options.gate,
                                                   {peak_flops_per_second(base.front().report), peak_flops_per_second(next.front().report)});
  outcome.diff = dlprof::analysis::diff_runs(dlprof::analysis::concatenate_runs(base_samples),
                                             dlprof::analysis::concatenate_runs(next_samples));
  outcome.base_title = fmt::format("{}", fmt::join(base_titles, ", "));
  outcome.next_title = fmt::format("{}", fmt::join(next_titles, ", "));
  std::string text = dlprof::render_gate_text(outcome);
  for (const std::string& note : notes) text += dlprof::detail::wrap("Note: " + note, 120, "  ") + "\n";
  if (!options.junit.empty()) write_file(options.junit, dlprof::render_gate_junit(outcome));
  if (!options.output.empty()) {
    write_file(options.output, text);
  } else if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw InputError(fmt::format("cannot write to standard output: {}", std::strerror(errno)));
  }
  switch (outcome.gate.verdict()) {
    case dlprof::analysis::GateVerdict::Pass: return 0;
    case dlprof::analysis::GateVerdict::Regression: return kExitRegression;
    case dlprof::analysis::GateVerdict::NotComparable: return kExitNotComparable;
  }
  return kExitNotComparable;
}

int run(int argc, char** argv) {
  const Options options = parse_command_line(argc, argv);
  if (options.help) {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (!options.export_trace.empty()) {
    dlprof::Trace trace;
    try {
      dlprof::ReadOptions read_options;
      read_options.strict = options.strict;
      trace = dlprof::read_trace(options.paths.front(), read_options);
    } catch (const dlprof::TraceReadError& error) {
      throw InputError(without_library_prefix(error.what()));
    }
    symbolize(trace, options.symbols);
    for (const std::string& note : trace.read_result.notes)
      if (dlprof::detail::starts_with(note, "call stacks: "))
        fmt::print(stderr, "{}: {}\n", kProgram, dlprof::detail::terminal_text(note));
    try {
      dlprof::save_chrome_trace(trace, options.export_trace);
    } catch (const std::runtime_error& error) {
      throw InputError(without_library_prefix(error.what()));
    }
    return 0;
  }
  if (!options.baselines.empty()) return run_gate(options);
  const std::string text = options.diff      ? render_diff(options)
                           : options.stacks  ? render_folded_stacks(options)
                           : options.kernels ? render_kernel_tables(options)
                                             : render(options, read_ranks(options));
  if (!options.output.empty()) {
    write_file(options.output, text);
  } else if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw InputError(fmt::format("cannot write to standard output: {}", std::strerror(errno)));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& error) {
    fmt::print(stderr, "{}: {}\nTry '{} --help'.\n", kProgram, error.what(), kProgram);
    return 2;
  } catch (const InputError& error) {
    fmt::print(stderr, "{}: {}\n", kProgram, error.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "{}: out of memory\n", kProgram);
    return 1;
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: {}\n", kProgram, error.what());
    return 1;
  }
}
