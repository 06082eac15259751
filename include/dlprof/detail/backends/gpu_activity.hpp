// dlprof/detail/backends/gpu_activity.hpp: what the Profiler knows of a GPU backend, with no CUDA header
// in sight. The CUPTI backend (cupti.hpp) implements GpuBackend and registers itself here when a
// program includes it; a program that does not gets CPU-only traces.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// CUPTI's timestamps on dlprof's tick axis. When the backend hands CUPTI a timestamp callback
/// built from now_ticks(), every GPU timestamp is `origin.realtime_ns + (ticks - origin.ticks) *
/// ns_per_tick` and maps back to its ticks (to the nearest tick: a TSC tick is shorter than the
/// nanosecond CUPTI keeps), so GPU events go through the same window map as CPU events, land
/// within 1 ns of a CPU event read at the same tick, and a kernel can never appear before the
/// call that launched it. Without the
/// callback (older CUPTI), timestamps are CLOCK_REALTIME ns and are used as they are.
struct BackendClock {
  bool ticks = false;
  ClockSample origin{};
  double ns_per_tick = 1.0;

  std::int64_t to_ticks(std::int64_t timestamp) const noexcept {
    const double ticks_since = static_cast<double>(timestamp - origin.realtime_ns) / ns_per_tick;
    return origin.ticks + static_cast<std::int64_t>(ticks_since < 0 ? ticks_since - 0.5 : ticks_since + 0.5);
  }
  std::int64_t from_ticks(std::int64_t tick) const noexcept {
    const double ns_since = static_cast<double>(tick - origin.ticks) * ns_per_tick;
    return origin.realtime_ns + static_cast<std::int64_t>(ns_since < 0 ? ns_since - 0.5 : ns_since + 0.5);
  }
};

/// CUPTI's record of an API call made while an external id was on the stack.
struct ExternalCorrelation {
  std::uint32_t correlation = 0;
  std::uint64_t external_id = 0;
};

/// A device allocation or release before its thread and running total are known.
struct RawMemoryEvent {
  std::int64_t timestamp = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;  ///< negative for a release
  std::uint32_t device = 0;
  std::uint32_t correlation = 0;
};

/// The scope open on the thread that captured a CUDA graph node (or added it to a graph): what
/// the work the node replays is attributed to. Copied out of the scope, so it outlives it.
struct GraphNodeCapture {
  std::uint64_t node = 0;  ///< CUPTI's graph node id, as work records carry it
  std::uint64_t name = 0;  ///< CorrelatedScope::name
  FormatArguments arguments{{0, 0}, 0};  ///< a DLPROF_RANGE_F's kept arguments, where has_arguments
  std::uint32_t stack = 0;               ///< StackId; 0: none
  RecordKind kind = RecordKind::Range;
  bool has_arguments = false;
};

/// The records of one window as a backend hands them over: timestamps on the backend's clock,
/// names as indices into `names`, ApiEvent::thread holding the OS thread id, external ids not
/// yet resolved (`external_correlations` resolves them).
struct DeviceActivity {
  std::vector<GpuEvent> gpu;
  std::vector<ApiEvent> api;
  std::vector<RawMemoryEvent> memory;
  std::vector<OverheadEvent> overhead;
  std::vector<DeviceCounterSample> device_counters;  ///< on the backend's clock, as the records
  std::vector<ExternalCorrelation> external_correlations;
  /// Of the graph nodes whose work is in `gpu`, those captured while dlprof correlated.
  std::vector<GraphNodeCapture> graph_node_captures;
  std::vector<std::string> names;
  std::vector<DeviceProperties> devices;
  BackendClock clock;
  GpuCollectionStats stats;
};

/// Translated GPU records one window holds by default (about 150 bytes each, allocated as they
/// arrive); more are dropped and counted.
inline constexpr std::size_t kDefaultGpuRecordsPerWindow = std::size_t{1} << 20;

/// What a backend is asked to collect.
struct GpuCollectionOptions {
  bool profile_memory = false;  ///< device allocations and releases too
  std::size_t max_records_per_window = kDefaultGpuRecordsPerWindow;
  /// A window holding max_records_per_window drops its oldest records to make room for new ones
  /// (the flight recorder, which wants the last steps), rather than the new ones.
  bool keep_newest = false;
  /// How often the GPUs' clocks, power and clock limits are read (NVML) while a window records;
  /// zero: never.
  std::chrono::nanoseconds device_counter_period = std::chrono::milliseconds(20);
};

/// A source of GPU activity. The Profiler drives it from its state machine: enable() when a
/// window is prepared (warm-up included, so CUPTI's start-up cost stays out of recorded steps),
/// begin_window() when recording starts, end_window() when it stops, disable() when the schedule
/// goes idle. Called from the thread driving the Profiler.
class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  /// Turns collection on. False when it is unavailable: the backend has then warned once, naming
  /// the cause, and the Profiler records CPU activity only.
  virtual bool enable(const GpuCollectionOptions& options) = 0;
  virtual void disable() = 0;
  /// Discards the records collected so far (warm-up): the window starts now.
  virtual void begin_window() = 0;
  /// Waits for the GPU work launched so far, flushes CUPTI's buffers and hands over the window.
  virtual DeviceActivity end_window() = 0;
  /// Forgets the window's records that ended before `tick` (now_ticks() axis): the flight
  /// recorder's steps that gave way. Records still in CUPTI's buffers are forgotten when they
  /// arrive.
  virtual void discard_before(std::int64_t tick) = 0;
};

/// The backend of this program, registered by cupti.hpp; null in a CPU-only program.
using GpuBackendAccessor = GpuBackend& (*)();
inline std::atomic<GpuBackendAccessor> g_gpu_backend{nullptr};

}  // namespace detail
DLPROF_END_NAMESPACE
