// dlprof/detail/event.hpp: the fixed-size record a producer writes into its thread's ring.
// Plain data, no pointers to owned memory, so writing one is a few stores and draining
// is a memcpy.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dlprof/event.hpp"
#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Identifies a name without copying it: either the address of a static detail::Site
/// (low bit 0) or an index into the interned-string table shifted left once (low bit 1).
using NameId = std::uint64_t;

struct Event {
  NameId name;
  std::int64_t start;  // ticks, see clock.hpp
  union {
    std::int64_t end;  // ticks; Range and Step
    double value;      // Counter
  };
  EventKind kind;  // for Step events `name` holds the step number
  Category category;
  /// Ranges and steps recorded while GPU activity was collected: the per-thread sequence number of
  /// the external correlation id they pushed (gpu_activity.hpp); 0 otherwise.
  std::uint32_t correlation_sequence = 0;
};

static_assert(std::is_trivially_copyable_v<Event>, "events are copied as raw bytes");
static_assert(sizeof(Event) == 32, "two events per cache line");

}  // namespace detail
DLPROF_END_NAMESPACE
