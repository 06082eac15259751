// A Debug translation unit (no NDEBUG) of torch_test, a Release binary: a trainer whose files are
// built with different settings. Both include dlprof/torch.hpp; torch_test checks that they share
// no observer definition and that the program's observer reads op inputs.
#include <dlprof/profiler.hpp>
#include <torch/torch.h>

#include <cstddef>

static_assert(!dlprof::detail::TorchOpObserver::kCanReadInputs, "this file is built without NDEBUG");

namespace dlprof_test {

dlprof::detail::OpObserverAccessor debug_file_observer() { return &dlprof::detail::torch_op_observer; }

std::size_t ops_with_inputs_recorded_from_debug_file() {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  profiler.start();
  torch::mm(torch::ones({4, 8}), torch::ones({8, 2})).sum();
  profiler.stop();
  std::size_t with_inputs = 0;
  for (const dlprof::TraceEvent& event : profiler.last_trace()->events)
    with_inputs += event.kind == dlprof::EventKind::Op && event.inputs != dlprof::TraceEvent::kNoInputs;
  return with_inputs;
}

}  // namespace dlprof_test
