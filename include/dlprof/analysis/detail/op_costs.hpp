// dlprof/analysis/detail/op_costs.hpp: the FLOPs and bytes of every distinct op call of a trace,
// for the analyses that set them against time (the roofline, the kernel table).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/flops.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis::detail {

/// The cost of one op call; nothing where it is not known (never 0 for unknown).
struct KnownCost {
  std::optional<std::uint64_t> flops;
  std::optional<std::uint64_t> bytes;
};

/// Per Trace::op_inputs: the trace's own figures (with_flops), else flops.hpp's estimate from the
/// recorded shapes. Each distinct (op, inputs) is estimated once.
class OpCosts {
 public:
  explicit OpCosts(const Trace& trace) {
    costs_.reserve(trace.op_inputs.size());
    for (const OpInputs& inputs : trace.op_inputs) {
      std::optional<OpCost> estimate;
      if (inputs.flops == 0 || inputs.bytes == 0)
        estimate = estimate_op_cost(trace.names[inputs.op], trace.names[inputs.dims], trace.names[inputs.types],
                                    trace.names[inputs.concrete],
                                    inputs.strides == OpInputs::kNoText ? std::string_view() : trace.names[inputs.strides]);
      KnownCost cost;
      if (inputs.flops != 0) cost.flops = inputs.flops;
      else if (estimate) cost.flops = estimate->flops;
      if (inputs.bytes != 0) cost.bytes = inputs.bytes;
      else if (estimate) cost.bytes = estimate->bytes;
      costs_.push_back(cost);
    }
  }

  /// The cost of the op call `event` (an Op with inputs), or an unknown one.
  const KnownCost& of(const TraceEvent& event) const noexcept {
    static const KnownCost kUnknown;
    return event.inputs == TraceEvent::kNoInputs || event.inputs >= costs_.size() ? kUnknown : costs_[event.inputs];
  }

 private:
  std::vector<KnownCost> costs_;
};

}  // namespace analysis::detail
DLPROF_END_NAMESPACE
