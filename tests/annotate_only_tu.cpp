// A file that only annotates: it includes <dlprof/annotate.hpp> and never the Profiler, whose
// file (annotate_test.cpp) records what these functions do.
#include <dlprof/annotate.hpp>

#include <string>

namespace annotate_only {

struct Counter {
  long long count = 0;
  long long add(long long n) { return count += n; }
};

void annotate_every_way(int step) {
  DLPROF_RANGE("literal range", dlprof::Category::Forward);
  DLPROF_RANGE_F("formatted range {}", step);
  const dlprof::ScopedRange dynamic(std::string("dynamic range ") + std::to_string(step), dlprof::Category::Backward);
  dlprof::mark("a mark");
  dlprof::counter("a counter", 0.5 * step);
  Counter counter;
  auto add = dlprof::wrap("wrapped member", &Counter::add);
  add(counter, 2);
  add(&counter, 3);
  auto count = dlprof::wrap("wrapped member data", &Counter::count);
  count(counter) += 1;
}

void name_this_thread(const std::string& name) { dlprof::set_thread_name(name); }

}  // namespace annotate_only
