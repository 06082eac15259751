// A trainer's translation unit built without NDEBUG (a Debug build) that includes dlprof/torch.hpp
// and asks for shapes: LibTorch's RecordFunction::inputs() asserts there, so the observer leaves
// shapes out with one warning, and records the ops. Its own executable: a TU without NDEBUG
// defines the observer differently from one with it.
#include <dlprof/profiler.hpp>
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace {

static_assert(!dlprof::detail::TorchOpObserver::kCanReadInputs, "this file is built without NDEBUG");

TEST(TorchDebugTest, ShapesAreLeftOutWithOneWarningAndOpsAreStillRecorded) {
  testing::internal::CaptureStderr();
  std::size_t ops = 0;
  for (int run = 0; run < 2; ++run) {
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
    profiler.start();
    auto a = torch::randn({4, 8}, torch::requires_grad());
    torch::mm(a, torch::randn({8, 8})).sum().backward();
    profiler.stop();
    for (const dlprof::TraceEvent& event : profiler.last_trace()->events) {
      ops += event.kind == dlprof::EventKind::Op;
      EXPECT_EQ(event.inputs, dlprof::TraceEvent::kNoInputs);
    }
  }
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_GT(ops, 20u);
  EXPECT_THAT(printed, testing::HasSubstr("record_shapes and with_flops need NDEBUG"));
  EXPECT_EQ(printed.find("dlprof: warning", printed.find("dlprof: warning") + 1), std::string::npos) << printed;
}

}  // namespace
