// dlprof/detail/recording/correlation.hpp: how ranges tell a GPU backend which range launched which work.
//
// It works as Kineto links kernels to ops: while GPU activity is recorded, every range pushes an
// external correlation id onto CUPTI's per-thread stack, CUPTI reports (external id, correlation
// id) for each API call made under it, and the correlation id ties the API call to the kernel,
// copy or fill it caused. The id is (thread ordinal << 32 | sequence): unique in the process
// without a shared counter, and recoverable from the range's event and its ring.
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

/// Pushes a fresh external id for a range beginning on this thread. Returns its sequence number,
/// to be stored in the range's event, or 0 when nothing was pushed.
DLPROF_NOINLINE inline std::uint32_t push_external_correlation() noexcept {
  const PushExternalId push = g_push_external_id.load(std::memory_order_relaxed);
  if (push == nullptr) return 0;
  std::uint32_t sequence = ++t_correlation_sequence;
  if (DLPROF_UNLIKELY(sequence == 0)) sequence = ++t_correlation_sequence;  // 0 means "none"
  push(make_external_id(thread_ordinal(), sequence));
  return sequence;
}

/// Pops what push_external_correlation() pushed (call only when it returned non-zero).
DLPROF_NOINLINE inline void pop_external_correlation() noexcept {
  if (const PopExternalId pop = g_pop_external_id.load(std::memory_order_relaxed)) pop();
}

}  // namespace detail
DLPROF_END_NAMESPACE
