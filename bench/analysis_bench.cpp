// bench/analysis_bench.cpp: what turning a torch.profiler trace into the report costs, on the
// reference traces (tests/data/reference-traces): reading the file (import/chrome_trace.hpp) and
// every analysis the report shows, in MB/s of JSON text:
//
//   BM_load_and_analyze/<set>  read_trace + all analyses: what `dlprof-report` does per rank, and
//                              what bench/hta_comparison.py sets against HTA's load + temporal +
//                              kernel-type breakdown
//   BM_analyze/<set>           the analyses alone, on a trace already loaded
//   BM_roofline/<set>          of those, how far from the limit: the ops' roofline, the MFU and the
//                              GPUs' clocks over the steps (the report's section)
//   BM_kernel_table/<set>      dlprof-report --kernels' work after reading: every kernel tied to
//                              its op and layer, grouped, and judged against the roofs
//
// "All analyses": dlprof::make_report, what dlprof-report and prof.report() print: key averages,
// nvprof's GPU activities and API calls, TensorBoard's step breakdown and GPU summary, HTA's five
// per-rank analyses, the memory curves and the recommendations (which attribute every kernel),
// the recommendations on a second thread.
//
// Peak memory needs a process of its own:
//   analysis_bench --peak-rss [PATH]   loads and analyses PATH (default: the V100 trace) once and
//                                      prints "peak_rss_kib <KiB> events <n> results <n>"
//
// Run: build-bench/bench/analysis_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <dlprof/analysis/device_clock.hpp>
#include <dlprof/analysis/kernel_table.hpp>
#include <dlprof/analysis/roofline.hpp>
#include <dlprof/import/chrome_trace.hpp>

#include "reference_traces.hpp"
#include <dlprof/report.hpp>

namespace {

namespace fs = std::filesystem;

using dlprof_bench::first_file;
using dlprof_bench::ReferenceTrace;
using dlprof_bench::kReferenceTraces;

std::uint64_t json_bytes(const std::string& path) {
  const auto bytes = dlprof::detail::reader::read_file(path, UINT32_MAX);
  return dlprof::detail::reader::gunzip(std::string_view(bytes.data(), bytes.size()), UINT32_MAX).size();
}

/// Every analysis of the report (make_report); returns something of it so that none is optimised
/// away.
std::size_t analyze(const dlprof::Trace& trace) {
  const dlprof::Report report = dlprof::make_report(trace);
  const dlprof::RankReport& rank = report.ranks.front();
  return rank.top_ops.size() + rank.steps.steps.size() + static_cast<std::size_t>(rank.hta.temporal.kernel_time_ns & 1) +
         report.recommendations.size();
}

void set_rate(benchmark::State& state, std::uint64_t bytes) {
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e6,
                                              benchmark::Counter::kIsRate);
}

void BM_load_and_analyze(benchmark::State& state, const ReferenceTrace& set) {
  const std::string path = first_file(set.directory);
  for (auto _ : state) {
    const dlprof::Trace trace = dlprof::read_trace(path);
    benchmark::DoNotOptimize(analyze(trace));
  }
  set_rate(state, json_bytes(path));
}

void BM_analyze(benchmark::State& state, const ReferenceTrace& set) {
  const std::string path = first_file(set.directory);
  const dlprof::Trace trace = dlprof::read_trace(path);
  for (auto _ : state) benchmark::DoNotOptimize(analyze(trace));
  set_rate(state, json_bytes(path));
}

void BM_roofline(benchmark::State& state, const ReferenceTrace& set) {
  const dlprof::Trace trace = dlprof::read_trace(first_file(set.directory));
  const dlprof::analysis::StepBreakdown steps = dlprof::analysis::step_breakdown(trace);
  const std::int64_t begin = steps.steps.empty() ? trace.window_start_ns : steps.steps.front().start_ns;
  const std::int64_t end = steps.steps.empty() ? trace.window_end_ns : steps.steps.back().end_ns;
  for (auto _ : state) {
    benchmark::DoNotOptimize(dlprof::analysis::roofline(trace).rows.size());
    benchmark::DoNotOptimize(dlprof::analysis::model_flops_utilization(trace, begin, end).has_value());
    benchmark::DoNotOptimize(dlprof::analysis::device_clocks(trace, begin, end).size());
  }
}

void BM_kernel_table(benchmark::State& state, const ReferenceTrace& set) {
  const dlprof::Trace trace = dlprof::read_trace(first_file(set.directory));
  for (auto _ : state) benchmark::DoNotOptimize(dlprof::analysis::kernel_table(trace).rows.size());
}

int peak_rss(const std::string& path) {
  const dlprof::Trace trace = dlprof::read_trace(path);
  const std::size_t results = analyze(trace);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  fmt::print("peak_rss_kib {} events {} results {}\n", usage.ru_maxrss,
             trace.events.size() + trace.gpu_events.size() + trace.api_events.size(), results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--peak-rss") == 0)
    return peak_rss(argc >= 3 ? argv[2] : first_file(kReferenceTraces[0].directory));
  if (!fs::is_directory(DLPROF_REFERENCE_TRACES_DIR)) {
    std::fprintf(stderr, "analysis_bench: no reference traces at %s\n", DLPROF_REFERENCE_TRACES_DIR);
    return 1;
  }
  for (const ReferenceTrace& set : kReferenceTraces) {
    benchmark::RegisterBenchmark(fmt::format("BM_load_and_analyze/{}", set.label).c_str(), BM_load_and_analyze, set)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("BM_analyze/{}", set.label).c_str(), BM_analyze, set)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("BM_roofline/{}", set.label).c_str(), BM_roofline, set)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("BM_kernel_table/{}", set.label).c_str(), BM_kernel_table, set)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
