// dlprof/detail/event.hpp: the fixed-size record a producer writes into its thread's ring.
// Plain data, no pointers to owned memory, so writing one is a few stores and draining
// is a memcpy.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

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

/// A Memory event's device in its correlation_sequence: type in the high byte, index + 1 (the
/// CPU's index is -1) in the low 24 bits.
constexpr std::uint32_t pack_memory_device(MemoryDeviceType type, std::int32_t index) noexcept {
  return (static_cast<std::uint32_t>(static_cast<std::uint8_t>(type)) << 24) |
         (static_cast<std::uint32_t>(index + 1) & 0xFFFFFFu);
}
constexpr std::pair<MemoryDeviceType, std::int32_t> unpack_memory_device(std::uint32_t packed) noexcept {
  return {static_cast<MemoryDeviceType>(static_cast<std::int8_t>(packed >> 24)), static_cast<std::int32_t>(packed & 0xFFFFFFu) - 1};
}
static_assert(sizeof(Event) == 32, "two events per cache line");

}  // namespace detail
DLPROF_END_NAMESPACE
