// dlprof/detail/forward_ops.hpp: each backward op's forward op, as torch.profiler pairs them:
// by autograd's sequence number and the thread that ran the forward op. Sequence numbers count
// per thread, so the pair is the key; where ops of one key repeat (nested ops that autograd
// numbered alike), the forward op is the one that started last.
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
    if (const auto found = forward_of.find(Key{event.forward_thread_id, event.sequence_number}); found != forward_of.end())
      forward[i] = found->second;
  }
  return forward;
}

}  // namespace detail
DLPROF_END_NAMESPACE
