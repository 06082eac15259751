// dlprof/detail/forward_ops.hpp: each backward op's forward op, as torch.profiler pairs them:
// by autograd's sequence number and the thread that ran the forward op. Sequence numbers count
// per thread, so the pair is the key; where ops of one key repeat (nested ops that autograd
// numbered alike), the forward op is the one that started last. dlprof writes a forward op's own
// RecordFunction thread id as its `Fwd thread id`, which a backward op names; torch.profiler
// writes 0 there, so a backward op whose thread no forward op names takes the forward op of
// thread 0 with its number. Backward ops take their forward
// ops' call stacks by that pair.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::uint32_t kNoForwardOp = UINT32_MAX;

/// For each event of `trace`, the index of the forward op of a backward op (an Op in the Backward
/// category with a sequence number) where the trace holds it; kNoForwardOp for any other event.
/// Empty when the trace has no numbered forward op.
template <class Deferred = void>
std::vector<std::uint32_t> forward_op_of_each_backward_op(const Trace& trace) {
  struct Key {
    std::uint64_t thread;
    std::int64_t sequence;
    bool operator==(const Key& other) const noexcept { return thread == other.thread && sequence == other.sequence; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return std::hash<std::uint64_t>()(key.thread * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(key.sequence));
    }
  };
  const auto numbered = [](const TraceEvent& event) { return event.kind == EventKind::Op && event.sequence_number >= 0; };
  std::unordered_map<Key, std::uint32_t, KeyHash> forward_of;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (!numbered(event) || event.category == Category::Backward) continue;
    auto [found, inserted] =
        forward_of.try_emplace(Key{event.forward_thread_id, event.sequence_number}, static_cast<std::uint32_t>(i));
    if (!inserted && trace.events[found->second].start_ns <= event.start_ns) found->second = static_cast<std::uint32_t>(i);
  }
  if (forward_of.empty()) return {};
  std::vector<std::uint32_t> forward(trace.events.size(), kNoForwardOp);
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& event = trace.events[i];
    if (!numbered(event) || event.category != Category::Backward) continue;
    auto found = forward_of.find(Key{event.forward_thread_id, event.sequence_number});
    if (found == forward_of.end()) found = forward_of.find(Key{0, event.sequence_number});  // torch's forward ops
    if (found != forward_of.end()) forward[i] = found->second;
  }
  return forward;
}

/// A backward op takes the stack of the forward op it differentiates, and an op run inside a
/// backward op takes that op's, as torch.profiler gives them: where autograd's engine runs them,
/// their own stacks show only the engine, and a Python trace has no Python frames around them.
/// Call after the events are ordered.
template <class Deferred = void>
void inherit_forward_stacks(Trace& trace) {
  if (trace.stacks.empty()) return;
  const std::vector<std::uint32_t> forward = forward_op_of_each_backward_op(trace);
  std::vector<std::size_t> open;  // the thread's enclosing slices, outermost first
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    TraceEvent& event = trace.events[i];
    if (!is_slice(event.kind)) continue;
    if (i == 0 || trace.events[i - 1].thread != event.thread) open.clear();
    while (!open.empty() && trace.events[open.back()].end_ns <= event.start_ns) open.pop_back();
    if (event.kind == EventKind::Op && event.category == Category::Backward) {
      if (!forward.empty() && forward[i] != kNoForwardOp) {
        if (trace.events[forward[i]].stack != TraceEvent::kNoStack) event.stack = trace.events[forward[i]].stack;
      } else if (!open.empty()) {
        const TraceEvent& enclosing = trace.events[open.back()];
        if (enclosing.kind == EventKind::Op && enclosing.category == Category::Backward && enclosing.stack != TraceEvent::kNoStack)
          event.stack = enclosing.stack;
      }
    }
    open.push_back(i);
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
