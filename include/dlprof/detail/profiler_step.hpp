// dlprof/detail/profiler_step.hpp: which slice names are steps, and their numbers. torch.profiler
// names each step `ProfilerStep#N`; HTA and TensorBoard's plugin take a slice for a step when its
// name matches `^ProfilerStep#\d+`. The reader (which slices become EventKind::Step), the step
// breakdown and the kernel attribution all decide here, so that a name such as "ProfilerStep#-1"
// is a range everywhere, never a step in one table and a range in another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::string_view kProfilerStepPrefix = "ProfilerStep#";

/// `^ProfilerStep#\d+`: a digit right after the '#' (what follows the digits is not looked at).
constexpr bool is_profiler_step(std::string_view name) noexcept {
  return name.size() > kProfilerStepPrefix.size() && name.substr(0, kProfilerStepPrefix.size()) == kProfilerStepPrefix &&
         name[kProfilerStepPrefix.size()] >= '0' && name[kProfilerStepPrefix.size()] <= '9';
}

/// N of a step's name: the digits after "ProfilerStep#". -1 for a name that is not a step
/// (is_profiler_step) and for a number beyond int64.
constexpr std::int64_t profiler_step_number(std::string_view name) noexcept {
  if (!is_profiler_step(name)) return -1;
  std::int64_t number = 0;
  for (std::size_t i = kProfilerStepPrefix.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    const int digit = name[i] - '0';
    if (number > (INT64_MAX - digit) / 10) return -1;
    number = number * 10 + digit;
  }
  return number;
}

}  // namespace detail
DLPROF_END_NAMESPACE
