// The Profiler compiled once, in the dlprof::runtime library: this file parses profiler.hpp's
// declarations alone (DLPROF_RUNTIME_LIBRARY; check_profiler_declarations.cmake checks which
// headers) and drives Profilers the library defines, in each mode.
#include <dlprof/detail/recording/ring_registry.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

static_assert(DLPROF_RUNTIME_LIBRARY == 1, "this file is built against dlprof::runtime");

namespace runtime_library_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct KeptTraces {
  std::vector<std::shared_ptr<const dlprof::Trace>> traces;
  dlprof::TraceHandler handler() {
    return [this](const dlprof::Trace& trace) { traces.push_back(std::make_shared<dlprof::Trace>(trace)); };
  }
};

std::vector<std::string> step_names(const dlprof::Trace& trace) {
  std::vector<std::string> steps;
  for (const dlprof::TraceEvent& event : trace.events)
    if (trace.names[event.name].rfind("ProfilerStep#", 0) == 0) steps.push_back(trace.names[event.name]);
  return steps;
}

std::size_t count_named(const dlprof::Trace& trace, std::string_view name) {
  std::size_t count = 0;
  for (const dlprof::TraceEvent& event : trace.events) count += trace.names[event.name] == name;
  return count;
}

TEST(RuntimeLibraryTest, AScheduledWindowReachesItsHandlerWithItsStepsAndRanges) {
  KeptTraces kept;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/1))
                                .on_trace_ready(kept.handler()));
  profiler.start();
  for (int step = 0; step < 6; ++step) {
    DLPROF_RANGE("library_work");
    profiler.step();
  }
  profiler.stop();
  ASSERT_EQ(kept.traces.size(), 1u);
  const dlprof::Trace& trace = *kept.traces[0];
  EXPECT_THAT(step_names(trace), ElementsAre("ProfilerStep#2", "ProfilerStep#3"));
  EXPECT_EQ(count_named(trace, "library_work"), 2u);
  EXPECT_EQ(profiler.last_trace()->events.size(), trace.events.size());
  EXPECT_THAT(fmt::format("{}", profiler.key_averages()), HasSubstr("library_work"));
  EXPECT_TRUE(profiler.errors().empty());
}

TEST(RuntimeLibraryTest, KeyAveragesPrintTheirTableAndRefuseAFormatSpec) {
  const dlprof::KeyAverages empty;
  EXPECT_EQ(fmt::format("{}", empty), empty.table());
  EXPECT_THROW(static_cast<void>(fmt::format(fmt::runtime("{:>80}"), empty)), std::runtime_error)
      << "fmt::format_error, which <fmt/core.h> does not declare";
}

TEST(RuntimeLibraryTest, TheDirectoryHandlerWritesItsTraceFile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    fmt::format("dlprof_runtime_library_{}", static_cast<long>(::getpid()));
  std::filesystem::remove_all(dir);
  {
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(dlprof::tensorboard_trace_handler(dir.string(), "lib")));
    dlprof::ProfilingScope scope(profiler);
    DLPROF_RANGE("written");
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().filename().string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].rfind("lib.", 0), 0u) << files[0];
  EXPECT_THAT(files[0], ::testing::EndsWith(".pt.trace.json"));
}

TEST(RuntimeLibraryTest, OnDemandCapturesAndFlightDumpsRunInTheLibrary) {
  KeptTraces captured;
  dlprof::Profiler on_demand(dlprof::ProfilerOptions{}.mode(dlprof::Mode::OnDemand).on_trace_ready(captured.handler()));
  on_demand.start();
  EXPECT_TRUE(on_demand.capture(2));
  EXPECT_FALSE(on_demand.capture()) << "one is already asked for";
  EXPECT_THROW(on_demand.capture_for(std::chrono::hours(25)), std::invalid_argument);
  for (int step = 0; step < 5; ++step) on_demand.step();
  on_demand.stop();
  ASSERT_EQ(captured.traces.size(), 1u);
  EXPECT_EQ(step_names(*captured.traces[0]).size(), 2u);

  KeptTraces dumped;
  dlprof::Profiler flight(
      dlprof::ProfilerOptions{}.mode(dlprof::Mode::FlightRecorder).flight_steps(2).slow_step_factor(0).on_trace_ready(dumped.handler()));
  flight.start();
  for (int step = 0; step < 4; ++step) flight.step();
  EXPECT_TRUE(flight.dump("asked from the library's caller"));
  flight.stop();
  ASSERT_EQ(dumped.traces.size(), 1u);
  EXPECT_EQ(dumped.traces[0]->flight_recorder_dump, "asked from the library's caller");
  EXPECT_THAT(step_names(*dumped.traces[0]), ElementsAre("ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"));
  EXPECT_EQ(flight.dumps(), 1u);
}

// A thread's first range is in this file and its ring is attached in the library's: the ring
// still goes back to the registry when the thread ends, and the window drains and forgets it.
TEST(RuntimeLibraryTest, AShortLivedThreadsRingGoesBackWhenItEnds) {
  KeptTraces kept;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(kept.handler()));
  profiler.start();
  constexpr std::size_t kThreads = 64;
  for (std::size_t i = 0; i < kThreads; ++i) std::thread([] { DLPROF_RANGE("short_lived_thread"); }).join();
  profiler.stop();
  ASSERT_EQ(kept.traces.size(), 1u);
  EXPECT_EQ(count_named(*kept.traces[0], "short_lived_thread"), kThreads);
  EXPECT_LE(dlprof::detail::RingRegistry::instance().ring_count(), 8u) << "the ended threads' rings were kept";
}

}  // namespace runtime_library_test
