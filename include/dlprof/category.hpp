// dlprof/category.hpp: what kind of work a range measures. Categories colour the range in
// Nsight Systems (NVTX category and colour) and group time in dlprof's summaries.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE

/// Kind of work inside a range. Values are stable: they are stored in events and NVTX.
enum class Category : std::uint8_t {
  User = 0,           ///< anything the user annotates (default)
  DataLoader = 1,     ///< waiting for / producing the next batch
  Forward = 2,        ///< forward pass
  Backward = 3,       ///< backward pass
  Optimizer = 4,      ///< optimizer step, zero_grad
  Communication = 5,  ///< collectives, parameter exchange
  Step = 6,           ///< ProfilerStep#N, emitted by the Profiler
};

inline constexpr std::uint8_t kCategoryCount = 7;

constexpr std::string_view to_string(Category category) noexcept {
  switch (category) {
    case Category::User: return "User";
    case Category::DataLoader: return "DataLoader";
    case Category::Forward: return "Forward";
    case Category::Backward: return "Backward";
    case Category::Optimizer: return "Optimizer";
    case Category::Communication: return "Communication";
    case Category::Step: return "Step";
  }
  return "User";
}

/// The category named `name` by to_string(), if any.
constexpr std::optional<Category> category_named(std::string_view name) noexcept {
  for (std::uint8_t i = 0; i < kCategoryCount; ++i)
    if (to_string(static_cast<Category>(i)) == name) return static_cast<Category>(i);
  return std::nullopt;
}

/// ARGB colour of the category in Nsight Systems' timeline.
constexpr std::uint32_t nvtx_color(Category category) noexcept {
  switch (category) {
    case Category::User: return 0xFF76B900u;           // green
    case Category::DataLoader: return 0xFFE8A33Du;     // amber
    case Category::Forward: return 0xFF3D85C6u;        // blue
    case Category::Backward: return 0xFF8E44ADu;       // purple
    case Category::Optimizer: return 0xFFD35400u;      // orange
    case Category::Communication: return 0xFFC0392Bu;  // red
    case Category::Step: return 0xFF7F8C8Du;           // grey
  }
  return 0xFF76B900u;
}

/// Shape of a Trace event.
enum class EventKind : std::uint8_t {
  Range = 0,    ///< begin/end pair on one thread (a Chrome-trace "X" slice)
  Instant = 1,  ///< dlprof::mark
  Counter = 2,  ///< dlprof::counter sample
  Step = 3,     ///< ProfilerStep#N, emitted by the Profiler on the thread that calls step()
  Op = 4,       ///< an operator of a framework (LibTorch's ATen ops and autograd nodes): a cpu_op slice
  /// A frame of the Python interpreter (torch.profiler's with_stack): a python_function slice.
  /// Read from traces only; TensorBoard counts no time of its own in it.
  PythonFrame = 5,
};

/// Where memory was allocated: c10::DeviceType's values, as `[memory]` events write them (a
/// trace may hold any of them; kineto::kDeviceTypeNames names them). HIP is ROCm's GPU memory.
enum class MemoryDeviceType : std::int8_t { CPU = 0, CUDA = 1, HIP = 6 };

/// GPU memory of a device that deviceProperties describes (its totalGlobalMem).
constexpr bool is_gpu_memory(MemoryDeviceType type) noexcept {
  return type == MemoryDeviceType::CUDA || type == MemoryDeviceType::HIP;
}

/// Kinds written as slices ("X" events) that nest on their thread.
constexpr bool is_slice(EventKind kind) noexcept {
  return kind == EventKind::Range || kind == EventKind::Step || kind == EventKind::Op || kind == EventKind::PythonFrame;
}

DLPROF_END_NAMESPACE
