// Each recording thread's CPU time and run-queue wait (detail/backends/thread_cpu_sampler.hpp):
// the schedstat text, the sampler over live and ended threads, and the readings a Profiler's
// windows and a flight recorder's dumps carry.
#include <dlprof/analysis/step_breakdown.hpp>
#include <dlprof/analysis/thread_cpu.hpp>
#include <dlprof/detail/backends/thread_cpu_sampler.hpp>
#include <dlprof/profiler.hpp>

#include <gtest/gtest.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using dlprof::detail::ThreadCpuTimes;

std::int64_t own_cpu_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void spin_for_cpu(std::int64_t ns) {
  const std::int64_t until = own_cpu_ns() + ns;
  while (own_cpu_ns() < until) {
  }
}

bool kernel_has_schedstat() { return ::access("/proc/thread-self/schedstat", R_OK) == 0; }

/// A thread held alive until released, so that readings taken meanwhile find it.
class HeldThread {
 public:
  template <class Work>
  explicit HeldThread(Work work) : thread_([this, work] {
      work();
      ready_.store(true);
      while (!release_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }) {
    while (!ready_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~HeldThread() { join(); }
  void join() {
    release_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> ready_{false};
  std::atomic<bool> release_{false};
  std::thread thread_;
};

TEST(ThreadCpuSamplerTest, ReadsSchedstatsThreeNumbers) {
  ThreadCpuTimes times;
  constexpr char kText[] = "282710830 136913022 54\n";
  ASSERT_TRUE(dlprof::detail::parse_schedstat(kText, sizeof(kText) - 1, times));
  EXPECT_EQ(times.cpu_ns, 282710830);
  EXPECT_EQ(times.run_delay_ns, 136913022);
}

TEST(ThreadCpuSamplerTest, RefusesAnythingElse) {
  ThreadCpuTimes times{7, 8};
  for (const std::string text : {"", "\n", "abc def 1", "12", "12 x", "-1 2 3", "99999999999999999999 1 1"})
    EXPECT_FALSE(dlprof::detail::parse_schedstat(text.data(), text.size(), times)) << '"' << text << '"';
  EXPECT_EQ(times.cpu_ns, 7) << "a refused text leaves the times as they were";
}

/// The readings of the thread whose os_tid is `tid` in `taken`.
std::vector<dlprof::detail::ThreadCpuReading> readings_of(const dlprof::detail::ThreadCpuReadings& taken,
                                                         std::int64_t tid) {
  std::vector<dlprof::detail::ThreadCpuReading> found;
  for (const auto& reading : taken.readings)
    if (taken.threads[reading.thread].os_tid == tid) found.push_back(reading);
  return found;
}

TEST(ThreadCpuSamplerTest, ReadsEveryLiveRecordingThreadAndLetsEndedOnesGo) {
  std::atomic<std::int64_t> spinner_tid{0}, sleeper_tid{0};
  dlprof::detail::ThreadCpuSampler sampler;
  auto spinner = std::make_unique<HeldThread>([&] {
    dlprof::detail::attach_thread_ring();
    spinner_tid = dlprof::detail::current_os_tid();
  });
  auto sleeper = std::make_unique<HeldThread>([&] {
    dlprof::detail::attach_thread_ring();
    sleeper_tid = dlprof::detail::current_os_tid();
  });
  sampler.sample(1);
  const std::size_t open_with_both = sampler.open_files();
  std::thread([] {}).join();  // a thread without a ring is not read
  sleeper->join();            // ends: read no more, its file closed
  sampler.sample(2);
  EXPECT_EQ(sampler.open_files(), open_with_both - 1);
  spinner.reset();
  const dlprof::detail::ThreadCpuReadings taken = sampler.take(0, /*keep_last_round=*/false);
  EXPECT_EQ(readings_of(taken, spinner_tid).size(), 2u);
  ASSERT_EQ(readings_of(taken, sleeper_tid).size(), 1u);
  EXPECT_EQ(readings_of(taken, sleeper_tid)[0].tick, 1);
  if (kernel_has_schedstat()) {
    EXPECT_GE(readings_of(taken, spinner_tid)[0].times.run_delay_ns, 0);
  }
  sampler.sample(3);
  EXPECT_TRUE(readings_of(sampler.take(0, false), spinner_tid).empty()) << "an ended thread is read no more";
}

TEST(ThreadCpuSamplerTest, AFlightRecordersWindowKeepsTheReadingBeforeIt) {
  dlprof::detail::ThreadCpuSampler sampler;
  dlprof::detail::attach_thread_ring();
  const std::int64_t tid = dlprof::detail::current_os_tid();
  for (std::int64_t tick : {10, 20, 30}) sampler.sample(tick);
  // A window starting at 25 begins with the reading at 20, which then stays for the next window.
  const auto window = readings_of(sampler.take(25, /*keep_last_round=*/true), tid);
  ASSERT_EQ(window.size(), 2u);
  EXPECT_EQ(window[0].tick, 20);
  EXPECT_EQ(window[1].tick, 30);
  sampler.sample(40);
  sampler.discard_before(35);
  const auto next = readings_of(sampler.take(35, /*keep_last_round=*/false), tid);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].tick, 30);
  EXPECT_EQ(next[1].tick, 40);
}

TEST(ThreadCpuSamplerTest, TheCpuTimeOfEachThreadIsItsOwn) {
  dlprof::detail::ThreadCpuSampler sampler;
  std::atomic<std::int64_t> spinner_tid{0}, sleeper_tid{0};
  std::atomic<int> phase{0};
  std::thread spinner([&] {
    dlprof::detail::attach_thread_ring();
    spinner_tid = dlprof::detail::current_os_tid();
    phase.fetch_add(1);
    while (phase.load() < 3) std::this_thread::yield();
    spin_for_cpu(40'000'000);
    phase.fetch_add(1);
    while (phase.load() < 6) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::thread sleeper([&] {
    dlprof::detail::attach_thread_ring();
    sleeper_tid = dlprof::detail::current_os_tid();
    phase.fetch_add(1);
    while (phase.load() < 3) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    phase.fetch_add(1);
    while (phase.load() < 6) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (phase.load() < 2) std::this_thread::yield();
  sampler.sample(1);
  phase.fetch_add(1);
  while (phase.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sampler.sample(2);
  phase.fetch_add(1);
  spinner.join();
  sleeper.join();
  const dlprof::detail::ThreadCpuReadings taken = sampler.take(0, false);
  const auto spun = readings_of(taken, spinner_tid);
  const auto slept = readings_of(taken, sleeper_tid);
  ASSERT_EQ(spun.size(), 2u);
  ASSERT_EQ(slept.size(), 2u);
  EXPECT_GE(spun[1].times.cpu_ns - spun[0].times.cpu_ns, 40'000'000) << "it spun for 40 ms of its own CPU time";
  EXPECT_LT(slept[1].times.cpu_ns - slept[0].times.cpu_ns, 20'000'000) << "it slept";
}

/// A schedule that records steps 0 and 1 of a Profiler.
dlprof::ProfilerOptions two_recorded_steps(std::shared_ptr<const dlprof::Trace>& kept) {
  return dlprof::ProfilerOptions{}
      .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/2, /*repeat=*/1))
      .on_trace_ready([&kept](const dlprof::Trace& trace) { kept = std::make_shared<dlprof::Trace>(trace); });
}

TEST(ThreadCpuProfilerTest, AWindowHoldsAReadingAtItsStartAndAtEachStepsEnd) {
  std::shared_ptr<const dlprof::Trace> trace;
  dlprof::Profiler profiler(two_recorded_steps(trace));
  std::atomic<std::int64_t> loader_tid{0};
  profiler.start();
  HeldThread loader([&] {
    dlprof::set_thread_name("loader-0");
    DLPROF_RANGE("load_batch", dlprof::Category::DataLoader);
    loader_tid = dlprof::detail::current_os_tid();
  });
  {
    DLPROF_RANGE("work");
    spin_for_cpu(5'000'000);
  }
  profiler.step();
  {
    DLPROF_RANGE("work");
    spin_for_cpu(5'000'000);
  }
  profiler.step();
  loader.join();
  profiler.stop();
  ASSERT_NE(trace, nullptr);
  const auto thread_index = [&](std::int64_t tid) {
    for (std::size_t i = 0; i < trace->threads.size(); ++i)
      if (trace->threads[i].os_tid == tid) return static_cast<std::int64_t>(i);
    return std::int64_t{-1};
  };
  const std::int64_t main = thread_index(dlprof::detail::current_os_tid());
  const std::int64_t loader_index = thread_index(loader_tid);
  ASSERT_GE(main, 0);
  ASSERT_GE(loader_index, 0);
  std::size_t main_readings = 0, loader_readings = 0;
  for (const dlprof::ThreadCpuSample& sample : trace->thread_cpu) {
    main_readings += sample.thread == static_cast<std::uint32_t>(main);
    loader_readings += sample.thread == static_cast<std::uint32_t>(loader_index);
    EXPECT_GE(sample.time_ns, trace->window_start_ns);
    EXPECT_LE(sample.time_ns, trace->window_end_ns);
  }
  // The window's start and each step's end, and each step's start unless the reading before it
  // was taken less than 20 us earlier.
  EXPECT_GE(main_readings, 3u);
  EXPECT_LE(main_readings, 5u);
  EXPECT_GE(loader_readings, 2u) << "the loader started in the first step";
  EXPECT_LE(loader_readings, 3u) << "the loader started in the first step";
  EXPECT_EQ(trace->threads[static_cast<std::size_t>(loader_index)].name, "loader-0");

  const dlprof::analysis::ThreadCpu cpu =
      dlprof::analysis::thread_cpu(*trace, dlprof::analysis::step_breakdown(*trace).steps);
  ASSERT_FALSE(cpu.empty());
  const dlprof::analysis::ThreadCpuRow& training = cpu.threads.front();
  EXPECT_EQ(training.thread, static_cast<std::uint32_t>(main));
  EXPECT_EQ(training.role, dlprof::analysis::ThreadRole::Training);
  ASSERT_EQ(training.steps.size(), 2u);
  for (const auto& step : training.steps) {
    ASSERT_TRUE(step);
    // A step's start shares the reading at the last step's end, so what ran between the two is
    // spread over the readings' gap: on a busy machine a thread preempted there loses some.
    EXPECT_GE(step->cpu_ns, 4'900'000) << "each step spun 5 ms";
    EXPECT_LE(step->cpu_ns, step->wall_ns + 1'000'000);
  }
}

TEST(ThreadCpuProfilerTest, NotReadWhenTheOptionsSayNo) {
  std::shared_ptr<const dlprof::Trace> trace;
  dlprof::Profiler profiler(two_recorded_steps(trace).thread_cpu(false));
  profiler.start();
  profiler.step();
  profiler.step();
  profiler.stop();
  ASSERT_NE(trace, nullptr);
  EXPECT_TRUE(trace->thread_cpu.empty());
}

TEST(ThreadCpuProfilerTest, StepsFarShorterThanAReadingShareReadingsAndAllHaveFigures) {
  std::shared_ptr<const dlprof::Trace> trace;
  constexpr int kSteps = 400;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/kSteps, /*repeat=*/1))
                                .on_trace_ready([&](const dlprof::Trace& t) { trace = std::make_shared<dlprof::Trace>(t); }));
  profiler.start();
  for (int step = 0; step < kSteps; ++step) {
    DLPROF_RANGE("tiny_step");
    profiler.step();
  }
  profiler.stop();
  ASSERT_NE(trace, nullptr);
  const dlprof::analysis::ThreadCpu cpu =
      dlprof::analysis::thread_cpu(*trace, dlprof::analysis::step_breakdown(*trace).steps);
  ASSERT_FALSE(cpu.empty());
  const dlprof::analysis::ThreadCpuRow& training = cpu.threads.front();
  std::size_t readings = 0;
  for (const dlprof::ThreadCpuSample& sample : trace->thread_cpu) {
    readings += sample.thread == training.thread;
    EXPECT_GE(sample.time_ns, trace->window_start_ns);
    EXPECT_LE(sample.time_ns, trace->window_end_ns);
  }
  EXPECT_GE(readings, 2u) << "the window's ends";
  EXPECT_LT(readings, static_cast<std::size_t>(kSteps) / 2) << "steps of a few microseconds share readings";
  ASSERT_EQ(training.steps.size(), static_cast<std::size_t>(kSteps));
  for (const auto& step : training.steps) {
    ASSERT_TRUE(step) << "interpolated between the readings around it";
    EXPECT_LE(step->cpu_ns, step->wall_ns + 1'000'000);
  }
}

TEST(ThreadCpuProfilerTest, AFlightRecordersDumpSpansItsStepsAndTheStepInProgress) {
  std::vector<std::shared_ptr<const dlprof::Trace>> dumps;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .mode(dlprof::Mode::FlightRecorder)
                                .flight_steps(3)
                                .slow_step_factor(0)
                                .on_trace_ready([&](const dlprof::Trace& trace) {
                                  dumps.push_back(std::make_shared<dlprof::Trace>(trace));
                                }));
  profiler.start();
  for (int step = 0; step < 6; ++step) {
    DLPROF_RANGE("work");
    profiler.step();
  }
  ASSERT_TRUE(profiler.dump("first"));
  for (int step = 0; step < 2; ++step) profiler.step();
  ASSERT_TRUE(profiler.dump("second"));
  profiler.stop();
  ASSERT_EQ(dumps.size(), 2u);
  for (const auto& dump : dumps) {
    const dlprof::analysis::StepBreakdown steps = dlprof::analysis::step_breakdown(*dump);
    const dlprof::analysis::ThreadCpu cpu = dlprof::analysis::thread_cpu(*dump, steps.steps);
    ASSERT_FALSE(cpu.empty()) << dump->flight_recorder_dump;
    const dlprof::analysis::ThreadCpuRow& training = cpu.threads.front();
    EXPECT_EQ(training.role, dlprof::analysis::ThreadRole::Training);
    for (std::size_t s = 0; s < training.steps.size(); ++s)
      EXPECT_TRUE(training.steps[s]) << dump->flight_recorder_dump << ": step " << steps.steps[s].name
                                     << " has no CPU time";
  }
}

}  // namespace
