// dlprof/analysis/collectives.hpp: the collectives of a distributed job across its ranks, and the
// rank that holds the others back.
//
// Each rank's trace is first reduced to a RankCollectives (summarize_collectives): its steps with
// the time of each phase (data loading, forward, backward, optimizer, communication) and its
// collective calls, on the reference rank's clock (DistributedInfo::clock_offset). Only these
// summaries are compared, so a report over many ranks need not hold their traces.
//
// The calls are c10d's (record_param_comms: name, group, Seq, sizes) where the trace has them.
// Where it has none, they are the communication kernels themselves (NCCL's and RCCL's, the
// collective read from the kernel's name), each in the step whose runtime call launched it; sizes
// are then unknown.
//
// A collective instance is one call of a group on every member: the calls of one (group, Seq), or
// without Seq of one (group, collective, n-th call of the step). On the device, all ranks' kernels
// of a collective end together, once the last rank has arrived: its time in the call is the
// transfer, and every other rank's time beyond it is waiting for the last rank. Aligning the ends
// so needs no clock shared by the ranks' hosts. The last rank is the one with the shortest call;
// the instance's skew is the longest call's excess over it. Calls timed on the host (c10d's op,
// which may return before the collective completes) are compared by their starts instead, on the
// reference rank's clock: a rank waits from its start to the last rank's, and the transfer runs
// from the last start to the last end. An instance's algorithm and bus bandwidths
// are nccl-tests' (the bytes over the transfer time; busbw scales algbw by 2(n-1)/n for
// all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for the rest).
//
// The straggler is the rank whose late arrivals make more than half of the instances' skew, by
// more than 5 % of the mean step per step; its evidence is how often and how late it arrives
// last, and the phase whose time per step exceeds the other ranks' median by the most. Without
// collectives there is no straggler: a rank whose steps are longest may be the one that waits.
// Nor is there one while a rank of the world has no trace: the others may all wait for it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/kernel_type.hpp"
#include "dlprof/config.hpp"
#include "dlprof/category.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// The phases of a step whose time is compared across ranks.
enum class StepPhase : std::uint8_t { DataLoading, Forward, Backward, Optimizer, Communication };
inline constexpr std::size_t kStepPhases = 5;

constexpr std::string_view to_string(StepPhase phase) noexcept {
  switch (phase) {
    case StepPhase::DataLoading: return "data loading";
    case StepPhase::Forward: return "forward";
    case StepPhase::Backward: return "backward";
    case StepPhase::Optimizer: return "optimizer";
    case StepPhase::Communication: return "communication";
  }
  return "forward";
}

/// Bytes of one element of a c10 ScalarType by name ("Float": 4); 0 when unknown.
inline std::int64_t dtype_bytes(std::string_view dtype) noexcept {
  static constexpr std::pair<std::string_view, std::int64_t> kSizes[] = {
      {"Float", 4},         {"float", 4},    {"Double", 8},   {"double", 8},   {"Half", 2},     {"BFloat16", 2},
      {"Int", 4},           {"int", 4},      {"Long", 8},     {"long", 8},     {"Short", 2},    {"Char", 1},
      {"Byte", 1},          {"Bool", 1},     {"bool", 1},     {"ComplexFloat", 8}, {"ComplexDouble", 16},
      {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}, {"UInt16", 2}, {"UInt32", 4},   {"UInt64", 8},
  };
  for (const auto& [name, bytes] : kSizes)
    if (name == dtype) return bytes;
  return 0;
}

/// The bytes one call moves as nccl-tests count them (the size of the buffer the test names).
inline std::int64_t collective_bytes(const CollectiveCall& call) noexcept {
  const std::int64_t element = dtype_bytes(call.dtype);
  const std::string_view name = call.name;
  if (name == "allgather" || name == "_allgather_base" || name == "all_gather_into_tensor" || name == "recv" || name == "gather")
    return call.out_nelems * element;
  return call.in_nelems * element;
}

/// nccl-tests' bus bandwidth factor of a collective on `ranks` ranks.
inline double bus_bandwidth_factor(std::string_view name, std::int64_t ranks) noexcept {
  if (ranks <= 1) return 1.0;
  const double n = static_cast<double>(ranks);
  if (name == "allreduce" || name == "allreduce_coalesced") return 2.0 * (n - 1) / n;
  if (name == "allgather" || name == "_allgather_base" || name == "all_gather_into_tensor" || name == "reduce_scatter" ||
      name == "_reduce_scatter_base" || name == "reduce_scatter_tensor" || name == "alltoall" || name == "alltoall_base" ||
      name == "all_to_all")
    return (n - 1) / n;
  return 1.0;
}

/// The collective a communication kernel (is_communication_kernel) runs, in c10d's spelling
/// ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"),
/// read from NCCL's and RCCL's kernel names (ncclKernel_AllReduce_RING_LL_Sum_float,
/// ncclDevKernel_ReduceScatter_Sum_f32_RING_LL, ncclDevKernel_SendRecv(...)); "allreduce" for the
/// custom all-reduce kernels, "alltoall" for DeepEP's dispatch and combine; "nccl" where an NCCL
/// name does not say (RCCL's ncclDevKernel_Generic), "msccl", "nvshmem" or "custom" where another
/// library's does not; empty for a kernel that is not communication.
inline std::string collective_of_kernel(std::string_view name) {
  if (!is_communication_kernel(name)) return {};
  if (kernel_type(name) != KernelType::Communication) {  // beyond NCCL: kernel_type.hpp's list
    const auto has = [&](std::initializer_list<std::string_view> spellings) {
      for (const std::string_view spelling : spellings)
        if (name.find(spelling) != std::string_view::npos) return true;
      return false;
    };
    if (has({"AllReduce", "all_reduce", "allreduce", "cross_device_reduce"})) return "allreduce";
    if (has({"AllGather", "all_gather", "allgather"})) return "allgather";
    if (has({"ReduceScatter", "reduce_scatter"})) return "reduce_scatter";
    if (has({"deep_ep::", "dpsk::ep::"})) return "alltoall";
    if (has({"msccl"})) return "msccl";
    return has({"nvshmem"}) ? "nvshmem" : "custom";
  }
  for (const std::string_view prefix : {std::string_view("ncclKernel_"), std::string_view("ncclDevKernel_")}) {
    if (name.substr(0, prefix.size()) != prefix) continue;
    const std::string_view op = name.substr(prefix.size(), name.find_first_of("_(<", prefix.size()) - prefix.size());
    static constexpr std::pair<std::string_view, std::string_view> kCollectives[] = {
        {"AllReduce", "allreduce"}, {"AllGather", "allgather"}, {"ReduceScatter", "reduce_scatter"},
        {"Broadcast", "broadcast"}, {"Reduce", "reduce"},       {"AllToAll", "alltoall"},
        {"SendRecv", "sendrecv"},   {"Send", "send"},           {"Recv", "recv"},
    };
    for (const auto& [kernel, collective] : kCollectives)
      if (op == kernel) return std::string(collective);
  }
  return "nccl";
}

/// One rank's collectives and step phases: what the comparison across ranks reads of its trace.
struct RankCollectives {
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  std::vector<ProcessGroupInfo> groups;     ///< distributedInfo's pg_config; empty when the trace lists none
  std::optional<ClockOffset> clock_offset;  ///< applied to every time below

  struct Call {
    std::string group;  ///< empty for a communication kernel without c10d's call around it
    std::string name;
    std::int64_t seq = -1;
    std::int64_t ordinal = 0;  ///< n-th call of this (group, name) in its step
    std::int64_t step = -1;    ///< the ProfilerStep it is in; -1 outside every step
    std::int64_t group_size = 0;
    std::int64_t bytes = 0;
    /// From its first kernel's start to its last one's end where the call launched kernels (NCCL:
    /// the device waits for the other ranks, the host only launches), else the call's op on the host.
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    bool on_device = false;
  };
  struct Step {
    std::int64_t number = -1;
    std::int64_t duration_ns = 0;
    std::array<std::int64_t, kStepPhases> phase_ns{};  ///< union of each phase's slices in the step
    std::int64_t compute_ns = 0;          ///< forward, backward and optimizer, outside communication
    std::int64_t exposed_communication_ns = 0;  ///< communication with no computation alongside
  };
  std::vector<Call> calls;
  std::vector<Step> steps;
};

/// The phase a CPU slice's category stands for, if any.
inline std::optional<StepPhase> phase_of(Category category) noexcept {
  switch (category) {
    case Category::DataLoader: return StepPhase::DataLoading;
    case Category::Forward: return StepPhase::Forward;
    case Category::Backward: return StepPhase::Backward;
    case Category::Optimizer: return StepPhase::Optimizer;
    case Category::Communication: return StepPhase::Communication;
    case Category::User:
    case Category::Step: break;
  }
  return std::nullopt;
}

namespace detail {
/// A process group as the comparison of ranks tells groups apart: "cpu:gloo of 4 ranks [0, 1, 2, 3]";
/// with `shown_ranks`, the members after the first few are elided.
inline std::string group_description(const ProcessGroupInfo& group, std::size_t shown_ranks = SIZE_MAX) {
  const std::size_t shown = std::min(shown_ranks, group.ranks.size());
  return fmt::format("{} of {} ranks [{}{}]", group.backend_config.empty() ? "a group" : group.backend_config, group.size,
                     fmt::join(group.ranks.begin(), group.ranks.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                     shown < group.ranks.size() ? ", ..." : "");
}
}  // namespace detail

namespace detail {
/// The span of the kernels each collective op launched: kernels linked (External id) to the op or
/// to a slice inside it on its thread, as NCCL's are to c10d's nccl:all_reduce op inside
/// record_param_comms.
inline std::map<const TraceEvent*, Interval> collective_kernels(
    const Trace& trace, const std::map<std::pair<std::uint32_t, std::int64_t>, const TraceEvent*>& ops) {
  std::map<const TraceEvent*, Interval> spans;
  if (ops.empty() || trace.gpu_events.empty()) return spans;
  std::unordered_map<std::uint64_t, const TraceEvent*> launcher;  // External id -> slice
  for (const TraceEvent& event : trace.events)
    if (event.external_id != 0) launcher.emplace(event.external_id, &event);
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel || work.external_id == 0) continue;
    const auto found = launcher.find(work.external_id);
    if (found == launcher.end()) continue;
    const TraceEvent& slice = *found->second;
    auto op = ops.upper_bound(std::make_pair(slice.thread, slice.start_ns));
    if (op == ops.begin()) continue;
    --op;
    if (op->first.first != slice.thread || slice.end_ns > op->second->end_ns) continue;
    const auto [span, added] = spans.try_emplace(op->second, Interval{work.start_ns, work.end_ns});
    if (!added) span->second = {std::min(span->second.start, work.start_ns), std::max(span->second.end, work.end_ns)};
  }
  return spans;
}
}  // namespace detail

/// What the comparison across ranks needs of `trace`.
inline RankCollectives summarize_collectives(const Trace& trace) {
  RankCollectives summary;
  summary.rank = trace.distributed.rank;
  summary.world_size = trace.distributed.world_size;
  summary.groups = trace.distributed.groups;
  summary.clock_offset = trace.distributed.clock_offset;
  const std::int64_t shift = summary.clock_offset ? summary.clock_offset->offset_ns : 0;

  struct StepSpan {
    std::int64_t number, start, end;
  };
  std::vector<StepSpan> spans;
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Step)
      spans.push_back({dlprof::detail::profiler_step_number(trace.names[event.name]), event.start_ns, event.end_ns});
  std::sort(spans.begin(), spans.end(), [](const StepSpan& a, const StepSpan& b) { return a.start < b.start; });
  const auto step_at = [&](std::int64_t time) -> const StepSpan* {
    auto after = std::upper_bound(spans.begin(), spans.end(), time, [](std::int64_t t, const StepSpan& s) { return t < s.start; });
    if (after == spans.begin()) return nullptr;
    --after;
    return time < after->end ? &*after : nullptr;
  };

  // Phases: each category's slices, clipped to the step they start in. Communication is the
  // collective calls' time where the trace has them (a range around a bucket loop holds other
  // work too), else its Communication slices.
  std::vector<std::array<std::vector<detail::Interval>, kStepPhases>> phases(spans.size());
  const bool calls_recorded = !trace.collectives.empty();
  for (const TraceEvent& event : trace.events) {
    if (event.kind == EventKind::Step || event.kind == EventKind::Instant || event.kind == EventKind::Counter) continue;
    const std::optional<StepPhase> phase = phase_of(event.category);
    if (!phase) continue;
    if (*phase == StepPhase::Communication && calls_recorded && event.kind != EventKind::Op) continue;
    const StepSpan* span = step_at(event.start_ns);
    if (span == nullptr) continue;
    phases[static_cast<std::size_t>(span - spans.data())][static_cast<std::size_t>(*phase)].push_back(
        {event.start_ns, std::min(event.end_ns, span->end)});
  }
  for (std::size_t i = 0; i < spans.size(); ++i) {
    RankCollectives::Step step;
    step.number = spans[i].number;
    step.duration_ns = spans[i].end - spans[i].start;
    std::vector<detail::Interval> computation;
    for (std::size_t p = 0; p < kStepPhases; ++p) {
      detail::merge(phases[i][p]);
      step.phase_ns[p] = detail::total_length(phases[i][p]);
      if (p != static_cast<std::size_t>(StepPhase::Communication) && p != static_cast<std::size_t>(StepPhase::DataLoading))
        computation.insert(computation.end(), phases[i][p].begin(), phases[i][p].end());
    }
    detail::merge(computation);
    const auto& communication = phases[i][static_cast<std::size_t>(StepPhase::Communication)];
    step.compute_ns = detail::total_length(detail::subtract(computation, communication));
    step.exposed_communication_ns = detail::total_length(detail::subtract(communication, computation));
    summary.steps.push_back(step);
  }

  std::map<std::pair<std::uint32_t, std::int64_t>, const TraceEvent*> ops;  // a collective's op by (thread, start)
  if (!trace.collectives.empty())
    for (const TraceEvent& event : trace.events)
      if (event.kind == EventKind::Op && event.category == Category::Communication)
        ops.emplace(std::make_pair(event.thread, event.start_ns), &event);
  std::map<std::pair<std::uint32_t, std::int64_t>, const TraceEvent*> call_ops;  // the ops of the calls alone
  for (const CollectiveCall& call : trace.collectives) {
    const auto found = ops.find(std::make_pair(call.thread, call.start_ns));
    if (found != ops.end()) call_ops.insert(*found);
  }
  const std::map<const TraceEvent*, detail::Interval> on_device = detail::collective_kernels(trace, call_ops);
  std::map<std::tuple<std::int64_t, std::string, std::string>, std::int64_t> ordinals;  // (step, group, name)
  if (trace.collectives.empty()) {
    // The communication kernels, by start, each in the step its launch is in (a kernel may run
    // after the host has left the step that launched it).
    std::unordered_map<std::uint32_t, std::int64_t> launched_at;  // correlation -> runtime call's start
    for (const ApiEvent& call : trace.api_events)
      if (call.correlation != 0) launched_at.emplace(call.correlation, call.start_ns);
    std::vector<std::pair<const GpuEvent*, std::string>> kernels;
    for (const GpuEvent& work : trace.gpu_events)
      if (work.kind == GpuEventKind::Kernel)
        if (std::string name = collective_of_kernel(trace.names[work.name]); !name.empty()) kernels.emplace_back(&work, std::move(name));
    std::stable_sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) { return a.first->start_ns < b.first->start_ns; });
    for (auto& [work, name] : kernels) {
      RankCollectives::Call summarized;
      summarized.name = std::move(name);
      summarized.group_size = summary.world_size;
      const auto launch = work->correlation != 0 ? launched_at.find(work->correlation) : launched_at.end();
      const StepSpan* span = step_at(launch != launched_at.end() ? launch->second : work->start_ns);
      summarized.step = span != nullptr ? span->number : -1;
      summarized.ordinal = ordinals[{summarized.step, summarized.group, summarized.name}]++;
      summarized.start_ns = work->start_ns + shift;
      summarized.end_ns = work->end_ns + shift;
      summarized.on_device = true;
      summary.calls.push_back(std::move(summarized));
    }
    return summary;
  }
  for (const CollectiveCall& call : trace.collectives) {
    const auto found = ops.find(std::make_pair(call.thread, call.start_ns));
    if (found == ops.end()) continue;
    const TraceEvent* op = found->second;
    RankCollectives::Call summarized;
    summarized.group = call.group_name;
    summarized.name = call.name;
    summarized.seq = call.seq;
    summarized.group_size = call.group_size;
    summarized.bytes = collective_bytes(call);
    const StepSpan* span = step_at(op->start_ns);
    summarized.step = span != nullptr ? span->number : -1;
    summarized.ordinal = ordinals[{summarized.step, summarized.group, summarized.name}]++;
    const auto kernels = on_device.find(op);
    const detail::Interval timed = kernels != on_device.end() ? kernels->second : detail::Interval{op->start_ns, op->end_ns};
    summarized.start_ns = timed.start + shift;
    summarized.end_ns = timed.end + shift;
    summarized.on_device = kernels != on_device.end();
    summary.calls.push_back(std::move(summarized));
  }
  return summary;
}

/// One collective instance across the ranks that made it.
struct CollectiveInstance {
  std::string group;
  std::string name;
  std::int64_t seq = -1;
  std::int64_t step = -1;
  std::size_t ranks = 0;
  std::int64_t bytes = 0;            ///< per rank; 0 when unknown
  std::int64_t first_arrival_ns = 0; ///< the earliest start, on the reference rank's clock
  std::int64_t last_rank = -1;       ///< the rank that arrived last (-1: one rank only, or all at once)
  /// From the last rank's arrival to the end: on the device its call (the shortest), on the host
  /// from the last start to the last end.
  std::int64_t transfer_ns = 0;
  std::int64_t skew_ns = 0;          ///< from the first rank's arrival to the last's
  std::int64_t waiting_ns = 0;       ///< summed over the ranks: each one's time in it before the last arrived
};

/// A collective, over its instances.
struct CollectiveTypeStats {
  std::string name;
  std::size_t calls = 0;        ///< instances
  std::int64_t bytes = 0;       ///< per rank, over the instances; 0 when unknown
  std::int64_t transfer_ns = 0; ///< over the instances
  std::int64_t max_skew_ns = 0;
  double mean_skew_ns = 0;
  double mean_waiting_ns = 0;   ///< per call of one rank: its time in the call beyond the transfer
  std::int64_t group_size = 0;

  bool has_bytes() const noexcept { return bytes > 0; }
  /// Mean time per call from the last rank's arrival to the end.
  double latency_ns() const noexcept { return calls > 0 ? static_cast<double>(transfer_ns) / static_cast<double>(calls) : 0.0; }
  double algorithm_gbps() const noexcept { return transfer_ns > 0 ? static_cast<double>(bytes) / static_cast<double>(transfer_ns) : 0.0; }
  double bus_gbps() const noexcept { return algorithm_gbps() * bus_bandwidth_factor(name, group_size); }
};

/// One rank's means per step (over the steps it recorded).
struct RankPhases {
  std::int64_t rank = 0;
  std::size_t steps = 0;
  double step_ns = 0;
  double compute_ns = 0;
  double communication_ns = 0;
  double waiting_ns = 0;   ///< inside collectives, for the last rank to arrive
  double transfer_ns = 0;  ///< inside collectives, once the last rank has arrived
  double exposed_communication_ns = 0;
  std::array<double, kStepPhases> phase_ns{};
  std::size_t last_arrivals = 0;  ///< instances it arrived last at
  double lateness_ns = 0;         ///< mean, over those, of how long after the first rank it arrived
};

/// The rank that held the others back, with the evidence.
struct Straggler {
  std::int64_t rank = -1;
  std::size_t last_arrivals = 0;
  std::size_t instances = 0;        ///< that had a last rank
  double mean_lateness_ns = 0;      ///< after the first rank, when last
  double held_back_ns = 0;          ///< per step: its lateness summed over the collectives it came last to
  /// The phase whose excess over the other ranks' median is largest; none when no phase of the
  /// straggler's is longer than the others' (its steps carry no phase annotations, or it is late
  /// for work the trace does not name).
  std::optional<StepPhase> phase;
  double phase_ns = 0;                   ///< its time per step
  double others_median_phase_ns = 0;     ///< the other ranks' median of it
  double excess_ns() const noexcept { return phase_ns - others_median_phase_ns; }
};

struct CollectiveAnalysis {
  std::vector<RankPhases> ranks;             ///< by rank
  std::vector<CollectiveTypeStats> types;    ///< by time, longest first
  std::vector<CollectiveInstance> instances; ///< by first arrival
  std::optional<Straggler> straggler;       ///< none either where no rank holds the others back or missing_ranks != 0
  std::vector<std::string> problems;         ///< missing ranks, other jobs, steps that disagree
  std::int64_t world_size = 0;
  std::size_t missing_ranks = 0;             ///< of the world, with no trace: any may be the one the others wait for

  bool empty() const noexcept { return instances.empty(); }
};

/// The collectives of the ranks of `summaries` compared. Ranks from another job (a world size
/// that is not the most common one, or a process group that the other ranks listing it describe
/// otherwise: backend, size or members) are left out and named in `problems`, as are ranks
/// missing from the world and ranks whose recorded steps differ.
inline CollectiveAnalysis analyze_collectives(const std::vector<RankCollectives>& summaries) {
  CollectiveAnalysis result;
  if (summaries.empty()) return result;
  std::map<std::int64_t, std::size_t> world_sizes;
  for (const RankCollectives& rank : summaries) ++world_sizes[rank.world_size];
  const std::int64_t world = std::max_element(world_sizes.begin(), world_sizes.end(), [](const auto& a, const auto& b) {
                               return a.second < b.second;
                             })->first;
  // Each process group as most ranks that list it describe it. Ranks list only the groups they
  // are in, so a group is compared among the ranks that list it.
  struct Described {
    std::size_t ranks = 0;
    const ProcessGroupInfo* group = nullptr;
  };
  std::map<std::string, std::map<std::string, Described>> group_descriptions;  // name -> description -> ranks
  for (const RankCollectives& rank : summaries)
    if (rank.world_size == world)
      for (const ProcessGroupInfo& group : rank.groups) {
        Described& described = group_descriptions[group.name][detail::group_description(group)];
        ++described.ranks;
        described.group = &group;
      }
  const auto usual = [&](const std::string& name) -> const std::pair<const std::string, Described>& {
    const auto& descriptions = group_descriptions.at(name);
    return *std::max_element(descriptions.begin(), descriptions.end(),
                             [](const auto& a, const auto& b) { return a.second.ranks < b.second.ranks; });
  };
  std::vector<const RankCollectives*> ranks;
  std::map<std::int64_t, std::size_t> seen;
  for (const RankCollectives& rank : summaries) {
    if (rank.world_size != world) {
      result.problems.push_back(fmt::format("rank {} says the world has {} ranks, the others {}: it is from another job, left out",
                                            rank.rank, rank.world_size, world));
      continue;
    }
    const auto other_group = std::find_if(rank.groups.begin(), rank.groups.end(), [&](const ProcessGroupInfo& group) {
      return detail::group_description(group) != usual(group.name).first;
    });
    if (other_group != rank.groups.end()) {
      result.problems.push_back(fmt::format("rank {}'s process group \"{}\" is {}, the other ranks' {}: it is from another job, left out",
                                            rank.rank, other_group->name, detail::group_description(*other_group, 8),
                                            detail::group_description(*usual(other_group->name).second.group, 8)));
      continue;
    }
    if (seen[rank.rank]++ != 0) {
      result.problems.push_back(fmt::format("rank {} has more than one trace in this window: the first is used", rank.rank));
      continue;
    }
    ranks.push_back(&rank);
  }
  std::vector<std::int64_t> missing;
  for (std::int64_t r = 0; r < world; ++r)
    if (seen.count(r) == 0) missing.push_back(r);
  result.world_size = world;
  result.missing_ranks = missing.size();
  if (!missing.empty())
    result.problems.push_back(fmt::format("no trace of rank{} {} of {}: compared without {}", missing.size() == 1 ? "" : "s",
                                          fmt::join(missing, ", "), world, missing.size() == 1 ? "it" : "them"));
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> step_sets;  // steps -> ranks
  for (const RankCollectives* rank : ranks) {
    std::vector<std::int64_t> numbers;
    for (const auto& step : rank->steps) numbers.push_back(step.number);
    step_sets[numbers].push_back(rank->rank);
  }
  if (step_sets.size() > 1) {
    std::string detail;
    for (const auto& [numbers, members] : step_sets)
      detail += fmt::format("{}rank{} {}: steps {}", detail.empty() ? "" : "; ", members.size() == 1 ? "" : "s",
                            fmt::join(members, ", "), numbers.empty() ? "none" : fmt::format("{}", fmt::join(numbers, ", ")));
    result.problems.push_back("the ranks recorded different steps (" + detail +
                              "): collectives are matched by their group's sequence number, phases compared per step");
  }

  // Instances: calls of one (group, Seq), or of one (group, name, step, ordinal) without Seq.
  using Key = std::tuple<std::string, std::int64_t, std::string, std::int64_t, std::int64_t>;
  std::map<Key, std::vector<std::pair<const RankCollectives::Call*, std::int64_t>>> by_instance;
  for (const RankCollectives* rank : ranks)
    for (const RankCollectives::Call& call : rank->calls) {
      const Key key = call.seq >= 0 ? Key{call.group, call.seq, {}, 0, 0} : Key{call.group, -1, call.name, call.step, call.ordinal};
      by_instance[key].emplace_back(&call, rank->rank);
    }
  std::map<std::int64_t, RankPhases> phases;
  for (const RankCollectives* rank : ranks) {
    RankPhases& p = phases[rank->rank];
    p.rank = rank->rank;
    p.steps = rank->steps.size();
    for (const auto& step : rank->steps) {
      p.step_ns += static_cast<double>(step.duration_ns);
      p.compute_ns += static_cast<double>(step.compute_ns);
      p.exposed_communication_ns += static_cast<double>(step.exposed_communication_ns);
      for (std::size_t i = 0; i < kStepPhases; ++i) p.phase_ns[i] += static_cast<double>(step.phase_ns[i]);
    }
  }
  std::map<std::string, CollectiveTypeStats> types;
  std::map<std::string, std::pair<double, std::size_t>> skew_sums, waiting_sums;  // name -> (sum, count)
  std::size_t with_last = 0;
  for (const auto& [key, calls] : by_instance) {
    CollectiveInstance instance;
    const RankCollectives::Call& any = *calls.front().first;
    instance.group = any.group;
    instance.name = any.name;
    instance.seq = any.seq;
    instance.step = any.step;
    instance.ranks = calls.size();
    instance.bytes = any.bytes;
    instance.first_arrival_ns = any.start_ns;
    const bool on_device = std::all_of(calls.begin(), calls.end(), [](const auto& call) { return call.first->on_device; });
    // Each rank's wait: on the device, its call's excess over the shortest (the ends aligned);
    // on the host, where c10d's op may return before the collective completes, from its start to
    // the last rank's (the ranks' clocks aligned by their offsets).
    std::vector<std::int64_t> waits;
    if (on_device) {
      std::int64_t longest = 0;
      instance.transfer_ns = INT64_MAX;
      for (const auto& [call, rank] : calls) {
        instance.first_arrival_ns = std::min(instance.first_arrival_ns, call->start_ns);
        const std::int64_t in_call = std::max<std::int64_t>(0, call->end_ns - call->start_ns);
        longest = std::max(longest, in_call);
        if (in_call < instance.transfer_ns) {
          instance.transfer_ns = in_call;
          instance.last_rank = rank;
        }
      }
      instance.skew_ns = longest - instance.transfer_ns;
      for (const auto& call : calls) waits.push_back(std::max<std::int64_t>(0, call.first->end_ns - call.first->start_ns) - instance.transfer_ns);
    } else {
      std::int64_t last_arrival = any.start_ns, last_end = any.end_ns;
      instance.last_rank = calls.front().second;
      for (const auto& [call, rank] : calls) {
        instance.first_arrival_ns = std::min(instance.first_arrival_ns, call->start_ns);
        if (call->start_ns > last_arrival) {
          last_arrival = call->start_ns;
          instance.last_rank = rank;
        }
        last_end = std::max(last_end, call->end_ns);
      }
      instance.skew_ns = last_arrival - instance.first_arrival_ns;
      instance.transfer_ns = std::max<std::int64_t>(0, last_end - last_arrival);
      for (const auto& call : calls) waits.push_back(last_arrival - call.first->start_ns);
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      instance.waiting_ns += waits[i];
      RankPhases& rank = phases[calls[i].second];
      rank.waiting_ns += static_cast<double>(waits[i]);
      rank.transfer_ns += static_cast<double>(instance.transfer_ns);
    }
    if (calls.size() < 2 || instance.skew_ns == 0) instance.last_rank = -1;  // nobody came last
    if (instance.last_rank >= 0) {
      ++with_last;
      RankPhases& last = phases[instance.last_rank];
      ++last.last_arrivals;
      last.lateness_ns += static_cast<double>(instance.skew_ns);
    }
    CollectiveTypeStats& type = types[instance.name];
    type.name = instance.name;
    ++type.calls;
    type.bytes += instance.bytes;
    type.transfer_ns += instance.transfer_ns;
    type.max_skew_ns = std::max(type.max_skew_ns, instance.skew_ns);
    type.group_size = std::max(type.group_size, any.group_size);
    auto& [skew_sum, skews] = skew_sums[instance.name];
    skew_sum += static_cast<double>(instance.skew_ns);
    ++skews;
    auto& [waiting_sum, rank_calls] = waiting_sums[instance.name];
    waiting_sum += static_cast<double>(instance.waiting_ns);
    rank_calls += instance.ranks;
    result.instances.push_back(std::move(instance));
  }
  std::sort(result.instances.begin(), result.instances.end(),
            [](const CollectiveInstance& a, const CollectiveInstance& b) { return a.first_arrival_ns < b.first_arrival_ns; });
  for (auto& [name, type] : types) {
    type.mean_skew_ns = skew_sums[name].first / static_cast<double>(skew_sums[name].second);
    type.mean_waiting_ns = waiting_sums[name].first / static_cast<double>(waiting_sums[name].second);
    result.types.push_back(type);
  }
  std::sort(result.types.begin(), result.types.end(),
            [](const CollectiveTypeStats& a, const CollectiveTypeStats& b) { return a.transfer_ns > b.transfer_ns; });

  for (const RankCollectives* rank : ranks) {
    RankPhases& p = phases[rank->rank];
    for (const auto& step : rank->steps) p.communication_ns += static_cast<double>(step.phase_ns[static_cast<std::size_t>(StepPhase::Communication)]);
    const double steps = static_cast<double>(std::max<std::size_t>(p.steps, 1));
    p.step_ns /= steps;
    p.compute_ns /= steps;
    p.exposed_communication_ns /= steps;
    p.communication_ns /= steps;
    p.waiting_ns /= steps;
    p.transfer_ns /= steps;
    for (double& phase : p.phase_ns) phase /= steps;
    if (p.last_arrivals != 0) p.lateness_ns /= static_cast<double>(p.last_arrivals);
    result.ranks.push_back(p);
  }
  std::sort(result.ranks.begin(), result.ranks.end(), [](const RankPhases& a, const RankPhases& b) { return a.rank < b.rank; });

  // The straggler: the rank whose late arrivals make more than half of all the instances' skew,
  // late by more than 5 % of the mean step per step (below that, who enters first is noise). Once
  // a late rank has held a step's first collective back, the ranks enter the next ones together
  // and any of them may come last: skew, not a count of last arrivals, tells who holds them back.
  double total_skew = 0;
  for (const CollectiveInstance& instance : result.instances) total_skew += static_cast<double>(instance.skew_ns);
  const auto held_back = [](const RankPhases& rank) { return rank.lateness_ns * static_cast<double>(rank.last_arrivals); };
  const auto most = std::max_element(result.ranks.begin(), result.ranks.end(),
                                     [&](const RankPhases& a, const RankPhases& b) { return held_back(a) < held_back(b); });
  double mean_step = 0;
  for (const RankPhases& rank : result.ranks) mean_step += rank.step_ns / static_cast<double>(result.ranks.size());
  if (result.missing_ranks == 0 && most != result.ranks.end() && result.ranks.size() > 1 && 2 * held_back(*most) > total_skew &&
      held_back(*most) / static_cast<double>(std::max<std::size_t>(most->steps, 1)) > 0.05 * mean_step) {
    Straggler straggler;
    straggler.rank = most->rank;
    straggler.last_arrivals = most->last_arrivals;
    straggler.instances = with_last;
    straggler.mean_lateness_ns = most->lateness_ns;
    straggler.held_back_ns = held_back(*most) / static_cast<double>(std::max<std::size_t>(most->steps, 1));
    double largest = 0;
    for (std::size_t i = 0; i < kStepPhases; ++i) {
      if (i == static_cast<std::size_t>(StepPhase::Communication)) continue;  // the others wait there for it
      std::vector<double> others;
      for (const RankPhases& rank : result.ranks)
        if (rank.rank != most->rank) others.push_back(rank.phase_ns[i]);
      std::sort(others.begin(), others.end());
      const std::size_t middle = others.size() / 2;
      const double median = others.size() % 2 == 1 ? others[middle] : (others[middle - 1] + others[middle]) / 2;
      if (most->phase_ns[i] - median > largest) {  // strictly longer than the others'
        largest = most->phase_ns[i] - median;
        straggler.phase = static_cast<StepPhase>(i);
        straggler.phase_ns = most->phase_ns[i];
        straggler.others_median_phase_ns = median;
      }
    }
    result.straggler = straggler;
  }
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
