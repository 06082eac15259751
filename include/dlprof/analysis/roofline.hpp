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
// the row says which roof it passed instead of giving an efficiency over 100 %. The one exception
// is bytes/s above the memory bandwidth from an op whose data a call moves fits in the
// last-level cache: the cache served it (cache_resident), and the row has no efficiency.
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

#include "dlprof/analysis/detail/op_costs.hpp"
#include "dlprof/analysis/detail/per_name.hpp"
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

/// What a group of GPU work (an op's kernels, a kernel's calls) achieved against its roofs.
struct RoofMeasure {
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
  /// Bytes/s above the memory roof from data a call moves that fits in the last-level cache: the
  /// cache served it, whose bandwidth is no roof here. No counting error, and no efficiency.
  bool cache_resident = false;

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
  /// Adds a cost to the group's: a figure stays known while every part's is.
  void add_cost(const std::optional<std::uint64_t>& more_flops, const std::optional<std::uint64_t>& more_bytes,
                bool first) noexcept {
    if (first || flops) flops = more_flops ? std::optional<std::uint64_t>(flops.value_or(0) + *more_flops) : std::nullopt;
    if (first || bytes) bytes = more_bytes ? std::optional<std::uint64_t>(bytes.value_or(0) + *more_bytes) : std::nullopt;
  }
};

/// One row: the ops of one name, input shapes, input types and units.
struct RooflineRow : RoofMeasure {
  std::string_view op;
  std::string_view input_dims;
  std::string_view input_types;
};

/// A device the rows ran on and the roofs they were judged against.
struct RoofDevice {
  std::uint32_t device = 0;
  std::string_view name;   ///< the trace's name of it; empty where the trace has none
  std::string_view model;  ///< device_peaks.hpp's row (or "the peaks given"); empty: none known
  double memory_tb_per_s = 0;
};

struct Roofline {
  std::vector<RooflineRow> rows;  ///< by time lost, then kernel time
  std::vector<RoofDevice> devices;  ///< by device
  /// Kernel time of ops whose device dlprof does not know the peaks of (the report says so).
  std::int64_t unknown_device_ns = 0;
};

namespace detail {

/// Fills a measure's roofs, bound, efficiency and time lost from its totals.
inline void judge(RoofMeasure& row, const DevicePeaks& peaks) {
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
  else if (tb_per_s > peaks.memory_tb_per_s && row.bytes && row.calls > 0 &&
           static_cast<double>(*row.bytes) / static_cast<double>(row.calls) <= peaks.cache_mb * 1e6)
    row.cache_resident = true;
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
  if (!row.above_roof.empty() || row.cache_resident) return;
  if (row.bound == RoofBound::Compute) row.efficiency = tflops / row.peak_tflops;
  if (row.bound == RoofBound::Memory) row.efficiency = tb_per_s / peaks.memory_tb_per_s;
  if (row.efficiency)
    row.time_lost_ns = static_cast<std::int64_t>(static_cast<double>(row.kernel_ns) * (1 - *row.efficiency));
  if (row.matrix_units && row.precision == Precision::BF16 && peaks.mamf_bf16 > 0)
    row.mamf_share = tflops / peaks.mamf_bf16;
}

/// The roofs of `device`: `peaks` where given, else its own from the table; null when not known.
inline const DevicePeaks* peaks_of(const Trace& trace, std::uint32_t device, const DevicePeaks* peaks) noexcept {
  if (peaks != nullptr) return peaks;
  const DevicePropertiesOf properties = device_properties_of(trace.devices, static_cast<int>(device));
  return properties ? find_device_peaks(*properties.properties) : nullptr;
}

/// Judges `row` against `peaks`, or its device's own; false when its device is not known.
inline bool judge_on(const Trace& trace, RoofMeasure& row, const DevicePeaks* peaks) {
  peaks = peaks_of(trace, row.device, peaks);
  if (peaks == nullptr) return false;
  judge(row, *peaks);
  return true;
}

/// What `roofline.devices` says of `device`.
inline RoofDevice roof_device(const Trace& trace, std::uint32_t device, const DevicePeaks* peaks) {
  RoofDevice result;
  result.device = device;
  if (const DevicePropertiesOf properties = device_properties_of(trace.devices, static_cast<int>(device)))
    result.name = properties.properties->name;
  if (const DevicePeaks* found = peaks_of(trace, device, peaks)) {
    result.model = found->model;
    result.memory_tb_per_s = found->memory_tb_per_s;
  }
  return result;
}

/// Whether a kernel's name says it computes FP32 on reduced-precision units (TF32, AMD's xf32).
inline bool names_reduced_fp32(std::string_view kernel) noexcept {
  return kernel.find("tf32") != std::string_view::npos || kernel.find("xf32") != std::string_view::npos;
}

/// The kernels one op launched, summed.
struct OpKernels {
  std::int64_t count = 0;
  std::int64_t kernel_ns = 0;
  std::uint32_t device = 0;   ///< the first kernel's
  bool matrix_units = false;  ///< any ran on Tensor Cores (matrix cores)
  bool reduced_fp32 = false;  ///< any names TF32 or xf32
};

/// Calls `visit(op, kernels)` for every op with recorded inputs that launched kernels (those
/// carrying its External id), in trace order.
template <class Visit>
void for_each_op_with_kernels(const Trace& trace, Visit&& visit) {
  // Only the kernels of ops with inputs are summed, each name classified once: a trace without
  // record_shapes costs a scan of its events.
  std::unordered_map<std::uint64_t, OpKernels> kernels_of;
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Op && event.inputs != TraceEvent::kNoInputs && event.external_id != 0)
      kernels_of.emplace(event.external_id, OpKernels{});
  if (kernels_of.empty()) return;
  PerName<bool> matrix_units(trace, uses_tensor_cores);
  PerName<bool> reduced_fp32(trace, names_reduced_fp32);
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel || work.external_id == 0) continue;
    const auto found = kernels_of.find(work.external_id);
    if (found == kernels_of.end()) continue;
    OpKernels& kernels = found->second;
    if (kernels.count++ == 0) kernels.device = work.device;
    kernels.kernel_ns += work.duration_ns();
    kernels.matrix_units = kernels.matrix_units || matrix_units(work.name);
    kernels.reduced_fp32 = kernels.reduced_fp32 || reduced_fp32(work.name);
  }
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::Op || event.inputs == TraceEvent::kNoInputs || event.external_id == 0) continue;
    const auto found = kernels_of.find(event.external_id);
    if (found != kernels_of.end() && found->second.count > 0) visit(event, found->second);
  }
}

}  // namespace detail

/// The roofline of every op of `trace` that launched kernels. `peaks` stands for every device's
/// (a user's figures for a GPU dlprof does not know); null: each device's own from the table.
inline Roofline roofline(const Trace& trace, const DevicePeaks* peaks = nullptr) {
  using Key = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, bool, std::uint32_t>;  // op, dims, types, units, device
  std::map<Key, RooflineRow> rows;
  const detail::OpCosts costs(trace);
  Roofline result;
  detail::for_each_op_with_kernels(trace, [&](const TraceEvent& event, const detail::OpKernels& kernels) {
    const OpInputs& inputs = trace.op_inputs[event.inputs];
    RooflineRow& row = rows[Key{event.name, inputs.dims, inputs.types, kernels.matrix_units, kernels.device}];
    if (row.calls == 0) {
      row.op = trace.names[event.name];
      row.input_dims = trace.names[inputs.dims];
      row.input_types = trace.names[inputs.types];
      row.matrix_units = kernels.matrix_units;
      row.device = kernels.device;
      row.precision = precision_of(first_tensor_type(row.input_types), kernels.matrix_units);
      row.reduced_fp32 = kernels.reduced_fp32;
    }
    const detail::KnownCost& cost = costs.of(event);
    row.add_cost(cost.flops, cost.bytes, row.calls == 0);
    ++row.calls;
    row.kernels += kernels.count;
    row.kernel_ns += kernels.kernel_ns;
  });
  for (auto& [key, row] : rows) {
    if (!detail::judge_on(trace, row, peaks)) result.unknown_device_ns += row.kernel_ns;
    if (result.devices.empty() || result.devices.back().device != row.device) {
      const bool listed = std::any_of(result.devices.begin(), result.devices.end(),
                                      [&](const RoofDevice& device) { return device.device == row.device; });
      if (!listed) result.devices.push_back(detail::roof_device(trace, row.device, peaks));
    }
    result.rows.push_back(std::move(row));
  }
  std::sort(result.devices.begin(), result.devices.end(),
            [](const RoofDevice& a, const RoofDevice& b) { return a.device < b.device; });
  std::stable_sort(result.rows.begin(), result.rows.end(), [](const RooflineRow& a, const RooflineRow& b) {
    return std::tie(a.time_lost_ns, a.kernel_ns) > std::tie(b.time_lost_ns, b.kernel_ns);
  });
  return result;
}

/// Model FLOP utilization: the FLOPs the ops of a span of time (the steps) ran on the GPU over the
/// span's wall time, against the peak of the precision and units that carried most of them, times
/// the devices that ran them.
struct ModelFlopsUtilization {
  std::uint64_t flops = 0;        ///< of the ops whose FLOPs are known
  std::uint64_t unknown_ops = 0;  ///< ops that ran kernels in the span with no FLOP count
  std::int64_t span_ns = 0;
  Precision precision = Precision::BF16;
  bool matrix_units = true;
  double peak_tflops = 0;         ///< one device's
  std::size_t devices = 0;

  double achieved_tflops() const noexcept {
    return span_ns > 0 ? static_cast<double>(flops) / static_cast<double>(span_ns) / 1e3 : 0.0;
  }
  /// Achieved over the peak of every device; may pass 1 only through a counting error.
  double utilization() const noexcept {
    return peak_tflops > 0 && devices > 0 ? achieved_tflops() / (peak_tflops * static_cast<double>(devices)) : 0.0;
  }
};

/// The MFU of the ops that start in [begin_ns, end_ns); nothing when none of them has a FLOP count
/// or no peak is known for their device and precision. `peaks` as roofline()'s.
inline std::optional<ModelFlopsUtilization> model_flops_utilization(const Trace& trace, std::int64_t begin_ns,
                                                                    std::int64_t end_ns,
                                                                    const DevicePeaks* peaks = nullptr) {
  if (end_ns <= begin_ns) return std::nullopt;
  const detail::OpCosts costs(trace);
  ModelFlopsUtilization result;
  result.span_ns = end_ns - begin_ns;
  std::map<std::pair<Precision, bool>, std::uint64_t> flops_by_kind;
  std::map<std::uint32_t, bool> devices;
  std::uint32_t first_device = 0;
  detail::for_each_op_with_kernels(trace, [&](const TraceEvent& event, const detail::OpKernels& kernels) {
    if (event.start_ns < begin_ns || event.start_ns >= end_ns) return;
    const detail::KnownCost& cost = costs.of(event);
    if (!cost.flops) {
      ++result.unknown_ops;
      return;
    }
    if (devices.empty()) first_device = kernels.device;
    devices[kernels.device] = true;
    result.flops += *cost.flops;
    const OpInputs& inputs = trace.op_inputs[event.inputs];
    if (const auto precision = precision_of(first_tensor_type(trace.names[inputs.types]), kernels.matrix_units))
      flops_by_kind[{*precision, kernels.matrix_units}] += *cost.flops;
  });
  if (result.flops == 0 || flops_by_kind.empty()) return std::nullopt;
  const auto most = std::max_element(flops_by_kind.begin(), flops_by_kind.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  RoofMeasure probe;
  probe.precision = most->first.first;
  probe.matrix_units = most->first.second;
  probe.device = first_device;
  if (!detail::judge_on(trace, probe, peaks) || probe.peak_tflops <= 0) return std::nullopt;
  result.precision = *probe.precision;
  result.matrix_units = probe.matrix_units;
  result.peak_tflops = probe.peak_tflops;
  result.devices = devices.size();
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE

