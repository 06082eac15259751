// dlprof/detail/recording/stack_walk.hpp: the return addresses of the calling thread's stack,
// taken on the recording thread and symbolised offline.
//
// Two ways to unwind, for two kinds of code:
//   - walk_frame_pointers() follows the chain of saved frame pointers: a load and three compares
//     a frame. It is exact only where every frame keeps its frame pointer
//     (-fno-omit-frame-pointer); a frame that uses the register for something else ends the walk
//     or gives wrong frames above it, and never a fault: every load is first checked against the
//     thread's stack bounds, and each frame must lie above the last.
//   - unwind_with_tables() reads the .eh_frame tables every C++ object carries, so it is right
//     without frame pointers, at a higher cost a frame. It uses libunwind's unw_backtrace, which
//     caches what it reads of the tables, where libunwind.so.8 can be opened, and libgcc's
//     _Unwind_Backtrace, which reads them again at every frame, where it cannot. libunwind is
//     opened at run time with its symbols kept local: linked, its _Unwind_* functions could take
//     the program's C++ exceptions over from libgcc's.
// All stop at `capacity` frames (at most kMaxStackFrames) and skip the `skip` innermost ones
// (their callers' own frames).
#pragma once

#include <dlfcn.h>
#include <pthread.h>
#include <unwind.h>

#include <cstddef>
#include <cstdint>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The addresses [low, high) a thread's stack occupies.
struct StackBounds {
  std::uintptr_t low = 0;
  std::uintptr_t high = 0;

  bool holds(std::uintptr_t address, std::size_t bytes) const noexcept {
    return address >= low && address <= high && high - address >= bytes;
  }
};

/// The calling thread's stack bounds, read once a thread (pthread_getattr_np; the main thread's
/// are its current stack mapping). Empty when they cannot be read: the frame-pointer walk then
/// takes no frame.
inline StackBounds this_thread_stack_bounds() noexcept {
  thread_local StackBounds bounds = [] {
    StackBounds read;
    pthread_attr_t attributes;
    if (::pthread_getattr_np(::pthread_self(), &attributes) != 0) return read;
    void* address = nullptr;
    std::size_t size = 0;
    if (::pthread_attr_getstack(&attributes, &address, &size) == 0 && address != nullptr) {
      read.low = reinterpret_cast<std::uintptr_t>(address);
      read.high = read.low + size;
    }
    ::pthread_attr_destroy(&attributes);
    return read;
  }();
  return bounds;
}

/// Follows the frame-pointer chain from the frame at `frame` (a saved frame pointer, then the
/// return address, as the x86-64 and AArch64 ABIs lay frames out) within `bounds`, writing up to
/// `capacity` return addresses to `out` after skipping `skip`. Stops at the first frame that is
/// outside the bounds, misaligned, not above the one before, or has no return address. Returns
/// how many it wrote.
inline std::size_t walk_frame_chain(std::uintptr_t frame, StackBounds bounds, std::uintptr_t* out, std::size_t capacity,
                                    std::size_t skip) noexcept {
  std::size_t written = 0;
  while (written < capacity && frame % alignof(std::uintptr_t) == 0 && bounds.holds(frame, 2 * sizeof(std::uintptr_t))) {
    const auto* slots = reinterpret_cast<const std::uintptr_t*>(frame);
    const std::uintptr_t caller_frame = slots[0];
    const std::uintptr_t return_address = slots[1];
    if (return_address == 0) break;
    if (skip > 0)
      --skip;
    else
      out[written++] = return_address;
    if (caller_frame <= frame) break;  // frames lie above their callees': a loop or a stray value
    frame = caller_frame;
  }
  return written;
}

/// The calling thread's return addresses by frame pointers, the innermost first, after the
/// `skip` innermost (the caller of this function is the first).
DLPROF_NOINLINE inline std::size_t walk_frame_pointers(std::uintptr_t* out, std::size_t capacity, std::size_t skip = 0) noexcept {
  return walk_frame_chain(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)), this_thread_stack_bounds(), out,
                          capacity, skip);
}

/// The most frames an unwinder takes.
inline constexpr std::size_t kMaxStackFrames = 256;

/// libunwind's unw_backtrace (local unwinding), or null where libunwind.so.8 cannot be opened
/// or is not used.
using UnwindBacktrace = int (*)(void** frames, int capacity);
/// Whether this program runs under ThreadSanitizer, whose runtime faults in the thread-exit
/// destructor with which libunwind frees each thread's cache: libgcc unwinds there.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderThreadSanitizer = true;
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
inline constexpr bool kUnderThreadSanitizer = true;
#  else
inline constexpr bool kUnderThreadSanitizer = false;
#  endif
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif

inline UnwindBacktrace libunwind_backtrace() noexcept {
  static const UnwindBacktrace backtrace = []() -> UnwindBacktrace {
    if (kUnderThreadSanitizer) return nullptr;
    void* library = ::dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    return library == nullptr ? nullptr : reinterpret_cast<UnwindBacktrace>(::dlsym(library, "unw_backtrace"));
  }();
  return backtrace;
}

// The unwinders' bodies, inlined into the function that unwinds, whose own frame they skip.

DLPROF_ALWAYS_INLINE std::size_t frames_by_libgcc(std::uintptr_t* out, std::size_t capacity, std::size_t skip) noexcept {
  struct Walk {
    std::uintptr_t* out;
    std::size_t capacity;
    std::size_t skip;
    std::size_t written;
  } walk{out, capacity < kMaxStackFrames ? capacity : kMaxStackFrames, skip + 1, 0};
  if (walk.capacity == 0) return 0;
  _Unwind_Backtrace(
      [](_Unwind_Context* context, void* argument) -> _Unwind_Reason_Code {
        Walk& walk = *static_cast<Walk*>(argument);
        const std::uintptr_t address = _Unwind_GetIP(context);
        if (address == 0) return _URC_END_OF_STACK;
        if (walk.skip > 0) {
          --walk.skip;
          return _URC_NO_REASON;
        }
        walk.out[walk.written++] = address;
        return walk.written == walk.capacity ? _URC_END_OF_STACK : _URC_NO_REASON;
      },
      &walk);
  return walk.written;
}

DLPROF_ALWAYS_INLINE std::size_t frames_by_libunwind(UnwindBacktrace backtrace, std::uintptr_t* out, std::size_t capacity,
                                                     std::size_t skip) noexcept {
  if (capacity > kMaxStackFrames) capacity = kMaxStackFrames;
  if (capacity == 0) return 0;
  void* frames[kMaxStackFrames + 1];
  std::size_t wanted = skip + 1 + capacity;
  if (wanted > kMaxStackFrames + 1) wanted = kMaxStackFrames + 1;
  const int got = backtrace(frames, static_cast<int>(wanted));
  std::size_t written = 0;
  for (std::size_t i = skip + 1; i < static_cast<std::size_t>(got > 0 ? got : 0) && written < capacity; ++i)
    out[written++] = reinterpret_cast<std::uintptr_t>(frames[i]);
  return written;
}

/// libgcc's _Unwind_Backtrace: the calling thread's return addresses by the unwind tables, the
/// innermost first, after the `skip` innermost (the caller of this function is the first).
DLPROF_NOINLINE inline std::size_t unwind_with_libgcc(std::uintptr_t* out, std::size_t capacity, std::size_t skip = 0) noexcept {
  return frames_by_libgcc(out, capacity, skip);
}

/// libunwind's unw_backtrace: as unwind_with_libgcc(); nothing where libunwind is absent.
DLPROF_NOINLINE inline std::size_t unwind_with_libunwind(std::uintptr_t* out, std::size_t capacity, std::size_t skip = 0) noexcept {
  const UnwindBacktrace backtrace = libunwind_backtrace();
  return backtrace == nullptr ? 0 : frames_by_libunwind(backtrace, out, capacity, skip);
}

/// The calling thread's return addresses by the unwind tables, with libunwind where it is
/// present and libgcc otherwise; as unwind_with_libgcc().
DLPROF_NOINLINE inline std::size_t unwind_with_tables(std::uintptr_t* out, std::size_t capacity, std::size_t skip = 0) noexcept {
  const UnwindBacktrace backtrace = libunwind_backtrace();
  return backtrace != nullptr ? frames_by_libunwind(backtrace, out, capacity, skip) : frames_by_libgcc(out, capacity, skip);
}

}  // namespace detail
DLPROF_END_NAMESPACE
