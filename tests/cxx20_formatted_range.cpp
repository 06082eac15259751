// Compiled as C++20, where fmt's format_string is consteval: DLPROF_RANGE_F passes its literal to
// fmt's public API, and the range that formats as it begins (a string argument) still compiles.
#include <dlprof/annotate.hpp>

#include <string>

int formatted_ranges_in_cxx20(int step, const std::string& layer) {
  DLPROF_RANGE_F("step {} of {:.1f}", step, 2.5);  // kept, formatted with the window
  DLPROF_RANGE_F("layer {} step {}", layer, step);  // formatted as it begins
  return step + 1;
}
