// Call stacks in the analyses (analysis/call_stacks.hpp): folded stacks of self CPU and GPU time,
// checked by hand, and the innermost frame of the user's own code.
#include <dlprof/analysis/call_stacks.hpp>
#include <dlprof/report.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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
  EXPECT_EQ(dlprof::analysis::innermost_user_frame(trace, trace.stacks[1]), "train.cpp(42): Block::forward(at::Tensor)");
  using dlprof::analysis::is_library_frame;
  EXPECT_TRUE(is_library_frame("libtorch_cpu.so+0x1a2b"));
  EXPECT_TRUE(is_library_frame("at::native::add (libtorch_cpu.so+0x1a2b)"));
  EXPECT_TRUE(is_library_frame("/usr/include/c++/12/bits/std_function.h(591): std::function<void ()>::operator()() const"));
  EXPECT_TRUE(is_library_frame("range.hpp(90): void dlprof::ScopedRange::begin()"));
  EXPECT_TRUE(is_library_frame("op.cpp(3): void at::native::foo<unsigned int>(at::Tensor const&)"));
  EXPECT_FALSE(is_library_frame("train.cpp(42): Block::forward(at::Tensor)")) << "at:: in the parameters only";
  EXPECT_FALSE(is_library_frame("train.cpp(7): std_like::helper()"));
  EXPECT_FALSE(is_library_frame("train+0x1234"));
  EXPECT_FALSE(is_library_frame("model.py(12): forward"));
  Trace libraries_only = trace;
  libraries_only.stacks = {CallStack{2, 2}};
  EXPECT_EQ(dlprof::analysis::innermost_user_frame(libraries_only, libraries_only.stacks[0]), std::nullopt);
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

TEST(AnalysisCallStacksTest, TheReportNamesTheLineInEachFormat) {
  const dlprof::Report report = dlprof::make_report(trace_with_stacks());
  EXPECT_THAT(dlprof::render_text(report),
              ::testing::AllOf(::testing::HasSubstr("Which line of code"),
                               ::testing::HasSubstr("The line that launched the most GPU time: train.cpp(42): Block::forward(at::Tensor)")));
  EXPECT_THAT(dlprof::render_json(report), ::testing::HasSubstr(R"("code_lines")"));
  EXPECT_THAT(dlprof::render_html(report), ::testing::HasSubstr("Which line of code"));
}

}  // namespace analysis_call_stacks_test
