// Must not compile: DLPROF_RANGE stores the address of its name, so the name must be a literal.
#include <dlprof/range.hpp>

#include <string>

int main() {
  const std::string name = "built at run time";
  DLPROF_RANGE(name);
  return 0;
}
