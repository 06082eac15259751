// dlprof/analysis/memory_peak.hpp: what was alive at each device's peak of allocated memory, by
// category, by the op and module that allocated it, by the line of code (with stacks), and the
// largest allocations themselves.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/memory_blocks.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// Live bytes that share one origin.
struct MemoryShare {
  std::string name;  ///< "aten::addmm in nn.Module: Linear_fc2", a line of code, ...
  std::int64_t bytes = 0;
  std::uint64_t allocations = 0;
};

/// One allocation alive at a peak.
struct LiveAllocation {
  std::int64_t bytes = 0;
  std::int64_t allocated_ns = 0;
  std::string site;  ///< op and module, as MemoryShare::name
  std::string line;  ///< the line of code; empty without stacks
  std::string_view step;  ///< the step it was made in; empty outside every step
  MemoryCategory category = MemoryCategory::Unknown;
};

/// What held one device's memory at its peak.
struct MemoryPeak {
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;
  /// The allocator's count at the peak (or the window's, MemoryBlocks), and what tags show it
  /// leaves out (uncounted_bytes).
  std::int64_t allocated = 0;
  std::int64_t time_ns = 0;
  std::string_view step;     ///< the step the peak came in; empty outside every step
  std::string_view phase;    ///< "forward", "backward", "optimizer step", "data loading" or empty
  std::string site;          ///< the op and module of the allocation that reached the peak
  /// Live bytes by MemoryCategory; Unknown holds what was allocated before the window (or by
  /// threads that report nothing) and is still counted by the allocator.
  std::array<std::int64_t, kMemoryCategoryCount> by_category{};
  std::int64_t unseen_bytes = 0;  ///< of those, what the window never saw allocated
  /// Tagged memory allocated before the allocator began to count (LibTorch's CPU allocator counts
  /// only what it allocates while a profiler listens): in `allocated` and its category, beyond
  /// the allocator's count.
  std::int64_t uncounted_bytes = 0;
  std::vector<MemoryShare> by_site;   ///< largest first
  std::vector<MemoryShare> by_line;   ///< largest first; empty without stacks
  std::vector<LiveAllocation> largest;  ///< largest first

  std::int64_t category_bytes(MemoryCategory category) const noexcept { return by_category[static_cast<std::size_t>(category)]; }
};

namespace detail {

/// "aten::addmm in nn.Module: Linear_fc2", "aten::empty", "outside any op in nn.Module: Net".
inline std::string site_of(const Trace& trace, const MemoryBlock& block) {
  if (block.before_window) return "allocated before the window";
  const std::string_view op = op_of(trace, block);
  const std::string_view module = module_of(trace, block);
  std::string site(op.empty() ? std::string_view("outside any op") : op);
  if (!module.empty()) site.append(" in ").append(module);
  return site;
}

/// The phase of the step a thread was in at a moment: the outermost phase slice around it.
inline std::string_view phase_at(const Trace& trace, const SliceTree& tree, std::uint32_t thread, std::int64_t time_ns) {
  std::string_view phase;
  for (std::uint32_t slice = tree.innermost_at(thread, time_ns); slice != SliceTree::kNone; slice = tree.parent(slice)) {
    const TraceEvent& event = trace.events[slice];
    const std::string_view name = trace.names[event.name];
    if (is_backward_slice(event, name)) phase = "backward";
    else if (is_optimizer_step_slice(event, name)) phase = "optimizer step";
    else if (is_loader_slice(event, name)) phase = "data loading";
    else if (event.category == Category::Forward || dlprof::detail::is_module_name(name)) phase = "forward";
  }
  return phase;
}

inline std::vector<MemoryShare> largest_shares(std::map<std::string, MemoryShare>&& shares, std::size_t rows) {
  std::vector<MemoryShare> sorted;
  sorted.reserve(shares.size());
  for (auto& [name, share] : shares) sorted.push_back(std::move(share));
  std::sort(sorted.begin(), sorted.end(),
            [](const MemoryShare& a, const MemoryShare& b) { return std::tie(b.bytes, a.name) < std::tie(a.bytes, b.name); });
  if (sorted.size() > rows) sorted.resize(rows);
  return sorted;
}

}  // namespace detail

namespace detail {

/// What held `device`'s memory at `time_ns`, when the allocator counted `allocated`: the fields
/// of a MemoryPeak but its site and phase.
inline MemoryPeak memory_at(const Trace& trace, const MemoryBlocks& blocks, const DeviceMemoryBlocks& device,
                            std::int64_t time_ns, std::int64_t allocated, std::size_t rows) {
  MemoryPeak state;
  state.device_type = device.device_type;
  state.device = device.device;
  state.allocated = allocated;
  state.time_ns = time_ns;
  const std::int32_t step = step_at(blocks.steps, time_ns);
  if (step >= 0) state.step = blocks.steps[static_cast<std::size_t>(step)].name;
  std::map<std::string, MemoryShare> by_site, by_line;
  std::vector<const MemoryBlock*> live;
  std::int64_t seen = 0;
  for (const MemoryBlock& block : device.blocks) {
    if (block.allocated_ns > time_ns) break;  // blocks are by allocation time
    if (!block.live_at(time_ns)) continue;
    live.push_back(&block);
    seen += block.bytes;
    state.by_category[static_cast<std::size_t>(block.category)] += block.bytes;
    MemoryShare& site = by_site[site_of(trace, block)];
    site.bytes += block.bytes;
    ++site.allocations;
    if (std::string line = code_line_of(trace, block); !line.empty()) {
      MemoryShare& share = by_line[line];
      share.bytes += block.bytes;
      ++share.allocations;
    }
  }
  state.unseen_bytes = std::max<std::int64_t>(0, state.allocated - seen);
  state.uncounted_bytes = std::max<std::int64_t>(0, seen - state.allocated);
  state.allocated += state.uncounted_bytes;
  state.by_category[static_cast<std::size_t>(MemoryCategory::Unknown)] += state.unseen_bytes;
  for (auto& [name, share] : by_site) share.name = name;
  for (auto& [name, share] : by_line) share.name = name;
  state.by_site = largest_shares(std::move(by_site), rows);
  state.by_line = largest_shares(std::move(by_line), rows);
  std::stable_sort(live.begin(), live.end(), [](const MemoryBlock* a, const MemoryBlock* b) { return a->bytes > b->bytes; });
  for (std::size_t i = 0; i < live.size() && i < rows; ++i) {
    const MemoryBlock& block = *live[i];
    LiveAllocation allocation{block.bytes, block.allocated_ns, site_of(trace, block), code_line_of(trace, block), {}, block.category};
    if (block.step >= 0) allocation.step = blocks.steps[static_cast<std::size_t>(block.step)].name;
    state.largest.push_back(std::move(allocation));
  }
  return state;
}

/// The op (and module) innermost on `thread` at `time_ns`, as site_of() names an allocation's.
inline std::string site_at(const Trace& trace, const SliceTree& tree, std::uint32_t thread, std::int64_t time_ns) {
  MemoryBlock block;
  block.op = tree.self_or_ancestor(tree.innermost_at(thread, time_ns), [](const TraceEvent& event) { return event.kind == EventKind::Op; });
  block.module = tree.self_or_ancestor(tree.innermost_at(thread, time_ns),
                                       [&](const TraceEvent& event) { return dlprof::detail::is_module_name(trace.name_of(event)); });
  return site_of(trace, block);
}

}  // namespace detail

/// Each device's peak in `blocks` (memory_blocks(trace)) explained, `rows` shares and allocations
/// of each kind at most.
inline std::vector<MemoryPeak> memory_peaks(const Trace& trace, const MemoryBlocks& blocks, std::size_t rows = 8) {
  std::vector<MemoryPeak> peaks;
  if (blocks.empty()) return peaks;
  const detail::SliceTree tree(trace);
  for (const DeviceMemoryBlocks& device : blocks.devices) {
    if (device.peak_allocated <= 0) continue;
    MemoryPeak peak = detail::memory_at(trace, blocks, device, device.peak_ns, device.peak_allocated, rows);
    for (const MemoryBlock& block : device.blocks) {
      if (block.allocated_ns > peak.time_ns) break;
      if (block.allocated_ns != peak.time_ns) continue;
      peak.site = detail::site_of(trace, block);  // the allocation that reached the peak
      peak.phase = detail::phase_at(trace, tree, block.thread, block.allocated_ns);
      break;
    }
    peaks.push_back(std::move(peak));
  }
  return peaks;
}

/// An allocation the allocator could not make, and what held the device's memory then.
struct OutOfMemory {
  std::int64_t requested = 0;  ///< bytes asked for
  /// The device's memory at the failure: allocated is the allocator's count then (and what tags
  /// show it leaves out); site and phase are the op that asked and its phase.
  MemoryPeak state;
};

/// Each out-of-memory report of `trace` (LibTorch's `[OutOfMemory]`) explained with `blocks`
/// (memory_blocks(trace)), `rows` shares and allocations of each kind at most. A report on a
/// device without memory events says only what it asked for and the allocator's count.
inline std::vector<OutOfMemory> out_of_memory(const Trace& trace, const MemoryBlocks& blocks, std::size_t rows = 8) {
  std::vector<OutOfMemory> failures;
  if (trace.out_of_memory.empty()) return failures;
  const detail::SliceTree tree(trace);
  for (const OutOfMemoryEvent& event : trace.out_of_memory) {
    OutOfMemory failure;
    failure.requested = event.bytes;
    const auto device = std::find_if(blocks.devices.begin(), blocks.devices.end(), [&](const DeviceMemoryBlocks& candidate) {
      return candidate.device_type == event.device_type &&
             (event.device_type == MemoryDeviceType::CPU || candidate.device == event.device);
    });
    if (device != blocks.devices.end()) {
      failure.state = detail::memory_at(trace, blocks, *device, event.time_ns, event.total_allocated, rows);
    } else {
      failure.state.device_type = event.device_type;
      failure.state.device = event.device_type == MemoryDeviceType::CPU ? -1 : event.device;
      failure.state.time_ns = event.time_ns;
      failure.state.allocated = event.total_allocated;
      failure.state.unseen_bytes = event.total_allocated;
      failure.state.by_category[static_cast<std::size_t>(MemoryCategory::Unknown)] = event.total_allocated;
      const std::vector<MemoryStep> steps = detail::memory_steps(trace);
      const std::int32_t step = detail::step_at(steps, event.time_ns);
      if (step >= 0) failure.state.step = steps[static_cast<std::size_t>(step)].name;
    }
    if (event.thread < trace.threads.size()) {
      failure.state.site = detail::site_at(trace, tree, event.thread, event.time_ns);
      failure.state.phase = detail::phase_at(trace, tree, event.thread, event.time_ns);
    }
    failures.push_back(std::move(failure));
  }
  return failures;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
