// dlprof/report/detail/thread_cpu_section.hpp: the report's "How busy each CPU thread is" section
// as the text and HTML renderers show it: the training thread's steps split into running, waiting
// for a CPU and blocked, what it was blocked in, the loader threads' balance, and each thread's
// share of the steps on a CPU, step by step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/thread_cpu.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/table_section.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Steps shown one by one in a row's last cell; more are summed up by their range.
inline constexpr std::size_t kThreadCpuStepsShown = 12;
/// A training thread that waits for data this share of the steps has a loading problem...
inline constexpr double kDataWaitShare = 0.1;
/// ...that more loader threads solve when the loaders are on a CPU this share of the time.
inline constexpr double kBusyLoaderShare = 0.85;
/// Waiting for a CPU this share of the steps: more threads want to run than there are cores.
inline constexpr double kCpuContentionShare = 0.05;

inline std::string thread_cell(const analysis::ThreadCpuRow& row) {
  return row.name.empty() ? fmt::format("[{}]", row.os_tid) : fmt::format("{} [{}]", row.name, row.os_tid);
}

inline std::string share_cell(std::optional<double> share) {
  return share ? fmt::format("{:.1f}%", 100 * *share) : std::string("-");
}

/// "62 71 70" (each step's share on a CPU, in percent), "-" for a step the readings miss;
/// "min 60, max 75" past kThreadCpuStepsShown steps.
inline std::string steps_cell(const analysis::ThreadCpuRow& row) {
  std::string cell;
  std::optional<double> lowest, highest;
  for (const std::optional<analysis::ThreadTime>& step : row.steps) {
    if (step) {
      lowest = std::min(lowest.value_or(step->cpu_share()), step->cpu_share());
      highest = std::max(highest.value_or(step->cpu_share()), step->cpu_share());
    }
    if (row.steps.size() <= kThreadCpuStepsShown)
      cell += fmt::format("{}{}", cell.empty() ? "" : " ", step ? fmt::format("{:.0f}", 100 * step->cpu_share()) : "-");
  }
  if (row.steps.size() > kThreadCpuStepsShown && lowest)
    cell = fmt::format("min {:.0f}, max {:.0f}", 100 * *lowest, 100 * *highest);
  return cell.empty() ? "-" : cell;
}

inline const analysis::ThreadCpuRow* row_of_thread(const analysis::ThreadCpu& cpu, std::uint32_t thread) {
  for (const analysis::ThreadCpuRow& row : cpu.threads)
    if (row.thread == thread) return &row;
  return nullptr;
}

inline TableSection thread_cpu_section(const RankReport& rank, std::size_t top_rows) {
  const analysis::ThreadCpu& cpu = rank.thread_cpu;
  TableSection section;
  const std::size_t steps = cpu.steps.size();
  const bool whole_trace = steps == 1 && cpu.steps.front().number < 0;
  section.title = fmt::format("How busy each CPU thread is: time on a CPU, waiting for one, and blocked, {} ({} thread{})",
                              whole_trace ? std::string("over the trace") : fmt::format("over {} step{}", steps, steps == 1 ? "" : "s"),
                              cpu.threads.size(), cpu.threads.size() == 1 ? "" : "s");
  const std::int64_t per = whole_trace ? 1 : static_cast<std::int64_t>(steps);
  const std::string_view each = whole_trace ? "" : " a step";
  if (cpu.training) {
    const analysis::TrainingThreadTime& training = *cpu.training;
    const analysis::ThreadTime& time = training.time;
    const std::optional<double> waiting = time.run_delay_share();
    section.lines.push_back(fmt::format("The training thread ran {} of the time, {}and was blocked {} ({}{}).",
                                        share_cell(time.cpu_share()),
                                        waiting ? fmt::format("waited for a CPU {} ", share_cell(waiting)) : std::string(),
                                        share_cell(time.blocked_share()),
                                        KeyAverages::format_duration(time.blocked_ns() / per), each));
    if (training.sync_or_data_ns > 0 || time.blocked_ns() > 0) {
      std::string waits = fmt::format("In the trace it waited for data {}{} and in syncs with the GPU {}{}",
                                      KeyAverages::format_duration(training.waiting_for_data_ns / per), each,
                                      KeyAverages::format_duration(training.in_sync_ns / per), each);
      if (training.blocked_elsewhere_ns() > 0)
        waits += fmt::format("; at least {}{} of its blocked time was neither: a lock, I/O, a sleep",
                             KeyAverages::format_duration(training.blocked_elsewhere_ns() / per), each);
      section.lines.push_back(waits + ".");
    }
    if (waiting && *waiting >= kCpuContentionShare)
      section.lines.push_back(fmt::format(
          "It waited for a CPU {} of the time: more threads were ready to run than there were cores for them. Fewer "
          "loader or intra-op threads (torch::set_num_threads) give it its core back.",
          share_cell(waiting)));
  }
  if (cpu.loaders) {
    const analysis::LoaderBalance& loaders = *cpu.loaders;
    const analysis::ThreadCpuRow* busiest = row_of_thread(cpu, loaders.busiest);
    const analysis::ThreadCpuRow* idlest = row_of_thread(cpu, loaders.idlest);
    if (loaders.threads == 1)
      section.lines.push_back(fmt::format("The loader thread, {}, ran {} of the time.", thread_cell(*busiest),
                                          share_cell(loaders.mean_cpu_share)));
    else
      section.lines.push_back(fmt::format(
          "The {} loader threads ran {} of the time on average: the busiest, {}, {}, the idlest, {}, {} ({:.2f} times "
          "the mean).",
          loaders.threads, share_cell(loaders.mean_cpu_share), thread_cell(*busiest), share_cell(loaders.busiest_cpu_share),
          thread_cell(*idlest), share_cell(loaders.idlest_cpu_share), loaders.imbalance()));
    if (cpu.training && cpu.training->time.share(cpu.training->waiting_for_data_ns) >= kDataWaitShare) {
      const double data_share = cpu.training->time.share(cpu.training->waiting_for_data_ns);
      section.lines.push_back(
          loaders.mean_cpu_share >= kBusyLoaderShare
              ? fmt::format("The training thread waited for data {} of the time while the loaders were busy: loading "
                            "is CPU-bound. More loader threads, where cores are free, or cheaper decoding cut the wait.",
                            share_cell(data_share))
              : fmt::format("The training thread waited for data {} of the time while the loaders were mostly idle: "
                            "they wait too (I/O, a lock, a prefetch queue too short), not compute.",
                            share_cell(data_share)));
    }
  }
  const bool delay_known = std::any_of(cpu.threads.begin(), cpu.threads.end(), [](const analysis::ThreadCpuRow& row) {
    return row.total.run_delay_ns >= 0;
  });
  section.headers = {"Thread", "Role", "On a CPU", "Waiting for a CPU", "Blocked", "CPU time",
                     whole_trace ? std::string("On a CPU") : std::string("On a CPU by step (%)")};
  for (std::size_t i = 0; i < cpu.threads.size() && i < top_rows; ++i) {
    const analysis::ThreadCpuRow& row = cpu.threads[i];
    section.rows.push_back({thread_cell(row), std::string(analysis::to_string(row.role)), share_cell(row.total.cpu_share()),
                            share_cell(row.total.run_delay_share()), share_cell(row.total.blocked_share()),
                            KeyAverages::format_duration(row.total.cpu_ns), steps_cell(row)});
  }
  if (cpu.threads.size() > top_rows)
    section.notes.push_back(fmt::format("{} more thread{} left out (--top)", cpu.threads.size() - top_rows,
                                        cpu.threads.size() - top_rows == 1 ? "" : "s"));
  if (!delay_known)
    section.notes.push_back(
        "This kernel keeps no scheduler statistics (schedstat): the time waiting for a CPU is not known, and is counted "
        "as blocked.");
  return section;
}

}  // namespace detail
DLPROF_END_NAMESPACE
