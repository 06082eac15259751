// dlprof/analysis/step_samples.hpp: each step's figures of one trace, and of every op, kernel,
// module, call site or collective in it: the samples by which two runs are compared
// (analysis/run_diff.hpp). A run has many steps, so every key has a sample per step: a comparison
// normalises by the step (a run of 3 steps compares with a run of 50) and sees each figure's noise.
//
// Steps are step_breakdown()'s: the ProfilerStep#N slices carried over to device time, without a
// last step the profiler likely missed work of (a trace without steps is one step). A step's own
// figures:
//   duration               its duration in device time;
//   GPU busy               the step time the GPU's work covers (TensorBoard's roles Kernel, Memcpy,
//                          Memset and Communication);
//   exposed communication  the step time only communication covers (the role Communication: no
//                          computation, copy or fill beside it);
//   FLOPs                  of the ops that started in it (with_flops), each op counted once;
//   memory peak            the most memory the allocator held while it ran: a GPU's where the trace
//                          has GPU allocations, else the CPU's (profile_memory); none without.
// A key's figures in a step:
//   ops, modules, call sites  calls, total and self CPU time, the device time of the work launched
//                          directly inside and in total, self CPU and device memory (torch's
//                          columns, key_averages.hpp): every op and range whose start lies in the
//                          step's ProfilerStep slice, on any thread;
//   kernels                calls and device time, each kernel in the step its launch lies in (its
//                          runtime call by correlation id, else its op by External id), else in
//                          the step whose device-time span holds its start;
//   collectives            calls, the collective op's CPU time and the device time it launched.
// Ops and ranges outside every step (before the first, between steps on another thread) are no
// step's, as HTA counts no iteration for them.
//
//   const auto breakdown = dlprof::analysis::step_breakdown(trace);
//   const auto samples = dlprof::analysis::step_samples(trace, breakdown, dlprof::analysis::SampleKey::Op);
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/short_kernel_name.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// What the samples are keyed by.
enum class SampleKey : std::uint8_t {
  Op,               ///< the op's or range's name
  OpAndShapes,      ///< the name and its input shapes (record_shapes)
  Kernel,           ///< the kernel's full name
  KernelShortName,  ///< the kernel's name without namespaces, parameters and most template arguments
  Module,           ///< module ranges (`nn.Module: ...`) alone
  CallSite,         ///< the op's name and the innermost frames of the user's code in its stack
  Collective,       ///< a collective's name, data type, elements and process group
};

constexpr std::string_view to_string(SampleKey key) noexcept {
  switch (key) {
    case SampleKey::Op: return "op";
    case SampleKey::OpAndShapes: return "shapes";
    case SampleKey::Kernel: return "kernel";
    case SampleKey::KernelShortName: return "short-kernel";
    case SampleKey::Module: return "module";
    case SampleKey::CallSite: return "stack";
    case SampleKey::Collective: return "collective";
  }
  return "op";
}

/// The key kind a name of to_string() spells; none for another name.
inline std::optional<SampleKey> sample_key_of(std::string_view name) noexcept {
  for (const SampleKey key : {SampleKey::Op, SampleKey::OpAndShapes, SampleKey::Kernel, SampleKey::KernelShortName,
                              SampleKey::Module, SampleKey::CallSite, SampleKey::Collective})
    if (to_string(key) == name) return key;
  return std::nullopt;
}

/// Whether a key of this kind is device work rather than ops: its time is device time alone.
constexpr bool is_device_key(SampleKey key) noexcept { return key == SampleKey::Kernel || key == SampleKey::KernelShortName; }

/// One key's figures in one step.
struct KeyFigures {
  std::int64_t calls = 0;
  std::int64_t total_ns = 0;      ///< CPU time; 0 for kernels
  std::int64_t self_ns = 0;       ///< CPU time less the ranges nested directly inside; 0 for kernels
  std::int64_t gpu_self_ns = 0;   ///< device time of the work launched directly inside; a kernel's own
  std::int64_t gpu_total_ns = 0;  ///< and of the work launched inside at any depth
  std::int64_t self_cpu_memory_bytes = 0;     ///< allocated less released inside it alone, on the CPU
  std::int64_t self_device_memory_bytes = 0;  ///< and on the GPU

  KeyFigures& operator+=(const KeyFigures& other) noexcept {
    calls += other.calls;
    total_ns += other.total_ns;
    self_ns += other.self_ns;
    gpu_self_ns += other.gpu_self_ns;
    gpu_total_ns += other.gpu_total_ns;
    self_cpu_memory_bytes += other.self_cpu_memory_bytes;
    self_device_memory_bytes += other.self_device_memory_bytes;
    return *this;
  }
};

/// A figure of KeyFigures, for code that goes through them all.
enum class KeyFigure : std::uint8_t { Calls, Total, Self, GpuSelf, GpuTotal, SelfCpuMemory, SelfDeviceMemory };
inline constexpr std::size_t kKeyFigureCount = 7;

constexpr std::int64_t figure_of(const KeyFigures& figures, KeyFigure figure) noexcept {
  switch (figure) {
    case KeyFigure::Calls: return figures.calls;
    case KeyFigure::Total: return figures.total_ns;
    case KeyFigure::Self: return figures.self_ns;
    case KeyFigure::GpuSelf: return figures.gpu_self_ns;
    case KeyFigure::GpuTotal: return figures.gpu_total_ns;
    case KeyFigure::SelfCpuMemory: return figures.self_cpu_memory_bytes;
    case KeyFigure::SelfDeviceMemory: return figures.self_device_memory_bytes;
  }
  return 0;
}

constexpr std::string_view to_string(KeyFigure figure) noexcept {
  switch (figure) {
    case KeyFigure::Calls: return "calls";
    case KeyFigure::Total: return "total";
    case KeyFigure::Self: return "self";
    case KeyFigure::GpuSelf: return "gpu_self";
    case KeyFigure::GpuTotal: return "gpu_total";
    case KeyFigure::SelfCpuMemory: return "self_cpu_memory";
    case KeyFigure::SelfDeviceMemory: return "self_device_memory";
  }
  return "calls";
}

/// A step's own figures.
struct StepSample {
  std::int64_t number = -1;  ///< N of ProfilerStep#N; -1 for a trace without steps
  std::int64_t duration_ns = 0;
  std::int64_t gpu_busy_ns = 0;
  std::int64_t exposed_communication_ns = 0;
  std::uint64_t flops = 0;
  std::optional<std::int64_t> memory_peak_bytes;
};

/// A key's figures, one per step, in the order of StepSamples::steps.
struct KeySamples {
  std::string key;
  std::vector<KeyFigures> steps;

  KeyFigures sum() const noexcept {
    KeyFigures total;
    for (const KeyFigures& step : steps) total += step;
    return total;
  }
};

struct StepSamples {
  SampleKey key = SampleKey::Op;
  std::vector<StepSample> steps;
  std::vector<KeySamples> keys;  ///< in the order they first appear in the trace
  /// What makes two runs comparable or not (run_diff.hpp says so at the top): the GPUs' names,
  /// the data types of the ops' tensors, the world size, and how many kernels each step launched
  /// of each kind (KernelType), by step.
  std::vector<std::string> devices;
  std::set<std::string> dtypes;
  std::int64_t world_size = 1;
  std::vector<std::array<std::int64_t, kKernelTypeCount>> kernels_by_type;  ///< by step
  /// Events the recording lost: a comparison of such a run is not to be trusted.
  std::uint64_t dropped_events = 0;
  std::uint64_t dropped_gpu_records = 0;
  std::uint64_t overflowed_names = 0;

  /// The key's samples, or nullptr.
  const KeySamples* find(std::string_view key_name) const noexcept {
    for (const KeySamples& samples : keys)
      if (samples.key == key_name) return &samples;
    return nullptr;
  }
};

namespace detail {

/// The key of a name that holds a step's number: "ProfilerStep#*", so that two runs' steps are one
/// key whatever their numbers.
inline std::string step_free_name(std::string_view name) {
  if (dlprof::detail::is_profiler_step(name)) return std::string(kineto::name::kProfilerStepPrefix) + "*";
  return std::string(name);
}

/// The step of each time, by the steps' spans, sorted by start and disjoint.
class StepOfTime {
 public:
  explicit StepOfTime(std::vector<std::tuple<std::int64_t, std::int64_t, std::size_t>> spans) : spans_(std::move(spans)) {
    std::sort(spans_.begin(), spans_.end());
  }
  /// The step whose span [start, end) holds `time_ns`, if any.
  std::optional<std::size_t> operator()(std::int64_t time_ns) const noexcept {
    auto after = std::upper_bound(spans_.begin(), spans_.end(), std::make_tuple(time_ns, INT64_MAX, SIZE_MAX));
    if (after == spans_.begin()) return std::nullopt;
    const auto& [start, end, step] = *(after - 1);
    if (time_ns >= end) return std::nullopt;
    return step;
  }

 private:
  std::vector<std::tuple<std::int64_t, std::int64_t, std::size_t>> spans_;
};

/// Each kept step's host span: its ProfilerStep slice (the slice of its number, or of its start),
/// else, where the trace has none (one step over the whole trace), the step's own span.
inline StepOfTime host_steps(const Trace& trace, const std::vector<StepTime>& steps) {
  std::vector<std::tuple<std::int64_t, std::int64_t, std::size_t>> spans;
  std::unordered_map<std::int64_t, std::size_t> step_of_number;
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i].number >= 0) step_of_number.emplace(steps[i].number, i);
  std::vector<bool> found(steps.size(), false);
  for (const TraceEvent& event : trace.events) {
    if (!is_slice(event.kind)) continue;
    const std::string_view name = trace.names[event.name];
    if (event.kind != EventKind::Step && !dlprof::detail::is_profiler_step(name)) continue;
    const auto step = step_of_number.find(dlprof::detail::profiler_step_number(name));
    if (step == step_of_number.end() || found[step->second]) continue;
    found[step->second] = true;
    spans.emplace_back(event.start_ns, event.end_ns, step->second);
  }
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (!found[i]) spans.emplace_back(steps[i].start_ns, steps[i].end_ns, i);
  return StepOfTime(std::move(spans));
}

/// The text of a collective's key: "allreduce Float×1048576 in group 0 (default_pg)".
inline std::string collective_key(const CollectiveCall& call) {
  std::string key = call.name.empty() ? std::string("collective") : call.name;
  if (!call.dtype.empty() || call.in_nelems != 0) key += fmt::format(" {}\u00d7{}", call.dtype.empty() ? "?" : call.dtype, call.in_nelems);
  if (!call.group_name.empty() || !call.group_desc.empty())
    key += fmt::format(" in group {}{}", call.group_name, call.group_desc.empty() ? "" : fmt::format(" ({})", call.group_desc));
  return key;
}

}  // namespace detail

/// The samples of `trace`, keyed by `key`, over the steps of `breakdown` (step_breakdown(trace)).
/// `call_site_frames`: how many of the innermost frames of the user's code name a call site
/// (SampleKey::CallSite).
inline StepSamples step_samples(const Trace& trace, const StepBreakdown& breakdown, SampleKey key,
                                std::size_t call_site_frames = 1) {
  StepSamples result;
  result.key = key;
  result.world_size = trace.distributed.world_size;
  result.dropped_events = trace.dropped_events;
  result.dropped_gpu_records = trace.gpu.dropped_records + trace.gpu.cupti_dropped_records;
  result.overflowed_names = trace.overflowed_names;
  for (const DeviceProperties& device : trace.devices) result.devices.push_back(device.name);
  const std::vector<StepTime>& steps = breakdown.steps;
  const std::size_t step_count = steps.size();
  for (const StepTime& step : steps) {
    StepSample sample;
    sample.number = step.number;
    sample.duration_ns = step.duration_ns();
    sample.gpu_busy_ns = step[StepRole::Kernel] + step[StepRole::Memcpy] + step[StepRole::Memset] + step[StepRole::Communication];
    sample.exposed_communication_ns = step[StepRole::Communication];
    result.steps.push_back(sample);
  }
  result.kernels_by_type.assign(step_count, {});
  if (step_count == 0) return result;

  const detail::StepOfTime host_step = detail::host_steps(trace, steps);
  std::vector<std::tuple<std::int64_t, std::int64_t, std::size_t>> device_spans;
  for (std::size_t i = 0; i < step_count; ++i) device_spans.emplace_back(steps[i].start_ns, steps[i].end_ns, i);
  const detail::StepOfTime device_step(std::move(device_spans));

  std::unordered_map<std::string, std::size_t> key_index;
  const auto samples_of = [&](std::string name) -> KeySamples& {
    const auto [found, added] = key_index.try_emplace(std::move(name), result.keys.size());
    if (added) {
      KeySamples& samples = result.keys.emplace_back();
      samples.key = found->first;
      samples.steps.assign(step_count, KeyFigures{});
    }
    return result.keys[found->second];
  };

  // The memory peaks: a GPU's allocator where there is one, else the CPU's.
  const bool gpu_memory = std::any_of(trace.memory_events.begin(), trace.memory_events.end(),
                                      [](const MemoryEvent& event) { return is_gpu_memory(event.device_type); });
  for (const MemoryEvent& event : trace.memory_events) {
    if (is_gpu_memory(event.device_type) != gpu_memory) continue;
    const std::optional<std::size_t> step = device_step(event.time_ns);
    if (!step) continue;
    std::optional<std::int64_t>& peak = result.steps[*step].memory_peak_bytes;
    peak = std::max(peak.value_or(0), event.total_allocated);
  }
  for (const OpInputs& inputs : trace.op_inputs) {
    // Types as torch writes them: a JSON list of strings, "" for what is not a tensor.
    const std::string_view types = trace.names[inputs.types];
    for (std::size_t at = types.find('"'); at != std::string_view::npos;) {
      const std::size_t end = types.find('"', at + 1);
      if (end == std::string_view::npos) break;
      const std::string_view type = types.substr(at + 1, end - at - 1);
      if (!type.empty() && type.find("Scalar") == std::string_view::npos && type != "GenericList" && type != "TensorList")
        result.dtypes.emplace(type);
      at = types.find('"', end + 1);
    }
  }

  // Kernels by the step of their launch.
  std::vector<std::pair<std::uint32_t, std::int64_t>> launches;  // (correlation, host time)
  for (const ApiEvent& call : trace.api_events)
    if (call.correlation != 0) launches.emplace_back(call.correlation, call.start_ns);
  std::sort(launches.begin(), launches.end());
  std::unordered_map<std::uint64_t, std::int64_t> op_start_of_id;
  for (const TraceEvent& event : trace.events)
    if (is_slice(event.kind) && event.external_id != 0) op_start_of_id.emplace(event.external_id, event.start_ns);
  const auto step_of_work = [&](const GpuEvent& work) -> std::optional<std::size_t> {
    if (work.correlation != 0) {
      const auto launch = std::lower_bound(launches.begin(), launches.end(), std::make_pair(work.correlation, INT64_MIN));
      if (launch != launches.end() && launch->first == work.correlation) return host_step(launch->second);
    }
    if (work.external_id != 0)
      if (const auto op = op_start_of_id.find(work.external_id); op != op_start_of_id.end()) return host_step(op->second);
    return device_step(work.start_ns);
  };
  const AnalysisOptions options;
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel) continue;
    const std::optional<std::size_t> step = step_of_work(work);
    if (!step) continue;
    ++result.kernels_by_type[*step][static_cast<std::size_t>(kernel_type(trace.names[work.name], options))];
    if (!is_device_key(key)) continue;
    const std::string_view name = trace.names[work.name];
    KeyFigures& figures = samples_of(key == SampleKey::Kernel ? std::string(name) : short_kernel_name(name)).steps[*step];
    ++figures.calls;
    figures.gpu_self_ns += work.duration_ns();
    figures.gpu_total_ns += work.duration_ns();
  }

  // Ops and ranges, measured as key_averages measures them.
  std::unordered_map<std::uint64_t, std::size_t> collective_of_op;  // thread << 40 ^ start: CollectiveCall index
  if (key == SampleKey::Collective)
    for (std::size_t i = 0; i < trace.collectives.size(); ++i)
      collective_of_op.emplace((std::uint64_t{trace.collectives[i].thread} << 40) ^ static_cast<std::uint64_t>(trace.collectives[i].start_ns), i);
  std::unordered_map<std::uint32_t, std::string> call_site_of_stack;
  const auto call_site = [&](std::uint32_t stack) -> const std::string& {
    const auto [found, added] = call_site_of_stack.try_emplace(stack);
    if (!added || stack == TraceEvent::kNoStack || stack >= trace.stacks.size()) return found->second;
    const CallStack& frames = trace.stacks[stack];
    std::size_t kept = 0;
    for (std::uint32_t f = 0; f < frames.depth && kept < call_site_frames; ++f) {
      std::string text = frame_text(trace, trace.stack_frames[frames.first + f]);
      if (is_library_frame(text)) continue;
      (found->second += kept == 0 ? " at " : " < ") += text;
      ++kept;
    }
    return found->second;
  };
  dlprof::detail::for_each_measured_slice(trace, [&](const dlprof::detail::MeasuredSlice& slice) {
    const TraceEvent& event = trace.events[slice.event];
    const std::optional<std::size_t> step = host_step(event.start_ns);
    if (!step) return;
    result.steps[*step].flops += slice.flops;  // whatever the key
    if (is_device_key(key)) return;
    const std::string_view name = trace.names[event.name];
    std::string key_name;
    switch (key) {
      case SampleKey::Op: key_name = detail::step_free_name(name); break;
      case SampleKey::OpAndShapes:
        key_name = detail::step_free_name(name);
        if (event.inputs != TraceEvent::kNoInputs) (key_name += ' ') += trace.names[trace.op_inputs[event.inputs].dims];
        break;
      case SampleKey::Module:
        if (!dlprof::detail::is_module_name(name)) return;
        key_name = std::string(name);
        break;
      case SampleKey::CallSite: key_name = detail::step_free_name(name) + call_site(event.stack); break;
      case SampleKey::Collective: {
        const auto collective =
            collective_of_op.find((std::uint64_t{event.thread} << 40) ^ static_cast<std::uint64_t>(event.start_ns));
        if (collective == collective_of_op.end()) return;
        key_name = detail::collective_key(trace.collectives[collective->second]);
        break;
      }
      case SampleKey::Kernel:
      case SampleKey::KernelShortName: return;
    }
    KeyFigures& figures = samples_of(std::move(key_name)).steps[*step];
    ++figures.calls;
    figures.total_ns += event.duration_ns();
    figures.self_ns += slice.self_ns;
    figures.gpu_self_ns += slice.gpu_self_ns;
    figures.gpu_total_ns += slice.gpu_total_ns;
    figures.self_cpu_memory_bytes += slice.memory.self_cpu_bytes;
    figures.self_device_memory_bytes += slice.memory.self_device_bytes;
  });
  return result;
}

/// Several runs of one side as one: their steps one after another, each key's figures where its
/// run had it and zero in the steps of runs without it. What a run describes of itself (devices,
/// data types, kernels by step, lost events) is joined or summed.
inline StepSamples concatenate_runs(const std::vector<StepSamples>& runs) {
  StepSamples joined;
  if (runs.empty()) return joined;
  joined.key = runs.front().key;
  std::size_t total_steps = 0;
  for (const StepSamples& run : runs) total_steps += run.steps.size();
  std::unordered_map<std::string, std::size_t> index;
  std::size_t offset = 0;
  for (const StepSamples& run : runs) {
    joined.steps.insert(joined.steps.end(), run.steps.begin(), run.steps.end());
    for (const KeySamples& samples : run.keys) {
      auto [at, added] = index.emplace(samples.key, joined.keys.size());
      if (added) joined.keys.push_back(KeySamples{samples.key, std::vector<KeyFigures>(total_steps)});
      std::copy(samples.steps.begin(), samples.steps.end(), joined.keys[at->second].steps.begin() + static_cast<std::ptrdiff_t>(offset));
    }
    offset += run.steps.size();
    for (const std::string& device : run.devices)
      if (std::find(joined.devices.begin(), joined.devices.end(), device) == joined.devices.end()) joined.devices.push_back(device);
    joined.dtypes.insert(run.dtypes.begin(), run.dtypes.end());
    joined.world_size = std::max(joined.world_size, run.world_size);
    joined.kernels_by_type.insert(joined.kernels_by_type.end(), run.kernels_by_type.begin(), run.kernels_by_type.end());
    joined.dropped_events += run.dropped_events;
    joined.dropped_gpu_records += run.dropped_gpu_records;
    joined.overflowed_names += run.overflowed_names;
  }
  return joined;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
