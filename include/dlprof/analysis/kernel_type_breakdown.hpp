// dlprof/analysis/kernel_type_breakdown.hpp: GPU time by kernel type and the kernels that take it,
// as Holistic Trace Analysis's get_gpu_kernel_breakdown reports it (breakdown_analysis.py):
//
// - The GPU work with a stream (HTA's `stream != -1`) is typed by name (kernel_type.hpp). The
//   work of each of COMPUTATION, COMMUNICATION and MEMORY is merged into a union of intervals,
//   and time is split by which of those unions are busy: "COMPUTATION", "COMMUNICATION
//   overlapping MEMORY", ... (OTHER, the syncs, is left out). Shares are of the sum of the rows.
// - Per type, the kernels by total time: when there are more than `num_kernels` names, those
//   past `num_kernels` or whose cumulated time exceeds the `duration_ratio` quantile of the
//   cumulated times become one "others" row.
//
// One deviation: HTA's "others" row gives the min, max, mean and spread of the per-kernel totals;
// here it gives those of the durations it gathers, like every other row.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/duration_stats.hpp"
#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/duration_stats.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// The bit of a kernel type in KernelTypeTime::types.
constexpr std::uint8_t kernel_type_bit(KernelType type) noexcept {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(type));
}

/// GPU time during which exactly the kernel types in `types` were running.
struct KernelTypeTime {
  std::uint8_t types = 0;  ///< kernel_type_bit() of each type running
  std::int64_t time_ns = 0;
  double percent = 0;  ///< of the sum of all rows

  bool has(KernelType type) const noexcept { return (types & kernel_type_bit(type)) != 0; }
  /// HTA's label: "COMPUTATION", "COMPUTATION overlapping COMMUNICATION", ...
  std::string label() const {
    std::string text;
    for (const KernelType type : {KernelType::Computation, KernelType::Communication, KernelType::Memory}) {
      if (!has(type)) continue;
      if (!text.empty()) text += " overlapping ";
      text += to_string(type);
    }
    return text;
  }
};

/// The kernels of one type, longest total first; an "others" row last when some were grouped.
struct KernelsOfType {
  KernelType type = KernelType::Computation;
  std::vector<DurationStats> kernels;
};

struct KernelTypeBreakdown {
  std::vector<KernelTypeTime> times;     ///< longest first
  std::vector<KernelsOfType> kernels;    ///< COMPUTATION, COMMUNICATION, then MEMORY if included

  /// The time of the row for exactly `types` (kernel_type_bit()s); 0 if there is none.
  std::int64_t time_ns(std::uint8_t types) const noexcept {
    for (const KernelTypeTime& row : times)
      if (row.types == types) return row.time_ns;
    return 0;
  }

  std::string table(std::size_t name_width = 80) const {
    fmt::memory_buffer out;
    auto line = std::back_inserter(out);
    fmt::format_to(line, "{:<48} {:>14} {:>7}\n", "Kernel type", "Time (us)", "%");
    for (const KernelTypeTime& row : times)
      fmt::format_to(line, "{:<48} {:>14.3f} {:>6.1f}%\n", row.label(), row.time_ns / 1e3, row.percent);
    for (const KernelsOfType& of_type : kernels) {
      fmt::format_to(line, "\n{} kernels\n{:<{}} {:>8} {:>14} {:>12} {:>12} {:>12}\n", to_string(of_type.type), "Name",
                     name_width, "Calls", "Total (us)", "Mean (us)", "Min (us)", "Max (us)");
      for (const DurationStats& kernel : of_type.kernels) {
        const std::string_view name =
            kernel.name.size() > name_width ? kernel.name.substr(0, name_width) : kernel.name;
        fmt::format_to(line, "{:<{}} {:>8} {:>14.3f} {:>12.3f} {:>12.3f} {:>12.3f}\n", name, name_width, kernel.calls,
                       kernel.total_ns / 1e3, kernel.mean_ns / 1e3, kernel.min_ns / 1e3, kernel.max_ns / 1e3);
      }
    }
    return fmt::to_string(out);
  }
};

namespace detail {

/// HTA's _aggr_gpu_kernel_time: the rows beyond `num_kernels`, or whose cumulated total is past
/// the `duration_ratio` quantile (linear interpolation, as pandas') of the cumulated totals,
/// become one "others" row.
inline std::vector<DurationStats> top_kernels(std::vector<DurationStats> rows, std::size_t num_kernels,
                                              double duration_ratio) {
  sort_by_total(rows);
  if (rows.size() <= num_kernels) return rows;
  std::vector<double> cumulated(rows.size());
  double sum = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) cumulated[i] = sum += static_cast<double>(rows[i].total_ns);
  const double position = duration_ratio * static_cast<double>(rows.size() - 1);
  const std::size_t below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, rows.size() - 1);
  const double quantile = cumulated[below] + (cumulated[above] - cumulated[below]) * (position - static_cast<double>(below));

  std::vector<DurationStats> kept;
  DurationStats others;
  others.name = "others";
  double others_squares = 0;  // sum of squared deviations, combined group by group (Chan et al.)
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const DurationStats& row = rows[i];
    if (i < num_kernels && cumulated[i] <= quantile) {
      kept.push_back(row);
      continue;
    }
    const double row_squares = row.stddev_ns * row.stddev_ns * static_cast<double>(row.calls - 1);
    const double calls = static_cast<double>(others.calls + row.calls);
    const double delta = row.mean_ns - others.mean_ns;
    others_squares += row_squares + delta * delta * static_cast<double>(others.calls) * static_cast<double>(row.calls) / calls;
    others.mean_ns += delta * static_cast<double>(row.calls) / calls;
    others.min_ns = others.calls == 0 ? row.min_ns : std::min(others.min_ns, row.min_ns);
    others.max_ns = others.calls == 0 ? row.max_ns : std::max(others.max_ns, row.max_ns);
    others.calls += row.calls;
    others.total_ns += row.total_ns;
  }
  others.stddev_ns = others.calls > 1 ? std::sqrt(others_squares / static_cast<double>(others.calls - 1)) : 0.0;
  kept.push_back(others);
  return kept;
}

inline KernelTypeBreakdown kernel_type_breakdown(const Trace& trace, const HtaView& view,
                                                 const AnalysisOptions& options) {
  std::vector<KernelType> analysed = {KernelType::Computation, KernelType::Communication};
  if (options.include_memory_kernels) analysed.push_back(KernelType::Memory);

  KernelTypes types(trace, view);
  std::array<std::vector<Interval>, 4> busy;  // by KernelType
  std::vector<DurationStatsByName> by_name;
  for (std::size_t i = 0; i < analysed.size(); ++i) by_name.emplace_back(trace.names);
  for (const GpuWork& work : view.gpu) {
    if (!work.on_stream()) continue;
    const KernelType type = types.of(*work.event);
    for (std::size_t i = 0; i < analysed.size(); ++i) {
      if (analysed[i] != type) continue;
      busy[static_cast<std::size_t>(type)].push_back({work.start_ns, work.end_ns});
      by_name[i].add(work.event->name, work.duration_ns());
    }
  }

  KernelTypeBreakdown result;
  std::vector<const std::vector<Interval>*> lists;
  for (const KernelType type : analysed) {
    merge(busy[static_cast<std::size_t>(type)]);
    lists.push_back(&busy[static_cast<std::size_t>(type)]);
  }
  std::array<std::int64_t, 8> time_by_status{};  // status bit i: analysed[i] busy
  sweep(lists, [&](std::int64_t status, std::int64_t duration) { time_by_status[status & 7] += duration; });
  std::int64_t total = 0;
  for (std::size_t status = 1; status < time_by_status.size(); ++status) {
    if (time_by_status[status] == 0) continue;
    KernelTypeTime row;
    for (std::size_t i = 0; i < analysed.size(); ++i)
      if (status & (std::size_t{1} << i)) row.types |= kernel_type_bit(analysed[i]);
    row.time_ns = time_by_status[status];
    total += row.time_ns;
    result.times.push_back(row);
  }
  for (KernelTypeTime& row : result.times)
    row.percent = total == 0 ? 0.0 : 100.0 * static_cast<double>(row.time_ns) / static_cast<double>(total);
  std::stable_sort(result.times.begin(), result.times.end(),
                   [](const KernelTypeTime& a, const KernelTypeTime& b) { return a.time_ns > b.time_ns; });

  for (std::size_t i = 0; i < analysed.size(); ++i)
    result.kernels.push_back({analysed[i], top_kernels(by_name[i].rows(), options.num_kernels, options.duration_ratio)});
  return result;
}

}  // namespace detail

/// The kernel-type breakdown of one rank's trace.
inline KernelTypeBreakdown kernel_type_breakdown(const Trace& trace, const AnalysisOptions& options = {}) {
  return detail::kernel_type_breakdown(trace, detail::hta_view(trace, options), options);
}

}  // namespace analysis
DLPROF_END_NAMESPACE
