// dlprof/detail/backends/occupancy.hpp: how many blocks of a kernel are resident on one SM at a time, and
// the kernel args Kineto derives from it ("blocks per SM", "warps per SM",
// "est. achieved occupancy %").
//
// Pure arithmetic, no CUDA: the CUPTI backend feeds it a kernel record's launch configuration and
// the device's properties. The rules are NVIDIA's occupancy calculator, cuda_occupancy.h
// (cudaOccMaxActiveBlocksPerMultiprocessor, CUDA 13.0), which is what Kineto calls
// (libkineto/src/DeviceProperties.cpp, kernelOccupancy). A block needs four resources; for each,
// the number of blocks that fit on one SM is
//  * warps:         floor(max warps per SM / warps per block), where warps per block =
//                   ceil(threads / warp size); 0 when the block has more threads than allowed;
//  * registers:     registers per warp = registers per thread * warp size, rounded up to the
//                   allocation unit (256). The register file is split into 4 partitions, and a warp
//                   lives in one of them, so each partition holds floor(registers per SM / 4 /
//                   registers per warp) warps and blocks = floor(4 * that / warps per block).
//                   0 when a thread asks for more than 255 registers or the block for more than
//                   registers per block;
//  * shared memory: bytes per block = static + dynamic + the driver's per-block reserve (1 KiB
//                   from sm_80), rounded up to the allocation unit (256 bytes before sm_80, 128
//                   from sm_80); blocks = floor(shared memory per SM / that). 0 above the per-block
//                   limit;
//  * blocks:        the architecture's maximum of resident blocks per SM.
// The active blocks per SM are the smallest of the four; every resource whose count equals it is
// a limiting factor (several can be).
//
// Left out, because no kernel record or Kineto setting reaches them: the L1/shared-memory
// carveout preference (Kineto passes none, so all of the SM's shared memory counts), partitioned
// global caching (sm_52 and sm_6x only), block barriers (Kineto passes none; the one barrier a
// CUDA C++ kernel uses never binds on the architectures below) and Blackwell's virtual resources.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/format/vocabulary.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Sizes along x, y and z: threads of a block or blocks of a grid, as CUPTI's kernel record has them.
struct Dim3 {
  std::uint32_t x = 1;
  std::uint32_t y = 1;
  std::uint32_t z = 1;

  /// x * y * z, saturated at INT64_MAX (three 32-bit factors can overflow 64 bits).
  constexpr std::int64_t volume() const noexcept {
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const std::uint64_t xy = std::uint64_t{x} * y;  // two 32-bit factors always fit
    if (z != 0 && xy > kMax / z) return static_cast<std::int64_t>(kMax);
    return static_cast<std::int64_t>(xy * z);
  }
};

/// What one kernel launch asks of the GPU (CUpti_ActivityKernel's fields).
struct KernelLaunch {
  Dim3 grid;                                ///< blocks
  Dim3 block;                               ///< threads per block
  std::uint32_t registers_per_thread = 0;
  std::uint32_t static_shared_memory = 0;   ///< bytes, declared in the kernel
  std::uint32_t dynamic_shared_memory = 0;  ///< bytes, given at launch
};

/// Per-SM resource limits of one GPU: cudaOccDeviceProp's fields plus the per-architecture
/// constants cuda_occupancy.h keeps in its own tables. architecture_sm_limits() and sm_limits()
/// fill one in.
struct SmLimits {
  int compute_major = 0;
  int compute_minor = 0;
  int num_sms = 0;  ///< only Kineto's "blocks per SM" and "warps per SM" need it
  int warp_size = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int registers_per_sm = 0;
  int registers_per_block = 0;
  int max_registers_per_thread = 0;
  int register_allocation_unit = 0;   ///< a warp's registers come in multiples of this many
  int register_file_partitions = 0;   ///< a warp's registers all come from one partition
  std::int64_t shared_memory_per_sm = 0;
  std::int64_t shared_memory_per_block = 0;        ///< without opting in (48 KiB)
  std::int64_t shared_memory_per_block_optin = 0;  ///< after cudaFuncSetAttribute opts in
  std::int64_t shared_memory_allocation_unit = 0;  ///< a block's shared memory comes in multiples of this
  std::int64_t reserved_shared_memory_per_block = 0;  ///< the driver's, on top of the kernel's

  constexpr int max_warps_per_sm() const noexcept { return warp_size > 0 ? max_threads_per_sm / warp_size : 0; }
};

/// Which per-block shared-memory limit a launch is held to.
enum class SharedMemoryLimit : std::uint8_t {
  /// shared_memory_per_block_optin: a kernel that ran with more than 48 KiB had opted in, so this
  /// is the limit CUDA held it to.
  OptIn,
  /// shared_memory_per_block (48 KiB): what Kineto passes (FUNC_SHMEM_LIMIT_DEFAULT), so Kineto
  /// finds 0 resident blocks, and writes "est. achieved occupancy %": 0, for any kernel above it.
  Default
};

/// Resources that cap the active blocks; a bit set, values as cuda_occupancy.h's cudaOccLimitingFactor.
enum class LimitingFactor : std::uint8_t {
  None = 0,
  Warps = 0x01,
  Registers = 0x02,
  SharedMemory = 0x04,
  Blocks = 0x08
};

constexpr LimitingFactor operator|(LimitingFactor a, LimitingFactor b) noexcept {
  return static_cast<LimitingFactor>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}

/// True when `factor` is one of `factors`.
constexpr bool limited_by(LimitingFactor factors, LimitingFactor factor) noexcept {
  return (static_cast<std::uint8_t>(factors) & static_cast<std::uint8_t>(factor)) != 0;
}

/// Why no block of a launch can be resident, or why nothing could be computed.
enum class OccupancyError : std::uint8_t {
  None = 0,
  EmptyBlock,           ///< a block dimension is 0
  BlockTooLarge,        ///< more threads per block than max_threads_per_block
  TooManyRegisters,     ///< above max_registers_per_thread, or the block above registers_per_block
  TooMuchSharedMemory,  ///< above the per-block shared-memory limit
  UnknownArchitecture,  ///< compute capability not in the architecture table
  InvalidLimits         ///< an SmLimits field the calculation divides by or compares against is not positive
};

constexpr std::string_view to_string(OccupancyError error) noexcept {
  switch (error) {
    case OccupancyError::None: return "None";
    case OccupancyError::EmptyBlock: return "EmptyBlock";
    case OccupancyError::BlockTooLarge: return "BlockTooLarge";
    case OccupancyError::TooManyRegisters: return "TooManyRegisters";
    case OccupancyError::TooMuchSharedMemory: return "TooMuchSharedMemory";
    case OccupancyError::UnknownArchitecture: return "UnknownArchitecture";
    case OccupancyError::InvalidLimits: return "InvalidLimits";
  }
  return "None";
}

/// A limit that resources never reach (no registers, or no shared memory before sm_80), as
/// cuda_occupancy.h writes it.
inline constexpr int kUnlimitedBlocks = std::numeric_limits<int>::max();

/// Kineto's "est. achieved occupancy %" when its calculator fails (format/vocabulary.hpp).
inline constexpr int kKinetoOccupancyUnknown = kineto::arg::kOccupancyUnknown;

/// The three kernel args Kineto computes (DeviceProperties.cpp: blocksPerSm, warpsPerSm,
/// kernelOccupancy; CuptiActivity.cpp writes the last as (int)(0.5 + occupancy * 100.0)), in
/// Kineto's float arithmetic so that they come out bit for bit the same.
struct KinetoKernelArgs {
  /// "blocks per SM": grid blocks / SMs. +infinity when the SM count is unknown, as Kineto writes it.
  float blocks_per_sm = 0;
  /// "warps per SM": blocks per SM * threads per block / 32 (Kineto's constant, not warp_size).
  float warps_per_sm = 0;
  /// "est. achieved occupancy %": min(blocks per SM, active blocks per SM) * threads per block /
  /// max threads per SM, rounded to the nearest percent. Threads, not warps: a 48-thread block
  /// counts as 48 threads, not 2 warps. kKinetoOccupancyUnknown where Kineto's calculator fails
  /// (EmptyBlock, UnknownArchitecture, InvalidLimits, no SM count).
  int est_achieved_occupancy_percent = kKinetoOccupancyUnknown;
};

/// The occupancy of one launch on one GPU. The per-resource fields hold only when error is None
/// or a resource error (TooManyRegisters, TooMuchSharedMemory); they are 0 otherwise.
struct KernelOccupancy {
  OccupancyError error = OccupancyError::None;
  int active_blocks_per_sm = 0;
  int active_warps_per_sm = 0;
  double theoretical_occupancy = 0;  ///< active warps / max warps per SM, in [0, 1]
  LimitingFactor limiting_factors = LimitingFactor::None;
  int warps_per_block = 0;
  int block_limit_warps = 0;
  int block_limit_registers = 0;      ///< kUnlimitedBlocks for a kernel without registers
  int block_limit_shared_memory = 0;  ///< kUnlimitedBlocks for a block without shared memory
  int block_limit_blocks = 0;
  std::int64_t allocated_registers_per_block = 0;
  std::int64_t allocated_shared_memory_per_block = 0;  ///< bytes, reserve and rounding included
  KinetoKernelArgs kineto;
};

/// One compute capability's limits: the columns that differ between architectures.
struct ArchitectureLimits {
  int compute_major;
  int compute_minor;
  int max_threads_per_sm;
  int max_blocks_per_sm;
  std::int64_t shared_memory_per_sm;
  std::int64_t shared_memory_per_block_optin;
};

inline constexpr std::int64_t kKiB = 1024;

// Sources: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (resident
// threads per SM, shared memory per SM and per block), and cuda_occupancy.h of CUDA 13.0
// (cudaOccMaxBlocksPerMultiprocessor: resident blocks per SM, including the 24 of sm_89 and sm_120).
// The opt-in per-block limit is the per-SM amount less the 1 KiB reserve from sm_80 on, equal to it
// before, as cudaDeviceProp::sharedMemPerBlockOptin reports.
inline constexpr ArchitectureLimits kArchitectureLimits[] = {
    // major, minor, threads/SM, blocks/SM, shared memory/SM, opt-in shared memory/block
    {7, 0, 2048, 32, 96 * kKiB, 96 * kKiB},     // Volta: V100
    {7, 5, 1024, 16, 64 * kKiB, 64 * kKiB},     // Turing: T4, RTX 20xx
    {8, 0, 2048, 32, 164 * kKiB, 163 * kKiB},   // Ampere: A100, A30
    {8, 6, 1536, 16, 100 * kKiB, 99 * kKiB},    // Ampere: A10, A40, RTX 30xx
    {8, 9, 1536, 24, 100 * kKiB, 99 * kKiB},    // Ada: L4, L40, RTX 40xx
    {9, 0, 2048, 32, 228 * kKiB, 227 * kKiB},   // Hopper: H100, H200
    {10, 0, 2048, 32, 228 * kKiB, 227 * kKiB},  // Blackwell: B200
    {12, 0, 1536, 24, 100 * kKiB, 99 * kKiB},   // Blackwell: RTX 50xx
};

/// The limits of a compute capability in the table, with num_sms left 0 (it varies between GPUs
/// of one architecture); nullopt for one that is not in it.
inline std::optional<SmLimits> architecture_sm_limits(int compute_major, int compute_minor) noexcept {
  for (const ArchitectureLimits& row : kArchitectureLimits) {
    if (row.compute_major != compute_major || row.compute_minor != compute_minor) continue;
    const bool ampere_or_later = compute_major >= 8;
    SmLimits limits;
    limits.compute_major = compute_major;
    limits.compute_minor = compute_minor;
    limits.max_threads_per_sm = row.max_threads_per_sm;
    limits.max_blocks_per_sm = row.max_blocks_per_sm;
    limits.shared_memory_per_sm = row.shared_memory_per_sm;
    limits.shared_memory_per_block_optin = row.shared_memory_per_block_optin;
    // The same on every architecture in the table (Programming Guide, same table).
    limits.warp_size = 32;
    limits.max_threads_per_block = 1024;
    limits.registers_per_sm = 64 * 1024;
    limits.registers_per_block = 64 * 1024;
    // cuda_occupancy.h checks against 256 (cudaOccRegAllocationMaxPerThread), a count no
    // compiled kernel has; the hardware maximum is 255.
    limits.max_registers_per_thread = 255;
    limits.shared_memory_per_block = 48 * kKiB;
    // cuda_occupancy.h: cudaOccRegAllocationGranularity, cudaOccSubPartitionsPerMultiprocessor.
    limits.register_allocation_unit = 256;
    limits.register_file_partitions = 4;
    // cuda_occupancy.h: cudaOccSMemAllocationGranularity. The reserve is
    // cudaDeviceProp::reservedSharedMemPerBlock; the Programming Guide's "Shared Memory" sections
    // for 8.x and later: the 1 KB of an SM's shared memory a block cannot have is reserved for
    // system use.
    limits.shared_memory_allocation_unit = ampere_or_later ? 128 : 256;
    limits.reserved_shared_memory_per_block = ampere_or_later ? kKiB : 0;
    return limits;
  }
  return std::nullopt;
}

/// The limits of the GPU `device` describes: its own values where it has them (a field left 0,
/// e.g. by a trace written without it, takes the table's), the table's for the rest (allocation
/// units, register partitions, resident blocks, the shared-memory reserve). nullopt for a compute
/// capability not in the table.
inline std::optional<SmLimits> sm_limits(const DeviceProperties& device) noexcept {
  std::optional<SmLimits> limits = architecture_sm_limits(device.compute_major, device.compute_minor);
  if (!limits) return std::nullopt;
  const auto take_if_known = [](auto& limit, auto device_value) {
    if (device_value > 0) limit = device_value;
  };
  take_if_known(limits->num_sms, device.num_sms);
  take_if_known(limits->warp_size, device.warp_size);
  take_if_known(limits->max_threads_per_block, device.max_threads_per_block);
  take_if_known(limits->max_threads_per_sm, device.max_threads_per_multiprocessor);
  take_if_known(limits->registers_per_sm, device.regs_per_multiprocessor);
  take_if_known(limits->registers_per_block, device.regs_per_block);
  take_if_known(limits->shared_memory_per_sm, device.shared_mem_per_multiprocessor);
  take_if_known(limits->shared_memory_per_block, device.shared_mem_per_block);
  take_if_known(limits->shared_memory_per_block_optin, device.shared_mem_per_block_optin);
  return limits;
}

namespace occupancy_internal {

constexpr std::int64_t divide_round_up(std::int64_t value, std::int64_t divisor) noexcept {
  return (value + divisor - 1) / divisor;
}

constexpr std::int64_t round_up(std::int64_t value, std::int64_t unit) noexcept {
  return divide_round_up(value, unit) * unit;
}

inline bool limits_are_valid(const SmLimits& limits) noexcept {
  return limits.warp_size > 0 && limits.max_threads_per_block > 0 && limits.max_warps_per_sm() > 0 &&
         limits.max_blocks_per_sm > 0 && limits.registers_per_sm > 0 && limits.registers_per_block > 0 &&
         limits.max_registers_per_thread > 0 && limits.register_allocation_unit > 0 &&
         limits.register_file_partitions > 0 && limits.shared_memory_per_sm > 0 &&
         limits.shared_memory_per_block > 0 && limits.shared_memory_per_block_optin > 0 &&
         limits.shared_memory_allocation_unit > 0 && limits.reserved_shared_memory_per_block >= 0;
}

// Errors for which cudaOccMaxActiveBlocksPerMultiprocessor itself fails (CUDA_OCC_ERROR_*), as
// opposed to succeeding with 0 resident blocks.
constexpr bool calculator_fails(OccupancyError error) noexcept {
  return error == OccupancyError::EmptyBlock || error == OccupancyError::UnknownArchitecture ||
         error == OccupancyError::InvalidLimits;
}

inline KinetoKernelArgs kineto_kernel_args(const KernelLaunch& launch, int num_sms, int max_threads_per_sm,
                                           const KernelOccupancy& occupancy) noexcept {
  constexpr float kKinetoThreadsPerWarp = 32;
  const float threads_per_block = static_cast<float>(launch.block.volume());
  KinetoKernelArgs args;
  if (num_sms <= 0) {
    args.blocks_per_sm = std::numeric_limits<float>::infinity();
    args.warps_per_sm = std::numeric_limits<float>::infinity();
    return args;
  }
  args.blocks_per_sm = static_cast<float>(launch.grid.volume()) / static_cast<float>(num_sms);
  args.warps_per_sm = args.blocks_per_sm * threads_per_block / kKinetoThreadsPerWarp;
  if (calculator_fails(occupancy.error)) return args;
  // A grid smaller than one full wave keeps fewer blocks resident than the limits allow.
  const float resident_blocks = std::min(static_cast<float>(occupancy.active_blocks_per_sm), args.blocks_per_sm);
  const float occupancy_fraction = resident_blocks * threads_per_block / static_cast<float>(max_threads_per_sm);
  args.est_achieved_occupancy_percent = static_cast<int>(0.5 + static_cast<double>(occupancy_fraction) * 100.0);
  return args;
}

// The resource limits of a block that passed the thread-count checks (so at most
// max_threads_per_block threads, and every product below fits in 64 bits).
inline void fill_resource_limits(const KernelLaunch& launch, const SmLimits& limits,
                                 SharedMemoryLimit shared_memory_limit, std::int64_t threads,
                                 KernelOccupancy& result) noexcept {
  const std::int64_t warps_per_block = divide_round_up(threads, limits.warp_size);
  result.warps_per_block = static_cast<int>(warps_per_block);
  result.block_limit_warps = static_cast<int>(limits.max_warps_per_sm() / warps_per_block);
  result.block_limit_blocks = limits.max_blocks_per_sm;

  if (launch.registers_per_thread > static_cast<std::uint32_t>(limits.max_registers_per_thread)) {
    result.block_limit_registers = 0;
    result.error = OccupancyError::TooManyRegisters;
  } else {
    const std::int64_t registers_per_warp =
        round_up(std::int64_t{launch.registers_per_thread} * limits.warp_size, limits.register_allocation_unit);
    result.allocated_registers_per_block = registers_per_warp * warps_per_block;
    // The hardware checks the per-block limit as if the block's warps were spread evenly over all
    // partitions (cudaOccMaxBlocksPerSMRegsLimit's "hardware check"), so round the warps up to them.
    const std::int64_t registers_checked_per_block =
        registers_per_warp * round_up(warps_per_block, limits.register_file_partitions);
    if (registers_checked_per_block > limits.registers_per_block ||
        result.allocated_registers_per_block > limits.registers_per_block) {
      result.block_limit_registers = 0;
      result.error = OccupancyError::TooManyRegisters;
    } else if (registers_per_warp == 0) {
      result.block_limit_registers = kUnlimitedBlocks;
    } else {
      const std::int64_t warps_per_partition =
          limits.registers_per_sm / limits.register_file_partitions / registers_per_warp;
      result.block_limit_registers =
          static_cast<int>(warps_per_partition * limits.register_file_partitions / warps_per_block);
    }
  }

  result.allocated_shared_memory_per_block =
      round_up(std::int64_t{launch.static_shared_memory} + launch.dynamic_shared_memory +
                   limits.reserved_shared_memory_per_block,
               limits.shared_memory_allocation_unit);
  const std::int64_t shared_memory_limit_per_block =
      (shared_memory_limit == SharedMemoryLimit::OptIn ? limits.shared_memory_per_block_optin
                                                       : limits.shared_memory_per_block) +
      limits.reserved_shared_memory_per_block;
  if (result.allocated_shared_memory_per_block > shared_memory_limit_per_block) {
    result.block_limit_shared_memory = 0;
    if (result.error == OccupancyError::None) result.error = OccupancyError::TooMuchSharedMemory;
  } else if (result.allocated_shared_memory_per_block == 0) {
    result.block_limit_shared_memory = kUnlimitedBlocks;
  } else {
    result.block_limit_shared_memory =
        static_cast<int>(std::min<std::int64_t>(limits.shared_memory_per_sm / result.allocated_shared_memory_per_block,
                                                kUnlimitedBlocks));
  }

  result.active_blocks_per_sm = std::min({result.block_limit_warps, result.block_limit_registers,
                                          result.block_limit_shared_memory, result.block_limit_blocks});
  LimitingFactor factors = LimitingFactor::None;
  if (result.block_limit_warps == result.active_blocks_per_sm) factors = factors | LimitingFactor::Warps;
  if (result.block_limit_registers == result.active_blocks_per_sm) factors = factors | LimitingFactor::Registers;
  if (result.block_limit_shared_memory == result.active_blocks_per_sm) factors = factors | LimitingFactor::SharedMemory;
  if (result.block_limit_blocks == result.active_blocks_per_sm) factors = factors | LimitingFactor::Blocks;
  result.limiting_factors = factors;
  result.active_warps_per_sm = result.active_blocks_per_sm * result.warps_per_block;
  result.theoretical_occupancy =
      static_cast<double>(result.active_warps_per_sm) / static_cast<double>(limits.max_warps_per_sm());
}

}  // namespace occupancy_internal

/// The occupancy of `launch` on a GPU with `limits`, and Kineto's kernel args for it. Never
/// throws, never divides by zero: a launch that cannot run, or limits that cannot be computed
/// with, give 0 active blocks and an error.
inline KernelOccupancy compute_occupancy(const KernelLaunch& launch, const SmLimits& limits,
                                         SharedMemoryLimit shared_memory_limit = SharedMemoryLimit::OptIn) noexcept {
  KernelOccupancy result;
  const std::int64_t threads = launch.block.volume();
  if (!occupancy_internal::limits_are_valid(limits)) {
    result.error = OccupancyError::InvalidLimits;
  } else if (threads == 0) {
    result.error = OccupancyError::EmptyBlock;
  } else if (threads > limits.max_threads_per_block) {
    result.error = OccupancyError::BlockTooLarge;
    result.limiting_factors = LimitingFactor::Warps;
  } else {
    occupancy_internal::fill_resource_limits(launch, limits, shared_memory_limit, threads, result);
  }
  result.kineto = occupancy_internal::kineto_kernel_args(launch, limits.num_sms, limits.max_threads_per_sm, result);
  return result;
}

/// The same on the GPU `device` describes (see sm_limits); UnknownArchitecture for a compute
/// capability not in the table, with Kineto's "blocks per SM" and "warps per SM" still filled in.
inline KernelOccupancy compute_occupancy(const KernelLaunch& launch, const DeviceProperties& device,
                                         SharedMemoryLimit shared_memory_limit = SharedMemoryLimit::OptIn) noexcept {
  if (const std::optional<SmLimits> limits = sm_limits(device)) {
    return compute_occupancy(launch, *limits, shared_memory_limit);
  }
  KernelOccupancy result;
  result.error = OccupancyError::UnknownArchitecture;
  result.kineto = occupancy_internal::kineto_kernel_args(launch, device.num_sms,
                                                         device.max_threads_per_multiprocessor, result);
  return result;
}

}  // namespace detail
DLPROF_END_NAMESPACE
