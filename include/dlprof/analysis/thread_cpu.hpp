// dlprof/analysis/thread_cpu.hpp: how busy each recording thread was in each step, from the
// readings of its scheduler accounting (Trace::thread_cpu): the share of the step it ran on a CPU,
// the share it was runnable but waited for a CPU, and the rest, when it was blocked.
//
// The training thread's blocked time is set beside the waits the trace shows on that thread:
// synchronisations with the GPU (synchronize calls, blocking copies) and the DataLoader. A wait may
// spin on a CPU rather than block, so what they explain is at most their length, and the blocked
// time they leave, at least, is spent in locks, I/O and sleeps. The loader threads' shares show
// whether loading is spread evenly, and whether the loaders, all busy, are what the training
// thread waits for.
//
// A step's figures for a thread are its counters' differences between the step's start and end,
// each read off the thread's readings by linear interpolation: dlprof reads them at each step's
// end, so at the steps' edges the interpolation is exact to a microsecond, except where steps are
// so short that readings at every edge would cost over 1 % of the time (detail/window/
// window_recorder.hpp): such steps share readings, and their figures are interpolated. A step
// the readings do not span (a thread that started inside it) has no figures for that thread.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/host_syncs.hpp"
#include "dlprof/analysis/idle_threads.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

enum class ThreadRole : std::uint8_t { Training, Loader, Other };

/// The text's and the JSON's name of a role.
constexpr std::string_view to_string(ThreadRole role) noexcept {
  switch (role) {
    case ThreadRole::Training: return "training";
    case ThreadRole::Loader: return "loader";
    case ThreadRole::Other: return "other";
  }
  return "other";
}

/// One thread over a span of wall time.
struct ThreadTime {
  std::int64_t wall_ns = 0;
  std::int64_t cpu_ns = 0;         ///< on a CPU
  std::int64_t run_delay_ns = -1;  ///< runnable, waiting for a CPU; -1: not known

  /// Neither running nor runnable: waiting on something (a lock, I/O, the GPU, a sleep).
  std::int64_t blocked_ns() const noexcept {
    return std::max<std::int64_t>(0, wall_ns - cpu_ns - std::max<std::int64_t>(run_delay_ns, 0));
  }
  double share(std::int64_t ns) const noexcept {
    return wall_ns > 0 ? static_cast<double>(ns) / static_cast<double>(wall_ns) : 0.0;
  }
  double cpu_share() const noexcept { return share(cpu_ns); }
  std::optional<double> run_delay_share() const noexcept {
    if (run_delay_ns < 0) return std::nullopt;
    return share(run_delay_ns);
  }
  double blocked_share() const noexcept { return share(blocked_ns()); }

  void add(const ThreadTime& other) noexcept {
    const bool delay_known = (run_delay_ns >= 0 || wall_ns == 0) && other.run_delay_ns >= 0;
    wall_ns += other.wall_ns;
    cpu_ns += other.cpu_ns;
    run_delay_ns = delay_known ? std::max<std::int64_t>(run_delay_ns, 0) + other.run_delay_ns : -1;
  }
};

/// One recording thread over the steps.
struct ThreadCpuRow {
  std::uint32_t thread = 0;  ///< index into Trace::threads
  std::int64_t os_tid = 0;
  std::string_view name;     ///< the thread's, in the trace
  ThreadRole role = ThreadRole::Other;
  std::vector<std::optional<ThreadTime>> steps;  ///< by ThreadCpu::steps; none where not spanned
  ThreadTime total;                              ///< over the steps it spans
};

/// The training thread's time over the steps, and what its blocked time is spent in.
struct TrainingThreadTime {
  std::uint32_t thread = 0;
  ThreadTime time;
  std::int64_t in_sync_ns = 0;            ///< synchronize calls and blocking copies on the thread
  std::int64_t waiting_for_data_ns = 0;   ///< DataLoader ranges on the thread
  std::int64_t sync_or_data_ns = 0;       ///< the union of the two

  /// Blocked time neither a sync nor the DataLoader explains: locks, I/O, sleeps, at least.
  std::int64_t blocked_elsewhere_ns() const noexcept {
    return std::max<std::int64_t>(0, time.blocked_ns() - sync_or_data_ns);
  }
};

/// How evenly the loader threads share the loading, over the steps.
struct LoaderBalance {
  std::size_t threads = 0;
  double mean_cpu_share = 0;  ///< of each loader thread's wall time, [0, 1] per CPU
  std::uint32_t busiest = 0;  ///< index into Trace::threads
  double busiest_cpu_share = 0;
  std::uint32_t idlest = 0;
  double idlest_cpu_share = 0;

  /// The busiest thread's share over the mean: 1 is even.
  double imbalance() const noexcept { return mean_cpu_share > 0 ? busiest_cpu_share / mean_cpu_share : 1.0; }
};

struct ThreadCpu {
  struct Step {
    std::int64_t number = -1;  ///< -1: the whole trace, which has no steps
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
  };
  std::vector<Step> steps;
  /// The training thread first, then the loader threads, then the others, each group by CPU time,
  /// descending.
  std::vector<ThreadCpuRow> threads;
  std::optional<TrainingThreadTime> training;
  std::optional<LoaderBalance> loaders;  ///< with a loader thread or more

  bool empty() const noexcept { return threads.empty(); }
};

namespace detail {

/// A reading within this of a step's edge stands for it: readings are taken just after the edge.
inline constexpr std::int64_t kEdgeSlackNs = 100'000;

/// A thread's counters at `time`, interpolated between the readings [first, last) around it; none
/// outside them (give or take kEdgeSlackNs).
inline std::optional<ThreadTime> counters_at(const ThreadCpuSample* first, const ThreadCpuSample* last,
                                             std::int64_t time) noexcept {
  if (first == last || time < first->time_ns - kEdgeSlackNs || time > (last - 1)->time_ns + kEdgeSlackNs)
    return std::nullopt;
  time = std::clamp(time, first->time_ns, (last - 1)->time_ns);
  const ThreadCpuSample* after =
      std::lower_bound(first, last, time, [](const ThreadCpuSample& s, std::int64_t t) { return s.time_ns < t; });
  if (after->time_ns == time || after == first) return ThreadTime{0, after->cpu_ns, after->run_delay_ns};
  const ThreadCpuSample& before = *(after - 1);
  const double part =
      static_cast<double>(time - before.time_ns) / static_cast<double>(after->time_ns - before.time_ns);
  const auto between = [part](std::int64_t from, std::int64_t to) {
    return from + static_cast<std::int64_t>(part * static_cast<double>(to - from) + 0.5);
  };
  const bool delay_known = before.run_delay_ns >= 0 && after->run_delay_ns >= 0;
  return ThreadTime{0, between(before.cpu_ns, after->cpu_ns),
                    delay_known ? between(before.run_delay_ns, after->run_delay_ns) : -1};
}

inline bool names_a_loader(std::string_view name) noexcept {
  constexpr std::string_view kLoader = "loader";
  if (name.size() < kLoader.size()) return false;
  for (std::size_t at = 0; at + kLoader.size() <= name.size(); ++at) {
    std::size_t i = 0;
    while (i < kLoader.size() &&
           std::tolower(static_cast<unsigned char>(name[at + i])) == static_cast<unsigned char>(kLoader[i]))
      ++i;
    if (i == kLoader.size()) return true;
  }
  return false;
}

/// Loader threads: those named as one, and those whose outermost slices spend most of their time
/// in the DataLoader category (a dataset's get() in a range of that category, say).
inline std::vector<bool> loader_threads(const Trace& trace, const std::vector<bool>& training) {
  std::vector<std::int64_t> loading(trace.threads.size(), 0), outermost(trace.threads.size(), 0);
  std::uint32_t thread = UINT32_MAX;
  std::int64_t open_end = INT64_MIN;
  for (const TraceEvent& event : trace.events) {  // by thread, then start: enclosing slices first
    if (event.start_ns == event.end_ns || event.thread >= trace.threads.size() || event.kind == EventKind::Counter ||
        event.kind == EventKind::Instant)
      continue;
    if (event.thread != thread) {
      thread = event.thread;
      open_end = INT64_MIN;
    }
    if (event.start_ns < open_end) continue;
    open_end = event.end_ns;
    outermost[thread] += event.duration_ns();
    if (event.category == Category::DataLoader) loading[thread] += event.duration_ns();
  }
  std::vector<bool> loaders(trace.threads.size(), false);
  for (std::size_t i = 0; i < loaders.size(); ++i)
    loaders[i] = !training[i] && (names_a_loader(trace.threads[i].name) ||
                                  (outermost[i] > 0 && 2 * loading[i] >= outermost[i]));
  return loaders;
}

/// The training thread's waits the trace shows, as merged intervals: synchronisations with the GPU
/// and DataLoader slices.
inline void training_waits(const Trace& trace, std::uint32_t thread, std::vector<Interval>& syncs,
                           std::vector<Interval>& data) {
  for (const ApiEvent& call : trace.api_events) {
    if (call.thread != thread) continue;
    const std::string_view name = trace.names[call.name];
    const bool blocking_copy = is_copy_call(name) && name.find("Async") == std::string_view::npos;
    if (is_synchronize_call(name) || blocking_copy) syncs.push_back({call.start_ns, call.end_ns});
  }
  for (const TraceEvent& event : trace.events)
    if (event.thread == thread && event.category == Category::DataLoader && event.end_ns > event.start_ns &&
        event.kind != EventKind::Counter && event.kind != EventKind::Instant)
      data.push_back({event.start_ns, event.end_ns});
  merge(syncs);
  merge(data);
}

}  // namespace detail

/// Each recording thread's CPU time over `steps` (step_breakdown()'s), the training thread's waits
/// and the loaders' balance. Empty when the trace has no readings.
inline ThreadCpu thread_cpu(const Trace& trace, const std::vector<StepTime>& steps) {
  ThreadCpu result;
  if (trace.thread_cpu.empty() || steps.empty()) return result;
  for (const StepTime& step : steps) result.steps.push_back({step.number, step.start_ns, step.end_ns});
  const std::vector<bool> training = training_threads(trace);
  const std::vector<bool> loaders = detail::loader_threads(trace, training);
  const ThreadCpuSample* samples = trace.thread_cpu.data();
  const std::size_t count = trace.thread_cpu.size();
  for (std::size_t first = 0; first < count;) {
    std::size_t last = first;
    while (last < count && samples[last].thread == samples[first].thread) ++last;
    const std::uint32_t thread = samples[first].thread;
    if (thread < trace.threads.size()) {
      ThreadCpuRow row;
      row.thread = thread;
      row.os_tid = trace.threads[thread].os_tid;
      row.name = trace.threads[thread].name;
      row.role = training[thread] ? ThreadRole::Training : loaders[thread] ? ThreadRole::Loader : ThreadRole::Other;
      for (const StepTime& step : steps) {
        const std::optional<ThreadTime> start = detail::counters_at(samples + first, samples + last, step.start_ns);
        const std::optional<ThreadTime> end = detail::counters_at(samples + first, samples + last, step.end_ns);
        if (!start || !end) {
          row.steps.emplace_back();
          continue;
        }
        const bool delay_known = start->run_delay_ns >= 0 && end->run_delay_ns >= 0;
        const ThreadTime time{step.duration_ns(), std::max<std::int64_t>(0, end->cpu_ns - start->cpu_ns),
                              delay_known ? std::max<std::int64_t>(0, end->run_delay_ns - start->run_delay_ns) : -1};
        row.steps.push_back(time);
        row.total.add(time);
      }
      if (row.total.wall_ns > 0) result.threads.push_back(std::move(row));
    }
    first = last;
  }
  std::stable_sort(result.threads.begin(), result.threads.end(), [](const ThreadCpuRow& a, const ThreadCpuRow& b) {
    if (a.role != b.role) return a.role < b.role;
    return a.total.cpu_ns > b.total.cpu_ns;
  });

  if (!result.threads.empty() && result.threads.front().role == ThreadRole::Training) {
    const ThreadCpuRow& row = result.threads.front();
    TrainingThreadTime time;
    time.thread = row.thread;
    time.time = row.total;
    std::vector<detail::Interval> spans, syncs, data;
    for (std::size_t s = 0; s < steps.size(); ++s)
      if (row.steps[s]) spans.push_back({steps[s].start_ns, steps[s].end_ns});
    detail::merge(spans);
    detail::training_waits(trace, row.thread, syncs, data);
    time.in_sync_ns = detail::intersection_length(syncs, spans);
    time.waiting_for_data_ns = detail::intersection_length(data, spans);
    std::vector<detail::Interval> either = syncs;
    either.insert(either.end(), data.begin(), data.end());
    detail::merge(either);
    time.sync_or_data_ns = detail::intersection_length(either, spans);
    result.training = time;
  }

  LoaderBalance balance;
  double share_sum = 0;
  for (const ThreadCpuRow& row : result.threads) {
    if (row.role != ThreadRole::Loader) continue;
    const double share = row.total.cpu_share();
    if (balance.threads == 0 || share > balance.busiest_cpu_share) {
      balance.busiest = row.thread;
      balance.busiest_cpu_share = share;
    }
    if (balance.threads == 0 || share < balance.idlest_cpu_share) {
      balance.idlest = row.thread;
      balance.idlest_cpu_share = share;
    }
    share_sum += share;
    ++balance.threads;
  }
  if (balance.threads != 0) {
    balance.mean_cpu_share = share_sum / static_cast<double>(balance.threads);
    result.loaders = balance;
  }
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
