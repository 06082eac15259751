// dlprof/analysis/idle_time_breakdown.hpp: why each stream sat idle between two pieces of work, as
// Holistic Trace Analysis's get_idle_time_breakdown says (breakdown_analysis.py):
//
// On each stream, the kernels, copies and fills (not syncs) in start order; each gap between one
// and the previous one's end is
//   host wait     when the work's launch call started after the previous work ended: the CPU
//                 was not launching fast enough;
//   kernel wait   otherwise, when the gap is shorter than consecutive_kernel_delay (30 µs): the
//                 cost of launching back-to-back work;
//   other         otherwise (waits on events, other streams, synchronisation).
// Work without a launch call in the trace is never host wait.
//
// Two deviations (kHtaDeviations), in both modes:
// - Work that starts before the work before it on the stream has ended (ROCm's traces have
//   such timestamps) follows no gap: HTA subtracts the previous end from its start and adds the
//   negative difference to kernel wait, which gives negative wait and idle times. Here the gap
//   is measured from the latest end so far, and the time such work runs alongside earlier work
//   is counted apart (overlaps, overlap_ns).
// - HTA groups by stream number alone; streams are kept apart by device here too, which changes
//   nothing for the one-GPU-per-rank traces HTA expects.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct StreamIdleTime {
  std::uint32_t device = 0;
  std::int64_t stream = 0;
  std::int64_t host_wait_ns = 0;
  std::int64_t kernel_wait_ns = 0;
  std::int64_t other_ns = 0;
  /// Work that started before earlier work on the stream ended, and the time it ran alongside it:
  /// not idle time.
  std::size_t overlaps = 0;
  std::int64_t overlap_ns = 0;

  std::int64_t idle_ns() const noexcept { return host_wait_ns + kernel_wait_ns + other_ns; }
  /// Shares of this stream's idle time, HTA's idle_time_ratio.
  double host_wait_ratio() const noexcept { return ratio(host_wait_ns); }
  double kernel_wait_ratio() const noexcept { return ratio(kernel_wait_ns); }
  double other_ratio() const noexcept { return ratio(other_ns); }

 private:
  double ratio(std::int64_t ns) const noexcept {
    return idle_ns() == 0 ? 0.0 : static_cast<double>(ns) / static_cast<double>(idle_ns());
  }
};

struct IdleTimeBreakdown {
  std::vector<StreamIdleTime> streams;  ///< by device, then stream

  std::string table() const {
    fmt::memory_buffer out;
    auto line = std::back_inserter(out);
    fmt::format_to(line, "{:>6} {:>8} {:>16} {:>16} {:>16}\n", "Device", "Stream", "Host wait (us)", "Kernel wait (us)",
                   "Other (us)");
    for (const StreamIdleTime& stream : streams) {
      fmt::format_to(line, "{:>6} {:>8} {:>16.3f} {:>16.3f} {:>16.3f}\n", stream.device, stream.stream,
                     stream.host_wait_ns / 1e3, stream.kernel_wait_ns / 1e3, stream.other_ns / 1e3);
      if (stream.overlaps != 0)
        fmt::format_to(line, "{:>6} {:>8} {} piece{} of work started before earlier work on the stream ended ({:.3f} us "
                       "alongside it)\n",
                       "", "", stream.overlaps, stream.overlaps == 1 ? "" : "s", stream.overlap_ns / 1e3);
    }
    return fmt::to_string(out);
  }
};

namespace detail {

inline IdleTimeBreakdown idle_time_breakdown(const HtaView& view, const AnalysisOptions& options) {
  // Launch call start by correlation id, among the analysed calls.
  std::vector<std::pair<std::uint32_t, std::int64_t>> launch_start;
  launch_start.reserve(view.api.size());
  for (const ApiCall& call : view.api)
    if (call.event->correlation != 0) launch_start.emplace_back(call.event->correlation, call.start_ns);
  std::sort(launch_start.begin(), launch_start.end());

  std::vector<const GpuWork*> work;
  for (const GpuWork& item : view.gpu)
    if (item.on_stream() && !item.cpu_slice && item.event->kind != GpuEventKind::Sync &&
        item.event->kind != GpuEventKind::Annotation)
      work.push_back(&item);
  dlprof::detail::stable_sort_runs(work.begin(), work.end(), [](const GpuWork* a, const GpuWork* b) {
    if (a->event->device != b->event->device) return a->event->device < b->event->device;
    if (a->event->stream != b->event->stream) return a->event->stream < b->event->stream;
    return a->start_ns < b->start_ns;
  });

  IdleTimeBreakdown result;
  std::int64_t latest_end = 0;  // of the stream's work so far
  for (std::size_t i = 0; i < work.size(); ++i) {
    const GpuEvent& event = *work[i]->event;
    const bool new_stream = i == 0 || work[i - 1]->event->device != event.device || work[i - 1]->event->stream != event.stream;
    if (new_stream) {
      result.streams.push_back({event.device, event.stream});
      latest_end = work[i]->end_ns;
      continue;  // the first work of a stream follows no gap
    }
    StreamIdleTime& stream = result.streams.back();
    const std::int64_t previous_end = latest_end;
    latest_end = std::max(latest_end, work[i]->end_ns);
    const std::int64_t gap = work[i]->start_ns - previous_end;
    if (gap < 0) {
      ++stream.overlaps;
      stream.overlap_ns += std::min(previous_end, work[i]->end_ns) - work[i]->start_ns;
      continue;
    }
    const auto launch = std::lower_bound(launch_start.begin(), launch_start.end(),
                                         std::pair<std::uint32_t, std::int64_t>{event.correlation, INT64_MIN});
    const bool launched_after_previous_end = event.correlation != 0 && launch != launch_start.end() &&
                                             launch->first == event.correlation && launch->second > previous_end;
    if (launched_after_previous_end) {
      stream.host_wait_ns += gap;
    } else if (gap < options.consecutive_kernel_delay_ns) {
      stream.kernel_wait_ns += gap;
    } else {
      stream.other_ns += gap;
    }
  }
  return result;
}

}  // namespace detail

/// The idle-time breakdown of every stream of one rank's trace.
inline IdleTimeBreakdown idle_time_breakdown(const Trace& trace, const AnalysisOptions& options = {}) {
  return detail::idle_time_breakdown(detail::hta_view(trace, options), options);
}

}  // namespace analysis
DLPROF_END_NAMESPACE
