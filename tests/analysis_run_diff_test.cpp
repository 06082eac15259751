// Two runs compared (analysis/run_diff.hpp) on hand-built traces: each step's figures of a trace
// and of its ops, kernels, shapes and collectives (analysis/step_samples.hpp), counted in the step
// they were launched in, work outside every step left out, step numbers out of the keys; the rank
// statistics against exact values; keys classified by HTA's predicates, a change told from noise,
// and the changes that explain the step time; the comparison as text, JSON and HTML; the regression
// gate's false alarms and catches over many simulated pairs of runs, and the runs it refuses; a
// slow step's dump against the median of its other steps.
#include <dlprof/analysis/regression_gate.hpp>
#include <dlprof/analysis/run_diff.hpp>
#include <dlprof/analysis/slow_step.hpp>
#include <dlprof/analysis/step_samples.hpp>
#include <dlprof/report/diff.hpp>
#include <dlprof/report/gate.hpp>
#include <dlprof/report.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::analysis::SampleKey;
using dlprof::analysis::StepSamples;
using dlprof_test::kMs;
using dlprof_test::kUs;

/// Steps 7, 8 and 9 of 10 ms. In each, aten::linear (2 ms) holds aten::addmm (1.5 ms), which
/// launches a GEMM that runs from 9 ms to 10.5 ms of the step: past the step's host end. Step k
/// (from 0) calls aten::add k + 1 times, 100 us each, each launching a 10 us kernel. An op before
/// the first step belongs to no step.
dlprof::Trace three_steps() {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.op("aten::zeros", 0, 1 * kMs);
  std::uint32_t correlation = 1;
  std::uint64_t external_id = 1;
  for (std::int64_t k = 0; k < 3; ++k) {
    const std::int64_t t = 5 * kMs + k * 12 * kMs;
    builder.step(7 + k, t, t + 10 * kMs);
    builder.op("aten::linear", t + 1 * kMs, t + 3 * kMs, external_id++)
        .inputs("[[8, 16], [16, 16]]", "[\"float\", \"float\"]", 4096);
    builder.op("aten::addmm", t + 1 * kMs, t + 2500 * kUs, external_id)
        .inputs("[[16], [8, 16], [16, 16]]", "[\"float\", \"float\", \"float\"]");
    builder.call("cudaLaunchKernel", t + 2 * kMs, t + 2100 * kUs, correlation, external_id);
    builder.kernel("ampere_sgemm_32x32_sliced1x4_nn", t + 9 * kMs, t + 10500 * kUs, correlation++, external_id++);
    for (std::int64_t call = 0; call <= k; ++call) {
      const std::int64_t at = t + 4 * kMs + call * 200 * kUs;
      builder.op("aten::add", at, at + 100 * kUs, external_id);
      builder.call("cudaLaunchKernel", at + 10 * kUs, at + 20 * kUs, correlation, external_id);
      builder.kernel(dlprof_test::kBf16AddKernel, at + 30 * kUs, at + 40 * kUs, correlation++, external_id++);
    }
  }
  return builder.trace();
}

StepSamples samples_of(const dlprof::Trace& trace, SampleKey key) {
  return dlprof::analysis::step_samples(trace, dlprof::analysis::step_breakdown(trace), key);
}

TEST(StepSamplesTest, EachOpHasItsFiguresInEachStepAndWorkOutsideTheStepsIsLeftOut) {
  const StepSamples samples = samples_of(three_steps(), SampleKey::Op);
  ASSERT_EQ(samples.steps.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(samples.steps[k].number, 7 + static_cast<std::int64_t>(k));
    // The GEMM ends 0.5 ms after the step's host end: the step lasts until then.
    EXPECT_EQ(samples.steps[k].duration_ns, 10500 * kUs);
    EXPECT_EQ(samples.steps[k].gpu_busy_ns, 1500 * kUs + static_cast<std::int64_t>(k + 1) * 10 * kUs);
    EXPECT_EQ(samples.steps[k].flops, 4096u);
  }
  EXPECT_EQ(samples.find("aten::zeros"), nullptr);
  const auto* addmm = samples.find("aten::addmm");
  ASSERT_NE(addmm, nullptr);
  for (const auto& step : addmm->steps) {
    EXPECT_EQ(step.calls, 1);
    EXPECT_EQ(step.total_ns, 1500 * kUs);
    EXPECT_EQ(step.self_ns, 1500 * kUs);
    EXPECT_EQ(step.gpu_self_ns, 1500 * kUs);
  }
  const auto* linear = samples.find("aten::linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->steps[0].self_ns, 500 * kUs);
  EXPECT_EQ(linear->steps[0].gpu_self_ns, 0);
  EXPECT_EQ(linear->steps[0].gpu_total_ns, 1500 * kUs);
  const auto* add = samples.find("aten::add");
  ASSERT_NE(add, nullptr);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(add->steps[k].calls, static_cast<std::int64_t>(k + 1));
    EXPECT_EQ(add->steps[k].self_ns, static_cast<std::int64_t>(k + 1) * 100 * kUs);
    EXPECT_EQ(add->steps[k].gpu_self_ns, static_cast<std::int64_t>(k + 1) * 10 * kUs);
  }
  // Steps are one key whatever their numbers.
  const auto* step = samples.find("ProfilerStep#*");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->sum().calls, 3);
  EXPECT_EQ(samples.find("ProfilerStep#7"), nullptr);
}

TEST(StepSamplesTest, KernelsCountInTheStepTheirLaunchLiesInByFullOrShortName) {
  const dlprof::Trace trace = three_steps();
  const StepSamples full = samples_of(trace, SampleKey::Kernel);
  const auto* gemm = full.find("ampere_sgemm_32x32_sliced1x4_nn");
  ASSERT_NE(gemm, nullptr);
  for (const auto& step : gemm->steps) {
    EXPECT_EQ(step.calls, 1);
    EXPECT_EQ(step.gpu_self_ns, 1500 * kUs);
    EXPECT_EQ(step.self_ns, 0);
  }
  ASSERT_NE(full.find(dlprof_test::kBf16AddKernel), nullptr);
  EXPECT_EQ(full.find(dlprof_test::kBf16AddKernel)->steps[2].calls, 3);

  const StepSamples short_names = samples_of(trace, SampleKey::KernelShortName);
  const std::string add = dlprof::analysis::short_kernel_name(dlprof_test::kBf16AddKernel);
  EXPECT_LT(add.size(), dlprof_test::kBf16AddKernel.size());
  ASSERT_NE(short_names.find(add), nullptr);
  EXPECT_EQ(short_names.find(add)->sum().calls, 6);
  for (const auto& counts : short_names.kernels_by_type) EXPECT_GT(counts[0] + counts[1] + counts[2], 0);
}

TEST(StepSamplesTest, ShapesSplitAnOpAndDataTypesAreGathered) {
  const StepSamples samples = samples_of(three_steps(), SampleKey::OpAndShapes);
  EXPECT_NE(samples.find("aten::linear [[8, 16], [16, 16]]"), nullptr);
  EXPECT_NE(samples.find("aten::add"), nullptr);  // recorded without shapes
  EXPECT_EQ(samples.dtypes, (std::set<std::string>{"float"}));
}

TEST(StepSamplesTest, CollectivesAreKeyedByNameTypeSizeAndGroup) {
  dlprof_test::AnalysisTraceBuilder builder;
  for (std::int64_t k = 0; k < 2; ++k) {
    const std::int64_t t = k * 10 * kMs;
    builder.step(k, t, t + 9 * kMs);
    dlprof::CollectiveCall call;
    call.name = "allreduce";
    call.dtype = "Float";
    call.in_nelems = 1024;
    call.group_name = "0";
    call.group_desc = "default_pg";
    builder.collective(call, t + 1 * kMs, t + 3 * kMs);
  }
  const StepSamples samples = samples_of(builder.trace(), SampleKey::Collective);
  ASSERT_EQ(samples.keys.size(), 1u);
  EXPECT_EQ(samples.keys[0].key, "allreduce Float\u00d71024 in group 0 (default_pg)");
  EXPECT_EQ(samples.keys[0].steps[1].total_ns, 2 * kMs);
}

TEST(StepSamplesTest, AStepTimeWithoutStepsIsTheWholeTraceAndNoStepGivesNoSamples) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.op("aten::mm", 0, 2 * kMs).op("aten::mm", 3 * kMs, 4 * kMs);
  const StepSamples whole = samples_of(builder.trace(), SampleKey::Op);
  ASSERT_EQ(whole.steps.size(), 1u);
  EXPECT_EQ(whole.steps[0].number, -1);
  ASSERT_NE(whole.find("aten::mm"), nullptr);
  EXPECT_EQ(whole.find("aten::mm")->steps[0].calls, 2);

  const StepSamples empty = samples_of(dlprof::Trace{}, SampleKey::Op);
  EXPECT_TRUE(empty.steps.empty());
  EXPECT_TRUE(empty.keys.empty());
}

namespace stats = dlprof::analysis::detail;

TEST(RankStatisticsTest, MannWhitneyIsExactForSmallSamplesAndItsNormalApproximationAgreesWithTies) {
  // Five values wholly above five others: one arrangement of C(10, 5) = 252 has U = 25.
  const stats::MannWhitney apart = stats::mann_whitney({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_EQ(apart.u, 25);
  EXPECT_NEAR(apart.p_greater, 1.0 / 252, 1e-12);
  EXPECT_NEAR(apart.p_value(), 2.0 / 252, 1e-12);
  EXPECT_NEAR(stats::mann_whitney({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}).p_less, 1.0 / 252, 1e-12);
  // Three against three: the smallest two-sided p is 2/20, never below 5 %.
  EXPECT_NEAR(stats::mann_whitney({1, 2, 3}, {4, 5, 6}).p_value(), 0.1, 1e-12);
  // Ties take the normal approximation with its tie correction: its p lies between the exact p of
  // the ties all broken against second and all broken for it.
  std::vector<double> first, second, first_untied, against, for_second;
  for (int i = 0; i < 12; ++i) {
    first.push_back(i / 2);
    second.push_back(i / 2 + 2);
    first_untied.push_back(i / 2 + 0.001 * i);
    against.push_back(i / 2 + 2 - 0.02 + 0.001 * i);
    for_second.push_back(i / 2 + 2 + 0.02 + 0.001 * i);
  }
  const double tied = stats::mann_whitney(first, second).p_value();
  EXPECT_LT(stats::mann_whitney(first_untied, for_second).p_value(), tied);
  EXPECT_GT(stats::mann_whitney(first_untied, against).p_value(), tied);
  EXPECT_LT(tied, 0.05);
  EXPECT_EQ(stats::mann_whitney({}, {1}).p_value(), 1);
  EXPECT_EQ(stats::mann_whitney({2, 2}, {2, 2}).p_value(), 1);
}

TEST(RankStatisticsTest, HodgesLehmannQuantilesAndFalseDiscoveries) {
  // Differences of {2, 3, 4} and {1, 2, 3}: -1 0 0 1 1 1 2 2 3, median 1.
  EXPECT_EQ(stats::hodges_lehmann({1, 2, 3}, {2, 3, 4}, 0.05).shift, 1);
  const stats::ShiftEstimate wide = stats::hodges_lehmann({1, 2, 3, 4, 5, 6, 7, 8}, {11, 12, 13, 14, 15, 16, 17, 18}, 0.025);
  EXPECT_EQ(wide.shift, 10);
  EXPECT_LT(wide.lower, 10);
  EXPECT_GT(wide.upper, 10);
  EXPECT_NEAR(stats::normal_upper_quantile(0.05), 1.6448536, 1e-6);
  EXPECT_NEAR(stats::normal_upper_quantile(0.025), 1.9599640, 1e-6);
  EXPECT_NEAR(stats::normal_upper_quantile(0.99), -2.3263479, 1e-6);
  EXPECT_EQ(stats::quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_EQ(stats::quantile({1, 2, 3, 4, 5}, 0.25), 2);
  EXPECT_NEAR(stats::robust_sigma({1, 2, 3, 4, 100}), 1.4826, 1e-9);
  EXPECT_EQ(stats::benjamini_hochberg({0.01, 0.04, 0.03, 0.5}, 0.05), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(stats::benjamini_hochberg({0.01, 0.02, 0.03, 0.04}, 0.05), (std::vector<bool>{true, true, true, true}));
}

/// A run of `steps` steps numbered from `first`, 30 ms apart. Each runs aten::mm for `mm_us` (+ up
/// to 40 us of jitter that changes from step to step), aten::add `adds` times (50 us each),
/// aten::relu (100 us) where `relu`, aten::copy_ (300 us + up to 60 us of jitter), and a range
/// `stall` of 1.5 ms where `stall`; the step ends 100 us after its last op.
dlprof::Trace run_of_steps(std::size_t steps, std::int64_t first, std::int64_t mm_us, int adds, bool relu, bool stall,
                  unsigned seed) {
  dlprof_test::AnalysisTraceBuilder builder;
  unsigned state = seed;
  const auto jitter = [&state](std::int64_t range_us) {
    state = state * 1103515245u + 12345u;
    return static_cast<std::int64_t>((state >> 8) % static_cast<unsigned>(range_us)) * kUs;
  };
  for (std::size_t k = 0; k < steps; ++k) {
    const std::int64_t t = static_cast<std::int64_t>(k) * 30 * kMs;
    std::int64_t at = t + 100 * kUs;
    const std::int64_t mm = mm_us * kUs + jitter(40);
    builder.op("aten::mm", at, at + mm);
    at += mm + 10 * kUs;
    for (int a = 0; a < adds; ++a, at += 60 * kUs) builder.op("aten::add", at, at + 50 * kUs);
    if (relu) {
      builder.op("aten::relu", at, at + 100 * kUs);
      at += 110 * kUs;
    }
    const std::int64_t copy = 300 * kUs + jitter(60);
    builder.op("aten::copy_", at, at + copy);
    at += copy + 10 * kUs;
    if (stall) {
      builder.range("stall", at, at + 1500 * kUs);
      at += 1500 * kUs + 10 * kUs;
    }
    builder.step(first + static_cast<std::int64_t>(k), t, at + 100 * kUs);
  }
  return builder.trace();
}

dlprof::analysis::RunDiff diff_of(const dlprof::Trace& base, const dlprof::Trace& next) {
  return dlprof::analysis::diff_runs(samples_of(base, SampleKey::Op), samples_of(next, SampleKey::Op));
}

const dlprof::analysis::KeyChange& change_of(const dlprof::analysis::RunDiff& diff, std::string_view key) {
  for (const auto& change : diff.changes)
    if (change.key == key) return change;
  throw std::runtime_error("no change for " + std::string(key));
}

TEST(RunDiffTest, KeysAreClassifiedPerStepByHtasPredicatesAndStepNumbersNeverMakeAKeyNew) {
  // BASE: 4 steps numbered from 0; NEW: 12 steps numbered from 100, twice the adds, no relu.
  const auto diff = diff_of(run_of_steps(4, 0, 1000, 1, true, false, 1), run_of_steps(12, 100, 1000, 2, false, true, 2));
  using Kind = dlprof::analysis::KeyChangeKind;
  EXPECT_EQ(change_of(diff, "aten::add").kind, Kind::Increased);
  EXPECT_EQ(change_of(diff, "aten::relu").kind, Kind::Deleted);
  EXPECT_EQ(change_of(diff, "stall").kind, Kind::Added);
  EXPECT_EQ(change_of(diff, "aten::mm").kind, Kind::Unchanged);  // 4 calls in 4 steps, 12 in 12
  EXPECT_EQ(change_of(diff, "ProfilerStep#*").kind, Kind::Unchanged);
  EXPECT_EQ(diff.kinds[static_cast<std::size_t>(Kind::Added)], 1u);
  EXPECT_EQ(change_of(diff, "aten::add").next_of(dlprof::analysis::KeyFigure::Calls).mean, 2);
  EXPECT_EQ(change_of(diff, "aten::add").delta(dlprof::analysis::KeyFigure::Self), 50 * kUs);
  // Per step, not summed: 4 steps against 12 make no difference of their own.
  EXPECT_EQ(diff.step_time.base_steps, 4u);
  EXPECT_EQ(diff.step_time.next_steps, 12u);
  ASSERT_EQ(diff.notes.size(), 1u);
  EXPECT_EQ(diff.notes[0], "BASE has 4 steps (#0\u2013#3), NEW 12 steps (#100\u2013#111): figures are per step");
}

TEST(RunDiffTest, AChangeBeyondTheStepsNoiseIsSignificantAndExplainsTheStepTime) {
  // NEW: aten::mm 500 us slower and a 1.5 ms stall; aten::copy_ jitters alike in both.
  const auto diff = diff_of(run_of_steps(20, 0, 1000, 1, true, false, 3), run_of_steps(20, 0, 1500, 1, true, true, 4));
  const auto& mm = change_of(diff, "aten::mm");
  EXPECT_TRUE(mm.significant);
  EXPECT_LT(mm.p_value, 1e-6);
  EXPECT_NEAR(mm.impact_ns, 500 * kUs, 45 * kUs);
  EXPECT_FALSE(change_of(diff, "aten::copy_").significant);
  EXPECT_FALSE(change_of(diff, "aten::add").significant);  // 50 us in every step of both
  EXPECT_EQ(change_of(diff, "aten::add").p_value, 1);
  // The steps grew by the stall and the slower GEMM: those two explain it, the larger first.
  EXPECT_TRUE(diff.step_time.significant);
  EXPECT_GT(diff.step_time.relative, 0.05);
  EXPECT_LT(diff.step_time.relative_lower, diff.step_time.relative);
  ASSERT_EQ(diff.explaining.size(), 2u);
  EXPECT_EQ(diff.changes[diff.explaining[0]].key, "stall");
  EXPECT_EQ(diff.changes[diff.explaining[1]].key, "aten::mm");
  EXPECT_EQ(diff.changes[0].key, "stall");  // the significant first, by impact
}

TEST(RunDiffTest, ThreeStepsASideCannotTellAChangeFromNoiseAndARunAgainstItselfHasNoChange) {
  const auto few = diff_of(run_of_steps(3, 0, 1000, 1, true, false, 5), run_of_steps(3, 0, 3000, 1, true, false, 6));
  EXPECT_FALSE(change_of(few, "aten::mm").significant);
  EXPECT_FALSE(few.step_time.significant);
  EXPECT_TRUE(few.explaining.empty());

  const dlprof::Trace same = run_of_steps(10, 0, 1000, 1, true, false, 7);
  const auto itself = diff_of(same, same);
  EXPECT_EQ(itself.significant, 0u);
  EXPECT_EQ(itself.step_time.relative, 0);
  EXPECT_TRUE(itself.notes.empty());
  for (const auto& change : itself.changes) EXPECT_EQ(change.kind, dlprof::analysis::KeyChangeKind::Unchanged);
}

dlprof::DiffSide side_of(const dlprof::Trace& trace, std::string title) {
  dlprof::DiffSide side;
  side.title = std::move(title);
  side.samples = samples_of(trace, SampleKey::Op);
  side.report = dlprof::make_report(trace);
  return side;
}

TEST(DiffReportTest, TextJsonAndHtmlLeadWithTheStepTimeAndWhatExplainsIt) {
  const dlprof::Trace base = run_of_steps(20, 0, 1000, 1, true, false, 3);
  const dlprof::Trace next = run_of_steps(20, 50, 1500, 1, false, true, 4);
  const dlprof::DiffReport report = dlprof::make_diff_report(side_of(base, "before/"), side_of(next, "after/"));

  const std::string text = dlprof::render_diff_text(report);
  EXPECT_THAT(text, testing::HasSubstr("BASE before/: 20 steps (#0\u2013#19)\nNEW  after/: 20 steps (#50\u2013#69)\n"));
  EXPECT_THAT(text, testing::ContainsRegex("Step time: 1\\.[0-9]+ms -> 3\\.[0-9]+ms a step .*beyond the steps' noise"));
  EXPECT_THAT(text, testing::HasSubstr("What explains it:\n  stall self CPU +1.500ms a step (added), "));
  EXPECT_THAT(text, testing::HasSubstr("\n  aten::mm self CPU +"));
  EXPECT_THAT(text, testing::HasSubstr("1 added, 1 deleted, 0 increased, 0 decreased, 4 unchanged"));
  EXPECT_THAT(text, testing::ContainsRegex("\n  CPU Exec +[.0-9]+ ms +[.0-9]+ ms  \\+[.0-9]+ ms"));  // the overview
  for (std::size_t from = 0, end; from < text.size(); from = end + 1) {
    end = text.find('\n', from);
    EXPECT_LE(end - from, 120u) << text.substr(from, end - from);
  }

  const nlohmann::json json = nlohmann::json::parse(dlprof::render_diff_json(report));
  EXPECT_EQ(json["diff_version"], 1);
  EXPECT_EQ(json["key"], "op");
  EXPECT_EQ(json["base"]["steps"], 20);
  EXPECT_EQ(json["new"]["step_numbers"][0], 50);
  EXPECT_TRUE(json["step_time"]["significant"]);
  EXPECT_GT(json["step_time"]["new"]["mean_us"].get<double>(), json["step_time"]["base"]["mean_us"].get<double>());
  ASSERT_EQ(json["explaining"].size(), 2u);
  EXPECT_EQ(json["explaining"][0]["key"], "stall");
  EXPECT_EQ(json["explaining"][0]["delta_us"], 1500);
  EXPECT_EQ(json["counts"]["added"], 1);
  EXPECT_EQ(json["changes"].size(), 6u);  // every key, not only the table's rows
  EXPECT_EQ(json["changes"][0]["new"]["self_us"]["mean"], 1500);
  EXPECT_EQ(json["changes"][0]["new"]["calls"]["mean"], 1);
  EXPECT_EQ(json["overview"][0]["name"], "Step time (mean)");

  const std::string html = dlprof::render_diff_html(report);
  EXPECT_THAT(html, testing::HasSubstr("<section id=\"step-time\">"));
  EXPECT_THAT(html, testing::HasSubstr("<section id=\"changes\">"));
  EXPECT_THAT(html, testing::HasSubstr("stall self CPU +1.500ms a step (added)"));
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

/// Step times of `steps` steps: `median_ns` × (1 + `shift`), times noise of relative spread
/// `spread` skewed to the slow side (a slow step is far slower, a fast one barely faster), from a
/// generator seeded with `seed`.
StepSamples step_times(std::size_t steps, double median_ns, double shift, double spread, std::uint64_t& seed) {
  StepSamples samples;
  for (std::size_t i = 0; i < steps; ++i) {
    double sum = 0;  // twelve uniforms: near-normal
    for (int k = 0; k < 12; ++k) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      sum += static_cast<double>(seed >> 11) / 9007199254740992.0;
    }
    dlprof::analysis::StepSample step;
    step.duration_ns = static_cast<std::int64_t>(median_ns * (1 + shift) * std::exp(spread * (sum - 6)));
    samples.steps.push_back(step);
    samples.kernels_by_type.emplace_back();
  }
  return samples;
}

TEST(DiffReportTest, WhereNoKeyExplainsTheStepTimeTheRoleThatChangedMostDoes) {
  // Loading moved to worker threads: the step is 900 ms shorter, its DataLoader role 925 ms.
  dlprof::DiffReport report;
  report.diff.step_time.base.mean = 1433e6;
  report.diff.step_time.next.mean = 533e6;
  report.overview = {{"Step time (mean)", "ms", 1433.0, 533.0}, {"  DataLoader", "ms", 1373.0, 448.0},
                     {"  CPU Exec", "ms", 60.0, 85.0}};
  EXPECT_EQ(dlprof::detail::role_explaining(report),
            "no key alone; the step breakdown's DataLoader -925.000 ms a step, 103 % of the change");
  EXPECT_THAT(dlprof::render_diff_text(report), testing::HasSubstr("\nWhat explains it: no key alone; the step breakdown's DataLoader"));
  report.overview.pop_back();
  report.overview.pop_back();
  EXPECT_EQ(dlprof::detail::role_explaining(report), "");
}

TEST(SlowStepTest, ADumpedSlowStepNamesWhatGrewAgainstTheMedianOfTheOtherSteps) {
  // Ten steps of run_of_steps' shape; in step 7 aten::mm takes 2 ms more and a 50 ms stall runs.
  dlprof_test::AnalysisTraceBuilder builder;
  for (std::int64_t k = 0; k < 10; ++k) {
    const std::int64_t t = k * 100 * kMs;
    const std::int64_t mm = (k == 7 ? 3 : 1) * kMs;
    builder.op("aten::mm", t + 100 * kUs, t + 100 * kUs + mm).op("aten::relu", t + 200 * kUs + mm, t + 300 * kUs + mm);
    std::int64_t end = t + 400 * kUs + mm;
    if (k == 7) {
      builder.range("stall", end, end + 50 * kMs);
      end += 50 * kMs;
    }
    builder.step(k, t, end);
  }
  dlprof::Trace trace = builder.trace();
  const std::optional<dlprof::analysis::SlowStep> slow = dlprof::analysis::slow_step(samples_of(trace, SampleKey::Op));
  ASSERT_TRUE(slow.has_value());
  EXPECT_EQ(slow->number, 7);
  EXPECT_EQ(slow->duration_ns, 53400 * kUs);
  EXPECT_EQ(slow->median_ns, 1400 * kUs);
  EXPECT_EQ(slow->other_steps, 9u);
  ASSERT_EQ(slow->grew.size(), 1u);  // the stall alone is 96 % of the excess
  EXPECT_EQ(slow->grew[0].key, "stall");
  EXPECT_TRUE(slow->grew[0].added);
  EXPECT_EQ(dlprof::detail::slow_step_sentence(*slow),
            "The slow step: ProfilerStep#7 took 53.400 ms, 38.1x the median 1.400 ms of the 9 other steps: stall 50.000 ms (new)");

  // In a slow step's dump, the report says it under the dump's reason, in each format.
  trace.flight_recorder_dump = "slow step 7: 53.400 ms, 38.1x the median 1.400 ms of the 9 steps before it";
  const dlprof::Report report = dlprof::make_report(trace);
  ASSERT_TRUE(report.ranks.front().slow_step.has_value());
  EXPECT_THAT(dlprof::render_text(report), testing::HasSubstr("of the 9 steps before it\nThe slow step: ProfilerStep#7 took 53.400 ms"));
  const nlohmann::json json = nlohmann::json::parse(dlprof::render_json(report));
  EXPECT_EQ(json["ranks"][0]["slow_step"]["step"], 7);
  EXPECT_EQ(json["ranks"][0]["slow_step"]["grew"][0]["key"], "stall");
  EXPECT_THAT(dlprof::render_html(report), testing::HasSubstr("<p>The slow step: ProfilerStep#7 took 53.400 ms"));
  // Another dump's reason (a crash) and a trace of no dump: no slow step.
  trace.flight_recorder_dump = "signal 11 (SIGSEGV)";
  EXPECT_FALSE(dlprof::make_report(trace).ranks.front().slow_step.has_value());
  EXPECT_FALSE(dlprof::analysis::slow_step(StepSamples{}).has_value());
}

TEST(SlowRankTest, TheSlowestRankAgainstTheMedianRankByTheOpsThatTakeItLonger) {
  // Three ranks of 8 steps; rank 2's aten::addmm takes 60 ms more, rank 0's steps 1 ms less.
  std::vector<dlprof::Trace> ranks;
  for (std::int64_t r = 0; r < 3; ++r) {
    dlprof_test::AnalysisTraceBuilder builder;
    builder.rank(r, 3);
    unsigned state = static_cast<unsigned>(r + 1);
    for (std::int64_t k = 0; k < 8; ++k) {
      state = state * 1103515245u + 12345u;
      const std::int64_t t = k * 200 * kMs;
      const std::int64_t addmm = (r == 2 ? 70 : 10) * kMs + static_cast<std::int64_t>((state >> 8) % 500) * kUs;
      const std::int64_t other = (r == 0 ? 9 : 10) * kMs;
      builder.op("aten::addmm", t + kMs, t + kMs + addmm).op("aten::relu", t + 2 * kMs + addmm, t + 2 * kMs + addmm + other);
      builder.step(k, t, t + 3 * kMs + addmm + other);
    }
    ranks.push_back(builder.trace());
  }
  const dlprof::Report report = dlprof::make_report(ranks);
  ASSERT_TRUE(report.slow_rank.has_value());
  EXPECT_EQ(report.slow_rank->rank, 2);
  EXPECT_EQ(report.slow_rank->median_rank, 1);
  EXPECT_FALSE(report.slow_rank->straggler);  // no collectives: the longest steps
  EXPECT_NEAR(report.slow_rank->step_delta_ns, 60 * kMs, 0.5 * kMs);
  ASSERT_EQ(report.slow_rank->keys.size(), 1u);
  EXPECT_EQ(report.slow_rank->keys[0].key, "aten::addmm");
  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, testing::ContainsRegex("Slow rank: rank 2 takes (59|60)\\.[0-9]{3} ms more a step than rank 1, the median rank:"));
  EXPECT_THAT(text, testing::ContainsRegex("aten::addmm self CPU[ \n]+\\+(59|60)\\.[0-9]{3} ms a step"));
  EXPECT_EQ(nlohmann::json::parse(dlprof::render_json(report))["slow_rank"]["keys"][0]["key"], "aten::addmm");
  EXPECT_FALSE(dlprof::make_report(ranks.front()).slow_rank.has_value());  // one rank
}

dlprof::analysis::GateOptions slower_by(double threshold) {
  dlprof::analysis::GateOptions options;
  options.checks.push_back({dlprof::analysis::GateFigure::StepTime, true, threshold});
  return options;
}

TEST(RegressionGateTest, FalseAlarmsStayAtTheStatedRateAndACaughtChangeNeedsTheStepsItSays) {
  using dlprof::analysis::GateVerdict;
  std::uint64_t seed = 42;
  const dlprof::analysis::GateOptions options = slower_by(0.02);  // 1 % false alarms
  // A/A: 1000 pairs of 20-step runs of one distribution (2 % spread).
  int false_alarms = 0;
  for (int pair = 0; pair < 1000; ++pair) {
    const auto base = step_times(20, 50e6, 0, 0.02, seed);
    const auto next = step_times(20, 50e6, 0, 0.02, seed);
    false_alarms += dlprof::analysis::regression_gate(base, next, options).verdict() == GateVerdict::Regression;
  }
  EXPECT_LE(false_alarms, 20);  // 1 % of 1000 pairs, and three standard deviations of chance
  // A/B: NEW 2.5 % slower; the gate says how many steps catch 2 %, and at that count it catches
  // 2.5 % in at least 95 % of pairs.
  const auto probe = dlprof::analysis::regression_gate(step_times(20, 50e6, 0, 0.02, seed), step_times(20, 50e6, 0, 0.02, seed), options);
  const std::size_t needed = probe.results.front().steps_needed;
  EXPECT_GT(needed, 5u);
  EXPECT_LT(needed, 200u);
  int caught = 0;
  for (int pair = 0; pair < 300; ++pair) {
    const auto base = step_times(needed, 50e6, 0, 0.02, seed);
    const auto next = step_times(needed, 50e6, 0.025, 0.02, seed);
    const auto gate = dlprof::analysis::regression_gate(base, next, options);
    caught += gate.verdict() == GateVerdict::Regression;
    if (pair == 0) {
      EXPECT_NEAR(gate.results.front().relative, 0.025, 0.01);
      EXPECT_LT(gate.results.front().relative_bound, gate.results.front().relative);
      EXPECT_LT(gate.results.front().smallest_detectable, 0.025);
    }
  }
  EXPECT_GE(caught, 300 * 0.95);
  // A real change well below half the threshold passes, however little noise there is.
  const auto tiny = dlprof::analysis::regression_gate(step_times(50, 50e6, 0, 0.001, seed), step_times(50, 50e6, 0.005, 0.001, seed),
                                                      options);
  EXPECT_LT(tiny.results.front().p_value, 0.01);
  EXPECT_EQ(tiny.verdict(), GateVerdict::Pass);
}

TEST(RegressionGateTest, RunsThatLostEventsRunOtherKernelsOrHaveTooFewStepsAreNotComparable) {
  using dlprof::analysis::GateVerdict;
  std::uint64_t seed = 7;
  const dlprof::analysis::GateOptions options = slower_by(0.02);
  auto base = step_times(20, 10e6, 0, 0.01, seed);
  auto next = step_times(20, 10e6, 0.5, 0.01, seed);
  EXPECT_EQ(dlprof::analysis::regression_gate(base, next, options).verdict(), GateVerdict::Regression);

  auto lossy = next;
  lossy.dropped_events = 12;
  const auto lost = dlprof::analysis::regression_gate(base, lossy, options);
  EXPECT_EQ(lost.verdict(), GateVerdict::NotComparable);  // never "faster", never "pass"
  EXPECT_THAT(lost.not_comparable.front(), testing::HasSubstr("NEW lost events while it recorded (12 dropped"));

  auto collectives = next;
  for (auto& step : collectives.kernels_by_type) step[static_cast<std::size_t>(dlprof::analysis::KernelType::Communication)] = 2;
  EXPECT_THAT(dlprof::analysis::regression_gate(base, collectives, options).not_comparable.front(),
              testing::HasSubstr("the kinds of kernels a step runs differ: BASE no kernels, NEW COMMUNICATION"));

  const auto few = dlprof::analysis::regression_gate(step_times(3, 10e6, 0, 0.01, seed), step_times(3, 10e6, 0.5, 0.01, seed), options);
  EXPECT_EQ(few.verdict(), GateVerdict::NotComparable);
  EXPECT_THAT(few.not_comparable.front(),
              testing::HasSubstr("3 steps against 3 cannot show a change at a false-alarm rate of 1 %: record at least 5 steps a run"));

  dlprof::analysis::GateOptions memory = options;
  memory.checks.push_back({dlprof::analysis::GateFigure::MemoryPeak, true, 0.05});
  const auto no_memory = dlprof::analysis::regression_gate(base, base, memory);
  EXPECT_EQ(no_memory.results[1].verdict, GateVerdict::NotComparable);
  EXPECT_EQ(no_memory.results[1].reason, "BASE has no memory_peak (it needs allocations (profile_memory))");
}

TEST(RegressionGateTest, TheVerdictAsTextAndJUnitNamesTheChecksAndWhatMadeTheStepSlower) {
  const dlprof::Trace base = run_of_steps(20, 0, 1000, 1, true, false, 3);
  const dlprof::Trace next = run_of_steps(20, 0, 1500, 1, true, true, 4);
  dlprof::GateOutcome outcome;
  dlprof::analysis::GateOptions options = slower_by(0.03);
  options.checks.push_back({dlprof::analysis::GateFigure::GpuBusy, false, 0.05});
  outcome.gate = dlprof::analysis::regression_gate(samples_of(base, SampleKey::Op), samples_of(next, SampleKey::Op), options);
  outcome.diff = diff_of(base, next);
  outcome.base_title = "main/";
  outcome.next_title = "pr/";
  const std::string text = dlprof::render_gate_text(outcome);
  EXPECT_THAT(text, testing::StartsWith("dlprof-report gate: NEW pr/ against BASE main/: not comparable\n"));
  EXPECT_THAT(text, testing::ContainsRegex("step_time > \\+3 %: REGRESSION: \\+[0-9.]+ %"));
  EXPECT_THAT(text, testing::HasSubstr("gpu_busy < -5 %: not comparable: BASE has no gpu_busy (it needs GPU work)"));
  EXPECT_THAT(text, testing::HasSubstr("Responsible (by op):\n  stall self CPU +1.500ms a step (added)"));
  const std::string junit = dlprof::render_gate_junit(outcome);
  EXPECT_THAT(junit, testing::StartsWith("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dlprof-report\" tests=\"2\" "
                                         "failures=\"1\" errors=\"1\">"));
  EXPECT_THAT(junit, testing::HasSubstr("<testcase classname=\"dlprof.gate\" name=\"step_time &gt; +3 %\">\n      <failure message="));
  EXPECT_THAT(junit, testing::HasSubstr("<error message=\"gpu_busy &lt; -5 %: not comparable"));
}

TEST(RankStatisticsTest, TheRunsSpreadsUpperBoundAgreesWithChiSquaresTables) {
  // σ's upper 95 % bound: spread · √(df / χ²₀.₀₅(df)), χ²₀.₀₅(18) = 9.390, χ²₀.₀₅(80) = 60.391.
  EXPECT_NEAR(dlprof::analysis::detail::spread_upper_bound(0.02, 18, 0.95), 0.02 * std::sqrt(18 / 9.390), 2e-4);
  EXPECT_NEAR(dlprof::analysis::detail::spread_upper_bound(0.02, 80, 0.95), 0.02 * std::sqrt(80 / 60.391), 1e-4);
  EXPECT_NEAR(dlprof::analysis::detail::spread_upper_bound(0.02, 18, 0.5), 0.02 * std::sqrt(18 / 17.338), 1e-4);
}

TEST(RankStatisticsTest, StudentsTAgreesWithItsTables) {
  EXPECT_NEAR(stats::student_upper_quantile(0.01, 2), 6.965, 0.001);
  EXPECT_NEAR(stats::student_upper_quantile(0.05, 4), 2.132, 0.001);
  EXPECT_NEAR(stats::student_upper_quantile(0.01, 9), 2.821, 0.001);
  EXPECT_NEAR(stats::student_upper_quantile(0.95, 9), -1.833, 0.001);
  EXPECT_NEAR(stats::student_upper_quantile(0.01, 1e6), stats::normal_upper_quantile(0.01), 1e-4);
  EXPECT_DOUBLE_EQ(stats::student_upper_tail(0, 3), 0.5);
  EXPECT_NEAR(stats::student_upper_tail(2.228, 10), 0.025, 1e-4);
  EXPECT_NEAR(stats::student_upper_tail(-2.228, 10), 0.975, 1e-4);
}

/// One standard normal draw from `seed` (twelve uniforms).
double normal_draw(std::uint64_t& seed) {
  double sum = 0;
  for (int k = 0; k < 12; ++k) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    sum += static_cast<double>(seed >> 11) / 9007199254740992.0;
  }
  return sum - 6;
}

/// A run of `steps` steps whose ops op0 to op7 (op<i> takes (i + 1) ms a call, one call a step)
/// run at the machine's `speed` (1.1: 10 % slower) with 2 % noise a call; `extra_ns` more in op7
/// a call. The step is the ops' sum.
/// A run whose step i runs at `speeds[i]` (1: BASE's machine): eight ops of 1 to 8 ms a call at
/// that speed, op7 `extra_ns` longer, each with 2 % noise.
StepSamples run_at_step_speeds(const std::vector<double>& speeds, double extra_ns, std::uint64_t& seed) {
  StepSamples run;
  for (int op = 0; op < 8; ++op) run.keys.push_back({fmt::format("op{}", op), {}});
  for (const double speed : speeds) {
    std::int64_t step_ns = 0;
    for (int op = 0; op < 8; ++op) {
      dlprof::analysis::KeyFigures figures;
      figures.calls = 1;
      figures.self_ns = static_cast<std::int64_t>(((op + 1) * 1e6 * speed + (op == 7 ? extra_ns : 0)) * std::exp(0.02 * normal_draw(seed)));
      figures.total_ns = figures.self_ns;
      step_ns += figures.self_ns;
      run.keys[static_cast<std::size_t>(op)].steps.push_back(figures);
    }
    dlprof::analysis::StepSample step;
    step.duration_ns = step_ns;
    run.steps.push_back(step);
    run.kernels_by_type.emplace_back();
  }
  return run;
}

StepSamples run_at_speed(std::size_t steps, double speed, double extra_ns, std::uint64_t& seed) {
  return run_at_step_speeds(std::vector<double>(steps, speed), extra_ns, seed);
}

TEST(RegressionGateTest, SeveralRunsASideHoldTheRateWhereRunsDifferMoreThanTheirSteps) {
  using dlprof::analysis::GateVerdict;
  std::uint64_t seed = 11;
  dlprof::analysis::GateOptions options = slower_by(0.06);
  options.machine_speed = false;  // every op alike: the machine's speed would explain it all
  // The machine's speed differs from run to run by 4 % (σ); steps within a run by 2 %.
  const auto runs = [&](std::size_t count, double shift) {
    std::vector<StepSamples> side;
    for (std::size_t run = 0; run < count; ++run) side.push_back(run_at_speed(20, (1 + shift) * std::exp(0.04 * normal_draw(seed)), 0, seed));
    return side;
  };
  int by_runs = 0, by_steps = 0;
  std::size_t needed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto base = runs(5, 0);
    const auto next = runs(5, 0);
    const auto gate = dlprof::analysis::regression_gate(base, next, options);
    by_runs += gate.verdict() == GateVerdict::Regression;
    if (trial == 0) {
      EXPECT_TRUE(gate.results.front().runs_tested);
      EXPECT_NEAR(gate.results.front().run_spread, 0.04, 0.03);
      needed = gate.results.front().runs_needed;
    }
    by_steps += dlprof::analysis::regression_gate(base.front(), next.front(), options).verdict() == GateVerdict::Regression;
  }
  EXPECT_LE(by_runs, 8);      // 1 % of 300, and three standard deviations of chance
  EXPECT_GE(by_steps, 60);    // one run a side: the machine's speed reads as a regression
  // At the runs it says it needs, a slowdown of the threshold is caught in 95 % of trials.
  ASSERT_GT(needed, 5u);
  ASSERT_LT(needed, 60u);
  int caught = 0;
  for (int trial = 0; trial < 100; ++trial)
    caught += dlprof::analysis::regression_gate(runs(needed, 0), runs(needed, 0.06), options).verdict() == GateVerdict::Regression;
  EXPECT_GE(caught, 95 - 6);  // 95 %, less two standard deviations of chance
}

TEST(RegressionGateTest, ALoadThatChangesFromStepToStepIsTakenOutStepByStep) {
  using dlprof::analysis::GateVerdict;
  std::uint64_t seed = 17;
  // A shared machine: each step runs at its own speed, 15 % (σ) apart. NEW's op7 is 1.5 ms a call
  // slower: +4.2 % of the 36 ms step.
  const auto runs = [&](double extra_ns) {
    std::vector<StepSamples> side;
    for (int run = 0; run < 5; ++run) {
      std::vector<double> speeds;
      for (int step = 0; step < 30; ++step) speeds.push_back(std::exp(0.15 * normal_draw(seed)));
      side.push_back(run_at_step_speeds(speeds, extra_ns, seed));
    }
    return side;
  };
  const auto base = runs(0);
  const auto next = runs(1.5e6);
  const auto gate = dlprof::analysis::regression_gate(base, next, slower_by(0.03));
  ASSERT_TRUE(gate.speed.estimated) << gate.speed.not_estimated;
  ASSERT_EQ(gate.speed.next_step_factors.size(), 5u);
  EXPECT_EQ(gate.speed.next_step_factors.front().size(), 30u);
  EXPECT_EQ(gate.verdict(), GateVerdict::Regression);
  EXPECT_NEAR(gate.results.front().relative, 1.5 / 36, 0.01);
  // Each step over its own speed: what is left between runs is the ops' own 2 % noise, not the
  // load's; one speed a run would leave the medians of 30 steps 15 % apart, about 3 %.
  EXPECT_LT(gate.results.front().run_spread, 0.01);
}

TEST(RegressionGateTest, TheMachinesSpeedIsTakenOutAndAUniformSlowdownBeyondItIsNotComparable) {
  using dlprof::analysis::GateVerdict;
  std::uint64_t seed = 5;
  const dlprof::analysis::GateOptions options = slower_by(0.03);
  std::vector<StepSamples> base;
  for (const double speed : {0.95, 1.0, 1.05, 0.97, 1.03}) base.push_back(run_at_speed(30, speed, 0, seed));
  // NEW: a machine 2 % slower, and op7 1.5 ms a call slower: +4.2 % of the 36 ms step.
  std::vector<StepSamples> next;
  for (const double speed : {1.02, 1.02, 1.02}) next.push_back(run_at_speed(30, speed, 1.5e6, seed));
  const auto gate = dlprof::analysis::regression_gate(base, next, options);
  ASSERT_TRUE(gate.speed.estimated) << gate.speed.not_estimated;
  EXPECT_EQ(gate.speed.keys, 8u);
  EXPECT_NEAR(gate.speed.factor, 1.02, 0.01);
  EXPECT_NEAR(gate.speed.base_factors[2] / gate.speed.base_factors[0], 1.05 / 0.95, 0.01);
  EXPECT_EQ(gate.verdict(), GateVerdict::Regression);
  EXPECT_TRUE(gate.results.front().speed_adjusted);
  EXPECT_NEAR(gate.results.front().relative, 1.5 / 36, 0.01);
  EXPECT_LT(gate.results.front().run_spread, 0.01);
  // The step time as it is holds the machine's 3.7 % (σ) between runs: the change is within it.
  dlprof::analysis::GateOptions raw = options;
  raw.machine_speed = false;
  const auto raw_gate = dlprof::analysis::regression_gate(base, next, raw);
  EXPECT_EQ(raw_gate.verdict(), GateVerdict::Pass);
  EXPECT_GT(raw_gate.results.front().run_spread, 0.03);
  EXPECT_FALSE(raw_gate.speed.estimated);
  // Every op 30 % slower: no machine BASE saw; a change that slows all work alike is not judged
  // after the speed that would explain it away.
  std::vector<StepSamples> uniform;
  for (int run = 0; run < 3; ++run) uniform.push_back(run_at_speed(30, 1.3, 0, seed));
  const auto uniform_gate = dlprof::analysis::regression_gate(base, uniform, options);
  EXPECT_EQ(uniform_gate.verdict(), GateVerdict::NotComparable);
  ASSERT_EQ(uniform_gate.not_comparable.size(), 1u);
  EXPECT_THAT(uniform_gate.not_comparable.front(),
              testing::ContainsRegex("the same work \\(8 ops\\) ran 3[01]\\.[0-9] % slower in NEW, beyond what BASE's 5 runs' speeds show"));
  EXPECT_EQ(dlprof::analysis::regression_gate(base, uniform, raw).verdict(), GateVerdict::Regression);
  // Fewer than five ops alike in every run: no speed, and the gate says why.
  for (StepSamples& run : base) run.keys.resize(4);
  for (StepSamples& run : next) run.keys.resize(4);
  const auto few = dlprof::analysis::regression_gate(base, next, options);
  EXPECT_FALSE(few.speed.estimated);
  EXPECT_EQ(few.speed.not_estimated, "4 ops are called the same number of times a step in every run, and 5 needed");
  dlprof::GateOutcome outcome;
  outcome.gate = gate;
  outcome.base_title = "main-1, main-2";
  outcome.next_title = "pr-1";
  const std::string text = dlprof::render_gate_text(outcome);
  EXPECT_THAT(text, testing::HasSubstr("3 runs (90 steps) against 5 (150)"));
  EXPECT_THAT(text, testing::ContainsRegex("The machine's speed, from 8 ops that do the same work in every run"));
  EXPECT_THAT(text, testing::ContainsRegex("REGRESSION: \\+[34]\\.[0-9]{2} % \\(at least \\+[0-9.]+ % at 99 % confidence\\) after the[ \n]+machine's"));
  EXPECT_THAT(text, testing::ContainsRegex("compare [0-9]+ runs a side"));
}

TEST(StepSamplesTest, RunsConcatenatedKeepEachKeysStepsInPlace) {
  std::uint64_t seed = 3;
  StepSamples first = run_at_speed(2, 1, 0, seed);
  StepSamples second = run_at_speed(3, 1, 0, seed);
  second.keys.erase(second.keys.begin());  // op0 only in the first run
  second.keys.push_back({"late", std::vector<dlprof::analysis::KeyFigures>(3)});
  second.keys.back().steps[2].calls = 4;
  second.dropped_events = 2;
  const StepSamples joined = dlprof::analysis::concatenate_runs({first, second});
  ASSERT_EQ(joined.steps.size(), 5u);
  ASSERT_NE(joined.find("op0"), nullptr);
  EXPECT_EQ(joined.find("op0")->steps[1].calls, 1);
  EXPECT_EQ(joined.find("op0")->steps[2].calls, 0);
  ASSERT_NE(joined.find("late"), nullptr);
  EXPECT_EQ(joined.find("late")->steps[4].calls, 4);
  EXPECT_EQ(joined.find("late")->steps[0].calls, 0);
  EXPECT_EQ(joined.find("op3")->steps[3].self_ns, second.find("op3")->steps[1].self_ns);
  EXPECT_EQ(joined.kernels_by_type.size(), 5u);
  EXPECT_EQ(joined.dropped_events, 2u);
}

}  // namespace
