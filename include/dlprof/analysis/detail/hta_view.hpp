// dlprof/analysis/detail/hta_view.hpp: the GPU work and CUDA API calls of a trace as HTA's
// analyses see them once HTA has loaded the trace (hta/common/trace.py, trace_parser.py):
// filtered to the analysed steps and, in HTA-compatible mode, rounded to whole µs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/detail/per_name.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis::detail {

/// A GPU event (kernel, copy, fill or sync; never a gpu_user_annotation, which HTA sees as a CPU
/// event without a stream) with the times the analyses use.
struct GpuWork {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  const GpuEvent* event = nullptr;

  /// A CPU slice that names a stream, which HTA takes for GPU work (hta_compat only): `event` is
  /// its stand-in, a kernel of the slice's name and stream.
  bool cpu_slice = false;

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
  /// HTA's `stream != -1`: what most of its analyses take as the GPU's work.
  bool on_stream() const noexcept { return event->stream != -1; }
};

struct ApiCall {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  const ApiEvent* event = nullptr;

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// The analysed CPU slices that name a GPU stream (Trace::cpu_slices_on_streams): HTA counts
/// their CPU time as GPU time.
struct CpuSlicesOnStreams {
  std::size_t count = 0;
  std::int64_t total_ns = 0;  ///< their summed durations
  bool counted_as_gpu_work = false;  ///< hta_compat: the analyses count them as HTA does
};

/// Moved, never copied: `gpu` points into `cpu_slices_as_kernels`.
struct HtaView {
  std::vector<GpuWork> gpu;  ///< in the Trace's order (device, stream, start), then the CPU slices on streams
  std::vector<ApiCall> api;  ///< in the Trace's order (thread, start)
  std::vector<GpuEvent> cpu_slices_as_kernels;  ///< hta_compat: stand-ins of the CPU slices on streams
  CpuSlicesOnStreams cpu_slices_on_streams;
  bool hta_compat = false;  ///< HTA's kernel types (kernel_type.hpp) and rounding

  HtaView() = default;
  HtaView(HtaView&&) = default;
  HtaView& operator=(HtaView&&) = default;
  HtaView(const HtaView&) = delete;
  HtaView& operator=(const HtaView&) = delete;
};

/// HTA's rounding of fractional µs timestamps: start = ceil(ts), end = floor(ts + dur), on the
/// doubles Python reads from the file's numbers, added as pandas adds them. The file's numbers
/// count from its time base (Trace::file_time_base_ns; dlprof's writer uses Kineto's
/// baseTimeNanoseconds), and at epoch µs (traces before 2024) a double is only good to 0.25 µs:
/// HTA rounds those coarse values, and so does this.
class RoundInward {
 public:
  explicit RoundInward(const Trace& trace)
      : base_ns_(trace.file_time_base_ns ? *trace.file_time_base_ns
                                         : dlprof::detail::chrome_trace_base_time_ns(trace.window_start_ns)) {}

  std::int64_t start(std::int64_t start_ns) const noexcept { return whole_us_ns(std::ceil(us(start_ns - base_ns_))); }
  std::int64_t end(std::int64_t start_ns, std::int64_t end_ns) const noexcept {
    return whole_us_ns(std::floor(us(start_ns - base_ns_) + us(end_ns - start_ns)));
  }

 private:
  /// The double nearest to ns / 1000 µs, as Python reads "1712195495505583.123": the whole µs are
  /// exact in a double, and adding the fraction rounds once.
  static double us(std::int64_t ns) noexcept {
    std::int64_t whole = ns / 1000;
    std::int64_t fraction = ns % 1000;
    if (fraction < 0) {
      --whole;
      fraction += 1000;
    }
    return static_cast<double>(whole) + static_cast<double>(fraction) / 1000.0;
  }
  std::int64_t whole_us_ns(double us) const noexcept { return static_cast<std::int64_t>(us) * 1000 + base_ns_; }

  std::int64_t base_ns_;
};

/// HTA's test for a step: the name contains "ProfilerStep" anywhere.
inline bool is_profiler_step_name(std::string_view name) noexcept {
  return name.find(kineto::name::kProfilerStep) != std::string_view::npos;
}

/// The analysed events: when the trace names two or more ProfilerSteps (HTA counts the distinct
/// names containing "ProfilerStep"), only CPU events starting before the last step's start
/// (hta_compat) or no later than its end (default) are kept, with the GPU work whose correlation
/// id is one of theirs (HTA's _filter_irrelevant_gpu_kernels). With hta_compat, times are rounded
/// inward first, as HTA's parser does, and the kept CPU slices that name a stream join the GPU
/// work, as HTA's `stream != -1` takes them; by default they are only counted.
inline HtaView hta_view(const Trace& trace, const AnalysisOptions& options) {
  const RoundInward round(trace);
  const auto start_of = [&](std::int64_t start_ns) { return options.hta_compat ? round.start(start_ns) : start_ns; };
  const auto end_of = [&](std::int64_t start_ns, std::int64_t end_ns) {
    return options.hta_compat ? round.end(start_ns, end_ns) : end_ns;
  };

  // HTA sees gpu_user_annotation spans as CPU events: a GPU-side ProfilerStep#N counts too.
  std::vector<std::int8_t> step_name(trace.names.size(), -1);  // -1: not looked at yet
  std::vector<std::string_view> used_step_names;
  std::int64_t last_step_start = INT64_MIN;
  std::int64_t last_step_end = INT64_MIN;
  const auto note_step = [&](std::uint32_t name, std::int64_t start_ns, std::int64_t end_ns) {
    if (step_name[name] < 0) step_name[name] = is_profiler_step_name(trace.names[name]);
    if (step_name[name] == 0) return;
    used_step_names.push_back(trace.names[name]);
    last_step_start = std::max(last_step_start, start_of(start_ns));
    last_step_end = std::max(last_step_end, end_of(start_ns, end_ns));
  };
  for (const TraceEvent& event : trace.events)
    if (is_slice(event.kind)) note_step(event.name, event.start_ns, event.end_ns);
  for (const GpuEvent& work : trace.gpu_events)
    if (work.kind == GpuEventKind::Annotation) note_step(work.name, work.start_ns, work.end_ns);
  std::sort(used_step_names.begin(), used_step_names.end());
  used_step_names.erase(std::unique(used_step_names.begin(), used_step_names.end()), used_step_names.end());
  const bool filter = used_step_names.size() >= 2;
  const auto cpu_kept = [&](std::int64_t start) {
    return !filter || (options.hta_compat ? start < last_step_start : start <= last_step_end);
  };

  HtaView view;
  view.api.reserve(trace.api_events.size());
  std::vector<std::uint32_t> kept_correlations;
  for (const ApiEvent& call : trace.api_events) {
    const std::int64_t start = start_of(call.start_ns);
    if (!cpu_kept(start)) continue;
    view.api.push_back({start, end_of(call.start_ns, call.end_ns), &call});
    if (filter && call.correlation != 0) kept_correlations.push_back(call.correlation);
  }
  std::sort(kept_correlations.begin(), kept_correlations.end());
  view.gpu.reserve(trace.gpu_events.size());
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Annotation) continue;
    if (filter && (work.correlation == 0 ||
                   !std::binary_search(kept_correlations.begin(), kept_correlations.end(), work.correlation)))
      continue;
    view.gpu.push_back({start_of(work.start_ns), end_of(work.start_ns, work.end_ns), &work});
  }
  view.cpu_slices_on_streams.counted_as_gpu_work = options.hta_compat;
  view.hta_compat = options.hta_compat;
  view.cpu_slices_as_kernels.reserve(trace.cpu_slices_on_streams.size());  // `gpu` points into it
  for (const CpuSliceOnStream& slice : trace.cpu_slices_on_streams) {
    const std::int64_t start = start_of(slice.start_ns);
    if (!cpu_kept(start)) continue;
    const std::int64_t end = end_of(slice.start_ns, slice.end_ns);
    ++view.cpu_slices_on_streams.count;
    view.cpu_slices_on_streams.total_ns += end - start;
    if (!options.hta_compat) continue;
    GpuEvent stand_in;
    stand_in.start_ns = slice.start_ns;
    stand_in.end_ns = slice.end_ns;
    stand_in.name = slice.name;
    stand_in.stream = slice.stream;
    view.cpu_slices_as_kernels.push_back(stand_in);
    view.gpu.push_back({start, end, &view.cpu_slices_as_kernels.back(), /*cpu_slice=*/true});
  }
  return view;
}

constexpr KernelType hta_kernel_type(std::string_view name) noexcept { return kernel_type(name); }
constexpr KernelType widened_kernel_type(std::string_view name) noexcept { return kernel_type(name, AnalysisOptions{}); }

/// The kernel type of each name of a trace: HTA's with hta_compat, else with every
/// communication kernel of kernel_type.hpp's list.
class KernelTypes : public PerName<KernelType> {
 public:
  KernelTypes(const Trace& trace, const HtaView& view)
      : PerName<KernelType>(trace, view.hta_compat ? hta_kernel_type : widened_kernel_type) {}
  KernelType of(const GpuEvent& work) { return (*this)(work.name); }
};

/// Walks the boundaries of several merged interval lists in time order, as HTA's
/// cumulative-status tables do: list i adds `1 << i` to a running status while it is busy.
/// `segment(status, duration)` is called for every stretch between two boundaries where the
/// status is positive.
template <class Segment>
void sweep(const std::vector<const std::vector<Interval>*>& lists, Segment&& segment) {
  struct Boundary {
    std::int64_t time;
    std::int64_t delta;
  };
  std::vector<Boundary> boundaries;
  for (std::size_t i = 0; i < lists.size(); ++i) {
    const std::int64_t bit = std::int64_t{1} << i;
    for (const Interval& interval : *lists[i]) {
      boundaries.push_back({interval.start, bit});
      boundaries.push_back({interval.end, -bit});
    }
  }
  std::sort(boundaries.begin(), boundaries.end(), [](const Boundary& a, const Boundary& b) {
    return a.time != b.time ? a.time < b.time : a.delta < b.delta;
  });
  std::int64_t status = 0;
  for (std::size_t i = 0; i + 1 < boundaries.size(); ++i) {
    status += boundaries[i].delta;
    if (status > 0) segment(status, boundaries[i + 1].time - boundaries[i].time);
  }
}

}  // namespace analysis::detail
DLPROF_END_NAMESPACE
