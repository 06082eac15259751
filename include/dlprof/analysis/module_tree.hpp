// dlprof/analysis/module_tree.hpp: the modules of a model as a tree, with their times, as
// TensorBoard's Module view showed them: each module range (`nn.Module: <Type>`, from an annotated
// LibTorch module or torch.profiler's with_modules) under the module ranges around it on its
// thread, its calls, its host time (total and self: less its child modules') and the device time
// of the work launched inside it at any depth.
//
// A module called from two places is two nodes, one under each parent, as the call tree has it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

struct ModuleNode {
  static constexpr std::size_t kRoot = SIZE_MAX;
  std::string_view name;            ///< the range's name, "nn.Module: Linear_classifier.3"
  std::size_t parent = kRoot;       ///< index into ModuleTree::nodes; kRoot for a top-level module
  std::uint64_t calls = 0;
  std::int64_t host_ns = 0;         ///< the ranges' summed duration
  std::int64_t child_host_ns = 0;   ///< of the module ranges directly inside them
  std::int64_t device_ns = 0;       ///< kernels, copies and fills launched inside them, at any depth

  std::int64_t self_host_ns() const noexcept { return host_ns - child_host_ns; }
};

struct ModuleTree {
  std::vector<ModuleNode> nodes;  ///< parents before their children, siblings by first call

  bool empty() const noexcept { return nodes.empty(); }
};

/// Builds a module tree in two parts: its nodes from the module ranges' nesting, then their times
/// from the slices as dlprof::detail::for_each_measured_slice measures them, so that a pass that
/// measures the slices for another purpose fills the tree too (report/views.hpp).
class ModuleTreeBuilder {
 public:
  explicit ModuleTreeBuilder(const Trace& trace) : trace_(trace), node_of_event_(trace.events.size(), ModuleNode::kRoot) {
    std::map<std::pair<std::size_t, std::uint32_t>, std::size_t> node_of_child;  // (parent, name)
    struct Open {
      std::int64_t end_ns;
      std::size_t node;
    };
    std::vector<Open> open;  // the module ranges around the current event on its thread, innermost last
    std::uint32_t thread = UINT32_MAX;
    for (std::size_t i = 0; i < trace.events.size(); ++i) {
      const TraceEvent& event = trace.events[i];
      if (!is_slice(event.kind) || !dlprof::detail::is_module_name(trace.name_of(event))) continue;
      if (event.thread != thread) {
        open.clear();
        thread = event.thread;
      }
      // Events come by thread, then start, enclosing ranges first: the innermost open module
      // range that ends no earlier than this one holds it.
      while (!open.empty() && open.back().end_ns < event.end_ns) open.pop_back();
      const std::size_t parent = open.empty() ? ModuleNode::kRoot : open.back().node;
      const auto [found, added] = node_of_child.try_emplace({parent, event.name}, tree_.nodes.size());
      if (added) {
        ModuleNode& node = tree_.nodes.emplace_back();
        node.name = trace.name_of(event);
        node.parent = parent;
      }
      node_of_event_[i] = found->second;
      open.push_back({event.end_ns, found->second});
    }
  }

  bool empty() const noexcept { return tree_.empty(); }

  /// One slice, measured.
  void add(const dlprof::detail::MeasuredSlice& slice) {
    const std::size_t index = node_of_event_[slice.event];
    if (index == ModuleNode::kRoot) return;
    ModuleNode& node = tree_.nodes[index];
    const std::int64_t duration = trace_.events[slice.event].duration_ns();
    ++node.calls;
    node.host_ns += duration;
    node.device_ns += slice.gpu_total_ns;
    if (node.parent != ModuleNode::kRoot) tree_.nodes[node.parent].child_host_ns += duration;
  }

  ModuleTree take() && { return std::move(tree_); }

 private:
  const Trace& trace_;
  std::vector<std::size_t> node_of_event_;
  ModuleTree tree_;
};

/// The module tree of `trace`; empty where no module range was recorded.
inline ModuleTree module_tree(const Trace& trace) {
  ModuleTreeBuilder builder(trace);
  if (!builder.empty())
    dlprof::detail::for_each_measured_slice(trace, [&builder](const dlprof::detail::MeasuredSlice& slice) { builder.add(slice); });
  return std::move(builder).take();
}

}  // namespace analysis
DLPROF_END_NAMESPACE
