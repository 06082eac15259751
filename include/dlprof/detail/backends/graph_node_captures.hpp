// dlprof/detail/backends/graph_node_captures.hpp: which op or range captured each CUDA graph node.
//
// Work a graph replays carries the graph launch's correlation id, so it links to the op around
// cudaGraphLaunch and says nothing of the op that put it in the graph. CUPTI says when each node
// is created (stream capture, cudaGraphAdd*Node) on the creating thread, and when a node is cloned
// into another graph (cudaGraphInstantiate clones every node into the executable graph, whose
// node ids the work records carry). The table keeps, for each node created while a correlated
// scope was open on its thread, that scope, and gives each clone its original's. It is
// process-wide and outlives windows: graphs are usually captured once, before or between the
// windows that replay them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

class GraphNodeCaptures {
 public:
  /// Nodes kept at most (about 64 bytes each); a node created when the table is full is not kept,
  /// and counted.
  static constexpr std::size_t kDefaultCapacity = std::size_t{1} << 20;

  explicit GraphNodeCaptures(std::size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  /// Node `node` was created on this thread while `scope` was its innermost correlated scope. A
  /// node already known keeps what it has: a clone made by an instantiation inside a scope is
  /// the original's work, not that scope's.
  void created(std::uint64_t node, const CorrelatedScope& scope) noexcept {
    GraphNodeCapture capture;
    capture.node = node;
    capture.name = scope.name;
    capture.stack = scope.stack;
    capture.kind = scope.kind;
    if (scope.arguments != nullptr) {
      capture.arguments = *scope.arguments;
      capture.has_arguments = true;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (nodes_.count(node) == 0) keep_locked(capture);
  }

  /// Node `node` is a clone of `original`: it replays what the original was captured from, or
  /// nothing known where the original was created outside any correlated scope.
  void cloned(std::uint64_t node, std::uint64_t original) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = nodes_.find(original);
    if (found == nodes_.end()) {
      nodes_.erase(node);
      return;
    }
    GraphNodeCapture capture = found->second;
    capture.node = node;
    keep_locked(capture);
  }

  /// Node `node` is being destroyed.
  void destroyed(std::uint64_t node) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    nodes_.erase(node);
  }

  /// The captures of the nodes that `work` replayed, each once.
  std::vector<GraphNodeCapture> of(const std::vector<GpuEvent>& work) const {
    std::vector<GraphNodeCapture> captures;
    std::unordered_set<std::uint64_t> seen;
    std::lock_guard<std::mutex> lock(mutex_);
    if (nodes_.empty()) return captures;
    for (const GpuEvent& event : work) {
      if (event.graph_node_id == 0 || !seen.insert(event.graph_node_id).second) continue;
      const auto found = nodes_.find(event.graph_node_id);
      if (found != nodes_.end()) captures.push_back(found->second);
    }
    return captures;
  }

  /// Nodes not kept because the table was full, or memory was short.
  std::uint64_t lost() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_;
  }

 private:
  void keep_locked(const GraphNodeCapture& capture) noexcept {
    if (nodes_.size() >= capacity_ && nodes_.count(capture.node) == 0) {
      ++lost_;
      return;
    }
    try {
      nodes_.insert_or_assign(capture.node, capture);
    } catch (...) {  // no memory: the node's work links to its graph launch only
      ++lost_;
    }
  }

  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, GraphNodeCapture> nodes_;
  std::uint64_t lost_ = 0;
};

}  // namespace detail
DLPROF_END_NAMESPACE
