// dlprof/device_properties.hpp: what a trace records about each GPU, and what the occupancy
// calculator needs from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE

/// One GPU, as torch.profiler writes it in `deviceProperties`.
struct DeviceProperties {
  int id = 0;
  std::string name;
  std::int64_t total_global_mem = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int max_threads_per_block = 0;
  int max_threads_per_multiprocessor = 0;
  int regs_per_block = 0;
  int regs_per_multiprocessor = 0;
  int warp_size = 32;
  std::int64_t shared_mem_per_block = 0;
  std::int64_t shared_mem_per_block_optin = 0;
  std::int64_t shared_mem_per_multiprocessor = 0;
  int num_sms = 0;
};

/// What a trace says about GPU `id`: its own deviceProperties entry or, where the trace has none
/// for it, the entry of the GPUs it lists when they are all one model (one name and memory
/// size). A process that sees only some of the GPUs (HIP_VISIBLE_DEVICES, a launcher's binding)
/// may list them under other ids than its work runs on: ROCm traces list id 0 and run on
/// device 2. `borrowed` tells which it is.
struct DevicePropertiesOf {
  const DeviceProperties* properties = nullptr;  ///< null: the trace does not say
  bool borrowed = false;  ///< from another id's entry: the model is known, not the device

  explicit operator bool() const noexcept { return properties != nullptr; }
};

inline DevicePropertiesOf device_properties_of(const std::vector<DeviceProperties>& devices, int id) noexcept {
  for (const DeviceProperties& device : devices)
    if (device.id == id) return {&device, false};
  if (devices.empty()) return {};
  for (const DeviceProperties& device : devices)
    if (device.name != devices.front().name || device.total_global_mem != devices.front().total_global_mem) return {};
  return {&devices.front(), true};
}

DLPROF_END_NAMESPACE
