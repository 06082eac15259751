// dlprof/analysis/detail/per_name.hpp: a classification of names (kernel type, Tensor Cores, ...)
// computed once per name of a trace, not once per event: kernel names run to hundreds of
// characters and thousands of events share each.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis::detail {

template <class Value>
class PerName {
 public:
  using Classify = Value (*)(std::string_view) noexcept;

  PerName(const Trace& trace, Classify classify)
      : names_(trace.names), classify_(classify), values_(trace.names.size()), known_(trace.names.size(), 0) {}

  /// The class of Trace::names[name].
  Value operator()(std::uint32_t name) {
    if (!known_[name]) {
      values_[name] = classify_(names_[name]);
      known_[name] = 1;
    }
    return values_[name];
  }

 private:
  const std::vector<std::string>& names_;
  Classify classify_;
  std::vector<Value> values_;
  std::vector<char> known_;
};

}  // namespace analysis::detail
DLPROF_END_NAMESPACE
