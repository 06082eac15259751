// dlprof/detail/control/watchdog.hpp: the flight recorder's watch for a step that does not end.
//
// A slow step is dumped when it ends; a step that never ends (a collective waiting for a dead
// rank, a deadlock, an I/O stall) would leave nothing. The Profiler's watcher thread therefore
// looks at the step in progress, and once SlowStepPolicy (slow_step_policy.hpp) takes it for hung,
// dumps it while it runs with what every thread is inside: this file says what that is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/control/slow_step_policy.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/window/formatted_name.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A duration for a message: "812.345 ms", or "41.020 s" from a second.
inline std::string duration_text(double ns) {
  return ns >= 1e9 ? fmt::format("{:.3f} s", ns / 1e9) : fmt::format("{:.3f} ms", ns / 1e6);
}

/// What one live thread is inside at a moment: its open ranges, outermost first, and the
/// collective call in progress, if any.
struct ThreadInside {
  std::int64_t os_tid = 0;
  std::string thread_name;
  std::vector<ThreadRing::OpenRange> ranges;
  NameId collective = 0;  ///< 0: none
  std::int64_t collective_start = 0;
};

/// What every live thread that records is inside now.
template <class Deferred = void>
std::vector<ThreadInside> threads_inside_now() {
  std::vector<ThreadInside> threads;
  RingRegistry::instance().visit_live([&](const ThreadRing& ring) {
    ThreadInside thread;
    thread.os_tid = ring.os_tid();
    thread.thread_name = ring.thread_name();
    ring.open_ranges(thread.ranges);
    std::tie(thread.collective, thread.collective_start) = ring.collective_in_progress();
    if (!thread.ranges.empty() || thread.collective != 0) threads.push_back(std::move(thread));
  });
  return threads;
}

/// "inside gloo:all_reduce (record_param_comms) for 40.200 s, within all_reduce_gradients <
/// train_step": the innermost of what `thread` is inside, how long it has been, and what encloses
/// it. Names are as recorded: the report escapes them where it shows them. Call with the intern
/// table's lock held (name_of_unlocked).
inline std::string inside_text(const ThreadInside& thread, std::int64_t now_tick, double ns_per_tick) {
  std::vector<std::pair<std::string, std::int64_t>> chain;  // names and starts, outermost first
  for (const ThreadRing::OpenRange& range : thread.ranges)
    chain.emplace_back(is_format_site_id(range.name) ? format_with_kept_arguments(name_of_unlocked(range.name), range.arguments)
                                                     : std::string(name_of_unlocked(range.name)),
                       range.start);
  if (thread.collective != 0) {
    std::string collective = std::string(name_of_unlocked(thread.collective)) + " (record_param_comms)";
    // Where the call records its range itself, that range is the innermost open one already.
    if (!chain.empty() && chain.back().second >= thread.collective_start) chain.pop_back();
    chain.emplace_back(std::move(collective), thread.collective_start);
  }
  std::string text = fmt::format("inside {} for {}", chain.back().first,
                                 duration_text(static_cast<double>(now_tick - chain.back().second) * ns_per_tick));
  for (std::size_t i = chain.size() - 1; i-- > 0;) text += (i + 2 == chain.size() ? ", within " : " < ") + chain[i].first;
  return text;
}

/// The reason a hang dump gives: the step, how long it has run against the median, and what the
/// thread calling step() and up to three others are inside.
inline std::string hang_reason(std::int64_t step, std::int64_t running_ticks, std::int64_t median_ticks, double ns_per_tick,
                               std::int64_t stepping_tid, const std::vector<ThreadInside>& threads, std::int64_t now_tick) {
  const double running_ns = static_cast<double>(running_ticks) * ns_per_tick;
  std::string reason = fmt::format("{}step {} has run {}, {:.1f}x the median {} of the {} steps before it, and has not ended",
                                   kineto::key::kHangDumpPrefix, step, duration_text(running_ns),
                                   static_cast<double>(running_ticks) / static_cast<double>(std::max<std::int64_t>(median_ticks, 1)),
                                   duration_text(static_cast<double>(median_ticks) * ns_per_tick), RecentSteps::kCount);
  constexpr std::size_t kOtherThreadsNamed = 3;
  std::size_t others_named = 0;
  std::size_t others_left_out = 0;
  InternTable::instance().with_lock([&] {
    const auto stepping = std::find_if(threads.begin(), threads.end(), [&](const ThreadInside& t) { return t.os_tid == stepping_tid; });
    if (stepping != threads.end())
      reason += "; the thread calling step() is " + inside_text(*stepping, now_tick, ns_per_tick);
    else
      reason += "; the thread calling step() is inside no recorded range";
    for (const ThreadInside& thread : threads) {
      if (thread.os_tid == stepping_tid) continue;
      if (others_named == kOtherThreadsNamed) {
        ++others_left_out;
        continue;
      }
      ++others_named;
      reason += fmt::format("; thread {} ({}) is {}", thread.os_tid,
                            thread.thread_name.empty() ? std::string("unnamed") : thread.thread_name,
                            inside_text(thread, now_tick, ns_per_tick));
    }
  });
  if (others_left_out != 0) reason += fmt::format("; {} more threads are inside ranges", others_left_out);
  return reason;
}

}  // namespace detail
DLPROF_END_NAMESPACE
