// dlprof/detail/window/closed_window.hpp: what a closed recording window holds, taken on the
// training thread (window_recorder.hpp, flight_recorder.hpp), and its assembly into a Trace, one
// function of it alone, run on the writer thread (publisher.hpp).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/backends/thread_cpu_sampler.hpp"
#include "dlprof/detail/forward_ops.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/window/assemble.hpp"
#include "dlprof/detail/window/drain.hpp"
#include "dlprof/detail/window/gpu_merge.hpp"
#include "dlprof/distributed.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A closed window's events and what turning them into a Trace needs, taken on the training
/// thread so the trace can be built on another.
struct ClosedWindow {
  DrainedEvents drained;
  std::optional<DeviceActivity> device_activity;
  ThreadCpuReadings thread_cpu;
  ClockMap clock;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t overflowed_names = 0;
  std::uint64_t stackless_events = 0;  ///< with_stack: events recorded without theirs (stack table full)
  std::vector<LoadedModule> modules;   ///< with_stack: the process's modules as the window closed
  std::string clock_source;
  std::string flight_reason;  ///< a flight recorder's dump: why it was written
  bool record_shapes = false;  ///< the options it was recorded with
  bool profile_memory = false;
  bool with_flops = false;
  bool with_stack = false;
};

/// The trace of `window`: its events with the process's names, op costs where it was recorded
/// with FLOPs, its GPU activity joined to the ranges and ops that launched it, its threads' CPU
/// time, and this process's identity. `distributed_backend`: the Profiler's option, when given.
template <class Deferred = void>
std::shared_ptr<const Trace> assemble_window(ClosedWindow&& window, std::string_view distributed_backend) {
  auto trace = std::make_shared<Trace>(
      assemble_trace(std::move(window.drained), window.clock, window.start_ns, window.end_ns, InternedNames()));
  if (window.with_flops) estimate_op_costs(*trace);
  if (window.with_stack) inherit_forward_stacks(*trace);
  const auto pushed_to_trace = assign_external_ids(*trace);
  if (window.device_activity) {
    const std::vector<GraphNodeCapture> captures = std::move(window.device_activity->graph_node_captures);
    merge_device_activity(*trace, std::move(*window.device_activity), window.clock, pushed_to_trace);
    attribute_graph_replays(*trace, captures, InternedNames());
  }
  add_thread_cpu(*trace, std::move(window.thread_cpu), window.clock);
  trace->pid = static_cast<std::int64_t>(::getpid());
  trace->process_name = process_name();
  trace->clock_source = std::move(window.clock_source);
  trace->overflowed_names = window.overflowed_names;
  trace->stackless_events = window.stackless_events;
  trace->modules = std::move(window.modules);
  trace->distributed = distributed_info_of_this_process();
  if (!distributed_backend.empty()) trace->distributed.backend = std::string(distributed_backend);
  if (window.record_shapes) trace->metadata.emplace_back("record_shapes", "1");
  if (window.profile_memory) trace->metadata.emplace_back("profile_memory", "1");
  if (window.with_flops) trace->metadata.emplace_back("with_flops", "1");
  if (window.with_stack) trace->metadata.emplace_back("with_stack", "1");
  trace->flight_recorder_dump = std::move(window.flight_reason);
  return trace;
}

}  // namespace detail
DLPROF_END_NAMESPACE
