// DLPROF_DISABLE: this translation unit is built with it (see tests/CMakeLists.txt), so its
// annotation macros must vanish without evaluating their arguments while the rest of the API
// (Profiler, options, traces) still compiles and works. disable_enabled_tu.cpp, built without
// it and linked into the same binary, shows that the two settings coexist.
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#if !defined(DLPROF_DISABLE)
#  error "disable_test.cpp must be compiled with DLPROF_DISABLE (see tests/CMakeLists.txt)"
#endif

namespace dlprof_disable_test {

// Defined in disable_enabled_tu.cpp: records one DLPROF_FUNCTION range named after itself, then
// `count` times a DLPROF_RANGE "enabled_tu_range" and a DLPROF_RANGE_F "enabled_tu_formatted {}"
// whose argument counts its evaluations; returns that count.
std::size_t record_in_enabled_tu(std::size_t count);

namespace {

// A category argument that counts how often it is evaluated. Only the disabled macros mention
// it, and they drop their arguments unseen: to the compiler it is unused.
[[maybe_unused]] dlprof::Category counted_category(int* evaluations) {
  ++*evaluations;
  return dlprof::Category::Forward;
}

TEST(DisableTest, MacrosDoNotEvaluateTheirArguments) {
  int evaluations = 0;
  DLPROF_RANGE("disabled_range", counted_category(&evaluations));
  DLPROF_RANGE_F("disabled_formatted {}", ++evaluations);
  DLPROF_FUNCTION();
  EXPECT_EQ(evaluations, 0);
}

TEST(DisableTest, DisabledMacrosRecordNothingWhileTheEnabledUnitRecords) {
  constexpr std::size_t kEnabledIterations = 10;
  std::shared_ptr<const dlprof::Trace> handed_over;
  // The rest of the API is untouched by DLPROF_DISABLE: options, handlers and the Profiler itself.
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(
      [&](const dlprof::Trace& trace) { handed_over = std::make_shared<const dlprof::Trace>(trace); }));
  profiler.start();
  int evaluations = 0;
  {
    DLPROF_RANGE("disabled_range", counted_category(&evaluations));
    DLPROF_RANGE_F("disabled_formatted {}", ++evaluations);
    DLPROF_FUNCTION();
  }
  const std::size_t enabled_evaluations = record_in_enabled_tu(kEnabledIterations);
  profiler.stop();

  EXPECT_EQ(evaluations, 0);
  // The same macros in the other translation unit evaluated their arguments while recording.
  EXPECT_EQ(enabled_evaluations, kEnabledIterations);
  ASSERT_NE(handed_over, nullptr);
  const dlprof::Trace& trace = *handed_over;
  std::size_t function_ranges = 0;
  std::size_t literal_ranges = 0;
  std::vector<std::string> formatted_names;
  for (const dlprof::TraceEvent& event : trace.events) {
    const std::string_view name = trace.name_of(event);
    if (name == "record_in_enabled_tu") ++function_ranges;
    if (name == "enabled_tu_range") ++literal_ranges;
    if (name.rfind("enabled_tu_formatted ", 0) == 0) formatted_names.emplace_back(name);
  }
  std::vector<std::string> expected_formatted_names;
  for (std::size_t i = 1; i <= kEnabledIterations; ++i)
    expected_formatted_names.push_back(fmt::format("enabled_tu_formatted {}", i));
  EXPECT_EQ(function_ranges, 1u);
  EXPECT_EQ(literal_ranges, kEnabledIterations);
  EXPECT_THAT(formatted_names, ::testing::UnorderedElementsAreArray(expected_formatted_names));
  // Nothing else: none of the disabled unit's ranges (its DLPROF_FUNCTION would be named TestBody).
  EXPECT_EQ(trace.events.size(), 1 + 2 * kEnabledIterations);
}

}  // namespace
}  // namespace dlprof_disable_test
