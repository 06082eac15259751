#include <dlprof/profiler.hpp>
