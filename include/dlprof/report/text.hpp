// dlprof/report/text.hpp: the report as terminal tables, 100 to 120 columns wide: the verdict
// first (what bounds the step, its time, GPU busy, the actions that save the most); per rank the
// step-time breakdown, the GPU summary, HTA's breakdowns, the top ops, kernels and nvprof rows,
// where the host waits for the GPU, peak memory; then the ranks compared, the recommendations
// with their evidence, and where the analyses depart from TensorBoard's and HTA's rules.
//
//   fmt::print("{}", dlprof::render_text(dlprof::make_report(trace)));
//   fmt::print("{}", report);   // the same, through fmt::formatter<dlprof::Report>
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/analysis.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/limits.hpp"
#include "dlprof/report/detail/code_lines_section.hpp"
#include "dlprof/report/detail/cuda_graphs_section.hpp"
#include "dlprof/report/detail/memory_by_op_section.hpp"
#include "dlprof/report/detail/memory_sections.hpp"
#include "dlprof/report/detail/thread_cpu_section.hpp"
#include "dlprof/report/detail/text.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline std::string format_percent(double percent) { return fmt::format("{:.1f}%", percent); }

inline std::string share_of(double part, double whole) {
  return format_percent(whole > 0 ? 100.0 * part / whole : 0.0);
}

/// "== title ====...": a rank's heading, `width` wide.
inline void heading(fmt::memory_buffer& out, std::string_view title, std::size_t width = 100) {
  const std::size_t used = text_width(title) + 4;
  fmt::format_to(std::back_inserter(out), "== {} {:=<{}}\n", title, "", used < width ? width - used : 2);
}

inline void section(fmt::memory_buffer& out, std::string_view title) {
  fmt::format_to(std::back_inserter(out), "\n{}\n", title);
}

inline void text_step_breakdown(fmt::memory_buffer& out, const analysis::StepBreakdown& breakdown) {
  using analysis::StepRole;
  const auto average = breakdown.average_ns();
  const double average_step = breakdown.average_step_ns();
  std::vector<std::size_t> shown;  // roles some step has, and Other
  for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role) {
    bool present = role == static_cast<std::size_t>(StepRole::Other);
    for (const analysis::StepTime& step : breakdown.steps) present = present || step.role_ns[role] != 0;
    if (present) shown.push_back(role);
  }
  // The step's unit for every column it shows with two significant digits or more; a column whose
  // largest value is under 0.01 of it gets its own, named in its header: a 41 s step beside 8 ms
  // of kernels shows "Kernel (ms) 8.000", not "0.008".
  double longest = average_step;
  for (const analysis::StepTime& step : breakdown.steps) longest = std::max(longest, static_cast<double>(step.duration_ns()));
  const TimeUnit step_unit = TimeUnit::for_largest(longest);
  std::vector<TimeUnit> units = {step_unit};
  std::vector<bool> own_unit = {false};
  for (const std::size_t role : shown) {
    double largest = average[role];
    for (const analysis::StepTime& step : breakdown.steps) largest = std::max(largest, static_cast<double>(step.role_ns[role]));
    const bool own = largest > 0 && largest < 0.01 * step_unit.ns;
    units.push_back(own ? TimeUnit::for_largest(largest) : step_unit);
    own_unit.push_back(own && units.back().ns != step_unit.ns);
  }
  section(out, fmt::format("Step time breakdown ({}), TensorBoard's roles by priority", step_unit.name));
  std::vector<TextColumn> columns = {{"Step", Align::Left, 28}, {"Total"}};
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const std::string_view role = to_string(static_cast<StepRole>(shown[i]));
    columns.push_back({own_unit[i + 1] ? fmt::format("{} ({})", role, units[i + 1].name) : std::string(role)});
  }
  TextTable table(std::move(columns));
  for (const analysis::StepTime& step : breakdown.steps) {
    std::vector<std::string> row = {std::string(step.name), units[0].format(static_cast<double>(step.duration_ns()))};
    for (std::size_t i = 0; i < shown.size(); ++i) row.push_back(units[i + 1].format(static_cast<double>(step.role_ns[shown[i]])));
    table.add_row(std::move(row));
  }
  table.add_rule();
  std::vector<std::string> mean = {fmt::format("Average of {}", breakdown.steps.size()), units[0].format(average_step)};
  std::vector<std::string> share = {"Share of the average", "100.0%"};
  for (std::size_t i = 0; i < shown.size(); ++i) {
    mean.push_back(units[i + 1].format(average[shown[i]]));
    share.push_back(share_of(average[shown[i]], average_step));
  }
  table.add_row(std::move(mean));
  table.add_row(std::move(share));
  table.render(out);
}

/// "TC" for Tensor Cores, "MC" for AMD's matrix cores, "MU" for another vendor's matrix units:
/// the short column header.
inline std::string_view matrix_units_abbreviation(analysis::MatrixUnits units) {
  switch (units) {
    case analysis::MatrixUnits::TensorCores: return "TC";
    case analysis::MatrixUnits::MatrixCores: return "MC";
    case analysis::MatrixUnits::Unknown: return "MU";
  }
  return "TC";
}

inline void text_gpu_summary(fmt::memory_buffer& out, const analysis::StepBreakdown& breakdown) {
  const std::string_view units = matrix_units_abbreviation(breakdown.matrix_units);
  section(out, fmt::format("GPU summary over the steps (TensorBoard; {}: dlprof's share of kernel time on {})", units,
                           analysis::to_string(breakdown.matrix_units)));
  TextTable table({{"GPU", Align::Left}, {"Name", Align::Left, 30}, {"Utilization"}, {"Est. SM efficiency"},
                   {"Est. occupancy"}, {fmt::format("{} (dlprof)", units)}, {"Kernels (ms)"}});
  std::vector<std::string> borrowed_names;
  for (const analysis::DeviceMetrics& device : breakdown.devices) {
    // sm_XY is NVIDIA's naming of a compute capability; AMD's GPUs are named by their model.
    const bool sm = device.compute_major != 0 && breakdown.matrix_units == analysis::MatrixUnits::TensorCores;
    std::string name = device.name.empty() ? std::string("unknown") : std::string(device.name);
    if (sm) name += fmt::format(" (sm_{}{})", device.compute_major, device.compute_minor);
    if (device.properties_from_id) {
      name += " *";
      borrowed_names.push_back(fmt::format("GPU {}", device.device));
    }
    table.add_row({std::to_string(device.device), std::move(name), format_percent(100.0 * device.utilization),
                   device.sm_efficiency ? format_percent(100.0 * *device.sm_efficiency) : "unknown",
                   device.achieved_occupancy_percent ? format_percent(*device.achieved_occupancy_percent) : "unknown",
                   device.tensor_core_percent ? format_percent(*device.tensor_core_percent) : "n/a",
                   fmt::format("{:.3f}", static_cast<double>(device.kernel_ns) / 1e6)});
  }
  table.render(out);
  if (!borrowed_names.empty()) {
    const analysis::DeviceMetrics& any = *std::find_if(breakdown.devices.begin(), breakdown.devices.end(),
                                                       [](const analysis::DeviceMetrics& d) { return d.properties_from_id.has_value(); });
    fmt::format_to(std::back_inserter(out), "* {}\n",
                   wrap(fmt::format("deviceProperties does not list {}: its name is that of the GPUs the trace lists "
                                    "(id {}), which are all one model.",
                                    fmt::join(borrowed_names, ", "), *any.properties_from_id),
                        98, "  "));
  }
}

inline void text_hta(fmt::memory_buffer& out, const analysis::HtaAnalyses& hta, const analysis::AnalysisOptions& options) {
  const analysis::TemporalBreakdown& temporal = hta.temporal;
  section(out, "GPU time (HTA temporal breakdown)");
  TextTable time({{"Kind", Align::Left}, {"Time (ms)"}, {"Share"}});
  time.add_row({"idle", fmt::format("{:.3f}", static_cast<double>(temporal.idle_ns) / 1e6), format_percent(temporal.idle_percent())});
  time.add_row({"compute", fmt::format("{:.3f}", static_cast<double>(temporal.compute_ns) / 1e6),
                format_percent(temporal.compute_percent())});
  time.add_row({"non-compute", fmt::format("{:.3f}", static_cast<double>(temporal.non_compute_ns) / 1e6),
                format_percent(temporal.non_compute_percent())});
  time.add_rule();
  time.add_row({"kernel time", fmt::format("{:.3f}", static_cast<double>(temporal.kernel_time_ns) / 1e6), "100.0%"});
  time.render(out);

  section(out, "Kernel types (HTA kernel breakdown)");
  TextTable types({{"Type", Align::Left}, {"Time (ms)"}, {"Share"}});
  for (const analysis::KernelTypeTime& row : hta.kernel_types.times)
    types.add_row({row.label(), fmt::format("{:.3f}", static_cast<double>(row.time_ns) / 1e6), format_percent(row.percent)});
  types.render(out);

  const analysis::CpuSlicesOnStreams& cpu_ops = hta.cpu_slices_on_streams;
  if (cpu_ops.count != 0)
    fmt::format_to(std::back_inserter(out), "\n{}\n",
                   wrap(fmt::format(cpu_ops.counted_as_gpu_work
                                        ? "Counted as GPU computation above, as HTA counts {2}: {0} CPU op{1} naming a GPU "
                                          "stream (torch.compile's triton_* launches), {3:.3f} ms of CPU time."
                                        : "Not counted as GPU time above, unlike HTA: {0} CPU op{1} naming a GPU stream "
                                          "(torch.compile's triton_* launches), {3:.3f} ms of CPU time, which HTA counts "
                                          "as GPU computation (--hta-compat counts {2} so too).",
                                    cpu_ops.count, cpu_ops.count == 1 ? "" : "s", cpu_ops.count == 1 ? "it" : "them",
                                    static_cast<double>(cpu_ops.total_ns) / 1e6),
                        100, ""));

  if (!hta.idle_time.streams.empty()) {
    section(out, "Idle time per stream (HTA)");
    TextTable idle({{"GPU"}, {"Stream"}, {"Idle (ms)"}, {"Host wait"}, {"Kernel wait"}, {"Other"}});
    std::vector<std::string> overlaps;
    for (const analysis::StreamIdleTime& stream : hta.idle_time.streams) {
      idle.add_row({std::to_string(stream.device), std::to_string(stream.stream),
                    fmt::format("{:.3f}", static_cast<double>(stream.idle_ns()) / 1e6), format_percent(100.0 * stream.host_wait_ratio()),
                    format_percent(100.0 * stream.kernel_wait_ratio()), format_percent(100.0 * stream.other_ratio())});
      if (stream.overlaps != 0)
        overlaps.push_back(fmt::format("GPU {} stream {}: {} piece{} of work, {:.3f} ms", stream.device, stream.stream,
                                       stream.overlaps, stream.overlaps == 1 ? "" : "s",
                                       static_cast<double>(stream.overlap_ns) / 1e6));
    }
    idle.render(out);
    if (!overlaps.empty())
      fmt::format_to(std::back_inserter(out), "{}\n",
                     wrap(fmt::format("Work that starts before earlier work on its stream has ended runs alongside it "
                                      "(the trace's timestamps overlap), which is not idle time and is left out above: "
                                      "{}.",
                                      fmt::join(overlaps, "; ")),
                          100, ""));
  }
  if (hta.overlap.has_communication())
    fmt::format_to(std::back_inserter(out), "\nCommunication overlapped by computation (HTA): {} of {:.3f} ms\n",
                   format_percent(hta.overlap.overlap_percent()), static_cast<double>(hta.overlap.communication_ns) / 1e6);
  const analysis::LaunchStats& launches = hta.launches;
  if (!launches.launches.empty()) {
    section(out, "Kernel launches (HTA)");
    fmt::format_to(std::back_inserter(out),
                   "  {} launches; launch call {:.3f} us on average; launch delay {:.3f} us on average, {:.3f} us at most\n"
                   "  outliers: {} calls > {} us, {} delays > {} us; {} kernels shorter than their launch call\n",
                   launches.launches.size(), launches.mean_cpu_duration_ns() / 1e3, launches.mean_launch_delay_ns() / 1e3,
                   static_cast<double>(launches.max_launch_delay_ns()) / 1e3, launches.runtime_outliers,
                   static_cast<double>(options.runtime_cutoff_ns) / 1e3, launches.launch_delay_outliers,
                   static_cast<double>(options.launch_delay_cutoff_ns) / 1e3, launches.short_kernels);
  }
}

inline void text_ops(fmt::memory_buffer& out, const RankReport& rank, const std::vector<KeyAverage>& ops,
                     std::string_view title) {
  section(out, title);
  std::vector<TextColumn> columns = {{"Name", Align::Left, 48}, {"Category", Align::Left}, {"Calls"}, {"Self CPU"},
                                     {"CPU total"}};
  if (rank.gpu_activity) {
    columns.push_back({"Self GPU"});
    columns.push_back({"GPU total"});
  }
  TextTable table(std::move(columns));
  for (const KeyAverage& op : ops) {
    std::vector<std::string> row = {op.name, std::string(to_string(op.category)), std::to_string(op.calls),
                                    KeyAverages::format_duration(op.self_ns), KeyAverages::format_duration(op.total_ns)};
    if (rank.gpu_activity) {
      row.push_back(gpu_time_cell(op.gpu_ns));
      row.push_back(gpu_time_cell(op.gpu_total_ns));
    }
    table.add_row(std::move(row));
  }
  table.render(out);
}

/// The ops by the memory they kept, with torch's memory columns (in a terminal's width: the HTML
/// tables give every op both its times and its memory).
inline void text_memory_ops(fmt::memory_buffer& out, const RankReport& rank) {
  section(out, top_ops_by_memory_title(rank));
  std::vector<TextColumn> columns = {{"Name", Align::Left, 44}, {"Calls"}};
  for (std::string& header : memory_headers(rank)) columns.push_back({std::move(header)});
  TextTable table(std::move(columns));
  for (const KeyAverage& op : rank.top_ops_by_memory) {
    std::vector<std::string> row = {op.name, std::to_string(op.calls)};
    for (std::string& cell : memory_cells(rank, op)) row.push_back(std::move(cell));
    table.add_row(std::move(row));
  }
  table.render(out);
}

/// The ops by self CPU time and, with GPU work, by self GPU time: the GPU's table first when the
/// GPU is busy most of the steps. A "–" marks no GPU work tied to the op.
inline void text_top_ops(fmt::memory_buffer& out, const RankReport& rank) {
  const auto by_cpu = [&] {
    text_ops(out, rank, rank.top_ops, fmt::format("Top ops and ranges by self CPU time ({} of {})", rank.top_ops.size(), rank.op_names));
  };
  const auto by_gpu = [&] {
    if (rank.top_ops_by_gpu.empty()) return;
    text_ops(out, rank, rank.top_ops_by_gpu, fmt::format("Top ops and ranges by self GPU time ({} of {})",
                                                         rank.top_ops_by_gpu.size(), rank.op_names));
  };
  const auto by_memory = [&] {
    if (!rank.top_ops_by_memory.empty()) text_memory_ops(out, rank);
  };
  if (rank.gpu_utilization().value_or(0.0) >= 0.5) {
    by_gpu();
    by_cpu();
  } else {
    by_cpu();
    by_gpu();
  }
  by_memory();
}

/// Threads besides the training loop's that only wait, whose frames the top ops leave out.
inline void text_idle_threads(fmt::memory_buffer& out, const RankReport& rank, std::size_t rows) {
  if (rank.idle_threads.empty()) return;
  section(out, "Idle threads: Python frames of other threads that only wait (left out of the ops above)");
  TextTable table({{"Thread", Align::Left, 32}, {"Waiting"}, {"Waits"}, {"Longest in", Align::Left, 56}});
  for (std::size_t i = 0; i < rank.idle_threads.size() && i < rows; ++i) {
    const IdleThreadTime& thread = rank.idle_threads[i];
    table.add_row({thread.thread_name.empty() ? fmt::format("{}", thread.os_tid) : fmt::format("{} ({})", thread.os_tid, thread.thread_name),
                   KeyAverages::format_duration(thread.wait_ns), std::to_string(thread.waits), std::string(thread.frame)});
  }
  table.render(out);
}

inline void text_top_kernels(fmt::memory_buffer& out, const RankReport& rank) {
  section(out, fmt::format("Top kernels by GPU time ({} of {}, {:.3f} ms in all)", rank.top_kernels.size(),
                           rank.kernel_names, static_cast<double>(rank.kernel_ns) / 1e6));
  TextTable table({{"Name", Align::Left, KernelTotal::kShortNameWidth}, {"Type", Align::Left},
                   {std::string(matrix_units_abbreviation(rank.steps.matrix_units)), Align::Left}, {"Calls"}, {"Total"},
                   {"Avg"}, {"Max"}, {"Share"}});
  for (const KernelTotal& kernel : rank.top_kernels)
    table.add_row({kernel.short_name, std::string(analysis::to_string(kernel.type)), std::string(tensor_cores_cell(kernel.tensor_cores)),
                   std::to_string(kernel.calls), KeyAverages::format_duration(kernel.total_ns),
                   KeyAverages::format_duration(static_cast<std::int64_t>(kernel.mean_ns())),
                   KeyAverages::format_duration(kernel.max_ns), format_percent(kernel.percent)});
  table.render(out);
}

/// How busy each CPU thread is: the training thread's time, the loaders' balance, each thread's.
inline void text_thread_cpu(fmt::memory_buffer& out, const RankReport& rank, std::size_t rows) {
  const TableSection threads = thread_cpu_section(rank, rows);
  section(out, threads.title);
  for (const std::string& line : threads.lines) fmt::format_to(std::back_inserter(out), "  {}\n", wrap(terminal_text(line), 98, "    "));
  TextTable table({{threads.headers[0], Align::Left, 32}, {threads.headers[1], Align::Left}, {threads.headers[2]},
                   {threads.headers[3]}, {threads.headers[4]}, {threads.headers[5]}, {threads.headers[6], Align::Left}});
  for (const std::vector<std::string>& row : threads.rows) table.add_row(row);
  table.render(out);
  for (const std::string& note : threads.notes)
    fmt::format_to(std::back_inserter(out), "  * {}\n", wrap(terminal_text(note), 96, "    "));
}

/// Which line of code: the ops by the line of the user's code they came from.
inline void text_code_lines(fmt::memory_buffer& out, const RankReport& rank) {
  const TableSection lines = code_lines_section(rank);
  section(out, lines.title);
  for (const std::string& line : lines.lines) fmt::format_to(std::back_inserter(out), "  {}\n", wrap(terminal_text(line), 98, "    "));
  TextTable table({{lines.headers[0], Align::Left, 56}, {lines.headers[1]}, {lines.headers[2]}, {lines.headers[3]},
                   {lines.headers[4]}, {lines.headers[5]}, {lines.headers[6], Align::Left, 24}, {lines.headers[7], Align::Left, 24}});
  for (std::vector<std::string> row : lines.rows) {
    row[0] = without_directories(row[0]);
    table.add_row(std::move(row));
  }
  table.render(out);
  for (const std::string& note : lines.notes) fmt::format_to(std::back_inserter(out), "  * {}\n", wrap(terminal_text(note), 96, "    "));
}

/// Memory by op: per device, what each op allocated (TensorBoard's memory view).
inline void text_memory_by_op(fmt::memory_buffer& out, const RankReport& rank, std::size_t rows) {
  for (const TableSection& device : memory_by_op_sections(rank, rows)) {
    section(out, device.title);
    TextTable table({{device.headers[0], Align::Left, 40}, {device.headers[1]}, {device.headers[2]}, {device.headers[3]},
                     {device.headers[4]}, {device.headers[5]}, {device.headers[6]}, {device.headers[7]}});
    for (const std::vector<std::string>& row : device.rows) table.add_row(row);
    table.render(out);
    for (const std::string& note : device.notes) fmt::format_to(std::back_inserter(out), "  * {}\n", wrap(terminal_text(note), 96, "    "));
  }
}

/// A section with its sentences, its table in `columns` (whose headers are the section's) and
/// its notes.
inline void text_table_section(fmt::memory_buffer& out, const TableSection& table_section, std::vector<TextColumn> columns) {
  section(out, table_section.title);
  for (const std::string& line : table_section.lines)
    fmt::format_to(std::back_inserter(out), "  {}\n", wrap(terminal_text(line), 98, "    "));
  if (!table_section.rows.empty()) {
    for (std::size_t i = 0; i < columns.size() && i < table_section.headers.size(); ++i) columns[i].header = table_section.headers[i];
    TextTable table(std::move(columns));
    for (const std::vector<std::string>& row : table_section.rows) table.add_row(row);
    table.render(out);
  }
  for (const std::string& note : table_section.notes)
    fmt::format_to(std::back_inserter(out), "  * {}\n", wrap(terminal_text(note), 96, "    "));
}

/// Memory at each device's peak, and the memory that grows from step to step.
inline void text_memory_explained(fmt::memory_buffer& out, const RankReport& rank) {
  for (const TableSection& peak : memory_peak_sections(rank)) {
    if (peak.headers.size() == 3)  // by op, or by line of code
      text_table_section(out, peak, {{{}, Align::Left, 80}, {}, {}});
    else
      text_table_section(out, peak, {{}, {{}, Align::Left}, {{}, Align::Left, 20}, {{}, Align::Left, 70}});
  }
  for (const TableSection& growth : memory_growth_sections(rank))
    text_table_section(out, growth, {{{}, Align::Left}, {{}, Align::Left, 50}, {{}, Align::Left}, {}, {}, {}, {}});
}

/// CUDA graphs: the work they replayed, by graph.
inline void text_cuda_graphs(fmt::memory_buffer& out, const RankReport& rank, std::size_t rows) {
  const TableSection graphs = cuda_graphs_section(rank, rows);
  section(out, graphs.title);
  std::vector<TextColumn> columns = {{graphs.headers[0]}, {graphs.headers[1], Align::Left, 40}, {graphs.headers[2]},
                                     {graphs.headers[3]}, {graphs.headers[4]}, {graphs.headers[5]}, {graphs.headers[6]},
                                     {graphs.headers[7], Align::Left, 40}};
  const bool captures = graphs.headers.size() > columns.size();  // who captured it, and where
  if (captures) columns.insert(columns.end(), {{graphs.headers[8], Align::Left, 40}, {graphs.headers[9], Align::Left, 50}});
  TextTable table(std::move(columns));
  for (std::vector<std::string> row : graphs.rows) {
    if (captures) row[9] = without_directories(row[9]);
    table.add_row(std::move(row));
  }
  table.render(out);
  for (const std::string& note : graphs.notes) fmt::format_to(std::back_inserter(out), "  * {}\n", wrap(terminal_text(note), 96, "    "));
}

/// How far from the limit: MFU, roofs, clocks, and the ops that lost the most time.
inline void text_limits(fmt::memory_buffer& out, const RankReport& rank, std::size_t rows) {
  const TableSection limits = limits_section(rank, rows);
  section(out, limits.title);
  for (const std::string& line : limits.lines) fmt::format_to(std::back_inserter(out), "  {}\n", wrap(terminal_text(line), 98, "    "));
  if (limits.rows.empty()) return;
  TextTable table({{limits.headers[0], Align::Left, 28}, {limits.headers[1], Align::Left, 30}, {limits.headers[2], Align::Left},
                   {limits.headers[3]}, {limits.headers[4]}, {limits.headers[5]}, {limits.headers[6]}, {limits.headers[7]},
                   {limits.headers[8], Align::Left}, {limits.headers[9]}, {limits.headers[10]}, {limits.headers[11]},
                   {limits.headers[12]}});
  for (const std::vector<std::string>& row : limits.rows) table.add_row(row);
  table.render(out);
  for (const std::string& note : limits.notes)
    fmt::format_to(std::back_inserter(out), "  * {}\n", wrap(terminal_text(note), 96, "    "));
}

/// nvprof's summary without its kernels, which the top kernels show: copies, fills and API calls.
inline void text_nvprof(fmt::memory_buffer& out, const analysis::GpuSummary& summary, std::size_t rows) {
  section(out, "nvprof summary: copies and fills, and API calls (top rows; kernels: the table above)");
  TextTable table({{"Type", Align::Left}, {"Time(%)"}, {"Time"}, {"Calls"}, {"Avg"}, {"Min"}, {"Max"}, {"Name", Align::Left, 40}});
  const auto add = [&](std::string_view type, const std::vector<analysis::DurationStats>& section_rows, std::int64_t total,
                       bool without_kernels) {
    std::size_t shown = 0;
    for (const analysis::DurationStats& row : section_rows) {
      if (shown == rows) break;
      if (without_kernels && analysis::GpuSummary::is_kernel_row(row)) continue;
      table.add_row({shown++ == 0 ? std::string(type) : std::string(), format_percent(analysis::GpuSummary::percent(row, total)),
                     KeyAverages::format_duration(row.total_ns), std::to_string(row.calls),
                     KeyAverages::format_duration(static_cast<std::int64_t>(row.mean_ns)),
                     KeyAverages::format_duration(row.min_ns), KeyAverages::format_duration(row.max_ns), std::string(row.name)});
    }
  };
  add("GPU activities", summary.gpu_activities, summary.gpu_activities_ns, true);
  if (!summary.api_calls.empty() && table.rows() != 0) table.add_rule();
  add("API calls", summary.api_calls, summary.api_calls_ns, false);
  table.render(out);
}

inline void text_host_syncs(fmt::memory_buffer& out, const analysis::HostSyncs& syncs, std::size_t rows) {
  section(out, fmt::format("Where the host waits for the GPU: {} synchronisation point{} in the steps, {} of waiting\n"
                           "(Saves: of the GPU's idle time after each point, what its wait could have covered)",
                           syncs.points, syncs.points == 1 ? "" : "s",
                           KeyAverages::format_duration(syncs.wait_ns)));
  TextTable table({{"Kind", Align::Left}, {"Count"}, {"Wait"}, {"Idle after"}, {"Saves"}, {"Op", Align::Left, 22},
                   {"Where", Align::Left, 36}});
  for (std::size_t i = 0; i < syncs.sites.size() && i < rows; ++i) {
    const analysis::SyncSite& site = syncs.sites[i];
    table.add_row({site.kind == analysis::SyncKind::Explicit ? std::string(site.call) : std::string(to_string(site.kind)),
                   std::to_string(site.count), KeyAverages::format_duration(site.wait_ns),
                   KeyAverages::format_duration(site.gpu_idle_after_ns), KeyAverages::format_duration(site.saving_ns),
                   site.op.empty() ? "-" : std::string(site.op), site.place().empty() ? "-" : std::string(site.place())});
  }
  table.render(out);
}

inline void text_memory(fmt::memory_buffer& out, const std::vector<MemoryCurve>& memory) {
  fmt::format_to(std::back_inserter(out), "\nPeak memory allocated:");
  for (const MemoryCurve& curve : memory) {
    fmt::format_to(std::back_inserter(out), "  {} {}", device_label(curve.device_type, curve.device),
                   KeyAverages::format_bytes(curve.peak_bytes));
    if (curve.capacity_bytes > 0)
      fmt::format_to(std::back_inserter(out), " of {} ({})", KeyAverages::format_bytes(curve.capacity_bytes),
                     share_of(static_cast<double>(curve.peak_bytes), static_cast<double>(curve.capacity_bytes)));
  }
  fmt::format_to(std::back_inserter(out), "\n");
}

/// What reading the file left out or changed: the rank's numbers are of what was read.
inline void text_read_result(fmt::memory_buffer& out, const ReadResult& read) {
  if (read.empty()) return;
  const auto line = std::back_inserter(out);
  fmt::format_to(line, "\nRead with changes (this rank's numbers are of what was read):\n");
  if (read.skipped_events != 0)
    fmt::format_to(line, "  {} event{} left out, unusable on {} own; the first, at byte {}: {}\n", read.skipped_events,
                   read.skipped_events == 1 ? "" : "s", read.skipped_events == 1 ? "its" : "their", read.first_skip_offset,
                   terminal_text(read.first_skip_reason));
  for (const std::string& note : read.notes) fmt::format_to(line, "  {}\n", terminal_text(note));
}

inline void text_rank(fmt::memory_buffer& out, const RankReport& rank, const ReportOptions& options) {
  heading(out, rank.world_size > 1 ? fmt::format("Rank {} of {}", rank.rank, rank.world_size) : fmt::format("Rank {}", rank.rank));
  if (!rank.flight_recorder_dump.empty())
    fmt::format_to(std::back_inserter(out), "\n{}\n", wrap("Flight-recorder dump: " + terminal_text(rank.flight_recorder_dump), 100, "  "));
  if (rank.slow_step) fmt::format_to(std::back_inserter(out), "{}\n", wrap(terminal_text(slow_step_sentence(*rank.slow_step)), 100, "  "));
  for (const analysis::OutOfMemory& failure : rank.out_of_memory)
    fmt::format_to(std::back_inserter(out), "\n{}\n", wrap(terminal_text(out_of_memory_line(failure)), 100, "  "));
  text_step_breakdown(out, rank.steps);
  if (rank.gpu_activity)
    if (const std::string note = communication_shares_note(rank.steps, rank.hta); !note.empty())
      fmt::format_to(std::back_inserter(out), "{}\n", wrap(note, 100, ""));
  text_read_result(out, rank.read);
  if (!rank.gpu_activity) {
    fmt::format_to(std::back_inserter(out), "\nNo GPU activity in this trace: the GPU and HTA sections are left out.\n");
  } else {
    if (!rank.steps.devices.empty()) text_gpu_summary(out, rank.steps);
    text_hta(out, rank.hta, options.analysis);
  }
  text_top_ops(out, rank);
  text_memory_by_op(out, rank, options.top_rows);
  if (!rank.code_lines.empty()) text_code_lines(out, rank);
  if (!rank.cuda_graphs.empty()) text_cuda_graphs(out, rank, options.top_rows);
  text_idle_threads(out, rank, options.top_rows);
  if (!rank.thread_cpu.empty()) text_thread_cpu(out, rank, options.top_rows);
  if (rank.gpu_activity) {
    text_top_kernels(out, rank);
    if (!rank.roofline.rows.empty()) text_limits(out, rank, options.top_rows);
    text_nvprof(out, rank.gpu_summary, options.top_rows);
    if (!rank.syncs.empty()) text_host_syncs(out, rank.syncs, options.top_rows);
  }
  if (!rank.memory.empty()) text_memory(out, rank.memory);
  text_memory_explained(out, rank);
  if (rank.dropped_events != 0 || rank.dropped_gpu_records != 0)
    fmt::format_to(std::back_inserter(out), "\nLost while recording: {} events, {} GPU records (the numbers above miss them)\n",
                   rank.dropped_events, rank.dropped_gpu_records);
  if (rank.overflowed_names != 0)
    fmt::format_to(std::back_inserter(out),
                   "\n{} {} recorded as \"<dlprof: name table full>\": the process's table of run-time names reached "
                   "its limit (ProfilerOptions::name_table_bytes). Name ranges with literals, or with fewer distinct "
                   "formatted names.\n",
                   rank.overflowed_names, rank.overflowed_names == 1 ? "name was" : "names were");
}

inline void text_comparison(fmt::memory_buffer& out, const analysis::RankComparison& comparison) {
  heading(out, "Ranks compared");
  section(out, "Per rank (step time: TensorBoard's steps; GPU time: HTA)");
  TextTable ranks({{"Rank"}, {"Steps"}, {"Step mean (ms)"}, {"Min (ms)"}, {"Max (ms)"}, {"GPU util"}, {"Idle"},
                   {"Compute"}, {"Non-compute"}, {"Comm overlap"}});
  for (const analysis::RankSummary& rank : comparison.ranks)
    ranks.add_row({std::to_string(rank.rank), std::to_string(rank.steps), fmt::format("{:.3f}", rank.step_time_mean_ns / 1e6),
                   fmt::format("{:.3f}", static_cast<double>(rank.step_time_min_ns) / 1e6),
                   fmt::format("{:.3f}", static_cast<double>(rank.step_time_max_ns) / 1e6),
                   format_percent(100.0 * rank.gpu_utilization), format_percent(rank.temporal.idle_percent()),
                   format_percent(rank.temporal.compute_percent()), format_percent(rank.temporal.non_compute_percent()),
                   rank.overlap.has_communication() ? format_percent(rank.overlap.overlap_percent()) : "-"});
  ranks.render(out);
  if (comparison.steps.empty()) return;
  section(out, "Step times across ranks: the slowest and the fastest rank of each step (the rank that waits longest\n"
                "in collectives has long steps too: the collectives below name the rank the others wait for)");
  TextTable steps({{"Step"}, {"Ranks"}, {"Slowest rank"}, {"Slowest (ms)"}, {"Median (ms)"}, {"Fastest rank"},
                   {"Fastest (ms)"}, {"vs median"}, {"vs fastest"}});
  for (const analysis::StepAcrossRanks& step : comparison.steps)
    steps.add_row({std::to_string(step.step), std::to_string(step.ranks), std::to_string(step.slowest_rank),
                   fmt::format("{:.3f}", static_cast<double>(step.slowest_ns) / 1e6), fmt::format("{:.3f}", step.median_ns / 1e6),
                   std::to_string(step.fastest_rank), fmt::format("{:.3f}", static_cast<double>(step.fastest_ns) / 1e6),
                   fmt::format("{:+.1f}%", step.slowest_over_median_percent()),
                   fmt::format("{:+.1f}%", step.slowest_over_fastest_percent())});
  steps.render(out);
}

inline void text_collectives(fmt::memory_buffer& out, const analysis::CollectiveAnalysis& collectives, std::size_t top) {
  heading(out, "Collectives across ranks");
  const auto append = std::back_inserter(out);
  for (const std::string& problem : collectives.problems) fmt::format_to(append, "Note: {}\n", wrap(terminal_text(problem), 94, "      "));
  const auto ms = [](double ns) { return fmt::format("{:.3f}", ns / 1e6); };
  section(out, "Per rank, per step on average (ms). Inside collectives, waiting: for the last rank to arrive;\n"
                "transfer: once it has. Exposed: communication with no computation alongside");
  TextTable ranks({{"Rank"}, {"Steps"}, {"Step"}, {"Compute"}, {"Comm"}, {"Waiting"}, {"Transfer"}, {"Exposed"},
                   {"Data loading"}, {"Forward"}, {"Backward"}, {"Optimizer"}, {"Last at"}});
  for (const analysis::RankPhases& rank : collectives.ranks) {
    const auto phase = [&](analysis::StepPhase p) { return ms(rank.phase_ns[static_cast<std::size_t>(p)]); };
    ranks.add_row({std::to_string(rank.rank), std::to_string(rank.steps), ms(rank.step_ns), ms(rank.compute_ns),
                   ms(rank.communication_ns), ms(rank.waiting_ns), ms(rank.transfer_ns), ms(rank.exposed_communication_ns),
                   phase(analysis::StepPhase::DataLoading), phase(analysis::StepPhase::Forward),
                   phase(analysis::StepPhase::Backward), phase(analysis::StepPhase::Optimizer),
                   std::to_string(rank.last_arrivals)});
  }
  ranks.render(out);
  section(out, "Per collective, per call (latency: from the last rank's arrival to the end; wait: a rank's time in\n"
                "it before that, on average; bandwidths as nccl-tests define them)");
  std::vector<TextColumn> columns;
  for (const std::string_view column : kCollectiveTypeColumns) columns.push_back({std::string(column)});
  TextTable types(std::move(columns));
  for (const analysis::CollectiveTypeStats& type : collectives.types) types.add_row(collective_type_row(type));
  types.render(out);
  std::vector<const analysis::CollectiveInstance*> skewed;
  for (const analysis::CollectiveInstance& instance : collectives.instances)
    if (instance.last_rank >= 0) skewed.push_back(&instance);
  std::stable_sort(skewed.begin(), skewed.end(), [](const auto* a, const auto* b) { return a->skew_ns > b->skew_ns; });
  if (skewed.size() > top) skewed.resize(top);
  if (!skewed.empty()) {
    section(out, fmt::format("Arrival skew: the {} collective call{} with the most, first to last rank to arrive",
                             skewed.size(), skewed.size() == 1 ? "" : "s"));
    TextTable calls({{"Step"}, {"Group"}, {"Seq"}, {"Collective"}, {"Ranks"}, {"Skew (ms)"}, {"Last rank"}});
    for (const analysis::CollectiveInstance* instance : skewed)
      calls.add_row({instance->step >= 0 ? std::to_string(instance->step) : "-", terminal_text(instance->group),
                     instance->seq >= 0 ? std::to_string(instance->seq) : "-", terminal_text(instance->name),
                     std::to_string(instance->ranks), ms(static_cast<double>(instance->skew_ns)),
                     std::to_string(instance->last_rank)});
    calls.render(out);
  }
  if (const std::optional<analysis::Straggler>& s = collectives.straggler)
    fmt::format_to(append, "\nStraggler: {}\n", wrap(straggler_sentence(*s), 88, "           "));
  else
    fmt::format_to(append, "\nStraggler: {}\n", wrap(no_straggler_sentence(collectives), 88, "           "));
}

inline void text_recommendations(fmt::memory_buffer& out, const std::vector<analysis::Recommendation>& recommendations) {
  heading(out, "Recommendations");
  if (recommendations.empty()) {
    fmt::format_to(std::back_inserter(out), "None: no rule found time to save in these traces.\n");
    return;
  }
  for (std::size_t i = 0; i < recommendations.size(); ++i) {
    const analysis::Recommendation& advice = recommendations[i];
    const std::string number = fmt::format("{}. ", i + 1);
    const std::string indent(number.size(), ' ');
    fmt::format_to(std::back_inserter(out), "{}{}\n{}{}\n", number,
                   wrap(terminal_text(fmt::format("[{}] {}", saving_of(advice), advice.text)), 100 - indent.size(), indent), indent,
                   wrap(terminal_text(fmt::format("Evidence: {} [{}]", advice.evidence, advice.id)), 100 - indent.size(), indent));
  }
}

/// The answer before the tables: what bounds the step, its time, GPU busy, the top actions.
inline void text_verdict(fmt::memory_buffer& out, const analysis::Verdict& verdict,
                         const std::vector<analysis::Recommendation>& recommendations, bool several_ranks,
                         std::string_view healthy) {
  const auto append = std::back_inserter(out);
  if (verdict.bound == analysis::Bound::NoSteps) {
    fmt::format_to(append, "\nVerdict: none; the traces hold no step to judge.\n");
  } else {
    fmt::format_to(append, "\nVerdict: {}\n  {}\n", verdict_bound_sentence(verdict), verdict_step_sentence(verdict));
    if (const std::string left_out = left_out_sentence(verdict, several_ranks); !left_out.empty())
      fmt::format_to(append, "  {}\n", wrap(terminal_text(left_out), 96, "  "));
  }
  if (verdict.top_actions == 0) {
    fmt::format_to(append, "  Top actions: none; no rule found time to save{}.\n",
                   recommendations.empty() ? "" : " (see \"Recommendations\" at the end)");
    if (!healthy.empty() && verdict.bound != analysis::Bound::NoSteps)
      fmt::format_to(append, "  {}\n", wrap(terminal_text(healthy), 96, "  "));
    return;
  }
  fmt::format_to(append, "  Top actions, by the time they save:\n");
  for (std::size_t i = 0; i < verdict.top_actions; ++i) {
    const analysis::Recommendation& finding = recommendations[i];
    std::string line = fmt::format("{}: {}", saving_of(finding), finding.action);
    if (several_ranks)
      line += finding.ranks.size() > 1
                  ? fmt::format(" [ranks {}; worst {}]", analysis::detail::rank_list(finding.ranks), finding.worst_rank)
                  : fmt::format(" [rank {}]", finding.worst_rank);
    fmt::format_to(append, "    {}. {}\n", i + 1, wrap(terminal_text(line), 93, "       "));
  }
  fmt::format_to(append, "  {} finding{} in all, with their evidence, under \"Recommendations\" at the end.\n",
                 recommendations.size(), recommendations.size() == 1 ? "" : "s");
}

/// Where the analyses depart from the tools they follow, on purpose: the JSON's
/// tensorboard_deviations and hta_deviations.
inline void text_deviations(fmt::memory_buffer& out) {
  const auto append = std::back_inserter(out);
  fmt::format_to(append, "\n");
  heading(out, "Where dlprof departs from TensorBoard and HTA on purpose");
  fmt::format_to(append, "Step times and GPU summary, from TensorBoard's profiler plugin's rules:\n");
  for (const analysis::TensorBoardDeviation& deviation : analysis::kTensorBoardDeviations)
    fmt::format_to(append, "  - {}\n", wrap(fmt::format("{}: {}", deviation.what, deviation.why), 96, "    "));
  fmt::format_to(append, "GPU time, kernel types, idle time, overlap and launches, from HTA's:\n");
  for (const analysis::HtaDeviation& deviation : analysis::kHtaDeviations)
    fmt::format_to(append, "  - {}\n", wrap(fmt::format("{}: {}", deviation.what, deviation.why), 96, "    "));
}

}  // namespace detail

/// The report as terminal tables (fixed-width, about 100 columns; long names shortened in the
/// middle). Text from traces is terminal_text() (dlprof/detail/text.hpp): control characters in
/// names are shown as escapes (\n, \t, \x1b, \u0085), never sent to the terminal, and bytes
/// that are not UTF-8 as U+FFFD.
inline std::string render_text(const Report& report) {
  fmt::memory_buffer out;
  const auto append = std::back_inserter(out);
  fmt::format_to(append, "dlprof report{}{}\n", report.options.title.empty() ? "" : ": ", detail::terminal_text(report.options.title));
  if (report.ranks.empty()) {
    fmt::format_to(append, "No trace to report on.\n");
    return fmt::to_string(out);
  }
  fmt::format_to(append, "{} rank{}; HTA's analyses {}\n", report.ranks.size(), report.ranks.size() == 1 ? "" : "s",
                 report.options.analysis.hta_compat
                     ? "with HTA's conventions (the last ProfilerStep dropped, times rounded inward to whole us)"
                     : "over every complete step, in exact ns");
  detail::text_verdict(out, report.verdict, report.recommendations, report.ranks.size() > 1,
                       detail::healthy_report_sentence(report));
  fmt::format_to(append, "\n");
  for (const RankReport& rank : report.ranks) {
    detail::text_rank(out, rank, report.options);
    fmt::format_to(append, "\n");
  }
  if (report.comparison) {
    detail::text_comparison(out, *report.comparison);
    if (report.slow_rank) fmt::format_to(append, "\n{}\n", detail::wrap(detail::terminal_text(detail::slow_rank_sentence(*report.slow_rank)), 100, "  "));
    fmt::format_to(append, "\n");
  }
  if (report.collectives && !report.collectives->empty()) {
    detail::text_collectives(out, *report.collectives, report.options.top_rows);
    fmt::format_to(append, "\n");
  }
  detail::text_recommendations(out, report.recommendations);
  detail::text_deviations(out);
  return fmt::to_string(out);
}

DLPROF_END_NAMESPACE

/// `fmt::print("{}", report)` prints render_text(report).
template <>
struct fmt::formatter<dlprof::Report> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(const dlprof::Report& report, FormatContext& context) const {
    return fmt::formatter<std::string_view>::format(dlprof::render_text(report), context);
  }
};
