// HTA's TraceDiff.compare_traces on hand-built traces (analysis/hta_trace_diff.hpp): which
// iteration each event counts in (CPU events by their start in a step's span, the last span
// holding it winning; GPU work by the call that launched it; stream 0 and CPU slices on streams
// in none), durations rounded inward to whole µs, the steps as one row, names that look like steps
// but hold no number; the table's classification and its largest changes; the table as text,
// JSON and HTML. tests/tools/check_hta_trace_diff.py holds the same against HTA itself.
#include <dlprof/analysis/hta_trace_diff.hpp>
#include <dlprof/report/hta_diff.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::HtaIterations;
using dlprof::analysis::HtaNameTotal;
using dlprof::analysis::KeyChangeKind;
using dlprof_test::kMs;
using dlprof_test::kUs;

/// Steps 3 (0–10 ms) and 4 (10–20 ms) on the main thread, with the GPU side of step 3 annotated
/// from 11 to 19 ms, as Kineto's gpu_user_annotation spans lag the CPU's.
dlprof::Trace two_steps_with_gpu_work() {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.step(3, 0, 10 * kMs).step(4, 10 * kMs, 20 * kMs);
  builder.op("aten::empty", 0, 0);                    // at the first step's start: in it
  builder.op("aten::zeros", -2 * kMs, -1 * kMs);      // before the first step: in none
  builder.op("aten::mm", 1 * kMs, 3 * kMs);           // step 3
  builder.op("aten::mm", 10200 * kUs, 10800 * kUs);   // step 4, before step 3's GPU span
  builder.op("aten::mm", 15 * kMs, 16 * kMs);         // step 4's span and step 3's GPU span, written later: 3
  builder.op("aten::add", 5 * kMs, 6 * kMs, 0, dlprof::Category::User, /*thread=*/1);  // any thread
  builder.call("cudaLaunchKernel", 9900 * kUs, 9950 * kUs, /*correlation=*/1);
  builder.kernel("sgemm", 10500 * kUs, 13 * kMs, 1);  // runs in step 4, launched in step 3
  builder.call("cudaLaunchKernel", 2 * kMs, 2050 * kUs, 2);
  builder.kernel("on_stream_zero", 2100 * kUs, 2200 * kUs, 2, 0, /*stream=*/0);  // HTA tests < 0 and > 0
  builder.kernel("unlaunched", 3 * kMs, 4 * kMs, /*correlation=*/99);            // no call has its correlation
  builder.sync("Context Sync", 19500 * kUs, 19600 * kUs, 0, /*stream=*/-1);      // no stream: by its own start
  builder.op_on_stream("triton_poi_fused_add_0", 4 * kMs, 5 * kMs, 7);           // launches nothing: in none
  builder.op("aten::view", 6 * kMs + 400, 6 * kMs + 900);  // 0.5 µs within one µs: -1 µs rounded inward
  builder.range("ProfilerStep#x", 7 * kMs, 8 * kMs);        // no number: not a step
  builder.annotation("ProfilerStep#3", 11 * kMs, 19 * kMs, 0);
  dlprof::Trace trace = builder.trace();
  trace.file_time_base_ns = 0;
  return trace;
}

const HtaNameTotal& total(const HtaIterations& run, std::int64_t iteration, const std::string& name) {
  static const HtaNameTotal kNone;
  const auto found = run.iterations.find(iteration);
  if (found == run.iterations.end()) return kNone;
  const auto named = found->second.find(name);
  return named == found->second.end() ? kNone : named->second;
}

TEST(HtaTraceDiffTest, EventsCountInTheIterationHtaGivesThem) {
  const HtaIterations run = dlprof::analysis::hta_iterations(two_steps_with_gpu_work());
  ASSERT_EQ(run.first_iteration(), 3);
  EXPECT_EQ(run.iterations.size(), 2u);

  EXPECT_EQ(total(run, 3, "aten::mm").counts, 2);
  EXPECT_EQ(total(run, 3, "aten::mm").total_duration_us, 3000);
  EXPECT_EQ(total(run, 4, "aten::mm").counts, 1);
  EXPECT_EQ(total(run, 4, "aten::mm").total_duration_us, 600);
  EXPECT_EQ(total(run, 3, "aten::add").counts, 1);
  EXPECT_EQ(total(run, 3, "aten::empty").counts, 1);
  EXPECT_EQ(total(run, 3, "aten::zeros").counts + total(run, 4, "aten::zeros").counts, 0);

  EXPECT_EQ(total(run, 3, "cudaLaunchKernel").counts, 2);
  EXPECT_EQ(total(run, 3, "sgemm").counts, 1) << "GPU work counts in its launch's iteration";
  EXPECT_EQ(total(run, 3, "sgemm").total_duration_us, 2500);
  EXPECT_EQ(total(run, 4, "sgemm").counts, 0);
  EXPECT_EQ(total(run, 3, "on_stream_zero").counts, 0);
  EXPECT_EQ(total(run, 3, "unlaunched").counts, 0);
  EXPECT_EQ(total(run, 4, "Context Sync").counts, 1);
  EXPECT_EQ(total(run, 3, "triton_poi_fused_add_0").counts + total(run, 4, "triton_poi_fused_add_0").counts, 0);

  EXPECT_EQ(total(run, 3, "aten::view").counts, 1);
  EXPECT_EQ(total(run, 3, "aten::view").total_duration_us, -1) << "ceil(6000.4) to floor(6000.9), as HTA rounds";

  // Step 3's CPU span and its GPU annotation (in its own span); step 4's CPU span.
  EXPECT_EQ(total(run, 3, "ProfilerStep#*").counts, 2);
  EXPECT_EQ(total(run, 3, "ProfilerStep#*").total_duration_us, 18000);
  EXPECT_EQ(total(run, 4, "ProfilerStep#*").counts, 1);
  EXPECT_EQ(total(run, 3, "ProfilerStep#x").counts, 1);
  EXPECT_THAT(run.unnumbered_steps, testing::ElementsAre("ProfilerStep#x"));
}

TEST(HtaTraceDiffTest, ATraceWithoutStepsHasNoIteration) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.op("aten::mm", 0, 1 * kMs);
  EXPECT_EQ(dlprof::analysis::hta_iterations(builder.trace()).first_iteration(), std::nullopt);
}

/// A run whose step `number` calls aten::mm `mm_calls` times, 1 ms each, and `extra` once for 2 ms.
HtaIterations one_step_run(std::int64_t number, int mm_calls, const std::string& extra) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.step(number, 0, 10 * kMs);
  for (int call = 0; call < mm_calls; ++call) builder.op("aten::mm", call * kMs, (call + 1) * kMs);
  builder.op(extra, 8 * kMs, 10 * kMs);
  builder.op("aten::relu", 5 * kMs, 5 * kMs + 100 * kUs);
  dlprof::Trace trace = builder.trace();
  trace.file_time_base_ns = 0;
  return dlprof::analysis::hta_iterations(trace);
}

TEST(HtaTraceDiffTest, TheTableClassifiesByCountsAndLeadsWithTheLargestChanges) {
  const HtaIterations base = one_step_run(5, 3, "aten::copy_");
  const HtaIterations next = one_step_run(105, 2, "aten::clone");
  const dlprof::analysis::HtaTraceDiff diff = dlprof::analysis::hta_trace_diff(base, 5, next, 105);
  std::vector<std::string> names;
  for (const auto& row : diff.rows) names.push_back(row.name);
  EXPECT_THAT(names, testing::ElementsAre("ProfilerStep#*", "aten::clone", "aten::copy_", "aten::mm", "aten::relu"))
      << "one row for the steps whatever their numbers, then by name";
  const auto row = [&](const std::string& name) { return *std::find_if(diff.rows.begin(), diff.rows.end(), [&](const auto& r) { return r.name == name; }); };
  EXPECT_EQ(row("ProfilerStep#*").kind, KeyChangeKind::Unchanged);
  EXPECT_EQ(row("aten::clone").kind, KeyChangeKind::Added);
  EXPECT_EQ(row("aten::clone").change(), '+');
  EXPECT_EQ(row("aten::copy_").kind, KeyChangeKind::Deleted);
  EXPECT_EQ(row("aten::copy_").change(), '-');
  EXPECT_EQ(row("aten::mm").kind, KeyChangeKind::Decreased);
  EXPECT_EQ(row("aten::mm").diff_counts(), -1);
  EXPECT_EQ(row("aten::mm").diff_duration_us(), -1000);
  EXPECT_EQ(row("aten::relu").kind, KeyChangeKind::Unchanged);
  EXPECT_EQ(row("aten::relu").change(), '=');

  const auto largest = diff.largest_changes(2);
  ASSERT_EQ(largest.size(), 2u);
  EXPECT_EQ(largest[0]->name, "aten::clone");  // +2000 µs, before the copy's -2000 µs by name order
  EXPECT_EQ(largest[1]->name, "aten::copy_");
  EXPECT_EQ(diff.largest_changes(10).size(), 3u) << "unchanged rows are no change";

  dlprof::HtaDiffReport report;
  report.base = {"before/", 0};
  report.next = {"after/", 0};
  report.diff = diff;
  report.notes.push_back("NEW has 2 ranks");
  const std::string text = dlprof::render_hta_diff_text(report);
  EXPECT_THAT(text, testing::HasSubstr("BASE: before/, rank 0, ProfilerStep#5\n"));
  EXPECT_THAT(text, testing::HasSubstr("NEW : after/, rank 0, ProfilerStep#105\n"));
  EXPECT_THAT(text, testing::HasSubstr("5 names: 1 added, 1 deleted, 0 increased, 1 decreased, 2 unchanged in count."));
  EXPECT_THAT(text, testing::ContainsRegex("The largest changes of summed time\n.*\n.*\naten::clone +added +0 +1 +0 +2000 +\\+1 +\\+2000\n"));

  const nlohmann::json json = nlohmann::json::parse(dlprof::render_hta_diff_json(report));
  EXPECT_EQ(json["hta_compat"], true);
  EXPECT_EQ(json["base"]["iteration"], 5);
  EXPECT_EQ(json["new"]["iteration"], 105);
  ASSERT_EQ(json["rows"].size(), 5u);
  EXPECT_EQ(json["rows"][3]["name"], "aten::mm");
  EXPECT_EQ(json["rows"][3]["control_counts"], 3);
  EXPECT_EQ(json["rows"][3]["test_counts"], 2);
  EXPECT_EQ(json["rows"][3]["control_total_duration"], 3000);
  EXPECT_EQ(json["rows"][3]["diff_duration"], -1000);
  EXPECT_EQ(json["rows"][3]["counts_change_categories"], "-");
  EXPECT_EQ(json["rows"][3]["kind"], "decreased");

  const std::string html = dlprof::render_hta_diff_html(report);
  EXPECT_THAT(html, testing::HasSubstr("<h2>The largest changes of summed time</h2>"));
  EXPECT_THAT(html, testing::HasSubstr("aten::clone"));
  EXPECT_THAT(html, testing::HasSubstr("Note: NEW has 2 ranks"));
}

}  // namespace
