// dlprof/detail/window/publisher.hpp: a closed window on its way out. The publisher has its trace
// built, makes it the last trace, and hands it to the on_trace_ready handlers: on its writer
// thread (lifecycle.hpp), unless a handler must run on the caller's thread. What fails (a build, a
// handler) is kept for errors() and printed once per source, and training goes on.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/backends/thread_cpu_sampler.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/detail/window/closed_window.hpp"
#include "dlprof/detail/window/lifecycle.hpp"
#include "dlprof/profiler_options.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

template <class Deferred = void>
class TracePublisher {
 public:
  /// Turns a closed window into its trace; may throw (the failure is then an error).
  using Build = std::function<std::shared_ptr<const Trace>(ClosedWindow&&)>;
  /// What failed, for record_error(): a handler's index among the handlers, or this.
  static constexpr std::size_t kBuildingTraces = SIZE_MAX;
  /// Errors kept for errors(); later ones are counted.
  static constexpr std::size_t kMaxErrorsKept = 256;

  /// `handlers`: the Profiler's, which outlive the publisher and do not change while it runs.
  TracePublisher(const std::vector<TraceHandler>& handlers, Build build) : handlers_(handlers), build_(std::move(build)) {}

  /// Publishes `window`: on the writer thread when every handler runs there, else here (with the
  /// background handlers queued on the writer); all of them here with `handlers_here`
  /// (std::terminate's dump, after which the process ends).
  void publish(std::shared_ptr<ClosedWindow> window, bool handlers_here) {
    const bool runs_here = handlers_here || std::any_of(handlers_.begin(), handlers_.end(),
                                                        [](const TraceHandler& handler) { return !handler.background; });
    if (!runs_here) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++in_progress_;
      }
      writer().submit([this, window] {
        std::shared_ptr<const Trace> finished;
        try {
          finished = build_(std::move(*window));
        } catch (const std::exception& error) {
          record_error(fmt::format("building the trace failed: {}", error.what()), kBuildingTraces);
        } catch (...) {
          record_error("building the trace failed: unknown exception", kBuildingTraces);
        }
        make_last(finished, /*was_in_progress=*/true);
        if (finished != nullptr)
          for (const TraceHandler& handler : handlers_) run_handler(handler, *finished);
      });
      return;
    }
    const std::shared_ptr<const Trace> finished = build_(std::move(*window));
    make_last(finished, /*was_in_progress=*/false);
    for (const TraceHandler& handler : handlers_) {
      if (handler.background && !handlers_here)
        writer().submit([this, finished, &handler] { run_handler(handler, *finished); });
      else
        run_handler(handler, *finished);
    }
  }

  /// The trace of the most recently closed window, or null. A trace still being built on the
  /// writer thread is waited for, except from that thread (a background handler is handed its
  /// trace, and waiting there would never end).
  std::shared_ptr<const Trace> last_trace() const {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!on_writer_thread()) published_.wait(lock, [this] { return in_progress_ == 0; });
    return last_;
  }

  /// The failures kept, the first kMaxErrorsKept and then how many more.
  std::vector<std::string> errors() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> all = errors_;
    if (errors_left_out_ != 0) all.push_back(fmt::format("{} more errors left out", errors_left_out_));
    return all;
  }

  /// Keeps `message` for errors() and prints it if it is the first failure of `source`: a handler
  /// that fails on every window (a full disk) prints once, not once per window.
  void record_error(std::string message, std::size_t source) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(failed_sources_.begin(), failed_sources_.end(), source) == failed_sources_.end()) {
      failed_sources_.push_back(source);
      print_warning(fmt::format("{} (later failures of it are kept in Profiler::errors(), not printed)", message));
    }
    if (errors_.size() < kMaxErrorsKept)
      errors_.push_back(std::move(message));
    else
      ++errors_left_out_;
  }

  bool on_writer_thread() const noexcept { return writer_ != nullptr && writer_->on_writer_thread(); }

  /// Returns when everything handed to the writer thread has finished.
  void wait_idle() {
    if (writer_ != nullptr) writer_->wait_idle();
  }

  /// In a fork's child, for a publisher of the parent: its writer thread does not exist here and
  /// its locks may be held for good, so it is left as it is, never waited for or destroyed.
  void abandon_in_child() noexcept { static_cast<void>(writer_.release()); }

 private:
  BackgroundWriter<>& writer() {
    if (!writer_) writer_ = std::make_unique<BackgroundWriter<>>();
    return *writer_;
  }

  /// Makes `trace` the last one (null: its build failed, the previous one stays).
  void make_last(std::shared_ptr<const Trace> trace, bool was_in_progress) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (trace != nullptr) last_ = std::move(trace);
      if (was_in_progress) --in_progress_;
    }
    published_.notify_all();
  }

  /// Runs one handler; a failure is recorded and training goes on.
  void run_handler(const TraceHandler& handler, const Trace& trace) {
    const auto source = static_cast<std::size_t>(&handler - handlers_.data());
    try {
      handler.callback(trace);
    } catch (const std::exception& error) {
      record_error(fmt::format("on_trace_ready handler failed: {}", error.what()), source);
    } catch (...) {
      record_error("on_trace_ready handler failed: unknown exception", source);
    }
  }

  const std::vector<TraceHandler>& handlers_;
  Build build_;
  mutable std::mutex mutex_;  // guards last_, in_progress_ and the errors (the writer thread sets them)
  mutable std::condition_variable published_;
  std::shared_ptr<const Trace> last_;
  int in_progress_ = 0;  // windows handed to the writer whose trace is not yet last_
  std::vector<std::string> errors_;
  std::uint64_t errors_left_out_ = 0;
  std::vector<std::size_t> failed_sources_;
  // Last: destroyed first, its thread finishing the jobs that use the members above.
  std::unique_ptr<BackgroundWriter<>> writer_;
};

}  // namespace detail
DLPROF_END_NAMESPACE
