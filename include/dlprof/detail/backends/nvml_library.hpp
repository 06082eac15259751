// dlprof/detail/backends/nvml_library.hpp: NVML, the NVIDIA Management Library, opened at run
// time as CUPTI is. libnvidia-ml.so.1 comes with the driver: where it is missing, GPU activity is
// recorded without clocks and power, never refused.
//
// The entry points are declared here rather than taken from nvml.h, which the CUDA toolkit leaves
// to a separate package: NVML's C ABI keeps these functions, their _v2 names and their constants
// stable across drivers.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {
namespace nvml {

using Return = int;         ///< nvmlReturn_t
inline constexpr Return kSuccess = 0;  ///< NVML_SUCCESS
struct DeviceOpaque;
using Device = DeviceOpaque*;  ///< nvmlDevice_t

/// nvmlClockType_t
enum ClockType : int { kGraphicsClock = 0, kSmClock = 1, kMemoryClock = 2 };

/// nvmlClocksEventReason* (nvmlClocksThrottleReason* before driver 535): why the clocks are
/// below their maximum, one bit each.
inline constexpr std::uint64_t kReasonGpuIdle = 0x1;
inline constexpr std::uint64_t kReasonApplicationsClocksSetting = 0x2;
inline constexpr std::uint64_t kReasonSwPowerCap = 0x4;
inline constexpr std::uint64_t kReasonHwSlowdown = 0x8;
inline constexpr std::uint64_t kReasonSyncBoost = 0x10;
inline constexpr std::uint64_t kReasonSwThermalSlowdown = 0x20;
inline constexpr std::uint64_t kReasonHwThermalSlowdown = 0x40;
inline constexpr std::uint64_t kReasonHwPowerBrakeSlowdown = 0x80;
inline constexpr std::uint64_t kReasonDisplayClockSetting = 0x100;

}  // namespace nvml

/// The NVML entry points the GPU clock sampler reads.
struct NvmlLibrary {
  nvml::Return (*init)() = nullptr;      ///< nvmlInit_v2
  nvml::Return (*shutdown)() = nullptr;  ///< nvmlShutdown
  const char* (*error_string)(nvml::Return result) = nullptr;
  nvml::Return (*device_by_pci_bus_id)(const char* bus_id, nvml::Device* device) = nullptr;
  nvml::Return (*clock_info)(nvml::Device device, nvml::ClockType type, unsigned int* mhz) = nullptr;
  nvml::Return (*power_usage)(nvml::Device device, unsigned int* milliwatts) = nullptr;
  /// nvmlDeviceGetCurrentClocksEventReasons, or its older name nvmlDeviceGetCurrentClocksThrottleReasons.
  nvml::Return (*clocks_event_reasons)(nvml::Device device, unsigned long long* reasons) = nullptr;

  /// Opens `path` (libnvidia-ml.so.1: the driver's, where the dynamic loader finds it); on
  /// failure returns false with the reason in `error`.
  bool open(const char* path, std::string& error) {
    void* library = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = ::dlerror();
      error = fmt::format("cannot load {} ({})", path, reason != nullptr ? reason : "not found");
      return false;
    }
    const auto symbol = [library](auto& function, const char* name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(::dlsym(library, name));
    };
    symbol(init, "nvmlInit_v2");
    symbol(shutdown, "nvmlShutdown");
    symbol(error_string, "nvmlErrorString");
    symbol(device_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    symbol(clock_info, "nvmlDeviceGetClockInfo");
    symbol(power_usage, "nvmlDeviceGetPowerUsage");
    symbol(clocks_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (clocks_event_reasons == nullptr) symbol(clocks_event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (init == nullptr || device_by_pci_bus_id == nullptr || clock_info == nullptr) {
      error = fmt::format("{} lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetClockInfo", path);
      ::dlclose(library);
      return false;
    }
    return true;
  }

  /// "Insufficient Permissions (4)".
  std::string describe(nvml::Return result) const {
    const char* text = error_string != nullptr ? error_string(result) : nullptr;
    return text != nullptr ? fmt::format("{} ({})", text, result) : fmt::format("NVML error {}", result);
  }
};

}  // namespace detail
DLPROF_END_NAMESPACE
