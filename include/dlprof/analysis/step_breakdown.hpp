// dlprof/analysis/step_breakdown.hpp: where each ProfilerStep's time went, as TensorBoard's
// profiler plugin draws its Overview, and the GPU summary under it. The rules are those of the
// plugin's sources (github.com/pytorch/kineto, tb_plugin/torch_tb_profiler/profiler: trace.py,
// event_parser.py, overall_parser.py, gpu_metrics_parser.py; docs/trace-format.md §4.3–4.5). Its
// release on PyPI, 0.4.3, predates three of their fixes: it ignores the category `cuda_runtime`,
// keeps no user_annotation range but ProfilerStep#N and its five collectives, and reads Kineto's
// GPU-side copy of a ProfilerStep#N as a second step. tests/tools/check_tb_agreement.py checks
// the breakdown and the GPU summary (Tensor Core % aside) against 0.4.3 with those three corrected.
//
// Steps. The ProfilerStep#N slices (`^ProfilerStep#\d+`, format/vocabulary.hpp), sorted by
// start; a trace without any is one step spanning its ops. When some GPU work was launched (a
// CUDA runtime call with the work's correlation id) from inside a step, every step is carried
// over to device time: it starts at the later of its host start and the previous step's end, and
// ends at the later of its host end and the end of the last work launched by runtime calls lying
// wholly inside it. Trailing steps that launched nothing are dropped, and so is the last step
// when it launched fewer than 0.8× the work of the one before (the profiler likely missed some of
// it).
//
// Roles, by priority; each gets the step time it covers that no role before it claimed:
//   Kernel         kernels, except communication kernels
//   Memcpy         copies
//   Memset         fills
//   Communication  kernels whose External id is that of a CPU op or range named nccl:* or gloo:*,
//                  and those ops and ranges; and the communication kernels of libraries other
//                  than NCCL and RCCL (kernel_type.hpp's kCommunicationKernelPatterns: DeepEP,
//                  NVSHMEM, custom all-reduce, ...), which no nccl:* op encloses
//   Runtime        CUDA runtime calls
//   DataLoader     ops and ranges named enumerate(DataLoader)#....__next__ or enumerate(DataPipe)#...
//   CPU Exec       every other op and range (ProfilerStep itself excepted); Python frames
//                  (python_function slices) are no role's
//   Other          the rest of the step
//
// GPU summary, per device with kernels, over [first step start, last step end]:
//   utilization            the union of kernels' time over the span;
//   est. SM efficiency     ∫ min(Σ blocks per SM of the running kernels, 1) dt over the span; none
//                          when no kernel there has `blocks per SM`;
//   est. achieved occupancy  mean `est. achieved occupancy %` weighted by kernel time in the span,
//                          over the kernels that have one (Kineto writes -99 where it has none);
//                          none when no kernel there has one (ROCm's traces);
//   Tensor Core %          dlprof's own figure, not the plugin's: the share of the kernel time in
//                          the span spent in Tensor Core kernels (tensor_cores.hpp; on AMD's GPUs,
//                          matrix-core kernels).
// A GPU that deviceProperties does not list takes the name and compute capability of the GPUs it
// lists when they are all one model (device_properties_of); otherwise it has none.
//
// Where this departs from the plugin's rules on purpose, and why: kTensorBoardDeviations below
// (the report's last section and the README list them too).
//
//   const auto breakdown = dlprof::analysis::step_breakdown(trace);
//   fmt::print("{}", breakdown.table());
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/detail/per_name.hpp"
#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/tensor_cores.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// A deliberate departure from TensorBoard's profiler plugin, and why.
struct TensorBoardDeviation {
  std::string_view what;
  std::string_view why;
};

/// Every way step_breakdown() departs from the plugin's rules; in all else it follows them.
inline constexpr TensorBoardDeviation kTensorBoardDeviations[] = {
    {"Communication ops are any nccl:* or gloo:* name, not only the plugin's five collectives",
     "send/recv, all_to_all and the *_base and coalesced collectives of recent PyTorch communicate too"},
    {"Communication kernels of libraries other than NCCL and RCCL (DeepEP, NVSHMEM, symmetric memory, custom all-reduce, MSCCL) are Communication, whatever op launched them",
     "the plugin counts only kernels under an nccl:* or gloo:* op, and so counts expert-parallel all-to-all and custom all-reduce, which no such op encloses, as computation"},
    {"gpu_user_annotation slices are left out",
     "they are Kineto's GPU-side copies of CPU ranges, not CPU execution; the plugin counts them as CPU Exec, and a copied ProfilerStep#N as a second step"},
    {"A trace without ProfilerStep and without ops is one step spanning its other CPU slices",
     "the plugin spans such a trace by its ops alone, which gives it no step"},
    {"Tensor Core % is dlprof's own: kernel time in the steps' span, Tensor Core kernels by tensor_cores.hpp; none for GPUs of neither NVIDIA nor AMD",
     "the plugin's list misses newer Tensor Core kernels (cuBLAS 12's nvjet, CUTLASS 3, DeepGEMM, FP8 and FP4 GEMMs, FlashAttention), its figure takes the kernels ops launched anywhere in the trace, not the steps' kernels, and no list judges another vendor's kernels"},
};

/// TensorBoard's step-time roles, in priority order.
enum class StepRole : std::uint8_t { Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CpuExec, Other };
inline constexpr std::size_t kStepRoleCount = 8;

constexpr std::string_view to_string(StepRole role) noexcept {
  switch (role) {
    case StepRole::Kernel: return "Kernel";
    case StepRole::Memcpy: return "Memcpy";
    case StepRole::Memset: return "Memset";
    case StepRole::Communication: return "Communication";
    case StepRole::Runtime: return "Runtime";
    case StepRole::DataLoader: return "DataLoader";
    case StepRole::CpuExec: return "CPU Exec";
    case StepRole::Other: return "Other";
  }
  return "Other";
}

/// One step, after it was carried over to device time, and its time by role.
struct StepTime {
  std::string_view name;    ///< "ProfilerStep#12"; "whole trace" when the trace has no steps
  std::int64_t number = -1; ///< 12; -1 when the trace has no steps
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::array<std::int64_t, kStepRoleCount> role_ns{};  ///< by StepRole; they add up to duration_ns()

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
  std::int64_t operator[](StepRole role) const noexcept { return role_ns[static_cast<std::size_t>(role)]; }
};

/// TensorBoard's GPU summary of one device over the steps.
struct DeviceMetrics {
  std::uint32_t device = 0;
  /// From deviceProperties (device_properties_of: another id's entry where the trace lists its
  /// GPUs under other ids); empty when the trace does not say.
  std::string_view name;
  /// The deviceProperties id the name and compute capability come from, when it is not this
  /// device's own entry.
  std::optional<int> properties_from_id;
  int compute_major = 0;
  int compute_minor = 0;
  std::int64_t kernel_ns = 0;            ///< kernel time in the steps' span
  double utilization = 0;                ///< [0, 1]
  std::optional<double> sm_efficiency;   ///< [0, 1]; none without `blocks per SM`
  /// None without a kernel in the span that has `est. achieved occupancy %` (ROCm's traces)
  std::optional<double> achieved_occupancy_percent;
  /// dlprof's own figure (kTensorBoardDeviations); none where the list cannot judge the GPU's
  /// kernels (MatrixUnits::Unknown)
  std::optional<double> tensor_core_percent;
};

struct StepBreakdown {
  std::vector<StepTime> steps;
  std::vector<DeviceMetrics> devices;  ///< by device id
  /// What the trace's GPUs call the units DeviceMetrics::tensor_core_percent counts.
  MatrixUnits matrix_units = MatrixUnits::TensorCores;

  /// Mean time of each role over the steps (TensorBoard's "Average Step Time" row).
  std::array<double, kStepRoleCount> average_ns() const noexcept {
    std::array<double, kStepRoleCount> mean{};
    for (const StepTime& step : steps)
      for (std::size_t role = 0; role < kStepRoleCount; ++role) mean[role] += static_cast<double>(step.role_ns[role]);
    for (double& value : mean) value = steps.empty() ? 0.0 : value / static_cast<double>(steps.size());
    return mean;
  }
  double average_step_ns() const noexcept {
    double total = 0;
    for (const StepTime& step : steps) total += static_cast<double>(step.duration_ns());
    return steps.empty() ? 0.0 : total / static_cast<double>(steps.size());
  }

  /// The steps in µs, the average with each role's share, and the GPU summary.
  std::string table() const {
    fmt::memory_buffer out;
    auto line = std::back_inserter(out);
    fmt::format_to(line, "{:<20} {:>12}", "Step", "Total (us)");
    for (std::size_t role = 0; role < kStepRoleCount; ++role)
      fmt::format_to(line, " {:>13}", to_string(static_cast<StepRole>(role)));
    fmt::format_to(line, "\n");
    for (const StepTime& step : steps) {
      fmt::format_to(line, "{:<20} {:>12.3f}", step.name, step.duration_ns() / 1e3);
      for (const std::int64_t ns : step.role_ns) fmt::format_to(line, " {:>13.3f}", ns / 1e3);
      fmt::format_to(line, "\n");
    }
    const auto mean = average_ns();
    const double mean_step = average_step_ns();
    fmt::format_to(line, "{:<20} {:>12.3f}", "Average", mean_step / 1e3);
    for (const double ns : mean) fmt::format_to(line, " {:>13.3f}", ns / 1e3);
    fmt::format_to(line, "\n{:<20} {:>12}", "Share", "");
    for (const double ns : mean) fmt::format_to(line, " {:>12.2f}%", mean_step > 0 ? 100.0 * ns / mean_step : 0.0);
    fmt::format_to(line, "\n");
    for (const DeviceMetrics& device : devices) {
      fmt::format_to(line, "\nGPU {}{}{}", device.device, device.name.empty() ? "" : " ", device.name);
      if (device.properties_from_id) fmt::format_to(line, " (the model of id {})", *device.properties_from_id);
      fmt::format_to(line, ": utilization {:.2f}%", 100.0 * device.utilization);
      const auto percent = [](const std::optional<double>& value, double scale) {
        return value ? fmt::format("{:.2f}%", scale * *value) : std::string("unknown");
      };
      fmt::format_to(line, ", est. SM efficiency {}, est. achieved occupancy {}", percent(device.sm_efficiency, 100.0),
                     percent(device.achieved_occupancy_percent, 1.0));
      fmt::format_to(line, ", {} (dlprof's kernel list) {}", to_string(matrix_units),
                     device.tensor_core_percent ? fmt::format("{:.2f}% of kernel time", *device.tensor_core_percent)
                                                : std::string("n/a"));
    }
    if (!devices.empty()) fmt::format_to(line, "\n");
    return fmt::to_string(out);
  }
};

namespace detail {

constexpr bool is_communication_kernel_beyond_nccl(std::string_view name) noexcept {
  return is_communication_kernel(name) && kernel_type(name) != KernelType::Communication;
}

enum class SliceRole : std::uint8_t { Step, DataLoader, Communication, CpuExec };

inline SliceRole slice_role(const TraceEvent& event, std::string_view name) noexcept {
  using dlprof::detail::ends_with;
  using dlprof::detail::starts_with;
  if (event.kind == EventKind::Step || dlprof::detail::is_profiler_step(name)) return SliceRole::Step;
  if ((starts_with(name, kineto::name::kDataLoaderPrefix) && ends_with(name, kineto::name::kDataLoaderNextSuffix)) ||
      starts_with(name, kineto::name::kDataPipePrefix))
    return SliceRole::DataLoader;
  if (dlprof::detail::is_communication_name(name)) return SliceRole::Communication;
  return SliceRole::CpuExec;
}

constexpr bool is_device_work(GpuEventKind kind) noexcept {
  return kind == GpuEventKind::Kernel || kind == GpuEventKind::Memcpy || kind == GpuEventKind::MemcpyPeer ||
         kind == GpuEventKind::Memset;
}

/// TensorBoard's _find_device_steps and _update_steps_duration: steps carried over to the
/// device time of the work their runtime calls launched; tail steps that launched too little go.
inline void carry_steps_to_device_time(const Trace& trace, std::vector<StepTime>& steps) {
  constexpr std::int64_t kNone = INT64_MAX;
  // Work by correlation id, so that each runtime call finds what it launched.
  std::vector<std::pair<std::uint32_t, std::size_t>> work_of_correlation;
  for (std::size_t i = 0; i < trace.gpu_events.size(); ++i) {
    const GpuEvent& work = trace.gpu_events[i];
    if (is_device_work(work.kind) && work.correlation != 0) work_of_correlation.emplace_back(work.correlation, i);
  }
  std::sort(work_of_correlation.begin(), work_of_correlation.end());
  std::vector<const ApiEvent*> runtimes;
  for (const ApiEvent& call : trace.api_events)
    if (!call.driver) runtimes.push_back(&call);
  dlprof::detail::stable_sort_runs(runtimes.begin(), runtimes.end(),
                   [](const ApiEvent* a, const ApiEvent* b) { return a->start_ns < b->start_ns; });

  std::vector<std::pair<std::int64_t, std::int64_t>> device_span(steps.size(), {kNone, INT64_MIN});
  std::vector<std::size_t> launched(steps.size(), 0);
  std::vector<char> matched(trace.gpu_events.size(), 0);
  bool any_matched = false;
  std::size_t step = 0;
  std::size_t runtime = 0;
  std::pair<std::int64_t, std::int64_t> span{kNone, INT64_MIN};
  while (step < steps.size() && runtime < runtimes.size()) {
    const ApiEvent& call = *runtimes[runtime];
    if (call.start_ns < steps[step].start_ns) {
      ++runtime;  // before the step, or straddling its start
    } else if (call.end_ns <= steps[step].end_ns) {
      auto work = std::lower_bound(work_of_correlation.begin(), work_of_correlation.end(),
                                   std::pair<std::uint32_t, std::size_t>{call.correlation, 0});
      for (; call.correlation != 0 && work != work_of_correlation.end() && work->first == call.correlation; ++work) {
        const GpuEvent& device_work = trace.gpu_events[work->second];
        span.first = std::min(span.first, device_work.start_ns);
        span.second = std::max(span.second, device_work.end_ns);
        matched[work->second] = 1;
        any_matched = true;
        ++launched[step];
      }
      ++runtime;
    } else if (call.start_ns < steps[step].end_ns) {
      ++runtime;  // straddling the step's end
    } else {
      device_span[step++] = span;
      span = {kNone, INT64_MIN};
    }
  }
  for (; step < steps.size(); ++step) {
    device_span[step] = span;
    span = {kNone, INT64_MIN};
  }
  if (!any_matched) return;

  // The first step starts no earlier than the end of earlier work launched outside any step.
  std::int64_t previous_end = steps.front().start_ns;
  if (device_span.front().first != kNone)
    for (std::size_t i = 0; i < trace.gpu_events.size(); ++i) {
      const GpuEvent& work = trace.gpu_events[i];
      if (is_device_work(work.kind) && !matched[i] && work.end_ns < device_span.front().first)
        previous_end = std::max(previous_end, work.end_ns);
    }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::int64_t start = std::max(previous_end, steps[i].start_ns);
    std::int64_t end = steps[i].end_ns;
    end = device_span[i].first == kNone ? std::max(end, start) : std::max({end, device_span[i].second, start});
    steps[i].start_ns = start;
    steps[i].end_ns = end;
    previous_end = end;
  }

  if (steps.size() > 1) {
    std::size_t last = steps.size();
    while (last > 0 && launched[last - 1] == 0) --last;
    if (last > 0) {
      std::size_t keep = last;
      if (last > 1 && static_cast<double>(launched[last - 2]) * 0.8 > static_cast<double>(launched[last - 1])) keep = last - 1;
      steps.resize(keep);
    }
  }
}

inline std::vector<DeviceMetrics> device_metrics(const Trace& trace, std::int64_t span_start, std::int64_t span_end,
                                                 MatrixUnits units) {
  std::vector<std::uint32_t> ids;
  for (const GpuEvent& work : trace.gpu_events)
    if (work.kind == GpuEventKind::Kernel) ids.push_back(work.device);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const std::int64_t span = span_end - span_start;
  PerName<bool> tensor_core_kernel(trace, uses_tensor_cores);

  std::vector<DeviceMetrics> devices;
  for (const std::uint32_t id : ids) {
    DeviceMetrics metrics;
    metrics.device = id;
    if (const DevicePropertiesOf properties = device_properties_of(trace.devices, static_cast<int>(id))) {
      metrics.name = properties.properties->name;
      metrics.compute_major = properties.properties->compute_major;
      metrics.compute_minor = properties.properties->compute_minor;
      if (properties.borrowed) metrics.properties_from_id = properties.properties->id;
    }
    std::vector<Interval> busy;
    struct Boundary {
      std::int64_t time;
      bool end;
      double blocks_per_sm;
    };
    std::vector<Boundary> blocks;
    double occupancy_time = 0;
    std::int64_t occupancy_ns = 0;  // of the kernels with an occupancy
    std::int64_t tensor_core_ns = 0;
    for (const GpuEvent& work : trace.gpu_events) {
      if (work.kind != GpuEventKind::Kernel || work.device != id) continue;
      busy.push_back({work.start_ns, work.end_ns});
      if (work.kernel.blocks_per_sm > 0) {
        blocks.push_back({work.start_ns, false, work.kernel.blocks_per_sm});
        blocks.push_back({work.end_ns, true, work.kernel.blocks_per_sm});
      }
      const std::int64_t in_span = std::min(work.end_ns, span_end) - std::max(work.start_ns, span_start);
      if (in_span <= 0) continue;
      metrics.kernel_ns += in_span;
      if (work.kernel.est_achieved_occupancy_percent >= 0) {
        occupancy_time += static_cast<double>(work.kernel.est_achieved_occupancy_percent) * static_cast<double>(in_span);
        occupancy_ns += in_span;
      }
      if (tensor_core_kernel(work.name)) tensor_core_ns += in_span;
    }
    merge(busy);
    if (span > 0) metrics.utilization = static_cast<double>(intersection_length(busy, {{span_start, span_end}})) / static_cast<double>(span);
    if (occupancy_ns > 0) metrics.achieved_occupancy_percent = occupancy_time / static_cast<double>(occupancy_ns);
    if (units != MatrixUnits::Unknown)
      metrics.tensor_core_percent =
          metrics.kernel_ns > 0 ? 100.0 * static_cast<double>(tensor_core_ns) / static_cast<double>(metrics.kernel_ns) : 0.0;
    // merge_ranges_with_value: between boundaries, min(Σ blocks per SM, 1); starts before ends.
    std::sort(blocks.begin(), blocks.end(), [](const Boundary& a, const Boundary& b) {
      return a.time != b.time ? a.time < b.time : a.end < b.end;
    });
    double running = 0;
    double weighted = 0;
    bool in_span_at_all = false;
    for (std::size_t i = 0; i + 1 < blocks.size(); ++i) {
      running += blocks[i].end ? -blocks[i].blocks_per_sm : blocks[i].blocks_per_sm;
      const std::int64_t from = std::max(blocks[i].time, span_start);
      const std::int64_t to = std::min(blocks[i + 1].time, span_end);
      if (running > 0 && to > from && blocks[i + 1].time > blocks[i].time) {
        weighted += std::min(running, 1.0) * static_cast<double>(to - from);
        in_span_at_all = true;
      }
    }
    if (in_span_at_all && span > 0) metrics.sm_efficiency = weighted / static_cast<double>(span);
    devices.push_back(metrics);
  }
  return devices;
}

}  // namespace detail

/// TensorBoard's step-time breakdown and GPU summary of `trace`.
inline StepBreakdown step_breakdown(const Trace& trace) {
  std::vector<detail::SliceRole> role_of_name(trace.names.size(), detail::SliceRole::CpuExec);
  std::vector<char> role_known(trace.names.size(), 0);
  std::array<std::vector<detail::Interval>, kStepRoleCount> roles;
  std::vector<std::uint64_t> communication_ids;
  std::vector<StepTime> steps;
  // The span of a trace without steps: its ops, as TensorBoard's; without ops, every CPU slice.
  detail::Interval ops_span{INT64_MAX, INT64_MIN};
  detail::Interval slices_span{INT64_MAX, INT64_MIN};
  const auto role_intervals = [&](StepRole role) -> std::vector<detail::Interval>& {
    return roles[static_cast<std::size_t>(role)];
  };
  // Room for every interval the largest roles may get: memory reserved and never written costs
  // nothing, and a vector grown by doubling holds its old and new copies at once.
  role_intervals(StepRole::CpuExec).reserve(trace.events.size());
  role_intervals(StepRole::Kernel).reserve(trace.gpu_events.size());
  role_intervals(StepRole::Runtime).reserve(trace.api_events.size());
  for (const TraceEvent& event : trace.events) {
    if (!is_slice(event.kind)) continue;
    detail::Interval& span = event.kind == EventKind::Op ? ops_span : slices_span;
    span.start = std::min(span.start, event.start_ns);
    span.end = std::max(span.end, event.end_ns);
    if (event.kind == EventKind::PythonFrame) continue;
    if (!role_known[event.name]) {
      role_of_name[event.name] = detail::slice_role(event, trace.names[event.name]);
      role_known[event.name] = 1;
    }
    const detail::SliceRole role = event.kind == EventKind::Step ? detail::SliceRole::Step : role_of_name[event.name];
    switch (role) {
      case detail::SliceRole::Step: {
        StepTime step;
        step.name = trace.names[event.name];
        step.number = dlprof::detail::profiler_step_number(step.name);
        step.start_ns = event.start_ns;
        step.end_ns = event.end_ns;
        steps.push_back(step);
        break;
      }
      case detail::SliceRole::DataLoader: role_intervals(StepRole::DataLoader).push_back({event.start_ns, event.end_ns}); break;
      case detail::SliceRole::Communication:
        role_intervals(StepRole::Communication).push_back({event.start_ns, event.end_ns});
        if (event.external_id != 0) communication_ids.push_back(event.external_id);
        break;
      case detail::SliceRole::CpuExec: role_intervals(StepRole::CpuExec).push_back({event.start_ns, event.end_ns}); break;
    }
  }
  std::sort(communication_ids.begin(), communication_ids.end());
  // NCCL's kernels keep the plugin's rule (under an nccl:* op); other libraries' are known by name.
  detail::PerName<bool> communication_kernel(trace, detail::is_communication_kernel_beyond_nccl);
  for (const GpuEvent& work : trace.gpu_events) {
    switch (work.kind) {
      case GpuEventKind::Kernel: {
        const bool communication =
            communication_kernel(work.name) ||
            (work.external_id != 0 && std::binary_search(communication_ids.begin(), communication_ids.end(), work.external_id));
        role_intervals(communication ? StepRole::Communication : StepRole::Kernel).push_back({work.start_ns, work.end_ns});
        break;
      }
      case GpuEventKind::Memcpy:
      case GpuEventKind::MemcpyPeer: role_intervals(StepRole::Memcpy).push_back({work.start_ns, work.end_ns}); break;
      case GpuEventKind::Memset: role_intervals(StepRole::Memset).push_back({work.start_ns, work.end_ns}); break;
      case GpuEventKind::Sync:
      case GpuEventKind::Annotation: break;
    }
  }
  for (const ApiEvent& call : trace.api_events)
    if (!call.driver) role_intervals(StepRole::Runtime).push_back({call.start_ns, call.end_ns});

  StepBreakdown result;
  if (steps.empty()) {
    const detail::Interval& span = ops_span.start != INT64_MAX ? ops_span : slices_span;
    if (span.start == INT64_MAX) return result;
    StepTime whole;
    whole.name = "whole trace";
    whole.start_ns = span.start;
    whole.end_ns = span.end;
    steps.push_back(whole);
  }
  dlprof::detail::stable_sort_runs(steps.begin(), steps.end(), [](const StepTime& a, const StepTime& b) { return a.start_ns < b.start_ns; });
  detail::carry_steps_to_device_time(trace, steps);

  std::vector<detail::Interval> unclaimed;
  for (const StepTime& step : steps) unclaimed.push_back({step.start_ns, step.end_ns});
  detail::merge(unclaimed);
  std::array<std::vector<detail::Interval>, kStepRoleCount> claimed;
  for (std::size_t role = 0; role + 1 < kStepRoleCount; ++role) {
    detail::merge(roles[role]);
    claimed[role] = detail::intersect(roles[role], unclaimed);
    unclaimed = detail::subtract(unclaimed, claimed[role]);
  }
  claimed[static_cast<std::size_t>(StepRole::Other)] = std::move(unclaimed);
  for (StepTime& step : steps)
    for (std::size_t role = 0; role < kStepRoleCount; ++role)
      step.role_ns[role] = detail::intersection_length(claimed[role], {{step.start_ns, step.end_ns}});

  result.matrix_units = matrix_units_of(trace);
  result.devices = detail::device_metrics(trace, steps.front().start_ns, steps.back().end_ns, result.matrix_units);
  result.steps = std::move(steps);
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
