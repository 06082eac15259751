// dlprof/report/detail/cuda_graphs_section.hpp: the report's "CUDA graphs" section as the text
// and HTML renderers show it: the GPU work graphs replayed, by graph, with how often each was
// launched, from where, and its top kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/cuda_graphs.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/table_section.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline TableSection cuda_graphs_section(const RankReport& rank, std::size_t rows) {
  const analysis::CudaGraphs& graphs = rank.cuda_graphs;
  TableSection section;
  const auto share = [](std::int64_t part, std::int64_t whole) {
    return whole <= 0 ? std::string("-") : fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  };
  section.title = fmt::format("CUDA graphs: the GPU work graphs replayed ({} of the GPU time, {} launch{})",
                              share(graphs.gpu_ns, graphs.all_gpu_ns), graphs.launches, graphs.launches == 1 ? "" : "es");
  const bool captures = graphs.captured_work != 0;
  section.headers = {"Graph", "Launched from", "Launches", "Work", "Nodes", "GPU time", "Share", "Top kernel"};
  if (captures) section.headers.insert(section.headers.end(), {"Captured by", "Captured at"});
  for (std::size_t i = 0; i < graphs.graphs.size() && i < rows; ++i) {
    const analysis::GraphReplays& graph = graphs.graphs[i];
    std::vector<std::string> row{graph.graph_id == 0 ? std::string("-") : std::to_string(graph.graph_id),
                                 graph.launched_from.empty() ? std::string("-") : graph.launched_from,
                                 std::to_string(graph.launches), std::to_string(graph.work),
                                 graph.nodes == 0 ? std::string("-") : std::to_string(graph.nodes),
                                 KeyAverages::format_duration(graph.gpu_ns), share(graph.gpu_ns, graphs.gpu_ns), graph.top_kernel};
    if (captures) {
      row.push_back(graph.captured_by.empty() ? std::string("-") : graph.captured_by);
      row.push_back(graph.captured_at.empty() ? std::string("-") : graph.captured_at);
    }
    section.rows.push_back(std::move(row));
  }
  if (graphs.graphs.size() > rows) section.notes.push_back(fmt::format("{} more graphs", graphs.graphs.size() - rows));
  if (std::any_of(graphs.graphs.begin(), graphs.graphs.end(), [](const analysis::GraphReplays& graph) { return graph.graph_id == 0; }))
    section.notes.push_back("The trace names no graph for some of this work (CUDA before 12, or ROCm): it is grouped by the op or "
                            "range its graph launches ran in");
  if (captures && graphs.captured_work < graphs.work)
    section.notes.push_back(fmt::format(
        "{} of the {} pieces of replayed work have no capturing op: their graphs were captured while no dlprof Profiler "
        "recorded (capture them in a recorded step, or start a Profiler before the capture)",
        graphs.work - graphs.captured_work, graphs.work));
  return section;
}

}  // namespace detail
DLPROF_END_NAMESPACE
