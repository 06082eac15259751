// dlprof/report/make_report.hpp: the report, what every analysis says about a set of traces (one
// per rank) gathered in one value, which render_text, render_json and render_html print.
//
// A Report is a pure function of its traces: the same one is made in-process from the trace of a
// recording window (Profiler::report(), dlprof::report(trace)) and offline from files
// (dlprof-report). Like the analyses' results, it names kernels, ops and steps by views into the
// traces' strings: a Report made from traces given by value (a temporary, std::move) keeps them;
// one made from traces passed by reference refers to them, so keep those alive while it is used.
//
//   const std::vector<dlprof::Trace> ranks = dlprof::read_trace_set({"log/run"});
//   const dlprof::Report report = dlprof::make_report(ranks);
//   fmt::print("{}", dlprof::render_text(report));
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/collectives.hpp"
#include "dlprof/analysis/analysis.hpp"
#include "dlprof/analysis/device_clock.hpp"
#include "dlprof/analysis/device_peaks.hpp"
#include "dlprof/analysis/host_syncs.hpp"
#include "dlprof/analysis/idle_threads.hpp"
#include "dlprof/analysis/recommendations.hpp"
#include "dlprof/analysis/roofline.hpp"
#include "dlprof/analysis/short_kernel_name.hpp"
#include "dlprof/analysis/steady_state.hpp"
#include "dlprof/analysis/thread_cpu.hpp"
#include "dlprof/analysis/call_stacks.hpp"
#include "dlprof/analysis/cuda_graphs.hpp"
#include "dlprof/analysis/memory_blocks.hpp"
#include "dlprof/analysis/memory_by_op.hpp"
#include "dlprof/analysis/memory_leaks.hpp"
#include "dlprof/analysis/memory_peak.hpp"
#include "dlprof/analysis/memory_timeline.hpp"
#include "dlprof/analysis/run_diff.hpp"
#include "dlprof/analysis/slow_step.hpp"
#include "dlprof/analysis/step_samples.hpp"
#include "dlprof/analysis/verdict.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/timeline.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

struct RankViews;

struct ReportOptions {
  /// What the analyses see; `analysis.hta_compat` applies HTA's conventions (dlprof-report
  /// --hta-compat).
  analysis::AnalysisOptions analysis;
  /// Rows of the longer tables (top ops, top kernels, nvprof's sections) and bars of the charts.
  std::size_t top_rows = 10;
  /// Names the input in the report's heading, e.g. the trace files; empty: none.
  std::string title;
  /// The roofs of every rank's GPUs (dlprof-report --peaks: a GPU dlprof does not know, or other
  /// figures for one it does); none: each GPU's own from analysis/device_peaks.hpp.
  std::optional<analysis::DevicePeaks> peaks;
  /// Makes what the page's interactive views hold of a rank (RankReport::views) while its events
  /// are held: dlprof::rank_views_of (report/views.hpp; every op by input shapes and call site,
  /// the kernel table, the module tree and the timeline). None: the page's Operator, Kernel,
  /// Trace and Module views are empty, as render_text and render_json need none of it. A pointer,
  /// so that a file that makes only text reports does not compile them.
  using ViewsMaker = std::shared_ptr<const RankViews> (*)(const Trace&, const analysis::KernelAttribution&, const ReportOptions&);
  ViewsMaker views = nullptr;
  TimelineOptions timeline;  ///< what rank_views_of keeps of the timeline
};

/// The device time of every kernel sharing one name.
struct KernelTotal {
  /// The width of short_name: the text report's Name column.
  static constexpr std::size_t kShortNameWidth = 48;
  std::string_view name;
  std::string short_name;  ///< analysis::short_kernel_names' form, apart from the other top kernels'
  std::uint64_t calls = 0;
  std::int64_t total_ns = 0;
  std::int64_t min_ns = 0;
  std::int64_t max_ns = 0;
  double percent = 0;  ///< of all kernels' time
  analysis::KernelType type = analysis::KernelType::Computation;
  /// Whether it ran on Tensor Cores (matrix cores); none where the list cannot judge the GPU's
  /// kernels (MatrixUnits::Unknown).
  std::optional<bool> tensor_cores;

  double mean_ns() const noexcept { return calls == 0 ? 0.0 : static_cast<double>(total_ns) / static_cast<double>(calls); }
};

/// A thread besides the training loop's that only waits (analysis::idle_threads).
struct IdleThreadTime {
  std::int64_t os_tid = 0;
  std::string thread_name;
  std::int64_t wait_ns = 0;
  std::size_t waits = 0;
  std::string_view frame;  ///< the frame it waits in longest
};

/// Memory allocated on one device over time, from the trace's `[memory]` events (profile_memory):
/// the allocator's Total Allocated after each event, thinned to at most about kMaxPoints points
/// that keep every low and high.
struct MemoryCurve {
  static constexpr std::size_t kMaxPoints = 2000;
  MemoryDeviceType device_type = MemoryDeviceType::CUDA;
  std::int32_t device = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> points;  ///< (time ns, bytes allocated), by time
  std::int64_t peak_bytes = 0;
  std::int64_t capacity_bytes = 0;  ///< the GPU's memory from deviceProperties; 0 when unknown
};

/// What the analyses say about one rank's trace.
struct RankReport {
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  std::int64_t window_start_ns = 0;
  std::int64_t window_end_ns = 0;
  bool gpu_activity = false;  ///< the trace has GPU work
  /// The trace has allocations (profile_memory): the ops get torch's memory columns; and GPU
  /// allocations among them, named device_memory_name ("CUDA", "HIP").
  bool memory_activity = false;
  bool device_memory_activity = false;
  std::string device_memory_name = "CUDA";
  analysis::StepBreakdown steps;
  analysis::HtaAnalyses hta;
  std::vector<KeyAverage> top_ops;  ///< by self time, ProfilerSteps left out, at most top_rows
  /// By self GPU time, those with some, ProfilerSteps left out, at most top_rows.
  std::vector<KeyAverage> top_ops_by_gpu;
  /// By the memory they kept (self GPU memory where the trace has GPU allocations, else self CPU
  /// memory), those that kept some, ProfilerSteps left out, at most top_rows.
  std::vector<KeyAverage> top_ops_by_memory;
  /// Per device, what each op allocated, as TensorBoard's memory view gives it; empty without
  /// allocations.
  std::vector<analysis::DeviceOpMemory> memory_by_op;
  /// Per device, what was alive at its peak; the memory at the steps' ends and what grows there;
  /// allocated memory over time by category. Empty without allocations.
  std::vector<analysis::MemoryPeak> memory_peaks;
  /// The allocations the allocator could not make (LibTorch's out-of-memory reports), each with
  /// what held the device's memory then; the report leads with them.
  std::vector<analysis::OutOfMemory> out_of_memory;
  analysis::MemoryLeaks memory_leaks;
  std::vector<analysis::DeviceMemoryTimeline> memory_timelines;
  std::size_t op_names = 0;         ///< names of ops and ranges in the trace
  /// Threads besides the training loop's whose Python frames only wait, longest first: their
  /// waiting frames are left out of the top ops, as they spend no CPU time.
  std::vector<IdleThreadTime> idle_threads;
  std::vector<KernelTotal> top_kernels;  ///< by total time, at most top_rows
  std::size_t kernel_names = 0;
  std::int64_t kernel_ns = 0;            ///< all kernels' time
  analysis::GpuSummary gpu_summary;      ///< every row; the renderers show the first top_rows
  analysis::HostSyncs syncs;             ///< where the host waits for the GPU in the steps
  analysis::SteadyState steady;          ///< the steps that show the steady state, and those left out
  std::vector<MemoryCurve> memory;       ///< by device type, then device
  /// How far from the limit: every op's row against its roofs, by time lost (the renderers show
  /// the first top_rows); the model FLOP utilization over the steps; the GPUs' clocks there.
  analysis::Roofline roofline;
  std::optional<analysis::ModelFlopsUtilization> mfu;
  std::vector<analysis::DeviceClock> clocks;
  /// How busy each recording thread was in each step: running, waiting for a CPU, blocked.
  analysis::ThreadCpu thread_cpu;
  /// Which line of code: the ops with call stacks by the innermost frame of the user's code, the
  /// first top_rows by self CPU time and by the GPU time they launched.
  analysis::CodeLines code_lines;
  /// The call stacks as flame graphs: by self CPU time, by the GPU time each op launched, and by
  /// the bytes each op allocated (empty without profile_memory's allocations).
  analysis::FlameGraph cpu_flame_graph;
  analysis::FlameGraph gpu_flame_graph;
  analysis::FlameGraph memory_flame_graph;
  /// The GPU work CUDA or HIP graphs replayed, by graph.
  analysis::CudaGraphs cuda_graphs;
  std::uint64_t dropped_events = 0;      ///< lost to full rings while recording
  std::uint64_t dropped_gpu_records = 0; ///< lost by CUPTI or dlprof's device buffer
  std::uint64_t overflowed_names = 0;    ///< names recorded as "<dlprof: name table full>"
  std::string flight_recorder_dump;      ///< a flight recorder's dump: why it was written
  /// A slow step's dump: that step against the median of the others, the keys that grew.
  std::optional<analysis::SlowStep> slow_step;
  ReadResult read;                       ///< what reading the trace file left out or changed
  std::shared_ptr<const RankViews> views;  ///< made by ReportOptions::views; null without

  /// The mean GPU utilization of the rank's GPUs over its steps, [0, 1]; none without kernels.
  std::optional<double> gpu_utilization() const noexcept {
    if (steps.devices.empty()) return std::nullopt;
    double sum = 0;
    for (const analysis::DeviceMetrics& device : steps.devices) sum += device.utilization;
    return sum / static_cast<double>(steps.devices.size());
  }
};

/// The slowest rank against the median rank, by the keys that take it longer a step.
struct SlowRank {
  std::int64_t rank = 0;
  std::int64_t median_rank = 0;
  bool straggler = false;      ///< the rank the others wait for in collectives, not only the longest steps
  double step_delta_ns = 0;    ///< its mean step time less the median rank's
  /// The keys that take it longer a step (not communication, which is waiting, nor the step's own
  /// time), each at least 1 % of the median rank's step, largest first, at most five; each with its
  /// p-value over the steps (a run of few steps cannot make it small: ranks run one program, so a
  /// rank's excess is not chance the way a second run's is).
  std::vector<analysis::KeyChange> keys;
};

struct Report {
  ReportOptions options;
  std::vector<RankReport> ranks;  ///< by rank
  /// Ranks side by side and each step's straggler: with two ranks or more.
  std::optional<analysis::RankComparison> comparison;
  /// The slowest rank (the collectives' straggler, else the longest steps) against the median
  /// rank, key by key: with two ranks or more.
  std::optional<SlowRank> slow_rank;
  /// The ranks' collectives compared, and the rank that arrives last: with two ranks or more
  /// whose traces recorded collectives with their args (record_param_comms).
  std::optional<analysis::CollectiveAnalysis> collectives;
  /// Ranked by the time they save (analysis/recommendations.hpp), a rule found on several ranks
  /// once.
  std::vector<analysis::Recommendation> recommendations;
  /// What bounds the step, its time, GPU busy and the top actions: the report's first lines.
  analysis::Verdict verdict;
  /// The earliest window start of the ranks: times in the JSON and the charts count from here, so
  /// ranks line up as they do in HTA.
  std::int64_t origin_ns = 0;
  /// The traces the views above point into, when the Report was given them by value.
  std::shared_ptr<const void> owned_traces;
};

/// What the report over several ranks needs of one rank, made from its trace alone
/// (analyse_rank()): the rank's report, its findings and its collectives summarized.
struct AnalysedRank {
  RankReport report;
  std::vector<analysis::Recommendation> findings;  ///< without the "rank N: " of a report over ranks
  analysis::RankCollectives collectives;
  bool has_collectives = false;  ///< c10d's calls or communication kernels: a rank to compare
  /// Its steps' figures by op, for the slow rank's comparison with the median rank.
  analysis::StepSamples samples;
  /// The trace the report's views point into, its events released; none when the caller keeps
  /// the trace.
  std::shared_ptr<const Trace> trace;
};

namespace detail {

inline std::vector<KernelTotal> kernel_totals(const Trace& trace, const analysis::AnalysisOptions& options,
                                              std::int64_t& all_kernels_ns) {
  const bool judged = analysis::matrix_units_of(trace) != analysis::MatrixUnits::Unknown;
  std::unordered_map<std::uint32_t, std::size_t> row_of_name;
  std::vector<KernelTotal> rows;
  all_kernels_ns = 0;
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel) continue;
    const auto [found, inserted] = row_of_name.try_emplace(work.name, rows.size());
    if (inserted) {
      KernelTotal row;
      row.name = trace.names[work.name];
      row.min_ns = work.duration_ns();
      row.type = analysis::kernel_type(row.name, options);
      if (judged) row.tensor_cores = analysis::uses_tensor_cores(row.name);
      rows.push_back(row);
    }
    KernelTotal& row = rows[found->second];
    ++row.calls;
    row.total_ns += work.duration_ns();
    row.min_ns = std::min(row.min_ns, work.duration_ns());
    row.max_ns = std::max(row.max_ns, work.duration_ns());
    all_kernels_ns += work.duration_ns();
  }
  for (KernelTotal& row : rows)
    row.percent = all_kernels_ns == 0 ? 0.0 : 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(all_kernels_ns);
  std::stable_sort(rows.begin(), rows.end(), [](const KernelTotal& a, const KernelTotal& b) { return a.total_ns > b.total_ns; });
  return rows;
}

/// Keeps, of each of kMaxPoints time buckets, its lowest and highest point in time order, so that
/// every peak of a long run stays on the curve.
inline void thin_memory_curve(MemoryCurve& curve) {
  auto& points = curve.points;
  if (points.size() <= MemoryCurve::kMaxPoints) return;
  const std::int64_t first = points.front().first;
  const double span = static_cast<double>(points.back().first - first) + 1.0;
  const std::size_t buckets = MemoryCurve::kMaxPoints / 2;
  std::vector<std::pair<std::int64_t, std::int64_t>> kept;
  std::size_t begin = 0;
  while (begin < points.size()) {
    const auto bucket = static_cast<std::size_t>(static_cast<double>(points[begin].first - first) / span * static_cast<double>(buckets));
    std::size_t end = begin;
    std::size_t low = begin;
    std::size_t high = begin;
    while (end < points.size() &&
           static_cast<std::size_t>(static_cast<double>(points[end].first - first) / span * static_cast<double>(buckets)) == bucket) {
      if (points[end].second < points[low].second) low = end;
      if (points[end].second > points[high].second) high = end;
      ++end;
    }
    kept.push_back(points[std::min(low, high)]);
    if (low != high) kept.push_back(points[std::max(low, high)]);
    begin = end;
  }
  points = std::move(kept);
}

inline std::vector<MemoryCurve> memory_curves(const Trace& trace) {
  std::vector<MemoryCurve> curves;
  for (const MemoryEvent& event : trace.memory_events) {
    auto curve = std::find_if(curves.begin(), curves.end(), [&](const MemoryCurve& c) {
      return c.device_type == event.device_type && c.device == event.device;
    });
    if (curve == curves.end()) {
      MemoryCurve added;
      added.device_type = event.device_type;
      added.device = event.device;
      if (is_gpu_memory(event.device_type))
        if (const DevicePropertiesOf device = device_properties_of(trace.devices, event.device))
          added.capacity_bytes = device.properties->total_global_mem;
      curve = curves.insert(curves.end(), std::move(added));
    }
    curve->points.emplace_back(event.time_ns, event.total_allocated);
    curve->peak_bytes = std::max(curve->peak_bytes, event.total_allocated);
  }
  // A device whose allocator never held a byte (events with no Total Allocated) has no curve.
  curves.erase(std::remove_if(curves.begin(), curves.end(), [](const MemoryCurve& curve) { return curve.peak_bytes <= 0; }),
               curves.end());
  for (MemoryCurve& curve : curves) {
    dlprof::detail::stable_sort_runs(curve.points.begin(), curve.points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    thin_memory_curve(curve);
  }
  std::sort(curves.begin(), curves.end(), [](const MemoryCurve& a, const MemoryCurve& b) {
    return std::make_pair(a.device_type, a.device) < std::make_pair(b.device_type, b.device);
  });
  return curves;
}

/// What a rank's report shows besides its step breakdown and HTA's analyses: its facts, top ops
/// and kernels, GPU summary and memory.
inline void rank_tables(const Trace& trace, const ReportOptions& options, RankReport& rank) {
  rank.rank = trace.distributed.rank;
  rank.world_size = trace.distributed.world_size;
  rank.window_start_ns = trace.window_start_ns;
  rank.window_end_ns = trace.window_end_ns;
  rank.gpu_activity = !trace.gpu_events.empty();

  // Waiting frames of idle threads are no op of the step; one that the training loop also waits
  // in (a DataLoader's queue) stays.
  std::vector<std::int8_t> idle_frame(trace.names.size(), 0);  // 1: waits off the training threads only
  {
    const std::vector<bool> training = analysis::training_threads(trace);
    analysis::detail::PerName<bool> waiting(trace, analysis::is_waiting_frame);
    for (const TraceEvent& event : trace.events)
      if (event.kind == EventKind::PythonFrame && event.thread < training.size() && idle_frame[event.name] >= 0 &&
          waiting(event.name))
        idle_frame[event.name] = training[event.thread] ? -1 : 1;
  }
  for (const analysis::IdleThread& idle : analysis::idle_threads(trace)) {
    const ThreadInfo& thread = trace.threads[idle.thread];
    rank.idle_threads.push_back({thread.os_tid, thread.name, idle.wait_ns, idle.waits, idle.frame});
  }
  std::vector<std::string_view> idle_frames;  // sorted
  for (std::size_t name = 0; name < idle_frame.size(); ++name)
    if (idle_frame[name] == 1) idle_frames.push_back(trace.names[name]);
  std::sort(idle_frames.begin(), idle_frames.end());
  KeyAverages averages(trace);
  averages.sort_by(SortBy::SelfTime);
  for (const KeyAverage& row : averages.rows()) {
    if (row.category == Category::Step) continue;  // a step's self time is the time outside every op
    if (std::binary_search(idle_frames.begin(), idle_frames.end(), std::string_view(row.name))) continue;
    ++rank.op_names;
    if (rank.top_ops.size() < options.top_rows) rank.top_ops.push_back(row);
  }
  averages.sort_by(SortBy::GpuTime);
  for (const KeyAverage& row : averages.rows()) {
    if (rank.top_ops_by_gpu.size() == options.top_rows || row.gpu_ns == 0) break;
    if (row.category != Category::Step) rank.top_ops_by_gpu.push_back(row);
  }
  rank.memory_activity = averages.has_memory();
  rank.device_memory_activity = averages.has_device_memory();
  rank.device_memory_name = std::string(averages.device_memory_name());
  if (rank.memory_activity) {
    const bool device = rank.device_memory_activity;
    averages.sort_by(device ? SortBy::SelfDeviceMemory : SortBy::SelfCpuMemory);
    for (const KeyAverage& row : averages.rows()) {
      const std::int64_t kept = device ? row.memory.self_device_bytes : row.memory.self_cpu_bytes;
      if (rank.top_ops_by_memory.size() == options.top_rows || kept <= 0) break;
      if (row.category != Category::Step) rank.top_ops_by_memory.push_back(row);
    }
  }

  std::vector<KernelTotal> kernels = kernel_totals(trace, options.analysis, rank.kernel_ns);
  rank.kernel_names = kernels.size();
  if (kernels.size() > options.top_rows) kernels.resize(options.top_rows);
  std::vector<std::string_view> names;
  for (const KernelTotal& kernel : kernels) names.push_back(kernel.name);
  std::vector<std::string> short_names = analysis::short_kernel_names(names, KernelTotal::kShortNameWidth);
  for (std::size_t i = 0; i < kernels.size(); ++i) kernels[i].short_name = std::move(short_names[i]);
  rank.top_kernels = std::move(kernels);
  rank.gpu_summary = analysis::gpu_summary(trace);
  rank.memory = memory_curves(trace);
  rank.dropped_events = trace.dropped_events;
  rank.dropped_gpu_records = trace.gpu.dropped_records + trace.gpu.cupti_dropped_records;
  rank.overflowed_names = trace.overflowed_names;
  rank.flight_recorder_dump = trace.flight_recorder_dump;
  rank.read = trace.read_result;
}

/// Events below which a set of traces is analysed on the calling thread alone: starting a thread
/// (tens of microseconds) costs more than analysing a few thousand events.
inline constexpr std::size_t kEventsWorthAThread = 20'000;

/// Runs every task of each round, each once, round after round (a round's tasks may use what the
/// rounds before it made), on this thread and, when `parallel`, as many more as the machine has
/// cores (at most one per task of the largest round): the analyses are pure functions of const
/// traces. The threads are started once, for every round: a thread started for a later round ran
/// late on a VM of two vCPUs, after the calling thread had run that round alone. Where no thread
/// can be started, the tasks run here.
inline void run_in_rounds(const std::vector<std::vector<std::function<void()>>>& rounds, bool parallel) {
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t round = 0;  // the round whose tasks run
  std::size_t next = 0;   // its next task to start
  std::size_t done = 0;   // its tasks finished
  const auto skip_empty_rounds = [&] {
    while (round < rounds.size() && rounds[round].empty()) ++round;
  };
  skip_empty_rounds();
  const auto work = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    while (round < rounds.size()) {
      if (next == rounds[round].size()) {  // the round's last tasks run on other threads
        changed.wait(lock);
        continue;
      }
      const std::function<void()>& task = rounds[round][next++];
      lock.unlock();
      task();
      lock.lock();
      if (++done == rounds[round].size()) {
        ++round;
        next = 0;
        done = 0;
        skip_empty_rounds();
        changed.notify_all();
      }
    }
  };
  std::size_t most_tasks = 0;
  for (const auto& tasks : rounds) most_tasks = std::max(most_tasks, tasks.size());
  const std::size_t cores = parallel ? std::max(1u, std::thread::hardware_concurrency()) : 1;
  std::vector<std::thread> helpers;
  for (std::size_t i = 1; i < std::min(cores, most_tasks); ++i) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& helper : helpers) helper.join();
}

/// The slowest rank against the median rank (run_diff.hpp over their steps by op): the
/// collectives' straggler where there is one, else the rank with the longest mean step; the
/// median rank is the middle one by mean step time of the others (the slower of two). None with
/// fewer than two ranks or without steps.
inline std::optional<SlowRank> slow_rank(const std::vector<AnalysedRank>& ranks, const std::optional<analysis::Straggler>& straggler) {
  if (ranks.size() < 2) return std::nullopt;
  const auto mean_step = [](const AnalysedRank& rank) { return rank.report.steps.average_step_ns(); };
  const AnalysedRank* slow = nullptr;
  if (straggler)
    for (const AnalysedRank& rank : ranks)
      if (rank.report.rank == straggler->rank) slow = &rank;
  if (slow == nullptr)
    for (const AnalysedRank& rank : ranks)
      if (slow == nullptr || mean_step(rank) > mean_step(*slow)) slow = &rank;
  std::vector<const AnalysedRank*> others;
  for (const AnalysedRank& rank : ranks)
    if (&rank != slow && !rank.samples.steps.empty()) others.push_back(&rank);
  if (others.empty() || slow->samples.steps.empty()) return std::nullopt;
  std::sort(others.begin(), others.end(), [&](const AnalysedRank* a, const AnalysedRank* b) { return mean_step(*a) < mean_step(*b); });
  const AnalysedRank& median = *others[others.size() / 2];
  SlowRank result;
  result.rank = slow->report.rank;
  result.median_rank = median.report.rank;
  result.straggler = straggler && straggler->rank == slow->report.rank;
  result.step_delta_ns = mean_step(*slow) - mean_step(median);
  const analysis::RunDiff diff = analysis::diff_runs(median.samples, slow->samples);
  const double least = 0.01 * mean_step(median);
  for (const analysis::KeyChange& change : diff.changes) {
    if (change.impact_ns < least || change.impact_ns <= 0 || dlprof::detail::is_communication_name(change.key) ||
        change.key == kineto::name::kRecordParamComms || change.key.rfind(kineto::name::kProfilerStepPrefix, 0) == 0)
      continue;
    result.keys.push_back(change);
  }
  std::stable_sort(result.keys.begin(), result.keys.end(),
                   [](const analysis::KeyChange& a, const analysis::KeyChange& b) { return a.impact_ns > b.impact_ns; });
  if (result.keys.size() > 5) result.keys.resize(5);
  return result;
}

/// Forgets a trace's events, keeping its names (which an AnalysedRank's views point into), its
/// threads, devices, metadata and facts: a few kilobytes where the events were megabytes.
inline void release_events(Trace& trace) {
  const auto release = [](auto& events) { std::decay_t<decltype(events)>().swap(events); };
  release(trace.events);
  release(trace.op_inputs);
  release(trace.collectives);
  release(trace.gpu_events);
  release(trace.api_events);
  release(trace.memory_events);
  release(trace.overhead_events);
  release(trace.cpu_slices_on_streams);
}

/// The analyses of each trace on its own, the ranks' tasks sharing one pool of threads. With
/// `collectives`, each rank's collectives and step phases are summarized for the comparison across
/// ranks.
inline std::vector<AnalysedRank> analyse_each(const std::vector<const Trace*>& traces, const ReportOptions& options,
                                             bool collectives) {
  const std::size_t count = traces.size();
  std::size_t events = 0;
  for (const Trace* trace : traces) events += trace->events.size() + trace->gpu_events.size() + trace->api_events.size();
  const bool parallel = events >= kEventsWorthAThread;
  std::vector<AnalysedRank> ranks(count);
  std::vector<analysis::KernelAttribution> kernels(count);
  std::vector<std::vector<std::function<void()>>> rounds(2);
  // The longest first, so that the short ones fill in around them; the recommendations use the
  // first round's results.
  for (std::size_t i = 0; i < count; ++i) {
    const Trace* trace = traces[i];
    RankReport* rank = &ranks[i].report;
    analysis::KernelAttribution* attribution = &kernels[i];
    rounds[0].emplace_back([trace, rank, &options] { rank->hta = analysis::hta_analyses(*trace, options.analysis); });
    rounds[0].emplace_back([trace, attribution] { *attribution = analysis::kernel_attribution(*trace); });
    rounds[0].emplace_back([trace, rank] { rank->steps = analysis::step_breakdown(*trace); });
    rounds[0].emplace_back([trace, rank] {
      rank->syncs = analysis::host_syncs(*trace);
      rank->cuda_graphs = analysis::cuda_graphs(*trace);
      rank->memory_by_op = analysis::memory_by_op(*trace);
    });
    rounds[0].emplace_back([trace, rank, &options] {
      const analysis::MemoryBlocks blocks = analysis::memory_blocks(*trace);
      rank->memory_peaks = analysis::memory_peaks(*trace, blocks, options.top_rows);
      rank->out_of_memory = analysis::out_of_memory(*trace, blocks, options.top_rows);
      rank->memory_leaks = analysis::memory_leaks(*trace, blocks);
      rank->memory_timelines = analysis::memory_timelines(*trace, blocks, MemoryCurve::kMaxPoints);
    });
    rounds[0].emplace_back([trace, rank, &options] { rank_tables(*trace, options, *rank); });
    rounds[0].emplace_back([trace, rank, &options] {
      rank->code_lines = analysis::code_lines(*trace, options.top_rows);
      if (trace->stacks.empty()) return;
      rank->cpu_flame_graph = analysis::flame_graph(*trace, analysis::StackMetric::SelfCpuTime);
      rank->gpu_flame_graph = analysis::flame_graph(*trace, analysis::StackMetric::SelfGpuTime);
      rank->memory_flame_graph = analysis::flame_graph(*trace, analysis::StackMetric::SelfBytesAllocated);
    });
    rounds[0].emplace_back([trace, rank, &options] {
      rank->roofline = analysis::roofline(*trace, options.peaks ? &*options.peaks : nullptr);
    });
  }
  for (std::size_t i = 0; i < count; ++i) {
    AnalysedRank* rank = &ranks[i];
    const Trace* trace = traces[i];
    const analysis::KernelAttribution* attribution = &kernels[i];
    // In the second round: the first round's analyses hold the most scratch memory at once, and
    // the step phases' intervals would add to that peak.
    if (collectives)
      rounds[1].emplace_back([rank, trace] {
        rank->collectives = analysis::summarize_collectives(*trace);
        rank->has_collectives = !rank->collectives.calls.empty();
        rank->samples = analysis::step_samples(*trace, rank->report.steps, analysis::SampleKey::Op);
      });
    rounds[1].emplace_back([rank, trace, &options] {
      const std::vector<analysis::StepTime>& steps = rank->report.steps.steps;
      if (steps.empty()) return;
      const analysis::DevicePeaks* peaks = options.peaks ? &*options.peaks : nullptr;
      rank->report.mfu = analysis::model_flops_utilization(*trace, steps.front().start_ns, steps.back().end_ns, peaks);
      rank->report.clocks = analysis::device_clocks(*trace, steps.front().start_ns, steps.back().end_ns, peaks);
      rank->report.thread_cpu = analysis::thread_cpu(*trace, steps);
    });
    const bool hung = dlprof::detail::starts_with(trace->flight_recorder_dump, kineto::key::kHangDumpPrefix);
    if (hung || dlprof::detail::starts_with(trace->flight_recorder_dump, kineto::key::kSlowStepDumpPrefix))
      rounds[1].emplace_back([rank, trace, hung] {
        rank->report.slow_step =
            analysis::slow_step(analysis::step_samples(*trace, rank->report.steps, analysis::SampleKey::Op));
        if (rank->report.slow_step) rank->report.slow_step->hung = hung;
      });
    if (options.views)
      rounds[1].emplace_back([rank, trace, attribution, &options] { rank->report.views = options.views(*trace, *attribution, options); });
    rounds[1].emplace_back([rank, trace, attribution, &options] {
      rank->report.steady = analysis::steady_state(*trace, rank->report.steps);
      rank->findings = analysis::recommendations(*trace, rank->report.steps, *attribution, rank->report.hta.overlap,
                                                 rank->report.hta.idle_time, rank->report.syncs, rank->report.steady,
                                                 options.peaks ? &*options.peaks : nullptr);
    });
  }
  run_in_rounds(rounds, parallel);
  return ranks;
}

}  // namespace detail

/// The report of a run from its ranks' analyses: each rank's, and, with two ranks or more, the
/// ranks compared, their collectives and the stragglers. The Report keeps the ranks' traces.
inline Report make_report(std::vector<AnalysedRank>&& analysed, const ReportOptions& options = {}) {
  Report report;
  report.options = options;
  const std::size_t count = analysed.size();
  std::stable_sort(analysed.begin(), analysed.end(),
                   [](const AnalysedRank& a, const AnalysedRank& b) { return a.report.rank < b.report.rank; });
  const bool any_collectives =
      std::any_of(analysed.begin(), analysed.end(), [](const AnalysedRank& rank) { return rank.has_collectives; });
  if (any_collectives && count > 1) {
    std::vector<analysis::RankCollectives> summaries;
    for (AnalysedRank& rank : analysed) summaries.push_back(std::move(rank.collectives));
    report.collectives = analysis::analyze_collectives(summaries);
  }
  if (count > 1) {
    std::vector<analysis::RankAnalyses> ranks;
    for (const AnalysedRank& rank : analysed)
      ranks.push_back({rank.report.rank, rank.report.steps, rank.report.hta.temporal, rank.report.hta.overlap});
    report.comparison = analysis::compare_analysed_ranks(ranks);
  }
  report.slow_rank =
      detail::slow_rank(analysed, report.collectives ? report.collectives->straggler : std::optional<analysis::Straggler>());
  auto traces = std::make_shared<std::vector<std::shared_ptr<const Trace>>>();
  std::vector<std::pair<std::int64_t, std::vector<analysis::Recommendation>>> findings;
  for (AnalysedRank& rank : analysed) {
    report.origin_ns = report.ranks.empty() ? rank.report.window_start_ns : std::min(report.origin_ns, rank.report.window_start_ns);
    findings.emplace_back(rank.report.rank, std::move(rank.findings));
    report.ranks.push_back(std::move(rank.report));
    if (rank.trace) traces->push_back(std::move(rank.trace));
  }
  analysis::detail::add_findings_of_ranks(std::move(findings), report.recommendations);
  if (report.collectives && report.collectives->straggler)
    analysis::detail::collective_straggler(*report.collectives, report.recommendations);
  if (report.collectives && !report.collectives->empty())
    analysis::detail::exposed_communication(*report.collectives, report.recommendations);
  analysis::detail::rank_findings(report.recommendations);
  std::vector<analysis::RankSteps> steps;
  for (const RankReport& rank : report.ranks) steps.push_back({rank.rank, &rank.steps, &rank.steady});
  report.verdict = analysis::verdict(steps, report.recommendations);
  double mfu_sum = 0;
  std::size_t mfu_ranks = 0;
  for (const RankReport& rank : report.ranks)
    if (rank.mfu) {
      mfu_sum += rank.mfu->utilization();
      ++mfu_ranks;
    }
  if (mfu_ranks != 0) report.verdict.mfu = mfu_sum / static_cast<double>(mfu_ranks);
  if (!traces->empty()) report.owned_traces = std::move(traces);
  return report;
}

/// One rank's analyses from its trace, which it keeps without its events: what a report over
/// many ranks holds of each while the next is read (dlprof-report reads a directory so, through
/// read_trace_windows(paths, options, summarize)), so that its memory grows with the ranks'
/// summaries, not with their traces.
inline AnalysedRank analyse_rank(Trace&& trace, const ReportOptions& options = {}) {
  auto kept = std::make_shared<Trace>(std::move(trace));  // moved first: short names live in the object
  AnalysedRank rank = std::move(detail::analyse_each({kept.get()}, options, /*collectives=*/true).front());
  detail::release_events(*kept);
  rank.trace = std::move(kept);
  return rank;
}

/// The report of one trace (one rank).
inline Report make_report(const Trace& trace, const ReportOptions& options = {}) {
  return make_report(detail::analyse_each({&trace}, options, /*collectives=*/false), options);
}

/// The report of a run, one trace per rank (read_trace_set() gives them by rank): each rank's
/// analyses and, with two ranks or more, the ranks compared and the stragglers.
inline Report make_report(const std::vector<Trace>& ranks, const ReportOptions& options = {}) {
  std::vector<const Trace*> traces;
  for (const Trace& trace : ranks) traces.push_back(&trace);
  return make_report(detail::analyse_each(traces, options, /*collectives=*/ranks.size() > 1), options);
}

/// The report of one trace, which the Report keeps.
inline Report make_report(Trace&& trace, const ReportOptions& options = {}) {
  auto owned = std::make_shared<const Trace>(std::move(trace));  // moved first: short names live in the object
  Report report = make_report(*owned, options);
  report.owned_traces = std::move(owned);
  return report;
}

/// The report of a run's traces, which the Report keeps.
inline Report make_report(std::vector<Trace>&& ranks, const ReportOptions& options = {}) {
  auto owned = std::make_shared<const std::vector<Trace>>(std::move(ranks));
  Report report = make_report(*owned, options);
  report.owned_traces = std::move(owned);
  return report;
}

DLPROF_END_NAMESPACE
