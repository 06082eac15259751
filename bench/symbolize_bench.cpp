// Symbolising call stacks offline (import/symbolize.hpp) against binutils' addr2line, in the same
// run: 10,000 distinct return addresses spread over this program's own code, which is built with
// debug information, turned into functions, files, lines and inlined calls. Each iteration starts
// from nothing, as a report does: dlprof reads the module's DWARF afresh in-process, addr2line is a
// process of its own (spawned, fed the addresses on stdin, read to the end), as a user runs it.
#include <dlprof/detail/window/module_map.hpp>
#include <dlprof/import/symbolize.hpp>

#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

extern char** environ;

namespace {

constexpr std::size_t kFrames = 10'000;

/// This program's module and kFrames distinct addresses spread evenly over its code.
struct Frames {
  dlprof::LoadedModule module;
  std::vector<std::uint64_t> addresses;
};

const Frames& frames() {
  static const Frames spread = [] {
    Frames made;
    const std::string self = dlprof::detail::executable_path();
    for (const dlprof::LoadedModule& module : dlprof::detail::loaded_modules())
      if (module.path == self) made.module = module;
    const std::uint64_t step = (made.module.end - made.module.start) / kFrames;
    for (std::size_t i = 0; i < kFrames; ++i) made.addresses.push_back(made.module.start + 1 + i * step);
    return made;
  }();
  return spread;
}

dlprof::Trace trace_of_frames() {
  dlprof::Trace trace;
  trace.modules = {frames().module};
  for (const std::uint64_t address : frames().addresses) {
    trace.stacks.push_back(dlprof::CallStack{static_cast<std::uint32_t>(trace.stack_frames.size()), 1});
    trace.stack_frames.push_back(dlprof::StackFrame{address, dlprof::StackFrame::kNoText});
  }
  return trace;
}

void symbolize(benchmark::State& state, bool lines) {
  std::size_t symbolised = 0;
  std::size_t frames_out = 0;
  for (auto _ : state) {
    state.PauseTiming();
    dlprof::Trace trace = trace_of_frames();
    state.ResumeTiming();
    dlprof::SymbolizeOptions options;
    options.lines = lines;
    const dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace, options);
    symbolised = result.symbolised;
    frames_out = trace.stack_frames.size();
    if (!result.problems.empty()) state.SkipWithError(result.problems.front().c_str());
  }
  state.counters["addresses"] = static_cast<double>(frames().addresses.size());
  state.counters["symbolised"] = static_cast<double>(symbolised);
  state.counters["frames_with_inlined"] = static_cast<double>(frames_out);
}

void BM_dlprof_symbolize_lines_and_inlines(benchmark::State& state) { symbolize(state, /*lines=*/true); }
BENCHMARK(BM_dlprof_symbolize_lines_and_inlines)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_dlprof_symbolize_functions_only(benchmark::State& state) { symbolize(state, /*lines=*/false); }
BENCHMARK(BM_dlprof_symbolize_functions_only)->Unit(benchmark::kMillisecond)->UseRealTime();

/// `addr2line -f -i -C -e EXE` (functions, inlined calls, demangled) on the same addresses, as ELF
/// addresses (it takes those of a position-independent executable), through a pipe each way.
void BM_addr2line(benchmark::State& state) {
  std::string input;
  for (const std::uint64_t address : frames().addresses)
    input += fmt::format("{:#x}\n", address - 1 - frames().module.base);
  std::size_t lines_out = 0;
  for (auto _ : state) {
    int to_child[2];
    int from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) {
      state.SkipWithError("pipe failed");
      return;
    }
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    ::posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    ::posix_spawn_file_actions_addclose(&actions, to_child[1]);
    ::posix_spawn_file_actions_addclose(&actions, from_child[0]);
    std::string exe = frames().module.path;
    char arg0[] = "addr2line", f[] = "-f", i[] = "-i", c[] = "-C", e[] = "-e";
    char* argv[] = {arg0, f, i, c, e, exe.data(), nullptr};
    pid_t child = 0;
    const int spawned = ::posix_spawnp(&child, "addr2line", &actions, nullptr, argv, environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(to_child[0]);
    ::close(from_child[1]);
    if (spawned != 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      state.SkipWithError("addr2line (binutils) cannot be run");
      return;
    }
    // addr2line buffers what it writes into a pipe: the addresses go in from a thread of their
    // own while this one reads, so that neither side waits on the other.
    std::thread writer([&] {
      for (std::size_t written = 0; written < input.size();) {
        const ssize_t sent = ::write(to_child[1], input.data() + written, input.size() - written);
        if (sent <= 0) break;
        written += static_cast<std::size_t>(sent);
      }
      ::close(to_child[1]);
    });
    char buffer[1 << 16];
    std::size_t newlines = 0;
    for (ssize_t got; (got = ::read(from_child[0], buffer, sizeof(buffer))) > 0;)
      for (ssize_t k = 0; k < got; ++k) newlines += buffer[k] == '\n';
    writer.join();
    ::close(from_child[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    lines_out = newlines;
  }
  state.counters["addresses"] = static_cast<double>(frames().addresses.size());
  state.counters["output_lines"] = static_cast<double>(lines_out);
}
BENCHMARK(BM_addr2line)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
