// dlprof/detail/recording/fork_generation.hpp: how many fork()s separate this process from the
// one that started dlprof's state (the fork handlers of detail/window/lifecycle.hpp count them).
#pragma once

#include <atomic>
#include <cstdint>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// An object that remembers the generation it was made in knows whether it was inherited from a
/// parent.
inline std::atomic<std::uint32_t> g_fork_generation{0};

inline std::uint32_t fork_generation() noexcept { return g_fork_generation.load(std::memory_order_acquire); }

}  // namespace detail
DLPROF_END_NAMESPACE
