// The report page's views: the timeline the Trace view draws (rows, depths, links, what is kept
// past the limit), the module tree, the ops by input shape and call site with the kernels each
// launched, and the page itself (tabs, the data no name can break out of).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"
#include "dlprof/report.hpp"

namespace {

using dlprof_test::AnalysisTraceBuilder;
using dlprof_test::kMs;
using ::testing::HasSubstr;
using ::testing::Not;

// Two steps on the main thread: a forward module with a Linear inside, whose aten::addmm (called
// with two input shapes) launches a GEMM through a runtime call; the backward thread runs the
// addmm's backward (sequence number 4); a copy on stream 9.
AnalysisTraceBuilder training_steps() {
  AnalysisTraceBuilder builder;
  builder.step(1, 0, 10 * kMs)
      .step(2, 10 * kMs, 20 * kMs)
      .range("nn.Module: Net", kMs, 8 * kMs, dlprof::Category::Forward)
      .range("nn.Module: Linear_0", 2 * kMs, 6 * kMs, dlprof::Category::Forward)
      .op("aten::addmm", 3 * kMs, 5 * kMs, 11)
      .inputs("[[4, 8], [8, 8]]", "[\"float\", \"float\"]")
      .sequence(4, 0)
      .call("cudaLaunchKernel", 3'100'000, 3'200'000, 21, 11)
      .kernel("gemm_kernel", 4 * kMs, 7 * kMs, 21, 11)
      .launch(64, 256, 2.0F, 50)
      .range("nn.Module: Net", 11 * kMs, 18 * kMs, dlprof::Category::Forward)
      .op("aten::addmm", 12 * kMs, 13 * kMs, 12)
      .inputs("[[2, 8], [8, 8]]", "[\"float\", \"float\"]")
      .call("cudaLaunchKernel", 12'100'000, 12'200'000, 22, 12)
      .kernel("gemm_kernel", 13 * kMs, 15 * kMs, 22, 12)
      .launch(64, 256, 2.0F, 70)
      .op("AddmmBackward0", 14 * kMs, 16 * kMs, 0, dlprof::Category::Backward, 1)
      .sequence(4, 100)
      .memcpy(1, 16 * kMs, 17 * kMs, 23, 4096, 0, 9);
  return builder;
}

TEST(TimelineTest, ThreadsNestTheirSlicesTheSteppingThreadFirstThenEachStream) {
  const dlprof::Trace trace = training_steps().trace();
  const dlprof::Timeline timeline = dlprof::timeline(trace);
  ASSERT_EQ(timeline.rows.size(), 4U);
  EXPECT_EQ(timeline.rows[0].label, "thread 100 (main)");
  EXPECT_EQ(timeline.rows[1].label, "thread 101 (backward)");
  EXPECT_EQ(timeline.rows[2].label, "GPU 0 stream 7");
  EXPECT_EQ(timeline.rows[3].label, "GPU 0 stream 9");
  EXPECT_TRUE(timeline.rows[2].device);
  EXPECT_TRUE(timeline.left_out.empty());
  EXPECT_EQ(timeline.slices_kept, timeline.slices_in_trace);
  EXPECT_EQ(timeline.slices_in_trace, 13U);  // 8 slices and 2 runtime calls on the CPU, 2 kernels and a copy

  // The first step's nesting: step, module, module, op, runtime call.
  const dlprof::TimelineRow& main = timeline.rows[0];
  std::vector<std::pair<std::string, std::uint16_t>> first_step;
  for (const dlprof::TimelineSlice& slice : main.slices)
    if (slice.start_ns < 10 * kMs) first_step.emplace_back(timeline.texts[slice.name], slice.depth);
  EXPECT_EQ(first_step, (std::vector<std::pair<std::string, std::uint16_t>>{
                            {"ProfilerStep#1", 0}, {"nn.Module: Net", 1}, {"nn.Module: Linear_0", 2}, {"aten::addmm", 3},
                            {"cudaLaunchKernel", 4}}));
  const dlprof::TimelineSlice& addmm = main.slices[3];
  EXPECT_EQ(addmm.kind, dlprof::SliceKind::Op);
  EXPECT_EQ(addmm.external_id, 11U);
  EXPECT_EQ(addmm.sequence, 4);
  EXPECT_FALSE(addmm.backward);
  ASSERT_NE(addmm.details, dlprof::TimelineSlice::kNoDetails);
  EXPECT_THAT(timeline.texts[addmm.details], HasSubstr("\"input dims\": \"[[4, 8], [8, 8]]\""));
  EXPECT_EQ(main.slices[4].kind, dlprof::SliceKind::RuntimeCall);
  EXPECT_EQ(main.slices[4].correlation, 21U);

  const dlprof::TimelineSlice& backward = timeline.rows[1].slices.front();
  EXPECT_TRUE(backward.backward);
  EXPECT_EQ(backward.sequence, 4);

  const dlprof::TimelineSlice& gemm = timeline.rows[2].slices.front();
  EXPECT_EQ(gemm.kind, dlprof::SliceKind::Kernel);
  EXPECT_EQ(gemm.correlation, 21U);
  EXPECT_EQ(gemm.external_id, 11U);
  EXPECT_THAT(timeline.texts[gemm.details], HasSubstr("\"est. achieved occupancy %\": 50"));
  const dlprof::TimelineSlice& copy = timeline.rows[3].slices.front();
  EXPECT_EQ(copy.kind, dlprof::SliceKind::Copy);
  EXPECT_EQ(timeline.texts[copy.details], "{\"bytes\": 4096, \"kind\": \"HtoD\"}");
  ASSERT_EQ(timeline.steps.size(), 2U);
  EXPECT_EQ(timeline.steps[1].number, 2);
  EXPECT_EQ(timeline.steps[1].start_ns, 10 * kMs);
}

TEST(TimelineTest, PastItsLimitItKeepsWholeStepsFromTheFirstAndSaysWhatItLeftOut) {
  const dlprof::Trace trace = training_steps().trace();
  dlprof::TimelineOptions options;
  options.max_slices = 10;
  const dlprof::Timeline timeline = dlprof::timeline(trace, options);
  EXPECT_LE(timeline.slices_kept, 10U);
  for (const dlprof::TimelineRow& row : timeline.rows)
    for (const dlprof::TimelineSlice& slice : row.slices) EXPECT_LE(slice.start_ns, 10 * kMs) << timeline.texts[slice.name];
  EXPECT_EQ(timeline.left_out,
            "The timeline holds steps 1 to 1 of 1 to 2: " + std::to_string(timeline.slices_kept) +
                " of the trace's 13 slices. Choose other steps with dlprof-report --steps FIRST-LAST, or open the trace in "
                "Perfetto (ui.perfetto.dev), which holds it all.");
  EXPECT_EQ(timeline.steps.size(), 2U);  // every step, for the step buttons
}

TEST(TimelineTest, TheStepsAskedForAreKeptAndStepsNotInTheTraceAreSaid) {
  const dlprof::Trace trace = training_steps().trace();
  dlprof::TimelineOptions options;
  options.max_slices = 10;
  options.steps = std::pair<std::int64_t, std::int64_t>{2, 2};
  const dlprof::Timeline second = dlprof::timeline(trace, options);
  EXPECT_THAT(second.left_out, HasSubstr("holds steps 2 to 2 of 1 to 2"));
  for (const dlprof::TimelineRow& row : second.rows)
    for (const dlprof::TimelineSlice& slice : row.slices) EXPECT_GE(slice.end_ns, 10 * kMs) << second.texts[slice.name];

  options.steps = std::pair<std::int64_t, std::int64_t>{7, 9};
  const dlprof::Timeline missing = dlprof::timeline(trace, options);
  EXPECT_THAT(missing.left_out, HasSubstr("No step numbered 7 to 9 in this trace"));
  EXPECT_THAT(missing.left_out, HasSubstr("holds steps 1 to 1"));
}

TEST(ModuleTreeTest, ModulesNestUnderTheModulesAroundThemWithTheirHostAndDeviceTimes) {
  const dlprof::Trace trace = training_steps().trace();  // the tree's names view it
  const dlprof::analysis::ModuleTree tree = dlprof::analysis::module_tree(trace);
  ASSERT_EQ(tree.nodes.size(), 2U);
  const dlprof::analysis::ModuleNode& net = tree.nodes[0];
  const dlprof::analysis::ModuleNode& linear = tree.nodes[1];
  EXPECT_EQ(net.name, "nn.Module: Net");
  EXPECT_EQ(net.parent, dlprof::analysis::ModuleNode::kRoot);
  EXPECT_EQ(net.calls, 2U);
  EXPECT_EQ(net.host_ns, 14 * kMs);
  EXPECT_EQ(net.self_host_ns(), 10 * kMs);
  EXPECT_EQ(net.device_ns, 5 * kMs);  // both GEMMs
  EXPECT_EQ(linear.name, "nn.Module: Linear_0");
  EXPECT_EQ(linear.parent, 0U);
  EXPECT_EQ(linear.host_ns, 4 * kMs);
  EXPECT_EQ(linear.device_ns, 3 * kMs);
  EXPECT_TRUE(dlprof::analysis::module_tree(AnalysisTraceBuilder().op("aten::mm", 0, kMs).trace()).empty());
}

TEST(RankViewsTest, OpsSplitByInputShapeAndKernelsByTheOpThatLaunchedThem) {
  const dlprof::Trace trace = training_steps().trace();
  const dlprof::RankViews views = dlprof::rank_views(trace, dlprof::analysis::kernel_attribution(trace), {});
  std::vector<const dlprof::OpRow*> addmm;
  for (const dlprof::OpRow& row : views.ops)
    if (row.name == "aten::addmm") addmm.push_back(&row);
  ASSERT_EQ(addmm.size(), 2U);
  EXPECT_EQ(addmm[0]->input_dims, "[[4, 8], [8, 8]]");
  EXPECT_EQ(addmm[0]->total_ns, 2 * kMs);
  EXPECT_EQ(addmm[0]->gpu_ns, 3 * kMs);
  EXPECT_EQ(addmm[1]->input_dims, "[[2, 8], [8, 8]]");
  EXPECT_EQ(addmm[1]->gpu_ns, 2 * kMs);
  ASSERT_EQ(views.op_kernels.size(), 2U);  // one per input shape
  EXPECT_EQ(views.op_kernels[0].op, "aten::addmm");
  EXPECT_EQ(views.op_kernels[0].kernel, "gemm_kernel");
  EXPECT_EQ(views.op_kernels[0].ns, 3 * kMs);
  // The kernel table's rows, one per input shape, each with its kernels' occupancy.
  ASSERT_EQ(views.kernels.rows.size(), 2U);
  ASSERT_EQ(views.kernel_occupancy.size(), 2U);
  std::vector<double> occupancy = {*views.kernel_occupancy[0], *views.kernel_occupancy[1]};
  std::sort(occupancy.begin(), occupancy.end());
  EXPECT_EQ(occupancy, (std::vector<double>{50.0, 70.0}));
  EXPECT_EQ(views.modules.nodes.size(), 2U);
  EXPECT_EQ(views.timeline.rows.size(), 4U);
}

TEST(ReportHtmlTest, EveryViewIsATabAndNoNameInTheDataEndsItsScript) {
  const std::string hostile = "</script><script>alert(1)</script><!--";
  dlprof::Trace trace = training_steps().op(hostile, 18 * kMs, 19 * kMs).trace();
  dlprof::ReportOptions options;
  options.views = dlprof::rank_views_of;
  const std::string html = dlprof::render_html(dlprof::make_report(std::move(trace), options));
  for (const std::string_view view :
       {"overview", "operator", "kernel", "trace", "memory", "module", "distributed", "flame", "roofline", "diff"}) {
    EXPECT_THAT(html, HasSubstr("<a href=\"#" + std::string(view) + "\">"));
    EXPECT_THAT(html, HasSubstr("<section class=\"view\" id=\"" + std::string(view) + "\">"));
  }
  const std::size_t data = html.find("<script type=\"application/json\" id=\"dlprof-views\">");
  ASSERT_NE(data, std::string::npos);
  const std::size_t end = html.find("</script>", data);
  const std::string json = html.substr(data, end - data);
  EXPECT_THAT(json, HasSubstr("\\u003c/script>\\u003cscript>alert(1)\\u003c/script>\\u003c!--"));
  EXPECT_THAT(json, HasSubstr("\"gemm_kernel\""));
  EXPECT_THAT(html, Not(HasSubstr("render-check")));
  // A page made without the views' data still opens, its views empty.
  const std::string without = dlprof::render_html(dlprof::make_report(training_steps().trace()));
  EXPECT_THAT(without, HasSubstr("{\"rank\": 0, \"texts\": []}"));
}

}  // namespace
