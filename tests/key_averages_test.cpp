#include <dlprof/analysis/memory_by_op.hpp>
#include <dlprof/key_averages.hpp>
#include <dlprof/profiler.hpp>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Builds a Trace by hand. Events must be added in the order the collector produces: grouped by
// thread, sorted by start, enclosing ranges before the ranges they enclose.
class OpTraceBuilder {
 public:
  explicit OpTraceBuilder(std::int64_t window_ns = 1000) {
    trace_.window_start_ns = 0;
    trace_.window_end_ns = window_ns;
    trace_.threads = {dlprof::ThreadInfo{100, "main"}, dlprof::ThreadInfo{101, "worker"}};
  }

  OpTraceBuilder& range(std::uint32_t thread, std::string_view name, std::int64_t start_ns, std::int64_t end_ns,
                      dlprof::Category category = dlprof::Category::User,
                      dlprof::EventKind kind = dlprof::EventKind::Range) {
    dlprof::TraceEvent event;
    event.start_ns = start_ns;
    event.end_ns = end_ns;
    event.thread = thread;
    event.name = name_index(name);
    event.kind = kind;
    event.category = category;
    trace_.events.push_back(event);
    return *this;
  }

  OpTraceBuilder& instant(std::uint32_t thread, std::string_view name, std::int64_t at_ns, dlprof::EventKind kind) {
    return range(thread, name, at_ns, at_ns, dlprof::Category::User, kind);
  }

  /// The range just added gets `external_id`; GPU work of `duration_ns` links to it.
  OpTraceBuilder& launched(std::uint64_t external_id, std::int64_t duration_ns,
                         dlprof::GpuEventKind kind = dlprof::GpuEventKind::Kernel) {
    trace_.events.back().external_id = external_id;
    dlprof::GpuEvent work;
    work.kind = kind;
    work.start_ns = 0;
    work.end_ns = duration_ns;
    work.external_id = external_id;
    trace_.gpu_events.push_back(work);
    trace_.gpu.enabled = true;
    return *this;
  }

  /// An allocation (bytes > 0) or release on `thread` at `at_ns`, on the CPU or on GPU 0.
  OpTraceBuilder& memory(std::uint32_t thread, std::int64_t at_ns, std::int64_t bytes,
                         dlprof::MemoryDeviceType device = dlprof::MemoryDeviceType::CPU) {
    dlprof::MemoryEvent event;
    event.time_ns = at_ns;
    event.bytes = bytes;
    event.thread = thread;
    event.device_type = device;
    event.device = device == dlprof::MemoryDeviceType::CPU ? -1 : 0;
    trace_.memory_events.push_back(event);
    return *this;
  }

  OpTraceBuilder& dropped(std::uint64_t count) {
    trace_.dropped_events = count;
    return *this;
  }

  const dlprof::Trace& trace() const { return trace_; }

 private:
  std::uint32_t name_index(std::string_view name) {
    for (std::uint32_t i = 0; i < trace_.names.size(); ++i)
      if (trace_.names[i] == name) return i;
    trace_.names.emplace_back(name);
    return static_cast<std::uint32_t>(trace_.names.size() - 1);
  }

  dlprof::Trace trace_;
};

std::vector<std::string> row_names(const dlprof::KeyAverages& averages) {
  std::vector<std::string> names;
  for (const dlprof::KeyAverage& row : averages.rows()) names.push_back(row.name);
  return names;
}

// outer > inner > leaf on thread 0, and a separate outer > leaf on thread 1 that starts at 0, inside
// the span of thread 0's outer ranges, so that forgetting the thread boundary changes self times.
dlprof::Trace nested_two_thread_trace() {
  return OpTraceBuilder(1000)
      .range(0, "outer", 0, 100, dlprof::Category::Forward)
      .range(0, "inner", 10, 40)
      .range(0, "leaf", 15, 25)
      .range(0, "inner", 50, 70)
      .range(0, "outer", 200, 260, dlprof::Category::Forward)
      .range(0, "inner", 210, 230)
      .range(1, "outer", 0, 50, dlprof::Category::Forward)
      .range(1, "leaf", 5, 15)
      .trace();
}

TEST(KeyAveragesTest, ComputesExactStatisticsForNestedRangesOnTwoThreads) {
  const dlprof::KeyAverages averages(nested_two_thread_trace());
  ASSERT_EQ(averages.rows().size(), 3u);

  const dlprof::KeyAverage* outer = averages.find("outer");
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->calls, 3u);
  EXPECT_EQ(outer->total_ns, 100 + 60 + 50);
  // Self time subtracts only direct children: outer#1 loses its two inner ranges (30 + 20), not
  // the leaf nested inside the first inner; thread 1's outer loses its own leaf only.
  EXPECT_EQ(outer->self_ns, (100 - 30 - 20) + (60 - 20) + (50 - 10));
  EXPECT_EQ(outer->min_ns, 50);
  EXPECT_EQ(outer->max_ns, 100);
  EXPECT_EQ(outer->average_ns(), 70);
  EXPECT_EQ(outer->category, dlprof::Category::Forward);

  const dlprof::KeyAverage* inner = averages.find("inner");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->calls, 3u);
  EXPECT_EQ(inner->total_ns, 30 + 20 + 20);
  EXPECT_EQ(inner->self_ns, (30 - 10) + 20 + 20);
  EXPECT_EQ(inner->min_ns, 20);
  EXPECT_EQ(inner->max_ns, 30);

  const dlprof::KeyAverage* leaf = averages.find("leaf");
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf->calls, 2u);
  EXPECT_EQ(leaf->total_ns, 20);
  EXPECT_EQ(leaf->self_ns, 20);
  EXPECT_EQ(leaf->min_ns, 10);
  EXPECT_EQ(leaf->max_ns, 10);

  EXPECT_EQ(averages.find("missing"), nullptr);
  EXPECT_EQ(averages.window_ns(), 1000);
}

TEST(KeyAveragesTest, SiblingsThatTouchAreNotNested) {
  // b starts exactly when a ends: a sibling, so a's self time is its whole duration.
  const dlprof::KeyAverages averages(OpTraceBuilder().range(0, "a", 0, 10).range(0, "b", 10, 30).trace());
  ASSERT_NE(averages.find("a"), nullptr);
  EXPECT_EQ(averages.find("a")->self_ns, 10);
  EXPECT_EQ(averages.find("b")->self_ns, 20);
}

TEST(KeyAveragesTest, CountsProfilerStepsButNotInstantsOrCounters) {
  const dlprof::KeyAverages averages(OpTraceBuilder()
                                         .range(0, "ProfilerStep#7", 0, 100, dlprof::Category::Step,
                                                dlprof::EventKind::Step)
                                         .range(0, "work", 10, 40)
                                         .instant(0, "checkpoint", 20, dlprof::EventKind::Instant)
                                         .instant(0, "loss", 30, dlprof::EventKind::Counter)
                                         .trace());
  EXPECT_THAT(row_names(averages), ElementsAre("ProfilerStep#7", "work"));
  const dlprof::KeyAverage* step = averages.find("ProfilerStep#7");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->self_ns, 100 - 30);
  EXPECT_EQ(step->category, dlprof::Category::Step);
}

TEST(KeyAveragesTest, DefaultsToTotalTimeOrder) {
  EXPECT_THAT(row_names(dlprof::KeyAverages(nested_two_thread_trace())), ElementsAre("outer", "inner", "leaf"));
}

// Four names whose order differs for every sort key:
//   name  calls  durations    total  self  avg  max
//   a     1      100          100    30   100  100   (encloses both c ranges)
//   b     4      30 x4        120    120  30   30
//   c     2      20, 50       70     70   35   50
//   d     3      10, 20, 45   75     75   25   45
dlprof::Trace sortable_trace() {
  return OpTraceBuilder(2000)
      .range(0, "a", 0, 100)
      .range(0, "c", 10, 30)
      .range(0, "c", 40, 90)
      .range(0, "b", 200, 230)
      .range(0, "b", 240, 270)
      .range(0, "b", 280, 310)
      .range(0, "b", 320, 350)
      .range(0, "d", 400, 410)
      .range(0, "d", 420, 440)
      .range(0, "d", 450, 495)
      .trace();
}

TEST(KeyAveragesTest, SortsByEachKey) {
  dlprof::KeyAverages averages(sortable_trace());
  EXPECT_THAT(row_names(averages.sort_by(dlprof::SortBy::TotalTime)), ElementsAre("b", "a", "d", "c"));
  EXPECT_THAT(row_names(averages.sort_by(dlprof::SortBy::SelfTime)), ElementsAre("b", "d", "c", "a"));
  EXPECT_THAT(row_names(averages.sort_by(dlprof::SortBy::Calls)), ElementsAre("b", "d", "c", "a"));
  EXPECT_THAT(row_names(averages.sort_by(dlprof::SortBy::AverageTime)), ElementsAre("a", "c", "b", "d"));
  EXPECT_THAT(row_names(averages.sort_by(dlprof::SortBy::MaxTime)), ElementsAre("a", "c", "d", "b"));
  EXPECT_THAT(row_names(averages.sort_by(dlprof::SortBy::Name)), ElementsAre("a", "b", "c", "d"));
}

TEST(KeyAveragesTest, TableHasHeaderEveryNameAndShareOfWindow) {
  const dlprof::KeyAverages averages(OpTraceBuilder(1000).range(0, "outer", 0, 250).range(0, "inner", 10, 60).dropped(7).trace());
  const std::string table = averages.table();
  for (const char* column : {"Name", "Category", "Calls", "Total", "Self", "Avg", "Min", "Max", "% window"})
    EXPECT_THAT(table, HasSubstr(column));
  EXPECT_THAT(table, HasSubstr("outer"));
  EXPECT_THAT(table, HasSubstr("inner"));
  // 250 ns of a 1000 ns window, and 50 ns.
  EXPECT_THAT(table, HasSubstr("25.00%"));
  EXPECT_THAT(table, HasSubstr("5.00%"));
  EXPECT_THAT(table, HasSubstr("Dropped events: 7"));
  EXPECT_THAT(table, HasSubstr("(2 names)"));
}

TEST(KeyAveragesTest, RowLimitShowsOnlyTheFirstRowsAndSaysHowMany) {
  const dlprof::KeyAverages averages(sortable_trace());  // total-time order: b, a, d, c
  const std::string table = averages.table(2);
  EXPECT_THAT(table, HasSubstr("(4 names, 2 shown)"));
  const auto has_row = [&](std::string_view name) { return table.find(fmt::format("\n{} ", name)) != std::string::npos; };
  EXPECT_TRUE(has_row("b"));
  EXPECT_TRUE(has_row("a"));
  EXPECT_FALSE(has_row("d"));
  EXPECT_FALSE(has_row("c"));
  EXPECT_THAT(averages.table(0), Not(HasSubstr("shown")));
  EXPECT_THAT(averages.table(10), Not(HasSubstr("shown")));
}

TEST(KeyAveragesTest, TableShortensVeryLongNames) {
  const std::string long_name(80, 'x');
  const std::string table = dlprof::KeyAverages(OpTraceBuilder().range(0, long_name, 0, 10).trace()).table();
  EXPECT_THAT(table, HasSubstr(std::string(57, 'x') + "..."));
  EXPECT_THAT(table, Not(HasSubstr(std::string(58, 'x'))));
}

TEST(KeyAveragesTest, TableShowsControlCharactersInNamesAsEscapes) {
  // A name that would set the terminal's title and clear its screen, with a newline and a tab.
  const std::string table =
      dlprof::KeyAverages(OpTraceBuilder().range(0, "evil\x1b]0;t\x07\x1b[2J\nnext\tcol", 0, 10).trace()).table();
  EXPECT_THAT(table, HasSubstr(R"(evil\x1b]0;t\x07\x1b[2J\nnext\tcol)"));
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  EXPECT_EQ(table.find('\t'), std::string::npos);
  // Header, rule, the row, rule, the window line: the name adds no line.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 5);
  // Cut to the column, never inside a character.
  std::string wide;
  for (int i = 0; i < 40; ++i) wide += "\xce\xb1";
  const std::string cut = dlprof::KeyAverages(OpTraceBuilder().range(0, wide, 0, 10).trace()).table();
  EXPECT_THAT(cut, HasSubstr(wide.substr(0, 56) + "..."));
}

TEST(KeyAveragesTest, FormatsWithFmtAsTheTable) {
  const dlprof::KeyAverages averages(nested_two_thread_trace());
  EXPECT_EQ(fmt::format("{}", averages), averages.table());
}

TEST(KeyAveragesTest, FormatDurationPicksAReadableUnit) {
  using dlprof::KeyAverages;
  EXPECT_EQ(KeyAverages::format_duration(0), "0ns");
  EXPECT_EQ(KeyAverages::format_duration(999), "999ns");
  EXPECT_EQ(KeyAverages::format_duration(1'000), "1.000us");
  EXPECT_EQ(KeyAverages::format_duration(678'900), "678.900us");
  EXPECT_EQ(KeyAverages::format_duration(1'234'567), "1.235ms");
  EXPECT_EQ(KeyAverages::format_duration(12'345'000), "12.345ms");
  EXPECT_EQ(KeyAverages::format_duration(1'234'000'000), "1.234s");
  EXPECT_EQ(KeyAverages::format_duration(-2'500), "-2.500us");
}

TEST(KeyAveragesTest, GpuTimeIsTheWorkEachRangeLaunchedDirectly) {
  OpTraceBuilder builder;
  builder.range(0, "train_step", 0, 900)
      .launched(1, 30)
      .range(0, "forward", 100, 400)
      .launched(2, 200)
      .range(0, "forward", 500, 800);
  builder.launched(3, 50).launched(3, 7, dlprof::GpuEventKind::Memcpy);
  dlprof::GpuEvent span;  // a range's own GPU span and CPU-side waits are not work
  span.kind = dlprof::GpuEventKind::Annotation;
  span.end_ns = 1000;
  span.external_id = 2;
  dlprof::Trace trace = builder.trace();
  trace.gpu_events.push_back(span);
  span.kind = dlprof::GpuEventKind::Sync;
  trace.gpu_events.push_back(span);

  dlprof::KeyAverages averages(trace);
  EXPECT_EQ(averages.find("train_step")->gpu_ns, 30);  // not its children's kernels
  EXPECT_EQ(averages.find("forward")->gpu_ns, 257);
  averages.sort_by(dlprof::SortBy::GpuTime);
  EXPECT_EQ(averages.rows().front().name, "forward");
  const std::string table = averages.table();
  EXPECT_THAT(table, HasSubstr("GPU\n"));
  EXPECT_THAT(table, HasSubstr("257ns\n"));
  EXPECT_THAT(table, HasSubstr("GPU records: 0  dropped: 0 (by CUPTI: 0)  unknown kinds: 0  late: 0"));
}

TEST(KeyAveragesTest, GpuTotalAddsTheWorkOfNestedRangesAtAnyDepth) {
  // step > forward > aten::linear > aten::addmm, and backward, on thread 0; a range on thread 1
  // overlapping them in time is no child of theirs.
  OpTraceBuilder builder(2000);
  builder.range(0, "step", 0, 1000)
      .launched(1, 10)
      .range(0, "forward", 100, 500)
      .launched(2, 100)
      .range(0, "aten::linear", 150, 400)
      .launched(3, 40)
      .range(0, "aten::addmm", 200, 300)
      .launched(4, 60)
      .range(0, "backward", 600, 900)
      .launched(5, 5)
      .range(1, "loader", 0, 1000)
      .launched(6, 1000);
  dlprof::KeyAverages averages(builder.trace());
  EXPECT_EQ(averages.find("aten::addmm")->gpu_total_ns, 60);
  EXPECT_EQ(averages.find("aten::linear")->gpu_ns, 40);
  EXPECT_EQ(averages.find("aten::linear")->gpu_total_ns, 40 + 60);
  EXPECT_EQ(averages.find("forward")->gpu_total_ns, 100 + 40 + 60);
  EXPECT_EQ(averages.find("step")->gpu_ns, 10);
  EXPECT_EQ(averages.find("step")->gpu_total_ns, 10 + 200 + 5);
  EXPECT_EQ(averages.find("loader")->gpu_total_ns, 1000);
  averages.sort_by(dlprof::SortBy::GpuTotalTime);
  EXPECT_THAT(row_names(averages), ElementsAre("loader", "step", "forward", "aten::linear", "aten::addmm", "backward"));
  EXPECT_THAT(averages.table(), HasSubstr("GPU total"));
}

// Traces whose GPU work carries External ids no op has (DeepSeek's, DLRM's): the work counts for
// the innermost op around the call that launched it, found by correlation id and time.
TEST(KeyAveragesTest, WorkWhoseExternalIdIsNoOpsCountsForTheOpAroundItsLaunch) {
  using dlprof_test::kUs;
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .op("aten::linear", 0, 100 * kUs, 1)
                                  .op("aten::addmm", 10 * kUs, 90 * kUs, 2)
                                  .call("cudaLaunchKernel", 20 * kUs, 25 * kUs, 11, 2)
                                  .kernel("gemm", 30 * kUs, 230 * kUs, 11, 902)  // the id is no op's
                                  .call("cudaLaunchKernel", 92 * kUs, 95 * kUs, 12, 1)
                                  .kernel("bias", 240 * kUs, 250 * kUs, 12, 901)
                                  .op("aten::relu", 200 * kUs, 300 * kUs, 3)
                                  .call("cudaLaunchKernel", 210 * kUs, 215 * kUs, 13, 3)
                                  .kernel("relu", 260 * kUs, 265 * kUs, 13, 3)  // linked by its id
                                  .call("cudaMemcpyAsync", 400 * kUs, 410 * kUs, 14)  // outside every op
                                  .memcpy(1, 420 * kUs, 440 * kUs, 14, 1024)
                                  .op("aten::relu", 500 * kUs, 600 * kUs, 4)
                                  .call("cudaLaunchKernel", 510 * kUs, 515 * kUs, 15, 4)
                                  .kernel("relu", 520 * kUs, 525 * kUs, 15, 0)  // no id at all
                                  .trace();
  const dlprof::KeyAverages averages(trace);
  EXPECT_EQ(averages.find("aten::addmm")->gpu_ns, 200 * kUs);
  EXPECT_EQ(averages.find("aten::linear")->gpu_ns, 10 * kUs);
  EXPECT_EQ(averages.find("aten::linear")->gpu_total_ns, 210 * kUs);
  EXPECT_EQ(averages.find("aten::relu")->gpu_ns, 10 * kUs);  // one by its id, one by its launch
}

// torch's memory columns count every allocation and release inside a range's interval, ends
// included, on any thread; self is that less the ranges nested directly inside. The same sums of
// the range's own thread leave out another thread's. Worked by hand.
TEST(KeyAveragesTest, MemoryIsWhatEachRangesIntervalAllocatedLessWhatItReleased) {
  using dlprof::MemoryDeviceType;
  const dlprof::Trace trace = OpTraceBuilder(1000)
                                  .range(0, "ProfilerStep#1", 0, 1000, dlprof::Category::Step, dlprof::EventKind::Step)
                                  .range(0, "aten::linear", 100, 500, dlprof::Category::User, dlprof::EventKind::Op)
                                  .range(0, "aten::addmm", 200, 400, dlprof::Category::User, dlprof::EventKind::Op)
                                  .range(0, "aten::relu", 600, 700, dlprof::Category::User, dlprof::EventKind::Op)
                                  .range(1, "data", 150, 250)
                                  .memory(0, 150, 1000)                          // aten::linear's own
                                  .memory(0, 200, 4096, MemoryDeviceType::CUDA)  // aten::addmm's, at its start
                                  .memory(1, 220, 300)                           // another thread's
                                  .memory(0, 400, -1024, MemoryDeviceType::CUDA)  // at aten::addmm's end
                                  .memory(0, 450, -1000)
                                  .memory(0, 650, 64)
                                  .memory(0, 1000, 8)  // at the step's end
                                  .trace();
  const dlprof::KeyAverages averages(trace);
  ASSERT_TRUE(averages.has_memory());
  ASSERT_TRUE(averages.has_device_memory());
  EXPECT_EQ(averages.device_memory_name(), "CUDA");
  const auto usage = [&](std::string_view name) {
    const dlprof::KeyAverage* row = averages.find(name);
    EXPECT_NE(row, nullptr) << name;
    const dlprof::MemoryUsage& any = row->memory;
    const dlprof::MemoryUsage& own = row->memory_on_thread;
    return std::vector<std::int64_t>{any.cpu_bytes, any.self_cpu_bytes, any.device_bytes, any.self_device_bytes,
                                     own.cpu_bytes, own.self_cpu_bytes, own.device_bytes, own.self_device_bytes};
  };
  //                                     any thread: CPU, self, GPU, self | own thread: CPU, self, GPU, self
  EXPECT_THAT(usage("aten::addmm"), ElementsAre(300, 300, 3072, 3072, 0, 0, 3072, 3072));
  EXPECT_THAT(usage("aten::linear"), ElementsAre(300, 0, 3072, 0, 0, 0, 3072, 0));
  EXPECT_THAT(usage("aten::relu"), ElementsAre(64, 64, 0, 0, 64, 64, 0, 0));
  EXPECT_THAT(usage("data"), ElementsAre(1300, 1300, 4096, 4096, 300, 300, 0, 0));
  EXPECT_THAT(usage("ProfilerStep#1"), ElementsAre(372, 8, 3072, 0, 72, 8, 3072, 0));

  dlprof::KeyAverages sorted = averages;
  EXPECT_THAT(row_names(sorted.sort_by(dlprof::SortBy::SelfCpuMemory)).front(), "data");
  EXPECT_THAT(row_names(sorted.sort_by(dlprof::SortBy::SelfDeviceMemory)).front(), "data");
  EXPECT_THAT(row_names(sorted.sort_by(dlprof::SortBy::CpuMemory)).front(), "data");
  EXPECT_THAT(row_names(sorted.sort_by(dlprof::SortBy::DeviceMemory)).front(), "data");
  const std::string table = averages.table();
  EXPECT_THAT(table, HasSubstr("CPU Mem   Self CPU Mem     CUDA Mem  Self CUDA Mem"));
  EXPECT_THAT(table, HasSubstr("1.27 KiB"));  // data's 1300 B
  EXPECT_THAT(table, HasSubstr("3.00 KiB"));
  EXPECT_EQ(dlprof::KeyAverages::format_bytes(-4096), "-4.00 KiB");
  EXPECT_EQ(dlprof::KeyAverages::format_bytes(-12), "-12 B");

  // An AMD trace's GPU memory is HIP's; a trace without allocations has no memory columns.
  const dlprof::KeyAverages hip(OpTraceBuilder(1000).range(0, "op", 0, 10).memory(0, 5, 16, MemoryDeviceType::HIP).trace());
  EXPECT_EQ(hip.device_memory_name(), "HIP");
  EXPECT_THAT(hip.table(), HasSubstr("Self HIP Mem"));
  const dlprof::KeyAverages cpu_only(OpTraceBuilder(1000).range(0, "op", 0, 10).memory(0, 5, 16).trace());
  EXPECT_THAT(cpu_only.table(), HasSubstr("Self CPU Mem"));
  EXPECT_THAT(cpu_only.table(), Not(HasSubstr("CUDA Mem")));
  EXPECT_THAT(dlprof::KeyAverages(nested_two_thread_trace()).table(), Not(HasSubstr("CPU Mem")));

  // TensorBoard's memory view: an allocation is its own thread's innermost op's, counted in every
  // op around it; a range's or a step's is in no op. Per device, the CPU first.
  const std::vector<dlprof::analysis::DeviceOpMemory> devices = dlprof::analysis::memory_by_op(trace);
  ASSERT_EQ(devices.size(), 2u);
  const auto figures = [](const dlprof::analysis::OpMemory& op) {
    return std::vector<std::int64_t>{static_cast<std::int64_t>(op.calls), static_cast<std::int64_t>(op.self_allocations),
                                     static_cast<std::int64_t>(op.allocations), op.self_allocated_bytes, op.allocated_bytes,
                                     op.self_size_increase, op.size_increase};
  };
  EXPECT_EQ(devices[0].device_type, MemoryDeviceType::CPU);
  EXPECT_EQ(devices[0].outside_ops, 2u) << "the data range's and the step's";
  ASSERT_EQ(devices[0].ops.size(), 2u);
  EXPECT_EQ(devices[0].ops[0].name, "aten::linear");
  //                                      calls, self and total allocations, self and total bytes, self and total increase
  EXPECT_THAT(figures(devices[0].ops[0]), ElementsAre(1, 1, 1, 1000, 1000, 0, 0));
  EXPECT_EQ(devices[0].ops[1].name, "aten::relu");
  EXPECT_THAT(figures(devices[0].ops[1]), ElementsAre(1, 1, 1, 64, 64, 64, 64));
  EXPECT_EQ(devices[1].device_type, MemoryDeviceType::CUDA);
  EXPECT_EQ(devices[1].device, 0);
  EXPECT_EQ(devices[1].outside_ops, 0u);
  ASSERT_EQ(devices[1].ops.size(), 2u);
  EXPECT_EQ(devices[1].ops[0].name, "aten::addmm");
  EXPECT_THAT(figures(devices[1].ops[0]), ElementsAre(1, 1, 1, 4096, 4096, 3072, 3072));
  EXPECT_EQ(devices[1].ops[1].name, "aten::linear");
  EXPECT_THAT(figures(devices[1].ops[1]), ElementsAre(1, 0, 1, 0, 4096, 0, 3072));
  EXPECT_TRUE(dlprof::analysis::memory_by_op(nested_two_thread_trace()).empty());
}

TEST(KeyAveragesTest, CpuOnlyTraceHasNoGpuColumn) {
  OpTraceBuilder builder;
  builder.range(0, "train_step", 0, 900);
  const std::string table = dlprof::KeyAverages(builder.trace()).table();
  EXPECT_THAT(table, Not(HasSubstr("GPU")));
}

TEST(KeyAveragesTest, EmptyBeforeAnyTrace) {
  const dlprof::KeyAverages averages;
  EXPECT_TRUE(averages.rows().empty());
  EXPECT_THAT(averages.table(), HasSubstr("(0 names)"));
  const dlprof::Profiler prof;
  EXPECT_TRUE(prof.key_averages().rows().empty());
}

TEST(KeyAveragesTest, SummarisesARealProfiledWindow) {
  // wait=1, warmup=1, active=3: steps 2, 3 and 4 are recorded.
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(1, 1, 3, 1)));
  prof.start();
  for (int i = 0; i < 7; ++i) {
    {
      DLPROF_RANGE("key_averages_outer");
      DLPROF_RANGE("key_averages_inner");
    }
    prof.step();
  }
  prof.stop();

  const dlprof::KeyAverages averages = prof.key_averages();
  const dlprof::KeyAverage* outer = averages.find("key_averages_outer");
  const dlprof::KeyAverage* inner = averages.find("key_averages_inner");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(outer->calls, 3u);
  EXPECT_EQ(inner->calls, 3u);
  // Each outer range holds exactly one inner range and nothing else.
  EXPECT_EQ(outer->self_ns, outer->total_ns - inner->total_ns);
  EXPECT_LE(outer->min_ns, outer->max_ns);
  for (const char* step : {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}) {
    ASSERT_NE(averages.find(step), nullptr) << step;
    EXPECT_EQ(averages.find(step)->calls, 1u);
  }
  EXPECT_EQ(averages.find("ProfilerStep#1"), nullptr);
  EXPECT_EQ(averages.find("ProfilerStep#5"), nullptr);
  EXPECT_EQ(averages.rows().size(), 5u);
}

}  // namespace
