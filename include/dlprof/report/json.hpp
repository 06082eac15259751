// dlprof/report/json.hpp: the report as JSON, for scripts. Written with the trace writer's JSON
// text writer (format/json_text.hpp: strings escaped, control characters as \u00XX and invalid
// UTF-8 from a trace replaced by U+FFFD), so the header-only core needs no JSON library.
//
// Keys that stay (more may come): times in µs (`*_us`, exact to the ns), shares in % (`*_pct`),
// absent values null.
//   {"dlprof_version",
//    "schema_version": kReportSchemaVersion; docs/report.schema.json is its JSON Schema. A change
//                 that a reader of an earlier version would misread (a key renamed, removed or
//                 given another type or meaning) takes the next number; new keys do not,
//    "title", "hta_compat",
//    "tensorboard_deviations": [{"what", "why"}]: where the step breakdown and GPU summary depart
//                 from TensorBoard's rules on purpose,
//    "hta_deviations": [{"what", "why"}]: where the HTA-style analyses depart from HTA's,
//    "origin_us": the earliest window start of the ranks, µs since the epoch (step starts count
//                 from it),
//    "ranks": [{"rank", "world_size",
//      "flight_recorder_dump": null, or why a flight recorder wrote the trace,
//      "slow_step": null, or for a slow or hung step's dump {"step", "duration_us", "median_us" (of
//                   the other steps), "other_steps", "hung" (the step had not ended: its time
//                   is up to the dump), "grew": [{"key", "figure" ("self" or
//                   "gpu_self"), "slow_us", "median_us", "added"}]} (analysis/slow_step.hpp),
//      "read": {"skipped_events", "first_skip": null or {"offset", "reason"}, "ignored_values",
//               "notes": [text]},     what reading the file left out or changed (all 0 and empty
//                                     for a file read as written)
//      "temporal_breakdown": {"idle_us", "compute_us", "non_compute_us", "kernel_time_us",
//                             "idle_pct", "compute_pct", "non_compute_pct"},     HTA
//      "kernel_type_breakdown": [{"type", "time_us", "pct"}],                    HTA, longest first
//      "kernels_by_type": [{"type", "kernels": [{"name", "calls", "total_us", "mean_us", "min_us", "max_us"}]}],
//      "step_breakdown": [{"step", "number", "start_us", "total_us", "kernel_us", "memcpy_us",
//                          "memset_us", "communication_us", "runtime_us", "dataloader_us",
//                          "cpu_exec_us", "other_us"}],           TensorBoard's
//      "average_step": {"steps", "total_us", "<role>_us"..., "<role>_pct"...},
//      "gpu_utilization": mean over the rank's GPUs in % (null without kernels),
//      "matrix_units": "Tensor Cores", "matrix cores" on AMD's GPUs, "matrix units" on another
//                vendor's: what dlprof_tensor_core_pct and top_kernels' tensor_cores count (null
//                on another vendor's GPUs, whose kernels the list cannot judge),
//      "gpus": [{"device", "name" (null: unknown), "name_from_id" (null, or the deviceProperties id
//                whose model the name is, where deviceProperties lists none for this device),
//                "compute_capability", "utilization_pct", "sm_efficiency_pct",
//                "achieved_occupancy_pct" (null: unknown), "dlprof_tensor_core_pct" (dlprof's own
//                figure, not TensorBoard's), "kernel_us"}],
//      "idle_time_breakdown": [{"device", "stream", "idle_us", "host_wait_us", "kernel_wait_us", "other_us",
//                               "overlaps", "overlap_us"}]: overlaps, work that started before
//                               earlier work on the stream ended, and the time it ran alongside it,
//      "cpu_ops_on_streams": {"count", "total_us", "counted_as_gpu_work"}: CPU ops that name a GPU
//                stream (torch.compile's triton_* launches), which HTA counts as GPU computation
//                and dlprof only with hta_compat,
//      "comm_comp_overlap": {"communication_us", "computation_us", "overlap_us", "overlap_pct"},
//      "launch_stats": {"launches", "mean_cpu_duration_us", "mean_launch_delay_us",
//                       "max_launch_delay_us", "runtime_outliers", "launch_delay_outliers", "short_kernels"},
//      "device_memory_name": "CUDA" or "HIP" (null: no GPU allocations),
//      "top_ops": [{"name", "category", "calls", "self_cpu_us", "cpu_total_us", "self_gpu_us", "gpu_total_us",
//                "memory" and "memory_on_thread" (null without allocations): {"cpu_bytes", "self_cpu_bytes",
//                "device_bytes", "self_device_bytes"}: torch's memory columns, of every thread's allocations
//                inside the op and of its own thread's}]
//                (by self CPU time), "top_ops_by_gpu": [the same] (by self GPU time, those with some),
//                "top_ops_by_memory": [the same] (by self device memory, else self CPU memory, those with some),
//      "memory_by_op": [{"device_type" ("CPU", "CUDA", "HIP"), "device" (-1: the CPU), "ops_count", "outside_ops",
//                "ops": [{"name", "calls", "self_allocations", "allocations", "self_allocated_bytes",
//                "allocated_bytes", "self_size_increase", "size_increase"}] (by self allocated bytes, at most
//                top_rows)}]: per device, what each op allocated, as TensorBoard's memory view gives it
//                (analysis/memory_by_op.hpp); [] without allocations,
//      "memory_peaks": [{"device_type", "device", "allocated_bytes", "time_us" (from the report's origin), "step"
//                (null: outside every step), "phase" (forward, backward, optimizer step, data loading; null: none),
//                "site" (the op and module of the allocation that reached it), "by_category": {"parameters",
//                "gradients", "optimizer state", "activations", "temporaries", "inputs", "unknown"} (bytes),
//                "unseen_bytes", "uncounted_bytes", "by_site": [{"name", "bytes", "allocations"}], "by_line":
//                [the same], "largest": [{"bytes", "category", "step", "site", "line"}]}]: what was alive at each
//                device's peak (analysis/memory_peak.hpp), at most top_rows of each list; [] without allocations,
//      "out_of_memory": [{"requested_bytes", and a memory_peaks entry's members at the failure, "site" the op
//                that asked}]: the allocations the allocator could not make (LibTorch's out-of-memory reports),
//      "memory_growth": {"steps", "lag", "not_judged" (null: judged), "leak" (true: some memory grows),
//                "devices": [{"device_type", "device", "allocated_at_step_end": [bytes], "bytes_per_step",
//                "holders": [{"site", "line", "category", "allocations", "bytes", "steps", "bytes_per_step"}]}]}:
//                memory that grows step after step and what holds it (analysis/memory_leaks.hpp),
//      "memory_timeline": [{"device_type", "device", "categories": [names, in the order of each point's
//                "bytes"], "points": [{"time_us", "bytes": [per category], "reserved_bytes"}]}]: allocated
//                memory over time by category (analysis/memory_timeline.hpp), about 2000 points a device,
//      "idle_threads": [{"thread" (OS id), "name", "wait_us", "waits", "frame"}] (threads besides the
//                training loop's whose Python frames only wait, left out of top_ops),
//      "thread_cpu": {"steps": [step number, -1: the whole trace], "threads": [{"thread" (OS id),
//        "name", "role" (training, loader, other), "cpu_pct", "waiting_for_cpu_pct" (null: not known),
//        "blocked_pct", "cpu_us", "steps": [null (not read) or {"cpu_pct", "waiting_for_cpu_pct",
//        "blocked_pct"}]}] (at most top_rows), "training": null or {"thread", "cpu_us",
//        "waiting_for_cpu_us" (null: not known), "blocked_us", "waiting_for_data_us", "in_sync_us",
//        "blocked_elsewhere_us"} (over the steps), "loaders": null or {"threads", "mean_cpu_pct",
//        "busiest", "busiest_cpu_pct", "idlest", "idlest_cpu_pct"} (OS ids)}: each recording
//        thread's time on a CPU, waiting for one and blocked (analysis/thread_cpu.hpp),
//      "code_lines": {"lines", "ops_with_stacks", "ops_in_libraries", "self_cpu_us", "gpu_us",
//        "by_cpu": [{"line", "self_cpu_us", "gpu_us", "calls", "top_op", "top_kernel"}] (by self CPU
//        time, at most top_rows), "by_gpu": [the same] (by GPU time, those with some)}: the ops with
//        call stacks by the innermost frame of the user's code (analysis/call_stacks.hpp); {} without,
//      "cuda_graphs": {"gpu_us", "all_gpu_us", "launches", "work", "captured_work", "graphs":
//        [{"graph_id" (null: not named), "launched_from", "launches", "work", "nodes", "gpu_us",
//        "top_kernel", "captured_work", "captured_by", "captured_at" (null: not known)}] (by GPU
//        time, at most top_rows)}: the GPU work graphs replayed, and the ops that captured it
//        (analysis/cuda_graphs.hpp); {} without,
//      "top_kernels": [{"name", "short_name", "type", "tensor_cores", "calls", "total_us", "mean_us", "min_us", "max_us", "pct"}],
//      "limits": {"mfu": null or {"utilization_pct", "achieved_tflops", "peak_tflops", "precision",
//        "matrix_units", "devices", "flops", "span_us", "unknown_ops"} (over the steps),
//        "devices": [{"device", "name", "peaks" (null: none known)}],
//        "clocks": [{"device", "readings", "mean_sm_mhz", "min_sm_mhz", "max_sm_mhz", "boost_mhz" (null:
//          unknown), "clock_share_pct", "power_limited_pct", "temperature_limited_pct",
//          "otherwise_limited_pct", "mean_power_w" (each null: not read)}] (NVML's, over the steps),
//        "unknown_device_us",
//        "ops": [{"op", "input_dims", "input_types", "device", "precision", "matrix_units", "calls",
//          "kernels", "kernel_us", "flops", "bytes" (null: unknown), "tflops", "tb_per_s",
//          "intensity", "peak_tflops", "memory_tb_per_s", "bound" (compute, memory, unknown),
//          "efficiency_pct", "at_clock_pct", "mamf_pct" (null: none), "time_lost_us",
//          "above_roof" (null, or the roof a figure passed: a counting error), "cache_resident"}]
//        (by time lost, at most top_rows)},
//      "gpu_activities", "api_calls": [{"name", "calls", "total_us", "pct", "mean_us", "min_us", "max_us"}],
//      "memory": [{"device", "peak_allocated_bytes", "capacity_bytes"}],
//      "host_syncs": {"points", "wait_us", "saving_us", "sites": [{"kind" (explicit, scalar_read,
//        copy_wait), "op", "frame", "range" (null: none around it), "call", "count", "wait_us",
//        "gpu_idle_after_us", "saving_us", "longest_wait_us", "longest_wait_bytes"}]}: where the host
//        waits for the GPU in the steps (analysis/host_syncs.hpp), over the window, at most top_rows sites,
//      "dropped_events", "dropped_gpu_records", "overflowed_names"}],
//    "rank_comparison": null or {"ranks": [{"rank", "steps", "step_time_mean_us", "step_time_min_us",
//        "step_time_max_us", "gpu_utilization_pct", "idle_pct", "compute_pct", "non_compute_pct",
//        "overlap_pct"}],
//      "stragglers": [{"step", "ranks", "slowest_rank", "slowest_us", "median_us", "fastest_rank",
//        "fastest_us", "slowest_over_median_pct", "slowest_over_fastest_pct"}]},
//    "slow_rank": null or {"rank", "median_rank", "straggler" (the rank the others wait for),
//        "step_delta_us", "keys": [{"key", "figure", "delta_us", "p_value"}]}: the slowest rank
//        against the median rank, by the ops that take it longer a step (make_report.hpp),
//    "collectives": null or {"problems": [text],
//      "ranks": [{"rank", "steps", "step_us", "compute_us", "communication_us", "waiting_us",
//        "transfer_us", "exposed_communication_us", "data_loading_us", "forward_us", "backward_us",
//        "optimizer_us", "last_arrivals", "lateness_us"}] (per step on average),
//      "types": [{"name", "calls", "bytes" (0: unknown), "transfer_us", "latency_us" (per call),
//        "algbw_gbps", "busbw_gbps" (null: sizes unknown), "mean_waiting_us" (per call of a rank),
//        "mean_skew_us", "max_skew_us"}],
//      "instances": [{"group", "seq", "name", "step", "ranks", "bytes", "first_arrival_us", "skew_us",
//        "last_rank", "transfer_us", "waiting_us" (over the ranks)}],
//      "straggler": null or {"rank", "last_arrivals", "instances", "mean_lateness_us", "held_back_us"
//        (per step), "phase" (null: none longer than the others'), "phase_us", "others_median_phase_us"}},
//    "verdict": {"bound" (gpu_compute, communication_wait, memory_copies, input, host, no_steps),
//      "bound_pct", "steps", "median_step_us", "mean_step_us", "gpu_busy_pct" (null without kernels),
//      "mfu_pct" (the ranks' mean model FLOP utilization; null without FLOP counts or peaks),
//      of the steady steps while any is (analysis/steady_state.hpp), "all_flagged" (none is: of every
//      step), "left_out": [{"rank", "step" (null: the whole trace), "reason" (first_calls, outlier,
//      mid_flight), "time_us" (the first calls', the step's, the GPU work's from before the window),
//      "ratio_to_median" (outliers, else null), "calls": [{"name", "duration_us"}]}],
//      "top_actions": [{"id", "action", "impact_us", "share_pct", "worst_rank"}], "why" (where no
//      action saves time and there are steps: what keeps the step healthy, in a sentence; else null)},
//    "recommendations": [{"id", "text", "evidence", "action", "impact_us" (per step; 0 for a risk or
//      a note), "share_pct" (of the median step), "severity" (high, medium, low, risk, note),
//      "ranks", "worst_rank"}] (ranked by impact)}
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/analysis.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/json_text.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/limits.hpp"
#include "dlprof/report/detail/thread_cpu_section.hpp"
#include "dlprof/report/detail/text.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE

/// The version of the report's JSON (its key "schema_version"), which docs/report.schema.json
/// describes.
inline constexpr std::int64_t kReportSchemaVersion = 1;

namespace detail {

/// Indented JSON: objects and arrays with their commas, one member or element a line.
class JsonTree {
 public:
  explicit JsonTree(fmt::memory_buffer& out) : out_(out), json_(out) {}

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }

  /// The next value is this member of the enclosing object.
  void key(std::string_view name) {
    next_element();
    json_.string(name);
    json_.raw(": ");
    after_key_ = true;
  }

  void string(std::string_view text) {
    value_position();
    json_.string(text);
  }
  void integer(std::int64_t value) {
    value_position();
    json_.integer(value);
  }
  void boolean(bool value) {
    value_position();
    json_.raw(value ? "true" : "false");
  }
  void null() {
    value_position();
    json_.raw("null");
  }
  /// A finite number in its shortest exact form; NaN and infinities become null.
  void number(double value) {
    value_position();
    json_.number(value);
  }
  /// Nanoseconds as µs, exactly: three decimals.
  void microseconds(std::int64_t ns) {
    value_position();
    const std::uint64_t magnitude = ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
    fmt::format_to(std::back_inserter(out_), "{}{}.{:03}", ns < 0 ? "-" : "", magnitude / 1000, magnitude % 1000);
  }
  void optional_number(const std::optional<double>& value) {
    if (value) {
      number(*value);
    } else {
      null();
    }
  }

  // Members of the enclosing object.
  void member(std::string_view name, std::string_view text) {
    key(name);
    string(text);
  }
  /// `text`, or null where it is empty (nothing known).
  void member_text_or_null(std::string_view name, std::string_view text) {
    key(name);
    if (text.empty()) {
      null();
    } else {
      string(text);
    }
  }
  void member_integer(std::string_view name, std::int64_t value) {
    key(name);
    integer(value);
  }
  void member_number(std::string_view name, double value) {
    key(name);
    number(value);
  }
  void member_us(std::string_view name, std::int64_t ns) {
    key(name);
    microseconds(ns);
  }
  /// A mean or a median in ns, as µs.
  void member_us(std::string_view name, double ns) {
    key(name);
    number(ns / 1e3);
  }

 private:
  void open(char bracket) {
    value_position();
    json_.character(bracket);
    first_.push_back(true);
  }
  void close(char bracket) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) new_line();
    json_.character(bracket);
  }
  void new_line() {
    json_.character('\n');
    for (std::size_t i = 0; i < first_.size(); ++i) json_.raw("  ");
  }
  void next_element() {
    if (first_.empty()) return;
    if (!first_.back()) json_.character(',');
    first_.back() = false;
    new_line();
  }
  void value_position() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    next_element();
  }

  fmt::memory_buffer& out_;
  JsonWriter json_;
  std::vector<bool> first_;  // per open object or array: nothing written in it yet
  bool after_key_ = false;
};

/// The JSON name of each step role: "kernel", "memcpy", ..., "cpu_exec", "other".
inline constexpr std::array<std::string_view, analysis::kStepRoleCount> kStepRoleKeys = {
    "kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"};

inline void json_duration_rows(JsonTree& json, const std::vector<analysis::DurationStats>& rows, std::int64_t section_ns,
                               std::size_t limit) {
  json.begin_array();
  for (std::size_t i = 0; i < rows.size() && i < limit; ++i) {
    const analysis::DurationStats& row = rows[i];
    json.begin_object();
    json.member("name", row.name);
    json.member_integer("calls", static_cast<std::int64_t>(row.calls));
    json.member_us("total_us", row.total_ns);
    json.member_number("pct", analysis::GpuSummary::percent(row, section_ns));
    json.member_us("mean_us", row.mean_ns);
    json.member_us("min_us", row.min_ns);
    json.member_us("max_us", row.max_ns);
    json.end_object();
  }
  json.end_array();
}

inline void json_steps(JsonTree& json, const analysis::StepBreakdown& breakdown, std::int64_t origin_ns) {
  json.key("step_breakdown");
  json.begin_array();
  for (const analysis::StepTime& step : breakdown.steps) {
    json.begin_object();
    json.member("step", step.name);
    json.member_integer("number", step.number);
    json.member_us("start_us", step.start_ns - origin_ns);
    json.member_us("total_us", step.duration_ns());
    for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role)
      json.member_us(fmt::format("{}_us", kStepRoleKeys[role]), step.role_ns[role]);
    json.end_object();
  }
  json.end_array();

  const auto average = breakdown.average_ns();
  const double average_step = breakdown.average_step_ns();
  json.key("average_step");
  json.begin_object();
  json.member_integer("steps", static_cast<std::int64_t>(breakdown.steps.size()));
  json.member_us("total_us", average_step);
  for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role) json.member_us(fmt::format("{}_us", kStepRoleKeys[role]), average[role]);
  for (std::size_t role = 0; role < analysis::kStepRoleCount; ++role)
    json.member_number(fmt::format("{}_pct", kStepRoleKeys[role]), average_step > 0 ? 100.0 * average[role] / average_step : 0.0);
  json.end_object();

  json.member("matrix_units", analysis::to_string(breakdown.matrix_units));
  json.key("gpus");
  json.begin_array();
  for (const analysis::DeviceMetrics& device : breakdown.devices) {
    json.begin_object();
    json.member_integer("device", device.device);
    json.member_text_or_null("name", device.name);
    json.key("name_from_id");
    if (device.properties_from_id) {
      json.integer(*device.properties_from_id);
    } else {
      json.null();
    }
    json.key("compute_capability");
    if (device.compute_major == 0) {
      json.null();
    } else {
      json.string(fmt::format("{}.{}", device.compute_major, device.compute_minor));
    }
    json.member_number("utilization_pct", 100.0 * device.utilization);
    json.key("sm_efficiency_pct");
    json.optional_number(device.sm_efficiency ? std::optional<double>(100.0 * *device.sm_efficiency) : std::nullopt);
    json.key("achieved_occupancy_pct");
    json.optional_number(device.achieved_occupancy_percent);
    json.key("dlprof_tensor_core_pct");
    json.optional_number(device.tensor_core_percent);
    json.member_us("kernel_us", device.kernel_ns);
    json.end_object();
  }
  json.end_array();
}

inline void json_hta(JsonTree& json, const analysis::HtaAnalyses& hta) {
  const analysis::TemporalBreakdown& temporal = hta.temporal;
  json.key("temporal_breakdown");
  json.begin_object();
  json.member_us("idle_us", temporal.idle_ns);
  json.member_us("compute_us", temporal.compute_ns);
  json.member_us("non_compute_us", temporal.non_compute_ns);
  json.member_us("kernel_time_us", temporal.kernel_time_ns);
  json.member_number("idle_pct", temporal.idle_percent());
  json.member_number("compute_pct", temporal.compute_percent());
  json.member_number("non_compute_pct", temporal.non_compute_percent());
  json.end_object();

  json.key("kernel_type_breakdown");
  json.begin_array();
  for (const analysis::KernelTypeTime& row : hta.kernel_types.times) {
    json.begin_object();
    json.member("type", row.label());
    json.member_us("time_us", row.time_ns);
    json.member_number("pct", row.percent);
    json.end_object();
  }
  json.end_array();

  json.key("kernels_by_type");
  json.begin_array();
  for (const analysis::KernelsOfType& of_type : hta.kernel_types.kernels) {
    json.begin_object();
    json.member("type", analysis::to_string(of_type.type));
    json.key("kernels");
    json.begin_array();
    for (const analysis::DurationStats& kernel : of_type.kernels) {
      json.begin_object();
      json.member("name", kernel.name);
      json.member_integer("calls", static_cast<std::int64_t>(kernel.calls));
      json.member_us("total_us", kernel.total_ns);
      json.member_us("mean_us", kernel.mean_ns);
      json.member_us("min_us", kernel.min_ns);
      json.member_us("max_us", kernel.max_ns);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();

  json.key("idle_time_breakdown");
  json.begin_array();
  for (const analysis::StreamIdleTime& stream : hta.idle_time.streams) {
    json.begin_object();
    json.member_integer("device", stream.device);
    json.member_integer("stream", stream.stream);
    json.member_us("idle_us", stream.idle_ns());
    json.member_us("host_wait_us", stream.host_wait_ns);
    json.member_us("kernel_wait_us", stream.kernel_wait_ns);
    json.member_us("other_us", stream.other_ns);
    json.member_integer("overlaps", static_cast<std::int64_t>(stream.overlaps));
    json.member_us("overlap_us", stream.overlap_ns);
    json.end_object();
  }
  json.end_array();

  json.key("cpu_ops_on_streams");
  json.begin_object();
  json.member_integer("count", static_cast<std::int64_t>(hta.cpu_slices_on_streams.count));
  json.member_us("total_us", hta.cpu_slices_on_streams.total_ns);
  json.key("counted_as_gpu_work");
  json.boolean(hta.cpu_slices_on_streams.counted_as_gpu_work);
  json.end_object();

  json.key("comm_comp_overlap");
  json.begin_object();
  json.member_us("communication_us", hta.overlap.communication_ns);
  json.member_us("computation_us", hta.overlap.computation_ns);
  json.member_us("overlap_us", hta.overlap.overlap_ns);
  json.key("overlap_pct");
  json.optional_number(hta.overlap.has_communication() ? std::optional<double>(hta.overlap.overlap_percent()) : std::nullopt);
  json.end_object();

  const analysis::LaunchStats& launches = hta.launches;
  json.key("launch_stats");
  json.begin_object();
  json.member_integer("launches", static_cast<std::int64_t>(launches.launches.size()));
  json.member_us("mean_cpu_duration_us", launches.mean_cpu_duration_ns());
  json.member_us("mean_launch_delay_us", launches.mean_launch_delay_ns());
  json.member_us("max_launch_delay_us", launches.max_launch_delay_ns());
  json.member_integer("runtime_outliers", static_cast<std::int64_t>(launches.runtime_outliers));
  json.member_integer("launch_delay_outliers", static_cast<std::int64_t>(launches.launch_delay_outliers));
  json.member_integer("short_kernels", static_cast<std::int64_t>(launches.short_kernels));
  json.end_object();
}

inline void json_read_result(JsonTree& json, const ReadResult& read) {
  json.key("read");
  json.begin_object();
  json.member_integer("skipped_events", static_cast<std::int64_t>(read.skipped_events));
  json.key("first_skip");
  if (read.skipped_events == 0) {
    json.null();
  } else {
    json.begin_object();
    json.member_integer("offset", static_cast<std::int64_t>(read.first_skip_offset));
    json.member("reason", read.first_skip_reason);
    json.end_object();
  }
  json.member_integer("ignored_values", static_cast<std::int64_t>(read.ignored_values));
  json.key("notes");
  json.begin_array();
  for (const std::string& note : read.notes) json.string(note);
  json.end_array();
  json.end_object();
}

inline void json_host_syncs(JsonTree& json, const analysis::HostSyncs& syncs, std::size_t rows) {
  json.key("host_syncs");
  json.begin_object();
  json.member_integer("points", static_cast<std::int64_t>(syncs.points));
  json.member_us("wait_us", syncs.wait_ns);
  json.member_us("saving_us", syncs.saving_ns);
  json.key("sites");
  json.begin_array();
  for (std::size_t i = 0; i < syncs.sites.size() && i < rows; ++i) {
    const analysis::SyncSite& site = syncs.sites[i];
    json.begin_object();
    json.member("kind", analysis::id_of(site.kind));
    json.member_text_or_null("op", site.op);
    json.member_text_or_null("frame", site.frame);
    json.member_text_or_null("range", site.range);
    json.member("call", site.call);
    json.member_integer("count", static_cast<std::int64_t>(site.count));
    json.member_us("wait_us", site.wait_ns);
    json.member_us("gpu_idle_after_us", site.gpu_idle_after_ns);
    json.member_us("saving_us", site.saving_ns);
    json.member_us("longest_wait_us", site.longest_wait_ns);
    json.member_integer("longest_wait_bytes", static_cast<std::int64_t>(site.longest_wait_bytes));
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

inline void optional_count(JsonTree& json, std::string_view name, const std::optional<std::uint64_t>& value) {
  json.key(name);
  if (value) {
    json.integer(static_cast<std::int64_t>(*value));
  } else {
    json.null();
  }
}

inline std::optional<double> as_percent(const std::optional<double>& share) {
  return share ? std::optional<double>(100 * *share) : std::nullopt;
}

/// What every roofline row says, the kernel table's and the ops'.
inline void json_roof_measure(JsonTree& json, const RankReport* rank, const analysis::RoofMeasure& row) {
  json.member_integer("device", row.device);
  json.key("precision");
  if (row.precision) {
    json.string(analysis::to_string(*row.precision));
  } else {
    json.null();
  }
  json.key("matrix_units");
  json.boolean(row.matrix_units);
  json.member_integer("calls", row.calls);
  json.member_integer("kernels", row.kernels);
  json.member_us("kernel_us", row.kernel_ns);
  optional_count(json, "flops", row.flops);
  optional_count(json, "bytes", row.bytes);
  json.key("tflops");
  json.optional_number(row.flops ? std::optional<double>(row.tflops()) : std::nullopt);
  json.key("tb_per_s");
  json.optional_number(row.bytes ? std::optional<double>(row.tb_per_s()) : std::nullopt);
  json.key("intensity");
  json.optional_number(row.intensity());
  json.key("peak_tflops");
  json.optional_number(row.peak_tflops > 0 ? std::optional<double>(row.peak_tflops) : std::nullopt);
  json.key("memory_tb_per_s");
  json.optional_number(row.memory_tb_per_s > 0 ? std::optional<double>(row.memory_tb_per_s) : std::nullopt);
  json.member("bound", analysis::to_string(row.bound));
  json.key("efficiency_pct");
  json.optional_number(as_percent(row.efficiency));
  if (rank != nullptr) {
    json.key("at_clock_pct");
    json.optional_number(as_percent(efficiency_at_clock(*rank, row)));
  }
  json.key("mamf_pct");
  json.optional_number(as_percent(row.mamf_share));
  json.member_us("time_lost_us", row.time_lost_ns);
  json.member_text_or_null("above_roof", row.above_roof);
  json.key("cache_resident");
  json.boolean(row.cache_resident);
}

inline void json_thread_time(JsonTree& json, const analysis::ThreadTime& time) {
  json.member_number("cpu_pct", 100 * time.cpu_share());
  json.key("waiting_for_cpu_pct");
  json.optional_number(as_percent(time.run_delay_share()));
  json.member_number("blocked_pct", 100 * time.blocked_share());
}

inline std::string_view memory_device_type_name(MemoryDeviceType type) noexcept {
  return type == MemoryDeviceType::CPU ? "CPU" : type == MemoryDeviceType::HIP ? "HIP" : "CUDA";
}

inline void json_memory_device(JsonTree& json, MemoryDeviceType type, std::int32_t device) {
  json.member("device_type", memory_device_type_name(type));
  json.member_integer("device", device);
}

inline void json_memory_shares(JsonTree& json, std::string_view key, const std::vector<analysis::MemoryShare>& shares) {
  json.key(key);
  json.begin_array();
  for (const analysis::MemoryShare& share : shares) {
    json.begin_object();
    json.member("name", share.name);
    json.member_integer("bytes", share.bytes);
    json.member_integer("allocations", static_cast<std::int64_t>(share.allocations));
    json.end_object();
  }
  json.end_array();
}

/// What held a device's memory at one moment (a peak, an allocation that failed): the members of
/// a memory_peaks or out_of_memory entry.
inline void json_memory_state(JsonTree& json, const analysis::MemoryPeak& state, std::int64_t origin_ns) {
  json_memory_device(json, state.device_type, state.device);
  json.member_integer("allocated_bytes", state.allocated);
  json.member_us("time_us", state.time_ns - origin_ns);
  json.member_text_or_null("step", state.step);
  json.member_text_or_null("phase", state.phase);
  json.member("site", state.site);
  json.key("by_category");
  json.begin_object();
  for (std::size_t c = 0; c < analysis::kMemoryCategoryCount; ++c)
    json.member_integer(to_string(static_cast<analysis::MemoryCategory>(c)), state.by_category[c]);
  json.end_object();
  json.member_integer("unseen_bytes", state.unseen_bytes);
  json.member_integer("uncounted_bytes", state.uncounted_bytes);
  json_memory_shares(json, "by_site", state.by_site);
  json_memory_shares(json, "by_line", state.by_line);
  json.key("largest");
  json.begin_array();
  for (const analysis::LiveAllocation& allocation : state.largest) {
    json.begin_object();
    json.member_integer("bytes", allocation.bytes);
    json.member("category", to_string(allocation.category));
    json.member_text_or_null("step", allocation.step);
    json.member("site", allocation.site);
    json.member_text_or_null("line", allocation.line);
    json.end_object();
  }
  json.end_array();
}

inline void json_memory_explained(JsonTree& json, const RankReport& rank, std::int64_t origin_ns) {
  json.key("memory_peaks");
  json.begin_array();
  for (const analysis::MemoryPeak& peak : rank.memory_peaks) {
    json.begin_object();
    json_memory_state(json, peak, origin_ns);
    json.end_object();
  }
  json.end_array();

  json.key("out_of_memory");
  json.begin_array();
  for (const analysis::OutOfMemory& failure : rank.out_of_memory) {
    json.begin_object();
    json.member_integer("requested_bytes", failure.requested);
    json_memory_state(json, failure.state, origin_ns);
    json.end_object();
  }
  json.end_array();

  const analysis::MemoryLeaks& leaks = rank.memory_leaks;
  json.key("memory_growth");
  json.begin_object();
  json.member_integer("steps", static_cast<std::int64_t>(leaks.steps));
  json.member_integer("lag", static_cast<std::int64_t>(leaks.lag));
  json.member_text_or_null("not_judged", leaks.not_judged);
  json.key("leak");
  json.boolean(leaks.found());
  json.key("devices");
  json.begin_array();
  for (const analysis::MemoryGrowth& device : leaks.devices) {
    json.begin_object();
    json_memory_device(json, device.device_type, device.device);
    json.key("allocated_at_step_end");
    json.begin_array();
    for (const std::int64_t bytes : device.allocated_at_step_end) json.integer(bytes);
    json.end_array();
    json.member_number("bytes_per_step", device.bytes_per_step);
    json.key("holders");
    json.begin_array();
    for (const analysis::LeakHolder& holder : device.holders) {
      json.begin_object();
      json.member("site", holder.site);
      json.member_text_or_null("line", holder.line);
      json.member("category", to_string(holder.category));
      json.member_integer("allocations", static_cast<std::int64_t>(holder.allocations));
      json.member_integer("bytes", holder.bytes);
      json.member_integer("steps", static_cast<std::int64_t>(holder.steps));
      json.member_number("bytes_per_step", holder.bytes_per_step);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.end_object();

  json.key("memory_timeline");
  json.begin_array();
  for (const analysis::DeviceMemoryTimeline& timeline : rank.memory_timelines) {
    json.begin_object();
    json_memory_device(json, timeline.device_type, timeline.device);
    json.key("categories");
    json.begin_array();
    for (std::size_t c = 0; c < analysis::kMemoryCategoryCount; ++c) json.string(to_string(static_cast<analysis::MemoryCategory>(c)));
    json.end_array();
    json.key("points");
    json.begin_array();
    for (const analysis::MemoryTimelinePoint& point : timeline.points) {
      json.begin_object();
      json.member_us("time_us", point.time_ns - origin_ns);
      json.key("bytes");
      json.begin_array();
      for (const std::int64_t bytes : point.by_category) json.integer(bytes);
      json.end_array();
      json.member_integer("reserved_bytes", point.reserved);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
}

inline void json_memory_by_op(JsonTree& json, const std::vector<analysis::DeviceOpMemory>& devices, std::size_t rows) {
  json.key("memory_by_op");
  json.begin_array();
  for (const analysis::DeviceOpMemory& device : devices) {
    json.begin_object();
    json_memory_device(json, device.device_type, device.device);
    json.member_integer("ops_count", static_cast<std::int64_t>(device.ops.size()));
    json.member_integer("outside_ops", static_cast<std::int64_t>(device.outside_ops));
    json.key("ops");
    json.begin_array();
    for (std::size_t i = 0; i < device.ops.size() && i < rows; ++i) {
      const analysis::OpMemory& op = device.ops[i];
      json.begin_object();
      json.member("name", op.name);
      json.member_integer("calls", static_cast<std::int64_t>(op.calls));
      json.member_integer("self_allocations", static_cast<std::int64_t>(op.self_allocations));
      json.member_integer("allocations", static_cast<std::int64_t>(op.allocations));
      json.member_integer("self_allocated_bytes", op.self_allocated_bytes);
      json.member_integer("allocated_bytes", op.allocated_bytes);
      json.member_integer("self_size_increase", op.self_size_increase);
      json.member_integer("size_increase", op.size_increase);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
}

inline void json_cuda_graphs(JsonTree& json, const analysis::CudaGraphs& graphs, std::size_t rows) {
  json.key("cuda_graphs");
  json.begin_object();
  if (!graphs.empty()) {
    json.member_us("gpu_us", graphs.gpu_ns);
    json.member_us("all_gpu_us", graphs.all_gpu_ns);
    json.member_integer("launches", static_cast<std::int64_t>(graphs.launches));
    json.member_integer("work", static_cast<std::int64_t>(graphs.work));
    json.member_integer("captured_work", static_cast<std::int64_t>(graphs.captured_work));
    json.key("graphs");
    json.begin_array();
    for (std::size_t i = 0; i < graphs.graphs.size() && i < rows; ++i) {
      const analysis::GraphReplays& graph = graphs.graphs[i];
      json.begin_object();
      json.key("graph_id");
      if (graph.graph_id == 0) json.null();
      else json.integer(graph.graph_id);
      json.member_text_or_null("launched_from", graph.launched_from);
      json.member_integer("launches", static_cast<std::int64_t>(graph.launches));
      json.member_integer("work", static_cast<std::int64_t>(graph.work));
      json.member_integer("nodes", static_cast<std::int64_t>(graph.nodes));
      json.member_us("gpu_us", graph.gpu_ns);
      json.member("top_kernel", graph.top_kernel);
      json.member_integer("captured_work", static_cast<std::int64_t>(graph.captured_work));
      json.member_text_or_null("captured_by", graph.captured_by);
      json.member_text_or_null("captured_at", graph.captured_at);
      json.end_object();
    }
    json.end_array();
  }
  json.end_object();
}

inline void json_code_lines(JsonTree& json, const analysis::CodeLines& code) {
  json.key("code_lines");
  json.begin_object();
  if (!code.empty()) {
    json.member_integer("lines", static_cast<std::int64_t>(code.lines));
    json.member_integer("ops_with_stacks", static_cast<std::int64_t>(code.ops_with_stacks));
    json.member_integer("ops_in_libraries", static_cast<std::int64_t>(code.ops_in_libraries));
    json.member_us("self_cpu_us", code.self_cpu_ns);
    json.member_us("gpu_us", code.gpu_ns);
    for (const auto& [name, lines] : {std::pair{"by_cpu", &code.by_cpu}, std::pair{"by_gpu", &code.by_gpu}}) {
      json.key(name);
      json.begin_array();
      for (const analysis::CodeLine& line : *lines) {
        json.begin_object();
        json.member("line", line.line);
        json.member_us("self_cpu_us", line.self_cpu_ns);
        json.member_us("gpu_us", line.gpu_ns);
        json.member_integer("calls", static_cast<std::int64_t>(line.ops));
        json.member("top_op", line.top_op);
        json.member("top_kernel", line.top_kernel);
        json.end_object();
      }
      json.end_array();
    }
  }
  json.end_object();
}

inline void json_thread_cpu(JsonTree& json, const analysis::ThreadCpu& cpu, std::size_t rows) {
  json.key("thread_cpu");
  json.begin_object();
  json.key("steps");
  json.begin_array();
  for (const analysis::ThreadCpu::Step& step : cpu.steps) json.integer(step.number);
  json.end_array();
  json.key("threads");
  json.begin_array();
  for (std::size_t i = 0; i < cpu.threads.size() && i < rows; ++i) {
    const analysis::ThreadCpuRow& row = cpu.threads[i];
    json.begin_object();
    json.member_integer("thread", row.os_tid);
    json.member("name", row.name);
    json.member("role", analysis::to_string(row.role));
    json_thread_time(json, row.total);
    json.member_us("cpu_us", row.total.cpu_ns);
    json.key("steps");
    json.begin_array();
    for (const std::optional<analysis::ThreadTime>& step : row.steps) {
      if (!step) {
        json.null();
        continue;
      }
      json.begin_object();
      json_thread_time(json, *step);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.key("training");
  if (cpu.training) {
    const analysis::TrainingThreadTime& training = *cpu.training;
    json.begin_object();
    json.member_integer("thread", row_of_thread(cpu, training.thread)->os_tid);
    json.member_us("cpu_us", training.time.cpu_ns);
    json.key("waiting_for_cpu_us");
    if (training.time.run_delay_ns >= 0)
      json.number(static_cast<double>(training.time.run_delay_ns) / 1e3);
    else
      json.null();
    json.member_us("blocked_us", training.time.blocked_ns());
    json.member_us("waiting_for_data_us", training.waiting_for_data_ns);
    json.member_us("in_sync_us", training.in_sync_ns);
    json.member_us("blocked_elsewhere_us", training.blocked_elsewhere_ns());
    json.end_object();
  } else {
    json.null();
  }
  json.key("loaders");
  if (cpu.loaders) {
    const analysis::LoaderBalance& loaders = *cpu.loaders;
    json.begin_object();
    json.member_integer("threads", static_cast<std::int64_t>(loaders.threads));
    json.member_number("mean_cpu_pct", 100 * loaders.mean_cpu_share);
    json.member_integer("busiest", row_of_thread(cpu, loaders.busiest)->os_tid);
    json.member_number("busiest_cpu_pct", 100 * loaders.busiest_cpu_share);
    json.member_integer("idlest", row_of_thread(cpu, loaders.idlest)->os_tid);
    json.member_number("idlest_cpu_pct", 100 * loaders.idlest_cpu_share);
    json.end_object();
  } else {
    json.null();
  }
  json.end_object();
}

inline void json_limits(JsonTree& json, const RankReport& rank, std::size_t rows) {
  json.key("limits");
  json.begin_object();
  json.key("mfu");
  if (rank.mfu) {
    const analysis::ModelFlopsUtilization& mfu = *rank.mfu;
    json.begin_object();
    json.member_number("utilization_pct", 100 * mfu.utilization());
    json.member_number("achieved_tflops", mfu.achieved_tflops());
    json.member_number("peak_tflops", mfu.peak_tflops);
    json.member("precision", analysis::to_string(mfu.precision));
    json.key("matrix_units");
    json.boolean(mfu.matrix_units);
    json.member_integer("devices", static_cast<std::int64_t>(mfu.devices));
    json.member_integer("flops", static_cast<std::int64_t>(mfu.flops));
    json.member_us("span_us", mfu.span_ns);
    json.member_integer("unknown_ops", static_cast<std::int64_t>(mfu.unknown_ops));
    json.end_object();
  } else {
    json.null();
  }
  json.key("devices");
  json.begin_array();
  for (const analysis::RoofDevice& device : rank.roofline.devices) {
    json.begin_object();
    json.member_integer("device", device.device);
    json.member_text_or_null("name", device.name);
    json.member_text_or_null("peaks", device.model);
    json.end_object();
  }
  json.end_array();
  json.key("clocks");
  json.begin_array();
  for (const analysis::DeviceClock& clock : rank.clocks) {
    json.begin_object();
    json.member_integer("device", clock.device);
    json.member_integer("readings", static_cast<std::int64_t>(clock.clock_readings));
    const bool read = clock.clock_readings > 0;
    json.key("mean_sm_mhz");
    json.optional_number(read ? std::optional<double>(clock.mean_sm_mhz) : std::nullopt);
    json.key("min_sm_mhz");
    json.optional_number(read ? std::optional<double>(clock.min_sm_mhz) : std::nullopt);
    json.key("max_sm_mhz");
    json.optional_number(read ? std::optional<double>(clock.max_sm_mhz) : std::nullopt);
    json.key("boost_mhz");
    json.optional_number(clock.boost_mhz > 0 ? std::optional<double>(clock.boost_mhz) : std::nullopt);
    json.key("clock_share_pct");
    json.optional_number(as_percent(clock.clock_share()));
    json.key("power_limited_pct");
    json.optional_number(as_percent(clock.power_limited));
    json.key("temperature_limited_pct");
    json.optional_number(as_percent(clock.temperature_limited));
    json.key("otherwise_limited_pct");
    json.optional_number(as_percent(clock.otherwise_limited));
    json.key("mean_power_w");
    json.optional_number(clock.mean_power_watts);
    json.end_object();
  }
  json.end_array();
  json.member_us("unknown_device_us", rank.roofline.unknown_device_ns);
  json.key("ops");
  json.begin_array();
  for (std::size_t i = 0; i < rank.roofline.rows.size() && i < rows; ++i) {
    const analysis::RooflineRow& row = rank.roofline.rows[i];
    json.begin_object();
    json.member("op", row.op);
    json.member("input_dims", row.input_dims);
    json.member("input_types", row.input_types);
    json_roof_measure(json, &rank, row);
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

inline void json_rank(JsonTree& json, const RankReport& rank, const Report& report) {
  json.begin_object();
  json.member_integer("rank", rank.rank);
  json.member_integer("world_size", rank.world_size);
  json.member_text_or_null("flight_recorder_dump", rank.flight_recorder_dump);
  json.key("slow_step");
  if (!rank.slow_step) {
    json.null();
  } else {
    const analysis::SlowStep& slow = *rank.slow_step;
    json.begin_object();
    json.member_integer("step", slow.number);
    json.member_us("duration_us", slow.duration_ns);
    json.member_us("median_us", slow.median_ns);
    json.member_integer("other_steps", static_cast<std::int64_t>(slow.other_steps));
    json.key("hung");
    json.boolean(slow.hung);
    json.key("grew");
    json.begin_array();
    for (const analysis::SlowStepKey& key : slow.grew) {
      json.begin_object();
      json.member("key", key.key);
      json.member("figure", analysis::to_string(key.figure));
      json.member_us("slow_us", key.slow_ns);
      json.member_us("median_us", key.median_ns);
      json.key("added");
      json.boolean(key.added);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json_read_result(json, rank.read);
  json_hta(json, rank.hta);
  json_steps(json, rank.steps, report.origin_ns);
  json.key("gpu_utilization");
  const std::optional<double> utilization = rank.gpu_utilization();
  json.optional_number(utilization ? std::optional<double>(100.0 * *utilization) : std::nullopt);

  json.key("device_memory_name");
  if (rank.device_memory_activity) json.string(rank.device_memory_name);
  else json.null();
  for (const auto& [key, ops] : {std::make_pair("top_ops", &rank.top_ops), std::make_pair("top_ops_by_gpu", &rank.top_ops_by_gpu),
                                 std::make_pair("top_ops_by_memory", &rank.top_ops_by_memory)}) {
    json.key(key);
    json.begin_array();
    for (const KeyAverage& op : *ops) {
      json.begin_object();
      json.member("name", op.name);
      json.member("category", to_string(op.category));
      json.member_integer("calls", static_cast<std::int64_t>(op.calls));
      json.member_us("self_cpu_us", op.self_ns);
      json.member_us("cpu_total_us", op.total_ns);
      json.member_us("self_gpu_us", op.gpu_ns);
      json.member_us("gpu_total_us", op.gpu_total_ns);
      for (const auto& [memory_key, memory] : {std::make_pair("memory", &op.memory), std::make_pair("memory_on_thread", &op.memory_on_thread)}) {
        json.key(memory_key);
        if (!rank.memory_activity) {
          json.null();
          continue;
        }
        json.begin_object();
        json.member_integer("cpu_bytes", memory->cpu_bytes);
        json.member_integer("self_cpu_bytes", memory->self_cpu_bytes);
        json.member_integer("device_bytes", memory->device_bytes);
        json.member_integer("self_device_bytes", memory->self_device_bytes);
        json.end_object();
      }
      json.end_object();
    }
    json.end_array();
  }

  json.key("idle_threads");
  json.begin_array();
  for (const IdleThreadTime& thread : rank.idle_threads) {
    json.begin_object();
    json.member_integer("thread", thread.os_tid);
    json.member("name", thread.thread_name);
    json.member_us("wait_us", thread.wait_ns);
    json.member_integer("waits", static_cast<std::int64_t>(thread.waits));
    json.member("frame", thread.frame);
    json.end_object();
  }
  json.end_array();

  json.key("top_kernels");
  json.begin_array();
  for (const KernelTotal& kernel : rank.top_kernels) {
    json.begin_object();
    json.member("name", kernel.name);
    json.member("short_name", kernel.short_name);
    json.member("type", analysis::to_string(kernel.type));
    json.key("tensor_cores");
    if (kernel.tensor_cores) {
      json.boolean(*kernel.tensor_cores);
    } else {
      json.null();
    }
    json.member_integer("calls", static_cast<std::int64_t>(kernel.calls));
    json.member_us("total_us", kernel.total_ns);
    json.member_us("mean_us", kernel.mean_ns());
    json.member_us("min_us", kernel.min_ns);
    json.member_us("max_us", kernel.max_ns);
    json.member_number("pct", kernel.percent);
    json.end_object();
  }
  json.end_array();

  json_thread_cpu(json, rank.thread_cpu, report.options.top_rows);
  json_code_lines(json, rank.code_lines);
  json_memory_by_op(json, rank.memory_by_op, report.options.top_rows);
  json_memory_explained(json, rank, report.origin_ns);
  json_cuda_graphs(json, rank.cuda_graphs, report.options.top_rows);
  json_limits(json, rank, report.options.top_rows);

  json.key("gpu_activities");
  json_duration_rows(json, rank.gpu_summary.gpu_activities, rank.gpu_summary.gpu_activities_ns, report.options.top_rows);
  json.key("api_calls");
  json_duration_rows(json, rank.gpu_summary.api_calls, rank.gpu_summary.api_calls_ns, report.options.top_rows);

  json.key("memory");
  json.begin_array();
  for (const MemoryCurve& curve : rank.memory) {
    json.begin_object();
    json.member("device", device_label(curve.device_type, curve.device));
    json.member_integer("peak_allocated_bytes", curve.peak_bytes);
    json.key("capacity_bytes");
    if (curve.capacity_bytes > 0) {
      json.integer(curve.capacity_bytes);
    } else {
      json.null();
    }
    json.end_object();
  }
  json.end_array();
  json_host_syncs(json, rank.syncs, report.options.top_rows);
  json.member_integer("dropped_events", static_cast<std::int64_t>(rank.dropped_events));
  json.member_integer("dropped_gpu_records", static_cast<std::int64_t>(rank.dropped_gpu_records));
  json.member_integer("overflowed_names", static_cast<std::int64_t>(rank.overflowed_names));
  json.end_object();
}

inline void json_comparison(JsonTree& json, const analysis::RankComparison& comparison) {
  json.begin_object();
  json.key("ranks");
  json.begin_array();
  for (const analysis::RankSummary& rank : comparison.ranks) {
    json.begin_object();
    json.member_integer("rank", rank.rank);
    json.member_integer("steps", static_cast<std::int64_t>(rank.steps));
    json.member_us("step_time_mean_us", rank.step_time_mean_ns);
    json.member_us("step_time_min_us", rank.step_time_min_ns);
    json.member_us("step_time_max_us", rank.step_time_max_ns);
    json.member_number("gpu_utilization_pct", 100.0 * rank.gpu_utilization);
    json.member_number("idle_pct", rank.temporal.idle_percent());
    json.member_number("compute_pct", rank.temporal.compute_percent());
    json.member_number("non_compute_pct", rank.temporal.non_compute_percent());
    json.key("overlap_pct");
    json.optional_number(rank.overlap.has_communication() ? std::optional<double>(rank.overlap.overlap_percent()) : std::nullopt);
    json.end_object();
  }
  json.end_array();
  json.key("stragglers");
  json.begin_array();
  for (const analysis::StepAcrossRanks& step : comparison.steps) {
    json.begin_object();
    json.member_integer("step", step.step);
    json.member_integer("ranks", static_cast<std::int64_t>(step.ranks));
    json.member_integer("slowest_rank", step.slowest_rank);
    json.member_us("slowest_us", step.slowest_ns);
    json.member_us("median_us", step.median_ns);
    json.member_integer("fastest_rank", step.fastest_rank);
    json.member_us("fastest_us", step.fastest_ns);
    json.member_number("slowest_over_median_pct", step.slowest_over_median_percent());
    json.member_number("slowest_over_fastest_pct", step.slowest_over_fastest_percent());
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

inline void json_collectives(JsonTree& json, const analysis::CollectiveAnalysis& collectives, std::int64_t origin_ns) {
  json.begin_object();
  json.key("problems");
  json.begin_array();
  for (const std::string& problem : collectives.problems) json.string(problem);
  json.end_array();
  json.key("ranks");
  json.begin_array();
  for (const analysis::RankPhases& rank : collectives.ranks) {
    json.begin_object();
    json.member_integer("rank", rank.rank);
    json.member_integer("steps", static_cast<std::int64_t>(rank.steps));
    json.member_us("step_us", rank.step_ns);
    json.member_us("compute_us", rank.compute_ns);
    json.member_us("communication_us", rank.communication_ns);
    json.member_us("waiting_us", rank.waiting_ns);
    json.member_us("transfer_us", rank.transfer_ns);
    json.member_us("exposed_communication_us", rank.exposed_communication_ns);
    json.member_us("data_loading_us", rank.phase_ns[static_cast<std::size_t>(analysis::StepPhase::DataLoading)]);
    json.member_us("forward_us", rank.phase_ns[static_cast<std::size_t>(analysis::StepPhase::Forward)]);
    json.member_us("backward_us", rank.phase_ns[static_cast<std::size_t>(analysis::StepPhase::Backward)]);
    json.member_us("optimizer_us", rank.phase_ns[static_cast<std::size_t>(analysis::StepPhase::Optimizer)]);
    json.member_integer("last_arrivals", static_cast<std::int64_t>(rank.last_arrivals));
    json.member_us("lateness_us", rank.lateness_ns);
    json.end_object();
  }
  json.end_array();
  json.key("types");
  json.begin_array();
  for (const analysis::CollectiveTypeStats& type : collectives.types) {
    json.begin_object();
    json.member("name", type.name);
    json.member_integer("calls", static_cast<std::int64_t>(type.calls));
    json.member_integer("bytes", type.bytes);
    json.member_us("transfer_us", type.transfer_ns);
    json.member_us("latency_us", type.latency_ns());
    const auto bandwidth = [&](std::string_view key, double gbps) {
      json.key(key);
      if (type.has_bytes())
        json.number(gbps);
      else
        json.null();
    };
    bandwidth("algbw_gbps", type.algorithm_gbps());
    bandwidth("busbw_gbps", type.bus_gbps());
    json.member_us("mean_waiting_us", type.mean_waiting_ns);
    json.member_us("mean_skew_us", type.mean_skew_ns);
    json.member_us("max_skew_us", type.max_skew_ns);
    json.end_object();
  }
  json.end_array();
  json.key("instances");
  json.begin_array();
  for (const analysis::CollectiveInstance& instance : collectives.instances) {
    json.begin_object();
    json.member("group", instance.group);
    json.member_integer("seq", instance.seq);
    json.member("name", instance.name);
    json.member_integer("step", instance.step);
    json.member_integer("ranks", static_cast<std::int64_t>(instance.ranks));
    json.member_integer("bytes", instance.bytes);
    json.member_us("first_arrival_us", instance.first_arrival_ns - origin_ns);
    json.member_us("skew_us", instance.skew_ns);
    json.member_integer("last_rank", instance.last_rank);
    json.member_us("transfer_us", instance.transfer_ns);
    json.member_us("waiting_us", instance.waiting_ns);
    json.end_object();
  }
  json.end_array();
  json.key("straggler");
  if (const std::optional<analysis::Straggler>& s = collectives.straggler) {
    json.begin_object();
    json.member_integer("rank", s->rank);
    json.member_integer("last_arrivals", static_cast<std::int64_t>(s->last_arrivals));
    json.member_integer("instances", static_cast<std::int64_t>(s->instances));
    json.member_us("mean_lateness_us", s->mean_lateness_ns);
    json.member_us("held_back_us", s->held_back_ns);
    json.key("phase");
    if (s->phase)
      json.string(analysis::to_string(*s->phase));
    else
      json.null();
    json.member_us("phase_us", s->phase_ns);
    json.member_us("others_median_phase_us", s->others_median_phase_ns);
    json.end_object();
  } else {
    json.null();
  }
  json.end_object();
}

}  // namespace detail

/// The report as JSON (the keys are listed at the top of this header), ending with a newline.
inline std::string render_json(const Report& report) {
  fmt::memory_buffer out;
  detail::JsonTree json(out);
  json.begin_object();
  json.member("dlprof_version", DLPROF_VERSION_STRING);
  json.key("schema_version");
  json.integer(kReportSchemaVersion);
  json.member("title", report.options.title);
  json.key("hta_compat");
  json.boolean(report.options.analysis.hta_compat);
  const auto deviations = [&json](std::string_view key, const auto& list) {
    json.key(key);
    json.begin_array();
    for (const auto& deviation : list) {
      json.begin_object();
      json.member("what", deviation.what);
      json.member("why", deviation.why);
      json.end_object();
    }
    json.end_array();
  };
  deviations("tensorboard_deviations", analysis::kTensorBoardDeviations);
  deviations("hta_deviations", analysis::kHtaDeviations);
  json.member_us("origin_us", report.origin_ns);
  json.key("ranks");
  json.begin_array();
  for (const RankReport& rank : report.ranks) detail::json_rank(json, rank, report);
  json.end_array();
  json.key("rank_comparison");
  if (report.comparison) {
    detail::json_comparison(json, *report.comparison);
  } else {
    json.null();
  }
  json.key("slow_rank");
  if (report.slow_rank) {
    const SlowRank& slow = *report.slow_rank;
    json.begin_object();
    json.member_integer("rank", slow.rank);
    json.member_integer("median_rank", slow.median_rank);
    json.key("straggler");
    json.boolean(slow.straggler);
    json.member_number("step_delta_us", slow.step_delta_ns / 1e3);
    json.key("keys");
    json.begin_array();
    for (const analysis::KeyChange& key : slow.keys) {
      json.begin_object();
      json.member("key", key.key);
      json.member("figure", analysis::to_string(key.impact_figure));
      json.member_number("delta_us", key.impact_ns / 1e3);
      json.member_number("p_value", key.p_value);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  } else {
    json.null();
  }
  json.key("collectives");
  if (report.collectives && !report.collectives->empty()) {
    detail::json_collectives(json, *report.collectives, report.origin_ns);
  } else {
    json.null();
  }
  const analysis::Verdict& verdict = report.verdict;
  json.key("verdict");
  json.begin_object();
  json.member("bound", analysis::id_of(verdict.bound));
  json.member_number("bound_pct", verdict.bound_share);
  json.member_integer("steps", static_cast<std::int64_t>(verdict.steps));
  json.member_us("median_step_us", verdict.median_step_ns);
  json.member_us("mean_step_us", verdict.mean_step_ns);
  json.key("gpu_busy_pct");
  json.optional_number(verdict.gpu_busy ? std::optional<double>(100.0 * *verdict.gpu_busy) : std::nullopt);
  json.key("mfu_pct");
  json.optional_number(verdict.mfu ? std::optional<double>(100.0 * *verdict.mfu) : std::nullopt);
  json.key("all_flagged");
  json.boolean(verdict.all_flagged);
  json.key("left_out");
  json.begin_array();
  for (const analysis::LeftOutStep& left_out : verdict.left_out) {
    json.begin_object();
    json.member_integer("rank", left_out.rank);
    json.key("step");
    if (left_out.step.number >= 0) {
      json.integer(left_out.step.number);
    } else {
      json.null();
    }
    json.member("reason", analysis::id_of(left_out.step.flag));
    json.member_us("time_us", left_out.step.ns);
    json.key("ratio_to_median");
    json.optional_number(left_out.step.flag == analysis::StepFlag::Outlier ? std::optional<double>(left_out.step.ratio_to_median)
                                                                            : std::nullopt);
    json.key("calls");
    json.begin_array();
    for (const analysis::FirstCall& call : left_out.step.calls) {
      json.begin_object();
      json.member("name", call.name);
      json.member_us("duration_us", call.duration_ns);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.key("why");
  if (const std::string why = verdict.top_actions == 0 && verdict.bound != analysis::Bound::NoSteps
                                  ? detail::healthy_report_sentence(report)
                                  : std::string();
      !why.empty()) {
    json.string(why);
  } else {
    json.null();
  }
  json.key("top_actions");
  json.begin_array();
  for (std::size_t i = 0; i < verdict.top_actions; ++i) {
    const analysis::Recommendation& finding = report.recommendations[i];
    json.begin_object();
    json.member("id", finding.id);
    json.member("action", finding.action);
    json.member_us("impact_us", finding.impact_ns);
    json.member_number("share_pct", finding.share);
    json.member_integer("worst_rank", finding.worst_rank);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  json.key("recommendations");
  json.begin_array();
  for (const analysis::Recommendation& advice : report.recommendations) {
    json.begin_object();
    json.member("id", advice.id);
    json.member("text", advice.text);
    json.member("evidence", advice.evidence);
    json.member("action", advice.action);
    json.member_us("impact_us", advice.impact_ns);
    json.member_number("share_pct", advice.share);
    json.member("severity", analysis::to_string(advice.severity));
    json.key("ranks");
    json.begin_array();
    for (const std::int64_t rank : advice.ranks) json.integer(rank);
    json.end_array();
    json.member_integer("worst_rank", advice.worst_rank);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out.push_back('\n');
  return fmt::to_string(out);
}

DLPROF_END_NAMESPACE
