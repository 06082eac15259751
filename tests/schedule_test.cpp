#include <dlprof/schedule.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <ostream>
#include <stdexcept>
#include <string>

namespace dlprof {

// Lets GoogleTest print an Action by name in failure messages instead of as raw bytes.
inline void PrintTo(Action action, std::ostream* os) {
  switch (action) {
    case Action::None:
      *os << "None";
      return;
    case Action::Warmup:
      *os << "Warmup";
      return;
    case Action::Record:
      *os << "Record";
      return;
    case Action::RecordAndSave:
      *os << "RecordAndSave";
      return;
  }
  *os << "Action(" << static_cast<int>(action) << ")";
}

}  // namespace dlprof

namespace {

using dlprof::Action;
using ::testing::HasSubstr;

// One combination of schedule parameters and torch.profiler.schedule's answer for it.
struct TorchScheduleRow {
  std::int64_t wait;
  std::int64_t warmup;
  std::int64_t active;
  std::int64_t repeat;
  std::int64_t skip_first;
  bool skip_first_wait;
  // Digit i is torch's ProfilerAction value for step i.
  const char* actions;
};

constexpr TorchScheduleRow kTorchScheduleTable[] = {
#include "data/torch_schedule_table.inc"
};

TEST(ScheduleTest, MatchesTorchProfilerScheduleGoldenTable) {
  // The generator emits the full parameter grid; a much shorter table means it was truncated.
  ASSERT_GE(std::size(kTorchScheduleTable), 150u);

  for (const TorchScheduleRow& row : kTorchScheduleTable) {
    const dlprof::Schedule schedule = dlprof::schedule(
        row.wait, row.warmup, row.active, row.repeat, row.skip_first, row.skip_first_wait);
    const std::size_t step_count = std::strlen(row.actions);
    ASSERT_EQ(step_count, 40u) << "malformed table row: " << row.actions;

    for (std::size_t step = 0; step < step_count; ++step) {
      const int torch_action = row.actions[step] - '0';
      const int dlprof_action = static_cast<int>(schedule(static_cast<std::int64_t>(step)));
      EXPECT_EQ(dlprof_action, torch_action)
          << "schedule(wait=" << row.wait << ", warmup=" << row.warmup
          << ", active=" << row.active << ", repeat=" << row.repeat
          << ", skip_first=" << row.skip_first
          << ", skip_first_wait=" << std::boolalpha << row.skip_first_wait << ") at step "
          << step;
    }
  }
}

TEST(ScheduleTest, SkipFirstThenTwoRepeatedCycles) {
  // skip_first=2 skips steps 0-1; each 4-step cycle is wait, warmup, record, record-and-save;
  // repeat=2 stops after the second cycle.
  const dlprof::Schedule schedule =
      dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/2, /*skip_first=*/2);

  EXPECT_EQ(schedule(0), Action::None);
  EXPECT_EQ(schedule(1), Action::None);

  EXPECT_EQ(schedule(2), Action::None);
  EXPECT_EQ(schedule(3), Action::Warmup);
  EXPECT_EQ(schedule(4), Action::Record);
  EXPECT_EQ(schedule(5), Action::RecordAndSave);

  EXPECT_EQ(schedule(6), Action::None);
  EXPECT_EQ(schedule(7), Action::Warmup);
  EXPECT_EQ(schedule(8), Action::Record);
  EXPECT_EQ(schedule(9), Action::RecordAndSave);

  for (std::int64_t step = 10; step < 100; ++step) {
    EXPECT_EQ(schedule(step), Action::None) << "step " << step;
  }
}

TEST(ScheduleTest, SkipFirstWaitStartsFirstCycleRightAfterSkipFirst) {
  // skip_first_wait drops the first cycle's 2 wait steps, so warmup begins at step 3 instead
  // of step 5; repeat=1 stops after that single cycle.
  const dlprof::Schedule schedule =
      dlprof::schedule(/*wait=*/2, /*warmup=*/1, /*active=*/2, /*repeat=*/1, /*skip_first=*/3,
                       /*skip_first_wait=*/true);

  EXPECT_EQ(schedule(0), Action::None);
  EXPECT_EQ(schedule(1), Action::None);
  EXPECT_EQ(schedule(2), Action::None);

  EXPECT_EQ(schedule(3), Action::Warmup);
  EXPECT_EQ(schedule(4), Action::Record);
  EXPECT_EQ(schedule(5), Action::RecordAndSave);

  for (std::int64_t step = 6; step < 100; ++step) {
    EXPECT_EQ(schedule(step), Action::None) << "step " << step;
  }
}

TEST(ScheduleTest, RepeatZeroCyclesForever) {
  // Cycle length is 2 + 1 + 3 = 6 and starts at step 1 (skip_first=1), so step s sits at
  // position (s - 1) % 6 of its cycle: 0-1 wait, 2 warmup, 3-4 record, 5 record-and-save.
  const dlprof::Schedule schedule =
      dlprof::schedule(/*wait=*/2, /*warmup=*/1, /*active=*/3, /*repeat=*/0, /*skip_first=*/1);

  // 10'000'000 - 1 = 9'999'999 = 6 * 1'666'666 + 3.
  EXPECT_EQ(schedule(9'999'998), Action::None);            // position 1
  EXPECT_EQ(schedule(9'999'999), Action::Warmup);          // position 2
  EXPECT_EQ(schedule(10'000'000), Action::Record);         // position 3
  EXPECT_EQ(schedule(10'000'001), Action::Record);         // position 4
  EXPECT_EQ(schedule(10'000'002), Action::RecordAndSave);  // position 5
  EXPECT_EQ(schedule(10'000'003), Action::None);           // position 0 of the next cycle

  // Steps beyond 32 bits must not overflow: 1'000'000'000'001 - 1 = 6 * 166'666'666'666 + 4.
  EXPECT_EQ(schedule(1'000'000'000'001), Action::Record);
  EXPECT_EQ(schedule(1'000'000'000'002), Action::RecordAndSave);
}

TEST(ScheduleTest, RepeatLimitStillAppliesFarAway) {
  const dlprof::Schedule schedule =
      dlprof::schedule(/*wait=*/2, /*warmup=*/1, /*active=*/3, /*repeat=*/3, /*skip_first=*/1);

  EXPECT_EQ(schedule(18), Action::RecordAndSave);  // last step of the third cycle
  EXPECT_EQ(schedule(19), Action::None);
  EXPECT_EQ(schedule(10'000'000), Action::None);
  EXPECT_EQ(schedule(1'000'000'000'002), Action::None);
}

TEST(ScheduleTest, SingleActiveStepWithoutWaitOrWarmupSavesEveryStep) {
  const dlprof::Schedule schedule = dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/1);

  for (std::int64_t step = 0; step < 1000; ++step) {
    EXPECT_EQ(schedule(step), Action::RecordAndSave) << "step " << step;
  }
  EXPECT_EQ(schedule(10'000'000), Action::RecordAndSave);
}

TEST(ScheduleTest, DefaultConstructedScheduleAlwaysRecords) {
  const dlprof::Schedule schedule;

  for (std::int64_t step = 0; step < 1000; ++step) {
    EXPECT_EQ(schedule(step), Action::Record) << "step " << step;
  }
  EXPECT_EQ(schedule(10'000'000), Action::Record);
}

// Expects dlprof::schedule(arguments...) to throw std::invalid_argument naming argument_name.
template <typename... Arguments>
void ExpectInvalidArgumentNaming(const char* argument_name, Arguments... arguments) {
  try {
    static_cast<void>(dlprof::schedule(arguments...));
    ADD_FAILURE() << "expected std::invalid_argument naming '" << argument_name << "'";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(std::string(error.what()), HasSubstr(argument_name));
  }
}

TEST(ScheduleTest, RejectsZeroActive) {
  ExpectInvalidArgumentNaming("active", /*wait=*/1, /*warmup=*/1, /*active=*/0);
}

TEST(ScheduleTest, RejectsNegativeActive) {
  ExpectInvalidArgumentNaming("active", /*wait=*/1, /*warmup=*/1, /*active=*/-1);
}

TEST(ScheduleTest, RejectsNegativeWait) {
  ExpectInvalidArgumentNaming("wait", /*wait=*/-1, /*warmup=*/1, /*active=*/1);
}

TEST(ScheduleTest, RejectsNegativeWarmup) {
  ExpectInvalidArgumentNaming("warmup", /*wait=*/1, /*warmup=*/-1, /*active=*/1);
}

TEST(ScheduleTest, RejectsNegativeRepeat) {
  ExpectInvalidArgumentNaming("repeat", /*wait=*/1, /*warmup=*/1, /*active=*/1, /*repeat=*/-1);
}

TEST(ScheduleTest, RejectsNegativeSkipFirst) {
  ExpectInvalidArgumentNaming("skip_first", /*wait=*/1, /*warmup=*/1, /*active=*/1,
                              /*repeat=*/0, /*skip_first=*/-1);
}


// Sums of huge arguments (the period, a step plus wait) would overflow int64 (UBSan): each phase
// is bounded, and a far step still gets an action.
TEST(ScheduleTest, RejectsPhasesWhoseSumsWouldOverflow) {
  constexpr std::int64_t kHuge = INT64_MAX;
  ExpectInvalidArgumentNaming("wait", /*wait=*/kHuge, /*warmup=*/1, /*active=*/1);
  ExpectInvalidArgumentNaming("warmup", /*wait=*/1, /*warmup=*/kHuge, /*active=*/1);
  ExpectInvalidArgumentNaming("active", /*wait=*/1, /*warmup=*/1, /*active=*/kHuge);
  ExpectInvalidArgumentNaming("skip_first", /*wait=*/1, /*warmup=*/1, /*active=*/1, /*repeat=*/0, /*skip_first=*/kHuge);
  const dlprof::Schedule largest = dlprof::schedule(std::int64_t{1} << 60, std::int64_t{1} << 60, std::int64_t{1} << 60, 0, 0,
                                                    /*skip_first_wait=*/true);
  EXPECT_EQ(largest(kHuge), dlprof::Action::Warmup);
  EXPECT_EQ(largest(0), dlprof::Action::Warmup);  // skip_first_wait: the first cycle starts at its warm-up
}

}  // namespace

namespace dlprof {
namespace {

// torch.profiler's _get_action_map, pair by pair: prepare_trace is `arm`, start_trace `start`,
// stop_trace with trace_ready `save`, stop_trace alone `discard`, and the "Incorrect schedule"
// warning `warn`.
TEST(ActionMapTest, EveryPairOfActionsDoesWhatTorchsActionMapDoes) {
  struct Row {
    Action previous, current;
    bool save, discard, warn, arm, start;
  };
  constexpr Action N = Action::None, W = Action::Warmup, R = Action::Record, S = Action::RecordAndSave;
  const Row rows[] = {
      {N, N, false, false, false, false, false}, {N, W, false, false, false, true, false},
      {N, R, false, false, false, true, true},   {N, S, false, false, false, true, true},
      {W, N, false, false, true, false, false},  {W, W, false, false, false, false, false},
      {W, R, false, false, false, false, true},  {W, S, false, false, false, false, true},
      {R, N, false, true, true, false, false},   {R, W, false, true, true, false, false},
      {R, R, false, false, false, false, false}, {R, S, false, false, false, false, false},
      {S, N, true, false, false, false, false},  {S, W, true, false, false, true, false},
      {S, R, true, false, false, true, true},    {S, S, true, false, false, true, true},
  };
  for (const Row& row : rows) {
    const ActionMapSteps steps = action_map_steps(row.previous, row.current);
    SCOPED_TRACE(std::string(to_string(row.previous)) + " -> " + std::string(to_string(row.current)));
    EXPECT_EQ(steps.save, row.save);
    EXPECT_EQ(steps.discard, row.discard);
    EXPECT_EQ(steps.warn, row.warn);
    EXPECT_EQ(steps.arm, row.arm);
    EXPECT_EQ(steps.start, row.start);
  }
  static_assert(action_map_steps(Action::RecordAndSave, Action::Record).save, "a constant expression");
}

}  // namespace
}  // namespace dlprof
