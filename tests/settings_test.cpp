// The launcher's settings (settings.hpp): DLPROF_* variables and the DLPROF_CONFIG file, their
// precedence over the program's options and each other, and the warnings that bad ones get. The
// last tests run a plain training loop (tests/settings/launched_training.cpp) as a child process
// under each setting and judge it by what it leaves.
#include <dlprof/detail/control/capture_requests.hpp>
#include <dlprof/detail/control/launched_options.hpp>
#include <dlprof/format/launch_protocol.hpp>
#include <dlprof/profiler.hpp>

#include "launched_training.hpp"
#include "test_files.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>


namespace {

namespace fs = std::filesystem;
using dlprof_test::files_in;
using dlprof_test::launch;
using dlprof_test::Launched;
using dlprof_test::read_file;
using dlprof_test::recorded_steps;
using dlprof_test::ScopedEnvironment;
using dlprof_test::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

/// An environment as `environ` holds one.
class FakeEnvironment {
 public:
  explicit FakeEnvironment(std::vector<std::string> entries) : entries_(std::move(entries)) {
    for (std::string& entry : entries_) pointers_.push_back(entry.data());
    pointers_.push_back(nullptr);
  }
  const char* const* get() const { return pointers_.data(); }

 private:
  std::vector<std::string> entries_;
  std::vector<char*> pointers_;
};

dlprof::detail::Settings settings_of(std::vector<std::string> entries) {
  const FakeEnvironment environment(std::move(entries));
  return dlprof::detail::read_settings(environment.get());
}

dlprof::detail::LaunchedOptions launched_with(std::vector<std::string> entries,
                                              dlprof::ProfilerOptions options = dlprof::ProfilerOptions{}) {
  return dlprof::detail::apply_settings(std::move(options), settings_of(std::move(entries)));
}

TEST(SettingsTest, ScheduleTakesTorchsArgumentsInTorchsOrder) {
  std::string problem;
  const auto three = dlprof::detail::parse_schedule("1,2,3", problem);
  ASSERT_TRUE(three.has_value()) << problem;
  EXPECT_EQ(three->wait(), 1);
  EXPECT_EQ(three->warmup(), 2);
  EXPECT_EQ(three->active(), 3);
  EXPECT_EQ(three->repeat(), 0);
  EXPECT_EQ(three->skip_first(), 0);
  const auto five = dlprof::detail::parse_schedule(" 0, 1 ,2,4,10 ", problem);
  ASSERT_TRUE(five.has_value()) << problem;
  EXPECT_EQ(five->repeat(), 4);
  EXPECT_EQ(five->skip_first(), 10);
  EXPECT_EQ((*five)(10), dlprof::Action::Warmup);
  EXPECT_EQ((*five)(12), dlprof::Action::RecordAndSave);
}

TEST(SettingsTest, MalformedSchedulesAreRefusedWithTheReason) {
  for (const char* text : {"", "1,1", "1,1,3,1,1,1", "a,b,c", "1,,3", "1,1,-3", "1,1,3,", "99999999999999999999,1,1"}) {
    std::string problem;
    EXPECT_FALSE(dlprof::detail::parse_schedule(text, problem).has_value()) << text;
    EXPECT_THAT(problem, HasSubstr("wait,warmup,active")) << text;
  }
  std::string problem;
  EXPECT_FALSE(dlprof::detail::parse_schedule("1,1,0", problem).has_value());
  EXPECT_THAT(problem, HasSubstr("active must be in [1, 2^60], got 0"));
}

TEST(SettingsTest, FlagsAndCounts) {
  for (const char* on : {"1", "true", "YES", " on "}) EXPECT_EQ(dlprof::detail::parse_flag(on), true) << on;
  for (const char* off : {"0", "False", "no", "OFF"}) EXPECT_EQ(dlprof::detail::parse_flag(off), false) << off;
  for (const char* neither : {"", "2", "enabled", "yes please"}) EXPECT_FALSE(dlprof::detail::parse_flag(neither)) << neither;
  EXPECT_EQ(dlprof::detail::parse_count("65536"), 65536);
  EXPECT_EQ(dlprof::detail::parse_count("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", "-1", "1e6", "64k", "9223372036854775808", "0x10"})
    EXPECT_FALSE(dlprof::detail::parse_count(bad)) << bad;
}

TEST(SettingsTest, EnvironmentOverridesTheProgramsOptions) {
  const auto launched = launched_with(
      {"PATH=/usr/bin", "DLPROF_SCHEDULE=1,1,2,3", "DLPROF_ACTIVITIES=cpu", "DLPROF_RECORD_SHAPES=1",
       "DLPROF_PROFILE_MEMORY=yes", "DLPROF_WITH_FLOPS=on", "DLPROF_EVENTS_PER_THREAD=4096", "DLPROF_GPU_RECORDS=1000",
       "DLPROF_WITH_STACK=1", "DLPROF_STACK_DEPTH=12", "DLPROF_STACK_UNWINDER=frame_pointers"},
      dlprof::ProfilerOptions{}.schedule(dlprof::schedule(5, 5, 5)).activities({dlprof::Activity::CPU, dlprof::Activity::CUDA}));
  EXPECT_THAT(launched.warnings, IsEmpty());
  EXPECT_EQ(launched.mode, dlprof::Mode::Scheduled);
  const dlprof::ProfilerOptions& options = launched.options;
  EXPECT_EQ(options.schedule().wait(), 1);
  EXPECT_EQ(options.schedule().active(), 2);
  EXPECT_EQ(options.schedule().repeat(), 3);
  EXPECT_THAT(options.activities(), ElementsAre(dlprof::Activity::CPU));
  EXPECT_TRUE(options.record_shapes());
  EXPECT_TRUE(options.profile_memory());
  EXPECT_TRUE(options.with_flops());
  EXPECT_TRUE(options.with_stack());
  EXPECT_EQ(options.stack_depth(), 12u);
  EXPECT_EQ(options.stack_unwinder(), dlprof::StackUnwinder::FramePointers);
  EXPECT_EQ(options.events_per_thread(), 4096u);
  EXPECT_EQ(options.gpu_records_per_window(), 1000u);
}

TEST(SettingsTest, ABadValueIsWarnedAboutNamingItAndTheProgramsOptionIsKept) {
  const auto launched = launched_with(
      {"DLPROF_SCHEDULE=every other step", "DLPROF_ACTIVITIES=cpu,tpu", "DLPROF_RECORD_SHAPES=maybe",
       "DLPROF_EVENTS_PER_THREAD=1", "DLPROF_GPU_RECORDS=lots", "DLPROF_MODE=sometimes"},
      dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 1, 2)).record_shapes(true).events_per_thread(1024));
  EXPECT_EQ(launched.mode, dlprof::Mode::Scheduled);
  EXPECT_EQ(launched.options.schedule().warmup(), 1);
  EXPECT_EQ(launched.options.schedule().active(), 2);
  EXPECT_THAT(launched.options.activities(), ElementsAre(dlprof::Activity::CPU));
  EXPECT_TRUE(launched.options.record_shapes());
  EXPECT_EQ(launched.options.events_per_thread(), 1024u);
  EXPECT_EQ(launched.options.gpu_records_per_window(), dlprof::detail::kDefaultGpuRecordsPerWindow);
  EXPECT_THAT(launched.warnings,
              ElementsAre(AllOf(HasSubstr("DLPROF_MODE=sometimes (from the environment)"), HasSubstr("keeping the program's mode")),
                          AllOf(HasSubstr("DLPROF_SCHEDULE=every other step"), HasSubstr("wait,warmup,active"),
                                HasSubstr("keeping the program's schedule")),
                          AllOf(HasSubstr("DLPROF_ACTIVITIES=cpu,tpu"), HasSubstr("keeping the program's activities")),
                          AllOf(HasSubstr("DLPROF_RECORD_SHAPES=maybe"), HasSubstr("keeping on")),
                          AllOf(HasSubstr("DLPROF_EVENTS_PER_THREAD=1"), HasSubstr("must be in [2,"), HasSubstr("keeping 1024")),
                          AllOf(HasSubstr("DLPROF_GPU_RECORDS=lots"), HasSubstr("expected a count"))));
}

TEST(SettingsTest, BadStackSettingsAreWarnedAboutAndTheProgramsKept) {
  const auto launched = launched_with({"DLPROF_WITH_STACK=sometimes", "DLPROF_STACK_DEPTH=0", "DLPROF_STACK_UNWINDER=dwarf"},
                                      dlprof::ProfilerOptions{}.with_stack(true).stack_depth(16));
  EXPECT_TRUE(launched.options.with_stack());
  EXPECT_EQ(launched.options.stack_depth(), 16u);
  EXPECT_EQ(launched.options.stack_unwinder(), dlprof::StackUnwinder::UnwindTables);
  EXPECT_THAT(launched.warnings,
              ElementsAre(AllOf(HasSubstr("DLPROF_WITH_STACK=sometimes"), HasSubstr("keeping on")),
                          AllOf(HasSubstr("DLPROF_STACK_UNWINDER=dwarf"), HasSubstr("expected unwind_tables or frame_pointers"),
                                HasSubstr("keeping unwind_tables")),
                          AllOf(HasSubstr("DLPROF_STACK_DEPTH=0"), HasSubstr("must be in [1, 256], got 0"), HasSubstr("keeping 16"))));
  EXPECT_THROW(dlprof::ProfilerOptions{}.stack_depth(257), std::invalid_argument);
}

TEST(SettingsTest, UnknownVariablesAreWarnedAboutAndOthersIgnored) {
  const auto settings = settings_of({"DLPROF_SCHEDUEL=1,1,3", "HOME=/root", "NOT_DLPROF_MODE=off", "DLPROF_NVTX=0"});
  EXPECT_THAT(settings.warnings, ElementsAre(HasSubstr("unknown variable DLPROF_SCHEDUEL")));
  ASSERT_EQ(settings.values.size(), 1u);
  EXPECT_EQ(settings.values[0].name, "DLPROF_NVTX");
}

TEST(SettingsTest, ABuildOptionInTheEnvironmentIsNamedAsOne) {
  const auto settings = settings_of({"DLPROF_USE_TORCH=1", "DLPROF_BUILD_TESTS=ON", "DLPROF_WITH_FLOPS=1"});
  EXPECT_THAT(settings.warnings,
              ElementsAre(HasSubstr("DLPROF_USE_TORCH is an option of dlprof's CMake build, not a setting"),
                          HasSubstr("DLPROF_BUILD_TESTS is an option of dlprof's CMake build, not a setting")));
  ASSERT_EQ(settings.values.size(), 1u);
  EXPECT_EQ(settings.values[0].name, "DLPROF_WITH_FLOPS");
}

TEST(SettingsTest, EachModeHasOneWordBothWays) {
  for (const dlprof::Mode mode :
       {dlprof::Mode::Scheduled, dlprof::Mode::Off, dlprof::Mode::OnDemand, dlprof::Mode::FlightRecorder})
    EXPECT_EQ(dlprof::detail::parse_mode(dlprof::to_string(mode)), mode) << dlprof::to_string(mode);
  EXPECT_EQ(dlprof::to_string(dlprof::Mode::FlightRecorder), "flight-recorder");
  EXPECT_EQ(dlprof::detail::parse_mode(" On-Demand "), dlprof::Mode::OnDemand);
  EXPECT_FALSE(dlprof::detail::parse_mode("ondemand").has_value());
}

TEST(SettingsTest, ModeOffIsRead) {
  EXPECT_EQ(launched_with({"DLPROF_MODE=off"}).mode, dlprof::Mode::Off);
  EXPECT_EQ(launched_with({"DLPROF_MODE=Scheduled"}).mode, dlprof::Mode::Scheduled);
}

TEST(SettingsTest, OutputAddsADirectoryHandlerOnlyWhereTheProgramSetsNone) {
  TempDir dir;
  const auto added = launched_with({"DLPROF_OUTPUT=" + dir.path().string(), "DLPROF_WORKER=rank0", "DLPROF_GZIP=1"});
  EXPECT_THAT(added.warnings, IsEmpty());
  ASSERT_EQ(added.options.handlers().size(), 1u);
  EXPECT_TRUE(added.options.handlers()[0].background);

  const auto kept = launched_with({"DLPROF_OUTPUT=" + dir.path().string()},
                                  dlprof::ProfilerOptions{}.on_trace_ready([](const dlprof::Trace&) {}));
  EXPECT_EQ(kept.options.handlers().size(), 1u);
  EXPECT_FALSE(kept.options.handlers()[0].background) << "the program's own handler, not a directory's";
  EXPECT_THAT(kept.warnings, ElementsAre(HasSubstr("sets its own on_trace_ready handlers")));

  const auto alone = launched_with({"DLPROF_WORKER=rank0", "DLPROF_GZIP=yes"});
  EXPECT_THAT(alone.options.handlers(), IsEmpty());
  EXPECT_THAT(alone.warnings, ElementsAre(HasSubstr("DLPROF_WORKER=rank0"), HasSubstr("DLPROF_GZIP=yes")));

  EXPECT_THAT(launched_with({"DLPROF_OUTPUT="}).warnings, ElementsAre(HasSubstr("is empty")));
}

TEST(SettingsTest, ConfigFileSettingsYieldToTheEnvironment) {
  TempDir dir;
  const fs::path config = dir.path() / "dlprof.conf";
  std::ofstream(config) << "# a job's profiling settings\n"
                           "DLPROF_SCHEDULE = 2,1,3   # two idle, one warm-up, three recorded\n"
                           "\n"
                           "DLPROF_RECORD_SHAPES=1\n"
                           "DLPROF_WITH_FLOPS = true\n"
                           "DLPROF_SCHEDULE_TYPO = 1\n"
                           "this line has no equals sign\n"
                           "DLPROF_CONFIG = /elsewhere\n";
  const auto settings = settings_of({"DLPROF_CONFIG=" + config.string(), "DLPROF_WITH_FLOPS=0"});
  const std::string file = config.string();
  EXPECT_THAT(settings.warnings, ElementsAre(AllOf(HasSubstr(file + ":6"), HasSubstr("unknown setting DLPROF_SCHEDULE_TYPO")),
                                             AllOf(HasSubstr(file + ":7"), HasSubstr("expected DLPROF_NAME = value")),
                                             AllOf(HasSubstr(file + ":8"), HasSubstr("from the environment only"))));
  const auto launched = dlprof::detail::apply_settings(dlprof::ProfilerOptions{}, settings);
  EXPECT_EQ(launched.options.schedule().wait(), 2);
  EXPECT_EQ(launched.options.schedule().active(), 3);
  EXPECT_TRUE(launched.options.record_shapes());
  EXPECT_FALSE(launched.options.with_flops()) << "the environment's 0 wins over the file's true";
  ASSERT_NE(settings.find("DLPROF_SCHEDULE"), nullptr);
  EXPECT_EQ(settings.find("DLPROF_SCHEDULE")->origin, file + ":2");

  const auto bad = launched_with({"DLPROF_CONFIG=" + file, "DLPROF_SCHEDULE=1,1,0"});
  EXPECT_EQ(bad.options.schedule().has_cycles(), false) << "a refused environment value does not fall back to the file's";
}

TEST(SettingsTest, AnUnreadableConfigFileIsWarnedAboutAndSkipped) {
  TempDir dir;
  const auto missing = settings_of({"DLPROF_CONFIG=" + (dir.path() / "absent.conf").string(), "DLPROF_MODE=off"});
  EXPECT_THAT(missing.warnings, ElementsAre(AllOf(HasSubstr("absent.conf"), HasSubstr("cannot read it"))));
  EXPECT_EQ(dlprof::detail::apply_settings(dlprof::ProfilerOptions{}, missing).mode, dlprof::Mode::Off);
  const auto directory = settings_of({"DLPROF_CONFIG=" + dir.path().string()});
  EXPECT_THAT(directory.warnings, ElementsAre(HasSubstr("its settings are not applied")));
}

TEST(SettingsTest, OnDemandAndTheCaptureSignalAreRead) {
  const auto launched = launched_with({"DLPROF_MODE=on-demand", "DLPROF_SIGNAL=SIGUSR1", "DLPROF_TRIGGER_FILE=/tmp/go"});
  EXPECT_THAT(launched.warnings, IsEmpty());
  EXPECT_EQ(launched.mode, dlprof::Mode::OnDemand);
  EXPECT_EQ(launched.capture_signal, SIGUSR1);
  EXPECT_EQ(launched.trigger_file, "/tmp/go");
  EXPECT_THAT(launched_with({"DLPROF_SIGNAL=USR1", "DLPROF_TRIGGER_FILE=/tmp/go"}).warnings,
              ElementsAre(AllOf(HasSubstr("DLPROF_SIGNAL=USR1"), HasSubstr("only DLPROF_MODE=on-demand and flight-recorder take")),
                          AllOf(HasSubstr("DLPROF_TRIGGER_FILE=/tmp/go"), HasSubstr("only DLPROF_MODE=on-demand and flight-recorder take"))));
  EXPECT_EQ(launched_with({"DLPROF_SIGNAL=none"}).capture_signal, 0);
  EXPECT_EQ(launched_with({"DLPROF_SIGNAL=12"}).capture_signal, 12);
  for (const char* refused : {"SEGV", "9", "KILL", "sigabrt", "often", "0"}) {
    const auto bad = launched_with({"DLPROF_MODE=on-demand", std::string("DLPROF_SIGNAL=") + refused});
    EXPECT_EQ(bad.capture_signal, SIGUSR2) << refused;
    EXPECT_THAT(bad.warnings, ElementsAre(HasSubstr("keeping SIGUSR2"))) << refused;
  }
}

TEST(SettingsTest, TriggerFileTextNamesTheCaptureAndItsOptions) {
  std::vector<std::string> problems;
  const auto request = [&](std::string_view text) { return dlprof::detail::parse_capture_request(text, problems); };
  EXPECT_EQ(request("").steps, 5);
  EXPECT_EQ(request("steps=3\n").steps, 3);
  const dlprof::detail::CaptureRequest full =
      request("steps=2 record_shapes=1\tprofile_memory=yes with_flops=0\nactivities=cpu seconds=1.5 with_stack=on");
  EXPECT_EQ(full.steps, 2);
  EXPECT_EQ(full.duration_ns, 1'500'000'000);
  EXPECT_EQ(full.record_shapes, true);
  EXPECT_EQ(full.profile_memory, true);
  EXPECT_EQ(full.with_flops, false);
  EXPECT_EQ(full.with_stack, true);
  EXPECT_EQ(full.activities, std::vector<dlprof::Activity>{dlprof::Activity::CPU});
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_EQ(request("steps=lots").steps, 5);
  const dlprof::detail::CaptureRequest bad = request("steps=0 please record_shapes=maybe activities=tpu seconds=-1");
  EXPECT_EQ(bad.steps, 5);
  EXPECT_FALSE(bad.record_shapes.has_value());
  EXPECT_FALSE(bad.activities.has_value());
  EXPECT_EQ(bad.duration_ns, 0);
  EXPECT_THAT(problems, ElementsAre(HasSubstr("'steps=lots'"), HasSubstr("'steps=0'"), HasSubstr("'please'"),
                                    HasSubstr("'record_shapes=maybe'"), HasSubstr("'activities=tpu'"),
                                    HasSubstr("'seconds=-1'")));
}

// What dlprof-capture writes into a trigger file is what the Profiler reads back, and a request
// for the defaults is an empty file.
TEST(SettingsTest, TriggerFileTextIsWrittenAsItIsRead) {
  using dlprof::detail::CaptureRequest;
  using dlprof::detail::format_capture_request;
  EXPECT_EQ(format_capture_request(CaptureRequest{}), "");
  CaptureRequest steps;
  steps.steps = 20;
  EXPECT_EQ(format_capture_request(steps), "steps=20\n");
  CaptureRequest full;
  full.steps = 3;
  full.duration_ns = 1'500'000'001;
  full.record_shapes = true;
  full.profile_memory = false;
  full.with_flops = true;
  full.with_stack = true;
  full.activities = std::vector<dlprof::Activity>{dlprof::Activity::CPU, dlprof::Activity::CUDA};
  const std::string text = format_capture_request(full);
  EXPECT_EQ(text, "steps=3 seconds=1.500000001 record_shapes=1 profile_memory=0 with_flops=1 with_stack=1 activities=cpu,cuda\n");
  std::vector<std::string> problems;
  const CaptureRequest read = dlprof::detail::parse_capture_request(text, problems);
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_EQ(read.steps, full.steps);
  EXPECT_EQ(read.duration_ns, full.duration_ns);
  EXPECT_EQ(read.record_shapes, full.record_shapes);
  EXPECT_EQ(read.profile_memory, full.profile_memory);
  EXPECT_EQ(read.with_flops, full.with_flops);
  EXPECT_EQ(read.with_stack, full.with_stack);
  EXPECT_EQ(read.activities, full.activities);
}

// dlprof-capture waits for the files dlprof-report reads: one rule for both.
TEST(SettingsTest, TraceFileNamesAreTheReadersAndTheCaptureToolsAlike) {
  using dlprof::detail::is_trace_file_name;
  for (const char* name : {"host_12.1716423322123456789.pt.trace.json", "host_12.1.pt.trace.json.gz",
                           "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "benchmark_result_493459_trace.json",
                           "vm_1.17.dlprof-crash"})
    EXPECT_TRUE(is_trace_file_name(name)) << name;
  for (const char* name : {"host_12.1.pt.trace.json.tmp.42.0", "trigger", "config.txt", ".json", "notes.md"})
    EXPECT_FALSE(is_trace_file_name(name)) << name;
}

/// Runs `steps` steps, each with a range.
void run_steps(dlprof::Profiler& profiler, int steps) {
  for (int i = 0; i < steps; ++i) {
    DLPROF_RANGE("on_demand_work");
    profiler.step();
  }
}

TEST(OnDemandTest, RecordsOnlyTheStepsAskedForThenIdlesUntilAskedAgain) {
  const ScopedEnvironment environment({{"DLPROF_MODE", "on-demand"}, {"DLPROF_SIGNAL", "none"}});
  std::vector<std::shared_ptr<const dlprof::Trace>> traces;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(
      [&traces](const dlprof::Trace& trace) { traces.push_back(std::make_shared<dlprof::Trace>(trace)); }));
  ASSERT_EQ(profiler.mode(), dlprof::Mode::OnDemand);
  profiler.start();
  run_steps(profiler, 4);
  EXPECT_THAT(traces, IsEmpty()) << "idle until asked";
  EXPECT_TRUE(profiler.capture(2));
  EXPECT_FALSE(profiler.capture(2)) << "one capture asked already";
  run_steps(profiler, 4);  // step 5 warms up, 6 and 7 are recorded, the trace is handed over as 8 begins
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_THAT(recorded_steps(*traces[0]), ElementsAre("ProfilerStep#6", "ProfilerStep#7"));
  run_steps(profiler, 3);
  EXPECT_EQ(traces.size(), 1u) << "idle again";
  EXPECT_TRUE(profiler.capture(1));
  run_steps(profiler, 3);
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_THAT(recorded_steps(*traces[1]), ElementsAre("ProfilerStep#13"));
  profiler.stop();
  EXPECT_THROW(profiler.capture(0), std::invalid_argument);
}

TEST(OnDemandTest, ScheduledAndOffProfilersRefuseCaptures) {
  dlprof::Profiler scheduled;
  EXPECT_FALSE(scheduled.capture());
  const ScopedEnvironment environment({{"DLPROF_MODE", "off"}, {"DLPROF_RECORD_SHAPES", "0"}});
  dlprof::Profiler off;
  EXPECT_FALSE(off.capture());
}

TEST(OnDemandTest, TheCaptureSignalAsksAndASecondSignalWithinTheIntervalIsRefused) {
  const ScopedEnvironment environment({{"DLPROF_MODE", "on-demand"}, {"DLPROF_SIGNAL", "USR1"}});
  std::vector<std::shared_ptr<const dlprof::Trace>> traces;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(
      [&traces](const dlprof::Trace& trace) { traces.push_back(std::make_shared<dlprof::Trace>(trace)); }));
  struct sigaction installed {};
  ASSERT_EQ(::sigaction(SIGUSR1, nullptr, &installed), 0);
  ASSERT_NE(installed.sa_handler, SIG_DFL) << "raising SIGUSR1 would end the test";
  ASSERT_EQ(::raise(SIGUSR1), 0);  // before start(): taken at the first step()
  profiler.start();
  run_steps(profiler, 2);  // step 1 warms up, the default 5 steps (2 to 6) are recorded
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(profiler.capture(3));
  ASSERT_EQ(::raise(SIGUSR1), 0);
  run_steps(profiler, 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("1 capture request by signal refused: signals that arrive together ask once, and one request by "
                        "signal is taken every 10 s at most"));
  EXPECT_EQ(profiler.signals_refused(), 1u);
  run_steps(profiler, 5);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_THAT(recorded_steps(*traces[0]),
              ElementsAre("ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"));
  profiler.stop();
}

/// An on-demand Profiler asked through a trigger file in a scratch directory, keeping its traces.
class TriggerFileTest : public ::testing::Test {
 protected:
  TempDir dir;
  const fs::path trigger = dir.path() / "capture-now";
  const ScopedEnvironment environment{
      {{"DLPROF_MODE", "on-demand"}, {"DLPROF_SIGNAL", "none"}, {"DLPROF_TRIGGER_FILE", trigger.string()}}};
  std::vector<std::shared_ptr<const dlprof::Trace>> traces;
  dlprof::Profiler profiler{dlprof::ProfilerOptions{}.on_trace_ready(
      [this](const dlprof::Trace& trace) { traces.push_back(std::make_shared<dlprof::Trace>(trace)); })};

  void SetUp() override { profiler.start(); }
};

TEST_F(TriggerFileTest, TheTriggerFileAsksAndIsConsumed) {
  run_steps(profiler, 2);
  std::ofstream(trigger) << "steps=3\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past the period between looks
  run_steps(profiler, 6);
  EXPECT_FALSE(fs::exists(trigger)) << "a trigger asks once";
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(recorded_steps(*traces[0]).size(), 3u);

  std::ofstream(trigger) << "steps=many";
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ::testing::internal::CaptureStderr();
  run_steps(profiler, 8);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("'steps=many' is not steps=N"));
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_EQ(recorded_steps(*traces[1]).size(), 5u) << "the default";
  profiler.stop();
}

TEST_F(TriggerFileTest, TheTriggerFileSetsTheCapturesOptionsForThatCaptureOnly) {
  run_steps(profiler, 1);
  std::ofstream(trigger) << "steps=2 record_shapes=1 with_flops=1";
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  run_steps(profiler, 2);
  EXPECT_TRUE(profiler.options().record_shapes()) << "during the capture";
  run_steps(profiler, 3);
  ASSERT_EQ(traces.size(), 1u);
  const auto& metadata = traces[0]->metadata;
  EXPECT_NE(std::find(metadata.begin(), metadata.end(), std::pair<std::string, std::string>{"record_shapes", "1"}), metadata.end());
  EXPECT_NE(std::find(metadata.begin(), metadata.end(), std::pair<std::string, std::string>{"with_flops", "1"}), metadata.end());
  EXPECT_FALSE(profiler.options().record_shapes()) << "the Profiler's own options after the capture";
  EXPECT_FALSE(profiler.options().with_flops());
  profiler.stop();
}

/// Traces handed over on any thread (the watcher's, for timed captures).
class LockedTraces {
 public:
  dlprof::TraceHandler handler() {
    return [this](const dlprof::Trace& trace) {
      const std::lock_guard<std::mutex> lock(mutex_);
      traces_.push_back(std::make_shared<dlprof::Trace>(trace));
    };
  }
  /// Waits up to `seconds` for `count` traces; the traces so far.
  std::vector<std::shared_ptr<const dlprof::Trace>> wait_for(std::size_t count, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (traces_.size() >= count || std::chrono::steady_clock::now() >= deadline) return traces_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<const dlprof::Trace>> traces_;
};

TEST(OnDemandTest, ATimedCaptureServesAProgramWithoutSteps) {
  TempDir dir;
  const fs::path trigger = dir.path() / "capture-now";
  const ScopedEnvironment environment(
      {{"DLPROF_MODE", "on-demand"}, {"DLPROF_SIGNAL", "none"}, {"DLPROF_TRIGGER_FILE", trigger.string()}});
  LockedTraces kept;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(kept.handler()));
  profiler.start();
  std::ofstream(trigger) << "seconds=0.3";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::size_t served = 0;
  while (std::chrono::steady_clock::now() < until && (served = kept.wait_for(1, 0).size()) == 0) {
    DLPROF_RANGE("request");  // a server's work, no step()
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(served, 1u) << "the watcher takes the request after a second without steps, and ends the capture";
  const dlprof::Trace& trace = *kept.wait_for(1, 0)[0];
  EXPECT_FALSE(fs::exists(trigger));
  EXPECT_THAT(recorded_steps(trace), IsEmpty());
  const double seconds = static_cast<double>(trace.window_end_ns - trace.window_start_ns) / 1e9;
  EXPECT_GE(seconds, 0.29);
  EXPECT_LT(seconds, 2.0);
  EXPECT_GT(std::count_if(trace.events.begin(), trace.events.end(),
                          [&](const dlprof::TraceEvent& event) { return trace.names[event.name] == "request"; }),
            20);
  profiler.stop();
}

TEST(OnDemandTest, ATimedCaptureInAProgramWithStepsEndsAtTheFirstStepPastItsTime) {
  const ScopedEnvironment environment({{"DLPROF_MODE", "on-demand"}, {"DLPROF_SIGNAL", "none"}});
  LockedTraces kept;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(kept.handler()));
  profiler.start();
  EXPECT_THROW(profiler.capture_for(std::chrono::seconds(0)), std::invalid_argument);
  EXPECT_TRUE(profiler.capture_for(std::chrono::milliseconds(100)));
  EXPECT_FALSE(profiler.capture(3)) << "one capture at a time";
  for (int i = 0; i < 100 && kept.wait_for(1, 0).empty(); ++i) {
    DLPROF_RANGE("stepped_work");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    profiler.step();
  }
  const auto traces = kept.wait_for(1, 0);
  ASSERT_EQ(traces.size(), 1u);
  const std::size_t steps = recorded_steps(*traces[0]).size();
  EXPECT_GE(steps, 5u);
  EXPECT_LE(steps, 60u);
  EXPECT_TRUE(profiler.capture(1)) << "idle again, and asked again";
  profiler.stop();
}

// The child processes.

TEST(SettingsLaunchTest, APlainLoopIsScheduledAndSavedFromTheEnvironmentAlone) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces" / "run 1";
  const Launched run = launch({"DLPROF_SCHEDULE=1,1,2,2", "DLPROF_OUTPUT=" + traces.string(), "DLPROF_WORKER=node7"},
                              dir.path(), 10);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("mode=scheduled schedule=1,1,2,2,0 handlers=1"));
  EXPECT_EQ(run.err, "");
  const std::vector<fs::path> written = files_in(traces);
  ASSERT_EQ(written.size(), 2u) << "two cycles of two recorded steps";
  for (const fs::path& file : written) {
    EXPECT_THAT(file.filename().string(), AllOf(::testing::StartsWith("node7."), ::testing::EndsWith(".pt.trace.json")));
    EXPECT_THAT(read_file(file), HasSubstr("\"train_step\""));
  }
}

TEST(SettingsLaunchTest, ConfigFileDrivesTheLoopAndTheEnvironmentWins) {
  TempDir dir;
  const fs::path config = dir.path() / "job.conf";
  const fs::path traces = dir.path() / "traces";
  std::ofstream(config) << "DLPROF_SCHEDULE = 0,0,3,1\nDLPROF_OUTPUT = " << traces.string()
                        << "\nDLPROF_GZIP = 1\nDLPROF_RECORD_SHAPES = 1\n";
  const Launched run = launch({"DLPROF_CONFIG=" + config.string(), "DLPROF_RECORD_SHAPES=0"}, dir.path());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("schedule=0,0,3,1,0 handlers=1 events_per_thread="));
  EXPECT_THAT(run.out, HasSubstr("record_shapes=false"));
  const std::vector<fs::path> written = files_in(traces);
  ASSERT_EQ(written.size(), 1u);
  EXPECT_THAT(written[0].string(), ::testing::EndsWith(".pt.trace.json.gz"));
}

TEST(SettingsLaunchTest, BadSettingsWarnOnceAndTheJobRunsOn) {
  TempDir dir;
  const Launched run = launch({"DLPROF_SCHEDULE=1,1", "DLPROF_EVENTS_PER_THREAD=huge", "DLPROF_SHEDULE=1,1,3"}, dir.path());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("mode=scheduled schedule=0,0,1,0,0 handlers=0"));
  EXPECT_THAT(run.err, HasSubstr("dlprof: warning: unknown variable DLPROF_SHEDULE in the environment"));
  EXPECT_THAT(run.err, HasSubstr("dlprof: warning: DLPROF_SCHEDULE=1,1 (from the environment): expected"));
  EXPECT_THAT(run.err, HasSubstr("dlprof: warning: DLPROF_EVENTS_PER_THREAD=huge (from the environment): expected a count"));
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 3) << run.err;
}

TEST(SettingsLaunchTest, ModeOffRecordsAndWritesNothing) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  const Launched run = launch({"DLPROF_MODE=off", "DLPROF_SCHEDULE=0,0,1", "DLPROF_OUTPUT=" + traces.string()}, dir.path());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("mode=off"));
  EXPECT_THAT(run.out, HasSubstr("traces=false"));
  EXPECT_THAT(files_in(traces), IsEmpty());
  EXPECT_EQ(run.err, "");
}

TEST(SettingsLaunchTest, WithoutSettingsTheProgramsOptionsStand) {
  TempDir dir;
  const Launched run = launch({}, dir.path(), 3);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("mode=scheduled schedule=0,0,1,0,0 handlers=0"));
  EXPECT_THAT(run.out, HasSubstr("traces=true")) << "the default Profiler records from start() to stop()";
  EXPECT_EQ(run.err, "");
}

}  // namespace
