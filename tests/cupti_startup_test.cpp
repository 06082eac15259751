// A program built with dlprof::cupti on a machine where GPU collection cannot start (no driver,
// no device, CUPTI missing or owned by another profiler): it starts, warns once naming the cause,
// and writes a valid CPU-only trace. On a machine with a working GPU there is nothing to check.
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "test_files.hpp"

namespace {

static_assert(DLPROF_HAS_CUPTI, "this test checks a program linked with dlprof::cupti");

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

TEST(CuptiStartupTest, WithoutAUsableGpuWarnsOnceAndWritesACpuOnlyTrace) {
  dlprof_test::TempDir dir;
  testing::internal::CaptureStderr();
  for (int run = 0; run < 2; ++run) {  // a second profiler must not warn again
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                  .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                  .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/3, /*repeat=*/1))
                                  .on_trace_ready(dlprof::tensorboard_trace_handler(dir.path().string(), "worker")));
    profiler.start();
    for (int step = 0; step < 5; ++step) {
      DLPROF_RANGE("train_step");
      profiler.step();
    }
    profiler.stop();
  }
  const std::string printed = testing::internal::GetCapturedStderr();
  const std::string reason = dlprof::detail::CuptiBackend::instance().unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "GPU activity is available on this machine: nothing to degrade";

  EXPECT_EQ(count_of(printed, "dlprof: warning"), 1u) << printed;
  EXPECT_THAT(printed, testing::HasSubstr("GPU activity will not be recorded (CPU only): " + reason));

  std::size_t traces = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++traces;
    const nlohmann::json trace = nlohmann::json::parse(dlprof_test::read_file(entry.path()));
    std::size_t steps = 0;
    for (const auto& event : trace["traceEvents"]) {
      EXPECT_NE(event.value("cat", ""), "kernel");
      EXPECT_NE(event.value("cat", ""), "cuda_runtime");
      if (event.value("name", "").rfind("ProfilerStep#", 0) == 0) ++steps;
    }
    EXPECT_EQ(steps, 3u);
    EXPECT_FALSE(trace.contains("dlprof_gpu_records")) << "no GPU collection stats without GPU collection";
  }
  EXPECT_EQ(traces, 2u);
}

}  // namespace
