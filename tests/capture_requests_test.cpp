// The ways a capture or a dump is asked for, without a Profiler: the program's call, the signal,
// and the trigger file (read and removed, looked for at most every 200 ms, a bad one warned about
// once), and the order they are taken in.
#include <dlprof/detail/control/capture_requests.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_files.hpp"

namespace capture_requests_test {

namespace fs = std::filesystem;
using dlprof::detail::CaptureRequests;
using dlprof::detail::kTriggerFilePeriodNs;
using dlprof_test::TempDir;
using testing::HasSubstr;

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CaptureRequestsTest, TheProgramAsksOnceUntilTheRequestIsTaken) {
  CaptureRequests requests;
  EXPECT_EQ(requests.take_from_code(), std::nullopt);
  EXPECT_TRUE(requests.ask(4));
  EXPECT_FALSE(requests.ask(9)) << "one pending request at a time";
  const auto steps = requests.take_from_code();
  ASSERT_TRUE(steps.has_value());
  EXPECT_EQ(steps->steps, 4);
  EXPECT_EQ(steps->duration_ns, 0);
  EXPECT_EQ(steps->source, "prof.capture()");
  EXPECT_TRUE(requests.ask(-2'000'000'000));
  const auto timed = requests.take_from_code();
  ASSERT_TRUE(timed.has_value());
  EXPECT_EQ(timed->duration_ns, 2'000'000'000);
  EXPECT_EQ(timed->source, "prof.capture_for()");
  EXPECT_FALSE(requests.ask(0));
}

TEST(CaptureRequestsTest, TheTriggerFileIsReadRemovedAndLookedForEvery200Ms) {
  TempDir dir;
  const fs::path trigger = dir.path() / "capture-now";
  CaptureRequests requests(trigger.string());
  EXPECT_EQ(requests.take_trigger_file(0), std::nullopt) << "no file, no request";
  write_file(trigger, "steps=7 record_shapes=1\n");
  EXPECT_EQ(requests.take_trigger_file(kTriggerFilePeriodNs - 1), std::nullopt) << "looked for 200 ms ago at most";
  EXPECT_TRUE(fs::exists(trigger));
  const auto request = requests.take_trigger_file(kTriggerFilePeriodNs);
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->steps, 7);
  EXPECT_EQ(request->record_shapes, true);
  EXPECT_EQ(request->source, "the trigger file");
  EXPECT_FALSE(fs::exists(trigger)) << "a request is taken once";
  EXPECT_EQ(requests.take_trigger_file(3 * kTriggerFilePeriodNs), std::nullopt);
}

TEST(CaptureRequestsTest, AnEmptyTriggerFileAsksForTheDefaultsAndBadWordsAreNamed) {
  TempDir dir;
  const fs::path trigger = dir.path() / "t";
  CaptureRequests requests(trigger.string());
  write_file(trigger, "");
  const auto defaults = requests.take_trigger_file(0);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->steps, dlprof::detail::kDefaultCaptureSteps);
  write_file(trigger, "steps=lots");
  testing::internal::CaptureStderr();
  const auto kept = requests.take_trigger_file(kTriggerFilePeriodNs);
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("'steps=lots' is not steps=N"));
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->steps, dlprof::detail::kDefaultCaptureSteps);
}

TEST(CaptureRequestsTest, ATriggerFileThatCannotBeReadIsWarnedAboutOnce) {
  TempDir dir;
  write_file(dir.path() / "a-file", "x");
  CaptureRequests requests((dir.path() / "a-file" / "trigger").string());  // ENOTDIR, even for root
  testing::internal::CaptureStderr();
  EXPECT_EQ(requests.take_trigger_file(0), std::nullopt);
  EXPECT_EQ(requests.take_trigger_file(kTriggerFilePeriodNs), std::nullopt);
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, HasSubstr("DLPROF_TRIGGER_FILE="));
  EXPECT_THAT(printed, HasSubstr("cannot read it: Not a directory"));
  EXPECT_EQ(printed.find("warning", printed.find("warning") + 1), std::string::npos) << "warned twice: " << printed;
}

TEST(CaptureRequestsTest, AllRequestsAreTakenInOrderProgramSignalTriggerFile) {
  TempDir dir;
  const fs::path trigger = dir.path() / "t";
  CaptureRequests requests(trigger.string());
  write_file(trigger, "seconds=1.5");
  ASSERT_TRUE(requests.ask(3));
  const std::uint64_t signals_before = dlprof::detail::g_capture_signals_received.load();
  dlprof::detail::note_capture_signal(0);  // what the signal handler does
  const auto all = requests.take_all(0, "capture");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].source, "prof.capture()");
  EXPECT_EQ(all[1].source, "the capture signal");
  EXPECT_EQ(all[2].source, "the trigger file");
  EXPECT_EQ(all[2].duration_ns, 1'500'000'000);
  EXPECT_EQ(dlprof::detail::g_capture_signals_received.load(), signals_before + 1);
  EXPECT_TRUE(requests.take_all(kTriggerFilePeriodNs, "capture").empty());
}

}  // namespace capture_requests_test
