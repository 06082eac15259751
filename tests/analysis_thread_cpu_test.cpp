// How busy each recording thread was in each step (analysis/thread_cpu.hpp), checked by hand
// arithmetic on traces with known readings.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include <dlprof/analysis/step_breakdown.hpp>
#include <dlprof/analysis/thread_cpu.hpp>

#include "analysis_trace_builder.hpp"

namespace {

using dlprof::Category;
using dlprof_test::AnalysisTraceBuilder;
using dlprof::analysis::ThreadCpu;
using dlprof::analysis::ThreadRole;

using dlprof_test::kMs;

/// Two 10 ms steps on the main thread (0); two loader threads (2, 3) whose slices are DataLoader
/// ranges; a helper thread (4) that only records a user range.
AnalysisTraceBuilder two_steps() {
  AnalysisTraceBuilder builder;
  builder.thread(102, "worker-a").thread(103, "worker-b").thread(104, "helper");
  builder.step(1, 0, 10 * kMs).step(2, 10 * kMs, 20 * kMs);
  builder.range("enumerate(DataLoader)#Loader.__next__", 0, 2 * kMs, Category::DataLoader);
  builder.call("cudaStreamSynchronize", 12 * kMs, 13 * kMs, 1);
  builder.range("load_batch", 0, 19 * kMs, Category::DataLoader, 2);
  builder.range("load_batch", 1 * kMs, 18 * kMs, Category::DataLoader, 3);
  builder.range("log", 0, 1 * kMs, Category::User, 4);
  // Readings at the steps' edges, as dlprof takes them.
  builder.cpu_reading(0, 0, 100 * kMs, 7 * kMs)
      .cpu_reading(0, 10 * kMs, 106 * kMs, 8 * kMs)
      .cpu_reading(0, 20 * kMs, 114 * kMs, 8 * kMs + kMs / 2);
  builder.cpu_reading(2, 0, 0, 0).cpu_reading(2, 10 * kMs, 7 * kMs, 0).cpu_reading(2, 20 * kMs, 15 * kMs, 0);
  builder.cpu_reading(3, 0, 0, 0).cpu_reading(3, 10 * kMs, 2 * kMs, 0).cpu_reading(3, 20 * kMs, 5 * kMs, 0);
  builder.cpu_reading(4, 0, 0, 0).cpu_reading(4, 20 * kMs, 1 * kMs, 0);
  return builder;
}

const dlprof::analysis::ThreadCpuRow& thread_row(const ThreadCpu& cpu, std::uint32_t thread) {
  for (const auto& row : cpu.threads)
    if (row.thread == thread) return row;
  throw std::runtime_error("no row for the thread");
}

TEST(ThreadCpuTest, EachStepOfEachThreadFromTheReadings) {
  const dlprof::Trace trace = two_steps().trace();
  const ThreadCpu cpu = dlprof::analysis::thread_cpu(trace, dlprof::analysis::step_breakdown(trace).steps);
  ASSERT_EQ(cpu.steps.size(), 2u);
  ASSERT_EQ(cpu.threads.size(), 4u);
  // The training thread first, then the loaders by CPU time, then the rest.
  EXPECT_EQ(cpu.threads[0].thread, 0u);
  EXPECT_EQ(cpu.threads[0].role, ThreadRole::Training);
  EXPECT_EQ(cpu.threads[1].thread, 2u);
  EXPECT_EQ(cpu.threads[1].role, ThreadRole::Loader);
  EXPECT_EQ(cpu.threads[2].thread, 3u);
  EXPECT_EQ(cpu.threads[2].role, ThreadRole::Loader);
  EXPECT_EQ(cpu.threads[3].thread, 4u);
  EXPECT_EQ(cpu.threads[3].role, ThreadRole::Other);

  const auto& main = thread_row(cpu, 0);
  ASSERT_TRUE(main.steps[0] && main.steps[1]);
  // Step 1: 6 ms running, 1 ms waiting for a CPU, 3 ms blocked, of 10.
  EXPECT_EQ(main.steps[0]->wall_ns, 10 * kMs);
  EXPECT_EQ(main.steps[0]->cpu_ns, 6 * kMs);
  EXPECT_EQ(main.steps[0]->run_delay_ns, 1 * kMs);
  EXPECT_EQ(main.steps[0]->blocked_ns(), 3 * kMs);
  EXPECT_DOUBLE_EQ(main.steps[0]->cpu_share(), 0.6);
  // Step 2: 8 ms, 0.5 ms, 1.5 ms.
  EXPECT_EQ(main.steps[1]->cpu_ns, 8 * kMs);
  EXPECT_EQ(main.steps[1]->run_delay_ns, kMs / 2);
  EXPECT_EQ(main.steps[1]->blocked_ns(), 3 * kMs / 2);
  EXPECT_EQ(main.total.wall_ns, 20 * kMs);
  EXPECT_EQ(main.total.cpu_ns, 14 * kMs);
  EXPECT_EQ(main.total.run_delay_ns, 3 * kMs / 2);
  EXPECT_DOUBLE_EQ(main.total.cpu_share(), 0.7);

  // The helper read only at the window's ends: each step is read off the line between them.
  const auto& helper = thread_row(cpu, 4);
  ASSERT_TRUE(helper.steps[0]);
  EXPECT_EQ(helper.steps[0]->cpu_ns, kMs / 2);
  EXPECT_EQ(helper.steps[1]->cpu_ns, kMs / 2);
}

TEST(ThreadCpuTest, TheTrainingThreadsBlockedTimeBesideItsWaits) {
  const dlprof::Trace trace = two_steps().trace();
  const ThreadCpu cpu = dlprof::analysis::thread_cpu(trace, dlprof::analysis::step_breakdown(trace).steps);
  ASSERT_TRUE(cpu.training);
  EXPECT_EQ(cpu.training->thread, 0u);
  // 4.5 ms blocked: 2 ms in the DataLoader, 1 ms in cudaStreamSynchronize, at least 1.5 ms elsewhere.
  EXPECT_EQ(cpu.training->time.blocked_ns(), 9 * kMs / 2);
  EXPECT_EQ(cpu.training->waiting_for_data_ns, 2 * kMs);
  EXPECT_EQ(cpu.training->in_sync_ns, 1 * kMs);
  EXPECT_EQ(cpu.training->sync_or_data_ns, 3 * kMs);
  EXPECT_EQ(cpu.training->blocked_elsewhere_ns(), 3 * kMs / 2);
}

TEST(ThreadCpuTest, TheLoadersBalance) {
  const dlprof::Trace trace = two_steps().trace();
  const ThreadCpu cpu = dlprof::analysis::thread_cpu(trace, dlprof::analysis::step_breakdown(trace).steps);
  ASSERT_TRUE(cpu.loaders);
  // worker-a ran 15 ms of 20 (75 %), worker-b 5 ms (25 %): a mean of 50 %, the busiest 1.5 times it.
  EXPECT_EQ(cpu.loaders->threads, 2u);
  EXPECT_DOUBLE_EQ(cpu.loaders->mean_cpu_share, 0.5);
  EXPECT_EQ(cpu.loaders->busiest, 2u);
  EXPECT_DOUBLE_EQ(cpu.loaders->busiest_cpu_share, 0.75);
  EXPECT_EQ(cpu.loaders->idlest, 3u);
  EXPECT_DOUBLE_EQ(cpu.loaders->idlest_cpu_share, 0.25);
  EXPECT_DOUBLE_EQ(cpu.loaders->imbalance(), 1.5);
}

TEST(ThreadCpuTest, AThreadNamedAsALoaderIsOneWhateverItRecords) {
  AnalysisTraceBuilder builder;
  builder.thread(102, "DataLoader-1").step(1, 0, 10 * kMs).range("stack", 0, kMs, Category::User, 2);
  builder.cpu_reading(0, 0, 0, 0).cpu_reading(0, 10 * kMs, kMs, 0);
  builder.cpu_reading(2, 0, 0, 0).cpu_reading(2, 10 * kMs, 4 * kMs, 0);
  const dlprof::Trace trace = builder.trace();
  const ThreadCpu cpu = dlprof::analysis::thread_cpu(trace, dlprof::analysis::step_breakdown(trace).steps);
  EXPECT_EQ(thread_row(cpu, 2).role, ThreadRole::Loader);
}

TEST(ThreadCpuTest, AStepTheReadingsDoNotSpanHasNoFiguresForThatThread) {
  AnalysisTraceBuilder builder;
  builder.thread(102, "late").step(1, 0, 10 * kMs).step(2, 10 * kMs, 20 * kMs);
  builder.cpu_reading(0, 0, 0).cpu_reading(0, 10 * kMs, 5 * kMs).cpu_reading(0, 20 * kMs, 10 * kMs);
  builder.cpu_reading(2, 10 * kMs, 0).cpu_reading(2, 20 * kMs, 2 * kMs);  // started in step 1
  const dlprof::Trace trace = builder.trace();
  const ThreadCpu cpu = dlprof::analysis::thread_cpu(trace, dlprof::analysis::step_breakdown(trace).steps);
  const auto& late = thread_row(cpu, 2);
  EXPECT_FALSE(late.steps[0]);
  ASSERT_TRUE(late.steps[1]);
  EXPECT_EQ(late.steps[1]->cpu_ns, 2 * kMs);
  EXPECT_EQ(late.total.wall_ns, 10 * kMs);  // only the step it spans
  // No run-queue wait known: none is made up, and blocked is wall less running.
  EXPECT_EQ(late.steps[1]->run_delay_ns, -1);
  EXPECT_FALSE(late.steps[1]->run_delay_share());
  EXPECT_EQ(late.steps[1]->blocked_ns(), 8 * kMs);
  EXPECT_FALSE(cpu.loaders);
}

TEST(ThreadCpuTest, ATraceWithoutReadingsHasNoRows) {
  AnalysisTraceBuilder builder;
  builder.step(1, 0, 10 * kMs);
  const dlprof::Trace trace = builder.trace();
  EXPECT_TRUE(dlprof::analysis::thread_cpu(trace, dlprof::analysis::step_breakdown(trace).steps).empty());
}

}  // namespace
