// Records one range with a Profiler, writes the trace under argv[1] and checks the file exists.
// Built with dlprof::cupti it asks for CUDA activity too; built with dlprof::import it reads the
// trace back and finds the range.
#include <dlprof/profiler.hpp>
#if defined(DLPROF_HAS_IMPORT)
#  include <dlprof/import/chrome_trace.hpp>
#endif

#include <algorithm>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} TRACE_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::remove_all(dir);
  {
#if defined(DLPROF_HAS_CUPTI)
    const auto activities = {dlprof::Activity::CPU, dlprof::Activity::CUDA};
#else
    const auto activities = {dlprof::Activity::CPU};
#endif
    dlprof::Profiler profiler(dlprof::ProfilerOptions{}.activities(activities).on_trace_ready(
        dlprof::tensorboard_trace_handler(dir.string())));
    dlprof::ProfilingScope scope(profiler);
    DLPROF_RANGE("consumer");
  }
  std::size_t traces = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().string().find(".pt.trace.json") != std::string::npos) ++traces;
  if (traces != 1) {
    fmt::print(stderr, "expected one trace in {}, found {}\n", dir.string(), traces);
    return 1;
  }
#if defined(DLPROF_HAS_IMPORT)
  const std::vector<dlprof::Trace> read = dlprof::read_trace_set({dir.string()});
  const auto& events = read.at(0).events;
  if (std::none_of(events.begin(), events.end(), [&](const dlprof::TraceEvent& e) { return read[0].name_of(e) == "consumer"; })) {
    fmt::print(stderr, "the trace read back from {} has no range \"consumer\"\n", dir.string());
    return 1;
  }
  fmt::print("dlprof consumer: read the trace back\n");
#endif
  fmt::print("dlprof consumer: wrote a trace to {}\n", dir.string());
  return 0;
}
