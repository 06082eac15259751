// libFuzzer entry point for the trace reader: any bytes given to parse_trace must give a Trace
// that keeps trace.hpp's invariants (every index in range, the promised orders) or throw
// TraceReadError; a Trace it gives must also survive being written and read again, and parsing
// on two threads must give what one thread gives (or the same error). Anything else (a crash, a sanitizer report, another exception, a broken invariant) is a finding.
// tests/fuzz/README.md says how to run it; tests/data/fuzz/trace_reader holds its corpus.
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/import/chrome_trace.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>

namespace {

void require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "trace invariant broken: %s\n", what);
  std::abort();
}

void check_invariants(const dlprof::Trace& trace) {
  const std::size_t names = trace.names.size();
  const std::size_t threads = trace.threads.size();
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const dlprof::TraceEvent& event = trace.events[i];
    require(event.name < names, "event name index");
    require(event.thread < threads, "event thread index");
    require(event.inputs == dlprof::TraceEvent::kNoInputs || event.inputs < trace.op_inputs.size(), "event inputs index");
    require(event.end_ns >= event.start_ns, "event ends before it starts");
    if (i > 0) {
      const dlprof::TraceEvent& previous = trace.events[i - 1];
      require(previous.thread < event.thread || (previous.thread == event.thread && previous.start_ns <= event.start_ns),
              "events ordered by thread and start");
    }
  }
  for (const dlprof::OpInputs& inputs : trace.op_inputs)
    require(inputs.dims < names && inputs.types < names && inputs.concrete < names && inputs.op < names, "inputs indices");
  for (std::size_t i = 0; i < trace.gpu_events.size(); ++i) {
    const dlprof::GpuEvent& work = trace.gpu_events[i];
    require(work.name < names, "GPU event name index");
    if (i > 0) {
      const dlprof::GpuEvent& previous = trace.gpu_events[i - 1];
      require(std::make_tuple(previous.device, previous.stream, previous.start_ns) <=
                  std::make_tuple(work.device, work.stream, work.start_ns),
              "GPU events ordered by device, stream and start");
    }
  }
  for (const dlprof::ApiEvent& call : trace.api_events) require(call.name < names && call.thread < threads, "API call indices");
  for (const dlprof::MemoryEvent& memory : trace.memory_events) require(memory.thread < threads, "memory event thread index");
  for (const dlprof::OverheadEvent& overhead : trace.overhead_events) require(overhead.name < names, "overhead name index");
  require(trace.window_start_ns <= trace.window_end_ns, "window");
}

/// The trace `bytes` read into, written back as dlprof writes traces; or the reader's error.
struct Outcome {
  std::string written;
  std::string error;
};

Outcome read_and_write(std::string_view bytes, const dlprof::ReadOptions& options) {
  Outcome outcome;
  dlprof::Trace trace;
  try {
    trace = dlprof::parse_trace(bytes, "fuzz-input", options);
  } catch (const dlprof::TraceReadError& error) {
    outcome.error = error.what();
    return outcome;
  }
  check_invariants(trace);
  // Not caught: a trace the reader accepted, written by dlprof, must read again.
  fmt::memory_buffer written;
  dlprof::write_chrome_trace(trace, written, "fuzz-output");
  check_invariants(dlprof::parse_trace(std::string_view(written.data(), written.size()), "fuzz-output"));
  outcome.written.assign(written.data(), written.size());
  return outcome;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dlprof::ReadOptions options;
  options.max_json_bytes = std::size_t{64} << 20;  // a gzip bomb stops early instead of exhausting the fuzzer
  options.parse_part_bytes = UINT64_MAX;
  const Outcome one_thread = read_and_write(bytes, options);
  // The parse in parts (two threads, a cut after nearly every event: import/detail/chunked_parse.hpp)
  // must read what one thread reads, and fail where it fails.
  options.parse_part_bytes = 1;
  const Outcome two_threads = read_and_write(bytes, options);
  require(two_threads.error == one_thread.error, "the parse in parts fails as one thread fails");
  require(two_threads.written == one_thread.written, "the parse in parts reads what one thread reads");
  return 0;
}
