// dlprof/memory_category.hpp: what a piece of allocated memory holds, as the memory analyses
// (analysis/memory_blocks.hpp) infer it and as a program may say it (tag_memory()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE

enum class MemoryCategory : std::uint8_t { Parameter, Gradient, OptimizerState, Activation, Temporary, Input, Unknown };

inline constexpr std::size_t kMemoryCategoryCount = 7;

/// "parameters", "gradients", "optimizer state", "activations", "temporaries", "inputs", "unknown":
/// the report's words, and the trace's (a `[memory category]` event's "Category").
constexpr std::string_view to_string(MemoryCategory category) noexcept {
  switch (category) {
    case MemoryCategory::Parameter: return "parameters";
    case MemoryCategory::Gradient: return "gradients";
    case MemoryCategory::OptimizerState: return "optimizer state";
    case MemoryCategory::Activation: return "activations";
    case MemoryCategory::Temporary: return "temporaries";
    case MemoryCategory::Input: return "inputs";
    case MemoryCategory::Unknown: return "unknown";
  }
  return "unknown";
}

constexpr std::optional<MemoryCategory> memory_category_named(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i)
    if (to_string(static_cast<MemoryCategory>(i)) == name) return static_cast<MemoryCategory>(i);
  return std::nullopt;
}

DLPROF_END_NAMESPACE
