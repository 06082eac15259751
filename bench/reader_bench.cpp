// bench/reader_bench.cpp: how fast the trace reader (import/chrome_trace.hpp) turns
// torch.profiler's files into a Trace, on the reference traces (tests/data/reference-traces), in
// MB/s of JSON text and events/s, stage by stage:
//
//   BM_read_trace/<set>   read_trace(path): read the .json.gz, inflate, parse, map (what
//                         dlprof-report pays per file)
//   BM_gunzip/<set>       the inflating alone (zlib)
//   BM_parse_trace/<set>  parse + mapping of the JSON text already in memory (parse_trace),
//                         which includes copying the text into the buffer parsed in place
//
// Events are the file's traceEvents entries (flows and metadata included), as HTA and Python's
// json module count them. Peak memory needs a process of its own:
//
//   reader_bench --peak-rss [PATH]   reads PATH (default: the V100 trace) once and prints the
//                                    process's peak RSS before and after
//
// Run: build-bench/bench/reader_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <dlprof/import/chrome_trace.hpp>

#include "reference_traces.hpp"

namespace {

namespace fs = std::filesystem;

using dlprof_bench::first_file;
using dlprof_bench::ReferenceTrace;
using dlprof_bench::kReferenceTraces;

/// The decompressed JSON text of a file, and its number of traceEvents entries.
struct Text {
  std::string json;
  std::size_t events = 0;
};

Text load(const std::string& path) {
  const dlprof::detail::reader::ByteBuffer bytes = dlprof::detail::reader::read_file(path, UINT32_MAX);
  const dlprof::detail::reader::ByteBuffer json =
      dlprof::detail::reader::gunzip(std::string_view(bytes.data(), bytes.size()), UINT32_MAX);
  Text text;
  text.json.assign(json.data(), json.size());
  // Every event object carries exactly one "ph" key.
  for (std::size_t at = text.json.find("\"ph\""); at != std::string::npos; at = text.json.find("\"ph\"", at + 4)) ++text.events;
  return text;
}

void set_rates(benchmark::State& state, const Text& text) {
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text.json.size()) * static_cast<double>(state.iterations()) / 1e6,
                                              benchmark::Counter::kIsRate);
  state.counters["events/s"] =
      benchmark::Counter(static_cast<double>(text.events) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_read_trace(benchmark::State& state, const ReferenceTrace& set) {
  const std::string path = first_file(set.directory);
  const Text text = load(path);
  for (auto _ : state) {
    dlprof::Trace trace = dlprof::read_trace(path);
    benchmark::DoNotOptimize(trace.events.data());
  }
  set_rates(state, text);
}

void BM_gunzip(benchmark::State& state, const ReferenceTrace& set) {
  const std::string path = first_file(set.directory);
  const Text text = load(path);
  const dlprof::detail::reader::ByteBuffer bytes = dlprof::detail::reader::read_file(path, UINT32_MAX);
  for (auto _ : state) {
    dlprof::detail::reader::ByteBuffer json =
        dlprof::detail::reader::gunzip(std::string_view(bytes.data(), bytes.size()), UINT32_MAX);
    benchmark::DoNotOptimize(json.data());
  }
  set_rates(state, text);
}

void BM_parse_trace(benchmark::State& state, const ReferenceTrace& set) {
  const Text text = load(first_file(set.directory));
  for (auto _ : state) {
    dlprof::Trace trace = dlprof::parse_trace(text.json, set.label);
    benchmark::DoNotOptimize(trace.events.data());
  }
  set_rates(state, text);
}

long peak_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

int peak_rss(const std::string& path) {
  const long before = peak_rss_kib();
  const dlprof::Trace trace = dlprof::read_trace(path);
  const long after = peak_rss_kib();
  fmt::print("{}: {} events, {} GPU events, {} API calls; peak RSS {:.1f} MiB before reading, {:.1f} MiB after\n", path,
             trace.events.size(), trace.gpu_events.size(), trace.api_events.size(), before / 1024.0, after / 1024.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--peak-rss") == 0)
    return peak_rss(argc >= 3 ? argv[2] : first_file(kReferenceTraces[0].directory));
  if (!fs::is_directory(DLPROF_REFERENCE_TRACES_DIR)) {
    std::fprintf(stderr, "reader_bench: no reference traces at %s\n", DLPROF_REFERENCE_TRACES_DIR);
    return 1;
  }
  for (const ReferenceTrace& set : kReferenceTraces) {
    benchmark::RegisterBenchmark(fmt::format("BM_read_trace/{}", set.label).c_str(), BM_read_trace, set)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("BM_gunzip/{}", set.label).c_str(), BM_gunzip, set)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("BM_parse_trace/{}", set.label).c_str(), BM_parse_trace, set)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
