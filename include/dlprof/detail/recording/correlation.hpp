// dlprof/detail/recording/correlation.hpp: how ranges tell a GPU backend which range launched which work.
//
// It works as Kineto links kernels to ops: while GPU activity is recorded, every range pushes an
// external correlation id onto CUPTI's per-thread stack, CUPTI reports (external id, correlation
// id) for each API call made under it, and the correlation id ties the API call to the kernel,
// copy or fill it caused. The id is (thread ordinal << 32 | sequence): unique in the process
// without a shared counter, and recoverable from the range's event and its ring.
//
// Each thread also keeps the scopes whose ids it pushed, innermost last: a GPU backend reads the
// innermost on the pushing thread when CUDA captures work into a graph there, so that the work the
// graph replays later is attributed to the op or range that captured it.
#pragma once

#include <atomic>
#include <cstdint>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/ring.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Push and pop of the backend's external correlation stack; set once by the backend, before
/// kCorrelating is first raised, and never reset.
using PushExternalId = void (*)(std::uint64_t id) noexcept;
using PopExternalId = void (*)() noexcept;
inline std::atomic<PushExternalId> g_push_external_id{nullptr};
inline std::atomic<PopExternalId> g_pop_external_id{nullptr};

inline thread_local std::uint32_t t_correlation_sequence = 0;

/// A range, op or step that pushed an external id, as it began.
struct CorrelatedScope {
  std::uint64_t name = 0;  ///< its NameId; a step's number for a Step
  /// A DLPROF_RANGE_F's kept arguments (its name is then a format site's), valid while the
  /// scope is open; null otherwise.
  const FormatArguments* arguments = nullptr;
  std::uint32_t stack = 0;  ///< with_stack: its StackId; 0: none
  RecordKind kind = RecordKind::Range;  ///< Range, Op or Step
};

/// The scopes open on a thread that pushed external ids, outermost first; deeper ones than
/// kTracked are counted, not kept.
struct CorrelatedScopes {
  static constexpr std::uint32_t kTracked = 32;
  std::uint32_t depth = 0;
  CorrelatedScope scopes[kTracked];

  /// The innermost scope open, or null when none is (or it is too deep to be kept).
  const CorrelatedScope* innermost() const noexcept {
    return depth == 0 || depth > kTracked ? nullptr : &scopes[depth - 1];
  }
};
inline thread_local CorrelatedScopes t_correlated_scopes;

/// Pushes a fresh external id for a scope beginning on this thread (CorrelatedScope's fields, in
/// registers: a struct built by the caller and copied here would be read back from memory just
/// after being stored, which costs a stalled load). Returns its sequence number, to be stored in
/// the scope's event, or 0 when nothing was pushed.
DLPROF_NOINLINE inline std::uint32_t push_external_correlation(std::uint64_t name, std::uint32_t stack, RecordKind kind,
                                                               const FormatArguments* arguments = nullptr) noexcept {
  const PushExternalId push = g_push_external_id.load(std::memory_order_relaxed);
  if (push == nullptr) return 0;
  std::uint32_t sequence = ++t_correlation_sequence;
  if (DLPROF_UNLIKELY(sequence == 0)) sequence = ++t_correlation_sequence;  // 0 means "none"
  CorrelatedScopes& open = t_correlated_scopes;
  if (DLPROF_LIKELY(open.depth < CorrelatedScopes::kTracked)) {
    CorrelatedScope& scope = open.scopes[open.depth];
    scope.name = name;
    scope.arguments = arguments;
    scope.stack = stack;
    scope.kind = kind;
  }
  ++open.depth;
  push(make_external_id(thread_ordinal(), sequence));
  return sequence;
}

/// Pops what push_external_correlation() pushed (call only when it returned non-zero).
DLPROF_NOINLINE inline void pop_external_correlation() noexcept {
  if (const PopExternalId pop = g_pop_external_id.load(std::memory_order_relaxed)) pop();
  CorrelatedScopes& open = t_correlated_scopes;
  if (DLPROF_LIKELY(open.depth != 0)) --open.depth;
}

}  // namespace detail
DLPROF_END_NAMESPACE
