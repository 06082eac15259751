// What holds memory (analysis/memory_blocks.hpp, memory_peak.hpp, memory_leaks.hpp,
// memory_timeline.hpp): allocations paired with their releases and given a category, each
// device's peak explained, memory that grows step after step, and the timeline by category,
// checked by hand on traces whose allocations are known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <dlprof/analysis/memory_blocks.hpp>
#include <dlprof/analysis/memory_leaks.hpp>
#include <dlprof/analysis/memory_peak.hpp>
#include <dlprof/analysis/memory_timeline.hpp>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::Category;
using dlprof::MemoryDeviceType;
using dlprof::analysis::MemoryBlock;
using dlprof::analysis::MemoryCategory;
using dlprof_test::AnalysisTraceBuilder;

/// Gives every event the allocator's count: `before` plus the bytes of the events up to it.
dlprof::Trace with_allocator_totals(dlprof::Trace trace, std::int64_t before) {
  std::vector<std::size_t> order(trace.memory_events.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return trace.memory_events[a].time_ns < trace.memory_events[b].time_ns; });
  for (const std::size_t i : order) {
    before += trace.memory_events[i].bytes;
    trace.memory_events[i].total_allocated = before;
  }
  return trace;
}

/// One training step with an allocation of each category, 10000 bytes allocated before the window
/// (see the figures in the comments; times in ns):
///   loader [10, 100]: aten::empty makes an input (0x10, 1000 B), released at 900;
///   forward, nn.Module: Net [100, 400]: aten::linear > aten::addmm makes an activation (0x20,
///     4000 B, released in backward at 600) and a temporary (0x30, 500 B, released inside
///     aten::linear); aten::relu makes 0x40 (300 B), released at 380, before backward: unknown;
///   backward [500, 800]: inside AddmmBackward0's node, aten::mm makes a temporary (0x50, 4000 B,
///     released inside the node), what it hands to the next node (0x60, 200 B, released at 750:
///     an activation's gradient) and a parameter's gradient (0x70, 800 B, alive after backward);
///     AccumulateGrad makes a gradient (0x80, 64 B);
///   optimizer step [850, 950]: optimizer state (0x90, 64 B) and a temporary (0xa0, 32 B);
///   outside every op: 0xb0 allocated twice without a release between; a release of 0xdead,
///     never allocated in the window.
/// The peak, 20000 B, comes at 530 when 0x70 is allocated.
dlprof::Trace one_step_of_each_category() {
  AnalysisTraceBuilder builder;
  builder.step(0, 0, 1000);
  builder.range("enumerate(DataLoader)#Loader.__next__", 10, 100).op("aten::empty", 20, 30);
  builder.range("nn.Module: Net", 100, 400, Category::Forward)
      .op("aten::linear", 110, 200)
      .op("aten::addmm", 120, 190)
      .op("aten::relu", 210, 250);
  builder.op("autograd::engine::evaluate_function: AddmmBackward0", 500, 700).op("aten::mm", 505, 560);
  builder.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 720, 800)
      .op("torch::autograd::AccumulateGrad", 725, 795);
  builder.range("Optimizer.step#SGD.step", 850, 950).op("aten::zeros_like", 860, 880);
  builder.memory(25, 0x10, 1000)
      .memory(150, 0x20, 4000)
      .memory(160, 0x30, 500)
      .memory(180, 0x30, -500)
      .memory(220, 0x40, 300)
      .memory(380, 0x40, -300)
      .memory(510, 0x50, 4000)
      .memory(520, 0x60, 200)
      .memory(530, 0x70, 800)
      .memory(600, 0x20, -4000)
      .memory(650, 0x50, -4000)
      .memory(730, 0x80, 64)
      .memory(750, 0x60, -200)
      .memory(870, 0x90, 64)
      .memory(875, 0xa0, 32)
      .memory(900, 0x10, -1000)
      .memory(940, 0xa0, -32)
      .memory(960, 0xb0, 16)
      .memory(970, 0xb0, 16)
      .memory(990, 0xdead, -128);
  return with_allocator_totals(builder.trace(), 10000);
}

const MemoryBlock& block_at(const dlprof::analysis::DeviceMemoryBlocks& device, std::uint64_t address, std::int64_t allocated_ns) {
  const auto found = std::find_if(device.blocks.begin(), device.blocks.end(), [&](const MemoryBlock& block) {
    return block.address == address && block.allocated_ns == allocated_ns;
  });
  if (found == device.blocks.end()) throw std::runtime_error("no such block");
  return *found;
}

TEST(AnalysisMemoryTest, AllocationsArePairedWithTheirReleasesAndWhatTheWindowCouldNotPairIsCounted) {
  const dlprof::Trace trace = one_step_of_each_category();
  const dlprof::analysis::MemoryBlocks blocks = dlprof::analysis::memory_blocks(trace);
  ASSERT_EQ(blocks.devices.size(), 1u);
  const auto& cpu = blocks.devices[0];
  EXPECT_EQ(cpu.device_type, MemoryDeviceType::CPU);
  EXPECT_EQ(cpu.blocks.size(), 12u);
  EXPECT_EQ(cpu.allocated_before_window, 10000);
  EXPECT_EQ(cpu.releases_of_unseen_allocations, 1u);
  EXPECT_EQ(cpu.released_unseen_bytes, 128);
  EXPECT_EQ(cpu.unreported_releases, 1u);
  EXPECT_EQ(block_at(cpu, 0xb0, 960).released_ns, 970);  // released when its address was allocated again
  EXPECT_FALSE(block_at(cpu, 0xb0, 970).released());
  EXPECT_EQ(block_at(cpu, 0x20, 150).released_ns, 600);
  EXPECT_TRUE(std::is_sorted(cpu.blocks.begin(), cpu.blocks.end(),
                             [](const MemoryBlock& a, const MemoryBlock& b) { return a.allocated_ns < b.allocated_ns; }));
  EXPECT_EQ(cpu.peak_allocated, 20000);
  EXPECT_EQ(cpu.peak_ns, 530);
  ASSERT_EQ(blocks.steps.size(), 1u);
  EXPECT_EQ(block_at(cpu, 0x20, 150).step, 0);
  EXPECT_EQ(dlprof::analysis::op_of(trace, block_at(cpu, 0x20, 150)), "aten::addmm");
  EXPECT_EQ(trace.name_of(trace.events[block_at(cpu, 0x20, 150).top_op]), "aten::linear");
  EXPECT_EQ(dlprof::analysis::module_of(trace, block_at(cpu, 0x20, 150)), "nn.Module: Net");
  EXPECT_EQ(dlprof::analysis::op_of(trace, block_at(cpu, 0xb0, 960)), "");
}

TEST(AnalysisMemoryTest, EachAllocationIsGivenTheCategoryWhereAndHowLongItLivedSay) {
  const dlprof::Trace trace = one_step_of_each_category();
  const auto blocks = dlprof::analysis::memory_blocks(trace);
  const auto& cpu = blocks.devices.at(0);
  EXPECT_EQ(block_at(cpu, 0x10, 25).category, MemoryCategory::Input);
  EXPECT_EQ(block_at(cpu, 0x20, 150).category, MemoryCategory::Activation);
  EXPECT_EQ(block_at(cpu, 0x30, 160).category, MemoryCategory::Temporary);
  EXPECT_EQ(block_at(cpu, 0x40, 220).category, MemoryCategory::Unknown);
  EXPECT_EQ(block_at(cpu, 0x50, 510).category, MemoryCategory::Temporary);
  EXPECT_EQ(block_at(cpu, 0x60, 520).category, MemoryCategory::Activation);
  EXPECT_EQ(block_at(cpu, 0x70, 530).category, MemoryCategory::Gradient);
  EXPECT_EQ(block_at(cpu, 0x80, 730).category, MemoryCategory::Gradient);
  EXPECT_EQ(block_at(cpu, 0x90, 870).category, MemoryCategory::OptimizerState);
  EXPECT_EQ(block_at(cpu, 0xa0, 875).category, MemoryCategory::Temporary);
  EXPECT_EQ(block_at(cpu, 0xb0, 970).category, MemoryCategory::Unknown);
}

TEST(AnalysisMemoryTest, ThePeakSaysWhatWasAliveByCategoryBySiteAndLargestFirst) {
  const dlprof::Trace trace = one_step_of_each_category();
  const auto peaks = dlprof::analysis::memory_peaks(trace, dlprof::analysis::memory_blocks(trace), 3);
  ASSERT_EQ(peaks.size(), 1u);
  const dlprof::analysis::MemoryPeak& peak = peaks[0];
  EXPECT_EQ(peak.allocated, 20000);
  EXPECT_EQ(peak.time_ns, 530);
  EXPECT_EQ(peak.step, "ProfilerStep#0");
  EXPECT_EQ(peak.phase, "backward");
  EXPECT_EQ(peak.site, "aten::mm");
  // Alive at 530: 0x10 (input), 0x20 and 0x60 (activations), 0x50 (temporary), 0x70 (gradient);
  // 10000 B the window never saw allocated.
  EXPECT_EQ(peak.category_bytes(MemoryCategory::Input), 1000);
  EXPECT_EQ(peak.category_bytes(MemoryCategory::Activation), 4200);
  EXPECT_EQ(peak.category_bytes(MemoryCategory::Temporary), 4000);
  EXPECT_EQ(peak.category_bytes(MemoryCategory::Gradient), 800);
  EXPECT_EQ(peak.category_bytes(MemoryCategory::OptimizerState), 0);
  EXPECT_EQ(peak.category_bytes(MemoryCategory::Unknown), 10000);
  EXPECT_EQ(peak.unseen_bytes, 10000);
  ASSERT_EQ(peak.by_site.size(), 3u);  // rows = 3
  EXPECT_EQ(peak.by_site[0].name, "aten::mm");
  EXPECT_EQ(peak.by_site[0].bytes, 5000);
  EXPECT_EQ(peak.by_site[0].allocations, 3u);
  EXPECT_EQ(peak.by_site[1].name, "aten::addmm in nn.Module: Net");
  EXPECT_EQ(peak.by_site[1].bytes, 4000);
  EXPECT_EQ(peak.by_site[2].name, "aten::empty");
  EXPECT_TRUE(peak.by_line.empty());  // no stacks
  ASSERT_EQ(peak.largest.size(), 3u);
  EXPECT_EQ(peak.largest[0].bytes, 4000);
  EXPECT_EQ(peak.largest[2].bytes, 1000);
  EXPECT_EQ(peak.largest[2].category, MemoryCategory::Input);
  EXPECT_EQ(peak.largest[2].step, "ProfilerStep#0");
}

TEST(AnalysisMemoryTest, TheTimelineSplitsTheAllocatorsCountByCategoryAtEveryEvent) {
  const dlprof::Trace trace = one_step_of_each_category();
  const auto blocks = dlprof::analysis::memory_blocks(trace);
  const auto timelines = dlprof::analysis::memory_timelines(trace, blocks);
  ASSERT_EQ(timelines.size(), 1u);
  const auto& points = timelines[0].points;
  ASSERT_EQ(points.size(), trace.memory_events.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const dlprof::MemoryEvent& event = trace.memory_events[i];  // added in time order
    EXPECT_EQ(points[i].time_ns, event.time_ns);
    EXPECT_EQ(points[i].allocated(), event.total_allocated) << "at " << event.time_ns;
  }
  const auto at_peak = std::find_if(points.begin(), points.end(), [](const auto& point) { return point.time_ns == 530; });
  ASSERT_NE(at_peak, points.end());
  EXPECT_EQ(at_peak->by_category[static_cast<std::size_t>(MemoryCategory::Activation)], 4200);
  EXPECT_EQ(at_peak->by_category[static_cast<std::size_t>(MemoryCategory::Unknown)], 10000);

  // Thinned, it keeps the peak.
  const auto thinned = dlprof::analysis::memory_timelines(trace, blocks, 4);
  ASSERT_LE(thinned[0].points.size(), 4u);
  EXPECT_TRUE(std::any_of(thinned[0].points.begin(), thinned[0].points.end(),
                          [](const auto& point) { return point.allocated() == 20000; }));
}

/// `steps` steps of 1000 ns. Each: aten::addmm in nn.Module: Linear_fc keeps 1000 B (`leak`), or
/// makes and releases them; aten::clone keeps 50 B for three steps (a bounded history); a
/// temporary; and the first step alone makes optimizer state that lives on.
dlprof::Trace steps_that_keep(int steps, bool leak) {
  AnalysisTraceBuilder builder;
  for (int s = 0; s < steps; ++s) {
    const std::int64_t start = s * 1000;
    builder.step(s, start, start + 900);
    builder.range("nn.Module: Linear_fc", start + 100, start + 300, Category::Forward).op("aten::addmm", start + 110, start + 200);
    builder.op("aten::clone", start + 400, start + 450).op("aten::empty", start + 500, start + 550);
    builder.memory(start + 150, 0x1000 + static_cast<std::uint64_t>(s), 1000);
    if (!leak) builder.memory(start + 800, 0x1000 + static_cast<std::uint64_t>(s), -1000);
    builder.memory(start + 420, 0x2000 + static_cast<std::uint64_t>(s), 50);
    if (s >= 3) builder.memory(start + 50, 0x2000 + static_cast<std::uint64_t>(s - 3), -50);
    builder.memory(start + 510, 0x3000, 4096).memory(start + 540, 0x3000, -4096);
    if (s == 0) builder.range("Optimizer.step#SGD.step", 600, 700).memory(650, 0x4000, 256);
  }
  return with_allocator_totals(builder.trace(), 0);
}

TEST(AnalysisMemoryTest, MemoryThatEveryStepKeepsIsALeakNamedByTheOpAndModuleThatAllocateIt) {
  const dlprof::Trace trace = steps_that_keep(8, true);
  const auto leaks = dlprof::analysis::memory_leaks(trace, dlprof::analysis::memory_blocks(trace));
  EXPECT_TRUE(leaks.not_judged.empty());
  EXPECT_EQ(leaks.steps, 8u);
  EXPECT_EQ(leaks.lag, 2u);
  ASSERT_TRUE(leaks.found());
  ASSERT_EQ(leaks.devices.size(), 1u);
  const dlprof::analysis::MemoryGrowth& cpu = leaks.devices[0];
  ASSERT_EQ(cpu.allocated_at_step_end.size(), 8u);
  EXPECT_DOUBLE_EQ(cpu.bytes_per_step, 1000);  // the history's rise in the first steps moves no median
  // Only the kept tensors hold it: not the optimizer's state (one step), nor the history (let go).
  ASSERT_EQ(cpu.holders.size(), 1u);
  const dlprof::analysis::LeakHolder& holder = cpu.holders[0];
  EXPECT_EQ(holder.site, "aten::addmm in nn.Module: Linear_fc");
  EXPECT_EQ(holder.steps, 6u);  // steps 0 to 5 have a step two after them
  EXPECT_EQ(holder.allocations, 6u);
  EXPECT_EQ(holder.bytes, 6000);
  EXPECT_DOUBLE_EQ(holder.bytes_per_step, 1000);
  EXPECT_EQ(holder.category, MemoryCategory::Activation);  // made in a module's forward, alive at the window's end
}

TEST(AnalysisMemoryTest, MemoryReleasedInItsStepOrKeptForAFewStepsIsNoLeak) {
  const dlprof::Trace trace = steps_that_keep(8, false);
  const auto leaks = dlprof::analysis::memory_leaks(trace, dlprof::analysis::memory_blocks(trace));
  EXPECT_TRUE(leaks.not_judged.empty());
  EXPECT_FALSE(leaks.found());
  ASSERT_EQ(leaks.devices.size(), 1u);
  EXPECT_TRUE(leaks.devices[0].holders.empty());
}

TEST(AnalysisMemoryTest, TooFewStepsAreNotJudgedAndSaySo) {
  const dlprof::Trace trace = steps_that_keep(4, true);
  const auto leaks = dlprof::analysis::memory_leaks(trace, dlprof::analysis::memory_blocks(trace));
  EXPECT_FALSE(leaks.found());
  EXPECT_EQ(leaks.not_judged, "4 steps with memory events; growth is judged over 5 at least");
}

TEST(AnalysisMemoryTest, ALongerLagJudgesFewerSteps) {
  const dlprof::Trace trace = steps_that_keep(8, true);
  const auto leaks = dlprof::analysis::memory_leaks(trace, dlprof::analysis::memory_blocks(trace), 4);
  ASSERT_TRUE(leaks.found());
  EXPECT_EQ(leaks.devices[0].holders[0].steps, 4u);  // steps 0 to 3
}

// Bad input: allocator counts that go negative, releases of what the window never saw allocated,
// allocations never released, and a GPU the trace gives no properties for.
TEST(AnalysisMemoryTest, NegativeTotalsUnseenReleasesAndUnknownDevicesGiveFiguresNotCrashes) {
  AnalysisTraceBuilder builder;
  for (int s = 0; s < 6; ++s) builder.step(s, s * 1000, s * 1000 + 900).op("aten::empty", s * 1000 + 100, s * 1000 + 200);
  builder.memory(150, 0x1, -4096, -4096, 0, MemoryDeviceType::CUDA, 3)    // released, never seen allocated
      .memory(1150, 0x2, 512, -3584, 0, MemoryDeviceType::CUDA, 3)        // never released
      .memory(2150, 0x3, 512, -3072, 0, MemoryDeviceType::CUDA, 3)
      .memory(3150, 0x3, -512, -3584, 0, MemoryDeviceType::CUDA, 3);
  const dlprof::Trace trace = builder.trace();
  ASSERT_TRUE(trace.devices.empty());
  const auto blocks = dlprof::analysis::memory_blocks(trace);
  ASSERT_EQ(blocks.devices.size(), 1u);
  EXPECT_EQ(blocks.devices[0].device_type, MemoryDeviceType::CUDA);
  EXPECT_EQ(blocks.devices[0].device, 3);
  EXPECT_EQ(blocks.devices[0].releases_of_unseen_allocations, 1u);
  EXPECT_EQ(blocks.devices[0].blocks.size(), 2u);
  EXPECT_FALSE(blocks.devices[0].blocks[0].released());
  EXPECT_EQ(blocks.devices[0].allocated_before_window, 0);  // a negative count is not taken for one
  // No positive count: no peak to explain.
  EXPECT_TRUE(dlprof::analysis::memory_peaks(trace, blocks).empty());
  const auto leaks = dlprof::analysis::memory_leaks(trace, blocks);
  EXPECT_FALSE(leaks.found());
  const auto timelines = dlprof::analysis::memory_timelines(trace, blocks);
  ASSERT_EQ(timelines.size(), 1u);
  for (const auto& point : timelines[0].points)
    for (const std::int64_t bytes : point.by_category) EXPECT_GE(bytes, 0);
}

// Tags: one on memory the window saw allocated gives it its category; those on memory allocated
// before the window add it, alive until a release of its address; one of a device without memory
// events is counted apart.
TEST(AnalysisMemoryTest, TagsGiveCategoriesAndNameMemoryAllocatedBeforeTheWindow) {
  AnalysisTraceBuilder builder;
  builder.step(0, 0, 1000).memory(100, 0x10, 100).memory(800, 0x30, -50);
  dlprof::Trace trace = builder.trace();
  const auto tag = [&](std::int64_t time, std::uint64_t address, std::int64_t bytes, MemoryCategory category,
                       MemoryDeviceType type = MemoryDeviceType::CPU, std::int32_t device = -1) {
    trace.memory_tags.push_back(dlprof::MemoryTag{time, address, bytes, type, device, category, 0});
  };
  tag(500, 0x10, 100, MemoryCategory::Parameter);
  tag(500, 0x20, 400, MemoryCategory::Gradient);
  tag(500, 0x30, 50, MemoryCategory::OptimizerState);
  tag(600, 0x20, 400, MemoryCategory::Gradient);  // tagged again in a later step: one block
  tag(600, 0x40, 8, MemoryCategory::Parameter, MemoryDeviceType::CUDA, 5);
  const auto blocks = dlprof::analysis::memory_blocks(trace);
  ASSERT_EQ(blocks.devices.size(), 1u);
  const auto& cpu = blocks.devices[0];
  EXPECT_EQ(cpu.tags, 4u);
  EXPECT_EQ(blocks.tags_without_memory_events, 1u);
  ASSERT_EQ(cpu.blocks.size(), 3u);
  EXPECT_TRUE(cpu.blocks[0].before_window);  // before-window blocks come first
  EXPECT_TRUE(cpu.blocks[1].before_window);
  const MemoryBlock& seen = block_at(cpu, 0x10, 100);
  EXPECT_EQ(seen.category, MemoryCategory::Parameter);
  EXPECT_TRUE(seen.tagged);
  const MemoryBlock& gradient = block_at(cpu, 0x20, MemoryBlock::kBeforeWindow);
  EXPECT_EQ(gradient.category, MemoryCategory::Gradient);
  EXPECT_FALSE(gradient.released());
  const MemoryBlock& state = block_at(cpu, 0x30, MemoryBlock::kBeforeWindow);
  EXPECT_EQ(state.released_ns, 800);

  // The window's own count (no allocator totals) misses what was allocated before it: the peak
  // adds the tagged memory.
  const auto peaks = dlprof::analysis::memory_peaks(trace, blocks);
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].time_ns, 100);
  EXPECT_EQ(peaks[0].allocated, 550);
  EXPECT_EQ(peaks[0].uncounted_bytes, 450);
  EXPECT_EQ(peaks[0].unseen_bytes, 0);
  EXPECT_EQ(peaks[0].category_bytes(MemoryCategory::Parameter), 100);
  EXPECT_EQ(peaks[0].category_bytes(MemoryCategory::Gradient), 400);
  EXPECT_EQ(peaks[0].category_bytes(MemoryCategory::OptimizerState), 50);
  ASSERT_FALSE(peaks[0].by_site.empty());
  EXPECT_EQ(peaks[0].by_site[0].name, "allocated before the window");
  EXPECT_EQ(peaks[0].by_site[0].bytes, 450);

  const auto timelines = dlprof::analysis::memory_timelines(trace, blocks);
  ASSERT_EQ(timelines.at(0).points.size(), 2u);
  EXPECT_EQ(timelines[0].points[0].allocated(), 550);
  EXPECT_EQ(timelines[0].points[1].allocated(), 500);
  EXPECT_EQ(timelines[0].points[1].by_category[static_cast<std::size_t>(MemoryCategory::OptimizerState)], 0);
}

// An allocation the allocator refused: what held the device then, and the op that asked.
TEST(AnalysisMemoryTest, AnOutOfMemoryReportSaysWhatHeldTheMemoryAndWhoAsked) {
  dlprof::Trace trace = one_step_of_each_category();
  // At 540, inside AddmmBackward0's aten::mm: 0x10, 0x20, 0x50, 0x60, 0x70 alive (20000 B counted).
  trace.out_of_memory.push_back(dlprof::OutOfMemoryEvent{540, std::int64_t{1} << 30, 20000, 0, MemoryDeviceType::CPU, -1, 0});
  // One on a device without memory events: its request and count alone.
  trace.out_of_memory.push_back(dlprof::OutOfMemoryEvent{900, 4096, 777, 0, MemoryDeviceType::CUDA, 2, 0});
  const auto failures = dlprof::analysis::out_of_memory(trace, dlprof::analysis::memory_blocks(trace), 2);
  ASSERT_EQ(failures.size(), 2u);
  const dlprof::analysis::OutOfMemory& cpu = failures[0];
  EXPECT_EQ(cpu.requested, std::int64_t{1} << 30);
  EXPECT_EQ(cpu.state.allocated, 20000);
  EXPECT_EQ(cpu.state.step, "ProfilerStep#0");
  EXPECT_EQ(cpu.state.phase, "backward");
  EXPECT_EQ(cpu.state.site, "aten::mm");
  EXPECT_EQ(cpu.state.category_bytes(MemoryCategory::Activation), 4200);
  EXPECT_EQ(cpu.state.category_bytes(MemoryCategory::Unknown), 10000);
  ASSERT_EQ(cpu.state.by_site.size(), 2u);
  EXPECT_EQ(cpu.state.by_site[0].name, "aten::mm");
  const dlprof::analysis::OutOfMemory& gpu = failures[1];
  EXPECT_EQ(gpu.state.device_type, MemoryDeviceType::CUDA);
  EXPECT_EQ(gpu.state.device, 2);
  EXPECT_EQ(gpu.state.allocated, 777);
  EXPECT_EQ(gpu.state.category_bytes(MemoryCategory::Unknown), 777);
  EXPECT_EQ(gpu.state.step, "ProfilerStep#0");
  EXPECT_EQ(gpu.state.phase, "optimizer step");
}

TEST(AnalysisMemoryTest, ATraceWithoutMemoryEventsHasNothingToExplain) {
  AnalysisTraceBuilder builder;
  builder.step(0, 0, 1000);
  const dlprof::Trace trace = builder.trace();
  const auto blocks = dlprof::analysis::memory_blocks(trace);
  EXPECT_TRUE(blocks.empty());
  EXPECT_TRUE(dlprof::analysis::memory_peaks(trace, blocks).empty());
  EXPECT_TRUE(dlprof::analysis::memory_timelines(trace, blocks).empty());
  const auto leaks = dlprof::analysis::memory_leaks(trace, blocks);
  EXPECT_FALSE(leaks.found());
  EXPECT_TRUE(leaks.devices.empty());
}

}  // namespace
