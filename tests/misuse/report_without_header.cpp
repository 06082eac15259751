// Must not compile: Profiler::report() in a file that does not include <dlprof/report.hpp>.
#include <dlprof/profiler.hpp>

#include <string>

std::string text_of(const dlprof::Profiler& profiler) { return profiler.report(); }

int main() { return 0; }
