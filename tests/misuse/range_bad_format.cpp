// Must not compile: a DLPROF_RANGE_F format that its arguments do not match, checked by fmt at
// compile time.
#include <dlprof/annotate.hpp>

int main() {
  DLPROF_RANGE_F("step {:d}", "not a number");
  return 0;
}
