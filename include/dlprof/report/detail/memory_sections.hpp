// dlprof/report/detail/memory_sections.hpp: the report's memory sections as the text and HTML
// renderers show them: each device's peak explained, and the memory that grows from step to step
// with what holds it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/memory_leaks.hpp"
#include "dlprof/analysis/memory_peak.hpp"
#include "dlprof/config.hpp"
#include "dlprof/key_averages.hpp"
#include "dlprof/report/detail/table_section.hpp"
#include "dlprof/report/make_report.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// "activations 8.10 GiB (57.0%), parameters 3.00 GiB (21.1%), ...": the categories that hold
/// some bytes, largest first.
inline std::string category_breakdown(const std::array<std::int64_t, analysis::kMemoryCategoryCount>& by_category) {
  std::int64_t total = 0;
  std::vector<std::size_t> order;
  for (std::size_t c = 0; c < by_category.size(); ++c) {
    total += by_category[c];
    if (by_category[c] > 0) order.push_back(c);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return by_category[a] > by_category[b]; });
  std::string text;
  for (const std::size_t c : order) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {} ({:.1f}%)", to_string(static_cast<analysis::MemoryCategory>(c)), KeyAverages::format_bytes(by_category[c]),
                        total > 0 ? 100.0 * static_cast<double>(by_category[c]) / static_cast<double>(total) : 0.0);
  }
  return text.empty() ? std::string("nothing") : text;
}

/// "peak 14.76 MiB in ProfilerStep#11, backward (aten::empty in nn.Module: Block_11)".
inline std::string peak_headline(const analysis::MemoryPeak& peak) {
  std::string where;
  if (!peak.step.empty()) where += fmt::format(" in {}", peak.step);
  if (!peak.phase.empty()) where += fmt::format("{} {}", where.empty() ? " in" : ",", peak.phase);
  if (!peak.site.empty()) where += fmt::format(" ({})", peak.site);
  return fmt::format("peak {} allocated{}", KeyAverages::format_bytes(peak.allocated), where);
}

/// "Out of memory in ProfilerStep#57, backward (aten::empty in nn.Module: Block_11), asking 2.00
/// GiB on CUDA:0: 13.90 GiB allocated, of which activations 9.80 GiB (70.5%), ...; the largest
/// holders: ...".
inline std::string out_of_memory_line(const analysis::OutOfMemory& failure) {
  const analysis::MemoryPeak& state = failure.state;
  std::string where;
  if (!state.step.empty()) where += fmt::format(" in {}", state.step);
  if (!state.phase.empty()) where += fmt::format("{} {}", where.empty() ? " in" : ",", state.phase);
  if (!state.site.empty()) where += fmt::format(" ({})", state.site);
  std::string line = fmt::format("Out of memory{}, asking {} on {}: {} allocated, of which {}", where,
                                 KeyAverages::format_bytes(failure.requested), device_label(state.device_type, state.device),
                                 KeyAverages::format_bytes(state.allocated), category_breakdown(state.by_category));
  if (!state.by_site.empty()) {
    line += "; held most by ";
    for (std::size_t i = 0; i < state.by_site.size() && i < 3; ++i)
      line += fmt::format("{}{} ({})", i == 0 ? "" : ", ", state.by_site[i].name, KeyAverages::format_bytes(state.by_site[i].bytes));
  }
  return line + ".";
}

/// Per device with a peak: what was alive then, by the op and module that allocated it; then by
/// line of code where stacks were recorded; then the largest allocations.
inline std::vector<TableSection> memory_peak_sections(const RankReport& rank) {
  std::vector<TableSection> sections;
  for (const analysis::MemoryPeak& peak : rank.memory_peaks) {
    const std::string device = device_label(peak.device_type, peak.device);
    TableSection& by_site = sections.emplace_back();
    by_site.title = fmt::format("Memory at its peak on {}: what was alive, by the op that allocated it", device);
    by_site.lines.push_back(fmt::format("{}: {}.", device, peak_headline(peak)));
    by_site.lines.push_back(fmt::format("By category: {}.", category_breakdown(peak.by_category)));
    by_site.headers = {"Allocated by", "Bytes", "Allocations"};
    for (const analysis::MemoryShare& share : peak.by_site)
      by_site.rows.push_back({share.name, KeyAverages::format_bytes(share.bytes), std::to_string(share.allocations)});
    if (peak.unseen_bytes > 0)
      by_site.notes.push_back(fmt::format("{} of it the window never saw allocated (before the window, or by a thread that reports no "
                                          "allocations): counted as unknown, in no row",
                                          KeyAverages::format_bytes(peak.unseen_bytes)));
    if (peak.uncounted_bytes > 0)
      by_site.notes.push_back(fmt::format("{} of it is tagged memory that the allocator's count leaves out (allocated before it began "
                                          "to count)",
                                          KeyAverages::format_bytes(peak.uncounted_bytes)));
    by_site.notes.push_back("Categories are tagged (an annotated LibTorch optimizer tags its parameters, gradients and state; tag_memory()) or inferred "
                            "from where each allocation was made and how long it lived (README, \"Memory\")");
    if (!peak.by_line.empty()) {
      TableSection& by_line = sections.emplace_back();
      by_line.title = fmt::format("Memory at its peak on {}, by the line of code that allocated it", device);
      by_line.headers = {"Line", "Bytes", "Allocations"};
      for (const analysis::MemoryShare& share : peak.by_line)
        by_line.rows.push_back({share.name, KeyAverages::format_bytes(share.bytes), std::to_string(share.allocations)});
    }
    if (!peak.largest.empty()) {
      TableSection& largest = sections.emplace_back();
      largest.title = fmt::format("The largest allocations alive at the peak on {}", device);
      largest.headers = {"Bytes", "Category", "Step", "Allocated by"};
      for (const analysis::LiveAllocation& allocation : peak.largest)
        largest.rows.push_back({KeyAverages::format_bytes(allocation.bytes), std::string(to_string(allocation.category)),
                                allocation.step.empty() ? std::string("-") : std::string(allocation.step),
                                allocation.line.empty() ? allocation.site : allocation.site + " at " + allocation.line});
    }
  }
  return sections;
}

/// Memory at the steps' ends, per device, and the allocations that outlive their steps step after
/// step; empty without allocations.
inline std::vector<TableSection> memory_growth_sections(const RankReport& rank) {
  std::vector<TableSection> sections;
  const analysis::MemoryLeaks& leaks = rank.memory_leaks;
  if (leaks.devices.empty() && leaks.not_judged.empty()) return sections;
  TableSection& growth = sections.emplace_back();
  growth.title = fmt::format("Memory growth over {} step{}", leaks.steps, leaks.steps == 1 ? "" : "s");
  if (!leaks.not_judged.empty()) {
    growth.lines.push_back(fmt::format("Not judged: {}.", leaks.not_judged));
    return sections;
  }
  for (const analysis::MemoryGrowth& device : leaks.devices) {
    const std::string label = device_label(device.device_type, device.device);
    const auto per_step = [](double bytes) {
      return fmt::format("{}{} per step", bytes >= 0 ? "+" : "-", KeyAverages::format_bytes(static_cast<std::int64_t>(std::abs(bytes))));
    };
    std::string line = fmt::format("{}: allocated at the steps' ends {} -> {} ({})", label,
                                   KeyAverages::format_bytes(device.allocated_at_step_end.front()),
                                   KeyAverages::format_bytes(device.allocated_at_step_end.back()), per_step(device.bytes_per_step));
    if (device.leaks()) {
      const analysis::LeakHolder& top = device.holders.front();
      line += fmt::format(". Leak: {} keeps {} ({} allocations still alive {} steps after the step that made them)", top.site,
                          per_step(top.bytes_per_step), top.allocations, leaks.lag);
    } else {
      line += ". No allocation outlives its step, step after step: no leak";
    }
    growth.lines.push_back(line + ".");
  }
  for (const analysis::MemoryGrowth& device : leaks.devices)
    for (const analysis::LeakHolder& holder : device.holders)
      growth.rows.push_back({device_label(device.device_type, device.device),
                             holder.line.empty() ? holder.site : holder.site + " at " + holder.line,
                             std::string(to_string(holder.category)), KeyAverages::format_bytes(holder.bytes),
                             std::to_string(holder.allocations), fmt::format("{} of {}", holder.steps, leaks.steps - leaks.lag),
                             fmt::format("+{}/step", KeyAverages::format_bytes(static_cast<std::int64_t>(holder.bytes_per_step)))});
  if (growth.rows.empty()) return sections;
  growth.headers = {"Device", "Held by", "Category", "Kept", "Allocations", "Steps", "Growth"};
  growth.notes.push_back(fmt::format("Kept: what each step made and still held {} steps later (the growth is the slope of what they hold "
                                     "at the steps' ends)",
                                     leaks.lag));
  return sections;
}

}  // namespace detail
DLPROF_END_NAMESPACE
