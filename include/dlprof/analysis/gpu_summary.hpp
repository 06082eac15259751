// dlprof/analysis/gpu_summary.hpp: nvprof's summary of a trace: "GPU activities" (kernels by
// name, copies by kind as "[CUDA memcpy HtoD]", fills as "[CUDA memset]") and "API calls" (CUDA
// runtime and driver calls by name), each with Time(%), Time, Calls, Avg, Min, Max, longest first.
// Synchronisations and gpu_user_annotation spans are not GPU activities (nvprof lists neither).
//
//   fmt::print("{}", dlprof::analysis::gpu_summary(trace).table());
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/duration_stats.hpp"
#include "dlprof/analysis/duration_stats.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct GpuSummary {
  std::vector<DurationStats> gpu_activities;  ///< longest total first
  std::vector<DurationStats> api_calls;       ///< longest total first
  std::int64_t gpu_activities_ns = 0;         ///< sum of the rows' totals
  std::int64_t api_calls_ns = 0;

  /// Whether a GPU activities row is a kernel's, not a copy's or a fill's ("[CUDA memcpy ...]").
  static bool is_kernel_row(const DurationStats& row) noexcept {
    return !dlprof::detail::starts_with(row.name, "[CUDA mem");
  }

  /// nvprof's Time(%): the row's share of its section.
  static double percent(const DurationStats& row, std::int64_t section_ns) noexcept {
    return section_ns == 0 ? 0.0 : 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(section_ns);
  }

  /// nvprof's layout; names longer than `name_width` are cut.
  std::string table(std::size_t name_width = 100) const {
    fmt::memory_buffer out;
    auto line = std::back_inserter(out);
    fmt::format_to(line, "{:>16}  {:>7}  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  {}\n", "Type", "Time(%)", "Time", "Calls",
                   "Avg", "Min", "Max", "Name");
    const auto section = [&](std::string_view type, const std::vector<DurationStats>& rows, std::int64_t total) {
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const DurationStats& row = rows[i];
        const std::string_view name = row.name.size() > name_width ? row.name.substr(0, name_width) : row.name;
        fmt::format_to(line, "{:>16}  {:>6.2f}%  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  {}\n", i == 0 ? type : "",
                       percent(row, total), KeyAverages::format_duration(row.total_ns), row.calls,
                       KeyAverages::format_duration(static_cast<std::int64_t>(row.mean_ns)),
                       KeyAverages::format_duration(row.min_ns), KeyAverages::format_duration(row.max_ns), name);
      }
    };
    section("GPU activities:", gpu_activities, gpu_activities_ns);
    section("API calls:", api_calls, api_calls_ns);
    return fmt::to_string(out);
  }
};

namespace detail {

/// nvprof's name for a copy: "[CUDA memcpy HtoD]". The kind is CUPTI's copy kind, or, where the
/// trace does not have it, read from Kineto's name ("Memcpy DtoH (Device -> Pinned)").
inline std::string_view nvprof_copy_label(const GpuEvent& copy, std::string_view name) {
  using dlprof::detail::starts_with;
  constexpr std::size_t kKinds = std::size(kineto::kMemcpyKinds);
  // "[CUDA memcpy]" for an unknown kind. Never destroyed: a report handler may run on a
  // Profiler's writer thread while the process exits.
  static const auto* const kLabels = [] {
    auto* labels = new std::array<std::string, kKinds>();
    (*labels)[0] = "[CUDA memcpy]";
    for (std::size_t k = 1; k < kKinds; ++k) (*labels)[k] = "[CUDA memcpy " + std::string(kineto::kMemcpyKinds[k]) + "]";
    return labels;
  }();
  std::size_t kind = copy.copy.copy_kind;
  if (kind == 0 || kind >= kKinds) {
    kind = 0;
    if (starts_with(name, kineto::name::kMemcpyPrefix))
      for (std::size_t k = 1; k < kKinds; ++k)
        if (starts_with(name.substr(kineto::name::kMemcpyPrefix.size()), kineto::kMemcpyKinds[k])) kind = k;
  }
  if (copy.kind == GpuEventKind::MemcpyPeer && kind == 0) kind = kineto::kMemcpyKindPeer;
  return (*kLabels)[kind];
}

}  // namespace detail

/// The nvprof-style summary of every GPU activity and CUDA API call of `trace`.
inline GpuSummary gpu_summary(const Trace& trace) {
  detail::DurationStatsByName activities(trace.names);
  for (const GpuEvent& work : trace.gpu_events) {
    switch (work.kind) {
      case GpuEventKind::Kernel: activities.add(work.name, work.duration_ns()); break;
      case GpuEventKind::Memcpy:
      case GpuEventKind::MemcpyPeer:
        activities.add(detail::nvprof_copy_label(work, trace.names[work.name]), work.duration_ns());
        break;
      case GpuEventKind::Memset: activities.add(std::string_view("[CUDA memset]"), work.duration_ns()); break;
      case GpuEventKind::Sync:
      case GpuEventKind::Annotation: break;
    }
  }
  detail::DurationStatsByName calls(trace.names);
  for (const ApiEvent& call : trace.api_events) calls.add(call.name, call.duration_ns());

  GpuSummary summary;
  summary.gpu_activities = activities.rows();
  summary.api_calls = calls.rows();
  detail::sort_by_total(summary.gpu_activities);
  detail::sort_by_total(summary.api_calls);
  for (const DurationStats& row : summary.gpu_activities) summary.gpu_activities_ns += row.total_ns;
  for (const DurationStats& row : summary.api_calls) summary.api_calls_ns += row.total_ns;
  return summary;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
