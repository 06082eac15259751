// bench/flight_bench.cpp: what the flight recorder (DLPROF_MODE=flight-recorder) costs the CPU demo,
// and that its memory stays flat. The step is the demo's own (examples/cpu_training_loop.cpp,
// through examples/cpu_mlp.hpp): a batch from the DataLoader, forward, backward and SGD on the
// 784-256-10 MLP, every range of the demo recorded.
//
//   cpu_demo/paired_flight_recorder/W   W steps with the flight recorder started (each ending in
//       prof.step(), which marks the step in the rings, its log) alternate with W steps with no
//       Profiler started (every range idle), inside one benchmark, so that both see the same
//       load. Steps are timed on the wall clock, as a user sees them; the first step of each
//       block is not counted. Counters: bare_ms and flight_ms (means of the counted steps),
//       overhead_pct = (flight_ms - bare_ms) / bare_ms, and the same from the medians
//       (overhead_p50_pct), which a step slowed by the host moves less.
//   cpu_demo/paired_thread_cpu/W   the same, with a flight recorder that reads each recording
//       thread's CPU time at every step() against one that does not (BM_paired_thread_cpu).
//   cpu_demo/flight_recorder_rss/literal_names:0|1   10,000 steps (batch 32, two loader workers)
//       with the recorder on: resident memory after 100 steps (rss_start_kb), after 1,000, 5,000
//       and 10,000 (rss_end_kb), the growth from the first to the last (rss_growth_kb), and the
//       growth of the process's name table (name_table_growth_kb): the demo names each step's
//       range anew (literal_names:0), which the table keeps, up to ProfilerOptions::name_table_bytes;
//       literal_names:1 names it by a literal.
//   step_call/flight_recorder:0|1   prof.step() alone, timed, after 360 recorded ranges (untimed):
//       a scheduled window's step() (flight_recorder:0) and a flight recorder's (1), whose log is
//       the rings: it copies none of the step's events.
//   flight_log/range/rings:heap|file|file_written_back   one recorded range in a flight recorder
//       whose rings are on the heap (no trace directory), in the flight log's file (with one), and
//       in the file while a thread makes the kernel write its dirty pages back every 10 ms
//       (fdatasync, where the kernel's own writeback runs every few seconds): a page written back
//       is write-protected until its next write faults, which the ranges then pay.
//   flight_log/step_call/rings:heap|file   prof.step() after 360 recorded ranges (untimed), with
//       the rings on the heap or in the file, where a step's end also notes the step and writes
//       the names its events used first.
//
// Run: build-bench/bench/flight_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <dlprof/detail/backends/thread_cpu_sampler.hpp>
#include <dlprof/profiler.hpp>

#include "cpu_mlp.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace demo = dlprof_examples::cpu_mlp;

/// The demo's model, data and loader, at a batch size and a number of loader workers.
struct CpuDemo {
  demo::SyntheticDataset dataset{demo::kDatasetSeed};
  demo::Mlp model{demo::kModelSeed};
  demo::SyntheticLoader loader;

  CpuDemo(int batch_size, int workers) : loader(dataset, batch_size, workers) {}

  /// One training step, as the demo's loop body runs it: in a range named after the step (a new
  /// name every step, interned into the process's name table), or with `literal_name`, in a
  /// range named by a literal.
  void step(int number, bool literal_name = false) {
    if (literal_name) {
      DLPROF_RANGE("train_step");
      train();
    } else {
      DLPROF_RANGE_F("epoch {} step {}", number / loader.batches_per_epoch(), number);
      train();
    }
  }

  void train() {
    const demo::Batch batch = loader.next();
    model.zero_grad();
    const float loss = model.forward(batch);
    model.backward(batch);
    model.sgd_step(demo::kLearningRate);
    dlprof::counter("loss", loss);
  }
};

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (const double value : values) sum += value;
  return sum / static_cast<double>(values.size());
}

double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

dlprof::ProfilerOptions flight_recorder() {
  return dlprof::ProfilerOptions{}.mode(dlprof::Mode::FlightRecorder).slow_step_factor(0);
}

void BM_paired_flight_recorder(benchmark::State& state) {
  const auto block = static_cast<int>(state.range(0));
  CpuDemo cpu(/*batch_size=*/128, /*workers=*/0);  // the demo's defaults
  dlprof::Profiler profiler(flight_recorder());
  std::vector<double> bare_ms, flight_ms;
  int number = 0;
  int recorded_in_block = block;
  for (auto _ : state) {
    if (recorded_in_block == block) {
      if (profiler.started()) profiler.stop();
      for (int i = 0; i < block; ++i) {
        const Clock::time_point begin = Clock::now();
        cpu.step(number++);
        if (i != 0) bare_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - begin).count());
      }
      profiler.start();
      recorded_in_block = 0;
    }
    const Clock::time_point begin = Clock::now();
    cpu.step(number++);
    profiler.step();
    const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
    state.SetIterationTime(elapsed);
    if (recorded_in_block++ != 0) flight_ms.push_back(elapsed * 1e3);
  }
  if (!profiler.dump("end of benchmark")) state.SkipWithError("the flight recorder did not dump");
  const auto trace = profiler.last_trace();
  profiler.stop();
  if (bare_ms.empty() || flight_ms.empty()) return;
  state.counters["bare_ms"] = mean(bare_ms);
  state.counters["flight_ms"] = mean(flight_ms);
  state.counters["overhead_pct"] = 100 * (mean(flight_ms) - mean(bare_ms)) / mean(bare_ms);
  state.counters["overhead_p50_pct"] = 100 * (median(flight_ms) - median(bare_ms)) / median(bare_ms);
  state.counters["dropped"] = trace != nullptr ? static_cast<double>(trace->dropped_events) : -1;
  if (trace == nullptr || trace->dropped_events != 0) state.SkipWithError("the rings dropped events");
}
BENCHMARK(BM_paired_flight_recorder)->Name("cpu_demo/paired_flight_recorder")->Arg(20)->UseManualTime()
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);

/// Per-step reading of each recording thread's CPU time (ProfilerOptions::thread_cpu), in the
/// same run as without it: blocks of `block` steps of the demo (batch 128, two loader workers)
/// under a flight recorder that reads the threads at each step() alternate with blocks under one
/// that does not. Counters: with_ms and without_ms (mean steps), overhead_pct and
/// overhead_p50_pct as above; reading_us, one reading of every recording thread timed on its own
/// between the blocks, threads (how many it read), and reading_pct = reading_us over the mean
/// step without readings, the figure the step pays.
void BM_paired_thread_cpu(benchmark::State& state) {
  const auto block = static_cast<int>(state.range(0));
  CpuDemo cpu(/*batch_size=*/128, /*workers=*/2);
  dlprof::Profiler with_readings(flight_recorder().thread_cpu(true));
  dlprof::Profiler without_readings(flight_recorder().thread_cpu(false));
  dlprof::detail::ThreadCpuSampler sampler;
  std::vector<double> with_ms, without_ms, reading_us;
  int number = 0;
  int in_block = block;
  bool reading = false;
  for (auto _ : state) {
    if (in_block == block) {
      (reading ? with_readings : without_readings).stop();
      reading = !reading;
      (reading ? with_readings : without_readings).start();
      in_block = 0;
      for (int i = 0; i < 20; ++i) {
        const Clock::time_point begin = Clock::now();
        sampler.sample(i);
        reading_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
      }
      sampler.clear();
    }
    const Clock::time_point begin = Clock::now();
    cpu.step(number++, /*literal_name=*/true);
    (reading ? with_readings : without_readings).step();
    const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
    state.SetIterationTime(elapsed);
    if (in_block++ != 0) (reading ? with_ms : without_ms).push_back(elapsed * 1e3);
  }
  if (!reading) {  // the readings of the last steps, from a recorder that takes them
    without_readings.stop();
    with_readings.start();
    cpu.step(number++, /*literal_name=*/true);
    with_readings.step();
  }
  if (!with_readings.dump("end of benchmark")) state.SkipWithError("the flight recorder did not dump");
  const auto trace = with_readings.last_trace();
  with_readings.stop();
  without_readings.stop();
  if (with_ms.empty() || without_ms.empty() || reading_us.empty()) return;
  state.counters["with_ms"] = mean(with_ms);
  state.counters["without_ms"] = mean(without_ms);
  state.counters["overhead_pct"] = 100 * (mean(with_ms) - mean(without_ms)) / mean(without_ms);
  state.counters["overhead_p50_pct"] = 100 * (median(with_ms) - median(without_ms)) / median(without_ms);
  state.counters["reading_us"] = median(reading_us);
  state.counters["reading_pct"] = 100 * median(reading_us) / 1e3 / mean(without_ms);
  std::size_t threads = 0;
  if (trace != nullptr) {
    std::vector<std::uint32_t> seen;
    for (const dlprof::ThreadCpuSample& sample : trace->thread_cpu)
      if (std::find(seen.begin(), seen.end(), sample.thread) == seen.end()) seen.push_back(sample.thread);
    threads = seen.size();
  }
  state.counters["threads"] = static_cast<double>(threads);
  if (threads < 3) state.SkipWithError("the recorder did not read the training thread and both loader threads");
}
BENCHMARK(BM_paired_thread_cpu)->Name("cpu_demo/paired_thread_cpu")->Arg(20)->UseManualTime()
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);

std::size_t resident_kb() {
  long pages = 0, resident = 0;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) / 1024;
}

void BM_flight_recorder_rss(benchmark::State& state) {
  constexpr int kSteps = 10'000;
  const bool literal_names = state.range(0) != 0;
  for (auto _ : state) {
    CpuDemo cpu(/*batch_size=*/32, /*workers=*/2);
    dlprof::Profiler profiler(flight_recorder());
    profiler.start();
    std::size_t name_table_start = 0;
    for (int number = 0; number < kSteps; ++number) {
      cpu.step(number, literal_names);
      if (number + 1 == 100) name_table_start = dlprof::detail::InternTable::instance().bytes();
      profiler.step();
      if (number + 1 == 100) state.counters["rss_start_kb"] = static_cast<double>(resident_kb());
      if (number + 1 == 1'000) state.counters["rss_1000_kb"] = static_cast<double>(resident_kb());
      if (number + 1 == 5'000) state.counters["rss_5000_kb"] = static_cast<double>(resident_kb());
    }
    state.counters["rss_end_kb"] = static_cast<double>(resident_kb());
    state.counters["rss_growth_kb"] = state.counters["rss_end_kb"] - state.counters["rss_start_kb"];
    state.counters["name_table_growth_kb"] =
        static_cast<double>(dlprof::detail::InternTable::instance().bytes() - name_table_start) / 1024;
    if (!profiler.dump("end of benchmark")) state.SkipWithError("the flight recorder did not dump");
    const auto trace = profiler.last_trace();
    state.counters["kept_steps"] = static_cast<double>(std::count_if(
        trace->events.begin(), trace->events.end(), [](const dlprof::TraceEvent& event) { return event.kind == dlprof::EventKind::Step; }));
    profiler.stop();
  }
}
BENCHMARK(BM_flight_recorder_rss)
    ->Name("cpu_demo/flight_recorder_rss")
    ->ArgName("literal_names")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

void BM_step_call(benchmark::State& state) {
  const bool flight = state.range(0) != 0;
  dlprof::Profiler profiler(flight ? flight_recorder()
                                   : dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 1'000'000)));
  profiler.start();
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < 360; ++i) {
      DLPROF_RANGE("step_call_range");
    }
    state.ResumeTiming();
    profiler.step();
  }
  profiler.stop();
}
BENCHMARK(BM_step_call)->Name("step_call")->ArgName("flight_recorder")->Arg(0)->Arg(1)->Iterations(20'000);

/// Where a flight recorder's rings live, as flight_log/... benchmarks set it up.
enum class Rings { Heap = 0, File = 1, FileWrittenBack = 2 };

/// A flight recorder with its rings where `rings` says, and, for FileWrittenBack, a thread that
/// writes the log's dirty pages back every 10 ms while it runs.
class FlightLogSetup {
 public:
  explicit FlightLogSetup(Rings rings)
      : directory_(make_directory()),
        profiler_(rings == Rings::Heap ? flight_recorder() : flight_recorder().crash_directory(directory_, "bench")) {
    profiler_.start();
    if (rings != Rings::FileWrittenBack) return;
    writer_ = std::thread([this] {
      const int fd = open_log();
      while (!done_.load(std::memory_order_relaxed)) {
        if (fd >= 0) ::fdatasync(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (fd >= 0) ::close(fd);
    });
  }
  ~FlightLogSetup() {
    done_.store(true, std::memory_order_relaxed);
    if (writer_.joinable()) writer_.join();
    profiler_.stop();
    std::filesystem::remove_all(directory_);
  }
  dlprof::Profiler& profiler() { return profiler_; }
  bool has_log() const { return open_log_count() == 1; }

 private:
  static std::string make_directory() {
    char pattern[] = "/tmp/dlprof-flight-bench-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    return made != nullptr ? made : "/tmp";
  }
  std::size_t open_log_count() const {
    std::size_t count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(directory_))
      count += entry.path().extension() == ".dlprof-flight";
    return count;
  }
  int open_log() const {
    for (const auto& entry : std::filesystem::directory_iterator(directory_))
      if (entry.path().extension() == ".dlprof-flight") return ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    return -1;
  }

  std::string directory_;
  dlprof::Profiler profiler_;
  std::atomic<bool> done_{false};
  std::thread writer_;
};

const char* const kRingsNames[] = {"heap", "file", "file_written_back"};

void BM_flight_log_range(benchmark::State& state) {
  const auto rings = static_cast<Rings>(state.range(0));
  state.SetLabel(kRingsNames[state.range(0)]);
  FlightLogSetup setup(rings);
  if ((rings != Rings::Heap) != setup.has_log()) state.SkipWithError("the flight log's file is not where it should be");
  std::int64_t in_step = 0;
  for (auto _ : state) {
    DLPROF_RANGE("flight_log_range");
    if (++in_step == 4096) {  // steps of 4096 ranges: the log frees the old ones, as in training
      state.PauseTiming();
      setup.profiler().step();
      in_step = 0;
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_flight_log_range)->Name("flight_log/range")->ArgName("rings")->DenseRange(0, 2);

void BM_flight_log_step_call(benchmark::State& state) {
  const auto rings = static_cast<Rings>(state.range(0));
  state.SetLabel(kRingsNames[state.range(0)]);
  FlightLogSetup setup(rings);
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < 360; ++i) {
      DLPROF_RANGE("step_call_range");
    }
    state.ResumeTiming();
    setup.profiler().step();
  }
}
BENCHMARK(BM_flight_log_step_call)->Name("flight_log/step_call")->ArgName("rings")->DenseRange(0, 1)->Iterations(20'000);

}  // namespace

BENCHMARK_MAIN();
