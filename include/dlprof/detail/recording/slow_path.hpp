// dlprof/detail/recording/slow_path.hpp: the rare steps of recording (a thread's first ring, a
// name not yet interned, a thread renamed), reached through pointers.
//
// An instrumented file includes only the hot path: a range reads a flag, the clock and its
// thread's ring. What a thread does once (attach a ring from the registry, add a name to the
// table) needs the registry's and the table's code, which ring_registry.hpp provides; the
// Profiler installs it here before it first raises kRecording, so a range that records always
// finds it, and a program that never runs a Profiler never compiles it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/record.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

class ThreadRing;

struct RecordingSlowPath {
  /// A ring for the calling thread (its first, or one replacing a retired ring). Throws when no
  /// memory is left for one.
  ThreadRing* (*attach_thread_ring)();
  /// Counts an event lost because its thread has no ring and none could be allocated.
  void (*count_ringless_event)() noexcept;
  /// The id of an interned name, adding it on first sight; `*text` is its interned copy
  /// (NUL-terminated, stable for the life of the process). Throws when no memory is left to add it.
  NameId (*intern)(std::string_view name, const char** text);
  /// Names the calling thread's ring, now or when it attaches one.
  void (*set_thread_name)(std::string_view name);
  /// The calling thread's call stack from its caller's caller outwards, interned; `caller_frame`
  /// is the caller's __builtin_frame_address(0) (stack_table.hpp's capture_call_stack). 0
  /// (kNoStackId) when it has none or it cannot be kept.
  std::uint32_t (*capture_stack)(const void* caller_frame) noexcept;
};

inline std::atomic<const RecordingSlowPath*> g_recording_slow_path{nullptr};

/// The installed slow path; null until a Profiler first starts recording.
inline const RecordingSlowPath* recording_slow_path() noexcept {
  return g_recording_slow_path.load(std::memory_order_acquire);
}

}  // namespace detail
DLPROF_END_NAMESPACE
