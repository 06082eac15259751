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

/// Each device's peak in `blocks` (memory_blocks(trace)) explained, `rows` shares and allocations
/// of each kind at most.
inline std::vector<MemoryPeak> memory_peaks(const Trace& trace, const MemoryBlocks& blocks, std::size_t rows = 8) {
  std::vector<MemoryPeak> peaks;
  if (blocks.empty()) return peaks;
  const detail::SliceTree tree(trace);
  for (const DeviceMemoryBlocks& device : blocks.devices) {
    MemoryPeak peak;
    peak.device_type = device.device_type;
    peak.device = device.device;
    peak.allocated = device.peak_allocated;
    peak.time_ns = device.peak_ns;
    if (peak.allocated <= 0) continue;
    const std::int32_t step = detail::step_at(blocks.steps, peak.time_ns);
    if (step >= 0) peak.step = blocks.steps[static_cast<std::size_t>(step)].name;
    std::map<std::string, MemoryShare> by_site, by_line;
    std::vector<const MemoryBlock*> live;
    std::int64_t seen = 0;
    for (const MemoryBlock& block : device.blocks) {
      if (block.allocated_ns > peak.time_ns) break;  // blocks are by allocation time
      if (block.allocated_ns == peak.time_ns && peak.site.empty()) {
        peak.site = detail::site_of(trace, block);
        peak.phase = detail::phase_at(trace, tree, block.thread, block.allocated_ns);
      }
      if (!block.live_at(peak.time_ns)) continue;
      live.push_back(&block);
      seen += block.bytes;
      peak.by_category[static_cast<std::size_t>(block.category)] += block.bytes;
      MemoryShare& site = by_site[detail::site_of(trace, block)];
      site.bytes += block.bytes;
      ++site.allocations;
      if (std::string line = code_line_of(trace, block); !line.empty()) {
        MemoryShare& share = by_line[line];
        share.bytes += block.bytes;
        ++share.allocations;
      }
    }
    peak.unseen_bytes = std::max<std::int64_t>(0, peak.allocated - seen);
    peak.uncounted_bytes = std::max<std::int64_t>(0, seen - peak.allocated);
    peak.allocated += peak.uncounted_bytes;
    peak.by_category[static_cast<std::size_t>(MemoryCategory::Unknown)] += peak.unseen_bytes;
    for (auto& [name, share] : by_site) share.name = name;
    for (auto& [name, share] : by_line) share.name = name;
    peak.by_site = detail::largest_shares(std::move(by_site), rows);
    peak.by_line = detail::largest_shares(std::move(by_line), rows);
    std::stable_sort(live.begin(), live.end(), [](const MemoryBlock* a, const MemoryBlock* b) { return a->bytes > b->bytes; });
    for (std::size_t i = 0; i < live.size() && i < rows; ++i) {
      const MemoryBlock& block = *live[i];
      LiveAllocation allocation{block.bytes, block.allocated_ns, detail::site_of(trace, block), code_line_of(trace, block),
                                {}, block.category};
      if (block.step >= 0) allocation.step = blocks.steps[static_cast<std::size_t>(block.step)].name;
      peak.largest.push_back(std::move(allocation));
    }
    peaks.push_back(std::move(peak));
  }
  return peaks;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
