// dlprof/analysis/cuda_graphs.hpp: the GPU work that CUDA (or HIP) graphs replayed, by graph.
//
// A kernel, copy or fill came from a graph when its record names one (CUPTI's graph id, Kineto's
// "graph id" on CUDA 12+) or when the call that launched it, by correlation, is a graph launch
// (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch), as in traces that carry no graph ids. The work
// of one graph id is one row; work without an id is grouped by the op or range its launches ran
// in, the closest a trace without ids comes to naming its graph. Work whose node dlprof saw
// captured names the op or range that captured it, and the line of that scope's stack.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// The work one graph replayed in the trace.
struct GraphReplays {
  std::uint32_t graph_id = 0;     ///< 0: the trace names no graph; the graphs launched from `launched_from`
  std::string launched_from;      ///< the op or range around its launches (the most frequent); empty when none
  std::uint64_t launches = 0;     ///< graph launch calls whose work it is
  std::uint64_t work = 0;         ///< kernels, copies and fills replayed
  std::uint64_t nodes = 0;        ///< distinct graph nodes among them (0 where the trace names none)
  std::int64_t gpu_ns = 0;
  std::string top_kernel;         ///< the kernel (or copy, fill) with the most time
  std::uint64_t captured_work = 0;  ///< of `work`, that whose capturing op or range the trace names
  std::string captured_by;        ///< the op or range that captured the most of its GPU time; empty if none known
  std::string captured_at;        ///< the line of the user's code captured_by ran at; empty without its stack
};

struct CudaGraphs {
  std::vector<GraphReplays> graphs;  ///< by GPU time
  std::int64_t gpu_ns = 0;           ///< of all the work graphs replayed
  std::int64_t all_gpu_ns = 0;       ///< of all the trace's kernels, copies and fills
  std::uint64_t launches = 0;        ///< graph launch calls
  std::uint64_t work = 0;            ///< kernels, copies and fills graphs replayed
  std::uint64_t captured_work = 0;   ///< of which the trace names the op or range that captured them

  bool empty() const noexcept { return graphs.empty(); }
};

/// Whether an API call launches a graph.
inline bool is_graph_launch(std::string_view call) noexcept {
  return call.find("GraphLaunch") != std::string_view::npos;
}

/// `trace`'s graph replays (see the header comment).
inline CudaGraphs cuda_graphs(const Trace& trace) {
  CudaGraphs result;
  const detail::SliceTree tree(trace);
  struct Tally {
    GraphReplays row;
    std::set<std::uint32_t> launch_calls;  // by correlation
    std::set<std::uint64_t> nodes;
    std::map<std::string_view, std::int64_t> work_ns;
    std::map<std::string_view, std::uint64_t> launched_from;
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::int64_t> captured_ns;  // by (scope name, stack)
  };
  std::map<std::pair<std::uint32_t, std::string_view>, Tally> tallies;  // by graph id, then launching slice
  for (const GpuEvent& work : trace.gpu_events) {
    if (work.kind == GpuEventKind::Sync || work.kind == GpuEventKind::Annotation) continue;
    result.all_gpu_ns += work.duration_ns();
    const ApiEvent* call = tree.call_with_correlation(work.correlation);
    const bool launched_by_graph = call != nullptr && is_graph_launch(trace.names[call->name]);
    if (work.graph_id == 0 && work.graph_node_id == 0 && !launched_by_graph) continue;
    std::string_view from;
    if (call != nullptr)
      if (const std::uint32_t slice = tree.innermost_at(call->thread, call->start_ns); slice != detail::SliceTree::kNone)
        from = trace.name_of(trace.events[slice]);
    Tally& tally = tallies[{work.graph_id, work.graph_id == 0 ? from : std::string_view()}];
    tally.row.graph_id = work.graph_id;
    ++tally.row.work;
    tally.row.gpu_ns += work.duration_ns();
    result.gpu_ns += work.duration_ns();
    if (work.graph_node_id != 0) tally.nodes.insert(work.graph_node_id);
    tally.work_ns[trace.names[work.name]] += work.duration_ns();
    if (launched_by_graph && tally.launch_calls.insert(work.correlation).second) ++tally.launched_from[from];
    ++result.work;
    if (work.captured_by < trace.names.size()) {
      ++tally.row.captured_work;
      ++result.captured_work;
      tally.captured_ns[{work.captured_by, work.capture_stack}] += work.duration_ns();
    }
  }
  for (auto& [key, tally] : tallies) {
    const auto most = [](const auto& totals) {
      const auto top = std::max_element(totals.begin(), totals.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      return top == totals.end() ? std::string() : std::string(top->first);
    };
    tally.row.launches = tally.launch_calls.size();
    tally.row.nodes = tally.nodes.size();
    tally.row.top_kernel = most(tally.work_ns);
    tally.row.launched_from = most(tally.launched_from);
    const auto capture = std::max_element(tally.captured_ns.begin(), tally.captured_ns.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
    if (capture != tally.captured_ns.end()) {
      const auto [name, stack] = capture->first;
      tally.row.captured_by = trace.names[name];
      if (stack < trace.stacks.size())
        if (const StackFrame* frame = innermost_user_frame(trace, trace.stacks[stack])) tally.row.captured_at = frame_text(trace, *frame);
    }
    result.launches += tally.row.launches;
    result.graphs.push_back(std::move(tally.row));
  }
  std::stable_sort(result.graphs.begin(), result.graphs.end(),
                   [](const GraphReplays& a, const GraphReplays& b) { return a.gpu_ns > b.gpu_ns; });
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
