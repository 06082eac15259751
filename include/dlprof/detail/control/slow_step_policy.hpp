// dlprof/detail/control/slow_step_policy.hpp: when a flight recorder dumps a step for its time.
//
// A step that ends slower than slow_step_factor times the median of the 21 steps before it, and
// over a millisecond more, is dumped when it ends; a step still running that long, and half a
// second more, is dumped while it runs (a hang: detail/control/watchdog.hpp says what it was
// inside). Both share one limit of a dump a minute, so that a job slowing down for good writes a
// dump a minute rather than one a step. The policy holds no clock and no lock: the Profiler gives
// it each step's time and the time now, and calls it under its control lock.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/format/vocabulary.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The durations of the last steps (in ticks), and their median once there are enough of them.
class RecentSteps {
 public:
  /// Steps the median is taken over; no step is judged before this many have ended.
  static constexpr std::size_t kCount = 21;

  void add(std::int64_t ticks) noexcept {
    ticks_[count_ % kCount] = ticks;
    ++count_;
  }

  /// The median of the last kCount steps; nothing until that many have been added.
  std::optional<std::int64_t> median() const noexcept {
    if (count_ < kCount) return std::nullopt;
    std::array<std::int64_t, kCount> sorted = ticks_;
    const auto middle = sorted.begin() + kCount / 2;
    std::nth_element(sorted.begin(), middle, sorted.end());
    return *middle;
  }

  std::size_t count() const noexcept { return count_; }

 private:
  std::array<std::int64_t, kCount> ticks_{};
  std::size_t count_ = 0;
};

/// A step in progress is taken for hung once it has run this long beyond factor × median.
inline constexpr double kHangGraceNs = 500e6;

/// Whether a step that has run `running_ns` so far is hung against the `median_ns` of the steps
/// before it and the slow-step `factor` (0: never).
inline bool is_hung(double running_ns, double median_ns, double factor) noexcept {
  return factor != 0 && running_ns > factor * median_ns + kHangGraceNs;
}

/// The slow-step and hang rules of a flight recorder, over step times in ticks of
/// `ns_per_tick` nanoseconds and a monotonic time now in nanoseconds.
class SlowStepPolicy {
 public:
  static constexpr std::int64_t kDumpIntervalNs = 60'000'000'000;  ///< one slow-step or hang dump a minute
  static constexpr double kMinExcessNs = 1e6;  ///< a slow step is also over a millisecond slower than the median

  /// `factor`: ProfilerOptions::slow_step_factor (0: no step is ever dumped for its time).
  explicit SlowStepPolicy(double factor) noexcept : factor_(factor) {}

  /// Step `step` has ended after `ticks`. Returns why it is dumped ("slow step 40: 312.000 ms,
  /// 3.1x the median ..."), or nothing. A step in which a dump ran is neither judged nor a
  /// baseline for the next ones: dlprof slowed it.
  std::optional<std::string> step_ended(std::int64_t step, std::int64_t ticks, double ns_per_tick, std::int64_t now_ns,
                                        bool dumped_in_step) {
    hang_dumped_ = false;
    if (dumped_in_step) return std::nullopt;
    std::optional<std::string> reason;
    const std::optional<std::int64_t> median = recent_.median();
    if (factor_ != 0 && median && static_cast<double>(ticks) > factor_ * static_cast<double>(*median) &&
        static_cast<double>(ticks - *median) * ns_per_tick > kMinExcessNs) {
      if (take_dump_slot(now_ns)) {
        const double ms_per_tick = ns_per_tick / 1e6;
        reason = fmt::format("{}{}: {:.3f} ms, {:.1f}x the median {:.3f} ms of the {} steps before it",
                             kineto::key::kSlowStepDumpPrefix, step,
                             static_cast<double>(ticks) * ms_per_tick,
                             static_cast<double>(ticks) / static_cast<double>(std::max<std::int64_t>(*median, 1)),
                             static_cast<double>(*median) * ms_per_tick, RecentSteps::kCount);
      } else {
        ++not_dumped_;
      }
    }
    recent_.add(ticks);
    return reason;
  }

  /// The step in progress has run `running_ticks`: true when it is to be dumped now as hung,
  /// which happens once a step, and not within a minute of the last slow-step or hang dump.
  bool step_running(std::int64_t running_ticks, double ns_per_tick, std::int64_t now_ns) {
    const std::optional<std::int64_t> median = recent_.median();
    if (hang_dumped_ || !median ||
        !is_hung(static_cast<double>(running_ticks) * ns_per_tick, static_cast<double>(*median) * ns_per_tick, factor_) ||
        !take_dump_slot(now_ns))
      return false;
    hang_dumped_ = true;
    return true;
  }

  /// The median step the rules judge against, in ticks; nothing before RecentSteps::kCount steps.
  std::optional<std::int64_t> median_ticks() const noexcept { return recent_.median(); }

  /// Slow steps that were not dumped because another dump had been written less than a minute before.
  std::uint64_t slow_steps_not_dumped() const noexcept { return not_dumped_; }

 private:
  bool take_dump_slot(std::int64_t now_ns) noexcept {
    if (now_ns < next_dump_ns_) return false;
    next_dump_ns_ = now_ns + kDumpIntervalNs;
    return true;
  }

  double factor_;
  RecentSteps recent_;
  std::int64_t next_dump_ns_ = 0;
  std::uint64_t not_dumped_ = 0;
  bool hang_dumped_ = false;  // the step in progress was dumped as hung
};

}  // namespace detail
DLPROF_END_NAMESPACE
