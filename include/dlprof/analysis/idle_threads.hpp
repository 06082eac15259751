// dlprof/analysis/idle_threads.hpp: the threads besides the training loop's that only wait. With
// with_stack, torch.profiler records every Python frame of every thread, and a thread parked in
// threading.Condition.wait, selectors.select or a multiprocessing pipe's _recv shows seconds of
// "self CPU time" that is no CPU time at all. Such frames do not belong among the ops the step
// spends its time in; the report names them as idle threads instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dlprof/analysis/detail/per_name.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// A Python frame that waits: a standard-library wait, select, poll, receive or queue get
/// ("threading.py(359): wait", "multiprocessing/connection.py(414): _recv_bytes"), a lock's
/// acquire, a select object's poll, time.sleep.
inline bool is_waiting_frame(std::string_view name) noexcept {
  using dlprof::detail::starts_with;
  constexpr std::string_view kBuiltins[] = {"<built-in method acquire of _thread.", "<built-in method select of select.",
                                            "<built-in method poll of select.",   "<built-in method control of select.",
                                            "<built-in function sleep>",          "<built-in function select>"};
  for (const std::string_view builtin : kBuiltins)
    if (starts_with(name, builtin)) return true;
  // "<file>(<line>): <function>"
  const std::size_t colon = name.rfind("): ");
  if (colon == std::string_view::npos) return false;
  const std::string_view function = name.substr(colon + 3);
  std::string_view file = name.substr(0, name.rfind('(', colon));
  if (const std::size_t slash = file.find_last_of("/\\"); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  constexpr std::string_view kFiles[] = {"threading.py", "selectors.py", "connection.py", "queue.py", "queues.py",
                                         "synchronize.py", "popen_fork.py", "subprocess.py"};
  constexpr std::string_view kFunctions[] = {"wait",       "select",  "_recv",      "_recv_bytes", "recv",  "recv_bytes",
                                             "poll",       "_poll",   "get",        "join",        "_wait_for_tstate_lock",
                                             "communicate", "acquire", "_try_wait"};
  const bool waiting_file = std::find(std::begin(kFiles), std::end(kFiles), file) != std::end(kFiles);
  return waiting_file && std::find(std::begin(kFunctions), std::end(kFunctions), function) != std::end(kFunctions);
}

/// One thread's waiting: its outermost waiting frames' time, and the frame it waits in longest.
struct IdleThread {
  std::uint32_t thread = 0;    ///< index into Trace::threads
  std::int64_t wait_ns = 0;
  std::size_t waits = 0;       ///< outermost waiting frames
  std::string_view frame;      ///< the innermost waiting frame of its longest wait
};

/// The training loop's threads: those holding a step or, where no step is recorded, the one with
/// the most ops.
inline std::vector<bool> training_threads(const Trace& trace) {
  std::vector<bool> training(trace.threads.size(), false);
  bool any_step = false;
  std::vector<std::size_t> ops(trace.threads.size(), 0);
  for (const TraceEvent& event : trace.events) {
    if (event.thread >= training.size()) continue;
    if (event.kind == EventKind::Step) {
      training[event.thread] = true;
      any_step = true;
    }
    ops[event.thread] += event.kind == EventKind::Op;
  }
  if (!any_step && !ops.empty()) training[static_cast<std::size_t>(std::max_element(ops.begin(), ops.end()) - ops.begin())] = true;
  return training;
}

/// The threads other than the training loop's (training_threads) whose waiting frames hold time,
/// longest wait first.
inline std::vector<IdleThread> idle_threads(const Trace& trace) {
  const std::vector<bool> training = training_threads(trace);
  detail::PerName<bool> waiting(trace, is_waiting_frame);
  std::vector<IdleThread> threads;
  std::int64_t open_end = INT64_MIN, longest = 0;
  bool open_is_longest = false;
  IdleThread* current = nullptr;
  for (const TraceEvent& event : trace.events) {  // by thread, then start: enclosing frames first
    if (event.kind != EventKind::PythonFrame || event.thread >= training.size() || training[event.thread]) continue;
    if (!waiting(event.name)) continue;
    if (current == nullptr || current->thread != event.thread) {
      threads.push_back({event.thread, 0, 0, {}});
      current = &threads.back();
      open_end = INT64_MIN;
      longest = 0;
    }
    if (event.start_ns < open_end) {  // nested in the wait being counted: its innermost frame names it
      if (open_is_longest) current->frame = trace.names[event.name];
      continue;
    }
    current->wait_ns += event.duration_ns();
    ++current->waits;
    open_end = event.end_ns;
    open_is_longest = event.duration_ns() >= longest;
    if (open_is_longest) {
      longest = event.duration_ns();
      current->frame = trace.names[event.name];
    }
  }
  std::stable_sort(threads.begin(), threads.end(), [](const IdleThread& a, const IdleThread& b) { return a.wait_ns > b.wait_ns; });
  return threads;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
