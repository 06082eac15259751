// The analyses on torch.profiler's reference traces (tests/data/reference-traces), read with
// dlprof::read_trace_set: with hta_compat, HTA 0.5.0's own numbers, taken from
// `tests/tools/hta_breakdowns.py <set>`; the other analyses, their invariants.
#include <dlprof/analysis/analysis.hpp>
#include <dlprof/analysis/memory_blocks.hpp>
#include <dlprof/analysis/memory_leaks.hpp>
#include <dlprof/analysis/memory_peak.hpp>
#include <dlprof/analysis/call_stacks.hpp>
#include <dlprof/analysis/cuda_graphs.hpp>
#include <dlprof/import/chrome_trace.hpp>
#include <dlprof/key_averages.hpp>
#include <dlprof/memory_category.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

namespace fs = std::filesystem;
using dlprof_test::hta_compat;

const fs::path kReferenceSets = DLPROF_REFERENCE_TRACES_DIR;

std::vector<dlprof::Trace> read_set(const std::string& set) {
  return dlprof::read_trace_set({(kReferenceSets / set).string()});
}

// What HTA 0.5.0 reports for one rank (µs).
struct HtaRank {
  const char* set;
  std::int64_t rank;
  double idle_us, compute_us, non_compute_us, kernel_time_us;
  std::vector<std::pair<std::string, double>> kernel_types;
  double overlap_percent;  // HTA's comp_comm_overlap_pctg; -1 where HTA answers NaN
  std::size_t launches;
  double launch_delay_us, launch_call_us;  // sums
  std::vector<std::tuple<std::int64_t, double, double, double>> idle;  // stream, host, kernel, other wait
};

const std::vector<HtaRank>& hta_ranks() {
  static const std::vector<HtaRank> ranks = {
      {"hta-1rank-a100-simple-add", 0, 16414376, 10676, 39287, 16464339,
       {{"MEMORY", 39088}, {"COMPUTATION", 10676}}, -1, 98, 10264, 4260778,
       {{7, 15976739, 91, 0}, {20, 13582776, 8, 0}}},
      {"hta-1rank-v100-resnet-ns", 0, 10113, 372150, 2371, 384634,
       {{"COMPUTATION", 372150}, {"MEMORY", 2371}}, -1, 4876, 322052817, 192088,
       {{7, 1709, 8404, 0}}},
      {"hta-2rank-a100-sampled", 0, 321378, 106252, 172428, 600058,
       {{"COMMUNICATION", 171780}, {"COMPUTATION", 83182}, {"COMPUTATION overlapping COMMUNICATION", 23056},
        {"COMMUNICATION overlapping MEMORY", 479}, {"MEMORY", 169},
        {"COMPUTATION overlapping COMMUNICATION overlapping MEMORY", 12}, {"COMPUTATION overlapping MEMORY", 2}},
       11.81, 602, 9880122, 5109,
       {{7, 213825, 1985, 261740}, {23, 596037, 70, 34}, {25, 0, 9, 47865}, {84, 148934, 6, 0}, {203, 0, 0, 0}}},
      {"hta-2rank-a100-sampled", 1, 328671, 135548, 136455, 600674,
       {{"COMMUNICATION", 133804}, {"COMPUTATION", 101841}, {"COMPUTATION overlapping COMMUNICATION", 33691},
        {"MEMORY", 2119}, {"COMMUNICATION overlapping MEMORY", 532}, {"COMPUTATION overlapping MEMORY", 16}},
       20.05, 577, 9761662, 4988,
       {{7, 156827, 1816, 281064}, {23, 596313, 100, 0}, {25, 0, 9, 53028}, {84, 251860, 0, 23247}, {203, 0, 0, 0}}},
  };
  return ranks;
}

class ReferenceTraces : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kReferenceSets)) GTEST_SKIP() << "no reference traces at " << kReferenceSets;
  }
};

TEST_F(ReferenceTraces, HtaCompatAgreesWithHta050) {
  for (const HtaRank& expected : hta_ranks()) {
    SCOPED_TRACE(fmt::format("{} rank {}", expected.set, expected.rank));
    const std::vector<dlprof::Trace> traces = read_set(expected.set);
    const dlprof::Trace* trace = nullptr;
    for (const dlprof::Trace& candidate : traces)
      if (candidate.distributed.rank == expected.rank) trace = &candidate;
    ASSERT_NE(trace, nullptr);
    const auto hta = dlprof::analysis::hta_analyses(*trace, hta_compat());

    EXPECT_DOUBLE_EQ(hta.temporal.compute_ns / 1e3, expected.compute_us);
    if (std::string(expected.set) == "hta-1rank-a100-simple-add") {
      // Kineto writes a context synchronisation's "no stream" as 4294967295, which HTA counts as a
      // stream: its two Context Sync spans, one at the very end, are GPU time to HTA. The reader
      // reads "no stream" as -1, and they are not. The shares still agree to 0.02 points.
      EXPECT_NEAR(hta.temporal.idle_percent(), 100 * expected.idle_us / expected.kernel_time_us, 0.02);
      EXPECT_NEAR(hta.temporal.non_compute_percent(), 100 * expected.non_compute_us / expected.kernel_time_us, 0.02);
    } else {
      EXPECT_DOUBLE_EQ(hta.temporal.idle_ns / 1e3, expected.idle_us);
      EXPECT_DOUBLE_EQ(hta.temporal.non_compute_ns / 1e3, expected.non_compute_us);
      EXPECT_DOUBLE_EQ(hta.temporal.kernel_time_ns / 1e3, expected.kernel_time_us);
    }

    ASSERT_EQ(hta.kernel_types.times.size(), expected.kernel_types.size());
    for (std::size_t i = 0; i < expected.kernel_types.size(); ++i) {
      EXPECT_EQ(hta.kernel_types.times[i].label(), expected.kernel_types[i].first);
      EXPECT_DOUBLE_EQ(hta.kernel_types.times[i].time_ns / 1e3, expected.kernel_types[i].second);
    }

    if (expected.overlap_percent < 0) {
      EXPECT_FALSE(hta.overlap.has_communication());
    } else {
      EXPECT_NEAR(hta.overlap.overlap_percent(), expected.overlap_percent, 0.005);
    }

    EXPECT_EQ(hta.launches.launches.size(), expected.launches);
    double call_ns = 0;
    for (const auto& launch : hta.launches.launches) call_ns += static_cast<double>(launch.cpu_duration_ns);
    EXPECT_DOUBLE_EQ(hta.launches.total_launch_delay_ns() / 1e3, expected.launch_delay_us);
    EXPECT_DOUBLE_EQ(call_ns / 1e3, expected.launch_call_us);

    ASSERT_EQ(hta.idle_time.streams.size(), expected.idle.size());
    for (std::size_t i = 0; i < expected.idle.size(); ++i) {
      const auto& [stream, host, kernel, other] = expected.idle[i];
      EXPECT_EQ(hta.idle_time.streams[i].stream, stream);
      EXPECT_DOUBLE_EQ(hta.idle_time.streams[i].host_wait_ns / 1e3, host);
      EXPECT_DOUBLE_EQ(hta.idle_time.streams[i].kernel_wait_ns / 1e3, kernel);
      EXPECT_DOUBLE_EQ(hta.idle_time.streams[i].other_ns / 1e3, other);
    }
  }
}

TEST_F(ReferenceTraces, HtaCompatListsHtasTopKernels) {
  // HTA's ten longest COMPUTATION kernels of the V100 trace, and the others' total.
  const std::vector<dlprof::Trace> traces = read_set("hta-1rank-v100-resnet-ns");
  const auto breakdown = dlprof::analysis::kernel_type_breakdown(traces.at(0), hta_compat());
  const auto& computation = breakdown.kernels.at(0);
  ASSERT_EQ(computation.type, dlprof::analysis::KernelType::Computation);
  const std::vector<double> expected_us = {20956, 20101, 19271, 18901, 18273, 18140, 18073, 17086, 16738, 13044, 191567};
  ASSERT_EQ(computation.kernels.size(), expected_us.size());
  for (std::size_t i = 0; i < expected_us.size(); ++i)
    EXPECT_DOUBLE_EQ(computation.kernels[i].total_ns / 1e3, expected_us[i]) << computation.kernels[i].name;
  EXPECT_EQ(computation.kernels[5].name, "volta_sgemm_64x64_tn");
  EXPECT_EQ(computation.kernels.back().name, "others");
  EXPECT_EQ(breakdown.kernels.at(2).kernels.at(0).name, "Memcpy DtoD (Device -> Device)");
}

TEST_F(ReferenceTraces, DefaultAnalysesKeepTheLastStep) {
  // HTA 0.5.0 with include_last_profiler_step=True and HTA_DISABLE_NS_ROUNDING=1 on the
  // whole-µs A100 ranks: what the default analyses compute.
  const std::vector<dlprof::Trace> traces = read_set("hta-2rank-a100-sampled");
  ASSERT_EQ(traces.size(), 2u);
  const auto rank0 = dlprof::analysis::temporal_breakdown(traces[0]);
  EXPECT_EQ(rank0.idle_ns, 675'191'000);
  EXPECT_EQ(rank0.compute_ns, 210'320'000);
  EXPECT_EQ(rank0.non_compute_ns, 337'336'000);
  EXPECT_EQ(rank0.kernel_time_ns, 1'222'847'000);
  const auto rank1 = dlprof::analysis::hta_analyses(traces[1]);
  EXPECT_EQ(rank1.temporal.kernel_time_ns, 1'231'186'000);
  EXPECT_EQ(rank1.launches.launches.size(), 1154u);
  EXPECT_NEAR(rank1.overlap.overlap_percent(), 19.93, 0.005);
}

TEST_F(ReferenceTraces, StepBreakdownAddsUpAndCoversEveryStep) {
  const std::vector<dlprof::Trace> traces = read_set("hta-1rank-v100-resnet-ns");
  const auto breakdown = dlprof::analysis::step_breakdown(traces.at(0));
  ASSERT_EQ(breakdown.steps.size(), 5u);
  for (std::size_t i = 0; i < breakdown.steps.size(); ++i) {
    const auto& step = breakdown.steps[i];
    EXPECT_EQ(step.number, 101 + static_cast<std::int64_t>(i));
    std::int64_t roles = 0;
    for (const std::int64_t ns : step.role_ns) roles += ns;
    EXPECT_EQ(roles, step.duration_ns());
    if (i > 0) {
      EXPECT_GE(step.start_ns, breakdown.steps[i - 1].end_ns);
    }
    // A GPU-bound ResNet: kernels take most of every step.
    EXPECT_GT(step[dlprof::analysis::StepRole::Kernel], step.duration_ns() * 9 / 10);
  }
  ASSERT_EQ(breakdown.devices.size(), 1u);
  EXPECT_EQ(breakdown.devices[0].name, "Tesla V100-SXM2-32GB");
  EXPECT_GT(breakdown.devices[0].utilization, 0.9);
  EXPECT_EQ(breakdown.devices[0].tensor_core_percent, 0.0);  // float32 on volta_sgemm and scudnn
}

TEST_F(ReferenceTraces, KernelAttributionFindsStepOpAndLayer) {
  const std::vector<dlprof::Trace> traces = read_set("hta-1rank-v100-resnet-ns");
  const dlprof::Trace& trace = traces.at(0);
  const auto attribution = dlprof::analysis::kernel_attribution(trace);
  std::size_t work = 0;
  for (const dlprof::GpuEvent& event : trace.gpu_events)
    work += event.kind != dlprof::GpuEventKind::Sync && event.kind != dlprof::GpuEventKind::Annotation;
  ASSERT_EQ(attribution.kernels.size(), work);
  std::size_t in_steps = 0;
  std::size_t with_op = 0;
  std::size_t backward = 0;
  for (const auto& kernel : attribution.kernels) {
    if (kernel.step >= 101 && kernel.step <= 105) ++in_steps;
    with_op += !kernel.op.empty();
    backward += kernel.direction == dlprof::analysis::Direction::Backward;
  }
  EXPECT_GT(in_steps, work * 9 / 10);
  EXPECT_GT(with_op, work * 9 / 10);
  EXPECT_GT(backward, work / 3);  // training: the backward pass launches more than the forward
}

TEST_F(ReferenceTraces, RanksSideBySide) {
  const auto comparison = dlprof::analysis::compare_ranks(read_set("hta-2rank-a100-sampled"), hta_compat());
  ASSERT_EQ(comparison.ranks.size(), 2u);
  EXPECT_EQ(comparison.ranks[0].rank, 0);
  EXPECT_EQ(comparison.ranks[1].rank, 1);
  EXPECT_EQ(comparison.ranks[1].temporal.compute_ns, 135'548'000);
  ASSERT_EQ(comparison.steps.size(), 2u);
  EXPECT_EQ(comparison.steps[0].step, 551);
  EXPECT_EQ(comparison.steps[1].step, 552);
  for (const auto& step : comparison.steps) {
    EXPECT_EQ(step.ranks, 2u);
    EXPECT_GE(step.slowest_ns, step.fastest_ns);
    EXPECT_NE(step.slowest_rank, step.fastest_rank);
  }
}

TEST_F(ReferenceTraces, NvprofSummaryAndKeyAveragesCoverTheWork) {
  const std::vector<dlprof::Trace> traces = read_set("hta-1rank-a100-simple-add");
  const dlprof::Trace& trace = traces.at(0);
  const auto summary = dlprof::analysis::gpu_summary(trace);
  std::int64_t work_ns = 0;
  for (const dlprof::GpuEvent& event : trace.gpu_events)
    if (event.kind != dlprof::GpuEventKind::Sync && event.kind != dlprof::GpuEventKind::Annotation) work_ns += event.duration_ns();
  EXPECT_EQ(summary.gpu_activities_ns, work_ns);
  EXPECT_EQ(summary.gpu_activities.at(0).name, "[CUDA memcpy HtoD]");  // 78.5 % of GPU time, as HTA's MEMORY share
  const dlprof::KeyAverages averages(trace);
  const dlprof::KeyAverage* copy = averages.find("aten::_to_copy");
  ASSERT_NE(copy, nullptr);
  EXPECT_GE(copy->gpu_total_ns, copy->gpu_ns);
  EXPECT_GT(copy->gpu_total_ns, 0);
}

// torch.profiler's with_stack writes Python frames as python_function slices around the ops: each
// op takes them as its stack, the innermost first (the oracle: every python_function of the op's
// thread that holds it, sorted by Python, 4,619 ops over 738 distinct stacks).
// torch's memory columns on a real trace (MI300, HIP allocations): each op's GPU memory is the
// bytes of the [memory] events inside its interval, on any thread. The figures are a Python
// oracle's over the same file (every cpu_op, its [ts, ts + dur] in exact ns).
TEST_F(ReferenceTraces, MemoryPerOpIsTheAllocationsInsideEachOpsInterval) {
  const dlprof::KeyAverages averages(read_set("tracelens-mi300-qwen1.5-0.5b-chat").at(0));
  ASSERT_TRUE(averages.has_device_memory());
  EXPECT_EQ(averages.device_memory_name(), "HIP");
  const auto device_bytes = [&](std::string_view name) -> std::pair<std::uint64_t, std::int64_t> {
    const dlprof::KeyAverage* row = averages.find(name);
    if (row == nullptr) return {0, 0};
    EXPECT_EQ(row->memory.cpu_bytes, 0) << name << ": this trace has no CPU allocations";
    return {row->calls, row->memory.device_bytes};
  };
  EXPECT_EQ(device_bytes("aten::empty"), std::make_pair(std::uint64_t{411}, std::int64_t{15'240'146'944}));
  EXPECT_EQ(device_bytes("aten::linear"), std::make_pair(std::uint64_t{168}, std::int64_t{4'615'962'624}));
  EXPECT_EQ(device_bytes("aten::mm"), std::make_pair(std::uint64_t{96}, std::int64_t{3'297'116'160}));
  EXPECT_EQ(device_bytes("aten::copy_"), std::make_pair(std::uint64_t{197}, std::int64_t{0}));
}

// No reference trace leaks, and each device's peak is the allocator's largest count, split into
// categories that add up to it.
TEST_F(ReferenceTraces, NoTraceLeaksAndEachPeakAddsUpByCategory) {
  std::size_t traces_with_memory = 0;
  for (const fs::directory_entry& set : fs::directory_iterator(kReferenceSets)) {
    if (!set.is_directory()) continue;
    for (const dlprof::Trace& trace : read_set(set.path().filename().string())) {
      const dlprof::analysis::MemoryBlocks blocks = dlprof::analysis::memory_blocks(trace);
      const dlprof::analysis::MemoryLeaks leaks = dlprof::analysis::memory_leaks(trace, blocks);
      EXPECT_FALSE(leaks.found()) << set.path() << ": " << leaks.devices.at(0).holders.at(0).site;
      if (blocks.empty()) continue;
      ++traces_with_memory;
      for (const dlprof::analysis::MemoryPeak& peak : dlprof::analysis::memory_peaks(trace, blocks)) {
        std::int64_t largest = 0;
        for (const dlprof::MemoryEvent& event : trace.memory_events)
          if (event.device_type == peak.device_type && event.device == peak.device) largest = std::max(largest, event.total_allocated);
        EXPECT_EQ(peak.allocated, largest) << set.path();
        std::int64_t sum = 0;
        for (const std::int64_t bytes : peak.by_category) sum += bytes;
        EXPECT_GE(sum, peak.allocated) << set.path();  // what the window saw alive, at least the count
      }
    }
  }
  EXPECT_GE(traces_with_memory, 1u);
}

// The LibTorch demo's own trace with --leak (tests/data/demo/README.md): memory events, shapes,
// modules and the optimizer's tags as dlprof writes them. Its peak holds each category the demo
// makes, and what its leak keeps is named.
TEST(DemoMemoryTrace, ItsPeakHoldsEachCategoryTheDemoMakesAndItsLeakIsNamed) {
  const dlprof::Trace trace =
      dlprof::read_trace((fs::path(DLPROF_TEST_DATA_DIR) / "demo" / "libtorch-training-leak.pt.trace.json.gz").string());
  EXPECT_GT(trace.memory_events.size(), 1000u);
  EXPECT_FALSE(trace.memory_tags.empty()) << "the annotated optimizer's tags";
  std::size_t with_shapes = 0;
  std::size_t modules = 0;
  for (const dlprof::TraceEvent& event : trace.events) {
    with_shapes += event.inputs != dlprof::TraceEvent::kNoInputs;
    modules += trace.names[event.name].rfind("nn.Module: ", 0) == 0;
  }
  EXPECT_GT(with_shapes, 0u);
  EXPECT_GT(modules, 0u);
  const dlprof::analysis::MemoryBlocks blocks = dlprof::analysis::memory_blocks(trace);
  const std::vector<dlprof::analysis::MemoryPeak> peaks = dlprof::analysis::memory_peaks(trace, blocks);
  ASSERT_EQ(peaks.size(), 1u);
  for (const dlprof::MemoryCategory category : {dlprof::MemoryCategory::Parameter, dlprof::MemoryCategory::Gradient,
                                               dlprof::MemoryCategory::OptimizerState, dlprof::MemoryCategory::Activation})
    EXPECT_GT(peaks[0].category_bytes(category), 0) << to_string(category);
  EXPECT_EQ(peaks[0].category_bytes(dlprof::MemoryCategory::Parameter),
            peaks[0].category_bytes(dlprof::MemoryCategory::Gradient))
      << "a gradient per parameter, of its size";
  const dlprof::analysis::MemoryLeaks leaks = dlprof::analysis::memory_leaks(trace, blocks);
  ASSERT_TRUE(leaks.found());
  ASSERT_FALSE(leaks.devices.at(0).holders.empty());
  EXPECT_EQ(leaks.devices[0].holders[0].site, "aten::addmm in nn.Module: Linear_classifier.3");
}

TEST_F(ReferenceTraces, PythonFramesAroundAnOpAreItsStack) {
  const dlprof::Trace trace = read_set("tracelens-mi300-qwen1.5-0.5b-chat").at(0);
  std::size_t ops_with_stacks = 0;
  const dlprof::TraceEvent* embedding = nullptr;
  for (const dlprof::TraceEvent& event : trace.events) {
    if (event.kind != dlprof::EventKind::Op && event.kind != dlprof::EventKind::Range) continue;
    ops_with_stacks += event.stack != dlprof::TraceEvent::kNoStack;
    if (embedding == nullptr && trace.name_of(event) == "aten::embedding") embedding = &event;
  }
  EXPECT_EQ(ops_with_stacks, 4619u);
  EXPECT_EQ(trace.stacks.size(), 738u);
  ASSERT_NE(embedding, nullptr);
  ASSERT_NE(embedding->stack, dlprof::TraceEvent::kNoStack);
  const dlprof::CallStack& stack = trace.stacks[embedding->stack];
  ASSERT_EQ(stack.depth, 20u);
  const auto frame = [&](std::uint32_t i) { return dlprof::frame_text(trace, trace.stack_frames[stack.first + i]); };
  EXPECT_EQ(frame(0), "<built-in method embedding of type object at 0x7f9a3dfe1d20>");
  EXPECT_EQ(frame(1), "torch/nn/functional.py(2437): embedding");
  EXPECT_EQ(frame(19), "<string>(1): <module>");
  ASSERT_NE(dlprof::innermost_user_frame(trace, stack), nullptr);
  EXPECT_EQ(dlprof::frame_text(trace, *dlprof::innermost_user_frame(trace, stack)), "transformers/models/qwen2/modeling_qwen2.py(503): forward");
  // The flame graph's lines start at the outermost frame and end with the op.
  const std::string folded = dlprof::analysis::folded_stacks(trace, dlprof::analysis::StackMetric::SelfCpuTime);
  EXPECT_THAT(folded, ::testing::HasSubstr("<string>(1): <module>;multiprocessing/spawn.py(122): spawn_main;"));
  EXPECT_THAT(folded, ::testing::HasSubstr("torch/nn/functional.py(2437): embedding;<built-in method embedding of type object at 0x7f9a3dfe1d20>;aten::embedding "));
  const dlprof::analysis::CodeLines lines = dlprof::analysis::code_lines(trace, 5);
  ASSERT_FALSE(lines.by_cpu.empty());
  for (const dlprof::analysis::CodeLine& line : lines.by_cpu) EXPECT_FALSE(dlprof::is_library_frame(line.line)) << line.line;
}

// vLLM's decode steps on ROCm replay HIP graphs; the trace names no graph, so the work is the
// work of hipGraphLaunch calls, by correlation (the oracle, in Python: 25 launches, 361 kernels,
// 149,919.755 us of the trace's 156,085.905 us, all launched from one Python frame).
TEST_F(ReferenceTraces, GraphReplaysAreTheWorkOfGraphLaunches) {
  const dlprof::Trace trace = read_set("tracelens-rocm-vllm-graph-execution").at(0);
  const dlprof::analysis::CudaGraphs graphs = dlprof::analysis::cuda_graphs(trace);
  EXPECT_EQ(graphs.launches, 25u);
  EXPECT_EQ(graphs.gpu_ns, 149'919'755);
  EXPECT_EQ(graphs.all_gpu_ns, 156'085'905);
  ASSERT_EQ(graphs.graphs.size(), 1u);
  const dlprof::analysis::GraphReplays& graph = graphs.graphs[0];
  EXPECT_EQ(graph.graph_id, 0u);
  EXPECT_EQ(graph.work, 361u);
  EXPECT_EQ(graph.nodes, 0u);
  EXPECT_EQ(graph.top_kernel, "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu");
  EXPECT_THAT(graph.launched_from, ::testing::StartsWith("<built-in method replay of pybind11_builtins"));
  // A trace without graphs has none.
  EXPECT_TRUE(dlprof::analysis::cuda_graphs(read_set("hta-1rank-a100-simple-add").at(0)).empty());
}

}  // namespace
