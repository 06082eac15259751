// dlprof/detail/backends/thread_cpu_sampler.hpp: each recording thread's time on a CPU and time
// waiting for one, read from Linux's scheduler accounting at each recorded step's end and at the
// window's ends, on the thread that calls step().
//
// A thread's CPU time comes from its CPU-time clock (clock_gettime on the clock of its tid), its
// run-queue wait from /proc/self/task/<tid>/schedstat, whose three numbers are the nanoseconds it
// ran, the nanoseconds it was runnable but waited in a run queue, and how often it was scheduled
// in. Each thread's file is kept open (kMaxOpenFiles of them) and read again with pread(): two
// system calls a thread (bench/flight_bench.cpp measures them). Where the kernel keeps no
// schedstat (CONFIG_SCHED_INFO off, some sandboxes) the wait is unknown. A crash file holds no
// readings: a signal handler reads no files.
#pragma once

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A thread's scheduler accounting, counted since it began.
struct ThreadCpuTimes {
  std::int64_t cpu_ns = 0;
  std::int64_t run_delay_ns = -1;  ///< -1: not known
};

/// Reads "<run ns> <wait ns> <timeslices>" (a schedstat file's text); false for anything else.
inline bool parse_schedstat(const char* text, std::size_t size, ThreadCpuTimes& times) noexcept {
  std::int64_t fields[2] = {0, 0};
  std::size_t at = 0;
  for (std::int64_t& field : fields) {
    while (at < size && text[at] == ' ') ++at;
    const std::size_t digits_start = at;
    std::int64_t value = 0;
    for (; at < size && text[at] >= '0' && text[at] <= '9'; ++at) {
      if (value > (INT64_MAX - 9) / 10) return false;
      value = value * 10 + (text[at] - '0');
    }
    if (at == digits_start) return false;
    field = value;
  }
  times = {fields[0], fields[1]};
  return true;
}

/// The CPU-time clock of another thread of this process (Linux's MAKE_THREAD_CPUCLOCK with
/// CPUCLOCK_SCHED): what clock_gettime() reads of a thread named by its tid.
inline clockid_t thread_cpu_clock_of(std::int64_t os_tid) noexcept {
  // Shifted unsigned: the complement of a tid is negative, and shifting it as an int is undefined.
  return static_cast<clockid_t>((~static_cast<std::uint32_t>(os_tid) << 3) | 6u);
}

/// One reading of one thread. `thread` indexes the threads of its ThreadCpuReadings.
struct ThreadCpuReading {
  std::int64_t tick = 0;
  ThreadCpuTimes times;
  std::uint32_t thread = 0;
};

/// The readings of a window, oldest first, and the threads they are of.
struct ThreadCpuReadings {
  std::vector<ThreadCpuReading> readings;
  std::vector<ThreadInfo> threads;
  std::uint64_t dropped = 0;  ///< readings that gave way to newer ones
};

/// Reads the recording threads' accounting; kept by the Profiler, used on its control thread
/// only. A thread is known by its ordinal, which no later thread reuses as it may its tid.
/// ThreadCpuSampler is BasicThreadCpuSampler<>, a template as the ring registry it reads is.
template <class Deferred = void>
class BasicThreadCpuSampler {
 public:
  /// Readings kept at most; the oldest give way. At a reading per step, 64 threads fill it in
  /// a thousand steps: a flight recorder keeps fewer, a schedule records fewer per window.
  static constexpr std::size_t kMaxReadings = std::size_t{1} << 16;
  /// Schedstat files kept open at most; further threads' are opened for each reading.
  static constexpr std::size_t kMaxOpenFiles = 64;

  BasicThreadCpuSampler() = default;
  BasicThreadCpuSampler(const BasicThreadCpuSampler&) = delete;
  BasicThreadCpuSampler& operator=(const BasicThreadCpuSampler&) = delete;
  ~BasicThreadCpuSampler() { forget_threads(); }

  /// Reads every live thread that has a ring, now; stamps the readings with `tick`.
  void sample(std::int64_t tick) {
    live_.clear();
    ++round_;
    BasicRingRegistry<Deferred>::instance().visit_live([&](const ThreadRing& ring) {
      Known& known = known_thread(ring.os_tid(), ring.thread_ordinal());
      if (known.read_in_round == round_) return;  // a retired ring beside its thread's new one
      known.read_in_round = round_;
      if (known.name != ring.thread_name()) known.name = ring.thread_name();
      live_.push_back(static_cast<std::uint32_t>(&known - known_.data()));
    });
    for (Known& known : known_)  // ended since the last reading: its file goes now
      if (known.read_in_round != round_ && !known.ended) close_and_end(known);
    for (const std::uint32_t index : live_) {
      ThreadCpuTimes times;
      if (!read(known_[index], times)) continue;
      if (readings_.size() == kMaxReadings) {
        readings_.pop_front();
        ++dropped_;
      }
      readings_.push_back({tick, times, index});
    }
  }

  /// The readings of a window from `from_tick` on, the last round before it included (a flight
  /// recorder's window starts where a step ended, read just before), and the threads they are of.
  /// `keep_last_round`: the last round stays, the first of the next window; else none does.
  ThreadCpuReadings take(std::int64_t from_tick, bool keep_last_round) {
    ThreadCpuReadings taken;
    const std::int64_t first = last_round_at_or_before(from_tick);
    std::vector<std::uint32_t> index_of(known_.size(), UINT32_MAX);
    for (const ThreadCpuReading& reading : readings_) {
      if (reading.tick < first) continue;
      std::uint32_t& index = index_of[reading.thread];
      if (index == UINT32_MAX) {
        index = static_cast<std::uint32_t>(taken.threads.size());
        taken.threads.push_back({known_[reading.thread].os_tid, known_[reading.thread].name});
      }
      taken.readings.push_back({reading.tick, reading.times, index});
    }
    taken.dropped = std::exchange(dropped_, 0);
    if (keep_last_round)
      discard_before(INT64_MAX);
    else
      clear();
    return taken;
  }

  /// Forgets the readings before the last round taken at or before `tick`, and the ended threads
  /// no reading left is of.
  void discard_before(std::int64_t tick) {
    const std::int64_t first = last_round_at_or_before(tick);
    while (!readings_.empty() && readings_.front().tick < first) readings_.pop_front();
    if (ended_threads_) forget_ended_threads();
  }

  /// Forgets every reading.
  void clear() {
    readings_.clear();
    dropped_ = 0;
    if (ended_threads_) forget_ended_threads();
  }

  std::size_t open_files() const noexcept { return open_files_; }

 private:
  struct Known {
    std::int64_t os_tid = 0;
    std::uint32_t ordinal = 0;
    std::string name;
    int fd = -1;         ///< its schedstat file, kept open; -1 when not open
    bool ended = false;  ///< reading it failed: the thread has ended
    std::uint64_t read_in_round = 0;
  };

  Known& known_thread(std::int64_t os_tid, std::uint32_t ordinal) {
    for (Known& known : known_)
      if (known.ordinal == ordinal && known.os_tid == os_tid && !known.ended) return known;
    known_.push_back({os_tid, ordinal, {}, -1, false, 0});
    return known_.back();
  }

  /// The thread's CPU time from its CPU-time clock, which brings a running thread's count up to
  /// date (schedstat's is as of its last tick, up to 4 ms behind); its wait from schedstat, which
  /// changes only when it is scheduled in.
  bool read(Known& known, ThreadCpuTimes& times) {
    if (known.ended) return false;
    timespec cpu{};
    if (::clock_gettime(thread_cpu_clock_of(known.os_tid), &cpu) != 0) {
      close_and_end(known);
      return false;
    }
    times.cpu_ns = static_cast<std::int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec;
    times.run_delay_ns = -1;
    if (schedstat_missing_) return true;
    int fd = known.fd;
    const bool kept_open = fd >= 0;
    if (!kept_open) {
      char path[64];
      std::snprintf(path, sizeof(path), "/proc/self/task/%lld/schedstat", static_cast<long long>(known.os_tid));
      fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        // The thread has just ended, or this kernel keeps no schedstat: told apart by the
        // calling thread's own file.
        if (::access("/proc/thread-self/schedstat", R_OK) != 0) {
          schedstat_missing_ = true;
          return true;
        }
        close_and_end(known);
        return false;
      }
    }
    char text[96];
    ssize_t size;
    do {
      size = ::pread(fd, text, sizeof(text), 0);
    } while (size < 0 && errno == EINTR);
    ThreadCpuTimes scheduled;
    if (size <= 0 || !parse_schedstat(text, static_cast<std::size_t>(size), scheduled)) {  // ended: ESRCH
      if (!kept_open) ::close(fd);
      close_and_end(known);
      return false;
    }
    times.run_delay_ns = scheduled.run_delay_ns;
    if (!kept_open) {
      if (open_files_ < kMaxOpenFiles) {
        known.fd = fd;
        ++open_files_;
      } else {
        ::close(fd);
      }
    }
    return true;
  }

  /// The tick of the newest reading at or before `tick`; `tick` when there is none.
  std::int64_t last_round_at_or_before(std::int64_t tick) const noexcept {
    const auto after = std::upper_bound(readings_.begin(), readings_.end(), tick,
                                        [](std::int64_t t, const ThreadCpuReading& reading) { return t < reading.tick; });
    return after == readings_.begin() ? tick : std::prev(after)->tick;
  }

  void close_and_end(Known& known) noexcept {
    if (known.fd >= 0) {
      ::close(known.fd);
      known.fd = -1;
      --open_files_;
    }
    end(known);
  }

  void end(Known& known) noexcept {
    known.ended = true;
    ended_threads_ = true;
  }

  /// Ended threads no reading is of go, so that thread churn does not grow the list: the others'
  /// indices, and their readings', close up.
  void forget_ended_threads() {
    std::vector<std::uint32_t> index_of(known_.size(), UINT32_MAX);
    for (const ThreadCpuReading& reading : readings_) index_of[reading.thread] = 0;
    std::uint32_t kept = 0;
    for (std::size_t i = 0; i < known_.size(); ++i) {
      if (known_[i].ended && index_of[i] == UINT32_MAX) continue;
      index_of[i] = kept;
      if (kept != i) known_[kept] = std::move(known_[i]);
      ++kept;
    }
    known_.resize(kept);
    for (ThreadCpuReading& reading : readings_) reading.thread = index_of[reading.thread];
    ended_threads_ = std::any_of(known_.begin(), known_.end(), [](const Known& known) { return known.ended; });
  }

  void forget_threads() noexcept {
    for (Known& known : known_)
      if (known.fd >= 0) ::close(known.fd);
    known_.clear();
    open_files_ = 0;
  }

  std::vector<Known> known_;
  std::vector<std::uint32_t> live_;  // this reading's threads, by index into known_
  std::deque<ThreadCpuReading> readings_;
  std::uint64_t dropped_ = 0;
  std::size_t open_files_ = 0;
  std::uint64_t round_ = 0;
  bool ended_threads_ = false;  // some of known_ have ended
  bool schedstat_missing_ = false;
};

using ThreadCpuSampler = BasicThreadCpuSampler<>;

/// The readings of a window become Trace::thread_cpu, on the window's clock: those of the threads
/// that recorded events in it, the trace's threads.
inline void add_thread_cpu(Trace& trace, ThreadCpuReadings&& readings, const ClockMap& clock) {
  std::vector<std::uint32_t> thread_of(readings.threads.size(), UINT32_MAX);
  for (std::size_t i = 0; i < readings.threads.size(); ++i) {
    const auto same = std::find_if(trace.threads.begin(), trace.threads.end(),
                                   [&](const ThreadInfo& known) { return known.os_tid == readings.threads[i].os_tid; });
    if (same != trace.threads.end()) thread_of[i] = static_cast<std::uint32_t>(same - trace.threads.begin());
  }
  // By thread, then time: the readings come by time, so each goes to the next place of its
  // thread's run.
  std::vector<std::size_t> next_of(trace.threads.size() + 1, 0);
  for (const ThreadCpuReading& reading : readings.readings)
    if (thread_of[reading.thread] != UINT32_MAX) ++next_of[thread_of[reading.thread] + 1];
  for (std::size_t t = 1; t < next_of.size(); ++t) next_of[t] += next_of[t - 1];
  const std::size_t before = trace.thread_cpu.size();
  trace.thread_cpu.resize(before + next_of.back());
  for (const ThreadCpuReading& reading : readings.readings) {
    const std::uint32_t thread = thread_of[reading.thread];
    if (thread == UINT32_MAX) continue;
    trace.thread_cpu[before + next_of[thread]++] = {clock.to_realtime_ns(reading.tick), reading.times.cpu_ns,
                                                    reading.times.run_delay_ns, thread};
  }
  trace.dropped_thread_cpu_readings += readings.dropped;
}

}  // namespace detail
DLPROF_END_NAMESPACE
