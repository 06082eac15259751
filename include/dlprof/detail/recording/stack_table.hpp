// dlprof/detail/recording/stack_table.hpp: call stacks taken as recorded ranges and ops begin
// (ProfilerOptions::with_stack), kept once each in the process's stack table and referred to by id.
//
// A range or op with a stack writes one Stack record (its stack's id) before its own, so an event
// carries 4 bytes of stack whatever its depth. A stack is interned as names are: a per-thread
// cache answers a stack seen before by comparing its frames with the table's copy, without the
// table's lock; a new one takes the lock and a copy. Stacks are never freed, so an id and the
// frames it names stay valid for the life of the process (events in flight hold ids). The table
// stops growing at kStackTableBytes: a new stack past it is not kept, and its event is recorded
// without one and counted (Trace::stackless_events).
//
// The frames are return addresses, symbolised offline (the trace carries the module map,
// module_map.hpp). How they are taken is chosen once for the process (StackCapture): by the
// unwind tables (libunwind, else libgcc), right for any code, or by frame pointers, several times
// cheaper and right only where every frame keeps its pointer (stack_walk.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/stack_walk.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A stack's id in the process's stack table; kNoStackId for none.
using StackId = std::uint32_t;
inline constexpr StackId kNoStackId = 0;

/// The heap memory the stack table may take.
inline constexpr std::size_t kStackTableBytes = std::size_t{64} << 20;

/// Heap bytes one interned stack of `depth` frames costs: its frames, the deque's vector, and the
/// index's node and two bucket pointers (as interned_name_bytes() counts a name's).
constexpr std::size_t interned_stack_bytes(std::size_t depth) noexcept {
  constexpr std::size_t kIndexNode = sizeof(void*) + sizeof(std::string_view) + 2 * sizeof(std::uint64_t);
  return depth * sizeof(std::uintptr_t) + sizeof(std::vector<std::uintptr_t>) + kIndexNode + 2 * sizeof(void*);
}

class StackTable {
 public:
  /// Constructed on first use and never destroyed, as the name table: stacks are resolved while
  /// static objects are being destroyed.
  static StackTable& instance() {
    static StackTable* table = new StackTable(kStackTableBytes);
    return *table;
  }

  /// A table of its own that keeps at most `capacity_bytes` (interned_stack_bytes()).
  explicit StackTable(std::size_t capacity_bytes) noexcept : capacity_bytes_(capacity_bytes) {}

  struct Interned {
    StackId id = kNoStackId;
    const std::uintptr_t* frames = nullptr;  ///< the table's copy, stable for the process
  };

  /// The id of the stack `frames[0, depth)`, adding it on first sight; kNoStackId, counted, when
  /// the table is full or no memory is left for it.
  Interned intern(const std::uintptr_t* frames, std::size_t depth) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string_view key(reinterpret_cast<const char*>(frames), depth * sizeof(std::uintptr_t));
    if (const auto found = index_.find(key); found != index_.end())
      return Interned{found->second, stacks_[found->second - 1].data()};
    if (bytes_ + interned_stack_bytes(depth) > capacity_bytes_) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      return Interned{};
    }
    try {
      stacks_.emplace_back(frames, frames + depth);
    } catch (...) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      return Interned{};
    }
    const std::vector<std::uintptr_t>& stored = stacks_.back();
    const auto id = static_cast<StackId>(stacks_.size());
    try {
      index_.emplace(std::string_view(reinterpret_cast<const char*>(stored.data()), key.size()), id);
    } catch (...) {
      stacks_.pop_back();
      lost_.fetch_add(1, std::memory_order_relaxed);
      return Interned{};
    }
    bytes_ += interned_stack_bytes(depth);
    return Interned{id, stored.data()};
  }

  /// The frames of `id`, innermost first. The frames never move, but the deque's bookkeeping
  /// does: callers hold the lock through with_lock() while resolving many ids.
  std::pair<const std::uintptr_t*, std::size_t> frames_of_unlocked(StackId id) const noexcept {
    if (id == kNoStackId || id > stacks_.size()) return {nullptr, 0};
    const std::vector<std::uintptr_t>& stack = stacks_[id - 1];
    return {stack.data(), stack.size()};
  }

  template <class Fn>
  auto with_lock(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    return fn();
  }

  /// Stacks not kept (table full, or no memory) since the process started.
  std::uint64_t lost() const noexcept { return lost_.load(std::memory_order_relaxed); }

  /// fork(): as InternTable's.
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }

 private:
  const std::size_t capacity_bytes_;
  std::mutex mutex_;
  std::deque<std::vector<std::uintptr_t>> stacks_;  // id - 1
  std::unordered_map<std::string_view, StackId> index_;  // keyed by the frames' bytes
  std::size_t bytes_ = 0;
  std::atomic<std::uint64_t> lost_{0};
};

/// A thread's recent stacks, so that a stack seen before costs a hash and a comparison.
class StackCache {
 public:
  StackId intern(const std::uintptr_t* frames, std::size_t depth) noexcept {
    if (depth == 0) return kNoStackId;
    std::uint64_t hash = depth;
    for (std::size_t i = 0; i < depth; ++i) hash = (hash ^ frames[i]) * 0x9E3779B97F4A7C15ull;
    Entry& entry = entries_[(hash >> 32) & (kEntries - 1)];
    if (entry.hash == hash && entry.depth == depth && std::memcmp(entry.frames, frames, depth * sizeof(std::uintptr_t)) == 0)
      return entry.id;
    const StackTable::Interned interned = StackTable::instance().intern(frames, depth);
    if (interned.id != kNoStackId) entry = Entry{hash, interned.frames, depth, interned.id};
    return interned.id;
  }

 private:
  static constexpr std::size_t kEntries = 256;
  struct Entry {
    std::uint64_t hash;
    const std::uintptr_t* frames;
    std::size_t depth;
    StackId id;
  };
  Entry entries_[kEntries] = {};
};

/// How the process's ranges and ops take their stacks while stacks are recorded, set by the
/// Profiler as a window opens.
struct StackCapture {
  static constexpr std::uint32_t kDefaultDepth = 64;
  std::atomic<std::uint32_t> depth{kDefaultDepth};  ///< frames kept, the innermost (1 to kMaxStackFrames)
  std::atomic<bool> by_frame_pointers{false};        ///< else by the unwind tables
};
inline StackCapture g_stack_capture;

/// The calling thread's stack from its caller's caller outwards, interned: `caller_frame` is the
/// caller's __builtin_frame_address(0), where a frame-pointer walk starts (its use keeps the
/// caller's frame pointer, so the walk finds the innermost frame kept whatever the compiler
/// did with the frames outside it); an unwinder skips the caller's frame instead. The Profiler's
/// slow path (slow_path.hpp) points to it.
template <class Deferred = void>
DLPROF_NOINLINE StackId capture_call_stack(const void* caller_frame) noexcept {
  thread_local StackCache cache;
  std::uintptr_t frames[kMaxStackFrames];
  const std::size_t capacity = g_stack_capture.depth.load(std::memory_order_relaxed);
  std::size_t depth = 0;
  if (g_stack_capture.by_frame_pointers.load(std::memory_order_relaxed)) {
    depth = walk_frame_chain(reinterpret_cast<std::uintptr_t>(caller_frame), this_thread_stack_bounds(), frames,
                             capacity < kMaxStackFrames ? capacity : kMaxStackFrames, /*skip=*/0);
  } else if (const UnwindBacktrace backtrace = libunwind_backtrace()) {
    depth = frames_by_libunwind(backtrace, frames, capacity, /*skip=*/1);
  } else {
    depth = frames_by_libgcc(frames, capacity, /*skip=*/1);
  }
  return cache.intern(frames, depth);
}

}  // namespace detail
DLPROF_END_NAMESPACE
