// The half of disable_test built WITHOUT DLPROF_DISABLE: the same macros, in the same binary,
// record as usual. disable_test.cpp (built with DLPROF_DISABLE) calls in here.
#include <dlprof/profiler.hpp>

#include <cstddef>

#if defined(DLPROF_DISABLE)
#  error "disable_enabled_tu.cpp must be compiled without DLPROF_DISABLE (see tests/CMakeLists.txt)"
#endif

namespace dlprof_disable_test {

// Declared again in disable_test.cpp.
std::size_t record_in_enabled_tu(std::size_t count);

std::size_t record_in_enabled_tu(std::size_t count) {
  DLPROF_FUNCTION();
  std::size_t evaluations = 0;
  for (std::size_t i = 0; i < count; ++i) {
    DLPROF_RANGE("enabled_tu_range");
    DLPROF_RANGE_F("enabled_tu_formatted {}", ++evaluations);
  }
  return evaluations;
}

}  // namespace dlprof_disable_test
