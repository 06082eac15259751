// A closed window on its way out, without a Profiler: where its trace is built and its handlers
// run, what last_trace() waits for, and how failures of a build or a handler are kept.
#include <dlprof/detail/window/publisher.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace publisher_test {

using dlprof::Trace;
using dlprof::TraceHandler;
using dlprof::detail::ClosedWindow;
using dlprof::detail::TracePublisher;
using testing::HasSubstr;

/// A build that names each trace after its window's start.
std::shared_ptr<const Trace> named_trace(ClosedWindow&& window) {
  if (window.start_ns < 0) throw std::runtime_error("a window of negative time");
  auto trace = std::make_shared<Trace>();
  trace->window_start_ns = window.start_ns;
  return trace;
}

std::shared_ptr<ClosedWindow> window_at(std::int64_t start_ns) {
  auto window = std::make_shared<ClosedWindow>();
  window->start_ns = start_ns;
  return window;
}

TEST(TracePublisherTest, BackgroundHandlersRunOnTheWriterThreadAndLastTraceWaitsForTheBuild) {
  std::atomic<int> calls{0};
  std::thread::id handler_thread;
  std::vector<TraceHandler> handlers{TraceHandler(
      [&](const Trace& trace) {
        handler_thread = std::this_thread::get_id();
        EXPECT_EQ(trace.window_start_ns, 7);
        ++calls;
      },
      /*run_in_background=*/true)};
  TracePublisher<> publisher(handlers, &named_trace);
  EXPECT_EQ(publisher.last_trace(), nullptr);
  publisher.publish(window_at(7), /*handlers_here=*/false);
  const auto trace = publisher.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->window_start_ns, 7);
  publisher.wait_idle();
  EXPECT_EQ(calls, 1);
  EXPECT_NE(handler_thread, std::this_thread::get_id());
  EXPECT_FALSE(publisher.on_writer_thread());
}

TEST(TracePublisherTest, AHandlerOfTheCallersThreadKeepsTheBuildHereAndBackgroundOnesStayBackground) {
  std::thread::id here, background;
  std::vector<TraceHandler> handlers{TraceHandler([&](const Trace&) { here = std::this_thread::get_id(); }),
                                     TraceHandler([&](const Trace&) { background = std::this_thread::get_id(); }, true)};
  TracePublisher<> publisher(handlers, &named_trace);
  publisher.publish(window_at(1), /*handlers_here=*/false);
  publisher.wait_idle();
  EXPECT_EQ(here, std::this_thread::get_id());
  EXPECT_NE(background, std::this_thread::get_id());
  background = {};
  publisher.publish(window_at(2), /*handlers_here=*/true);  // std::terminate's dump: everything here
  EXPECT_EQ(background, std::this_thread::get_id());
  EXPECT_EQ(publisher.last_trace()->window_start_ns, 2);
}

TEST(TracePublisherTest, AFailingHandlerIsPrintedOnceKeptAlwaysAndTheOthersStillRun) {
  int later_calls = 0;
  std::vector<TraceHandler> handlers{
      TraceHandler([](const Trace&) { throw std::runtime_error("disk full"); }, true),
      TraceHandler([&](const Trace&) { ++later_calls; }, true)};
  TracePublisher<> publisher(handlers, &named_trace);
  testing::internal::CaptureStderr();
  for (int window = 0; window < 3; ++window) publisher.publish(window_at(window), false);
  publisher.wait_idle();
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, HasSubstr("on_trace_ready handler failed: disk full (later failures of it are kept"));
  EXPECT_EQ(printed.find("disk full", printed.find("disk full") + 1), std::string::npos) << "printed twice: " << printed;
  EXPECT_EQ(publisher.errors().size(), 3u);
  EXPECT_EQ(later_calls, 3);
}

TEST(TracePublisherTest, AFailedBuildIsAnErrorAndTheLastTraceStays) {
  std::vector<TraceHandler> handlers{TraceHandler([](const Trace&) {}, true)};
  TracePublisher<> publisher(handlers, &named_trace);
  publisher.publish(window_at(5), false);
  testing::internal::CaptureStderr();
  publisher.publish(window_at(-1), false);
  EXPECT_EQ(publisher.last_trace()->window_start_ns, 5);
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("building the trace failed: a window of negative time"));
  EXPECT_THAT(publisher.errors(), testing::ElementsAre("building the trace failed: a window of negative time"));
}

TEST(TracePublisherTest, ErrorsBeyondTheLimitAreCounted) {
  std::vector<TraceHandler> handlers;
  TracePublisher<> publisher(handlers, &named_trace);
  testing::internal::CaptureStderr();
  for (std::size_t i = 0; i < TracePublisher<>::kMaxErrorsKept + 5; ++i) publisher.record_error("full", 0);
  testing::internal::GetCapturedStderr();
  const std::vector<std::string> errors = publisher.errors();
  ASSERT_EQ(errors.size(), TracePublisher<>::kMaxErrorsKept + 1);
  EXPECT_EQ(errors.back(), "5 more errors left out");
}

TEST(TracePublisherTest, ABackgroundHandlerAskingForTheLastTraceIsNotMadeToWaitForItself) {
  std::shared_ptr<const Trace> seen;
  TracePublisher<>* self = nullptr;
  std::vector<TraceHandler> handlers{TraceHandler([&](const Trace&) { seen = self->last_trace(); }, true)};
  TracePublisher<> publisher(handlers, &named_trace);
  self = &publisher;
  publisher.publish(window_at(3), false);
  publisher.wait_idle();
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(seen->window_start_ns, 3);
}

}  // namespace publisher_test
