// dlprof/analysis/memory_blocks.hpp: every allocation of a trace's `[memory]` events paired with
// its release, with who made it (op, top-level op, module, call stack), in which step, and what it
// holds (its category).
//
// A tag (tag_memory(): an annotated LibTorch optimizer tags its parameters, their gradients and
// its state after each step) says what memory holds, and adds the memory allocated before the
// window that it names. Otherwise the category comes from where the allocation was made and how
// long it lived:
//
// - temporaries: released before the top-level op that made it ended (or, inside an optimizer
//   step, before the step ended);
// - inputs: made inside a data loader's range (`enumerate(DataLoader)#...`, Category::DataLoader);
// - gradients: made inside autograd's `AccumulateGrad`, or made by backward and still alive when
//   that step's backward pass ended (a parameter's gradient that backward hands to the `.grad`);
// - optimizer state: made inside an optimizer step (`Optimizer.step#...`, Category::Optimizer
//   other than zero_grad) and alive after it;
// - activations: made outside backward and still alive when a backward pass began (what forward
//   keeps for backward), or made in forward (a module's or a Forward range) and alive at the
//   window's end or when an allocation failed; and the gradients backward hands from one node to
//   the next;
// - unknown: the rest, and what was allocated before the window and never tagged (the
//   allocator's count less what the window saw and tags named).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/memory_category.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

using dlprof::kMemoryCategoryCount;
using dlprof::MemoryCategory;

/// One allocation and, where the window saw it, its release.
struct MemoryBlock {
  static constexpr std::int64_t kNeverReleased = INT64_MAX;
  static constexpr std::uint32_t kNone = UINT32_MAX;

  std::int64_t allocated_ns = 0;
  std::int64_t released_ns = kNeverReleased;  ///< kNeverReleased: alive at the window's end
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  std::uint32_t thread = 0;   ///< index into Trace::threads
  std::uint32_t op = kNone;      ///< the innermost op around the allocation on its thread (index into Trace::events)
  std::uint32_t top_op = kNone;  ///< the outermost one
  std::uint32_t module = kNone;  ///< the innermost module range (`nn.Module: ...`) around it
  std::uint32_t stack = TraceEvent::kNoStack;  ///< the call stack of the innermost slice around it that has one
  std::int32_t step = -1;        ///< index into MemoryBlocks::steps; -1 outside every step
  MemoryCategory category = MemoryCategory::Unknown;
  bool tagged = false;  ///< the category is a tag's (tag_memory()), not inferred
  /// Allocated before the window and known from a tag: allocated_ns is kBeforeWindow, and op,
  /// module and stack are not known.
  bool before_window = false;

  static constexpr std::int64_t kBeforeWindow = INT64_MIN;

  bool released() const noexcept { return released_ns != kNeverReleased; }
  bool live_at(std::int64_t time_ns) const noexcept { return allocated_ns <= time_ns && time_ns < released_ns; }
};

/// The allocations of one device, and what the window could not pair.
struct DeviceMemoryBlocks {
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;          ///< -1 for the CPU
  std::vector<MemoryBlock> blocks;   ///< by allocation time
  /// Allocated on the device when the window's first event came, by the allocator's own count
  /// (`Total Allocated` less that event's bytes); 0 where the trace does not count.
  std::int64_t allocated_before_window = 0;
  /// Releases of addresses the window never saw allocated: made before the window, or by a thread
  /// that reports no allocations.
  std::uint64_t releases_of_unseen_allocations = 0;
  std::int64_t released_unseen_bytes = 0;  ///< their bytes, as a positive count
  /// Allocations at an address still holding an earlier one: the earlier one's release was never
  /// reported; it counts as released then.
  std::uint64_t unreported_releases = 0;
  std::uint64_t tags = 0;  ///< tags of the device's memory (tag_memory()), repeats included
  /// The allocator's count after the largest of the device's events, and when; with no count in
  /// the trace, the window's own running sum from allocated_before_window.
  std::int64_t peak_allocated = 0;
  std::int64_t peak_ns = 0;
  bool counted_by_allocator = false;  ///< whether the figures above are the allocator's `Total Allocated`
};

/// A step of the trace (a `ProfilerStep#N` slice), in time order.
struct MemoryStep {
  std::string_view name;
  std::int64_t number = -1;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

struct MemoryBlocks {
  std::vector<MemoryStep> steps;
  std::vector<DeviceMemoryBlocks> devices;  ///< the CPU first, then GPUs by index

  /// Tags of devices without any allocation or release in the trace: nothing to give a category.
  std::uint64_t tags_without_memory_events = 0;

  bool empty() const noexcept { return devices.empty(); }
};

namespace detail {

/// Whether `event` is an allocation or release on `device`.
inline bool is_event_of(const MemoryEvent& event, const DeviceMemoryBlocks& device) noexcept {
  return event.device_type == device.device_type && (device.device_type == MemoryDeviceType::CPU || event.device == device.device);
}

/// What the slices around a moment on one thread say about an allocation made then.
struct AllocationSite {
  std::uint32_t op = MemoryBlock::kNone;
  std::uint32_t top_op = MemoryBlock::kNone;
  std::uint32_t module = MemoryBlock::kNone;
  std::uint32_t stack = TraceEvent::kNoStack;
  std::uint32_t optimizer_step = MemoryBlock::kNone;  ///< the optimizer step slice around it
  bool in_loader = false;
  bool in_accumulate_grad = false;
  bool in_backward = false;
  bool in_forward = false;  ///< a Forward-category range or a module's range around it
};

inline bool is_loader_slice(const TraceEvent& event, std::string_view name) noexcept {
  using dlprof::detail::ends_with;
  using dlprof::detail::starts_with;
  return event.category == Category::DataLoader ||
         (starts_with(name, kineto::name::kDataLoaderPrefix) && ends_with(name, kineto::name::kDataLoaderNextSuffix)) ||
         starts_with(name, kineto::name::kDataPipePrefix);
}

inline bool is_optimizer_step_slice(const TraceEvent& event, std::string_view name) noexcept {
  using dlprof::detail::starts_with;
  if (starts_with(name, kineto::name::kOptimizerZeroGradPrefix)) return false;
  return starts_with(name, kineto::name::kOptimizerStepPrefix) || event.category == Category::Optimizer;
}

inline bool is_backward_slice(const TraceEvent& event, std::string_view name) noexcept {
  return event.category == Category::Backward || dlprof::detail::starts_with(name, kineto::name::kEvaluateFunction);
}

inline AllocationSite allocation_site(const Trace& trace, const SliceTree& tree, std::uint32_t thread, std::int64_t time_ns) {
  AllocationSite site;
  for (std::uint32_t slice = tree.innermost_at(thread, time_ns); slice != SliceTree::kNone; slice = tree.parent(slice)) {
    const TraceEvent& event = trace.events[slice];
    const std::string_view name = trace.names[event.name];
    if (event.kind == EventKind::Op) {
      if (site.op == MemoryBlock::kNone) site.op = slice;
      site.top_op = slice;
    }
    if (site.module == MemoryBlock::kNone && dlprof::detail::is_module_name(name)) site.module = slice;
    if (site.stack == TraceEvent::kNoStack) site.stack = event.stack;
    if (site.optimizer_step == MemoryBlock::kNone && is_optimizer_step_slice(event, name)) site.optimizer_step = slice;
    site.in_loader = site.in_loader || is_loader_slice(event, name);
    site.in_accumulate_grad = site.in_accumulate_grad || name.find(kineto::name::kAccumulateGrad) != std::string_view::npos;
    site.in_backward = site.in_backward || is_backward_slice(event, name);
    site.in_forward = site.in_forward || event.category == Category::Forward || dlprof::detail::is_module_name(name);
  }
  return site;
}

/// The index of the step around `time_ns` (ends included) in `steps` (by time), or -1.
inline std::int32_t step_at(const std::vector<MemoryStep>& steps, std::int64_t time_ns) noexcept {
  const auto after = std::upper_bound(steps.begin(), steps.end(), time_ns,
                                      [](std::int64_t time, const MemoryStep& step) { return time < step.start_ns; });
  if (after == steps.begin() || time_ns > (after - 1)->end_ns) return -1;
  return static_cast<std::int32_t>(after - 1 - steps.begin());
}

/// Whether a time of `sorted_times` falls in (after_ns, before_ns].
inline bool any_between(const std::vector<std::int64_t>& sorted_times, std::int64_t after_ns, std::int64_t before_ns) noexcept {
  const auto next = std::upper_bound(sorted_times.begin(), sorted_times.end(), after_ns);
  return next != sorted_times.end() && *next <= before_ns;
}

/// Each step's backward pass: from its first backward slice's start to its last one's end, on any
/// thread; one pass for the trace's backward slices outside every step.
class BackwardPasses {
 public:
  BackwardPasses(const Trace& trace, const std::vector<MemoryStep>& steps) : steps_(steps), passes_(steps.size() + 1) {
    for (const TraceEvent& event : trace.events) {
      if (!is_slice(event.kind) || !is_backward_slice(event, trace.names[event.name])) continue;
      Pass& pass = passes_[pass_index(event.start_ns)];
      pass.start_ns = std::min(pass.start_ns, event.start_ns);
      pass.end_ns = std::max(pass.end_ns, event.end_ns);
    }
    for (const Pass& pass : passes_)
      if (pass.start_ns <= pass.end_ns) starts_.push_back(pass.start_ns);
    std::sort(starts_.begin(), starts_.end());
  }

  /// The end of the backward pass around `time_ns`'s step; INT64_MIN where that step has none.
  std::int64_t end_of_pass_at(std::int64_t time_ns) const noexcept {
    const Pass& pass = passes_[pass_index(time_ns)];
    return pass.start_ns <= pass.end_ns ? pass.end_ns : INT64_MIN;
  }

  /// Whether a backward pass begins in (after_ns, before_ns].
  bool begins_between(std::int64_t after_ns, std::int64_t before_ns) const noexcept {
    return any_between(starts_, after_ns, before_ns);
  }

 private:
  struct Pass {
    std::int64_t start_ns = INT64_MAX;
    std::int64_t end_ns = INT64_MIN;
  };

  std::size_t pass_index(std::int64_t time_ns) const noexcept {
    const std::int32_t step = step_at(steps_, time_ns);
    return step < 0 ? steps_.size() : static_cast<std::size_t>(step);
  }

  const std::vector<MemoryStep>& steps_;
  std::vector<Pass> passes_;  // by step; the last one outside every step
  std::vector<std::int64_t> starts_;
};

inline MemoryCategory category_of(const Trace& trace, const MemoryBlock& block, const AllocationSite& site,
                                  const BackwardPasses& backward, const std::vector<std::int64_t>& out_of_memory_times) {
  const auto ends_by = [&](std::uint32_t slice) {
    return slice != MemoryBlock::kNone && block.released_ns <= trace.events[slice].end_ns;
  };
  if (ends_by(site.top_op) || ends_by(site.optimizer_step)) return MemoryCategory::Temporary;
  if (site.in_loader) return MemoryCategory::Input;
  if (site.in_accumulate_grad) return MemoryCategory::Gradient;
  if (site.optimizer_step != MemoryBlock::kNone) return MemoryCategory::OptimizerState;
  if (site.in_backward)
    return block.released_ns > backward.end_of_pass_at(block.allocated_ns) ? MemoryCategory::Gradient : MemoryCategory::Activation;
  if (backward.begins_between(block.allocated_ns, block.released_ns)) return MemoryCategory::Activation;
  // Its backward is yet to come: the window ended, or an allocation failed and unwound the step.
  if (site.in_forward && (!block.released() || any_between(out_of_memory_times, block.allocated_ns, block.released_ns)))
    return MemoryCategory::Activation;
  return MemoryCategory::Unknown;
}

/// Tags say what memory holds: a tag on memory the window saw allocated gives that allocation
/// its category; one on memory allocated before the window adds it, alive from before the window
/// to its release (a release of an allocation the window never saw, or a new allocation at its
/// address).
inline void apply_memory_tags(const Trace& trace, MemoryBlocks& result, const std::map<std::pair<int, std::int32_t>, std::size_t>& device_index,
                              const std::vector<std::unordered_map<std::uint64_t, std::vector<std::int64_t>>>& unseen_releases) {
  if (trace.memory_tags.empty()) return;
  std::vector<std::unordered_map<std::uint64_t, std::vector<std::size_t>>> by_address(result.devices.size());
  for (std::size_t d = 0; d < result.devices.size(); ++d)
    for (std::size_t b = 0; b < result.devices[d].blocks.size(); ++b) by_address[d][result.devices[d].blocks[b].address].push_back(b);
  std::vector<std::vector<MemoryBlock>> earlier(result.devices.size());  // allocated before the window
  std::vector<std::unordered_map<std::uint64_t, std::size_t>> earlier_at(result.devices.size());
  for (const MemoryTag& tag : trace.memory_tags) {
    const auto found = device_index.find({static_cast<int>(tag.device_type), tag.device_type == MemoryDeviceType::CPU ? -1 : tag.device});
    if (found == device_index.end()) {
      ++result.tags_without_memory_events;
      continue;
    }
    const std::size_t d = found->second;
    DeviceMemoryBlocks& device = result.devices[d];
    ++device.tags;
    std::int64_t next_allocation = MemoryBlock::kNeverReleased;  // of the address, after the tag
    bool seen = false;
    if (const auto blocks = by_address[d].find(tag.address); blocks != by_address[d].end()) {
      for (const std::size_t b : blocks->second) {
        MemoryBlock& block = device.blocks[b];
        if (block.live_at(tag.time_ns)) {
          block.category = tag.category;
          block.tagged = true;
          seen = true;
          break;
        }
        if (block.allocated_ns > tag.time_ns) next_allocation = std::min(next_allocation, block.allocated_ns);
      }
    }
    if (seen || earlier_at[d].count(tag.address) != 0) continue;
    MemoryBlock block;
    block.allocated_ns = MemoryBlock::kBeforeWindow;
    block.released_ns = next_allocation;
    if (const auto releases = unseen_releases[d].find(tag.address); releases != unseen_releases[d].end())
      for (const std::int64_t time : releases->second)
        if (time >= tag.time_ns) block.released_ns = std::min(block.released_ns, time);
    block.address = tag.address;
    block.bytes = tag.bytes;
    block.thread = tag.thread;
    block.category = tag.category;
    block.tagged = true;
    block.before_window = true;
    earlier_at[d].emplace(tag.address, earlier[d].size());
    earlier[d].push_back(block);
  }
  for (std::size_t d = 0; d < result.devices.size(); ++d)
    result.devices[d].blocks.insert(result.devices[d].blocks.begin(), earlier[d].begin(), earlier[d].end());
}

inline std::vector<MemoryStep> memory_steps(const Trace& trace) {
  std::vector<MemoryStep> steps;
  for (const TraceEvent& event : trace.events) {
    if (!is_slice(event.kind)) continue;
    const std::string_view name = trace.names[event.name];
    if (event.kind != EventKind::Step && !dlprof::detail::is_profiler_step(name)) continue;
    steps.push_back(MemoryStep{name, dlprof::detail::profiler_step_number(name), event.start_ns, event.end_ns});
  }
  std::sort(steps.begin(), steps.end(), [](const MemoryStep& a, const MemoryStep& b) {
    return std::tie(a.start_ns, a.end_ns) < std::tie(b.start_ns, b.end_ns);
  });
  // Steps never overlap: a step recorded on two threads is one step.
  steps.erase(std::unique(steps.begin(), steps.end(),
                          [](const MemoryStep& a, const MemoryStep& b) { return b.start_ns < a.end_ns; }),
              steps.end());
  return steps;
}

}  // namespace detail

/// The name of the op that made `block`; empty where it was made outside every op.
inline std::string_view op_of(const Trace& trace, const MemoryBlock& block) noexcept {
  return block.op == MemoryBlock::kNone ? std::string_view() : trace.name_of(trace.events[block.op]);
}

/// The name of the module range around `block`'s allocation; empty where none.
inline std::string_view module_of(const Trace& trace, const MemoryBlock& block) noexcept {
  return block.module == MemoryBlock::kNone ? std::string_view() : trace.name_of(trace.events[block.module]);
}

/// The line of the user's code that made `block` (the innermost user frame of its stack); empty
/// where it has no stack or only library frames.
inline std::string code_line_of(const Trace& trace, const MemoryBlock& block) {
  if (block.stack == TraceEvent::kNoStack || block.stack >= trace.stacks.size()) return {};
  const StackFrame* frame = innermost_user_frame(trace, trace.stacks[block.stack]);
  return frame == nullptr ? std::string() : frame_text(trace, *frame);
}

/// The allocations of `trace`, paired with their releases, per device.
inline MemoryBlocks memory_blocks(const Trace& trace) {
  MemoryBlocks result;
  if (trace.memory_events.empty()) return result;
  result.steps = detail::memory_steps(trace);
  std::vector<std::uint32_t> order(trace.memory_events.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return trace.memory_events[a].time_ns < trace.memory_events[b].time_ns;
  });

  using DeviceKey = std::pair<int, std::int32_t>;  // (device type, index)
  std::map<DeviceKey, std::size_t> device_index;
  std::vector<std::unordered_map<std::uint64_t, std::size_t>> live;  // per device: address -> block
  std::vector<std::int64_t> running;                                 // per device: allocated bytes
  std::vector<std::unordered_map<std::uint64_t, std::vector<std::int64_t>>> unseen_releases;  // per device: address -> times
  for (const std::uint32_t index : order) {
    const MemoryEvent& memory = trace.memory_events[index];
    const DeviceKey key{static_cast<int>(memory.device_type), memory.device_type == MemoryDeviceType::CPU ? -1 : memory.device};
    const auto [found, first] = device_index.try_emplace(key, result.devices.size());
    if (first) {
      DeviceMemoryBlocks device;
      device.device_type = memory.device_type;
      device.device = key.second;
      device.counted_by_allocator = memory.total_allocated != 0;
      device.allocated_before_window = device.counted_by_allocator ? std::max<std::int64_t>(0, memory.total_allocated - memory.bytes) : 0;
      device.peak_allocated = device.allocated_before_window;
      device.peak_ns = memory.time_ns;
      result.devices.push_back(std::move(device));
      live.emplace_back();
      unseen_releases.emplace_back();
      running.push_back(result.devices.back().allocated_before_window);
    }
    const std::size_t d = found->second;
    DeviceMemoryBlocks& device = result.devices[d];
    running[d] += memory.bytes;
    const std::int64_t allocated = device.counted_by_allocator ? memory.total_allocated : running[d];
    if (allocated > device.peak_allocated) {
      device.peak_allocated = allocated;
      device.peak_ns = memory.time_ns;
    }
    if (memory.bytes > 0) {
      const auto [held, fresh] = live[d].try_emplace(memory.address, device.blocks.size());
      if (!fresh) {
        device.blocks[held->second].released_ns = memory.time_ns;
        ++device.unreported_releases;
        held->second = device.blocks.size();
      }
      MemoryBlock block;
      block.allocated_ns = memory.time_ns;
      block.address = memory.address;
      block.bytes = memory.bytes;
      block.thread = memory.thread;
      device.blocks.push_back(block);
    } else if (memory.bytes < 0) {
      const auto held = live[d].find(memory.address);
      if (held == live[d].end()) {
        ++device.releases_of_unseen_allocations;
        device.released_unseen_bytes -= memory.bytes;
        unseen_releases[d][memory.address].push_back(memory.time_ns);
      } else {
        device.blocks[held->second].released_ns = memory.time_ns;
        live[d].erase(held);
      }
    }
  }

  const detail::SliceTree tree(trace);
  const detail::BackwardPasses backward(trace, result.steps);
  std::vector<std::int64_t> out_of_memory_times;
  for (const OutOfMemoryEvent& failure : trace.out_of_memory) out_of_memory_times.push_back(failure.time_ns);
  std::sort(out_of_memory_times.begin(), out_of_memory_times.end());
  for (DeviceMemoryBlocks& device : result.devices) {
    for (MemoryBlock& block : device.blocks) {
      const detail::AllocationSite site = detail::allocation_site(trace, tree, block.thread, block.allocated_ns);
      block.op = site.op;
      block.top_op = site.top_op;
      block.module = site.module;
      block.stack = site.stack;
      block.step = detail::step_at(result.steps, block.allocated_ns);
      block.category = detail::category_of(trace, block, site, backward, out_of_memory_times);
    }
  }
  detail::apply_memory_tags(trace, result, device_index, unseen_releases);
  std::sort(result.devices.begin(), result.devices.end(), [](const DeviceMemoryBlocks& a, const DeviceMemoryBlocks& b) {
    const bool a_cpu = a.device_type == MemoryDeviceType::CPU, b_cpu = b.device_type == MemoryDeviceType::CPU;
    return std::tie(b_cpu, a.device) < std::tie(a_cpu, b.device);
  });
  return result;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
