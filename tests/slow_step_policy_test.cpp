// The flight recorder's rules for dumping a step for its time, without a Profiler: step times in
// ticks of 1 ns and the time now are given, so every threshold is checked at its edge.
#include <dlprof/detail/control/slow_step_policy.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

namespace slow_step_policy_test {

using dlprof::detail::RecentSteps;
using dlprof::detail::SlowStepPolicy;

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kMinute = 60'000 * kMs;

/// A policy that has seen RecentSteps::kCount steps of `step_ms` each, the last ending at `now`.
SlowStepPolicy with_baseline(double factor, std::int64_t step_ms, std::int64_t now = 0) {
  SlowStepPolicy policy(factor);
  for (std::size_t i = 0; i < RecentSteps::kCount; ++i)
    EXPECT_EQ(policy.step_ended(static_cast<std::int64_t>(i), step_ms * kMs, 1.0, now, false), std::nullopt);
  return policy;
}

TEST(SlowStepPolicyTest, NoStepIsJudgedBeforeTheBaselineHasTwentyOneSteps) {
  SlowStepPolicy policy(3);
  for (std::size_t i = 0; i + 1 < RecentSteps::kCount; ++i) policy.step_ended(static_cast<std::int64_t>(i), 10 * kMs, 1.0, 0, false);
  EXPECT_EQ(policy.median_ticks(), std::nullopt);
  EXPECT_EQ(policy.step_ended(20, 1000 * kMs, 1.0, 0, false), std::nullopt) << "the 21st step only completes the baseline";
  EXPECT_TRUE(policy.median_ticks().has_value());
}

TEST(SlowStepPolicyTest, AStepOverFactorTimesTheMedianAndAMillisecondMoreIsDumpedWithItsFigures) {
  SlowStepPolicy policy = with_baseline(3, 10);
  EXPECT_EQ(policy.step_ended(21, 30 * kMs, 1.0, 0, false), std::nullopt) << "exactly 3x is not over it";
  const std::optional<std::string> reason = policy.step_ended(22, 31 * kMs, 1.0, 0, false);
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, "slow step 22: 31.000 ms, 3.1x the median 10.000 ms of the 21 steps before it");
  EXPECT_EQ(policy.slow_steps_not_dumped(), 0u);
}

TEST(SlowStepPolicyTest, ShortStepsNeedAMillisecondMoreThanTheMedianToBeSlow) {
  SlowStepPolicy policy(3);
  for (int i = 0; i < 21; ++i) policy.step_ended(i, 100'000, 1.0, 0, false);  // 0.1 ms steps
  EXPECT_EQ(policy.step_ended(21, 1'000'000, 1.0, 0, false), std::nullopt) << "10x, but 0.9 ms more";
  EXPECT_TRUE(policy.step_ended(22, 1'100'001, 1.0, 0, false).has_value());
}

TEST(SlowStepPolicyTest, OneDumpAMinuteAndTheSlowStepsBetweenAreCounted) {
  SlowStepPolicy policy = with_baseline(2, 10);
  EXPECT_TRUE(policy.step_ended(21, 50 * kMs, 1.0, 5 * kMinute, false).has_value());
  EXPECT_EQ(policy.step_ended(22, 50 * kMs, 1.0, 6 * kMinute - 1, false), std::nullopt);
  EXPECT_EQ(policy.slow_steps_not_dumped(), 1u);
  EXPECT_TRUE(policy.step_ended(23, 50 * kMs, 1.0, 6 * kMinute, false).has_value());
}

TEST(SlowStepPolicyTest, AStepADumpSlowedIsNeitherJudgedNorPartOfTheBaseline) {
  SlowStepPolicy policy = with_baseline(2, 10);
  EXPECT_EQ(policy.step_ended(21, 5000 * kMs, 1.0, 0, true), std::nullopt);
  EXPECT_EQ(policy.median_ticks(), 10 * kMs);
  EXPECT_EQ(policy.slow_steps_not_dumped(), 0u);
}

TEST(SlowStepPolicyTest, AFactorOfZeroDumpsNoStepAndNoHang) {
  SlowStepPolicy policy = with_baseline(0, 10);
  EXPECT_EQ(policy.step_ended(21, 100'000 * kMs, 1.0, 0, false), std::nullopt);
  EXPECT_FALSE(policy.step_running(100'000 * kMs, 1.0, 0));
}

TEST(SlowStepPolicyTest, AStepStillRunningPastFactorTimesTheMedianAndHalfASecondIsHungOnce) {
  SlowStepPolicy policy = with_baseline(3, 100);
  EXPECT_FALSE(policy.step_running(800 * kMs, 1.0, kMinute)) << "3 x 100 ms + 500 ms is the edge";
  EXPECT_TRUE(policy.step_running(801 * kMs, 1.0, kMinute));
  EXPECT_FALSE(policy.step_running(10'000 * kMs, 1.0, 3 * kMinute)) << "once a step";
  // The step ends; the next one hangs too, but within the minute of a slow step's dump.
  EXPECT_TRUE(policy.step_ended(21, 20'000 * kMs, 1.0, 4 * kMinute, false).has_value());
  EXPECT_FALSE(policy.step_running(10'000 * kMs, 1.0, 4 * kMinute + kMinute / 2));
  EXPECT_TRUE(policy.step_running(10'000 * kMs, 1.0, 5 * kMinute));
}

TEST(SlowStepPolicyTest, TicksAreConvertedForTheMillisecondRule) {
  // 2 ns per tick: 0.4 ms steps are 200,000 ticks; a step of 1.5 ms, 750,000 ticks, is 1.1 ms more.
  SlowStepPolicy policy(3);
  for (int i = 0; i < 21; ++i) policy.step_ended(i, 200'000, 2.0, 0, false);
  const std::optional<std::string> reason = policy.step_ended(21, 750'000, 2.0, 0, false);
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, "slow step 21: 1.500 ms, 3.8x the median 0.400 ms of the 21 steps before it");
}

}  // namespace slow_step_policy_test
