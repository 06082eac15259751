// The symboliser of call stacks (import/symbolize.hpp): frames of this test program become its
// functions and lines, the fast mode gives functions alone, and modules that are missing, changed
// or not ELF are named while their frames keep their addresses.
#include <dlprof/detail/recording/stack_walk.hpp>
#include <dlprof/detail/window/module_map.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/import/symbolize.hpp>

#include "test_files.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace symbolize_test {

using dlprof::CallStack;
using dlprof::StackFrame;
using dlprof::Trace;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

/// A trace of one op whose stack is `frames`, with this process's modules.
Trace trace_of_frames(const std::vector<std::uintptr_t>& frames) {
  Trace trace;
  trace.modules = dlprof::detail::loaded_modules();
  trace.stacks = {CallStack{0, static_cast<std::uint32_t>(frames.size())}};
  for (const std::uintptr_t address : frames) trace.stack_frames.push_back(StackFrame{address, StackFrame::kNoText});
  return trace;
}

std::vector<std::string> frame_texts(const Trace& trace) {
  std::vector<std::string> texts;
  for (const StackFrame& frame : trace.stack_frames)
    texts.push_back(frame.text == StackFrame::kNoText ? std::string("<address>") : trace.names.at(frame.text));
  return texts;
}

DLPROF_NOINLINE std::vector<std::uintptr_t> stack_of_a_known_function() {
  std::vector<std::uintptr_t> frames(8);
  frames.resize(dlprof::detail::unwind_with_libgcc(frames.data(), frames.size()));
  return frames;
}

TEST(SymbolizeTest, FramesOfThisProgramBecomeItsFunctionsAndLines) {
  Trace trace = trace_of_frames(stack_of_a_known_function());
  ASSERT_FALSE(trace.stack_frames.empty());
  const dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace);
  EXPECT_THAT(result.problems, ::testing::IsEmpty());
  EXPECT_GE(result.symbolised, 2u);
  const std::vector<std::string> texts = frame_texts(trace);
  EXPECT_THAT(texts.front(), AllOf(HasSubstr("symbolize_test.cpp("), HasSubstr("stack_of_a_known_function()")))
      << "the innermost frame: the function the stack was taken in, and its line";
  EXPECT_THAT(texts, Contains(HasSubstr("SymbolizeTest_FramesOfThisProgramBecomeItsFunctionsAndLines_Test::TestBody()")));
  // Written as torch writes its frames, and read back as text.
  fmt::memory_buffer out;
  trace.threads = {{1, "main"}};
  dlprof::TraceEvent op;
  op.kind = dlprof::EventKind::Op;
  op.name = static_cast<std::uint32_t>(trace.names.size());
  trace.names.push_back("op");
  op.stack = 0;
  trace.events = {op};
  dlprof::write_chrome_trace(trace, out, "t");
  EXPECT_THAT(std::string(out.data(), out.size()), HasSubstr("stack_of_a_known_function();"));
}

TEST(SymbolizeTest, TheFastModeGivesFunctionsWithoutLines) {
  Trace trace = trace_of_frames(stack_of_a_known_function());
  dlprof::SymbolizeOptions options;
  options.lines = false;
  const dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace, options);
  EXPECT_GE(result.symbolised, 2u);
  const std::vector<std::string> texts = frame_texts(trace);
  EXPECT_THAT(texts.front(), AllOf(HasSubstr("stack_of_a_known_function()"), Not(HasSubstr(".cpp(")), HasSubstr("+0x")));
}

TEST(SymbolizeTest, AModuleMissingChangedOrNotElfIsNamedAndItsFramesKeepTheirAddresses) {
  dlprof_test::TempDir dir;
  const std::string not_elf = (dir.path() / "libnot_elf.so").string();
  std::ofstream(not_elf) << "not an ELF file";
  Trace trace;
  trace.modules = {dlprof::LoadedModule{"/nonexistent/libgone.so", "", 0x10000, 0x11000, 0x12000},
                   dlprof::LoadedModule{not_elf, "", 0x20000, 0x21000, 0x22000},
                   dlprof::LoadedModule{dlprof::detail::executable_path(), "00112233", 0x30000, 0x31000, 0x32000}};
  trace.stacks = {CallStack{0, 4}};
  trace.stack_frames = {StackFrame{0x11010, StackFrame::kNoText}, StackFrame{0x21010, StackFrame::kNoText},
                        StackFrame{0x31010, StackFrame::kNoText}, StackFrame{0x99, StackFrame::kNoText}};
  const dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace);
  EXPECT_EQ(result.frames, 4u);
  EXPECT_EQ(result.symbolised, 0u);
  EXPECT_THAT(result.problems,
              ::testing::ElementsAre(AllOf(HasSubstr("/nonexistent/libgone.so: cannot be read"), HasSubstr("keep their addresses")),
                                     AllOf(HasSubstr("libnot_elf.so: not an ELF file")),
                                     AllOf(HasSubstr("changed since the run"), HasSubstr("the trace's 00112233"))));
  for (const StackFrame& frame : trace.stack_frames) EXPECT_EQ(frame.text, StackFrame::kNoText);
  EXPECT_EQ(trace.stack_frames[0].address, 0x11010u);
}

TEST(SymbolizeTest, ALibraryUnloadedAfterTheRunIsReadFromItsFile) {
  void* library = ::dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) GTEST_SKIP() << "libunwind.so.8 is absent: " << ::dlerror();
  const auto address = reinterpret_cast<std::uintptr_t>(::dlsym(library, "unw_backtrace"));
  ASSERT_NE(address, 0u);
  Trace trace = trace_of_frames({address + 1});  // a return address just inside the function
  ::dlclose(library);
  const dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace);
  EXPECT_THAT(result.problems, ::testing::IsEmpty());
  EXPECT_EQ(result.symbolised, 1u);
  EXPECT_THAT(frame_texts(trace).front(), AllOf(HasSubstr("backtrace"), HasSubstr("libunwind.so.8+0x")));
}

}  // namespace symbolize_test
