// Ranges reach an NVTX tool the way they reach Nsight Systems: these tests run (CTest
// nvtx_ranges_reach_an_injected_tool) with NVTX_INJECTION64_PATH pointing at tests/nvtx_tool (a
// recording tool) and read back its log.
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> tool_log() {
  std::ifstream file(std::getenv("DLPROF_NVTX_TOOL_LOG"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

/// The lines logged while `body` runs.
template <class Body>
std::vector<std::string> lines_logged_by(Body&& body) {
  dlprof::detail::nvtx_domain();  // the domain's creation is logged once, not inside `body`
  const std::size_t before = tool_log().size();
  body();
  const std::vector<std::string> after = tool_log();
  return std::vector<std::string>(after.begin() + static_cast<std::ptrdiff_t>(before), after.end());
}

TEST(Nvtx, ToolIsDetectedFromTheInjectionVariable) {
  ASSERT_NE(std::getenv("NVTX_INJECTION64_PATH"), nullptr) << "run this test through CTest";
  EXPECT_NE(dlprof::detail::active_flags() & dlprof::detail::kNvtxAttached, 0u);
}

TEST(Nvtx, LiteralRangeIsPushedInTheDlprofDomainWithRegisteredNameCategoryAndColour) {
  const auto lines = lines_logged_by([] { DLPROF_RANGE("forward", dlprof::Category::Forward); });
  EXPECT_THAT(lines, ElementsAre("push dlprof 3 ff3d85c6 registered:forward", "pop dlprof"));
}

TEST(Nvtx, DomainAndCategoriesAreNamed) {
  { DLPROF_RANGE("first use creates the domain"); }
  const auto log = tool_log();
  EXPECT_THAT(log, Contains("domain dlprof"));
  EXPECT_THAT(log, Contains("category dlprof 1 User"));
  EXPECT_THAT(log, Contains("category dlprof 2 DataLoader"));
  EXPECT_THAT(log, Contains("category dlprof 6 Communication"));
}

TEST(Nvtx, FormattedRangeIsNamedEvenWhenNotRecording) {
  const auto lines = lines_logged_by([] { DLPROF_RANGE_F("epoch {} step {}", 3, 14); });
  EXPECT_THAT(lines, ElementsAre("push dlprof 1 ff76b900 ascii:epoch 3 step 14", "pop dlprof"));
}

TEST(Nvtx, RangesNestAndStayBalancedWhileRecording) {
  dlprof::Profiler profiler;
  profiler.start();
  const auto lines = lines_logged_by([] {
    DLPROF_RANGE("outer", dlprof::Category::Optimizer);
    const dlprof::ScopedRange inner("inner", dlprof::Category::Backward);
  });
  profiler.stop();
  EXPECT_THAT(lines, ElementsAre("push dlprof 5 ffd35400 registered:outer", "push dlprof 4 ff8e44ad ascii:inner",
                                 "pop dlprof", "pop dlprof"));
  ASSERT_NE(profiler.last_trace(), nullptr);
  EXPECT_EQ(profiler.key_averages().find("outer")->calls, 1u);
}

TEST(Nvtx, EveryProfilerStepIsAnNvtxRangeOnTheSteppingThread) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(1, 0, 1, 1)));
  const auto lines = lines_logged_by([&] {
    profiler.start();
    profiler.step();
    profiler.stop();
  });
  EXPECT_THAT(lines, ElementsAre("push dlprof 7 ff7f8c8d ascii:ProfilerStep#0", "pop dlprof",
                                 "push dlprof 7 ff7f8c8d ascii:ProfilerStep#1", "pop dlprof"));
}

TEST(Nvtx, MarkIsAnNvtxMark) {
  const auto lines = lines_logged_by([] { dlprof::mark("checkpoint saved"); });
  EXPECT_THAT(lines, ElementsAre("mark dlprof ascii:checkpoint saved"));
}

TEST(Nvtx, FunctionRangeIsNamedAfterTheFunction) {
  const auto lines = lines_logged_by([] { DLPROF_FUNCTION(); });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr("registered:operator()"));
}

}  // namespace
