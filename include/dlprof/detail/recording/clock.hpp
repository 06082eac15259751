// dlprof/detail/recording/clock.hpp: the one time base of every event.
//
// Events store raw ticks of a cheap monotonic counter; ticks become CLOCK_REALTIME
// nanoseconds only when a recording window is drained, through a linear map measured at
// both ends of the window. CLOCK_REALTIME is what CUPTI's records and torch.profiler's
// traces use, so CPU and GPU events land on one axis and ranks on different hosts align.
//
// Which counter (figures in bench/RESULTS.md, BM_clock_* in bench/range_bench.cpp):
//  * the invariant TSC (rdtsc) when the CPU has one: about half the cost of a vDSO
//    clock_gettime on the machines measured, and it never jumps;
//  * CLOCK_MONOTONIC through the vDSO otherwise (no invariant TSC, or not x86).
// CLOCK_REALTIME itself is never read on the hot path: it costs more and can step backwards
// when NTP corrects it, which would break the strict nesting of ranges on a thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__) || defined(__i386__)
#  include <cpuid.h>
#  define DLPROF_HAS_TSC_ 1
#else
#  define DLPROF_HAS_TSC_ 0
#endif

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline std::int64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// True when the TSC ticks at a constant rate in every power state (CPUID 0x80000007 EDX[8]).
inline bool has_invariant_tsc() noexcept {
#if DLPROF_HAS_TSC_
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;  // the CPU has no such leaf
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

/// Which counter now_ticks() reads. Fixed before the first event is recorded (the Profiler
/// constructor calls select_clock()) and never changed afterwards.
inline std::atomic<bool> g_use_tsc{false};

inline bool select_clock() noexcept {
  static const bool use_tsc = [] {
    const bool tsc = has_invariant_tsc();
    g_use_tsc.store(tsc, std::memory_order_relaxed);
    return tsc;
  }();
  return use_tsc;
}

DLPROF_ALWAYS_INLINE std::int64_t now_ticks() noexcept {
#if DLPROF_HAS_TSC_
  if (DLPROF_LIKELY(g_use_tsc.load(std::memory_order_relaxed))) return static_cast<std::int64_t>(__builtin_ia32_rdtsc());  // <x86intrin.h>'s __rdtsc, without its cost to every file
#endif
  return clock_ns(CLOCK_MONOTONIC);
}

/// One simultaneous reading of the tick counter and CLOCK_REALTIME.
struct ClockSample {
  std::int64_t ticks;
  std::int64_t realtime_ns;
};

/// Reads both clocks several times and keeps the pair taken in the shortest interval, so a
/// preemption between the two reads cannot skew the map.
inline ClockSample sample_clocks() noexcept {
  ClockSample best{};
  std::int64_t best_gap = INT64_MAX;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::int64_t before = now_ticks();
    const std::int64_t realtime = clock_ns(CLOCK_REALTIME);
    const std::int64_t after = now_ticks();
    if (after - before < best_gap) {
      best_gap = after - before;
      best = ClockSample{before + (after - before) / 2, realtime};
    }
  }
  return best;
}

/// Linear map from ticks to CLOCK_REALTIME ns, anchored at a sample and scaled by the tick
/// period. Monotonic: t1 <= t2 implies to_realtime_ns(t1) <= to_realtime_ns(t2), so ranges that
/// nest in ticks nest in nanoseconds.
class ClockMap {
 public:
  ClockMap() = default;
  ClockMap(ClockSample anchor, double ns_per_tick) noexcept : anchor_(anchor), ns_per_tick_(ns_per_tick) {}

  /// The map through two samples; falls back to `fallback_ns_per_tick` when they are too close
  /// together for the ratio to be precise (under 1 ms).
  static ClockMap through(ClockSample first, ClockSample last, double fallback_ns_per_tick) noexcept {
    const std::int64_t ticks = last.ticks - first.ticks;
    const std::int64_t ns = last.realtime_ns - first.realtime_ns;
    if (ticks <= 0 || ns < 1'000'000) return ClockMap(first, fallback_ns_per_tick);
    return ClockMap(first, static_cast<double>(ns) / static_cast<double>(ticks));
  }

  std::int64_t to_realtime_ns(std::int64_t ticks) const noexcept {
    const double offset = static_cast<double>(ticks - anchor_.ticks) * ns_per_tick_;
    return anchor_.realtime_ns + static_cast<std::int64_t>(offset < 0 ? offset - 0.5 : offset + 0.5);
  }

  double ns_per_tick() const noexcept { return ns_per_tick_; }

 private:
  ClockSample anchor_{};
  double ns_per_tick_ = 1.0;
};

/// The tick period measured over the life of the process so far: a long baseline gives a
/// precise rate for windows too short to measure their own. The first call spends 2 ms. The rate
/// is measured again at most every kProcessRatePeriodTicks: a measurement samples the clocks 16
/// times, a microsecond or more, and a flight recorder asks at every step.
inline constexpr std::int64_t kProcessRatePeriodTicks = std::int64_t{1} << 24;
inline double process_ns_per_tick() noexcept {
  static const ClockSample origin = [] {
    const ClockSample first = sample_clocks();
    timespec pause{0, 2'000'000};
    nanosleep(&pause, nullptr);
    return first;
  }();
  static std::atomic<std::int64_t> measured_at{INT64_MIN};
  static std::atomic<double> measured{1.0};
  const std::int64_t at = measured_at.load(std::memory_order_acquire);
  if (at != INT64_MIN && now_ticks() - at < kProcessRatePeriodTicks) return measured.load(std::memory_order_relaxed);
  const ClockSample now = sample_clocks();
  const std::int64_t ticks = now.ticks - origin.ticks;
  const double rate = ticks <= 0 ? 1.0 : static_cast<double>(now.realtime_ns - origin.realtime_ns) / static_cast<double>(ticks);
  measured.store(rate, std::memory_order_relaxed);
  measured_at.store(now.ticks, std::memory_order_release);
  return rate;
}

}  // namespace detail
DLPROF_END_NAMESPACE
