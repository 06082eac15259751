// dlprof/activity.hpp: what a Profiler collects (ProfilerOptions::activities, DLPROF_ACTIVITIES).
#pragma once

#include <cstdint>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE

/// What to collect. CUDA needs a program linked with dlprof::cupti (or including dlprof/cupti.hpp).
enum class Activity : std::uint8_t { CPU = 0, CUDA = 1 };

DLPROF_END_NAMESPACE
