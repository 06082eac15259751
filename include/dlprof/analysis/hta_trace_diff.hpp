// dlprof/analysis/hta_trace_diff.hpp: Holistic Trace Analysis's TraceDiff.compare_traces on
// dlprof's traces: the events of one iteration of one rank a side, counted and summed by name, so
// that `dlprof-report --diff --hta-compat` compares one to one with HTA's table.
//
// What HTA 0.5 counts (hta/trace_diff.py; hta/common/trace.py add_iteration; trace_parser.py):
//  * The iteration: by default the lowest N of the trace set's "ProfilerStep#N" names, over all
//    its ranks (HTA's symbol table is the set's), whether or not the compared rank has it.
//  * The events: those with a duration and a category other than "Trace" (Kineto's window);
//    instants, counters, flows and memory events are not. Times are rounded inward to whole µs as
//    HTA's parser rounds them (detail::RoundInward), and summed in µs.
//  * An event on no stream (ops, ranges, Python frames, runtime and driver calls, CUPTI's
//    overhead, GPU-side annotations, syncs of no stream) is in the iteration of the last
//    ProfilerStep span with start <= its start < end; HTA takes "last" in file order, where
//    Kineto writes the CPU's spans before the GPU's. GPU work on a stream above 0 is in the
//    iteration of the call that launched it (by correlation id); CPU slices that name a stream
//    (torch.compile's Triton launches) launch nothing and are in none, as in HTA. Stream 0 is in
//    none either: HTA tests stream < 0 and stream > 0.
//  * By name: counts and total duration, their differences (NEW − BASE) and HTA's change of
//    count, '+', '-' or '=', with ops_diff's kind (added, deleted, increased, decreased,
//    unchanged).
//
// One difference, on purpose: the steps are one row, "ProfilerStep#*", whatever their numbers,
// where HTA has a row for each N (deleted in one run and added in the other when the iterations'
// numbers differ); that row is HTA's rows of every step number summed.
//
//   const auto base = dlprof::analysis::hta_iterations(base_trace);
//   const auto next = dlprof::analysis::hta_iterations(new_trace);
//   const HtaTraceDiff diff = dlprof::analysis::hta_trace_diff(base, *base.first_iteration(), next, *next.first_iteration());
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/hta_view.hpp"
#include "dlprof/analysis/run_diff.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// A name's events in one iteration: how many, and their rounded durations summed.
struct HtaNameTotal {
  std::int64_t counts = 0;
  std::int64_t total_duration_us = 0;
};

/// One rank's events counted by iteration and name, as HTA assigns them.
struct HtaIterations {
  std::int64_t rank = 0;
  /// By iteration (ProfilerStep#N's N), by name ("ProfilerStep#*" for every step).
  std::map<std::int64_t, std::map<std::string, HtaNameTotal>> iterations;
  /// Names that start like a step's but hold no number ("ProfilerStep#x"): HTA cannot read them.
  std::vector<std::string> unnumbered_steps;

  std::optional<std::int64_t> first_iteration() const {
    if (iterations.empty()) return std::nullopt;
    return iterations.begin()->first;
  }
};

/// One name in both runs.
struct HtaDiffRow {
  std::string name;
  HtaNameTotal base;
  HtaNameTotal next;
  KeyChangeKind kind = KeyChangeKind::Unchanged;

  std::int64_t diff_counts() const noexcept { return next.counts - base.counts; }
  std::int64_t diff_duration_us() const noexcept { return next.total_duration_us - base.total_duration_us; }
  /// HTA's counts_change_categories.
  char change() const noexcept { return diff_counts() > 0 ? '+' : diff_counts() < 0 ? '-' : '='; }
};

struct HtaTraceDiff {
  std::int64_t base_iteration = 0;
  std::int64_t next_iteration = 0;
  std::vector<HtaDiffRow> rows;  ///< by name, as HTA's table is

  /// The rows whose total duration moved most, largest change first (`at_most` of them).
  std::vector<const HtaDiffRow*> largest_changes(std::size_t at_most) const {
    std::vector<const HtaDiffRow*> changed;
    for (const HtaDiffRow& row : rows)
      if (row.diff_duration_us() != 0 || row.diff_counts() != 0) changed.push_back(&row);
    std::stable_sort(changed.begin(), changed.end(), [](const HtaDiffRow* a, const HtaDiffRow* b) {
      return std::llabs(a->diff_duration_us()) > std::llabs(b->diff_duration_us());
    });
    if (changed.size() > at_most) changed.resize(at_most);
    return changed;
  }
};

namespace detail {

/// N of a name HTA reads as a step: add_iteration's `ProfilerStep\s*#\s*(\d+)`, matched at the
/// start; nullopt for another name, and `unnumbered` set where it starts like a step's.
inline std::optional<std::int64_t> hta_step_number(std::string_view name, bool& unnumbered) {
  unnumbered = false;
  if (!dlprof::detail::starts_with(name, kineto::name::kProfilerStep)) return std::nullopt;
  std::size_t at = kineto::name::kProfilerStep.size();
  const auto skip_spaces = [&] {
    while (at < name.size() && std::isspace(static_cast<unsigned char>(name[at]))) ++at;
  };
  skip_spaces();
  if (at < name.size() && name[at] == '#') {
    ++at;
    skip_spaces();
    std::int64_t number = 0;
    std::size_t digits = 0;
    for (; at < name.size() && name[at] >= '0' && name[at] <= '9' && digits < 18; ++at, ++digits) number = number * 10 + (name[at] - '0');
    if (digits > 0) return number;
  }
  unnumbered = true;
  return std::nullopt;
}

/// The step spans, by their order (HTA's file order), and which one holds a time: the last in
/// that order whose [start, end) holds it. Cut once into segments, each with its winner, so that
/// a time is one binary search whatever the number of steps.
class LastSpanHolding {
 public:
  struct Span {
    std::int64_t start = 0;
    std::int64_t end = 0;
    std::int64_t number = 0;
  };

  explicit LastSpanHolding(const std::vector<Span>& spans) {
    // At one time, ends before starts: a span holds its start and not its end.
    std::vector<std::tuple<std::int64_t, bool, std::size_t>> marks;
    for (std::size_t index = 0; index < spans.size(); ++index) {
      if (spans[index].end <= spans[index].start) continue;  // holds no time
      marks.emplace_back(spans[index].start, true, index);
      marks.emplace_back(spans[index].end, false, index);
    }
    std::sort(marks.begin(), marks.end());
    std::multiset<std::size_t> open;
    for (std::size_t at = 0; at < marks.size();) {
      const std::int64_t time = std::get<0>(marks[at]);
      for (; at < marks.size() && std::get<0>(marks[at]) == time; ++at) {
        if (std::get<1>(marks[at])) open.insert(std::get<2>(marks[at]));
        else open.erase(open.find(std::get<2>(marks[at])));
      }
      segments_.push_back({time, open.empty() ? std::nullopt : std::optional<std::int64_t>(spans[*open.rbegin()].number)});
    }
  }

  /// The number of the span that holds `time`, if any.
  std::optional<std::int64_t> operator()(std::int64_t time) const {
    const auto after = std::upper_bound(segments_.begin(), segments_.end(), time,
                                        [](std::int64_t t, const Segment& segment) { return t < segment.start; });
    if (after == segments_.begin()) return std::nullopt;
    return std::prev(after)->number;
  }

 private:
  struct Segment {
    std::int64_t start = 0;
    std::optional<std::int64_t> number;  ///< of the winning span, until the next segment's start
  };
  std::vector<Segment> segments_;
};

}  // namespace detail

/// A trace's events counted by iteration and name as HTA's TraceDiff counts them.
inline HtaIterations hta_iterations(const Trace& trace) {
  HtaIterations result;
  result.rank = trace.distributed.rank;
  const detail::RoundInward round(trace);
  using Span = detail::LastSpanHolding::Span;
  // Each name once: its step number, if a step's, and the name it is counted under.
  std::vector<std::optional<std::int64_t>> step_number(trace.names.size());
  const std::string step_key = detail::step_free_name(std::string(kineto::name::kProfilerStepPrefix) + "0");
  std::vector<std::string_view> counted_name(trace.names.size());
  for (std::size_t name = 0; name < trace.names.size(); ++name) {
    bool unnumbered = false;
    step_number[name] = detail::hta_step_number(trace.names[name], unnumbered);
    if (unnumbered) result.unnumbered_steps.push_back(trace.names[name]);
    counted_name[name] = step_number[name] ? std::string_view(step_key) : std::string_view(trace.names[name]);
  }
  std::vector<Span> cpu_steps, gpu_steps;
  for (const TraceEvent& event : trace.events)
    if (is_slice(event.kind) && step_number[event.name])
      cpu_steps.push_back({round.start(event.start_ns), round.end(event.start_ns, event.end_ns), *step_number[event.name]});
  for (const GpuEvent& work : trace.gpu_events)
    if (work.kind == GpuEventKind::Annotation && step_number[work.name])
      gpu_steps.push_back({round.start(work.start_ns), round.end(work.start_ns, work.end_ns), *step_number[work.name]});
  const auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
  std::stable_sort(cpu_steps.begin(), cpu_steps.end(), by_start);
  std::stable_sort(gpu_steps.begin(), gpu_steps.end(), by_start);
  std::vector<Span> steps = std::move(cpu_steps);
  steps.insert(steps.end(), gpu_steps.begin(), gpu_steps.end());
  const detail::LastSpanHolding iteration_at(steps);
  const auto count = [&](std::optional<std::int64_t> iteration, std::uint32_t name, std::int64_t start, std::int64_t end) {
    if (!iteration) return;
    HtaNameTotal& total = result.iterations[*iteration][std::string(counted_name[name])];
    ++total.counts;
    total.total_duration_us += (end - start) / 1000;
  };
  const auto count_on_no_stream = [&](std::uint32_t name, std::int64_t start_ns, std::int64_t end_ns) {
    const std::int64_t start = round.start(start_ns);
    count(iteration_at(start), name, start, round.end(start_ns, end_ns));
  };

  std::vector<std::tuple<std::int64_t, std::int64_t, std::uint32_t>> slices_on_streams;
  for (const CpuSliceOnStream& slice : trace.cpu_slices_on_streams) slices_on_streams.emplace_back(slice.start_ns, slice.end_ns, slice.name);
  std::sort(slices_on_streams.begin(), slices_on_streams.end());
  for (const TraceEvent& event : trace.events) {
    if (!is_slice(event.kind)) continue;
    if (std::binary_search(slices_on_streams.begin(), slices_on_streams.end(), std::make_tuple(event.start_ns, event.end_ns, event.name)))
      continue;
    count_on_no_stream(event.name, event.start_ns, event.end_ns);
  }
  std::vector<std::pair<std::uint32_t, std::optional<std::int64_t>>> iteration_of_call;  // by correlation id
  for (const ApiEvent& call : trace.api_events) {
    const std::int64_t start = round.start(call.start_ns);
    const std::optional<std::int64_t> iteration = iteration_at(start);
    count(iteration, call.name, start, round.end(call.start_ns, call.end_ns));
    if (call.correlation != 0) iteration_of_call.emplace_back(call.correlation, iteration);
  }
  // HTA's merge on the correlation id gives GPU work the last of its calls.
  std::stable_sort(iteration_of_call.begin(), iteration_of_call.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const OverheadEvent& overhead : trace.overhead_events) count_on_no_stream(overhead.name, overhead.start_ns, overhead.end_ns);
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Annotation || work.stream < 0) {
      count_on_no_stream(work.name, work.start_ns, work.end_ns);
      continue;
    }
    if (work.stream == 0 || work.correlation == 0) continue;
    const auto call = std::upper_bound(iteration_of_call.begin(), iteration_of_call.end(), work.correlation,
                                       [](std::uint32_t correlation, const auto& entry) { return correlation < entry.first; });
    if (call == iteration_of_call.begin() || std::prev(call)->first != work.correlation) continue;
    count(std::prev(call)->second, work.name, round.start(work.start_ns), round.end(work.start_ns, work.end_ns));
  }
  return result;
}

/// HTA's compare_traces of `base`'s iteration `base_iteration` and `next`'s `next_iteration`:
/// one row per name of either, by name.
inline HtaTraceDiff hta_trace_diff(const HtaIterations& base, std::int64_t base_iteration, const HtaIterations& next,
                                   std::int64_t next_iteration) {
  HtaTraceDiff diff;
  diff.base_iteration = base_iteration;
  diff.next_iteration = next_iteration;
  std::map<std::string, HtaDiffRow> rows;
  const auto add = [&rows](const HtaIterations& run, std::int64_t iteration, HtaNameTotal HtaDiffRow::*side) {
    const auto found = run.iterations.find(iteration);
    if (found == run.iterations.end()) return;
    for (const auto& [name, total] : found->second) {
      HtaDiffRow& row = rows[name];
      row.name = name;
      row.*side = total;
    }
  };
  add(base, base_iteration, &HtaDiffRow::base);
  add(next, next_iteration, &HtaDiffRow::next);
  for (auto& [name, row] : rows) {
    row.kind = row.base.counts == 0   ? KeyChangeKind::Added
               : row.next.counts == 0 ? KeyChangeKind::Deleted
               : row.diff_counts() > 0 ? KeyChangeKind::Increased
               : row.diff_counts() < 0 ? KeyChangeKind::Decreased
                                       : KeyChangeKind::Unchanged;
    diff.rows.push_back(std::move(row));
  }
  return diff;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
