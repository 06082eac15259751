// dlprof/config.hpp: version, compile-time switches and the small portability macros
// every other header uses. Each macro can be predefined by the build to override it.
#pragma once

#define DLPROF_VERSION_MAJOR 0
#define DLPROF_VERSION_MINOR 1
#define DLPROF_VERSION_PATCH 0
#define DLPROF_VERSION_STRING "0.1.0"

#ifndef DLPROF_ALWAYS_INLINE
#  if defined(__GNUC__) || defined(__clang__)
#    define DLPROF_ALWAYS_INLINE inline __attribute__((always_inline))
#  else
#    define DLPROF_ALWAYS_INLINE inline
#  endif
#endif

#ifndef DLPROF_NOINLINE
#  if defined(__GNUC__) || defined(__clang__)
#    define DLPROF_NOINLINE __attribute__((noinline))
#  else
#    define DLPROF_NOINLINE
#  endif
#endif

#ifndef DLPROF_LIKELY
#  if defined(__GNUC__) || defined(__clang__)
#    define DLPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#    define DLPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#  else
#    define DLPROF_LIKELY(x) (x)
#    define DLPROF_UNLIKELY(x) (x)
#  endif
#endif

#define DLPROF_CONCAT_IMPL_(a, b) a##b
#define DLPROF_CONCAT_(a, b) DLPROF_CONCAT_IMPL_(a, b)

// Whether ranges are also NVTX ranges. The dlprof::dlprof target defines it to 1 when the
// CUDA toolkit's NVTX3 headers were found; a consumer without them gets plain no-ops.
#ifndef DLPROF_HAS_NVTX
#  define DLPROF_HAS_NVTX 0
#endif

// Whether the Profiler's runtime (detail/profiler_runtime.hpp) is compiled once, in the
// dlprof::runtime library that a program links, rather than in each file that includes
// profiler.hpp. The dlprof::runtime target defines it to 1 for the files that link it; the
// Profiler's layout is the same either way, so files built both ways may share a program.
#ifndef DLPROF_RUNTIME_LIBRARY
#  define DLPROF_RUNTIME_LIBRARY 0
#endif

// The switch changes what the NVTX layer's types contain, so it is folded into the inline
// namespace: two translation units built with different settings cannot silently share an
// inline function with two meanings (they fail to link instead).
#if DLPROF_HAS_NVTX
#  define DLPROF_ABI_NAMESPACE v0_nvtx
#else
#  define DLPROF_ABI_NAMESPACE v0
#endif

#define DLPROF_BEGIN_NAMESPACE \
  namespace dlprof {           \
  inline namespace DLPROF_ABI_NAMESPACE {
#define DLPROF_END_NAMESPACE \
  }                          \
  }
