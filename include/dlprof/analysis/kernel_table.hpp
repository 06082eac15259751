// dlprof/analysis/kernel_table.hpp: PyProf's kernel table with the roofline beside it. Every
// kernel of a trace (kernel_attribution.hpp ties each to its layer, op and direction) aggregated
// by kernel name, layer, op, the line of the user's code (with call stacks), direction, input
// shapes and types, grid and block: its calls, silicon time, Tensor Cores, FLOPs and bytes (its
// share of its op's), and what roofline.hpp judges of them: arithmetic intensity, achieved FLOP/s
// and bytes/s, the bound, the share of the peak and the time lost. The rows are ranked by time lost, then time, so the first is where to work.
//
// Copies and fills are no kernels and are left out; a kernel no op launched has a row of its own
// (its op empty), with no FLOPs.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dlprof/analysis/kernel_attribution.hpp"
#include "dlprof/analysis/roofline.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// The calls of one kernel for one layer, op and shape.
struct KernelTableRow : RoofMeasure {
  std::string_view kernel;
  std::string_view layer;
  std::string_view op;
  std::string_view line;  ///< the line of the user's code the op came from (AttributedKernel::line)
  Direction direction = Direction::Forward;
  std::string_view input_dims;
  std::string_view input_types;
  std::array<std::uint32_t, 3> grid{};
  std::array<std::uint32_t, 3> block{};
};

struct KernelTable {
  std::vector<KernelTableRow> rows;  ///< by time lost, then kernel time
  std::int64_t kernel_ns = 0;        ///< every kernel's time
  /// Kernel time on devices whose peaks are not known (the report says so).
  std::int64_t unknown_device_ns = 0;
  /// What the rows' lines view where the trace does not hold them (KernelAttribution::line_texts).
  std::shared_ptr<const std::deque<std::string>> line_texts;

  bool has_lines() const noexcept {
    return std::any_of(rows.begin(), rows.end(), [](const KernelTableRow& row) { return !row.line.empty(); });
  }
};

/// The kernel table of `trace` from its kernels' attribution; `peaks` as roofline()'s.
inline KernelTable kernel_table(const Trace& trace, const KernelAttribution& attribution,
                                const DevicePeaks* peaks = nullptr) {
  const auto three = [](const std::uint32_t (&sizes)[3]) { return std::array<std::uint32_t, 3>{sizes[0], sizes[1], sizes[2]}; };
  using Key = std::tuple<std::string_view, std::string_view, std::string_view, std::string_view, Direction, std::string_view,
                         std::string_view, std::array<std::uint32_t, 3>, std::array<std::uint32_t, 3>, std::uint32_t>;
  std::map<Key, KernelTableRow> rows;
  KernelTable table;
  table.line_texts = attribution.line_texts;
  for (const AttributedKernel& kernel : attribution.kernels) {
    const GpuEvent& work = *kernel.work;
    if (work.kind != GpuEventKind::Kernel) continue;
    KernelTableRow& row = rows[Key{kernel.name, kernel.layer, kernel.op, kernel.line, kernel.direction, kernel.input_dims,
                                   kernel.input_types, three(work.kernel.grid), three(work.kernel.block), work.device}];
    if (row.calls == 0) {
      row.kernel = kernel.name;
      row.layer = kernel.layer;
      row.op = kernel.op;
      row.line = kernel.line;
      row.direction = kernel.direction;
      row.input_dims = kernel.input_dims;
      row.input_types = kernel.input_types;
      row.grid = three(work.kernel.grid);
      row.block = three(work.kernel.block);
      row.device = work.device;
      row.matrix_units = kernel.tensor_cores;
      row.reduced_fp32 = detail::names_reduced_fp32(kernel.name);
      row.precision = precision_of(first_tensor_type(kernel.input_types), kernel.tensor_cores);
    }
    row.add_cost(kernel.flops, kernel.bytes, row.calls == 0);
    ++row.calls;
    ++row.kernels;
    row.kernel_ns += kernel.duration_ns;
    table.kernel_ns += kernel.duration_ns;
  }
  table.rows.reserve(rows.size());
  for (auto& [key, row] : rows) {
    if (!detail::judge_on(trace, row, peaks)) table.unknown_device_ns += row.kernel_ns;
    table.rows.push_back(std::move(row));
  }
  std::stable_sort(table.rows.begin(), table.rows.end(), [](const KernelTableRow& a, const KernelTableRow& b) {
    return std::tie(a.time_lost_ns, a.kernel_ns) > std::tie(b.time_lost_ns, b.kernel_ns);
  });
  return table;
}

/// The kernel table of `trace`; `peaks` as roofline()'s.
inline KernelTable kernel_table(const Trace& trace, const DevicePeaks* peaks = nullptr) {
  return kernel_table(trace, kernel_attribution(trace), peaks);
}

}  // namespace analysis
DLPROF_END_NAMESPACE
