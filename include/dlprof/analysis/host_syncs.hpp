// dlprof/analysis/host_syncs.hpp: where the host waits for the GPU inside the steps, what the
// waiting costs, and which line of code asked for it.
//
// A synchronisation point is one of:
//   explicit     a call that waits for the GPU: cudaDeviceSynchronize, cudaStreamSynchronize,
//                cudaEventSynchronize (cudaThreadSynchronize, HIP's and the driver's alike);
//   scalar read  aten::item, aten::_local_scalar_dense or aten::is_nonzero (Python's `if tensor:`)
//                with a wait inside: one point per outermost such op, its waits summed;
//   copy wait    a copy call (cudaMemcpy, a cudaMemcpyAsync into pageable memory, ...) whose time
//                exceeds its transfer, the copy's own GPU time, by kCopyWaitRatio and
//                kMinCopyWaitNs: the host waited for the work queued before the copy, it did not
//                transfer. The copy rules of recommendations.hpp count only the transfer of such
//                a copy.
//
// A point's wait is the time its calls spend waiting: an explicit call's whole duration, a copy
// call's time less its transfer. The GPU idle after it runs from the wait's end to the next GPU
// work of its device (every device where the trace does not say which), when none runs then. Its
// saving is the lesser of the two: without the point the host would have gone on to launch the
// next work while the GPU ran what it waited for, closing at most the idle time after it.
//
// A point is named by the outermost op around it (the call the user made; for a scalar read, the
// scalar read) and by the innermost Python frame of the user's code around it (torch.profiler's
// with_stack: frames of torch's own files, built-ins and module frames passed over), else the
// innermost range around it. Only points that start within the steps count (the whole window in a
// trace without steps).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

enum class SyncKind : std::uint8_t { Explicit, ScalarRead, CopyWait };
inline constexpr std::size_t kSyncKindCount = 3;

/// The JSON's name of a kind.
constexpr std::string_view id_of(SyncKind kind) noexcept {
  switch (kind) {
    case SyncKind::Explicit: return "explicit";
    case SyncKind::ScalarRead: return "scalar_read";
    case SyncKind::CopyWait: return "copy_wait";
  }
  return "explicit";
}

/// The text's name of a kind.
constexpr std::string_view to_string(SyncKind kind) noexcept {
  switch (kind) {
    case SyncKind::Explicit: return "synchronize call";
    case SyncKind::ScalarRead: return "scalar read";
    case SyncKind::CopyWait: return "copy that waits";
  }
  return "synchronize call";
}

/// A copy call is a wait when its time exceeds its transfer by this factor...
inline constexpr double kCopyWaitRatio = 3.0;
/// ...and by at least this much: staging a pageable copy or the launch alone takes less.
inline constexpr std::int64_t kMinCopyWaitNs = 50'000;

/// The time a copy call of `call_ns` spent waiting for the GPU, its copy having taken
/// `transfer_ns` on the GPU; 0 for a copy that did not wait (its time was the transfer's).
constexpr std::int64_t copy_wait_ns(std::int64_t call_ns, std::int64_t transfer_ns) noexcept {
  const std::int64_t excess = call_ns - std::max<std::int64_t>(transfer_ns, 0);
  return excess >= kMinCopyWaitNs && static_cast<double>(call_ns) >= kCopyWaitRatio * static_cast<double>(transfer_ns)
             ? excess
             : 0;
}

/// The synchronisation points of one kind, op and place in the code.
struct SyncSite {
  SyncKind kind = SyncKind::Explicit;
  std::string_view op;     ///< the outermost op around it (a scalar read: the scalar read); empty if none
  std::string_view frame;  ///< the innermost Python frame of the user's code around it; empty if none
  std::string_view range;  ///< the innermost range around it; empty if none
  std::string_view call;   ///< the call of its longest wait, e.g. "cudaStreamSynchronize"
  std::size_t count = 0;
  std::int64_t wait_ns = 0;
  std::int64_t gpu_idle_after_ns = 0;
  std::int64_t saving_ns = 0;  ///< the lesser of each point's wait and the GPU idle after it, summed
  std::int64_t longest_wait_ns = 0;
  std::uint64_t longest_wait_bytes = 0;  ///< a copy wait: the bytes of the copy of its longest wait

  /// Where in the code: the frame, else the range; empty when neither is known.
  std::string_view place() const noexcept { return frame.empty() ? range : frame; }
};

struct HostSyncs {
  std::vector<SyncSite> sites;  ///< by saving, then wait, descending
  std::size_t points = 0;
  std::int64_t wait_ns = 0;
  std::int64_t saving_ns = 0;

  bool empty() const noexcept { return sites.empty(); }
};

namespace detail {

inline bool is_synchronize_call(std::string_view call) noexcept {
  using dlprof::detail::starts_with;
  constexpr std::string_view kCalls[] = {
      "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
      "hipDeviceSynchronize",  "hipStreamSynchronize",  "hipEventSynchronize",  "cuCtxSynchronize",
      "cuStreamSynchronize",   "cuEventSynchronize"};
  for (const std::string_view name : kCalls)
    if (starts_with(call, name)) return true;
  return false;
}

/// cudaMemcpy*, hipMemcpy*, the driver's cuMemcpy*.
inline bool is_copy_call(std::string_view call) noexcept {
  using dlprof::detail::starts_with;
  return starts_with(call, "cudaMemcpy") || starts_with(call, "hipMemcpy") || starts_with(call, "cuMemcpy");
}

inline bool is_scalar_read(std::string_view op) noexcept {
  return op == "aten::item" || op == "aten::_local_scalar_dense" || op == "aten::is_nonzero";
}

/// A point being gathered: the calls of one scalar read, or one call.
struct SyncPoint {
  SyncKind kind = SyncKind::Explicit;
  std::uint32_t anchor = SliceTree::kNone;  ///< the innermost slice around its first call
  std::uint32_t op = SliceTree::kNone;
  std::int64_t wait_ns = 0;
  std::int64_t end_ns = 0;  ///< when its last wait ended
  std::int64_t device = -1;  ///< -1: not known
  std::uint32_t call = 0;    ///< the name of its longest-waiting call
  std::int64_t longest_wait_ns = 0;
  std::uint64_t longest_wait_bytes = 0;
};

}  // namespace detail

/// The synchronisation points of a trace's steps, gathered by kind, op and place in the code.
inline HostSyncs host_syncs(const Trace& trace) {
  HostSyncs out;
  if (trace.api_events.empty()) return out;
  std::int64_t span_start = INT64_MAX, span_end = INT64_MIN;
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Step) {
      span_start = std::min(span_start, event.start_ns);
      span_end = std::max(span_end, event.end_ns);
    }
  if (span_start > span_end) {
    span_start = trace.window_start_ns;
    span_end = trace.window_end_ns;
  }

  // The GPU work each call issued (copies, and the cuda_sync records that give a synchronize
  // call's device), and each device's busy time.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> work_of_correlation;  // (correlation, gpu_events index)
  std::int64_t devices = 0;
  for (std::uint32_t i = 0; i < trace.gpu_events.size(); ++i) {
    const GpuEvent& work = trace.gpu_events[i];
    devices = std::max<std::int64_t>(devices, static_cast<std::int64_t>(work.device) + 1);
    if (work.correlation != 0 && work.kind != GpuEventKind::Kernel && work.kind != GpuEventKind::Annotation)
      work_of_correlation.emplace_back(work.correlation, i);
  }
  dlprof::detail::stable_sort_runs(work_of_correlation.begin(), work_of_correlation.end(),
                                   [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto work_of = [&](std::uint32_t correlation) -> const GpuEvent* {
    if (correlation == 0) return nullptr;
    const auto found = std::lower_bound(work_of_correlation.begin(), work_of_correlation.end(), correlation,
                                        [](const auto& entry, std::uint32_t key) { return entry.first < key; });
    return found != work_of_correlation.end() && found->first == correlation ? &trace.gpu_events[found->second] : nullptr;
  };

  const detail::SliceTree tree(trace);
  std::vector<std::int8_t> class_of_name(trace.names.size(), -1);  // 0: other, 1: synchronize, 2: copy
  std::vector<std::int8_t> scalar_read_name(trace.names.size(), -1);
  const auto is_scalar_read_op = [&](const TraceEvent& event) {
    if (event.kind != EventKind::Op) return false;
    std::int8_t& known = scalar_read_name[event.name];
    if (known < 0) known = detail::is_scalar_read(trace.names[event.name]) ? 1 : 0;
    return known == 1;
  };
  std::vector<detail::SyncPoint> points;
  for (const ApiEvent& call : trace.api_events) {
    if (call.start_ns < span_start || call.start_ns > span_end) continue;
    std::int8_t& kind_of_call = class_of_name[call.name];
    if (kind_of_call < 0) {
      const std::string_view name = trace.names[call.name];
      kind_of_call = detail::is_synchronize_call(name) ? 1 : detail::is_copy_call(name) ? 2 : 0;
    }
    if (kind_of_call == 0) continue;
    const GpuEvent* work = work_of(call.correlation);
    std::int64_t wait = call.duration_ns();
    if (kind_of_call == 2) {
      if (work == nullptr || (work->kind != GpuEventKind::Memcpy && work->kind != GpuEventKind::MemcpyPeer)) continue;
      wait = copy_wait_ns(call.duration_ns(), work->duration_ns());
      if (wait == 0) continue;
    }
    const std::uint32_t anchor = tree.innermost_at(call.thread, call.start_ns);
    std::uint32_t scalar_read = detail::SliceTree::kNone, outermost_op = detail::SliceTree::kNone;
    for (std::uint32_t slice = anchor; slice != detail::SliceTree::kNone; slice = tree.parent(slice)) {
      const TraceEvent& event = trace.events[slice];
      if (event.kind != EventKind::Op) continue;
      outermost_op = slice;
      if (is_scalar_read_op(event)) scalar_read = slice;
    }
    // Calls are by thread, then start: the calls of one scalar read follow one another.
    detail::SyncPoint* point = nullptr;
    if (scalar_read != detail::SliceTree::kNone && !points.empty() && points.back().kind == SyncKind::ScalarRead &&
        points.back().op == scalar_read)
      point = &points.back();
    if (point == nullptr) {
      point = &points.emplace_back();
      point->kind = scalar_read != detail::SliceTree::kNone ? SyncKind::ScalarRead
                    : kind_of_call == 1                     ? SyncKind::Explicit
                                                            : SyncKind::CopyWait;
      point->anchor = anchor;
      point->op = scalar_read != detail::SliceTree::kNone ? scalar_read : outermost_op;
    }
    point->wait_ns += wait;
    point->end_ns = std::max(point->end_ns, call.end_ns);
    if (work != nullptr && point->device < 0) point->device = work->device;
    if (wait >= point->longest_wait_ns) {
      point->longest_wait_ns = wait;
      point->call = call.name;
      point->longest_wait_bytes = kind_of_call == 2 ? work->copy.bytes : 0;
    }
  }
  if (points.empty()) return out;

  // Each device's busy time (index `devices`: any device's), to measure the idle after each point.
  std::vector<std::vector<detail::Interval>> busy(static_cast<std::size_t>(devices) + 1);
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
    busy[work.device].push_back({work.start_ns, work.end_ns});
    busy.back().push_back({work.start_ns, work.end_ns});
  }
  for (std::vector<detail::Interval>& intervals : busy) detail::merge(intervals);
  const auto idle_after = [&](std::int64_t device, std::int64_t time) -> std::int64_t {
    const std::vector<detail::Interval>& intervals = busy[device < 0 ? busy.size() - 1 : static_cast<std::size_t>(device)];
    const auto next = std::upper_bound(intervals.begin(), intervals.end(), time,
                                       [](std::int64_t t, const detail::Interval& interval) { return t < interval.end; });
    if (next == intervals.end() || next->start <= time) return 0;  // nothing follows, or the GPU is busy
    return next->start - time;
  };

  // The innermost user frame and range of each point, then the points gathered into sites.
  const auto frame_and_range = [&](std::uint32_t anchor) {
    std::uint32_t user_frame = detail::SliceTree::kNone, any_frame = detail::SliceTree::kNone;
    std::uint32_t range = detail::SliceTree::kNone;
    for (std::uint32_t slice = anchor; slice != detail::SliceTree::kNone; slice = tree.parent(slice)) {
      const TraceEvent& event = trace.events[slice];
      if (event.kind == EventKind::Range && range == detail::SliceTree::kNone) range = slice;
      if (event.kind != EventKind::PythonFrame) continue;
      if (any_frame == detail::SliceTree::kNone) any_frame = slice;
      if (user_frame == detail::SliceTree::kNone && !is_library_frame(trace.names[event.name])) user_frame = slice;
    }
    const std::uint32_t frame = user_frame != detail::SliceTree::kNone ? user_frame : any_frame;
    const auto name = [&](std::uint32_t slice) {
      return slice == detail::SliceTree::kNone ? std::string_view{} : trace.name_of(trace.events[slice]);
    };
    return std::make_pair(name(frame), name(range));
  };
  using SiteKey = std::tuple<SyncKind, std::string_view, std::string_view, std::string_view, std::string_view>;
  std::map<SiteKey, SyncSite> sites;
  for (const detail::SyncPoint& point : points) {
    const auto [frame, range] = frame_and_range(point.anchor);
    const std::string_view op = point.op == detail::SliceTree::kNone ? std::string_view{} : trace.name_of(trace.events[point.op]);
    // A scalar read is the same site whichever calls it waited in.
    const std::string_view call = point.kind == SyncKind::ScalarRead ? std::string_view{} : trace.names[point.call];
    SyncSite& site = sites[SiteKey{point.kind, op, frame, range, call}];
    const std::int64_t idle = idle_after(point.device, point.end_ns);
    site.kind = point.kind;
    site.op = op;
    site.frame = frame;
    site.range = range;
    ++site.count;
    site.wait_ns += point.wait_ns;
    site.gpu_idle_after_ns += idle;
    site.saving_ns += std::min(point.wait_ns, idle);
    if (point.longest_wait_ns >= site.longest_wait_ns) {
      site.longest_wait_ns = point.longest_wait_ns;
      site.longest_wait_bytes = point.longest_wait_bytes;
      site.call = trace.names[point.call];
    }
    ++out.points;
    out.wait_ns += point.wait_ns;
    out.saving_ns += std::min(point.wait_ns, idle);
  }
  for (auto& entry : sites) out.sites.push_back(entry.second);
  std::stable_sort(out.sites.begin(), out.sites.end(), [](const SyncSite& a, const SyncSite& b) {
    return std::tie(a.saving_ns, a.wait_ns) > std::tie(b.saving_ns, b.wait_ns);
  });
  return out;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
