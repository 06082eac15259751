// dlprof/device_properties.hpp: what a trace records about each GPU, and what the occupancy
// calculator needs from it.
#pragma once

#include <cstdint>
#include <string>

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

DLPROF_END_NAMESPACE
