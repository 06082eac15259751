// Whether this test was built with a sanitizer: their allocators, shadow memory and slower
// forks and threads change what a test may measure or afford.
#pragma once

namespace dlprof_test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#  else
inline constexpr bool kSanitized = false;
#  endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace dlprof_test
