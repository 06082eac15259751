// A training loop written as a user writes one and controlled from its launcher alone: a plain
// Profiler, started, stepped and stopped, with no option set in the code. settings_test runs it
// with DLPROF_* variables and a DLPROF_CONFIG file and judges it by the traces it leaves, its
// stderr and its exit status. It prints the options the Profiler ended up with.
//
//   launched_training STEPS
#include <dlprof/profiler.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  dlprof::Profiler prof;
  prof.start();
  double sum = 0;
  for (int step = 0; step < steps; ++step) {
    DLPROF_RANGE("train_step");
    for (int i = 0; i < 1000; ++i) sum += static_cast<double>(i) * step;
    prof.step();
  }
  prof.stop();
  const dlprof::ProfilerOptions& options = prof.options();
  const dlprof::Schedule& schedule = options.schedule();
  fmt::print("mode={} schedule={},{},{},{},{} handlers={} events_per_thread={} record_shapes={} traces={} sum={}\n",
             prof.mode() == dlprof::Mode::Off ? "off" : "scheduled", schedule.wait(), schedule.warmup(),
             schedule.active(), schedule.repeat(), schedule.skip_first(), options.handlers().size(),
             options.events_per_thread(), options.record_shapes(), prof.last_trace() != nullptr, sum > 0);
  return 0;
}
