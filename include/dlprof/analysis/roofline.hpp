// dlprof/analysis/roofline.hpp: how far each op's kernels ran from the GPU's limit.
//
// For every op that launched kernels, its FLOPs and bytes (the trace's with_flops figures, else
// flops.hpp's estimate from the recorded shapes) over its kernels' silicon time give the FLOP/s
// and bytes/s it achieved. The roofs are device_peaks.hpp's: the dense peak of the op's precision
// on the units its kernels ran on (Tensor Cores when any of its kernels did, the vector units
// otherwise), and the memory bandwidth. The op is compute-bound when its arithmetic intensity
// (FLOPs per byte) is above the ridge point (peak / bandwidth), memory-bound below it. Its
// efficiency is what it achieved over the roof that bounds it, and the time it lost is its kernel
// time × (1 − efficiency): the rows are ranked by that, so the first is where to work.
//
// A figure above its roof is a counting error (a wrong dtype, FLOP formula or unit, sparsity):
// the row says which roof it passed instead of giving an efficiency over 100 %.
//
// Ops of one name, input shapes, input types and units are one row. An op's cost counts once,
// however many kernels it launched; a kernel counts for the op that launched it (its External
// id), the innermost one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/device_peaks.hpp"
#include "dlprof/analysis/tensor_cores.hpp"
#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/flops.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

enum class RoofBound : std::uint8_t { Compute, Memory, Unknown };

constexpr std::string_view to_string(RoofBound bound) noexcept {
  return bound == RoofBound::Compute ? "compute" : bound == RoofBound::Memory ? "memory" : "unknown";
}

constexpr std::string_view to_string(Precision precision) noexcept {
  constexpr std::string_view kNames[] = {"FP64", "FP32", "TF32", "BF16", "FP16", "FP8", "INT8"};
  return kNames[static_cast<std::size_t>(precision)];
}

/// The precision of an op's math, from the first tensor type torch.profiler recorded for it
/// ("c10::BFloat16"); FP32 on NVIDIA's Tensor Cores is TF32 (roofline() keeps FP32 on AMD's
/// matrix cores, which have an FP32 rate of their own, unless the kernel names xf32). Nothing for
/// types with no FLOP roof (integers but int8, bool, complex).
inline std::optional<Precision> precision_of(std::string_view dtype, bool matrix_units) noexcept {
  if (dtype == "c10::BFloat16") return Precision::BF16;
  if (dtype == "c10::Half") return Precision::FP16;
  if (dtype == "float") return matrix_units ? Precision::TF32 : Precision::FP32;
  if (dtype == "double") return Precision::FP64;
  if (dtype.rfind("c10::Float8_", 0) == 0) return Precision::FP8;
  if (dtype == "signed char" || dtype == "c10::qint8" || dtype == "c10::quint8") return Precision::INT8;
  return std::nullopt;
}

/// The first tensor type of torch.profiler's input-types text (["c10::BFloat16", "Scalar"]).
inline std::string_view first_tensor_type(std::string_view types) noexcept {
  std::size_t at = 0;
  while ((at = types.find('"', at)) != std::string_view::npos) {
    const std::size_t end = types.find('"', at + 1);
    if (end == std::string_view::npos) break;
    const std::string_view type = types.substr(at + 1, end - at - 1);
    if (dlprof::detail::flops::is_tensor_type(type)) return type;
    at = end + 1;
  }
  return {};
}

/// One row: the ops of one name, input shapes, input types and units.
struct RooflineRow {
  std::string_view op;
  std::string_view input_dims;
  std::string_view input_types;
  std::optional<Precision> precision;
  bool matrix_units = false;  ///< some of its kernels ran on Tensor Cores (matrix cores)
  bool reduced_fp32 = false;  ///< a kernel's name says TF32 (or AMD's xf32)
  std::uint32_t device = 0;
  std::int64_t calls = 0;
  std::int64_t kernels = 0;
  std::int64_t kernel_ns = 0;  ///< silicon time of its kernels
  std::optional<std::uint64_t> flops;  ///< nothing: no formula for the op (unknown, not 0)
  std::optional<std::uint64_t> bytes;
  double peak_tflops = 0;   ///< the FLOP roof of its precision and units; 0: none known
  double memory_tb_per_s = 0;  ///< the memory roof; 0: the device is not known
  RoofBound bound = RoofBound::Unknown;
  /// Achieved over the roof that bounds it, in [0, 1]; nothing when a roof is not known or the
  /// row passed one (above_roof).
  std::optional<double> efficiency;
  std::optional<double> mamf_share;  ///< BF16 on Tensor Cores: achieved over the measured achievable peak
  std::int64_t time_lost_ns = 0;     ///< kernel_ns × (1 − efficiency); 0 without an efficiency
  std::string above_roof;            ///< which roof a figure passed ("FLOP/s above BF16's 989.4 TFLOP/s"); empty if none

  double tflops() const noexcept {
    return flops && kernel_ns > 0 ? static_cast<double>(*flops) / static_cast<double>(kernel_ns) / 1e3 : 0.0;
  }
  double tb_per_s() const noexcept {
    return bytes && kernel_ns > 0 ? static_cast<double>(*bytes) / static_cast<double>(kernel_ns) / 1e3 : 0.0;
  }
  /// FLOPs per byte; nothing without both.
  std::optional<double> intensity() const noexcept {
    if (!flops || !bytes || *bytes == 0) return std::nullopt;
    return static_cast<double>(*flops) / static_cast<double>(*bytes);
  }
};

struct Roofline {
  std::vector<RooflineRow> rows;  ///< by time lost, then kernel time
  /// Kernel time of ops whose device dlprof does not know the peaks of (the report says so).
  std::int64_t unknown_device_ns = 0;
};

namespace detail {

/// The cost of one op: the trace's figures (with_flops), else flops.hpp's estimate from its
/// shapes; nothing where neither is known.
inline std::pair<std::optional<std::uint64_t>, std::optional<std::uint64_t>> cost_of(const Trace& trace,
                                                                                     const OpInputs& inputs) {
  std::optional<OpCost> estimate;
  if (inputs.flops == 0 || inputs.bytes == 0)
    estimate = estimate_op_cost(trace.names[inputs.op], trace.names[inputs.dims], trace.names[inputs.types],
                                trace.names[inputs.concrete]);
  std::optional<std::uint64_t> flops, bytes;
  if (inputs.flops != 0) flops = inputs.flops;
  else if (estimate) flops = estimate->flops;
  if (inputs.bytes != 0) bytes = inputs.bytes;
  else if (estimate && estimate->bytes != 0) bytes = estimate->bytes;
  return {flops, bytes};
}

/// Fills a row's roofs, bound, efficiency and time lost from its totals.
inline void judge(RooflineRow& row, const DevicePeaks& peaks) {
  row.memory_tb_per_s = peaks.memory_tb_per_s;
  if (row.precision == Precision::TF32 && peaks.matrix_peak(Precision::FP32) > 0 && !row.reduced_fp32)
    row.precision = Precision::FP32;
  if (row.precision)
    row.peak_tflops = row.matrix_units ? peaks.matrix_peak(*row.precision) : peaks.vector_peak(*row.precision);
  if (row.kernel_ns <= 0) return;
  const double tflops = row.tflops();
  const double tb_per_s = row.tb_per_s();
  if (row.peak_tflops > 0 && tflops > row.peak_tflops)
    row.above_roof = fmt::format("{:.1f} TFLOP/s is above {}'s {} of {} TFLOP/s", tflops, to_string(*row.precision),
                                 row.matrix_units ? "matrix peak" : "vector peak", row.peak_tflops);
  else if (tb_per_s > peaks.memory_tb_per_s)
    row.above_roof = fmt::format("{:.2f} TB/s is above the memory bandwidth of {} TB/s", tb_per_s, peaks.memory_tb_per_s);
  // Where the datasheet gives no peak for the row's precision on the vector units (BF16 on an
  // H200's CUDA cores), the FP32 one places the ridge: those units run 16-bit math at least as
  // fast, so an op below that ridge is memory-bound all the more.
  const double ridge_tflops =
      row.peak_tflops > 0 ? row.peak_tflops : (row.matrix_units ? 0 : peaks.vector_peak(Precision::FP32));
  const std::optional<double> intensity = row.intensity();
  if (intensity && ridge_tflops > 0 && *intensity < ridge_tflops / peaks.memory_tb_per_s)
    row.bound = RoofBound::Memory;
  else if (intensity && row.peak_tflops > 0)
    row.bound = RoofBound::Compute;
  else if (row.bytes && (!row.flops || *row.flops == 0))
    row.bound = RoofBound::Memory;  // moves data only: copies, casts, gathers
  if (!row.above_roof.empty()) return;
  if (row.bound == RoofBound::Compute) row.efficiency = tflops / row.peak_tflops;
  if (row.bound == RoofBound::Memory) row.efficiency = tb_per_s / peaks.memory_tb_per_s;
  if (row.efficiency)
    row.time_lost_ns = static_cast<std::int64_t>(static_cast<double>(row.kernel_ns) * (1 - *row.efficiency));
  if (row.matrix_units && row.precision == Precision::BF16 && peaks.mamf_bf16 > 0)
    row.mamf_share = tflops / peaks.mamf_bf16;
}

}  // namespace detail

/// The roofline of every op of `trace` that launched kernels. `peaks` stands for every device's
/// (a user's figures for a GPU dlprof does not know); null: each device's own from the table.
inline Roofline roofline(const Trace& trace, const DevicePeaks* peaks = nullptr) {
  // Kernels by the External id of the op that launched them.
  std::unordered_map<std::uint64_t, std::vector<const GpuEvent*>> kernels_of;
  for (const GpuEvent& work : trace.gpu_events)
    if (work.kind == GpuEventKind::Kernel && work.external_id != 0) kernels_of[work.external_id].push_back(&work);

  using Key = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, bool, std::uint32_t>;  // op, dims, types, units, device
  std::map<Key, RooflineRow> rows;
  Roofline result;
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::Op || event.inputs == TraceEvent::kNoInputs || event.external_id == 0) continue;
    const auto found = kernels_of.find(event.external_id);
    if (found == kernels_of.end()) continue;
    const OpInputs& inputs = trace.op_inputs[event.inputs];
    bool matrix_units = false;
    bool reduced_fp32 = false;  // a kernel names TF32 or AMD's xf32
    std::int64_t kernel_ns = 0;
    for (const GpuEvent* kernel : found->second) {
      const std::string_view name = trace.names[kernel->name];
      matrix_units = matrix_units || uses_tensor_cores(name);
      reduced_fp32 = reduced_fp32 || name.find("tf32") != std::string_view::npos || name.find("xf32") != std::string_view::npos;
      kernel_ns += kernel->duration_ns();
    }
    const std::uint32_t device = found->second.front()->device;
    RooflineRow& row = rows[Key{event.name, inputs.dims, inputs.types, matrix_units, device}];
    if (row.calls == 0) {
      row.op = trace.names[event.name];
      row.input_dims = trace.names[inputs.dims];
      row.input_types = trace.names[inputs.types];
      row.matrix_units = matrix_units;
      row.device = device;
      row.precision = precision_of(first_tensor_type(row.input_types), matrix_units);
      row.reduced_fp32 = reduced_fp32;
    }
    const auto [flops, bytes] = detail::cost_of(trace, inputs);
    if (row.calls == 0 || row.flops) row.flops = flops ? std::optional<std::uint64_t>(row.flops.value_or(0) + *flops) : std::nullopt;
    if (row.calls == 0 || row.bytes) row.bytes = bytes ? std::optional<std::uint64_t>(row.bytes.value_or(0) + *bytes) : std::nullopt;
    ++row.calls;
    row.kernels += static_cast<std::int64_t>(found->second.size());
    row.kernel_ns += kernel_ns;
  }
  for (auto& [key, row] : rows) {
    const DevicePeaks* device_peaks = peaks;
    if (device_peaks == nullptr) {
      const DevicePropertiesOf properties = device_properties_of(trace.devices, static_cast<int>(row.device));
      if (properties) device_peaks = find_device_peaks(*properties.properties);
    }
    if (device_peaks != nullptr)
      detail::judge(row, *device_peaks);
    else
      result.unknown_device_ns += row.kernel_ns;
    result.rows.push_back(std::move(row));
  }
  std::stable_sort(result.rows.begin(), result.rows.end(), [](const RooflineRow& a, const RooflineRow& b) {
    return std::tie(a.time_lost_ns, a.kernel_ns) > std::tie(b.time_lost_ns, b.kernel_ns);
  });
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
