// Call stacks in the analyses (analysis/call_stacks.hpp): folded stacks of self CPU and GPU time,
// checked by hand, and the innermost frame of the user's own code.
#include <dlprof/analysis/call_stacks.hpp>
#include <dlprof/analysis/cuda_graphs.hpp>
#include <dlprof/export/folded_stacks.hpp>
#include <dlprof/key_averages.hpp>
#include <dlprof/report.hpp>
#include <dlprof/report/kernel_table.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "test_files.hpp"

namespace analysis_call_stacks_test {

using dlprof::CallStack;
using dlprof::EventKind;
using dlprof::StackFrame;
using dlprof::Trace;
using dlprof::TraceEvent;
using dlprof::analysis::StackMetric;

/// A step (no stack) holding `aten::linear` (stack 0: main -> train.cpp:42 -> Block::forward,
/// 100 us) holding `aten::addmm` (stack 1, 60 us) that launched a 30 us kernel, then a second
/// `aten::linear` call from the same line (40 us, nothing inside), and a range without a stack.
Trace trace_with_stacks() {
  Trace trace;
  trace.names = {"ProfilerStep#1", "aten::linear", "aten::addmm", "gemm_kernel", "untracked",
                 "train.cpp(80): main", "train.cpp(42): Block::forward(at::Tensor)", "/usr/include/ATen/Functions.h(10): at::addmm()",
                 "linear;with;semicolons"};
  trace.threads = {{1, "main"}};
  trace.modules = {dlprof::LoadedModule{"/usr/lib/libtorch_cpu.so", "", 0x7000, 0x7000, 0x9000}};
  trace.stack_frames = {StackFrame{0x10, 6}, StackFrame{0x20, 5},                    // stack 0, innermost first
                        StackFrame{0x7100, StackFrame::kNoText}, StackFrame{0x30, 7},  // stack 1: libtorch, ATen,
                        StackFrame{0x10, 6}, StackFrame{0x20, 5}};                     // then stack 0's frames
  trace.stacks = {CallStack{0, 2}, CallStack{2, 4}};
  const auto slice = [&](std::uint32_t name, std::int64_t start_us, std::int64_t end_us, EventKind kind, std::uint32_t stack) {
    TraceEvent event;
    event.name = name;
    event.kind = kind;
    event.start_ns = start_us * 1000;
    event.end_ns = end_us * 1000;
    event.stack = stack;
    event.external_id = trace.events.size() + 1;
    trace.events.push_back(event);
  };
  slice(0, 0, 1000, EventKind::Step, TraceEvent::kNoStack);
  slice(1, 100, 200, EventKind::Op, 0);
  slice(2, 120, 180, EventKind::Op, 1);
  slice(1, 300, 340, EventKind::Op, 0);
  slice(4, 400, 500, EventKind::Range, TraceEvent::kNoStack);
  slice(8, 600, 601, EventKind::Range, 0);
  dlprof::GpuEvent kernel;
  kernel.name = 3;
  kernel.kind = dlprof::GpuEventKind::Kernel;
  kernel.start_ns = 150'000;
  kernel.end_ns = 180'000;
  kernel.external_id = 3;  // aten::addmm's
  trace.gpu_events = {kernel};
  return trace;
}

TEST(AnalysisCallStacksTest, SelfCpuTimeFoldsEachStackOutermostFirstWithTheOpAsTheLeaf) {
  const Trace trace = trace_with_stacks();
  // aten::linear: 100 - 60 us of aten::addmm, then 40 us: 80 us on one line.
  EXPECT_EQ(dlprof::analysis::folded_stacks(trace, StackMetric::SelfCpuTime),
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);/usr/include/ATen/Functions.h(10): at::addmm();"
            "libtorch_cpu.so+0x100;aten::addmm 60.000\n"
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);aten::linear 80.000\n"
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);linear,with,semicolons 1.000\n");
}

TEST(AnalysisCallStacksTest, SelfGpuTimeIsTheWorkEachOpLaunchedItself) {
  EXPECT_EQ(dlprof::analysis::folded_stacks(trace_with_stacks(), StackMetric::SelfGpuTime),
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);/usr/include/ATen/Functions.h(10): at::addmm();"
            "libtorch_cpu.so+0x100;aten::addmm 30.000\n");
  Trace without = trace_with_stacks();
  without.gpu_events.clear();
  EXPECT_EQ(dlprof::analysis::folded_stacks(without, StackMetric::SelfGpuTime), "");
}

TEST(AnalysisCallStacksTest, TheInnermostUserFrameSkipsLibrariesAndTheirNamespaces) {
  const Trace trace = trace_with_stacks();
  ASSERT_NE(dlprof::innermost_user_frame(trace, trace.stacks[1]), nullptr);
  EXPECT_EQ(dlprof::frame_text(trace, *dlprof::innermost_user_frame(trace, trace.stacks[1])), "train.cpp(42): Block::forward(at::Tensor)");
  using dlprof::is_library_frame;
  EXPECT_TRUE(is_library_frame("libtorch_cpu.so+0x1a2b"));
  EXPECT_TRUE(is_library_frame("at::native::add (libtorch_cpu.so+0x1a2b)"));
  EXPECT_TRUE(is_library_frame("/usr/include/c++/12/bits/std_function.h(591): std::function<void ()>::operator()() const"));
  EXPECT_TRUE(is_library_frame("range.hpp(90): void dlprof::ScopedRange::begin()"));
  EXPECT_TRUE(is_library_frame("op.cpp(3): void at::native::foo<unsigned int>(at::Tensor const&)"));
  EXPECT_FALSE(is_library_frame("train.cpp(42): Block::forward(at::Tensor)")) << "at:: in the parameters only";
  EXPECT_FALSE(is_library_frame("train.cpp(7): std_like::helper()"));
  EXPECT_FALSE(is_library_frame("train+0x1234"));
  EXPECT_FALSE(is_library_frame("model.py(12): forward"));
  EXPECT_FALSE(is_library_frame("train.py(30): <module>")) << "a Python script's top level";
  EXPECT_TRUE(is_library_frame("torch/nn/modules/module.py(1194): _call_impl"));
  EXPECT_TRUE(is_library_frame("/opt/venv/lib/python3.11/site-packages/transformers/models/qwen2.py(80): forward"));
  EXPECT_TRUE(is_library_frame("threading.py(1032): _bootstrap"));
  EXPECT_TRUE(is_library_frame("<built-in method linear of type object at 0x7f00>"));
  EXPECT_TRUE(is_library_frame("nn.Module: Linear_0"));
  EXPECT_TRUE(is_library_frame(""));
  EXPECT_TRUE(is_library_frame("/usr/local/include/dlprof/range.hpp(90): begin"));
  EXPECT_FALSE(is_library_frame("/home/me/dlprof/train.cpp(3): main")) << "a project in a directory named as a library";
  EXPECT_FALSE(is_library_frame("/home/me/torch/train.cpp(3): main"));
  Trace libraries_only = trace;
  libraries_only.stacks = {CallStack{2, 2}};
  EXPECT_EQ(dlprof::innermost_user_frame(libraries_only, libraries_only.stacks[0]), nullptr);
}

TEST(AnalysisCallStacksTest, OpsAreGroupedByTheInnermostLineOfTheUsersCode) {
  const Trace trace = trace_with_stacks();
  const dlprof::analysis::CodeLines code = dlprof::analysis::code_lines(trace, 10);
  // Every op's stack reaches Block::forward: aten::linear twice (40 + 40 us of self time) and
  // aten::addmm (60 us) that launched the 30 us kernel. The range is no op.
  EXPECT_EQ(code.lines, 1u);
  EXPECT_EQ(code.ops_with_stacks, 3u);
  EXPECT_EQ(code.ops_in_libraries, 0u);
  EXPECT_EQ(code.self_cpu_ns, 140'000);
  EXPECT_EQ(code.gpu_ns, 30'000);
  ASSERT_EQ(code.by_cpu.size(), 1u);
  const dlprof::analysis::CodeLine& line = code.by_cpu[0];
  EXPECT_EQ(line.line, "train.cpp(42): Block::forward(at::Tensor)");
  EXPECT_EQ(line.self_cpu_ns, 140'000);
  EXPECT_EQ(line.gpu_ns, 30'000);
  EXPECT_EQ(line.ops, 3u);
  EXPECT_EQ(line.top_op, "aten::linear");
  EXPECT_EQ(line.top_kernel, "gemm_kernel");
  ASSERT_EQ(code.by_gpu.size(), 1u);
  EXPECT_EQ(code.by_gpu[0].line, line.line);

  Trace without = trace;
  for (TraceEvent& event : without.events) event.stack = TraceEvent::kNoStack;
  EXPECT_TRUE(dlprof::analysis::code_lines(without, 10).empty());
}

TEST(AnalysisCallStacksTest, TheTerminalsColumnOfLinesLeavesOutTheirDirectories) {
  using dlprof::detail::without_directories;
  EXPECT_EQ(without_directories("/work/examples/mnist_cnn.hpp(25): Net::forward(at::Tensor)"), "mnist_cnn.hpp(25): Net::forward(at::Tensor)");
  EXPECT_EQ(without_directories("model.py(12): forward"), "model.py(12): forward");
  EXPECT_EQ(without_directories("libtorch_cpu.so+0x1a2b"), "libtorch_cpu.so+0x1a2b");
  EXPECT_EQ(without_directories("f(a/b) (lib/x.so+0x10)"), "f(a/b) (lib/x.so+0x10)") << "no file and line";
}

TEST(AnalysisCallStacksTest, TheReportNamesTheLineInEachFormat) {
  const dlprof::Report report = dlprof::make_report(trace_with_stacks());
  EXPECT_THAT(dlprof::render_text(report),
              ::testing::AllOf(::testing::HasSubstr("Which line of code"),
                               ::testing::HasSubstr("The line that launched the most GPU time: train.cpp(42): Block::forward(at::Tensor)")));
  EXPECT_THAT(dlprof::render_json(report), ::testing::HasSubstr(R"("code_lines")"));
  EXPECT_THAT(dlprof::render_html(report), ::testing::HasSubstr("Which line of code"));
}

/// trace_with_stacks() and a third aten::linear (20 us), called from another line: Head::forward,
/// called from main.
Trace trace_with_two_call_sites() {
  Trace trace = trace_with_stacks();
  const auto head = static_cast<std::uint32_t>(trace.names.size());
  trace.names.push_back("train.cpp(50): Head::forward()");
  const auto first = static_cast<std::uint32_t>(trace.stack_frames.size());
  trace.stack_frames.push_back(StackFrame{0x40, head});
  trace.stack_frames.push_back(StackFrame{0x20, 5});
  trace.stacks.push_back(CallStack{first, 2});
  TraceEvent event = trace.events[3];
  event.start_ns = 700'000;
  event.end_ns = 720'000;
  event.stack = 2;
  event.external_id = 7;
  trace.events.push_back(event);
  return trace;
}

TEST(AnalysisCallStacksTest, KeyAveragesGroupByTheInnermostFramesOfTheUsersCode) {
  dlprof::KeyAverages averages(trace_with_two_call_sites());
  const dlprof::KeyAverage* linear = averages.find("aten::linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->calls, 3u);
  EXPECT_EQ(linear->total_ns, 160'000);
  EXPECT_TRUE(linear->stack.empty());

  const auto rows_named = [&averages](std::string_view name) {
    std::vector<dlprof::KeyAverage> rows;
    for (const dlprof::KeyAverage& row : averages.rows())
      if (row.name == name) rows.push_back(row);
    return rows;
  };
  averages.sort_by(dlprof::SortBy::Calls).group_by_stack(1);
  std::vector<dlprof::KeyAverage> linears = rows_named("aten::linear");
  ASSERT_EQ(linears.size(), 2u);
  // Sorted by calls, as asked before the grouping.
  EXPECT_EQ(averages.rows().front().name, "aten::linear");
  EXPECT_THAT(linears[0].stack, ::testing::ElementsAre("train.cpp(42): Block::forward(at::Tensor)"));
  EXPECT_EQ(linears[0].calls, 2u);
  EXPECT_EQ(linears[0].total_ns, 140'000);
  EXPECT_EQ(linears[0].self_ns, 80'000);
  EXPECT_EQ(linears[0].min_ns, 40'000);
  EXPECT_EQ(linears[0].max_ns, 100'000);
  EXPECT_EQ(linears[0].gpu_total_ns, 30'000);
  EXPECT_THAT(linears[1].stack, ::testing::ElementsAre("train.cpp(50): Head::forward()"));
  EXPECT_EQ(linears[1].calls, 1u);
  EXPECT_EQ(linears[1].total_ns, 20'000);
  // aten::addmm's libtorch and ATen frames are no user's: its frame is Block::forward.
  ASSERT_EQ(rows_named("aten::addmm").size(), 1u);
  EXPECT_THAT(rows_named("aten::addmm")[0].stack, ::testing::ElementsAre("train.cpp(42): Block::forward(at::Tensor)"));
  ASSERT_EQ(rows_named("untracked").size(), 1u);
  EXPECT_TRUE(rows_named("untracked")[0].stack.empty());
  const std::string table = averages.table();
  EXPECT_THAT(table, ::testing::HasSubstr("\n    train.cpp(50): Head::forward()\n"));
  EXPECT_THAT(table, ::testing::HasSubstr("names and stacks"));

  averages.group_by_stack(2);
  linears = rows_named("aten::linear");
  ASSERT_EQ(linears.size(), 2u);
  EXPECT_THAT(linears[1].stack, ::testing::ElementsAre("train.cpp(50): Head::forward()", "train.cpp(80): main"));

  averages.group_by_stack(0);
  ASSERT_EQ(rows_named("aten::linear").size(), 1u);
  EXPECT_EQ(rows_named("aten::linear")[0].calls, 3u);
  EXPECT_THAT(averages.table(), ::testing::Not(::testing::HasSubstr("Head::forward")));
}

TEST(AnalysisCallStacksTest, BytesAllocatedAreEachOpsOwnAllocations) {
  Trace trace = trace_with_stacks();
  const auto allocate = [&](std::int64_t at_us, std::int64_t bytes) {
    dlprof::MemoryEvent memory;
    memory.time_ns = at_us * 1000;
    memory.bytes = bytes;
    memory.thread = 0;
    trace.memory_events.push_back(memory);
  };
  allocate(110, 1000);   // aten::linear's own, before aten::addmm begins
  allocate(130, 4096);   // aten::addmm's
  allocate(170, -4096);  // a release: not an allocation
  allocate(320, 512);    // the second aten::linear, same stack
  allocate(450, 64);     // the range without a stack: in no folded line
  EXPECT_EQ(dlprof::analysis::folded_stacks(trace, StackMetric::SelfBytesAllocated),
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);/usr/include/ATen/Functions.h(10): at::addmm();"
            "libtorch_cpu.so+0x100;aten::addmm 4096\n"
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);aten::linear 1512\n");
  const dlprof::analysis::FlameGraph graph = dlprof::analysis::flame_graph(trace, StackMetric::SelfBytesAllocated);
  EXPECT_EQ(graph.total, 5608);
  EXPECT_EQ(dlprof::analysis::to_string(StackMetric::SelfBytesAllocated), "self_bytes_allocated");

  const std::string html = dlprof::render_html(dlprof::make_report(trace));
  EXPECT_THAT(html, ::testing::HasSubstr("Flame graph: the bytes each op allocated by call stack (5.48 KiB in all)"));
  EXPECT_THAT(html, ::testing::HasSubstr("-flame-memory"));
  EXPECT_THAT(dlprof::render_html(dlprof::make_report(trace_with_stacks())), ::testing::Not(::testing::HasSubstr("-flame-memory")))
      << "no allocations, no memory flame graph";
}

TEST(AnalysisCallStacksTest, ExportStacksWritesTheFoldedFileOrSaysWhyNot) {
  const dlprof_test::TempDir dir;
  const Trace trace = trace_with_two_call_sites();
  const std::string path = (dir.path() / "stacks.folded").string();
  dlprof::export_stacks(trace, path, StackMetric::SelfGpuTime);
  EXPECT_EQ(dlprof_test::read_file(path), dlprof::analysis::folded_stacks(trace, StackMetric::SelfGpuTime));
  dlprof::export_stacks(trace, path + ".gz");
  EXPECT_EQ(dlprof_test::read_gzip(path + ".gz"), dlprof::analysis::folded_stacks(trace, StackMetric::SelfCpuTime));

  Trace stackless = trace;
  stackless.stacks.clear();
  for (TraceEvent& event : stackless.events) event.stack = TraceEvent::kNoStack;
  EXPECT_THROW(
      try { dlprof::export_stacks(stackless, (dir.path() / "none.folded").string()); } catch (const std::invalid_argument& error) {
        EXPECT_THAT(error.what(), ::testing::HasSubstr("with_stack"));
        throw;
      },
      std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "none.folded"));
  EXPECT_THROW(
      try {
        dlprof::export_stacks(trace, (dir.path() / "none.folded").string(), StackMetric::SelfBytesAllocated);
      } catch (const std::invalid_argument& error) {
        EXPECT_THAT(error.what(), ::testing::HasSubstr("profile_memory"));
        throw;
      },
      std::invalid_argument)
      << "no allocations to weigh the stacks by";
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "none.folded"));
  const std::string unwritable = (dir.path() / "missing" / "dir" / "stacks.folded").string();
  EXPECT_THROW(
      try { dlprof::export_stacks(trace, unwritable); } catch (const std::runtime_error& error) {
        EXPECT_THAT(error.what(), ::testing::HasSubstr(unwritable));
        throw;
      },
      std::runtime_error);
}

TEST(AnalysisCallStacksTest, EachKernelIsNamedByTheLineItsOpCameFrom) {
  Trace trace = trace_with_two_call_sites();
  // A kernel of the Head::forward aten::linear, and one of a range whose one frame is this
  // program's, unsymbolised.
  dlprof::GpuEvent kernel = trace.gpu_events[0];
  kernel.start_ns = 705'000;
  kernel.end_ns = 715'000;
  kernel.external_id = 7;
  trace.gpu_events.push_back(kernel);
  trace.modules.push_back(dlprof::LoadedModule{"/opt/app/train", "", 0x400000, 0x400000, 0x500000});
  trace.stack_frames.push_back(StackFrame{0x401010, StackFrame::kNoText});
  trace.stacks.push_back(CallStack{static_cast<std::uint32_t>(trace.stack_frames.size() - 1), 1});
  TraceEvent decode = trace.events[4];
  decode.start_ns = 800'000;
  decode.end_ns = 810'000;
  decode.stack = 3;
  decode.external_id = 8;
  trace.events.push_back(decode);
  kernel.start_ns = 805'000;
  kernel.end_ns = 806'000;
  kernel.external_id = 8;
  trace.gpu_events.push_back(kernel);

  const dlprof::analysis::KernelAttribution attribution = dlprof::analysis::kernel_attribution(trace);
  ASSERT_EQ(attribution.kernels.size(), 3u);
  EXPECT_EQ(attribution.kernels[0].line, "train.cpp(42): Block::forward(at::Tensor)") << "aten::addmm's, past libtorch and ATen";
  EXPECT_EQ(attribution.kernels[1].line, "train.cpp(50): Head::forward()");
  EXPECT_EQ(attribution.kernels[2].line, "train+0x1010");

  // The table keeps the lines it views: its attribution is gone.
  const dlprof::analysis::KernelTable table = dlprof::analysis::kernel_table(trace);
  ASSERT_EQ(table.rows.size(), 3u);
  EXPECT_TRUE(table.has_lines());
  std::vector<std::string> lines;
  for (const dlprof::analysis::KernelTableRow& row : table.rows) lines.emplace_back(row.line);
  EXPECT_THAT(lines, ::testing::UnorderedElementsAre("train.cpp(42): Block::forward(at::Tensor)", "train.cpp(50): Head::forward()",
                                                     "train+0x1010"));
  const std::string text = dlprof::render_kernel_table_text({dlprof::rank_kernel_table(Trace(trace))});
  EXPECT_THAT(text, ::testing::HasSubstr("Line"));
  EXPECT_THAT(text, ::testing::HasSubstr("train.cpp(50): Head::forward()"));
  EXPECT_THAT(dlprof::render_kernel_table_csv({dlprof::rank_kernel_table(Trace(trace))}),
              ::testing::HasSubstr(R"csv("aten::linear","train.cpp(50): Head::forward()","fwd")csv"));

  Trace without = trace;
  for (TraceEvent& event : without.events) event.stack = TraceEvent::kNoStack;
  without.stacks.clear();
  EXPECT_FALSE(dlprof::analysis::kernel_table(without).has_lines());
  EXPECT_THAT(dlprof::render_kernel_table_text({dlprof::rank_kernel_table(std::move(without))}),
              ::testing::Not(::testing::HasSubstr("Line")));
}

TEST(AnalysisCallStacksTest, AFlameGraphMergesTheStacksSharedPrefixesIntoBoxes) {
  const Trace trace = trace_with_two_call_sites();
  const dlprof::analysis::FlameGraph graph = dlprof::analysis::flame_graph(trace, StackMetric::SelfCpuTime);
  EXPECT_EQ(graph.total, 161'000);
  EXPECT_EQ(graph.depth, 5u);
  EXPECT_EQ(graph.frames_left_out, 0u);
  std::vector<std::string> boxes;
  for (const dlprof::analysis::FlameFrame& frame : graph.frames)
    boxes.push_back(fmt::format("{} {} {} {}{}", frame.depth, frame.start / 1000, frame.value / 1000, frame.text, frame.op ? " (op)" : ""));
  EXPECT_THAT(boxes, ::testing::ElementsAre("0 0 161 train.cpp(80): main", "1 0 141 train.cpp(42): Block::forward(at::Tensor)",
                                            "2 0 60 /usr/include/ATen/Functions.h(10): at::addmm()", "3 0 60 libtorch_cpu.so+0x100",
                                            "4 0 60 aten::addmm (op)", "2 60 80 aten::linear (op)",
                                            "2 140 1 linear,with,semicolons (op)", "1 141 20 train.cpp(50): Head::forward()",
                                            "2 141 20 aten::linear (op)"));
  // Boxes under 1 % (1.61 us) are left out; at most 3 boxes, the widest.
  EXPECT_EQ(dlprof::analysis::flame_graph(trace, StackMetric::SelfCpuTime, 0.01).frames_left_out, 1u);
  const dlprof::analysis::FlameGraph three = dlprof::analysis::flame_graph(trace, StackMetric::SelfCpuTime, 0, 3);
  ASSERT_EQ(three.frames.size(), 3u);
  EXPECT_EQ(three.frames[2].text, "aten::linear");
  EXPECT_EQ(three.frames_left_out, 6u);
  EXPECT_EQ(three.depth, 3u);

  const dlprof::analysis::FlameGraph gpu = dlprof::analysis::flame_graph(trace, StackMetric::SelfGpuTime);
  EXPECT_EQ(gpu.total, 30'000);
  ASSERT_EQ(gpu.frames.size(), 5u);
  EXPECT_EQ(gpu.frames.back().text, "aten::addmm");

  const std::string page = dlprof::render_html(dlprof::make_report(trace));
  EXPECT_THAT(page, ::testing::HasSubstr(R"(<svg class="chart flame-graph" id="rank-0-flame-cpu")"));
  EXPECT_THAT(page, ::testing::HasSubstr(R"(<svg class="chart flame-graph" id="rank-0-flame-gpu")"));
  EXPECT_THAT(page, ::testing::HasSubstr("Flame graph: self CPU time by call stack (161.000us in all)"));
  EXPECT_THAT(page, ::testing::HasSubstr("<title>train.cpp(50): Head::forward()\n0.020 ms, 12.42%</title>"));
  EXPECT_THAT(page, ::testing::HasSubstr("querySelectorAll('svg.flame-graph')")) << "the zoom";
  Trace stackless = trace;
  for (TraceEvent& event : stackless.events) event.stack = TraceEvent::kNoStack;
  stackless.stacks.clear();
  const std::string without = dlprof::render_html(dlprof::make_report(stackless));
  EXPECT_THAT(without, ::testing::Not(::testing::HasSubstr(R"(<svg class="chart flame-graph")")));
  EXPECT_THAT(without, ::testing::Not(::testing::HasSubstr("querySelectorAll('svg.flame-graph')")));
}

TEST(AnalysisCallStacksTest, AFlameGraphsLabelIsCutToItsBoxAtACharacter) {
  EXPECT_EQ(dlprof::detail::flame_label("aten::linear", 200), "aten::linear");
  EXPECT_EQ(dlprof::detail::flame_label("aten::linear", 6 + 6.6 * 8), "aten::..");
  EXPECT_EQ(dlprof::detail::flame_label("aten::linear", 20), "");
  EXPECT_EQ(dlprof::detail::flame_label("ééééé", 6 + 6.6 * 4), "éé..") << "not inside a character";
}

TEST(AnalysisCallStacksTest, GraphReplaysAreGroupedByTheGraphTheirRecordsName) {
  Trace trace = trace_with_stacks();
  trace.names.push_back("cudaGraphLaunch");
  const auto launch_name = static_cast<std::uint32_t>(trace.names.size() - 1);
  // Two launches of graph 5 (two nodes) from aten::linear, one of graph 9 from the range.
  const auto launch = [&](std::uint32_t correlation, std::int64_t at_us) {
    dlprof::ApiEvent call;
    call.name = launch_name;
    call.correlation = correlation;
    call.start_ns = at_us * 1000;
    call.end_ns = at_us * 1000 + 500;
    trace.api_events.push_back(call);
  };
  launch(100, 310);
  launch(101, 320);
  launch(102, 410);
  const auto replayed = [&](std::uint32_t correlation, std::uint32_t graph, std::uint64_t node, std::int64_t us) {
    dlprof::GpuEvent work = trace.gpu_events[0];
    work.external_id = 0;
    work.correlation = correlation;
    work.graph_id = graph;
    work.graph_node_id = node;
    work.start_ns = 900'000;
    work.end_ns = 900'000 + us * 1000;
    trace.gpu_events.push_back(work);
  };
  replayed(100, 5, 1, 10);
  replayed(100, 5, 2, 20);
  replayed(101, 5, 1, 10);
  replayed(102, 9, 7, 5);
  const dlprof::analysis::CudaGraphs graphs = dlprof::analysis::cuda_graphs(trace);
  EXPECT_EQ(graphs.launches, 3u);
  EXPECT_EQ(graphs.gpu_ns, 45'000);
  EXPECT_EQ(graphs.all_gpu_ns, 75'000) << "with the 30 us kernel aten::addmm launched itself";
  ASSERT_EQ(graphs.graphs.size(), 2u);
  EXPECT_EQ(graphs.graphs[0].graph_id, 5u);
  EXPECT_EQ(graphs.graphs[0].launches, 2u);
  EXPECT_EQ(graphs.graphs[0].work, 3u);
  EXPECT_EQ(graphs.graphs[0].nodes, 2u);
  EXPECT_EQ(graphs.graphs[0].gpu_ns, 40'000);
  EXPECT_EQ(graphs.graphs[0].launched_from, "aten::linear");
  EXPECT_EQ(graphs.graphs[1].graph_id, 9u);
  EXPECT_EQ(graphs.graphs[1].launched_from, "untracked");

  const dlprof::Report report = dlprof::make_report(trace);
  EXPECT_THAT(dlprof::render_text(report), ::testing::HasSubstr("CUDA graphs: the GPU work graphs replayed (60.0% of the GPU time, 3 launches)"));
  EXPECT_THAT(dlprof::render_json(report), ::testing::HasSubstr(R"("all_gpu_us": 75.000,)"));
  EXPECT_THAT(dlprof::render_html(report), ::testing::HasSubstr("CUDA graphs: the GPU work graphs replayed"));
  const std::string without = dlprof::render_json(dlprof::make_report(trace_with_stacks()));
  EXPECT_THAT(without, ::testing::HasSubstr(R"("cuda_graphs": {)"));
  EXPECT_THAT(without, ::testing::Not(::testing::HasSubstr("all_gpu_us")));
}

TEST(AnalysisCallStacksTest, ReplayedWorkCountsOnTheLineThatCapturedItsNode) {
  Trace trace = trace_with_stacks();
  trace.names.push_back("cudaGraphLaunch");
  dlprof::ApiEvent call;
  call.name = static_cast<std::uint32_t>(trace.names.size() - 1);
  call.correlation = 100;
  call.start_ns = 410'000;  // in the "untracked" range, which has no stack
  call.end_ns = 411'000;
  trace.api_events.push_back(call);
  // Two nodes captured in aten::linear (stack 0), 10 and 20 us; one captured outside any recording.
  const auto replayed = [&](std::uint64_t node, std::int64_t us, bool captured) {
    dlprof::GpuEvent work = trace.gpu_events[0];
    work.external_id = 5;  // the "untracked" range's
    work.correlation = 100;
    work.graph_id = 5;
    work.graph_node_id = node;
    work.start_ns = 900'000 + static_cast<std::int64_t>(node) * 100'000;
    work.end_ns = work.start_ns + us * 1000;
    if (captured) {
      work.captured_by = 1;  // aten::linear
      work.capture_stack = 0;
    }
    trace.gpu_events.push_back(work);
  };
  replayed(1, 10, true);
  replayed(2, 20, true);
  replayed(3, 5, false);

  const std::string folded = dlprof::analysis::folded_stacks(trace, StackMetric::SelfGpuTime);
  EXPECT_EQ(folded,
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);/usr/include/ATen/Functions.h(10): at::addmm();"
            "libtorch_cpu.so+0x100;aten::addmm 30.000\n"
            "train.cpp(80): main;train.cpp(42): Block::forward(at::Tensor);aten::linear 30.000\n")
      << "the uncaptured replay stays with its launch's range, which has no stack";

  const dlprof::analysis::CodeLines lines = dlprof::analysis::code_lines(trace, 10);
  ASSERT_FALSE(lines.by_gpu.empty());
  EXPECT_EQ(lines.by_gpu[0].line, "train.cpp(42): Block::forward(at::Tensor)");
  EXPECT_EQ(lines.by_gpu[0].gpu_ns, 60'000) << "aten::addmm's 30 us kernel and the 30 us its call to aten::linear captured";
  EXPECT_EQ(lines.gpu_ns, 60'000);

  const dlprof::analysis::CudaGraphs graphs = dlprof::analysis::cuda_graphs(trace);
  ASSERT_EQ(graphs.graphs.size(), 1u);
  EXPECT_EQ(graphs.work, 3u);
  EXPECT_EQ(graphs.captured_work, 2u);
  EXPECT_EQ(graphs.graphs[0].captured_by, "aten::linear");
  EXPECT_EQ(graphs.graphs[0].captured_at, "train.cpp(42): Block::forward(at::Tensor)");

  const dlprof::Report report = dlprof::make_report(trace);
  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, ::testing::HasSubstr("Captured by"));
  EXPECT_THAT(text, ::testing::HasSubstr("1 of the 3 pieces of replayed work have no capturing op"));
  const std::string json = dlprof::render_json(report);
  EXPECT_THAT(json, ::testing::HasSubstr(R"json("captured_by": "aten::linear",)json"));
  EXPECT_THAT(json, ::testing::HasSubstr(R"json("captured_at": "train.cpp(42): Block::forward(at::Tensor)")json"));
}

}  // namespace analysis_call_stacks_test
