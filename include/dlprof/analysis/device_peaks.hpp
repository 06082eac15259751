// dlprof/analysis/device_peaks.hpp: what each GPU can do at most, from its maker's datasheet: the
// roofline's roofs.
//
// Every figure is dense. Datasheets also print 2:4-sparse figures, twice as large, marked with an
// asterisk or "with sparsity"; taken for dense peaks they halve every efficiency. A figure the
// source does not give is 0, and the report then says it has no roof for that unit and precision.
// FLOP/s are at the boost clock the datasheet quotes (boost_mhz): a GPU held below it (the power
// cap, heat) has a lower roof, which NVML's readings give (DeviceCounterKind::SmClockMhz).
//
// AMD's MI250X and MI250 are two dies (GCDs) on one module, and ROCm shows each die as a device:
// their rows are per die, half the module's datasheet figures.
//
// The last-level cache (NVIDIA's L2, AMD's L2 or Infinity Cache) is from the architecture
// whitepapers and product pages: an op whose data fits in it may move bytes faster than DRAM
// does, which is no counting error.
//
// MAMF is the "maximum achievable matmul FLOPS" measured by the ml-engineering benchmark
// (github.com/stas00/ml-engineering, compute/accelerator/README.md): the BF16 matmul rate a
// tuned GEMM reaches in practice, where one is published.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// The precisions a roof is given for.
enum class Precision : std::uint8_t { FP64, FP32, TF32, BF16, FP16, FP8, INT8 };
inline constexpr std::size_t kPrecisionCount = 7;

/// The roofs of one GPU model. TFLOP/s (TOPS for INT8), dense; 0: not in the source.
struct DevicePeaks {
  std::string_view model;  ///< "NVIDIA H100 SXM5"
  /// On the matrix units (Tensor Cores, AMD's matrix cores), by Precision.
  double matrix[kPrecisionCount];
  /// On the vector units (CUDA cores, AMD's stream processors), by Precision.
  double vector[kPrecisionCount];
  double memory_tb_per_s;  ///< DRAM (HBM, GDDR) bandwidth
  double mamf_bf16;        ///< measured achievable BF16 matmul TFLOP/s; 0: none published
  double boost_mhz;        ///< the clock the FLOP/s are quoted at; 0: not given
  double cache_mb;         ///< the last-level cache on the die(s), MB; 0: not given
  std::string_view source;

  double matrix_peak(Precision precision) const noexcept { return matrix[static_cast<std::size_t>(precision)]; }
  double vector_peak(Precision precision) const noexcept { return vector[static_cast<std::size_t>(precision)]; }
};

namespace detail {

//                                     FP64   FP32   TF32    BF16    FP16     FP8    INT8
inline constexpr DevicePeaks kDevicePeaks[] = {
    {"NVIDIA Tesla V100 SXM2",        {0,     0,     0,      0,      125,     0,     0},
                                      {7.8,   15.7,  0,      0,      31.4,    0,     0},
     0.9, 0, 1530, 6, "NVIDIA Tesla V100 datasheet (V100 SXM2)"},
    {"NVIDIA Tesla V100 PCIe",        {0,     0,     0,      0,      112,     0,     0},
                                      {7,     14,    0,      0,      28,      0,     0},
     0.9, 0, 1380, 6, "NVIDIA Tesla V100 datasheet (V100 PCIe)"},
    {"NVIDIA T4",                     {0,     0,     0,      0,      65,      0,     130},
                                      {0,     8.1,   0,      0,      0,       0,     0},
     0.32, 0, 1590, 4, "NVIDIA T4 datasheet"},
    {"NVIDIA A100 SXM4 40GB",         {19.5,  0,     156,    312,    312,     0,     624},
                                      {9.7,   19.5,  0,      39,     78,      0,     0},
     1.555, 0, 1410, 40, "NVIDIA A100 datasheet; non-Tensor FP16/BF16 from the NVIDIA A100 architecture whitepaper"},
    {"NVIDIA A100 SXM4 80GB",         {19.5,  0,     156,    312,    312,     0,     624},
                                      {9.7,   19.5,  0,      39,     78,      0,     0},
     2.039, 0, 1410, 40, "NVIDIA A100 datasheet; non-Tensor FP16/BF16 from the NVIDIA A100 architecture whitepaper"},
    {"NVIDIA A100 PCIe 80GB",         {19.5,  0,     156,    312,    312,     0,     624},
                                      {9.7,   19.5,  0,      39,     78,      0,     0},
     1.935, 0, 1410, 40, "NVIDIA A100 datasheet"},
    {"NVIDIA L4",                     {0,     0,     60,     121,    121,     242.5, 242.5},
                                      {0,     30.3,  0,      0,      0,       0,     0},
     0.3, 0, 2040, 48, "NVIDIA L4 datasheet (dense: half the starred sparse figures)"},
    {"NVIDIA H100 SXM5",              {67,    0,     494.7,  989.4,  989.4,   1978.9, 1978.9},
                                      {34,    67,    0,      133.8,  133.8,   0,     0},
     3.35, 794.5, 1980, 50, "NVIDIA H100 datasheet (H100 SXM); non-Tensor FP16/BF16 from the NVIDIA H100 architecture whitepaper"},
    {"NVIDIA H100 PCIe",              {51,    0,     378,    756,    756,     1513,  1513},
                                      {26,    51,    0,      102.4,  102.4,   0,     0},
     2.0, 0, 1755, 50, "NVIDIA H100 datasheet (H100 PCIe); non-Tensor FP16/BF16 from the NVIDIA H100 architecture whitepaper"},
    {"NVIDIA H200 SXM",               {67,    0,     494.7,  989.4,  989.4,   1978.9, 1978.9},
                                      {34,    67,    0,      0,      0,       0,     0},
     4.8, 0, 1980, 50, "NVIDIA H200 datasheet (H200 SXM)"},
    {"NVIDIA H200 NVL",               {60,    0,     417.5,  835.5,  835.5,   1670.5, 1670.5},
                                      {30,    60,    0,      0,      0,       0,     0},
     4.8, 0, 0, 50, "NVIDIA H200 datasheet (H200 NVL)"},
    {"NVIDIA GH200 (96 GB HBM3)",     {67,    0,     494.7,  989.4,  989.4,   1978.9, 1978.9},
                                      {34,    67,    0,      0,      0,       0,     0},
     4.0, 0, 1980, 50, "NVIDIA GH200 Grace Hopper Superchip datasheet"},
    {"NVIDIA GH200 (144 GB HBM3e)",   {67,    0,     494.7,  989.4,  989.4,   1978.9, 1978.9},
                                      {34,    67,    0,      0,      0,       0,     0},
     4.9, 0, 1980, 50, "NVIDIA GH200 Grace Hopper Superchip datasheet"},
    {"NVIDIA B200",                   {37,    0,     1125,   2250,   2250,    4500,  4500},
                                      {37,    0,     0,      0,      0,       0,     0},
     8.0, 1745, 0, 0, "NVIDIA HGX B200 datasheet (per GPU: the 8-GPU figures over 8, dense)"},
    {"AMD Instinct MI210",            {45.3,  45.3,  0,      181,    181,     0,     181},
                                      {22.6,  22.6,  0,      0,      0,       0,     0},
     1.6384, 0, 1700, 8, "AMD Instinct MI210 specifications"},
    {"AMD Instinct MI250X (one GCD)", {47.85, 47.85, 0,      191.5,  191.5,   0,     191.5},
                                      {23.95, 23.95, 0,      0,      0,       0,     0},
     1.6384, 0, 1700, 8, "AMD Instinct MI250X specifications, over its 2 GCDs"},
    {"AMD Instinct MI250 (one GCD)",  {45.25, 45.25, 0,      181.05, 181.05,  0,     181.05},
                                      {22.65, 22.65, 0,      0,      0,       0,     0},
     1.6384, 0, 1700, 8, "AMD Instinct MI250 specifications, over its 2 GCDs"},
    {"AMD Instinct MI300X",           {163.4, 163.4, 653.7,  1307.4, 1307.4,  2614.9, 2614.9},
                                      {81.7,  163.4, 0,      0,      0,       0,     0},
     5.3, 668, 2100, 256, "AMD Instinct MI300X specifications"},
    {"AMD Instinct MI325X",           {163.4, 163.4, 653.7,  1307.4, 1307.4,  2614.9, 2614.9},
                                      {81.7,  163.4, 0,      0,      0,       0,     0},
     6.0, 0, 2100, 256, "AMD Instinct MI325X specifications"},
};

inline const DevicePeaks* peaks_named(std::string_view model) noexcept {
  for (const DevicePeaks& peaks : kDevicePeaks)
    if (peaks.model == model) return &peaks;
  return nullptr;
}

inline bool name_has(std::string_view name, std::string_view part) noexcept {
  return name.find(part) != std::string_view::npos;
}

}  // namespace detail

/// The roofs of the GPU a trace's deviceProperties describe, or null when dlprof does not know
/// it (the report then says so, and takes the peaks a user gives). Matched by name, then by
/// compute capability, SM (compute unit) count and memory size, as torch.profiler writes them:
/// "NVIDIA H100 80GB HBM3" is the SXM5 H100, 114 SMs the PCIe one; ROCm may write no name, and
/// an MI300X and an MI325X differ only in their memory there.
inline const DevicePeaks* find_device_peaks(const DeviceProperties& device) noexcept {
  using detail::name_has;
  using detail::peaks_named;
  const std::string_view name = device.name;
  const double gib = static_cast<double>(device.total_global_mem) / (1024.0 * 1024 * 1024);
  const int cc = device.compute_major * 10 + device.compute_minor;
  if (name_has(name, "V100")) return peaks_named(name_has(name, "PCIE") || name_has(name, "PCIe") ? "NVIDIA Tesla V100 PCIe" : "NVIDIA Tesla V100 SXM2");
  if (name_has(name, "T4") && cc == 75) return peaks_named("NVIDIA T4");
  if (name_has(name, "A100")) {
    if (gib < 60) return peaks_named("NVIDIA A100 SXM4 40GB");  // the PCIe 40GB has the SXM4 40GB's figures
    return peaks_named(name_has(name, "PCIe") || name_has(name, "PCIE") ? "NVIDIA A100 PCIe 80GB" : "NVIDIA A100 SXM4 80GB");
  }
  if (name_has(name, "L4") && cc == 89) return peaks_named("NVIDIA L4");
  if (name_has(name, "GH200")) return peaks_named(gib > 110 ? "NVIDIA GH200 (144 GB HBM3e)" : "NVIDIA GH200 (96 GB HBM3)");
  if (name_has(name, "H200")) return peaks_named(name_has(name, "NVL") ? "NVIDIA H200 NVL" : "NVIDIA H200 SXM");
  if (name_has(name, "H100")) {
    if (name_has(name, "NVL")) return nullptr;  // not in the table
    return peaks_named(name_has(name, "PCIe") || device.num_sms == 114 ? "NVIDIA H100 PCIe" : "NVIDIA H100 SXM5");
  }
  if (name_has(name, "B200")) return peaks_named("NVIDIA B200");
  if (name_has(name, "MI210")) return peaks_named("AMD Instinct MI210");
  if (name_has(name, "MI250")) return peaks_named(device.num_sms == 104 ? "AMD Instinct MI250 (one GCD)" : "AMD Instinct MI250X (one GCD)");
  if (name_has(name, "MI325X")) return peaks_named("AMD Instinct MI325X");
  if (name_has(name, "MI300X")) return peaks_named("AMD Instinct MI300X");
  // Nameless devices, by what they are: gfx942 with 304 compute units is an MI300X or MI325X.
  if (name.empty() && cc == 94 && device.num_sms == 304) return peaks_named(gib > 220 ? "AMD Instinct MI325X" : "AMD Instinct MI300X");
  return nullptr;
}

namespace detail {

inline std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

inline std::optional<Precision> precision_named(std::string_view name) noexcept {
  constexpr std::string_view kNames[] = {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"};
  for (std::size_t i = 0; i < kPrecisionCount; ++i)
    if (kNames[i] == name) return static_cast<Precision>(i);
  return std::nullopt;
}

}  // namespace detail

/// The peaks a user gives for a GPU (dlprof-report --peaks), as "key=value" pairs separated by
/// commas or lines, '#' starting a comment:
///
///   bf16=989.4, fp16=989.4, tf32=494.7, fp8=1978.9, int8=1978.9, fp64=67   # matrix units, dense TFLOP/s
///   fp32=67                      # the vector units' (CUDA cores'); matrix.fp32= for AMD's matrix cores
///   vector.bf16=133.8            # any precision on a unit named explicitly
///   memory=3.35                  # TB/s, required
///   mamf=794.5  boost_mhz=1980  cache_mb=50
///
/// Throws std::invalid_argument naming the pair it cannot use: an unknown key, a value that is no
/// finite number of 0 or more, a key given twice, or no memory bandwidth or FLOP peak at all.
inline DevicePeaks parse_device_peaks(std::string_view text) {
  DevicePeaks peaks{"the peaks given", {}, {}, 0, 0, 0, 0, "given by the user"};
  bool any_flops = false;
  std::string seen = ",";
  std::string pairs;  // the text without its comments, lines joined by commas
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    pairs.append(line.substr(0, line.find('#'))).push_back(',');
  }
  std::string_view rest = pairs;
  while (!rest.empty()) {
    const std::size_t end = rest.find(',');
    std::string_view pair = detail::trim(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (pair.empty()) continue;
    const std::size_t equals = pair.find('=');
    if (equals == std::string_view::npos)
      throw std::invalid_argument("peaks: '" + std::string(pair) + "' is no key=value pair");
    const std::string_view key = detail::trim(pair.substr(0, equals));
    const std::string_view value_text = detail::trim(pair.substr(equals + 1));
    double value = 0;
    const auto [parsed_end, error] = std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (value_text.empty() || error != std::errc() || parsed_end != value_text.data() + value_text.size() ||
        !std::isfinite(value) || value < 0)
      throw std::invalid_argument("peaks: the value of '" + std::string(key) + "' is no number of 0 or more: '" +
                                  std::string(value_text) + "'");
    if (seen.find("," + std::string(key) + ",") != std::string::npos)
      throw std::invalid_argument("peaks: '" + std::string(key) + "' is given twice");
    seen.append(key).append(",");
    const bool vector_unit = key.rfind("vector.", 0) == 0;
    const bool matrix_unit = key.rfind("matrix.", 0) == 0;
    const std::string_view precision_name = vector_unit || matrix_unit ? key.substr(7) : key;
    if (const std::optional<Precision> precision = detail::precision_named(precision_name)) {
      // fp32 alone is the vector units' rate: on NVIDIA's Tensor Cores FP32 runs as TF32.
      const bool on_vector = vector_unit || (!matrix_unit && *precision == Precision::FP32);
      (on_vector ? peaks.vector : peaks.matrix)[static_cast<std::size_t>(*precision)] = value;
      any_flops = any_flops || value > 0;
    } else if (key == "memory") {
      peaks.memory_tb_per_s = value;
    } else if (key == "mamf") {
      peaks.mamf_bf16 = value;
    } else if (key == "boost_mhz") {
      peaks.boost_mhz = value;
    } else if (key == "cache_mb") {
      peaks.cache_mb = value;
    } else {
      throw std::invalid_argument("peaks: unknown key '" + std::string(key) +
                                  "' (expected fp64, fp32, tf32, bf16, fp16, fp8, int8, each may be prefixed by "
                                  "matrix. or vector., memory, mamf, boost_mhz or cache_mb)");
    }
  }
  if (peaks.memory_tb_per_s <= 0) throw std::invalid_argument("peaks: no memory bandwidth (memory=TB/s) is given");
  if (!any_flops) throw std::invalid_argument("peaks: no FLOP peak (e.g. bf16=TFLOP/s) is given");
  return peaks;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
