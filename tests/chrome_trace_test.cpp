#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/profiler.hpp>

#include "test_files.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

using dlprof_test::file_names;
using dlprof_test::os_tid;
using dlprof_test::read_file;
using dlprof_test::is_valid_utf8;
using dlprof_test::read_gzip;
using dlprof_test::TempDir;

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Kineto's base for 2024-05-23 (docs/trace-format.md §2.1 example): 1716423322 s floored to a
// multiple of 7,889,238 s.
constexpr std::int64_t kBaseNs = 1'711'964'646'000'000'000;

// A Trace built by hand with known nanosecond times, laid out as the collector lays it out.
class WindowTraceBuilder {
 public:
  WindowTraceBuilder(std::int64_t window_start_ns, std::int64_t window_end_ns) {
    trace_.window_start_ns = window_start_ns;
    trace_.window_end_ns = window_end_ns;
    trace_.pid = 4242;
    trace_.process_name = "trainer";
    trace_.clock_source = "tsc";
    trace_.threads = {dlprof::ThreadInfo{4243, "main"}};
  }

  WindowTraceBuilder& event(std::string_view name, std::int64_t start_ns, std::int64_t end_ns,
                      dlprof::EventKind kind = dlprof::EventKind::Range, double value = 0, std::uint32_t thread = 0) {
    dlprof::TraceEvent event;
    event.start_ns = start_ns;
    event.end_ns = end_ns;
    event.kind = kind;
    event.value = value;
    event.thread = thread;
    event.name = static_cast<std::uint32_t>(trace_.names.size());
    trace_.names.emplace_back(name);
    trace_.events.push_back(event);
    return *this;
  }

  dlprof::Trace& trace() { return trace_; }

 private:
  dlprof::Trace trace_;
};

std::string chrome_text(const dlprof::Trace& trace, std::string_view trace_name = "trace.pt.trace.json") {
  fmt::memory_buffer buffer;
  dlprof::write_chrome_trace(trace, buffer, trace_name);
  return fmt::to_string(buffer);
}

// The events of traceEvents that are not metadata ("M"), in file order.
std::vector<json> non_metadata_events(const json& document) {
  std::vector<json> events;
  for (const json& event : document.at("traceEvents"))
    if (event.at("ph") != "M") events.push_back(event);
  return events;
}

std::vector<json> events_where(const json& document, const std::function<bool(const json&)>& predicate) {
  std::vector<json> events;
  for (const json& event : document.at("traceEvents"))
    if (predicate(event)) events.push_back(event);
  return events;
}

// The names of the slices ("ph": "X") of a written trace, in order.
std::vector<std::string> slice_names(const json& document) {
  std::vector<std::string> names;
  for (const json& event : events_where(document, [](const json& e) { return e.at("ph") == "X"; }))
    names.push_back(event.at("name").get<std::string>());
  return names;
}

// The one thread_name and the one process_name metadata event a one-thread trace has.
void expect_thread_and_process_names(const json& document, const std::string& thread, const std::string& process) {
  const auto thread_names = events_where(document, [](const json& e) { return e.at("name") == "thread_name"; });
  ASSERT_EQ(thread_names.size(), 1u);
  EXPECT_EQ(thread_names[0].at("args").at("name"), thread);
  const auto process_names = events_where(document, [](const json& e) { return e.at("name") == "process_name"; });
  ASSERT_EQ(process_names.size(), 1u);
  EXPECT_EQ(process_names[0].at("args").at("name"), process);
}

// A µs value with three decimals, as integer nanoseconds (exact for the magnitudes in traces).
std::int64_t to_ns(const json& microseconds) { return std::llround(microseconds.get<double>() * 1000.0); }

// Records one window with a real Profiler (no schedule: start() to stop()).
std::shared_ptr<const dlprof::Trace> record_window(const std::function<void()>& body,
                                                   dlprof::ProfilerOptions options = dlprof::ProfilerOptions{}) {
  dlprof::Profiler prof(std::move(options));
  prof.start();
  body();
  prof.stop();
  return prof.last_trace();
}

std::shared_ptr<const dlprof::Trace> record_ranges_and_steps() {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 3, 1)));
  prof.start();
  for (int i = 0; i < 3; ++i) {
    {
      DLPROF_RANGE("chrome_forward");
      DLPROF_RANGE("chrome_inner");
    }
    { DLPROF_RANGE("chrome_backward"); }
    prof.step();
  }
  prof.stop();
  return prof.last_trace();
}


// --- numbers ---------------------------------------------------------------------------------

TEST(FixedFloatCacheTest, PrintsSixDecimalsAsFmtDoesForEveryKindOfFloat) {
  dlprof::detail::FixedFloatCache<> floats;
  const float values[] = {0.0f, -0.0f, 0.1f, 1.0f / 3.0f, 4.7407407f, 75.851852f, 0.0000005f, 0.0000015f, -2.5f, 1e10f,
                          16777217.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::lowest()};
  for (int pass = 0; pass < 2; ++pass)  // the second pass reads what the first remembered
    for (const float value : values) EXPECT_EQ(floats.text(value), fmt::format("{:f}", value)) << value;
}

TEST(JsonWriterTest, NumbersAreShortestAsFmtPrintsThemAndNotFiniteOnesNull) {
  fmt::memory_buffer out;
  dlprof::detail::JsonWriter json(out);
  for (const double value : {0.1, 1.0, 1e6, 1e16, 1e20, 1.5e-7, -2.25, 0.30000000000000004, std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    json.number(value);
    json.character(' ');
  }
  EXPECT_EQ(fmt::to_string(out), "0.1 1 1000000 1e+16 1e+20 1.5e-07 -2.25 0.30000000000000004 1.7976931348623157e+308 null null ");
}

// --- top level -------------------------------------------------------------------------------

TEST(ChromeTraceTest, WritesEveryTopLevelKeyKinetoWrites) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.trace().distributed.backend = "nccl";
  builder.trace().distributed.rank = 2;
  builder.trace().distributed.world_size = 8;
  const json document = json::parse(chrome_text(builder.trace(), "/logs/w.123.pt.trace.json"));

  EXPECT_EQ(document.at("schemaVersion"), 1);
  ASSERT_TRUE(document.at("deviceProperties").is_array());
  EXPECT_THAT(document.at("deviceProperties"), IsEmpty());
  EXPECT_EQ(document.at("distributedInfo").at("backend"), "nccl");
  EXPECT_EQ(document.at("distributedInfo").at("rank"), 2);
  EXPECT_EQ(document.at("distributedInfo").at("world_size"), 8);
  EXPECT_EQ(document.at("displayTimeUnit"), "ms");
  EXPECT_EQ(document.at("baseTimeNanoseconds"), kBaseNs);
  EXPECT_TRUE(document.at("traceEvents").is_array());
  EXPECT_EQ(document.at("traceName"), "/logs/w.123.pt.trace.json");
  EXPECT_EQ(document.at("dlprof_clock"), "tsc");
}

// Each device's allocated memory by category is a counter track: one point per moment of its
// [memory] events, one series per category, the tagged memory placed, what the window never saw
// allocated unknown.
TEST(ChromeTraceTest, MemoryByCategoryIsACounterTrackPerDevice) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  dlprof::Trace& trace = builder.trace();
  const auto memory = [&](std::int64_t time, std::uint64_t address, std::int64_t bytes, std::int64_t total) {
    dlprof::MemoryEvent event;
    event.time_ns = time;
    event.address = address;
    event.bytes = bytes;
    event.total_allocated = total;
    event.device_type = dlprof::MemoryDeviceType::CUDA;
    event.device = 1;
    trace.memory_events.push_back(event);
  };
  memory(kBaseNs + 2'000, 0x100, 64, 1064);   // 1000 B allocated before the window
  memory(kBaseNs + 3'000, 0x100, -64, 1000);
  trace.memory_tags.push_back(dlprof::MemoryTag{kBaseNs + 2'500, 0x100, 64, dlprof::MemoryDeviceType::CUDA, 1,
                                                dlprof::MemoryCategory::Parameter, 0});
  const json document = json::parse(chrome_text(trace));
  const std::vector<json> counters =
      events_where(document, [](const json& event) { return event.value("name", "") == "Memory by category (CUDA:1)"; });
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_EQ(counters[0].at("ph"), "C");
  EXPECT_EQ(counters[0].at("pid"), 4242);
  EXPECT_EQ(counters[0].at("args").size(), 7u);
  EXPECT_EQ(counters[0].at("args").at("parameters"), 64);
  EXPECT_EQ(counters[0].at("args").at("unknown"), 1000);
  EXPECT_EQ(counters[1].at("args").at("parameters"), 0);
  EXPECT_EQ(counters[1].at("args").at("unknown"), 1000);
  const std::vector<json> tags =
      events_where(document, [](const json& event) { return event.value("name", "") == "[memory category]"; });
  ASSERT_EQ(tags.size(), 1u);
  EXPECT_EQ(tags[0].at("args").at("memory category"), "parameters");
}

TEST(ChromeTraceTest, TopLevelKeysAreInKinetoOrder) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.trace().metadata.emplace_back("record_shapes", "1");
  const nlohmann::ordered_json document = nlohmann::ordered_json::parse(chrome_text(builder.trace()));
  std::vector<std::string> keys;
  for (const auto& item : document.items()) keys.push_back(item.key());
  const auto position = [&](std::string_view key) {
    return std::distance(keys.begin(), std::find(keys.begin(), keys.end(), key));
  };
  const std::vector<std::string_view> kineto_order = {"schemaVersion",   "deviceProperties",    "distributedInfo",
                                                      "record_shapes",   "displayTimeUnit",     "baseTimeNanoseconds",
                                                      "traceEvents",     "traceName"};
  for (std::size_t i = 0; i < kineto_order.size(); ++i) {
    ASSERT_LT(position(kineto_order[i]), static_cast<std::ptrdiff_t>(keys.size())) << kineto_order[i] << " missing";
    if (i > 0) {
      EXPECT_LT(position(kineto_order[i - 1]), position(kineto_order[i])) << kineto_order[i];
    }
  }
  EXPECT_EQ(keys.front(), "schemaVersion");
  EXPECT_EQ(keys.back(), "traceName");
}

TEST(ChromeTraceTest, RankMatchesHtaRegexOnAnEarlyLine) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.trace().distributed.rank = 3;
  builder.trace().distributed.world_size = 4;
  const std::string text = chrome_text(builder.trace());
  EXPECT_THAT(text, HasSubstr("\"rank\": 3"));

  // HTA takes the rank from the first line matching this regex (docs/trace-format.md §3.1).
  const std::regex hta_rank(R"("rank":\s+(\d+))");
  std::istringstream lines(text);
  std::string line;
  std::optional<std::string> rank;
  for (int number = 0; number < 10 && std::getline(lines, line); ++number) {
    std::smatch match;
    if (std::regex_search(line, match, hta_rank)) {
      rank = match[1].str();
      break;
    }
  }
  ASSERT_TRUE(rank.has_value()) << "no line among the first 10 matches HTA's rank regex";
  EXPECT_EQ(*rank, "3");
}

TEST(ChromeTraceTest, SingleProcessTraceIsRankZeroWithSpaceAfterColon) {
  // No launcher variables in the test environment: rank 0 of 1, as HTA's defaults expect.
  const auto trace = record_window([] { DLPROF_RANGE("chrome_rank_zero"); });
  ASSERT_NE(trace, nullptr);
  const std::string text = chrome_text(*trace);
  EXPECT_THAT(text, HasSubstr("\"rank\": 0"));
  EXPECT_EQ(json::parse(text).at("distributedInfo").at("world_size"), 1);
}

TEST(ChromeTraceTest, WritesDevicePropertiesWithKinetoKeys) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  dlprof::DeviceProperties device;
  device.id = 0;
  device.name = "NVIDIA H100";
  device.total_global_mem = 85'000'000'000;
  device.compute_major = 9;
  device.compute_minor = 0;
  device.num_sms = 132;
  builder.trace().devices.push_back(device);
  const json document = json::parse(chrome_text(builder.trace()));
  ASSERT_EQ(document.at("deviceProperties").size(), 1u);
  const json& written = document.at("deviceProperties").at(0);
  EXPECT_EQ(written.at("id"), 0);
  EXPECT_EQ(written.at("name"), "NVIDIA H100");
  EXPECT_EQ(written.at("totalGlobalMem"), 85'000'000'000);
  EXPECT_EQ(written.at("computeMajor"), 9);
  EXPECT_EQ(written.at("computeMinor"), 0);
  EXPECT_EQ(written.at("numSms"), 132);
  for (const char* key : {"maxThreadsPerBlock", "maxThreadsPerMultiprocessor", "regsPerBlock", "warpSize",
                          "sharedMemPerBlock", "regsPerMultiprocessor", "sharedMemPerBlockOptin",
                          "sharedMemPerMultiprocessor"})
    EXPECT_TRUE(written.contains(key)) << key;
}

TEST(ChromeTraceTest, WritesTraceMetadataVerbatim) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.trace().metadata = {{"record_shapes", "1"}, {"custom", R"({"a": [1, 2], "b": "x"})"}};
  const std::string text = chrome_text(builder.trace());
  EXPECT_THAT(text, HasSubstr("\"record_shapes\": 1"));
  const json document = json::parse(text);
  EXPECT_EQ(document.at("record_shapes"), 1);
  EXPECT_EQ(document.at("custom"), json::parse(R"({"a": [1, 2], "b": "x"})"));
}

TEST(ChromeTraceTest, ProfilerOptionsAddTorchMetadataKeys) {
  const auto trace = record_window([] { DLPROF_RANGE("chrome_metadata"); },
                                   dlprof::ProfilerOptions{}.record_shapes(true).profile_memory(true).with_flops(true));
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));
  EXPECT_EQ(document.at("record_shapes"), 1);
  EXPECT_EQ(document.at("profile_memory"), 1);
  EXPECT_EQ(document.at("with_flops"), 1);

  const auto plain = record_window([] { DLPROF_RANGE("chrome_metadata"); });
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(json::parse(chrome_text(*plain)).contains("record_shapes"));
}

TEST(ChromeTraceTest, WritesDroppedClippedAndOverflowCounts) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.trace().dropped_events = 5;
  builder.trace().clipped_ranges = 6;
  builder.trace().overflowed_names = 7;
  const json document = json::parse(chrome_text(builder.trace()));
  EXPECT_EQ(document.at("dlprof_dropped_events"), 5);
  EXPECT_EQ(document.at("dlprof_clipped_ranges"), 6);
  EXPECT_EQ(document.at("dlprof_overflowed_names"), 7);
}

// --- distributedInfo from the launcher's environment ----------------------------------------------

class ChromeTraceDistributedInfoTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"RANK",         "WORLD_SIZE",           "SLURM_PROCID",
                                               "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                               "PMI_RANK",     "PMI_SIZE"};

  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVariables) {
      const auto found = saved_.find(name);
      if (found != saved_.end())
        ::setenv(name, found->second.c_str(), 1);
      else
        ::unsetenv(name);
    }
  }

  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

  using RankAndSize = std::pair<std::int64_t, std::int64_t>;

  static RankAndSize rank_and_size() {
    const dlprof::DistributedInfo info = dlprof::distributed_info_from_environment();
    return {info.rank, info.world_size};
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(ChromeTraceDistributedInfoTest, NoLauncherMeansRankZeroOfOne) { EXPECT_EQ(rank_and_size(), (RankAndSize{0, 1})); }

TEST_F(ChromeTraceDistributedInfoTest, ReadsTorchrunVariables) {
  set("RANK", "3");
  set("WORLD_SIZE", "8");
  EXPECT_EQ(rank_and_size(), (RankAndSize{3, 8}));
}

TEST_F(ChromeTraceDistributedInfoTest, ReadsSlurmVariables) {
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "16");
  EXPECT_EQ(rank_and_size(), (RankAndSize{5, 16}));
}

TEST_F(ChromeTraceDistributedInfoTest, ReadsOpenMpiVariables) {
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_EQ(rank_and_size(), (RankAndSize{1, 2}));
}

TEST_F(ChromeTraceDistributedInfoTest, ReadsPmiVariables) {
  set("PMI_RANK", "6");
  set("PMI_SIZE", "7");
  EXPECT_EQ(rank_and_size(), (RankAndSize{6, 7}));
}

TEST_F(ChromeTraceDistributedInfoTest, TorchrunBeatsSlurm) {
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "16");
  set("RANK", "2");
  set("WORLD_SIZE", "4");
  EXPECT_EQ(rank_and_size(), (RankAndSize{2, 4}));
}

TEST_F(ChromeTraceDistributedInfoTest, GarbageRankFallsThroughToTheNextLauncher) {
  for (const char* garbage : {"abc", "3x", "-1", "", "99999999999999999999999"}) {
    set("RANK", garbage);
    set("WORLD_SIZE", "8");
    set("SLURM_PROCID", "5");
    set("SLURM_NTASKS", "16");
    EXPECT_EQ(rank_and_size(), (RankAndSize{5, 16})) << "RANK='" << garbage << "'";
  }
}

TEST_F(ChromeTraceDistributedInfoTest, NegativeRankIsRefusedWithAWarningOncePerValue) {
  set("RANK", "-5");
  set("WORLD_SIZE", "8");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(rank_and_size(), (RankAndSize{0, 1}));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "dlprof: warning: RANK='-5' is not a rank (an integer from 0): ignored\n");

  // The next launcher's variables are used; each bad value is reported once, not every window.
  set("SLURM_PROCID", "-7");
  set("SLURM_NTASKS", "16");
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "4");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(rank_and_size(), (RankAndSize{3, 4}));
  EXPECT_EQ(rank_and_size(), (RankAndSize{3, 4}));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "dlprof: warning: SLURM_PROCID='-7' is not a rank (an integer from 0): ignored\n");
}

TEST_F(ChromeTraceDistributedInfoTest, GarbageRankAloneMeansRankZeroOfOne) {
  set("RANK", "zero");
  set("WORLD_SIZE", "4");
  EXPECT_EQ(rank_and_size(), (RankAndSize{0, 1}));
}

TEST_F(ChromeTraceDistributedInfoTest, UnusableWorldSizeBecomesRankPlusOne) {
  set("RANK", "3");
  set("WORLD_SIZE", "many");
  EXPECT_EQ(rank_and_size(), (RankAndSize{3, 4}));
  set("WORLD_SIZE", "2");  // not larger than the rank
  EXPECT_EQ(rank_and_size(), (RankAndSize{3, 4}));
}

TEST_F(ChromeTraceDistributedInfoTest, ProfiledTraceCarriesRankAndBackend) {
  set("RANK", "2");
  set("WORLD_SIZE", "4");
  const auto trace = record_window([] { DLPROF_RANGE("chrome_distributed"); },
                                   dlprof::ProfilerOptions{}.distributed_backend("nccl"));
  ASSERT_NE(trace, nullptr);
  const std::string text = chrome_text(*trace);
  EXPECT_THAT(text, HasSubstr("\"rank\": 2"));
  const json info = json::parse(text).at("distributedInfo");
  EXPECT_EQ(info.at("rank"), 2);
  EXPECT_EQ(info.at("world_size"), 4);
  EXPECT_EQ(info.at("backend"), "nccl");
}

// --- time ------------------------------------------------------------------------------------

TEST(ChromeTraceTest, BaseTimeIsWindowStartFlooredToKinetoInterval) {
  EXPECT_EQ(dlprof::detail::chrome_trace_base_time_ns(1'716'423'322'123'456'789), kBaseNs);
  for (const std::int64_t start_ns : {std::int64_t{1'700'000'000'999'999'999}, std::int64_t{1'750'000'000'000'000'000},
                                      kBaseNs, kBaseNs - 1}) {
    WindowTraceBuilder builder(start_ns, start_ns + 1'000);
    const std::int64_t expected = start_ns / 1'000'000'000 / 7'889'238 * 7'889'238 * 1'000'000'000;
    EXPECT_EQ(json::parse(chrome_text(builder.trace())).at("baseTimeNanoseconds"), expected) << start_ns;
  }
}

TEST(ChromeTraceTest, TimesAreRelativeMicrosecondsWithNanosecondDigits) {
  WindowTraceBuilder builder(kBaseNs + 1'000'000, kBaseNs + 9'000'000);
  builder.event("exact", kBaseNs + 1'234'567, kBaseNs + 1'234'567 + 2'000'001)
      .event("tiny", kBaseNs + 1'300'005, kBaseNs + 1'300'012)
      .event("round", kBaseNs + 2'000'000, kBaseNs + 3'000'000);
  const std::string text = chrome_text(builder.trace());
  EXPECT_THAT(text, HasSubstr("\"ts\": 1234.567, \"dur\": 2000.001,"));
  EXPECT_THAT(text, HasSubstr("\"ts\": 1300.005, \"dur\": 0.007,"));
  EXPECT_THAT(text, HasSubstr("\"ts\": 2000.000, \"dur\": 1000.000,"));
  EXPECT_THAT(text, HasSubstr("\"name\": \"Record Window End\", \"pid\": \"\", \"tid\": \"\", \"ts\": 9000.000}"));
}

TEST(ChromeTraceTest, EveryTimestampInTheTextHasExactlyThreeDecimals) {
  const auto trace = record_ranges_and_steps();
  ASSERT_NE(trace, nullptr);
  const std::string text = chrome_text(*trace);
  for (const char* key : {"ts", "dur"}) {
    const std::regex any(fmt::format("\"{}\":", key));
    const std::regex three_decimals(fmt::format(R"("{}": \d+\.\d{{3}}[,}}])", key));
    const auto count = [&](const std::regex& pattern) {
      return std::distance(std::sregex_iterator(text.begin(), text.end(), pattern), std::sregex_iterator());
    };
    EXPECT_GT(count(any), 0) << key;
    EXPECT_EQ(count(three_decimals), count(any)) << key;
  }
}

TEST(ChromeTraceTest, TimesReproduceEveryEventsNanosecondsThroughTheBase) {
  const auto trace = record_ranges_and_steps();
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));
  const std::int64_t base = document.at("baseTimeNanoseconds").get<std::int64_t>();
  const std::vector<json> events = non_metadata_events(document);
  // Events are written in the Trace's order, then the threads' CPU readings, then Record Window End.
  ASSERT_EQ(events.size(), trace->events.size() + trace->thread_cpu.size() + 1);
  for (std::size_t i = 0; i < trace->thread_cpu.size(); ++i)
    EXPECT_EQ(base + to_ns(events[trace->events.size() + i].at("ts")), trace->thread_cpu[i].time_ns) << i;
  for (std::size_t i = 0; i < trace->events.size(); ++i) {
    const dlprof::TraceEvent& expected = trace->events[i];
    EXPECT_EQ(events[i].at("name"), std::string(trace->name_of(expected)));
    EXPECT_EQ(base + to_ns(events[i].at("ts")), expected.start_ns) << i;
    if (events[i].at("ph") == "X") {
      EXPECT_EQ(to_ns(events[i].at("dur")), expected.duration_ns()) << i;
    }
  }
  EXPECT_EQ(base + to_ns(events.back().at("ts")), trace->window_end_ns);
}

TEST(ChromeTraceTest, NegativeRelativeTimesAndDurationsClampToZero) {
  WindowTraceBuilder builder(kBaseNs + 5'000, kBaseNs + 9'000);
  builder.event("before_base", kBaseNs - 2'000, kBaseNs + 1'000).event("backwards", kBaseNs + 6'000, kBaseNs + 5'000);
  const std::string text = chrome_text(builder.trace());
  EXPECT_THAT(text, Not(HasSubstr("-")));
  const std::vector<json> events = non_metadata_events(json::parse(text));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].at("name"), "before_base");
  EXPECT_EQ(to_ns(events[0].at("ts")), 0);
  EXPECT_THAT(text, HasSubstr("\"ts\": 0.000,"));
  EXPECT_EQ(events[1].at("name"), "backwards");
  EXPECT_EQ(to_ns(events[1].at("ts")), 6'000);
  EXPECT_EQ(to_ns(events[1].at("dur")), 0);
  EXPECT_THAT(text, HasSubstr("\"dur\": 0.000,"));
}

// --- events ----------------------------------------------------------------------------------

TEST(ChromeTraceTest, RangesAndStepsAreUserAnnotationSlicesOnTheRecordingThread) {
  const auto trace = record_ranges_and_steps();
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));
  const std::vector<json> slices = events_where(document, [](const json& e) { return e.at("ph") == "X"; });
  // 3 steps, each with forward, inner and backward.
  ASSERT_EQ(slices.size(), 12u);
  std::set<std::int64_t> external_ids;
  std::multiset<std::string> names;
  for (const json& slice : slices) {
    EXPECT_EQ(slice.at("cat"), "user_annotation");
    EXPECT_EQ(slice.at("pid"), ::getpid());
    EXPECT_EQ(slice.at("tid"), os_tid());
    const json& args = slice.at("args");
    const std::int64_t external_id = args.at("External id").get<std::int64_t>();
    EXPECT_GT(external_id, 0);
    external_ids.insert(external_id);
    EXPECT_TRUE(args.at("Ev Idx").is_number_integer());
    EXPECT_TRUE(args.contains("Record function id"));
    names.insert(slice.at("name").get<std::string>());
  }
  EXPECT_EQ(external_ids.size(), slices.size()) << "External id must be unique";
  EXPECT_EQ(names.count("chrome_forward"), 3u);
  EXPECT_EQ(names.count("chrome_inner"), 3u);
  EXPECT_EQ(names.count("chrome_backward"), 3u);
  for (const char* step : {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"}) EXPECT_EQ(names.count(step), 1u) << step;
}

TEST(ChromeTraceTest, EvIdxIsEachEventsIndexInTheTrace) {
  const auto trace = record_ranges_and_steps();
  ASSERT_NE(trace, nullptr);
  std::vector<json> events = non_metadata_events(json::parse(chrome_text(*trace)));
  // The threads' CPU-time tracks are readings, not events of the trace: they have no index.
  events.erase(std::remove_if(events.begin(), events.end(), [](const json& e) {
                 return e.value("name", "").rfind(dlprof::kineto::name::kThreadCpuPrefix, 0) == 0;
               }),
               events.end());
  for (std::size_t i = 0; i + 1 < events.size(); ++i) EXPECT_EQ(events[i].at("args").at("Ev Idx"), i);
}

TEST(ChromeTraceTest, WritesProcessAndThreadMetadata) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.trace().threads = {dlprof::ThreadInfo{4243, "main"}, dlprof::ThreadInfo{4250, "data loader"}};
  builder.event("on_main", kBaseNs + 2'000, kBaseNs + 3'000).event("on_loader", kBaseNs + 2'000, kBaseNs + 3'000,
                                                                  dlprof::EventKind::Range, 0, 1);
  const json document = json::parse(chrome_text(builder.trace()));
  const auto metadata = [&](std::string_view name) {
    return events_where(document, [&](const json& e) { return e.at("ph") == "M" && e.at("name") == name; });
  };

  const auto process_name = metadata("process_name");
  ASSERT_EQ(process_name.size(), 1u);
  EXPECT_EQ(process_name[0].at("pid"), 4242);
  EXPECT_EQ(process_name[0].at("args").at("name"), "trainer");
  const auto labels = metadata("process_labels");
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0].at("args").at("labels"), "CPU");
  const auto process_sort = metadata("process_sort_index");
  ASSERT_EQ(process_sort.size(), 1u);
  EXPECT_EQ(process_sort[0].at("args").at("sort_index"), 4242);

  std::map<std::int64_t, std::string> thread_names;
  for (const json& event : metadata("thread_name")) {
    EXPECT_EQ(event.at("pid"), 4242);
    thread_names[event.at("tid").get<std::int64_t>()] = event.at("args").at("name").get<std::string>();
  }
  EXPECT_EQ(thread_names, (std::map<std::int64_t, std::string>{{4243, "thread 4243 (main)"},
                                                               {4250, "thread 4250 (data loader)"}}));
  std::map<std::int64_t, std::int64_t> sort_indexes;
  for (const json& event : metadata("thread_sort_index"))
    sort_indexes[event.at("tid").get<std::int64_t>()] = event.at("args").at("sort_index").get<std::int64_t>();
  EXPECT_EQ(sort_indexes, (std::map<std::int64_t, std::int64_t>{{4243, 4243}, {4250, 4250}}));

  const auto on_loader = events_where(document, [](const json& e) { return e.at("name") == "on_loader"; });
  ASSERT_EQ(on_loader.size(), 1u);
  EXPECT_EQ(on_loader[0].at("tid"), 4250);
}

TEST(ChromeTraceTest, ProfiledTraceNamesTheProcessAndTheCallingThread) {
  dlprof::set_thread_name("chrome-main");
  const auto trace = record_window([] { DLPROF_RANGE("chrome_thread_name"); });
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));
  const auto names = events_where(document, [](const json& e) { return e.at("name") == "thread_name"; });
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].at("tid"), os_tid());
  EXPECT_EQ(names[0].at("args").at("name"), fmt::format("thread {} (chrome-main)", os_tid()));
  const auto process = events_where(document, [](const json& e) { return e.at("name") == "process_name"; });
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ(process[0].at("pid"), ::getpid());
  EXPECT_EQ(process[0].at("args").at("name"), trace->process_name);
  EXPECT_FALSE(trace->process_name.empty());
}

TEST(ChromeTraceTest, RecordWindowEndIsTheLastEvent) {
  const auto trace = record_ranges_and_steps();
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));
  const json& last = document.at("traceEvents").back();
  EXPECT_EQ(last.at("name"), "Record Window End");
  EXPECT_EQ(last.at("ph"), "i");
  EXPECT_EQ(last.at("s"), "g");
  EXPECT_EQ(last.at("pid"), "");
  EXPECT_EQ(last.at("tid"), "");
  EXPECT_EQ(events_where(document, [](const json& e) { return e.at("name") == "Record Window End"; }).size(), 1u);
}

TEST(ChromeTraceTest, CountersAndMarksFromAProfiledWindow) {
  const auto trace = record_window([] {
    dlprof::counter("chrome_loss", 0.25);
    dlprof::mark("chrome checkpoint saved");
    dlprof::counter("chrome_loss", 1.5);
  });
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));

  const auto counters = events_where(document, [](const json& e) {
    return e.at("ph") == "C" && e.at("name").get<std::string>().rfind(dlprof::kineto::name::kThreadCpuPrefix, 0) != 0;
  });
  ASSERT_EQ(counters.size(), 2u);
  std::multiset<double> values;
  for (const json& sample : counters) {
    EXPECT_EQ(sample.at("name"), "chrome_loss");
    EXPECT_EQ(sample.at("pid"), ::getpid());
    EXPECT_EQ(sample.at("tid"), os_tid());
    values.insert(sample.at("args").at("value").get<double>());
  }
  EXPECT_EQ(values, (std::multiset<double>{0.25, 1.5}));

  const auto marks = events_where(document, [](const json& e) { return e.at("ph") == "i" && e.at("s") == "t"; });
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0].at("name"), "chrome checkpoint saved");
  EXPECT_EQ(marks[0].at("cat"), "cpu_instant_event");
  EXPECT_EQ(marks[0].at("pid"), ::getpid());
  EXPECT_EQ(marks[0].at("tid"), os_tid());
  EXPECT_FALSE(marks[0].contains("dur"));
}

TEST(ChromeTraceTest, NonFiniteCounterValuesKeepTheFileValidJson) {
  // A diverging run logs a NaN or infinite loss; the file must still parse (JSON has no NaN).
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.event("loss", kBaseNs + 2'000, kBaseNs + 2'000, dlprof::EventKind::Counter, std::nan(""))
      .event("grad_norm", kBaseNs + 3'000, kBaseNs + 3'000, dlprof::EventKind::Counter,
             std::numeric_limits<double>::infinity())
      .event("lr", kBaseNs + 4'000, kBaseNs + 4'000, dlprof::EventKind::Counter, 1e-3);
  builder.event("grad_min", kBaseNs + 5'000, kBaseNs + 5'000, dlprof::EventKind::Counter,
                -std::numeric_limits<double>::infinity());
  json document;
  ASSERT_NO_THROW(document = json::parse(chrome_text(builder.trace())));
  const auto counters = events_where(document, [](const json& e) { return e.at("ph") == "C"; });
  ASSERT_EQ(counters.size(), 4u);
  // As Python's json module and JavaScript spell them, as strings: the reader takes them back
  // (ImportRoundTripTest.NonFiniteCounterSamplesRoundTrip).
  EXPECT_EQ(counters[0].at("args").at("value"), "NaN");
  EXPECT_EQ(counters[1].at("args").at("value"), "Infinity");
  EXPECT_EQ(counters[2].at("args").at("value"), 1e-3);
  EXPECT_EQ(counters[3].at("args").at("value"), "-Infinity");
}

TEST(ChromeTraceTest, NamesThatAreNotUtf8AreWrittenWithReplacementCharacters) {
  // A thread name cut by prctl's 15 bytes in the middle of a character, a stray byte, a
  // truncated sequence at the end, an overlong '/', a surrogate.
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.event("bad\xff range", kBaseNs + 2'000, kBaseNs + 3'000)
      .event("cut \xe2\x82", kBaseNs + 4'000, kBaseNs + 5'000)
      .event("overlong \xc0\xaf surrogate \xed\xa0\x80", kBaseNs + 6'000, kBaseNs + 7'000);
  builder.trace().threads[0].name = "w-\xce\xb1\xce\xb1\xce\xb1\xce\xb1\xce\xb1\xce\xb1\xce";
  builder.trace().process_name = "proc\x80";
  const std::string text = chrome_text(builder.trace());
  EXPECT_TRUE(is_valid_utf8(text));
  json document;
  ASSERT_NO_THROW(document = json::parse(text));  // nlohmann refuses invalid UTF-8

  EXPECT_THAT(slice_names(document), ElementsAre("bad\uFFFD range", "cut \uFFFD\uFFFD",
                                                 "overlong \uFFFD\uFFFD surrogate \uFFFD\uFFFD\uFFFD"));
  expect_thread_and_process_names(document, "thread 4243 (w-\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\uFFFD)", "proc\uFFFD");
}

TEST(ChromeTraceTest, ThreadNameCutByPrctlMidCharacterStillSavesValidJson) {
  const TempDir dir;
  std::shared_ptr<const dlprof::Trace> trace;
  {
    dlprof::Profiler prof;
    prof.start();
    std::thread([] {
      // 16 bytes: the kernel keeps 15, which ends in the first byte of the last alpha.
      ::prctl(PR_SET_NAME, "w-\xce\xb1\xce\xb1\xce\xb1\xce\xb1\xce\xb1\xce\xb1\xce\xb1", 0, 0, 0);
      DLPROF_RANGE("on the cut thread");
    }).join();
    prof.stop();
    trace = prof.last_trace();
  }
  ASSERT_NE(trace, nullptr);
  const fs::path path = dir.path() / "cut.pt.trace.json";
  dlprof::save_chrome_trace(*trace, path.string());
  const std::string text = read_file(path);
  EXPECT_TRUE(is_valid_utf8(text));
  json document;
  ASSERT_NO_THROW(document = json::parse(text));
  const auto thread_names = events_where(document, [](const json& e) {
    return e.at("name") == "thread_name" && e.at("args").at("name").get<std::string>().find("(w-") != std::string::npos;
  });
  ASSERT_EQ(thread_names.size(), 1u);
  EXPECT_THAT(thread_names[0].at("args").at("name").get<std::string>(),
              ::testing::EndsWith("(w-\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\uFFFD)"));
}

TEST(ChromeTraceTest, NamesWithSpecialCharactersRoundTripExactly) {
  const std::vector<std::string> names = {"say \"hi\"",
                                          "C:\\path\\to\\file",
                                          "line one\nline two",
                                          std::string("ctrl \x01\x07\x1f\t\r\b\f end"),
                                          std::string("nul \0 inside", 12),
                                          "gr\xc3\xb6\xc3\x9f" "e \xe2\x9c\x93",
                                          "slash / and del \x7f"};
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 90'000);
  std::int64_t at = kBaseNs + 2'000;
  for (const std::string& name : names) {
    builder.event(name, at, at + 500);
    at += 1'000;
  }
  builder.trace().threads[0].name = "quote\"thread";
  builder.trace().process_name = "proc\\ess";
  const std::string trace_name = "/tmp/odd \"name\"\n.json";
  const json document = json::parse(chrome_text(builder.trace(), trace_name));

  EXPECT_EQ(slice_names(document), names);
  EXPECT_EQ(document.at("traceName"), trace_name);
  expect_thread_and_process_names(document, "thread 4243 (quote\"thread)", "proc\\ess");
}

// kHostileName in every string the writer writes from a trace: a range, a kernel, the thread,
// the process (on the CPU and on the GPU), a device, a metadata key, distributedInfo, the clock,
// CUPTI's and the driver's versions, and traceName: 12 strings.
dlprof::Trace hostile_trace() {
  const std::string& hostile = dlprof_test::kHostileName;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 90'000);
  builder.event(hostile, kBaseNs + 2'000, kBaseNs + 3'000);
  dlprof::Trace& trace = builder.trace();
  trace.threads[0].name = hostile;
  trace.process_name = hostile;
  dlprof::DeviceProperties device;
  device.name = hostile;
  trace.devices = {device};
  trace.metadata = {{hostile, "1"}};
  trace.distributed.backend = hostile;
  trace.clock_source = hostile;
  trace.gpu.enabled = true;
  trace.gpu.cupti_version = hostile;
  trace.gpu.driver_version = hostile;
  dlprof::GpuEvent kernel;
  kernel.kind = dlprof::GpuEventKind::Kernel;
  kernel.name = static_cast<std::uint32_t>(trace.names.size());
  trace.names.push_back(hostile);
  kernel.stream = 7;
  kernel.start_ns = kBaseNs + 4'000;
  kernel.end_ns = kBaseNs + 5'000;
  trace.gpu_events.push_back(kernel);
  return trace;
}

TEST(ChromeTraceTest, HostileNamesMakeAFilePythonAndRapidJsonAccept) {
  const std::string repaired = dlprof_test::repaired_hostile_name();
  ASSERT_EQ(dlprof::detail::valid_utf8(dlprof_test::kHostileName), repaired);
  const TempDir dir;
  const fs::path path = dir.path() / "hostile.pt.trace.json";
  const std::string text = chrome_text(hostile_trace(), dlprof_test::kHostileName);
  std::ofstream(path, std::ios::binary) << text;
  EXPECT_TRUE(is_valid_utf8(text));
  EXPECT_EQ(text.find('\0'), std::string::npos);
  EXPECT_THAT(text, HasSubstr(R"(hostile\u0000nul \u0001\u001f)"));
  EXPECT_THAT(text, HasSubstr(R"( \"quoted\" back\\slash )"));

  // Every string that holds the name holds it repaired, nothing else changed: the thread's label
  // around it, the others exactly.
  const auto expect_hostile_strings = [&](const std::vector<std::string>& strings) {
    ASSERT_EQ(strings.size(), 12u);
    std::size_t exact = 0;
    for (const std::string& string : strings) {
      EXPECT_NE(string.find(repaired), std::string::npos) << dlprof_test::hex_of(string);
      exact += string == repaired;
    }
    EXPECT_EQ(exact, 11u);
    EXPECT_THAT(strings, ::testing::Contains("thread 4243 (" + repaired + ")"));
  };

#if DLPROF_TEST_HAS_RAPIDJSON
  std::string error;
  const std::vector<std::string> found = dlprof_test::rapidjson_hostile_strings(text, &error);
  EXPECT_EQ(error, "");
  expect_hostile_strings(found);
#endif

  const auto python = dlprof_test::run_python(dir.path(), dlprof_test::kPythonHostileStrings, {path.string()});
  if (!python) GTEST_SKIP() << "no python3 to run: Python's json module not tried";
  ASSERT_EQ(python->status, 0) << python->output;
  expect_hostile_strings(dlprof_test::strings_from_hex_lines(python->output));
#if !DLPROF_TEST_HAS_RAPIDJSON
  GTEST_SKIP() << "RapidJSON's headers not found: checked with Python's json only";
#endif
}

TEST(ChromeTraceTest, SavedHostileNamesMakeAFilePythonAccepts) {
  // Through save_chrome_trace and the atomic file, plain and gzip: the same repaired text.
  const TempDir dir;
  const fs::path plain = dir.path() / "saved.pt.trace.json";
  const fs::path compressed = dir.path() / "saved.pt.trace.json.gz";
  dlprof::save_chrome_trace(hostile_trace(), plain.string());
  dlprof::save_chrome_trace(hostile_trace(), compressed.string());
  const std::string text = read_file(plain);
  EXPECT_TRUE(is_valid_utf8(text));
  EXPECT_EQ(read_gzip(compressed), chrome_text(hostile_trace(), compressed.string()));
  const auto python = dlprof_test::run_python(dir.path(), dlprof_test::kPythonHostileStrings, {plain.string()});
  if (!python) GTEST_SKIP() << "no python3 to run: Python's json module not tried";
  ASSERT_EQ(python->status, 0) << python->output;
  EXPECT_EQ(dlprof_test::strings_from_hex_lines(python->output).size(), 11u);  // traceName is the path
}

// --- nesting ---------------------------------------------------------------------------------

// Every pair of X slices on one tid is disjoint or nested (Perfetto rejects partial overlaps).
void expect_strict_nesting(const json& document) {
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> slices_by_tid;
  for (const json& event : document.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    const std::int64_t start = to_ns(event.at("ts"));
    slices_by_tid[event.at("tid").get<std::int64_t>()].emplace_back(start, start + to_ns(event.at("dur")));
  }
  for (const auto& [tid, slices] : slices_by_tid) {
    for (std::size_t i = 0; i < slices.size(); ++i) {
      for (std::size_t j = i + 1; j < slices.size(); ++j) {
        const auto [a_start, a_end] = slices[i];
        const auto [b_start, b_end] = slices[j];
        const bool disjoint = a_end <= b_start || b_end <= a_start;
        const bool a_holds_b = a_start <= b_start && b_end <= a_end;
        const bool b_holds_a = b_start <= a_start && a_end <= b_end;
        EXPECT_TRUE(disjoint || a_holds_b || b_holds_a)
            << "tid " << tid << ": [" << a_start << ", " << a_end << ") overlaps [" << b_start << ", " << b_end << ")";
      }
    }
  }
}

TEST(ChromeTraceTest, RangeStraddlingStepIsClippedSoSlicesNest) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 5, 1)));
  prof.start();
  for (int i = 0; i < 5; ++i) {
    // The loop body's range outlives ProfilerStep#i: it ends after step() opened #i+1.
    DLPROF_RANGE("chrome_train_step");
    { DLPROF_RANGE("chrome_forward_pass"); }
    prof.step();
  }
  prof.stop();
  const auto trace = prof.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->clipped_ranges, 5u);  // each outlives its step; the last one is open when the window ends
  const json document = json::parse(chrome_text(*trace));
  EXPECT_EQ(document.at("dlprof_clipped_ranges"), trace->clipped_ranges);
  EXPECT_EQ(events_where(document, [](const json& e) { return e.at("name") == "chrome_train_step"; }).size(), 5u)
      << "the last train_step, open when the window closes, ends at the window's end";
  expect_strict_nesting(document);
}

TEST(ChromeTraceTest, RangesFromManyThreadsNestPerThread) {
  const auto trace = record_window([] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([] {
        for (int i = 0; i < 20; ++i) {
          DLPROF_RANGE("chrome_thread_outer");
          DLPROF_RANGE("chrome_thread_inner");
        }
      });
    for (std::thread& thread : threads) thread.join();
  });
  ASSERT_NE(trace, nullptr);
  const json document = json::parse(chrome_text(*trace));
  EXPECT_EQ(events_where(document, [](const json& e) { return e.at("ph") == "X"; }).size(), 3u * 20u * 2u);
  expect_strict_nesting(document);
}

dlprof::TraceEvent range_event(std::int64_t start_ns, std::int64_t end_ns, std::uint32_t name,
                               dlprof::EventKind kind = dlprof::EventKind::Range) {
  dlprof::TraceEvent event;
  event.start_ns = start_ns;
  event.end_ns = end_ns;
  event.name = name;
  event.kind = kind;
  return event;
}

std::vector<std::uint32_t> names_of(const std::vector<dlprof::TraceEvent>& events) {
  std::vector<std::uint32_t> names;
  for (const dlprof::TraceEvent& event : events) names.push_back(event.name);
  return names;
}

TEST(ChromeTraceOrderAndNestTest, ClipsAPartialOverlapToItsEnclosingRange) {
  std::vector<dlprof::TraceEvent> events = {range_event(0, 100, 0), range_event(50, 150, 1)};
  EXPECT_EQ(dlprof::detail::order_and_nest(events, 0, events.size()), 1u);
  EXPECT_EQ(events[0].end_ns, 100);
  EXPECT_EQ(events[1].start_ns, 50);
  EXPECT_EQ(events[1].end_ns, 100);
}

TEST(ChromeTraceOrderAndNestTest, LeavesProperNestingUntouchedAndSortsByStart) {
  std::vector<dlprof::TraceEvent> events = {range_event(60, 90, 2), range_event(0, 100, 0), range_event(10, 50, 1),
                                            range_event(20, 30, 3), range_event(200, 210, 4)};
  EXPECT_EQ(dlprof::detail::order_and_nest(events, 0, events.size()), 0u);
  EXPECT_THAT(names_of(events), ElementsAre(0, 1, 3, 2, 4));
  EXPECT_EQ(events[0].end_ns, 100);
  EXPECT_EQ(events[1].end_ns, 50);
  EXPECT_EQ(events[2].end_ns, 30);
  EXPECT_EQ(events[3].end_ns, 90);
  EXPECT_EQ(events[4].end_ns, 210);
}

TEST(ChromeTraceOrderAndNestTest, EqualStartPutsTheLongerRangeFirst) {
  std::vector<dlprof::TraceEvent> events = {range_event(10, 20, 1), range_event(10, 80, 0), range_event(10, 50, 2)};
  EXPECT_EQ(dlprof::detail::order_and_nest(events, 0, events.size()), 0u);
  EXPECT_THAT(names_of(events), ElementsAre(0, 2, 1));
}

TEST(ChromeTraceOrderAndNestTest, StepEnclosesARangeOfEqualExtent) {
  std::vector<dlprof::TraceEvent> events = {range_event(10, 20, 1), range_event(10, 20, 0, dlprof::EventKind::Step)};
  EXPECT_EQ(dlprof::detail::order_and_nest(events, 0, events.size()), 0u);
  EXPECT_THAT(names_of(events), ElementsAre(0, 1));
}

TEST(ChromeTraceOrderAndNestTest, ClippingKeepsLaterRangesNestedInTheClippedOne) {
  // step [0,100); train [50,150) straddles it; forward [60,140) sat inside train. After clipping
  // train to 100, forward must be clipped to 100 too.
  std::vector<dlprof::TraceEvent> events = {range_event(0, 100, 0, dlprof::EventKind::Step), range_event(50, 150, 1),
                                            range_event(60, 140, 2), range_event(100, 200, 3, dlprof::EventKind::Step)};
  EXPECT_EQ(dlprof::detail::order_and_nest(events, 0, events.size()), 2u);
  EXPECT_THAT(names_of(events), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(events[1].end_ns, 100);
  EXPECT_EQ(events[2].end_ns, 100);
  EXPECT_EQ(events[3].end_ns, 200);
}

TEST(ChromeTraceOrderAndNestTest, TouchesOnlyTheGivenSubrange) {
  std::vector<dlprof::TraceEvent> events = {range_event(500, 900, 9), range_event(50, 150, 1), range_event(0, 100, 0),
                                            range_event(400, 300, 8)};
  EXPECT_EQ(dlprof::detail::order_and_nest(events, 1, 3), 1u);
  EXPECT_THAT(names_of(events), ElementsAre(9, 0, 1, 8));
  EXPECT_EQ(events[0].end_ns, 900);
  EXPECT_EQ(events[2].end_ns, 100);
  EXPECT_EQ(events[3].end_ns, 300);
}

// --- files -----------------------------------------------------------------------------------

TEST(ChromeTraceTest, SaveWritesParsableJsonAtomically) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.event("saved", kBaseNs + 2'000, kBaseNs + 3'000);
  const fs::path path = dir.path() / "w.1.pt.trace.json";
  dlprof::save_chrome_trace(builder.trace(), path.string());

  const std::string text = read_file(path);
  EXPECT_EQ(text, chrome_text(builder.trace(), path.string()));
  EXPECT_EQ(json::parse(text).at("traceName"), path.string());
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) files.push_back(entry.path().filename().string());
  EXPECT_THAT(files, ElementsAre("w.1.pt.trace.json")) << "no temporary file may be left behind";
}

// save_chrome_trace streams through a bounded buffer; a trace of several MiB must come out byte for
// byte as the whole-buffer writer produces it, plain and gzip.
TEST(ChromeTraceTest, SaveStreamsLargeTracesWithoutChangingABytePlainOrGzip) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 100'000'000);
  for (int i = 0; i < 40'000; ++i) builder.event("streamed", kBaseNs + 2'000 + i * 2'000, kBaseNs + 3'000 + i * 2'000);
  const std::string expected_plain = chrome_text(builder.trace(), (dir.path() / "big.pt.trace.json").string());
  ASSERT_GT(expected_plain.size(), std::size_t{4} << 20) << "the trace must span several flushes";

  const fs::path plain = dir.path() / "big.pt.trace.json";
  dlprof::save_chrome_trace(builder.trace(), plain.string());
  EXPECT_EQ(read_file(plain), expected_plain);

  const fs::path compressed = dir.path() / "big.pt.trace.json.gz";
  dlprof::save_chrome_trace(builder.trace(), compressed.string());
  EXPECT_EQ(read_gzip(compressed), chrome_text(builder.trace(), compressed.string()));
}

TEST(ChromeTraceTest, SaveToGzPathWritesGzip) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.event("compressed", kBaseNs + 2'000, kBaseNs + 3'000);
  const fs::path path = dir.path() / "w.1.pt.trace.json.gz";
  dlprof::save_chrome_trace(builder.trace(), path.string());

  const std::string raw = read_file(path);
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(raw[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(raw[1]), 0x8b);
  const json document = json::parse(read_gzip(path));
  EXPECT_EQ(document.at("traceName"), path.string());
  EXPECT_EQ(non_metadata_events(document).at(0).at("name"), "compressed");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) files.push_back(entry.path().filename().string());
  EXPECT_THAT(files, ElementsAre("w.1.pt.trace.json.gz"));
}

TEST(ChromeTraceTest, SaveToUnwritablePathThrowsNamingThePath) {
  const TempDir dir;
  // A directory below a regular file cannot exist, even for root.
  std::ofstream(dir.path() / "file") << "not a directory";
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  for (const char* name : {"trace.json", "trace.json.gz"}) {
    const std::string path = (dir.path() / "file" / "sub" / name).string();
    try {
      dlprof::save_chrome_trace(builder.trace(), path);
      ADD_FAILURE() << "save(" << path << ") did not throw";
    } catch (const std::runtime_error& error) {
      EXPECT_THAT(error.what(), HasSubstr(path));
    }
  }
}

// A FIFO's content, read as `cat` would, until its writer closes it; what came before `limit` if
// no writer ever does (a FIFO replaced by a regular file never gets one).
std::string read_fifo(const fs::path& path, std::chrono::milliseconds limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // does not wait for a writer
  if (fd < 0) return {};
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;  // POLLHUP only once a writer has left
    char chunk[65536];
    const ssize_t size = ::read(fd, chunk, sizeof(chunk));
    if (size > 0) {
      text.append(chunk, static_cast<std::size_t>(size));
    } else if (size == 0) {
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      break;
    }
  }
  ::close(fd);
  return text;
}

bool is_link(const fs::path& path) { return fs::is_symlink(fs::symlink_status(path)); }

TEST(ChromeTraceTest, SaveThroughASymlinkReplacesItsTargetAndKeepsTheLink) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.event("through a link", kBaseNs + 2'000, kBaseNs + 3'000);
  fs::create_directory(dir.path() / "runs");
  std::ofstream(dir.path() / "runs" / "real.pt.trace.json") << "an older trace";
  // Relative links resolve from the directory that holds them; a link to a link is followed too.
  fs::create_symlink("runs/real.pt.trace.json", dir.path() / "link.pt.trace.json");
  fs::create_symlink(dir.path() / "link.pt.trace.json", dir.path() / "runs" / "chain.pt.trace.json");

  const fs::path link = dir.path() / "link.pt.trace.json";
  dlprof::save_chrome_trace(builder.trace(), link.string());
  EXPECT_TRUE(is_link(link));
  EXPECT_EQ(read_file(dir.path() / "runs" / "real.pt.trace.json"), chrome_text(builder.trace(), link.string()));

  const fs::path chain = dir.path() / "runs" / "chain.pt.trace.json";
  dlprof::save_chrome_trace(builder.trace(), chain.string());
  EXPECT_TRUE(is_link(chain));
  EXPECT_TRUE(is_link(link));
  EXPECT_EQ(read_file(dir.path() / "runs" / "real.pt.trace.json"), chrome_text(builder.trace(), chain.string()));

  // A link to a file not written yet: the file is created where the link points, gzip by the
  // name given.
  fs::create_symlink("runs/new.pt.trace.json.gz", dir.path() / "dangling.pt.trace.json.gz");
  const fs::path dangling = dir.path() / "dangling.pt.trace.json.gz";
  dlprof::save_chrome_trace(builder.trace(), dangling.string());
  EXPECT_TRUE(is_link(dangling));
  EXPECT_EQ(read_gzip(dir.path() / "runs" / "new.pt.trace.json.gz"), chrome_text(builder.trace(), dangling.string()));

  EXPECT_THAT(file_names(dir.path()), ElementsAre("dangling.pt.trace.json.gz", "link.pt.trace.json", "runs"))
      << "no temporary file may be left behind";
  EXPECT_THAT(file_names(dir.path() / "runs"),
              ElementsAre("chain.pt.trace.json", "new.pt.trace.json.gz", "real.pt.trace.json"));
}

TEST(ChromeTraceTest, SaveToAFifoWritesIntoItForItsReader) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 100'000'000);
  for (int i = 0; i < 5'000; ++i) builder.event("piped", kBaseNs + 2'000 + i * 2'000, kBaseNs + 3'000 + i * 2'000);
  const fs::path fifo = dir.path() / "pipe.pt.trace.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);

  std::string received;
  std::thread reader([&] { received = read_fifo(fifo, std::chrono::seconds(20)); });
  dlprof::save_chrome_trace(builder.trace(), fifo.string());  // waits for the reader's open
  reader.join();
  EXPECT_EQ(received, chrome_text(builder.trace(), fifo.string()));
  EXPECT_TRUE(json::accept(received));
  struct stat status {};
  ASSERT_EQ(::lstat(fifo.c_str(), &status), 0);
  EXPECT_TRUE(S_ISFIFO(status.st_mode));
  EXPECT_THAT(file_names(dir.path()), ElementsAre("pipe.pt.trace.json"));
}

TEST(ChromeTraceTest, SaveToAFifoWhoseReaderLeavesFailsWithoutEndingTheProcess) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 100'000'000);
  for (int i = 0; i < 5'000; ++i) builder.event("piped", kBaseNs + 2'000 + i * 2'000, kBaseNs + 3'000 + i * 2'000);
  const fs::path fifo = dir.path() / "pipe.pt.trace.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int read_end = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(read_end, 0);

  std::string error;
  std::thread writer([&] {
    try {
      dlprof::save_chrome_trace(builder.trace(), fifo.string());  // more than a pipe holds: blocks until the reader leaves
    } catch (const std::runtime_error& failure) {
      error = failure.what();
    }
  });
  pollfd ready{read_end, POLLIN, 0};
  EXPECT_EQ(::poll(&ready, 1, 20'000), 1);
  ::close(read_end);  // the writer's next write raises SIGPIPE, which must not end the process
  writer.join();
  EXPECT_THAT(error, HasSubstr(fifo.string()));
  EXPECT_THAT(error, HasSubstr("Broken pipe"));
}

TEST(ChromeTraceTest, SaveToDevNullWritesIntoTheDeviceWithoutReplacingIt) {
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  builder.event("discarded", kBaseNs + 2'000, kBaseNs + 3'000);
  const TempDir dir;
  fs::create_symlink("/dev/null", dir.path() / "discard.pt.trace.json");
  std::string error;
  try {
    dlprof::save_chrome_trace(builder.trace(), "/dev/null");
    dlprof::save_chrome_trace(builder.trace(), (dir.path() / "discard.pt.trace.json").string());  // through a link to it
  } catch (const std::runtime_error& failure) {
    error = failure.what();  // without root, a writer that replaces files cannot write in /dev
  }
  EXPECT_TRUE(is_link(dir.path() / "discard.pt.trace.json"));
  struct stat status {};
  ASSERT_EQ(::lstat("/dev/null", &status), 0);
  const bool still_the_device = S_ISCHR(status.st_mode) && status.st_rdev == makedev(1, 3);
  EXPECT_TRUE(still_the_device) << "/dev/null was replaced";
  if (!still_the_device && ::geteuid() == 0) {  // put the machine's /dev/null back
    ::unlink("/dev/null");
    ::mknod("/dev/null", S_IFCHR | 0666, makedev(1, 3));
    ::chmod("/dev/null", 0666);
  }
  EXPECT_EQ(error, "");
}

TEST(ChromeTraceTest, SaveToADirectoryIsRefusedNamingIt) {
  const TempDir dir;
  WindowTraceBuilder builder(kBaseNs + 1'000, kBaseNs + 9'000);
  try {
    dlprof::save_chrome_trace(builder.trace(), dir.path().string());
    ADD_FAILURE() << "save(" << dir.path() << ") did not throw";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(error.what(), fmt::format("dlprof: cannot write trace '{}': it is a directory", dir.path().string()));
  }
  EXPECT_TRUE(fs::is_directory(dir.path()));
  EXPECT_THAT(file_names(dir.path()), IsEmpty());
}

}  // namespace
