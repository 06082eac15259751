// dlprof/detail/control/on_demand.hpp: on-demand capture (DLPROF_MODE=on-demand). A capture is
// asked for (capture_requests.hpp) and begun by the Profiler at a step() or, in a program without
// steps, by its watcher (watcher.hpp). A capture of N steps warms up for the step after the
// request and records the N after it, as schedule(wait=0, warmup=1, active=N) would from there;
// a timed capture records from the moment it is taken until its duration has passed. The
// request's options (record_shapes, profile_memory, with_flops, with_stack, activities) hold for the
// capture's window alone. The Profiler's state machine starts and closes the window
// (profiler.hpp); this says what each step does and which options are in effect.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/control/capture_requests.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/launch_protocol.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/schedule.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// One Profiler's on-demand captures. Used under the Profiler's control lock, but for
/// capturing(), which any thread may call. A class template, as everything the Profiler alone
/// uses (profiler.hpp).
template <class Deferred = void>
class BasicOnDemandCapture {
 public:
  /// A program that has not called step() for this long is served by the watcher.
  static constexpr std::int64_t kNoStepsNs = 1'000'000'000;

  /// `options`: the Profiler's, which outlive this and which a capture changes while it runs.
  explicit BasicOnDemandCapture(ProfilerOptions& options) : options_(options) {}

  /// What step `step` does: the capture's action.
  Action action(std::int64_t step) const noexcept {
    if (timed_end_ns_ != 0) return Action::Record;
    return steps_ ? (*steps_)(step) : Action::None;
  }

  /// Whether a capture is asked for or under way: a request from code is refused meanwhile.
  bool capturing() const noexcept { return capturing_.load(std::memory_order_acquire); }

  /// Whether a capture is under way at step `step`: a timed one, or the steps of one not yet past.
  bool running(std::int64_t step) const noexcept {
    return timed_end_ns_ != 0 || (steps_.has_value() && step <= last_step_);
  }

  /// A timed capture runs, and `now_ns` (CLOCK_MONOTONIC) is past its end.
  bool timed_capture_due(std::int64_t now_ns) const noexcept { return timed_end_ns_ != 0 && now_ns >= timed_end_ns_; }

  /// step() or start() is called at `now_ns` (CLOCK_MONOTONIC).
  void stepped(std::int64_t now_ns) noexcept { last_step_call_ns_ = now_ns; }

  /// Whether no step() has come for kNoStepsNs before `now_ns`: the program has no steps.
  bool without_steps(std::int64_t now_ns) const noexcept { return now_ns - last_step_call_ns_ >= kNoStepsNs; }

  /// The warning for `request`, refused because a capture is under way.
  std::string refusal(const CaptureRequest& request) const {
    return timed_end_ns_ != 0 ? fmt::format("capture asked by {} refused: a timed capture is still running", request.source)
                              : fmt::format("capture asked by {} refused: the capture of steps {} to {} is still running",
                                            request.source, last_step_ - steps_count_ + 1, last_step_);
  }

  /// Applies the request's options for the capture and begins it after step `step`: a capture of
  /// steps at the next step, a timed capture now, and then true: the caller starts recording.
  bool begin(const CaptureRequest& request, std::int64_t step) {
    options_before_ = Options{options_.record_shapes(), options_.profile_memory(), options_.with_flops(),
                              options_.with_stack(), options_.activities()};
    if (request.record_shapes) options_.record_shapes(*request.record_shapes);
    if (request.profile_memory) options_.profile_memory(*request.profile_memory);
    if (request.with_flops) options_.with_flops(*request.with_flops);
    if (request.with_stack) options_.with_stack(*request.with_stack);
    if (request.activities) options_.activities(*request.activities);
    capturing_.store(true, std::memory_order_release);
    if (request.duration_ns != 0) {
      steps_.reset();
      timed_end_ns_ = clock_ns(CLOCK_MONOTONIC) + request.duration_ns;
      return true;
    }
    steps_ = schedule(0, 1, request.steps, 1, step + 1);
    steps_count_ = request.steps;
    last_step_ = step + 1 + request.steps;
    return false;
  }

  /// Takes the requests made since the last look (prof.capture(), prof.capture_for(), the signal,
  /// the trigger file) and begins the first, unless a capture is running: the others are refused
  /// with a warning. From step() (`stepping`) a capture of steps begins at the next step; from
  /// the watcher, in a program without steps, every capture is timed. Returns true when a timed
  /// capture began: the caller starts recording now.
  bool take(CaptureRequests& requests, std::int64_t step, bool stepping) {
    bool timed = false;
    for (CaptureRequest& request : requests.take_all(clock_ns(CLOCK_MONOTONIC), "capture")) {
      if (running(step)) {
        print_warning(refusal(request));
        continue;
      }
      if (!stepping && request.duration_ns == 0) request.duration_ns = kDefaultCaptureNs;
      if (begin(request, step)) timed = true;
    }
    return timed;
  }

  /// A timed capture has ended (it was due, or the Profiler stopped).
  void end_timed() noexcept { timed_end_ns_ = 0; }

  /// After a capture: the Profiler's own options again, and requests are taken again.
  void end() {
    if (options_before_) {
      const Options& before = *options_before_;
      options_.record_shapes(before.record_shapes).profile_memory(before.profile_memory).with_flops(before.with_flops);
      options_.with_stack(before.with_stack);
      options_.activities(before.activities);
      options_before_.reset();
    }
    capturing_.store(false, std::memory_order_release);
  }

 private:
  struct Options {
    bool record_shapes, profile_memory, with_flops, with_stack;
    std::vector<Activity> activities;
  };

  ProfilerOptions& options_;
  std::optional<Schedule> steps_;          // the current or last capture of steps
  std::int64_t steps_count_ = 0;           // its recorded steps
  std::int64_t last_step_ = -1;            // its last recorded step
  std::int64_t timed_end_ns_ = 0;          // a timed capture: when it ends (CLOCK_MONOTONIC); 0: none
  std::optional<Options> options_before_;  // the Profiler's own, while a capture changes them
  std::atomic<bool> capturing_{false};     // a capture is asked for or running
  std::int64_t last_step_call_ns_ = 0;     // CLOCK_MONOTONIC of the last step() (or start())
};

using OnDemandCapture = BasicOnDemandCapture<>;

}  // namespace detail
DLPROF_END_NAMESPACE
