// dlprof/report/detail/memory_by_op_section.hpp: the report's "Memory by op" sections as the text
// and HTML renderers show them, one per device: TensorBoard's Memory view table, the ops that
// allocated the most bytes themselves, with their allocation counts and size increase, self and
// total.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/memory_by_op.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/table_section.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline std::vector<TableSection> memory_by_op_sections(const RankReport& rank, std::size_t rows) {
  std::vector<TableSection> sections;
  for (const analysis::DeviceOpMemory& device : rank.memory_by_op) {
    TableSection& section = sections.emplace_back();
    section.title = fmt::format("Memory by op on {} ({} op{} allocated or released memory; TensorBoard's memory view)",
                                device_label(device.device_type, device.device), device.ops.size(), device.ops.size() == 1 ? "" : "s");
    section.headers = {"Op", "Calls", "Self allocs", "Allocs", "Self bytes", "Bytes", "Self increase", "Increase"};
    for (std::size_t i = 0; i < device.ops.size() && i < rows; ++i) {
      const analysis::OpMemory& op = device.ops[i];
      section.rows.push_back({op.name, std::to_string(op.calls), std::to_string(op.self_allocations), std::to_string(op.allocations),
                              KeyAverages::format_bytes(op.self_allocated_bytes), KeyAverages::format_bytes(op.allocated_bytes),
                              KeyAverages::format_bytes(op.self_size_increase), KeyAverages::format_bytes(op.size_increase)});
    }
    if (device.ops.size() > rows) section.notes.push_back(fmt::format("{} more ops", device.ops.size() - rows));
    section.notes.push_back("An allocation is its thread's innermost op's own (self) and counts in every op around that one; "
                            "bytes are those allocated, the increase those allocated less those released");
    if (device.outside_ops != 0)
      section.notes.push_back(fmt::format("{} allocations and releases were made outside every op (in a range or a Python frame, or outside "
                                          "every slice): in no row",
                                          device.outside_ops));
  }
  return sections;
}

}  // namespace detail
DLPROF_END_NAMESPACE
