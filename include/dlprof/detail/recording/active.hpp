// dlprof/detail/recording/active.hpp: the one word every range reads first.
#pragma once

#include <atomic>
#include <cstdint>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::uint32_t kRecording = 1u;    ///< a Profiler window is open: events go to the rings
inline constexpr std::uint32_t kNvtxAttached = 2u; ///< an NVTX tool (e.g. Nsight Systems) is injected
inline constexpr std::uint32_t kCorrelating = 4u;  ///< GPU activity is recorded: ranges push external correlation ids
inline constexpr std::uint32_t kWithStack = 8u;    ///< with kRecording: ranges and ops take their call stacks
/// What a window raises as it opens and lowers as it closes.
inline constexpr std::uint32_t kWindowFlags = kRecording | kCorrelating | kWithStack;

/// Constant-initialised, so the idle cost of a range is this one relaxed load and a branch.
inline std::atomic<std::uint32_t> g_active{0};

DLPROF_ALWAYS_INLINE std::uint32_t active_flags() noexcept { return g_active.load(std::memory_order_relaxed); }
DLPROF_ALWAYS_INLINE bool is_recording() noexcept { return (active_flags() & kRecording) != 0; }

}  // namespace detail
DLPROF_END_NAMESPACE
