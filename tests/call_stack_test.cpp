// Call stacks (with_stack): the stack table and its per-thread cache, the stacks recorded ranges
// take as they begin, the process's modules, backward ops given their forward op's stack, and the
// trace's `Call stack` args and module list as written.
#include <dlprof/profiler.hpp>
#include <dlprof/detail/recording/stack_table.hpp>
#include <dlprof/detail/window/module_map.hpp>
#include <dlprof/export/folded_stacks.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/format/call_stack.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_files.hpp"

namespace call_stack_test {

using dlprof::CallStack;
using dlprof::StackFrame;
using dlprof::Trace;
using dlprof::TraceEvent;
using dlprof::detail::StackTable;
using ::testing::HasSubstr;
using ::testing::SizeIs;

/// The frames of `event`'s stack in `trace`.
std::vector<std::uint64_t> frames_of(const Trace& trace, const TraceEvent& event) {
  std::vector<std::uint64_t> frames;
  if (event.stack == TraceEvent::kNoStack) return frames;
  const CallStack& stack = trace.stacks.at(event.stack);
  for (std::uint32_t i = 0; i < stack.depth; ++i) frames.push_back(trace.stack_frames.at(stack.first + i).address);
  return frames;
}

const TraceEvent* event_named(const Trace& trace, std::string_view name) {
  for (const TraceEvent& event : trace.events)
    if (trace.name_of(event) == name) return &event;
  return nullptr;
}

TEST(StackTableTest, TheSameFramesAreOneStackAndItsCopyStays) {
  StackTable& table = StackTable::instance();
  // Frames no real stack has, so that the process's other stacks never match them.
  const std::uintptr_t first[] = {0x1001, 0x2002, 0x3003};
  const std::uintptr_t second[] = {0x1001, 0x2002, 0x3004};
  const auto a = table.intern(first, 3);
  const auto again = table.intern(first, 3);
  const auto b = table.intern(second, 3);
  const auto prefix = table.intern(first, 2);
  ASSERT_NE(a.id, dlprof::detail::kNoStackId);
  EXPECT_EQ(again.id, a.id);
  EXPECT_EQ(again.frames, a.frames) << "one copy";
  EXPECT_NE(b.id, a.id);
  EXPECT_NE(prefix.id, a.id) << "a stack's prefix is a stack of its own";
  const auto [frames, depth] = table.with_lock([&] { return table.frames_of_unlocked(a.id); });
  ASSERT_EQ(depth, 3u);
  EXPECT_EQ(frames[0], 0x1001u);
  EXPECT_EQ(frames[2], 0x3003u);
  EXPECT_EQ(table.with_lock([&] { return table.frames_of_unlocked(dlprof::detail::kNoStackId).second; }), 0u);
  EXPECT_EQ(table.with_lock([&] { return table.frames_of_unlocked(UINT32_MAX).second; }), 0u);
}

TEST(StackTableTest, AThreadsCacheAnswersAStackSeenBeforeWithTheTablesId) {
  dlprof::detail::StackCache cache;
  const std::uintptr_t frames[] = {0x5005, 0x6006};
  const dlprof::detail::StackId id = cache.intern(frames, 2);
  EXPECT_EQ(cache.intern(frames, 2), id);
  EXPECT_EQ(StackTable::instance().intern(frames, 2).id, id);
  EXPECT_EQ(cache.intern(frames, 0), dlprof::detail::kNoStackId) << "no frames, no stack";
  std::uintptr_t other[] = {0x5005, 0x6007};
  EXPECT_NE(cache.intern(other, 2), id);
}

// A range's stack is its caller's: stacks an unwinder takes just before and just after it, in
// the same function, have its depth and match it from the second frame outwards, so its
// innermost frame is the function's own (not a frame of dlprof's, nor the function's caller).
struct WalksAround {
  std::vector<std::uintptr_t> before;
  std::vector<std::uintptr_t> after;
};

DLPROF_NOINLINE WalksAround range_between_two_walks() {
  WalksAround walks{std::vector<std::uintptr_t>(dlprof::detail::kMaxStackFrames),
                    std::vector<std::uintptr_t>(dlprof::detail::kMaxStackFrames)};
  walks.before.resize(dlprof::detail::unwind_with_tables(walks.before.data(), walks.before.size()));
  { DLPROF_RANGE("range_with_a_stack"); }
  walks.after.resize(dlprof::detail::unwind_with_tables(walks.after.data(), walks.after.size()));
  return walks;
}

TEST(CallStackTest, ARecordedRangeCarriesItsCallersStack) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_stack(true).stack_depth(256));
  profiler.start();
  const WalksAround walks = range_between_two_walks();
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  const TraceEvent* range = event_named(*trace, "range_with_a_stack");
  ASSERT_NE(range, nullptr);
  const std::vector<std::uint64_t> frames = frames_of(*trace, *range);
  ASSERT_GE(walks.after.size(), 3u);
  ASSERT_EQ(frames.size(), walks.after.size());
  EXPECT_EQ(walks.before.size(), walks.after.size());
  for (std::size_t i = 1; i < frames.size(); ++i) EXPECT_EQ(frames[i], walks.after[i]) << "frame " << i;
  EXPECT_NE(frames[0], walks.before[0]);
  EXPECT_NE(frames[0], walks.after[0]);
  EXPECT_EQ(trace->stackless_events, 0u);
  // The module map holds every frame of this executable's code.
  const dlprof::LoadedModule* module = dlprof::detail::module_holding(trace->modules, frames[0]);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->path, dlprof::detail::executable_path());
}

// A loop body's range around the step() that closes the window is saved clipped to the window's
// end, with the stack it began with, as the same range ending inside the window would be.
TEST(CallStackTest, ARangeOpenWhenTheWindowClosesKeepsItsStack) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_stack(true).schedule(dlprof::schedule(0, 0, 1, 1)));
  profiler.start();
  for (int step = 0; step < 2; ++step) {
    DLPROF_RANGE("loop_body");
    { DLPROF_RANGE("inside_the_body"); }
    profiler.step();
  }
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  const TraceEvent* body = event_named(*trace, "loop_body");
  const TraceEvent* inside = event_named(*trace, "inside_the_body");
  ASSERT_NE(body, nullptr);
  ASSERT_NE(inside, nullptr);
  EXPECT_GE(trace->clipped_ranges, 1u) << "the body was open as the window closed";
  ASSERT_NE(body->stack, TraceEvent::kNoStack);
  const std::vector<std::uint64_t> body_frames = frames_of(*trace, *body);
  const std::vector<std::uint64_t> inside_frames = frames_of(*trace, *inside);
  ASSERT_GE(body_frames.size(), 2u);
  ASSERT_EQ(inside_frames.size(), body_frames.size()) << "both ranges are opened by this test's frame";
  for (std::size_t i = 1; i < body_frames.size(); ++i) EXPECT_EQ(body_frames[i], inside_frames[i]) << "frame " << i;
}

TEST(CallStackTest, TheDepthIsCappedAndRangesWithoutStacksHaveNone) {
  dlprof::Profiler capped(dlprof::ProfilerOptions{}.with_stack(true).stack_depth(2));
  capped.start();
  { DLPROF_RANGE("capped_range"); }
  { DLPROF_RANGE_F("formatted_range {}", 7); }
  capped.stop();
  const auto trace = capped.last_trace();
  ASSERT_NE(trace, nullptr);
  for (const char* name : {"capped_range", "formatted_range 7"}) {
    const TraceEvent* range = event_named(*trace, name);
    ASSERT_NE(range, nullptr) << name;
    EXPECT_THAT(frames_of(*trace, *range), SizeIs(2)) << name;
  }
  dlprof::Profiler plain;
  plain.start();
  { DLPROF_RANGE("range_without_a_stack"); }
  plain.stop();
  const auto without = plain.last_trace();
  ASSERT_NE(without, nullptr);
  const TraceEvent* range = event_named(*without, "range_without_a_stack");
  ASSERT_NE(range, nullptr);
  EXPECT_EQ(range->stack, TraceEvent::kNoStack);
  EXPECT_TRUE(without->stacks.empty());
  EXPECT_TRUE(without->modules.empty()) << "the module map is read only for stacks";
}

DLPROF_NOINLINE void range_in_a_loop_body(int i) { DLPROF_RANGE_F("loop_range {}", i % 2); }

TEST(CallStackTest, RangesFromOneCallSiteShareOneStackAndOtherThreadsHaveTheirOwn) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_stack(true));
  profiler.start();
  for (int i = 0; i < 100; ++i) range_in_a_loop_body(i);
  std::thread([] { range_in_a_loop_body(0); }).join();
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  std::set<std::uint32_t> main_stacks;
  std::set<std::uint32_t> other_stacks;
  const std::uint32_t main_thread = trace->events.front().thread;
  for (const TraceEvent& event : trace->events) {
    if (trace->name_of(event).rfind("loop_range", 0) != 0) continue;
    ASSERT_NE(event.stack, TraceEvent::kNoStack);
    (event.thread == main_thread ? main_stacks : other_stacks).insert(event.stack);
  }
  EXPECT_THAT(main_stacks, SizeIs(1)) << "one call site, one stack";
  ASSERT_THAT(other_stacks, SizeIs(1));
  EXPECT_NE(*main_stacks.begin(), *other_stacks.begin()) << "a thread's stack ends in its own start routine";
}

TEST(CallStackTest, FramePointersGiveTheRangesCallerWhereFramesKeepThem) {
  dlprof::Profiler profiler(
      dlprof::ProfilerOptions{}.with_stack(true).stack_unwinder(dlprof::StackUnwinder::FramePointers));
  profiler.start();
  const WalksAround walks = range_between_two_walks();
  profiler.stop();
  dlprof::detail::g_stack_capture.by_frame_pointers.store(false);
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  const TraceEvent* range = event_named(*trace, "range_with_a_stack");
  ASSERT_NE(range, nullptr);
  // The range's own frame is found whatever this test's code does with frame pointers (the walk
  // starts from a frame the range keeps): a return address into this executable's code. The
  // frames outside it need theirs; where this build omits them the walk stops early or skips
  // frames, never faulting.
  const std::vector<std::uint64_t> frames = frames_of(*trace, *range);
  ASSERT_FALSE(frames.empty());
  const dlprof::LoadedModule* module = dlprof::detail::module_holding(trace->modules, frames[0]);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->path, dlprof::detail::executable_path());
  EXPECT_NE(frames[0], walks.after[1]) << "not the caller's frame";
}

TEST(CallStackTest, TheModuleMapNamesTheExecutableWithItsBuildId) {
  const std::vector<dlprof::LoadedModule> modules = dlprof::detail::loaded_modules();
  ASSERT_FALSE(modules.empty());
  const auto here = reinterpret_cast<std::uintptr_t>(&range_in_a_loop_body);
  const dlprof::LoadedModule* executable = dlprof::detail::module_holding(modules, here);
  ASSERT_NE(executable, nullptr);
  EXPECT_EQ(executable->path, dlprof::detail::executable_path());
  EXPECT_THAT(executable->build_id, ::testing::MatchesRegex("[0-9a-f]{16,}")) << "Debian's linker writes a build id";
  EXPECT_LE(executable->base, executable->start);
  for (std::size_t i = 1; i < modules.size(); ++i) EXPECT_LE(modules[i - 1].end, modules[i].start) << "ordered, apart";
  EXPECT_EQ(dlprof::detail::module_holding(modules, 0), nullptr);
  const auto libc = reinterpret_cast<std::uintptr_t>(&::getpid);
  const dlprof::LoadedModule* library = dlprof::detail::module_holding(modules, libc);
  ASSERT_NE(library, nullptr);
  EXPECT_THAT(library->path, HasSubstr("libc.so"));
}

TEST(CallStackTest, BuildIdsAreReadFromWellFormedNotesOnly) {
  // A note: namesz 4, descsz 4, type 3 (NT_GNU_BUILD_ID), "GNU\0", then the id.
  const unsigned char good[] = {4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xde, 0xad, 0xbe, 0xef};
  EXPECT_EQ(dlprof::detail::gnu_build_id(good, sizeof(good)), "deadbeef");
  EXPECT_EQ(dlprof::detail::gnu_build_id(good, sizeof(good) - 1), "") << "the id runs past the segment";
  unsigned char huge[sizeof(good)];
  std::copy(std::begin(good), std::end(good), huge);
  huge[4] = 0xff;  // descsz 255
  EXPECT_EQ(dlprof::detail::gnu_build_id(huge, sizeof(huge)), "");
  EXPECT_EQ(dlprof::detail::gnu_build_id(good, 3), "");
}

// Backward ops and the ops they run take their forward op's stack.
TEST(CallStackTest, ABackwardOpAndTheOpsItRunsTakeTheForwardOpsStack) {
  Trace trace;
  trace.names = {"aten::mm", "autograd::engine::evaluate_function: MmBackward0", "aten::mm"};
  trace.threads = {{1, "main"}, {2, "autograd"}};
  trace.stacks = {CallStack{0, 1}, CallStack{1, 1}};
  trace.stack_frames = {StackFrame{0x100, StackFrame::kNoText}, StackFrame{0x200, StackFrame::kNoText}};
  TraceEvent forward;
  forward.kind = dlprof::EventKind::Op;
  forward.start_ns = 0;
  forward.end_ns = 10;
  forward.sequence_number = 7;
  forward.forward_thread_id = 1;
  forward.stack = 0;
  TraceEvent backward = forward;
  backward.name = 1;
  backward.thread = 1;
  backward.category = dlprof::Category::Backward;
  backward.start_ns = 20;
  backward.end_ns = 40;
  backward.stack = 1;  // the engine's
  TraceEvent inner = backward;
  inner.name = 2;
  inner.sequence_number = -1;
  inner.start_ns = 25;
  inner.end_ns = 30;
  inner.stack = TraceEvent::kNoStack;
  TraceEvent unrelated = inner;  // after the backward op: its own stack
  unrelated.start_ns = 50;
  unrelated.end_ns = 60;
  unrelated.stack = 1;
  trace.events = {forward, backward, inner, unrelated};
  dlprof::detail::inherit_forward_stacks(trace);
  EXPECT_EQ(trace.events[1].stack, 0u);
  EXPECT_EQ(trace.events[2].stack, 0u);
  EXPECT_EQ(trace.events[3].stack, 1u);
}

TEST(CallStackTest, CallStackArgsAndModulesAreWrittenAsTorchAndTheReaderSpellThem) {
  Trace trace;
  trace.pid = 1;
  trace.names = {"op", "model.py(12): forward"};
  trace.threads = {{1, "main"}};
  trace.modules = {dlprof::LoadedModule{"/opt/app/train", "abcd", 0x400000, 0x401000, 0x402000},
                   dlprof::LoadedModule{"/usr/lib/libtorch_cpu.so", "", 0x7f0000000000, 0x7f0000001000, 0x7f0000100000}};
  trace.stacks = {CallStack{0, 4}};
  trace.stack_frames = {StackFrame{0x7f0000001234, StackFrame::kNoText}, StackFrame{0x401010, StackFrame::kNoText},
                        StackFrame{0x10, StackFrame::kNoText}, StackFrame{0, 1}};
  TraceEvent op;
  op.kind = dlprof::EventKind::Op;
  op.end_ns = 1000;
  op.stack = 0;
  trace.events = {op};
  trace.stackless_events = 3;
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "t");
  const std::string json(out.data(), out.size());
  EXPECT_THAT(json, HasSubstr(R"("Call stack": "libtorch_cpu.so+0x1234;train+0x1010;0x10;model.py(12): forward")"));
  EXPECT_THAT(json, HasSubstr(R"("dlprof_stackless_events": 3)"));
  EXPECT_THAT(json, HasSubstr(R"({"path": "/opt/app/train", "build_id": "abcd", "base": 4194304, "start": 4198400, "end": 4202496})"));
  EXPECT_EQ(dlprof::detail::unsymbolised_frame_address(trace.modules, "libtorch_cpu.so+0x1234"), 0x7f0000001234u);
  EXPECT_EQ(dlprof::detail::unsymbolised_frame_address(trace.modules, "0x10"), 0x10u);
  EXPECT_EQ(dlprof::detail::unsymbolised_frame_address(trace.modules, "absent.so+0x10"), std::nullopt);
  EXPECT_EQ(dlprof::detail::unsymbolised_frame_address(trace.modules, "train+0xzz"), std::nullopt);
  EXPECT_EQ(dlprof::detail::unsymbolised_frame_address(trace.modules, "model.py(12): forward"), std::nullopt);
}

DLPROF_NOINLINE void range_from_a_named_call_site() { DLPROF_RANGE("range_from_a_named_call_site"); }

TEST(CallStackTest, TheProfilerGroupsItsSummaryByStackAndExportsFoldedStacks) {
  const dlprof_test::TempDir dir;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_stack(true));
  EXPECT_THROW(profiler.export_stacks((dir.path() / "early.folded").string()), std::logic_error);
  profiler.start();
  for (int i = 0; i < 3; ++i) range_from_a_named_call_site();
  profiler.stop();
  dlprof::KeyAverages averages = profiler.key_averages();
  averages.group_by_stack(1);
  const dlprof::KeyAverage* row = averages.find("range_from_a_named_call_site");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->calls, 3u) << "one call site, one stack";
  ASSERT_THAT(row->stack, SizeIs(1));
#if DLPROF_DETAIL_SYMBOLISE_STACKS
  // A program that links dlprof::symbolize gets functions and lines in-process.
  EXPECT_THAT(row->stack[0], HasSubstr("call_stack_test.cpp("));
  EXPECT_THAT(row->stack[0], HasSubstr("range_from_a_named_call_site"));
#else
  EXPECT_THAT(row->stack[0], HasSubstr("+0x"));
#endif
  const std::string path = (dir.path() / "stacks.folded").string();
  profiler.export_stacks(path);
  const std::string folded = dlprof_test::read_file(path);
  EXPECT_THAT(folded, HasSubstr(";range_from_a_named_call_site "));
#if DLPROF_DETAIL_SYMBOLISE_STACKS
  EXPECT_THAT(folded, HasSubstr("call_stack_test.cpp("));
#endif
  profiler.export_stacks(path, dlprof::analysis::StackMetric::SelfGpuTime);
  EXPECT_EQ(dlprof_test::read_file(path), "") << "no GPU work";
}

/// Records a range from `depth` frames down: one stack per depth.
DLPROF_NOINLINE int range_at_depth(int depth) {
  if (depth > 0) return range_at_depth(depth - 1) + 1;
  DLPROF_RANGE("range_while_signalled");
  return 0;
}

/// A handler that unwinds its own stack, on the stack and through the unwinder a capture it
/// interrupts is using.
std::atomic<int> g_signals_handled{0};
void unwind_in_the_handler(int) {
  void* frames[64];
  ::backtrace(frames, 64);
  g_signals_handled.fetch_add(1);
}

TEST(CallStackTest, SignalsArrivingDuringCapturesLeaveEveryRangeItsOwnStack) {
  void* warm[4];
  ::backtrace(warm, 4);  // glibc loads libgcc's unwinder on its first call, which a handler must not
  struct sigaction handler {};
  handler.sa_handler = unwind_in_the_handler;
  sigemptyset(&handler.sa_mask);
  struct sigaction previous {};
  ASSERT_EQ(::sigaction(SIGURG, &handler, &previous), 0);
  for (const auto unwinder : {dlprof::StackUnwinder::UnwindTables, dlprof::StackUnwinder::FramePointers}) {
    SCOPED_TRACE(std::string(dlprof::to_string(unwinder)));
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_stack(true).stack_unwinder(unwinder));
    profiler.start();
    g_signals_handled = 0;
    std::atomic<bool> done{false};
    std::uint64_t ranges = 0;
    std::thread worker([&] {
      // Until a hundred signals have come, however busy the machine.
      for (; ranges < 4000 || g_signals_handled.load() < 100; ++ranges) range_at_depth(ranges % 2 == 0 ? 0 : 20);
      done = true;
    });
    while (!done.load()) {
      ::pthread_kill(worker.native_handle(), SIGURG);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    worker.join();
    profiler.stop();
    const auto trace = profiler.last_trace();
    ASSERT_NE(trace, nullptr);
    std::map<std::uint32_t, std::uint64_t> ranges_by_stack;
    for (const TraceEvent& event : trace->events)
      if (trace->name_of(event) == "range_while_signalled") ++ranges_by_stack[event.stack];
    EXPECT_GE(g_signals_handled.load(), 100);
    EXPECT_EQ(trace->stackless_events, 0u);
    EXPECT_EQ(ranges_by_stack.count(TraceEvent::kNoStack), 0u);
    // Where this build omits frame pointers, a walk by them stops early: no depth to compare.
    if (unwinder == dlprof::StackUnwinder::FramePointers) continue;
    // Two call sites, two stacks, 20 frames apart, whatever the signals interrupted.
    ASSERT_EQ(ranges_by_stack.size(), 2u);
    const std::uint32_t shallow = ranges_by_stack.begin()->first;
    const std::uint32_t deep = std::next(ranges_by_stack.begin())->first;
    const std::int64_t depths[2] = {trace->stacks.at(shallow).depth, trace->stacks.at(deep).depth};
    EXPECT_EQ(std::abs(depths[1] - depths[0]), 20) << depths[0] << " and " << depths[1] << " frames";
    EXPECT_EQ(ranges_by_stack.begin()->second + std::next(ranges_by_stack.begin())->second, ranges);
  }
  dlprof::detail::g_stack_capture.by_frame_pointers.store(false);
  ASSERT_EQ(::sigaction(SIGURG, &previous, nullptr), 0);
}

TEST(StackTableTest, AFullTableKeepsNoNewStackAndCountsIt) {
  StackTable table(2 * dlprof::detail::interned_stack_bytes(3));
  const std::uintptr_t first[] = {1, 2, 3};
  const std::uintptr_t second[] = {1, 2, 4};
  const std::uintptr_t third[] = {1, 2, 5};
  const auto kept = table.intern(first, 3);
  ASSERT_NE(kept.id, dlprof::detail::kNoStackId);
  ASSERT_NE(table.intern(second, 3).id, dlprof::detail::kNoStackId);
  EXPECT_EQ(table.lost(), 0u);
  EXPECT_EQ(table.intern(third, 3).id, dlprof::detail::kNoStackId);
  EXPECT_EQ(table.lost(), 1u);
  EXPECT_EQ(table.intern(first, 3).id, kept.id) << "a stack kept before is still found";
  EXPECT_EQ(table.intern(third, 3).id, dlprof::detail::kNoStackId);
  EXPECT_EQ(table.lost(), 2u);
}

}  // namespace call_stack_test
