// The launcher's settings (settings.hpp): DLPROF_* variables and the DLPROF_CONFIG file, their
// precedence over the program's options and each other, and the warnings that bad ones get. The
// last tests run a plain training loop (tests/settings/launched_training.cpp) as a child process
// under each setting and judge it by what it leaves.
#include <dlprof/profiler.hpp>

#include "test_files.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using dlprof_test::read_file;
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
       "DLPROF_PROFILE_MEMORY=yes", "DLPROF_WITH_FLOPS=on", "DLPROF_EVENTS_PER_THREAD=4096", "DLPROF_GPU_RECORDS=1000"},
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
              ElementsAre(AllOf(HasSubstr("DLPROF_MODE=sometimes (from the environment)"), HasSubstr("keeping scheduled")),
                          AllOf(HasSubstr("DLPROF_SCHEDULE=every other step"), HasSubstr("wait,warmup,active"),
                                HasSubstr("keeping the program's schedule")),
                          AllOf(HasSubstr("DLPROF_ACTIVITIES=cpu,tpu"), HasSubstr("keeping the program's activities")),
                          AllOf(HasSubstr("DLPROF_RECORD_SHAPES=maybe"), HasSubstr("keeping on")),
                          AllOf(HasSubstr("DLPROF_EVENTS_PER_THREAD=1"), HasSubstr("must be in [2,"), HasSubstr("keeping 1024")),
                          AllOf(HasSubstr("DLPROF_GPU_RECORDS=lots"), HasSubstr("expected a count"))));
}

TEST(SettingsTest, UnknownVariablesAreWarnedAboutAndOthersIgnored) {
  const auto settings = settings_of({"DLPROF_SCHEDUEL=1,1,3", "HOME=/root", "NOT_DLPROF_MODE=off", "DLPROF_NVTX=0"});
  EXPECT_THAT(settings.warnings, ElementsAre(HasSubstr("unknown variable DLPROF_SCHEDUEL")));
  ASSERT_EQ(settings.values.size(), 1u);
  EXPECT_EQ(settings.values[0].name, "DLPROF_NVTX");
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

// The child processes.

struct Launched {
  int status = -1;
  std::string out;
  std::string err;
};

Launched launch(const std::vector<std::string>& settings, const fs::path& scratch, int steps = 8) {
  const std::string program = DLPROF_LAUNCHED_TRAINING;
  const std::string steps_text = std::to_string(steps);
  std::vector<char*> argv{const_cast<char*>(program.c_str()), const_cast<char*>(steps_text.c_str()), nullptr};
  std::vector<std::string> kept;
  for (char** variable = environ; *variable != nullptr; ++variable)
    if (std::string_view(*variable).rfind("DLPROF_", 0) != 0) kept.emplace_back(*variable);
  kept.insert(kept.end(), settings.begin(), settings.end());
  std::vector<char*> env;
  for (std::string& variable : kept) env.push_back(variable.data());
  env.push_back(nullptr);
  const fs::path out = scratch / "stdout.txt";
  const fs::path err = scratch / "stderr.txt";
  posix_spawn_file_actions_t files;
  ::posix_spawn_file_actions_init(&files);
  ::posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t child = 0;
  Launched result;
  const int spawned = ::posix_spawn(&child, program.c_str(), &files, nullptr, argv.data(), env.data());
  ::posix_spawn_file_actions_destroy(&files);
  if (spawned != 0) return result;
  int status = 0;
  if (::waitpid(child, &status, 0) == child && WIFEXITED(status)) result.status = WEXITSTATUS(status);
  result.out = read_file(out);
  result.err = read_file(err);
  return result;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::exists(dir))
    for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  return files;
}

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
