#include <dlprof/profiler.hpp>
int main() { return 0; }
