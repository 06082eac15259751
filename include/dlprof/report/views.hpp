// dlprof/report/views.hpp: what the report page's interactive views hold of one rank beyond the
// report's tables: every op split by input shapes and call site (the Operator view sums them by
// whichever the reader groups by), the kernels each op launched, the whole kernel table with each
// kernel's occupancy, the module tree and the timeline (timeline.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/device_peaks.hpp"
#include "dlprof/analysis/kernel_attribution.hpp"
#include "dlprof/analysis/kernel_table.hpp"
#include "dlprof/analysis/module_tree.hpp"
#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/make_report.hpp"
#include "dlprof/report/timeline.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// The ops and ranges of one name called with the same input shapes from the same line.
struct OpRow {
  std::string_view name;
  std::string_view input_dims;  ///< record_shapes' text; empty without
  std::string call_site;        ///< the innermost frame of the user's code; empty without stacks
  Category category = Category::User;
  std::uint64_t calls = 0;
  std::int64_t self_ns = 0;
  std::int64_t total_ns = 0;
  std::int64_t gpu_ns = 0;        ///< as KeyAverage::gpu_ns
  std::int64_t gpu_total_ns = 0;  ///< as KeyAverage::gpu_total_ns
  std::uint64_t flops = 0;
  MemoryUsage memory;  ///< torch's memory columns (KeyAverage::memory)
};

/// The kernels, copies and fills an op launched, by op, input shapes and kernel name.
struct OpKernel {
  std::string_view op;
  std::string_view input_dims;
  std::string_view kernel;
  std::uint64_t calls = 0;
  std::int64_t ns = 0;
};

struct RankViews {
  std::vector<OpRow> ops;              ///< in the order names first appear
  std::vector<OpKernel> op_kernels;
  analysis::KernelTable kernels;
  /// Per row of `kernels`: its kernels' estimated achieved occupancy in %, weighted by their time;
  /// none where the trace does not say.
  std::vector<std::optional<double>> kernel_occupancy;
  analysis::ModuleTree modules;
  Timeline timeline;
};

/// The views of `trace`, whose kernels `attribution` attributes.
inline RankViews rank_views(const Trace& trace, const analysis::KernelAttribution& attribution, const TimelineOptions& timeline_options,
                            const analysis::DevicePeaks* peaks = nullptr) {
  RankViews views;
  // Ops: one row per name, input shapes and call site.
  std::vector<std::string> site_of_stack(trace.stacks.size());
  std::vector<bool> site_known(trace.stacks.size(), false);
  const auto site = [&](std::uint32_t stack) -> std::string_view {
    if (stack >= trace.stacks.size()) return {};
    if (!site_known[stack]) {
      site_known[stack] = true;
      if (const StackFrame* frame = innermost_user_frame(trace, trace.stacks[stack])) site_of_stack[stack] = frame_text(trace, *frame);
    }
    return site_of_stack[stack];
  };
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::string_view>, std::size_t> row_of;  // name, dims, site
  analysis::ModuleTreeBuilder modules(trace);
  dlprof::detail::for_each_measured_slice(trace, [&](const dlprof::detail::MeasuredSlice& slice) {
    modules.add(slice);
    const TraceEvent& event = trace.events[slice.event];
    const std::uint32_t dims =
        event.inputs < trace.op_inputs.size() && trace.op_inputs[event.inputs].dims < trace.names.size() ? trace.op_inputs[event.inputs].dims
                                                                                                          : UINT32_MAX;
    const std::string_view call_site = site(event.stack);
    const auto [found, added] = row_of.try_emplace({event.name, dims, call_site}, views.ops.size());
    if (added) {
      OpRow& row = views.ops.emplace_back();
      row.name = trace.name_of(event);
      if (dims != UINT32_MAX) row.input_dims = trace.names[dims];
      row.call_site = std::string(call_site);
      row.category = event.category;
    }
    OpRow& row = views.ops[found->second];
    ++row.calls;
    row.total_ns += event.duration_ns();
    row.self_ns += slice.self_ns;
    row.gpu_ns += slice.gpu_self_ns;
    row.gpu_total_ns += slice.gpu_total_ns;
    row.flops += slice.flops;
    row.memory += slice.memory;
  });

  // What each op launched, and the occupancy of each row of the kernel table (rows as
  // analysis::kernel_table keys them).
  std::map<std::tuple<std::string_view, std::string_view, std::string_view>, std::size_t> kernel_of;
  using RowKey = std::tuple<std::string_view, std::string_view, std::string_view, std::string_view, analysis::Direction,
                            std::string_view, std::string_view, std::array<std::uint32_t, 3>, std::array<std::uint32_t, 3>,
                            std::uint32_t>;
  std::map<RowKey, std::pair<double, double>> occupancy;  // (Σ occupancy × time, Σ time) of kernels that say
  for (const analysis::AttributedKernel& kernel : attribution.kernels) {
    if (!kernel.op.empty()) {
      const auto [found, added] = kernel_of.try_emplace({kernel.op, kernel.input_dims, kernel.name}, views.op_kernels.size());
      if (added) views.op_kernels.push_back({kernel.op, kernel.input_dims, kernel.name, 0, 0});
      ++views.op_kernels[found->second].calls;
      views.op_kernels[found->second].ns += kernel.duration_ns;
    }
    const GpuEvent& work = *kernel.work;
    if (work.kind != GpuEventKind::Kernel || work.kernel.est_achieved_occupancy_percent < 0) continue;
    const KernelDetails& details = work.kernel;
    auto& sums = occupancy[RowKey{kernel.name, kernel.layer, kernel.op, kernel.line, kernel.direction, kernel.input_dims,
                                  kernel.input_types, {details.grid[0], details.grid[1], details.grid[2]},
                                  {details.block[0], details.block[1], details.block[2]}, work.device}];
    sums.first += static_cast<double>(details.est_achieved_occupancy_percent) * static_cast<double>(work.duration_ns());
    sums.second += static_cast<double>(work.duration_ns());
  }
  views.kernels = analysis::kernel_table(trace, attribution, peaks);
  for (const analysis::KernelTableRow& row : views.kernels.rows) {
    const auto found = occupancy.find(RowKey{row.kernel, row.layer, row.op, row.line, row.direction, row.input_dims,
                                             row.input_types, row.grid, row.block, row.device});
    views.kernel_occupancy.push_back(found != occupancy.end() && found->second.second > 0
                                         ? std::optional<double>(found->second.first / found->second.second)
                                         : std::nullopt);
  }
  views.modules = std::move(modules).take();
  views.timeline = timeline(trace, timeline_options);
  return views;
}

/// The views of a rank for the page: ReportOptions::views.
///
///   dlprof::ReportOptions options;
///   options.views = dlprof::rank_views_of;
///   const std::string page = dlprof::render_html(dlprof::make_report(trace, options));
inline std::shared_ptr<const RankViews> rank_views_of(const Trace& trace, const analysis::KernelAttribution& attribution,
                                                      const ReportOptions& options) {
  return std::make_shared<const RankViews>(rank_views(trace, attribution, options.timeline, options.peaks ? &*options.peaks : nullptr));
}

DLPROF_END_NAMESPACE
