// dlprof/report/detail/limits.hpp: the report's "How far from the limit" section as the text and
// HTML renderers show it: the model FLOP utilization, each GPU's clock beside the clock its peaks
// are quoted at, the roofs, and the ops that lost the most time against them, with the figures
// that passed a roof told apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlprof/analysis/device_clock.hpp"
#include "dlprof/analysis/roofline.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/table_section.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline std::string percent_cell(std::optional<double> share) {
  return share ? fmt::format("{:.1f}%", 100 * *share) : std::string("-");
}

/// "BF16 TC": the precision of a row and the units it ran on.
inline std::string precision_cell(const analysis::RoofMeasure& row, analysis::MatrixUnits units) {
  if (!row.precision) return "-";
  const std::string_view unit = units == analysis::MatrixUnits::MatrixCores ? "MC" : "TC";
  return row.matrix_units ? fmt::format("{} {}", analysis::to_string(*row.precision), unit)
                          : std::string(analysis::to_string(*row.precision));
}

/// The row's share of its roof, or why it has none.
inline std::string efficiency_cell(const analysis::RoofMeasure& row) {
  if (!row.above_roof.empty()) return "above roof";
  if (row.cache_resident) return "in cache";
  return percent_cell(row.efficiency);
}

inline const analysis::DeviceClock* clock_of(const RankReport& rank, std::uint32_t device) {
  for (const analysis::DeviceClock& clock : rank.clocks)
    if (clock.device == device) return &clock;
  return nullptr;
}

/// A compute-bound row's efficiency at the clock its GPU ran, where NVML read the clock.
inline std::optional<double> efficiency_at_clock(const RankReport& rank, const analysis::RoofMeasure& row) {
  if (row.bound != analysis::RoofBound::Compute || !row.efficiency) return std::nullopt;
  const analysis::DeviceClock* clock = clock_of(rank, row.device);
  return clock == nullptr ? std::nullopt : clock->at_clock(*row.efficiency);
}

/// "59.5 % (588.8 TFLOP/s of BF16's 989.4 on Tensor Cores)".
inline std::string mfu_text(const analysis::ModelFlopsUtilization& mfu, analysis::MatrixUnits units) {
  std::string text = fmt::format("{:.1f}% ({:.1f} TFLOP/s of {}'s {} TFLOP/s {}{})", 100 * mfu.utilization(),
                                 mfu.achieved_tflops(), analysis::to_string(mfu.precision), mfu.peak_tflops,
                                 mfu.matrix_units ? "on " : "on the vector units",
                                 mfu.matrix_units ? analysis::to_string(units) : std::string_view());
  if (mfu.devices > 1) text += fmt::format(" on each of {} GPUs", mfu.devices);
  if (mfu.unknown_ops > 0)
    text += fmt::format("; {} op call{} that ran kernels {} no FLOP count", mfu.unknown_ops, mfu.unknown_ops == 1 ? "" : "s",
                        mfu.unknown_ops == 1 ? "has" : "have");
  return text;
}

/// "GPU 0: SM clock 1,559 MHz on average (1,515 to 1,605), 78.7 % of the 1,980 MHz its peaks are
/// quoted at; the power cap held the clock down in 100 % of the readings."
inline std::string clock_text(const analysis::DeviceClock& clock) {
  std::string text = fmt::format("GPU {}: SM clock {:.0f} MHz on average ({:.0f} to {:.0f}, {} readings)", clock.device,
                                 clock.mean_sm_mhz, clock.min_sm_mhz, clock.max_sm_mhz, clock.clock_readings);
  if (const std::optional<double> share = clock.clock_share())
    text += fmt::format(", {:.1f}% of the {:.0f} MHz its peaks are quoted at", 100 * *share, clock.boost_mhz);
  std::vector<std::string> limits;
  if (clock.power_limited && *clock.power_limited > 0)
    limits.push_back(fmt::format("the power cap in {:.0f}%", 100 * *clock.power_limited));
  if (clock.temperature_limited && *clock.temperature_limited > 0)
    limits.push_back(fmt::format("heat in {:.0f}%", 100 * *clock.temperature_limited));
  if (clock.otherwise_limited && *clock.otherwise_limited > 0)
    limits.push_back(fmt::format("another limit in {:.0f}%", 100 * *clock.otherwise_limited));
  if (!limits.empty()) text += fmt::format("; held down by {} of the readings", fmt::join(limits, ", "));
  if (clock.mean_power_watts) text += fmt::format("; {:.0f} W on average", *clock.mean_power_watts);
  return text;
}

inline TableSection limits_section(const RankReport& rank, std::size_t top_rows) {
  const analysis::MatrixUnits units = rank.steps.matrix_units;
  TableSection section;
  section.title = fmt::format("How far from the limit: each op's kernels against its GPU's roofs, by time lost ({} of {})",
                              std::min(top_rows, rank.roofline.rows.size()), rank.roofline.rows.size());
  if (rank.mfu) section.lines.push_back("Model FLOP utilization over the steps: " + mfu_text(*rank.mfu, units));
  for (const analysis::RoofDevice& device : rank.roofline.devices) {
    const std::string name = device.name.empty() ? fmt::format("GPU {}", device.device)
                                                 : fmt::format("GPU {} ({})", device.device, device.name);
    if (device.model.empty())
      section.lines.push_back(fmt::format("{}: no peaks are known for it, so its ops are not judged; give them with "
                                          "dlprof-report --peaks",
                                          name));
    else
      section.lines.push_back(fmt::format("{}: the roofs of the {}, dense; memory {} TB/s", name, device.model,
                                          device.memory_tb_per_s));
  }
  for (const analysis::DeviceClock& clock : rank.clocks)
    if (clock.clock_readings > 0) section.lines.push_back(clock_text(clock));
  section.headers = {"Op", "Input dims", "Type", "Calls", "Kernel time", "TFLOP/s", "TB/s", "FLOP/B",
                     "Bound", "Of peak", "At clock", "Of MAMF", "Time lost"};
  for (std::size_t i = 0; i < rank.roofline.rows.size() && i < top_rows; ++i) {
    const analysis::RooflineRow& row = rank.roofline.rows[i];
    const std::optional<double> intensity = row.intensity();
    section.rows.push_back({std::string(row.op), std::string(row.input_dims), precision_cell(row, units),
                            std::to_string(row.calls), KeyAverages::format_duration(row.kernel_ns),
                            row.flops ? fmt::format("{:.2f}", row.tflops()) : "-",
                            row.bytes ? fmt::format("{:.3f}", row.tb_per_s()) : "-",
                            intensity ? fmt::format("{:.1f}", *intensity) : "-", std::string(analysis::to_string(row.bound)),
                            efficiency_cell(row), percent_cell(efficiency_at_clock(rank, row)), percent_cell(row.mamf_share),
                            row.efficiency ? KeyAverages::format_duration(row.time_lost_ns) : "-"});
    if (row.cache_resident)
      section.notes.push_back(fmt::format("{} {}: {:.2f} TB/s, above the memory bandwidth, from {} a call that fits "
                                          "in the GPU's last-level cache: the cache served it",
                                          row.op, row.input_dims, row.tb_per_s(),
                                          KeyAverages::format_bytes(static_cast<std::int64_t>(*row.bytes / static_cast<std::uint64_t>(row.calls)))));
  }
  // Every figure past a roof, shown or not: each is a fault of the count, not of the kernel.
  for (const analysis::RooflineRow& row : rank.roofline.rows)
    if (!row.above_roof.empty())
      section.notes.push_back(fmt::format("{} {}: {}: a counting error (the dtype, the FLOP formula, the units, "
                                          "sparsity, or an input's strides not recorded), not an efficiency",
                                          row.op, row.input_dims, row.above_roof));
  return section;
}

}  // namespace detail
DLPROF_END_NAMESPACE
