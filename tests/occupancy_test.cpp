// The occupancy calculator: NVIDIA's rules (cuda_occupancy.h), checked by hand on A100, H100 and
// others, and Kineto's kernel args, checked against values from real torch.profiler traces.
#include <dlprof/detail/backends/occupancy.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

DLPROF_BEGIN_NAMESPACE
namespace detail {

// Let GoogleTest print the enums by name in failure messages.
inline void PrintTo(OccupancyError error, std::ostream* os) { *os << to_string(error); }

inline void PrintTo(LimitingFactor factors, std::ostream* os) {
  std::string names;
  const auto add = [&](LimitingFactor factor, const char* name) {
    if (!limited_by(factors, factor)) return;
    if (!names.empty()) names += '|';
    names += name;
  };
  add(LimitingFactor::Warps, "Warps");
  add(LimitingFactor::Registers, "Registers");
  add(LimitingFactor::SharedMemory, "SharedMemory");
  add(LimitingFactor::Blocks, "Blocks");
  *os << (names.empty() ? std::string("None") : names);
}

}  // namespace detail
DLPROF_END_NAMESPACE

namespace {

using dlprof::detail::architecture_sm_limits;
using dlprof::detail::compute_occupancy;
using dlprof::detail::Dim3;
using dlprof::detail::KernelLaunch;
using dlprof::detail::KernelOccupancy;
using dlprof::detail::kKinetoOccupancyUnknown;
using dlprof::detail::kUnlimitedBlocks;
using dlprof::detail::LimitingFactor;
using dlprof::detail::OccupancyError;
using dlprof::detail::SharedMemoryLimit;
using dlprof::detail::SmLimits;

constexpr std::uint32_t kKiB = 1024;

SmLimits gpu(int compute_major, int compute_minor, int num_sms) {
  std::optional<SmLimits> limits = architecture_sm_limits(compute_major, compute_minor);
  EXPECT_TRUE(limits.has_value()) << "sm_" << compute_major << compute_minor;
  limits->num_sms = num_sms;
  return *limits;
}

SmLimits a100() { return gpu(8, 0, 108); }
SmLimits h100() { return gpu(9, 0, 132); }  // H100 SXM

// A launch of `grid` one-dimensional blocks of `threads` threads.
KernelLaunch launch(std::uint32_t threads, std::uint32_t registers, std::uint32_t static_shared = 0,
                    std::uint32_t dynamic_shared = 0, std::uint32_t grid = 10'000) {
  KernelLaunch result;
  result.grid = Dim3{grid, 1, 1};
  result.block = Dim3{threads, 1, 1};
  result.registers_per_thread = registers;
  result.static_shared_memory = static_shared;
  result.dynamic_shared_memory = dynamic_shared;
  return result;
}

// --- The four limits, by hand on an A100 (sm_80: 64 warps, 32 blocks, 65536 registers in 4
// partitions of 16384, 164 KiB = 167936 bytes of shared memory, 1 KiB reserved per block). ---

TEST(OccupancyTest, A100WarpsAndRegistersBothCapA256ThreadBlockAt32Registers) {
  const KernelOccupancy occupancy = compute_occupancy(launch(256, 32), a100());
  ASSERT_EQ(occupancy.error, OccupancyError::None);
  EXPECT_EQ(occupancy.warps_per_block, 8);                     // 256 / 32
  EXPECT_EQ(occupancy.block_limit_warps, 8);                   // 64 / 8
  EXPECT_EQ(occupancy.allocated_registers_per_block, 8'192);   // 32 * 32 = 1024 per warp, * 8
  EXPECT_EQ(occupancy.block_limit_registers, 8);               // 16384 / 1024 = 16 warps per partition, * 4 / 8
  EXPECT_EQ(occupancy.allocated_shared_memory_per_block, 1'024);  // just the reserve
  EXPECT_EQ(occupancy.block_limit_shared_memory, 164);         // 167936 / 1024
  EXPECT_EQ(occupancy.block_limit_blocks, 32);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 8);
  EXPECT_EQ(occupancy.active_warps_per_sm, 64);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 1.0);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Warps | LimitingFactor::Registers);
}

TEST(OccupancyTest, A100RegistersHalveOccupancyAt64Registers) {
  // 64 * 32 = 2048 registers per warp; 16384 / 2048 = 8 warps per partition, 32 per SM, 4 blocks.
  const KernelOccupancy occupancy = compute_occupancy(launch(256, 64), a100());
  EXPECT_EQ(occupancy.block_limit_registers, 4);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 4);
  EXPECT_EQ(occupancy.active_warps_per_sm, 32);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 0.5);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Registers);
}

TEST(OccupancyTest, RegistersPerWarpRoundUpToTheAllocationUnit) {
  // 33 * 32 = 1056 registers per warp, rounded up to 5 * 256 = 1280 (40 per thread);
  // 16384 / 1280 = 12 warps per partition, 48 per SM, 6 blocks of 8 warps.
  const KernelOccupancy occupancy = compute_occupancy(launch(256, 33), a100());
  EXPECT_EQ(occupancy.allocated_registers_per_block, 10'240);  // 1280 * 8
  EXPECT_EQ(occupancy.block_limit_registers, 6);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 6);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 0.75);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Registers);
}

TEST(OccupancyTest, AWarpsRegistersComeFromOnePartition) {
  // 48 * 32 = 1536 registers per warp. The whole file would hold 65536 / 1536 = 42 warps (21 blocks
  // of 2), but each partition holds 16384 / 1536 = 10, so 40 warps and 20 blocks.
  const KernelOccupancy occupancy = compute_occupancy(launch(64, 48), a100());
  EXPECT_EQ(occupancy.block_limit_registers, 20);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 20);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 40.0 / 64.0);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Registers);
}

TEST(OccupancyTest, A100SharedMemoryCountsTheOneKibReserve) {
  // 32 KiB + 1 KiB = 33792 bytes per block: 167936 / 33792 = 4 blocks (5 without the reserve).
  const KernelOccupancy static_32k = compute_occupancy(launch(128, 0, 32 * kKiB), a100());
  EXPECT_EQ(static_32k.allocated_shared_memory_per_block, 33'792);
  EXPECT_EQ(static_32k.block_limit_registers, kUnlimitedBlocks) << "a kernel without registers";
  EXPECT_EQ(static_32k.active_blocks_per_sm, 4);
  EXPECT_EQ(static_32k.limiting_factors, LimitingFactor::SharedMemory);
  EXPECT_DOUBLE_EQ(static_32k.theoretical_occupancy, 16.0 / 64.0);  // 4 blocks of 4 warps

  // 48 KiB + 1 KiB = 50176 bytes: 167936 / 50176 = 3 blocks.
  const KernelOccupancy dynamic_48k = compute_occupancy(launch(128, 0, 0, 48 * kKiB), a100());
  EXPECT_EQ(dynamic_48k.allocated_shared_memory_per_block, 50'176);
  EXPECT_EQ(dynamic_48k.active_blocks_per_sm, 3);
  EXPECT_EQ(dynamic_48k.limiting_factors, LimitingFactor::SharedMemory);
}

TEST(OccupancyTest, SharedMemoryRoundsUpToTheAllocationUnit) {
  // sm_80: 1 + 1024 = 1025 bytes round up to 9 * 128 = 1152; 167936 / 1152 = 145.
  const KernelOccupancy a100_one_byte = compute_occupancy(launch(32, 0, 1), a100());
  EXPECT_EQ(a100_one_byte.allocated_shared_memory_per_block, 1'152);
  EXPECT_EQ(a100_one_byte.block_limit_shared_memory, 145);

  // sm_70: 256-byte unit and no reserve. 12289 bytes round up to 49 * 256 = 12544;
  // 98304 / 12544 = 7 blocks (a 12288-byte block would fit 8).
  const KernelOccupancy v100 = compute_occupancy(launch(128, 0, 12 * kKiB + 1), gpu(7, 0, 80));
  EXPECT_EQ(v100.allocated_shared_memory_per_block, 12'544);
  EXPECT_EQ(v100.active_blocks_per_sm, 7);
  EXPECT_EQ(v100.limiting_factors, LimitingFactor::SharedMemory);
  EXPECT_EQ(compute_occupancy(launch(128, 0, 12 * kKiB), gpu(7, 0, 80)).active_blocks_per_sm, 8);

  // sm_70 without shared memory allocates none, so shared memory sets no limit.
  EXPECT_EQ(compute_occupancy(launch(128, 0), gpu(7, 0, 80)).block_limit_shared_memory, kUnlimitedBlocks);
}

TEST(OccupancyTest, TinyBlocksHitTheResidentBlockLimit) {
  // One warp of 16 registers: 512 per warp, 32 per partition, 128 blocks by registers; the
  // architecture's block limit binds first.
  const KernelOccupancy on_a100 = compute_occupancy(launch(32, 16), a100());
  EXPECT_EQ(on_a100.block_limit_registers, 128);
  EXPECT_EQ(on_a100.active_blocks_per_sm, 32);
  EXPECT_EQ(on_a100.limiting_factors, LimitingFactor::Blocks);
  EXPECT_DOUBLE_EQ(on_a100.theoretical_occupancy, 0.5);  // 32 warps of 64

  const KernelOccupancy on_sm89 = compute_occupancy(launch(32, 16), gpu(8, 9, 58));  // L40S
  EXPECT_EQ(on_sm89.active_blocks_per_sm, 24);
  EXPECT_DOUBLE_EQ(on_sm89.theoretical_occupancy, 0.5);  // 24 warps of 48

  const KernelOccupancy on_sm86 = compute_occupancy(launch(32, 16), gpu(8, 6, 82));  // RTX 3090
  EXPECT_EQ(on_sm86.active_blocks_per_sm, 16);
  EXPECT_DOUBLE_EQ(on_sm86.theoretical_occupancy, 16.0 / 48.0);

  const KernelOccupancy on_sm75 = compute_occupancy(launch(32, 16), gpu(7, 5, 40));  // T4
  EXPECT_EQ(on_sm75.active_blocks_per_sm, 16);
  EXPECT_DOUBLE_EQ(on_sm75.theoretical_occupancy, 0.5);  // 16 warps of 32
}

TEST(OccupancyTest, Sm86FitsOneBlockOf1024ThreadsInItsFortyEightWarps) {
  // RTX 3090, 82 SMs. 32 warps per block: 48 / 32 = 1 block by warps (registers would allow 2:
  // 1024 per warp, 16 per partition, 64 warps).
  const KernelOccupancy occupancy = compute_occupancy(launch(1024, 32, 0, 0, 820), gpu(8, 6, 82));
  EXPECT_EQ(occupancy.block_limit_warps, 1);
  EXPECT_EQ(occupancy.block_limit_registers, 2);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 1);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Warps);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 32.0 / 48.0);
  // Kineto: min(820 / 82, 1) * 1024 / 1536 = 0.6666667, and (int)(0.5 + 66.67) rounds to 67
  // where truncating would give 66.
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 67);
}

TEST(OccupancyTest, H100OptInSharedMemoryFitsOneBlock) {
  // 227 KiB = 232448 bytes of dynamic shared memory + 1 KiB = 233472: all of the SM's 228 KiB.
  const KernelOccupancy full = compute_occupancy(launch(128, 0, 0, 227 * kKiB), h100());
  ASSERT_EQ(full.error, OccupancyError::None);
  EXPECT_EQ(full.allocated_shared_memory_per_block, 233'472);
  EXPECT_EQ(full.active_blocks_per_sm, 1);
  EXPECT_EQ(full.limiting_factors, LimitingFactor::SharedMemory);
  EXPECT_DOUBLE_EQ(full.theoretical_occupancy, 4.0 / 64.0);

  // 100 KiB + 1 KiB = 103424 bytes: 233472 / 103424 = 2 blocks.
  EXPECT_EQ(compute_occupancy(launch(128, 0, 0, 100 * kKiB), h100()).active_blocks_per_sm, 2);

  // One byte more than the opt-in limit rounds up to 233600 bytes and cannot launch.
  const KernelOccupancy over = compute_occupancy(launch(128, 0, 0, 227 * kKiB + 1), h100());
  EXPECT_EQ(over.error, OccupancyError::TooMuchSharedMemory);
  EXPECT_EQ(over.active_blocks_per_sm, 0);
  EXPECT_EQ(over.block_limit_shared_memory, 0);
  EXPECT_EQ(over.limiting_factors, LimitingFactor::SharedMemory);
  EXPECT_EQ(over.kineto.est_achieved_occupancy_percent, 0);
}

TEST(OccupancyTest, H100RegisterFileHoldsOneBlockOf1024ThreadsAt64Registers) {
  // 64 * 32 = 2048 per warp; 32 warps need exactly the 65536 a block may have; 16384 / 2048 = 8
  // warps per partition, 32 per SM: 1 block (2 by warps).
  const KernelOccupancy at_64 = compute_occupancy(launch(1024, 64), h100());
  EXPECT_EQ(at_64.allocated_registers_per_block, 65'536);
  EXPECT_EQ(at_64.active_blocks_per_sm, 1);
  EXPECT_EQ(at_64.limiting_factors, LimitingFactor::Registers);
  EXPECT_DOUBLE_EQ(at_64.theoretical_occupancy, 0.5);

  // 65 * 32 = 2080, rounded to 2304 per warp; 32 warps need 73728 > 65536 per block.
  const KernelOccupancy at_65 = compute_occupancy(launch(1024, 65), h100());
  EXPECT_EQ(at_65.error, OccupancyError::TooManyRegisters);
  EXPECT_EQ(at_65.active_blocks_per_sm, 0);
  EXPECT_EQ(at_65.limiting_factors, LimitingFactor::Registers);
}

// --- Kineto's kernel args. ---

TEST(OccupancyTest, ReproducesTheKernelArgsOfAnA100Trace) {
  // docs/trace-format.md §2.6, HTA's nccl_data.json: cudnn::bn_bw_1C11_kernel_new, grid [512,1,1],
  // block [512,1,1], 40 registers, 400 bytes of shared memory, "blocks per SM": 4.740741,
  // "warps per SM": 75.851852, "est. achieved occupancy %": 75. 512 / 4.740741 = 108 SMs: an A100.
  const KernelOccupancy occupancy = compute_occupancy(launch(512, 40, 400, 0, 512), a100());
  // 16 warps per block. Registers: 40 * 32 = 1280 per warp, 12 per partition, 48 per SM: 3 blocks.
  // Warps: 64 / 16 = 4. Shared memory: 400 + 1024 rounds to 1536, 167936 / 1536 = 109.
  EXPECT_EQ(occupancy.block_limit_warps, 4);
  EXPECT_EQ(occupancy.block_limit_registers, 3);
  EXPECT_EQ(occupancy.block_limit_shared_memory, 109);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 3);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Registers);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 0.75);

  EXPECT_EQ(occupancy.kineto.blocks_per_sm, 512.0f / 108.0f);
  EXPECT_EQ(fmt::format("{:f}", occupancy.kineto.blocks_per_sm), "4.740741");
  EXPECT_EQ(fmt::format("{:f}", occupancy.kineto.warps_per_sm), "75.851852");  // 4.740741 * 512 / 32
  // min(4.74, 3) * 512 / 2048 = 0.75.
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 75);
}

TEST(OccupancyTest, ReproducesTheKernelArgsOfAnRtx5090Trace) {
  // A Kineto trace from an RTX 5090 (sm_120, 170 SMs), as quoted in a public trace-analysis
  // guide: grid [800,1,1], block [512,1,1], 40
  // registers, no shared memory, "blocks per SM": 4.705883, "warps per SM": 75.294121,
  // "est. achieved occupancy %": 100, and in its "occupancy" object activeBlocksPerMultiprocessor
  // 3, limitingFactors "WARPS|REGS", blockLimitSharedMem 100, allocatedRegistersPerBlock 20480,
  // allocatedSharedMemPerBlock 1024.
  const KernelOccupancy occupancy = compute_occupancy(launch(512, 40, 0, 0, 800), gpu(12, 0, 170));
  EXPECT_EQ(occupancy.active_blocks_per_sm, 3);  // 48 warps / 16; registers as on the A100
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Warps | LimitingFactor::Registers);
  EXPECT_EQ(occupancy.block_limit_shared_memory, 100);  // 102400 / 1024
  EXPECT_EQ(occupancy.allocated_registers_per_block, 20'480);
  EXPECT_EQ(occupancy.allocated_shared_memory_per_block, 1'024);
  EXPECT_EQ(fmt::format("{:f}", occupancy.kineto.blocks_per_sm), "4.705883");
  EXPECT_EQ(fmt::format("{:f}", occupancy.kineto.warps_per_sm), "75.294121");
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 100);  // 3 * 512 / 1536
}

TEST(OccupancyTest, AGridSmallerThanTheGpuLowersTheEstimatedAchievedOccupancy) {
  // 54 blocks on 108 SMs: half the SMs get one block, however many would fit.
  const KernelOccupancy occupancy = compute_occupancy(launch(256, 32, 0, 0, 54), a100());
  EXPECT_EQ(occupancy.active_blocks_per_sm, 8);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 1.0);
  EXPECT_EQ(occupancy.kineto.blocks_per_sm, 0.5f);
  EXPECT_EQ(occupancy.kineto.warps_per_sm, 4.0f);  // 0.5 * 256 / 32
  // min(0.5, 8) * 256 / 2048 = 0.0625; (int)(0.5 + 6.25) = 6.
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 6);
}

TEST(OccupancyTest, KinetoCountsThreadsWhereTheCalculatorCountsWarps) {
  // 48-thread blocks take 2 warps each: 32 blocks by warps and by the block limit, 64 warps, 100%.
  // Kineto's estimate uses threads: 32 * 48 / 2048 = 0.75.
  const KernelOccupancy occupancy = compute_occupancy(launch(48, 0), a100());
  EXPECT_EQ(occupancy.active_blocks_per_sm, 32);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Warps | LimitingFactor::Blocks);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 1.0);
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 75);
}

TEST(OccupancyTest, KinetosDefaultSharedMemoryLimitRejectsOptedInKernels) {
  // Kineto passes FUNC_SHMEM_LIMIT_DEFAULT: 48 KiB + the 1 KiB reserve per block.
  const SmLimits sm = a100();
  const KernelLaunch kernel_64k = launch(128, 0, 0, 64 * kKiB);
  const KernelOccupancy opted_in = compute_occupancy(kernel_64k, sm, SharedMemoryLimit::OptIn);
  EXPECT_EQ(opted_in.active_blocks_per_sm, 2);  // 167936 / 66560
  const KernelOccupancy as_kineto = compute_occupancy(kernel_64k, sm, SharedMemoryLimit::Default);
  EXPECT_EQ(as_kineto.error, OccupancyError::TooMuchSharedMemory);
  EXPECT_EQ(as_kineto.active_blocks_per_sm, 0);
  EXPECT_EQ(as_kineto.kineto.est_achieved_occupancy_percent, 0);

  // Exactly 48 KiB fits either way (50176 bytes allocated); one byte more does not by default.
  EXPECT_EQ(compute_occupancy(launch(128, 0, 0, 48 * kKiB), sm, SharedMemoryLimit::Default).active_blocks_per_sm, 3);
  EXPECT_EQ(compute_occupancy(launch(128, 0, 0, 48 * kKiB + 1), sm, SharedMemoryLimit::Default).error,
            OccupancyError::TooMuchSharedMemory);
}

// --- Launches that cannot run, and limits that cannot be computed with. ---

TEST(OccupancyTest, EmptyBlockHasNoOccupancy) {
  KernelLaunch empty = launch(128, 32, 0, 0, 216);
  empty.block.y = 0;
  const KernelOccupancy occupancy = compute_occupancy(empty, a100());
  EXPECT_EQ(occupancy.error, OccupancyError::EmptyBlock);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 0);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::None);
  EXPECT_DOUBLE_EQ(occupancy.theoretical_occupancy, 0.0);
  EXPECT_EQ(occupancy.kineto.blocks_per_sm, 2.0f) << "Kineto divides the grid whatever the block";
  EXPECT_EQ(occupancy.kineto.warps_per_sm, 0.0f);
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, kKinetoOccupancyUnknown);
}

TEST(OccupancyTest, BlockOfMoreThan1024ThreadsCannotLaunch) {
  for (const Dim3 block : {Dim3{1025, 1, 1}, Dim3{32, 32, 2}, Dim3{65'536, 65'536, 1}}) {
    KernelLaunch too_large = launch(1, 32);
    too_large.block = block;
    const KernelOccupancy occupancy = compute_occupancy(too_large, a100());
    EXPECT_EQ(occupancy.error, OccupancyError::BlockTooLarge) << block.x << "x" << block.y << "x" << block.z;
    EXPECT_EQ(occupancy.active_blocks_per_sm, 0);
    EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Warps);
    EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 0);
  }
}

TEST(OccupancyTest, MoreThan255RegistersPerThreadCannotLaunch) {
  // 255 is the most a thread can have: 255 * 32 = 8160, rounded to 8192 per warp; 2 warps per
  // partition, 8 one-warp blocks.
  const KernelOccupancy at_255 = compute_occupancy(launch(32, 255), a100());
  EXPECT_EQ(at_255.error, OccupancyError::None);
  EXPECT_EQ(at_255.active_blocks_per_sm, 8);
  EXPECT_EQ(at_255.limiting_factors, LimitingFactor::Registers);

  const KernelOccupancy at_256 = compute_occupancy(launch(32, 256), a100());
  EXPECT_EQ(at_256.error, OccupancyError::TooManyRegisters);
  EXPECT_EQ(at_256.active_blocks_per_sm, 0);
  EXPECT_EQ(at_256.limiting_factors, LimitingFactor::Registers);

  const KernelOccupancy absurd = compute_occupancy(launch(32, std::numeric_limits<std::uint32_t>::max()), a100());
  EXPECT_EQ(absurd.error, OccupancyError::TooManyRegisters);
}

TEST(OccupancyTest, ReportsTheFirstErrorAndEveryExhaustedResource) {
  const KernelOccupancy occupancy = compute_occupancy(launch(1024, 200, 0, 200 * kKiB), a100());
  EXPECT_EQ(occupancy.error, OccupancyError::TooManyRegisters);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 0);
  EXPECT_EQ(occupancy.limiting_factors, LimitingFactor::Registers | LimitingFactor::SharedMemory);
}

TEST(OccupancyTest, UnknownArchitectureStillGivesKinetosBlocksAndWarpsPerSm) {
  for (const auto& [major, minor] : {std::pair{6, 0}, std::pair{8, 7}, std::pair{13, 0}}) {
    dlprof::DeviceProperties device;
    device.compute_major = major;
    device.compute_minor = minor;
    device.num_sms = 60;
    device.max_threads_per_multiprocessor = 2048;
    EXPECT_FALSE(dlprof::detail::sm_limits(device).has_value());
    const KernelOccupancy occupancy = compute_occupancy(launch(128, 32, 0, 0, 120), device);
    EXPECT_EQ(occupancy.error, OccupancyError::UnknownArchitecture) << major << "." << minor;
    EXPECT_EQ(occupancy.active_blocks_per_sm, 0);
    EXPECT_EQ(occupancy.kineto.blocks_per_sm, 2.0f);  // 120 / 60
    EXPECT_EQ(occupancy.kineto.warps_per_sm, 8.0f);   // 2 * 128 / 32
    EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, kKinetoOccupancyUnknown);
  }
}

TEST(OccupancyTest, IncompleteLimitsAreRejectedWithoutDividingByZero) {
  EXPECT_EQ(compute_occupancy(launch(128, 32), SmLimits{}).error, OccupancyError::InvalidLimits);

  SmLimits no_warp_size = a100();
  no_warp_size.warp_size = 0;
  EXPECT_EQ(compute_occupancy(launch(128, 32), no_warp_size).error, OccupancyError::InvalidLimits);

  SmLimits less_than_a_warp = a100();
  less_than_a_warp.max_threads_per_sm = 16;  // 0 warps
  const KernelOccupancy occupancy = compute_occupancy(launch(128, 32), less_than_a_warp);
  EXPECT_EQ(occupancy.error, OccupancyError::InvalidLimits);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 0);
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, kKinetoOccupancyUnknown);
}

TEST(OccupancyTest, WithoutAnSmCountKinetoArgsAreInfiniteButOccupancyIsComputed) {
  const SmLimits sm = *architecture_sm_limits(8, 0);
  ASSERT_EQ(sm.num_sms, 0);
  const KernelOccupancy occupancy = compute_occupancy(launch(256, 32), sm);
  EXPECT_EQ(occupancy.error, OccupancyError::None);
  EXPECT_EQ(occupancy.active_blocks_per_sm, 8);
  EXPECT_TRUE(std::isinf(occupancy.kineto.blocks_per_sm));
  EXPECT_TRUE(std::isinf(occupancy.kineto.warps_per_sm));
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, kKinetoOccupancyUnknown);
}

TEST(OccupancyTest, HugeGridsDoNotOverflow) {
  constexpr std::uint32_t kMax = std::numeric_limits<std::uint32_t>::max();
  EXPECT_EQ((Dim3{2, 3, 4}.volume()), 24);
  EXPECT_EQ((Dim3{kMax, 1, 0}.volume()), 0);
  // CUDA's largest grid, 2^31-1 x 65535 x 65535, just fits in 63 bits; more saturates.
  constexpr std::uint32_t kMaxGridX = 2'147'483'647;
  EXPECT_EQ((Dim3{kMaxGridX, 65'535, 65'535}.volume()),
            static_cast<std::int64_t>(std::uint64_t{kMaxGridX} * 65'535 * 65'535));
  EXPECT_EQ((Dim3{kMax, kMax, 1}.volume()), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ((Dim3{kMax, kMax, kMax}.volume()), std::numeric_limits<std::int64_t>::max());

  KernelLaunch huge = launch(256, 32);
  huge.grid = Dim3{kMax, kMax, kMax};
  const KernelOccupancy occupancy = compute_occupancy(huge, a100());
  EXPECT_EQ(occupancy.active_blocks_per_sm, 8);
  EXPECT_TRUE(std::isfinite(occupancy.kineto.blocks_per_sm));
  EXPECT_GT(occupancy.kineto.blocks_per_sm, 0.0f);
  EXPECT_EQ(occupancy.kineto.est_achieved_occupancy_percent, 100);
}

// --- Limits from DeviceProperties and the architecture table. ---

// An A100 as torch.profiler writes it in deviceProperties.
dlprof::DeviceProperties a100_properties() {
  dlprof::DeviceProperties device;
  device.name = "NVIDIA A100-SXM4-40GB";
  device.compute_major = 8;
  device.compute_minor = 0;
  device.max_threads_per_block = 1024;
  device.max_threads_per_multiprocessor = 2048;
  device.regs_per_block = 65'536;
  device.regs_per_multiprocessor = 65'536;
  device.warp_size = 32;
  device.shared_mem_per_block = 49'152;
  device.shared_mem_per_block_optin = 166'912;
  device.shared_mem_per_multiprocessor = 167'936;
  device.num_sms = 108;
  return device;
}

TEST(OccupancyTest, LimitsOfADeviceTakeItsPropertiesAndTheTableForTheRest) {
  const std::optional<SmLimits> limits = dlprof::detail::sm_limits(a100_properties());
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(limits->num_sms, 108);
  EXPECT_EQ(limits->max_threads_per_sm, 2048);
  EXPECT_EQ(limits->max_warps_per_sm(), 64);
  EXPECT_EQ(limits->shared_memory_per_sm, 167'936);
  EXPECT_EQ(limits->shared_memory_per_block_optin, 166'912);
  // Not in DeviceProperties: from the table.
  EXPECT_EQ(limits->max_blocks_per_sm, 32);
  EXPECT_EQ(limits->register_allocation_unit, 256);
  EXPECT_EQ(limits->register_file_partitions, 4);
  EXPECT_EQ(limits->max_registers_per_thread, 255);
  EXPECT_EQ(limits->shared_memory_allocation_unit, 128);
  EXPECT_EQ(limits->reserved_shared_memory_per_block, 1'024);

  const KernelLaunch kernel = launch(512, 40, 400, 0, 512);
  const KernelOccupancy from_device = compute_occupancy(kernel, a100_properties());
  const KernelOccupancy from_table = compute_occupancy(kernel, a100());
  EXPECT_EQ(from_device.active_blocks_per_sm, from_table.active_blocks_per_sm);
  EXPECT_EQ(from_device.kineto.blocks_per_sm, from_table.kineto.blocks_per_sm);
  EXPECT_EQ(from_device.kineto.est_achieved_occupancy_percent, 75);
}

TEST(OccupancyTest, DevicePropertiesLeftZeroFallBackToTheTable) {
  dlprof::DeviceProperties sparse;  // a trace written without the per-SM fields
  sparse.compute_major = 9;
  sparse.compute_minor = 0;
  sparse.num_sms = 132;
  const std::optional<SmLimits> limits = dlprof::detail::sm_limits(sparse);
  ASSERT_TRUE(limits.has_value());
  EXPECT_EQ(limits->num_sms, 132);
  EXPECT_EQ(limits->registers_per_sm, 65'536);
  EXPECT_EQ(limits->shared_memory_per_sm, 233'472);
  EXPECT_EQ(limits->shared_memory_per_block, 49'152);

  dlprof::DeviceProperties smaller = a100_properties();  // a device reporting its own values wins
  smaller.num_sms = 14;                                   // e.g. an A100 MIG 1g slice
  smaller.shared_mem_per_multiprocessor = 100 * kKiB;
  const std::optional<SmLimits> overridden = dlprof::detail::sm_limits(smaller);
  ASSERT_TRUE(overridden.has_value());
  EXPECT_EQ(overridden->num_sms, 14);
  EXPECT_EQ(overridden->shared_memory_per_sm, 102'400);
}

TEST(OccupancyTest, TableMatchesTheDevicePropertiesOfKnownGpus) {
  // cudaGetDeviceProperties on each GPU: maxThreadsPerMultiProcessor, sharedMemPerMultiprocessor,
  // sharedMemPerBlockOptin, reservedSharedMemPerBlock.
  struct Known {
    const char* gpu;
    int major;
    int minor;
    int threads_per_sm;
    int blocks_per_sm;
    std::int64_t shared_per_sm;
    std::int64_t shared_per_block_optin;
    std::int64_t reserved;
  };
  constexpr Known kKnown[] = {
      {"V100", 7, 0, 2048, 32, 98'304, 98'304, 0},        {"T4", 7, 5, 1024, 16, 65'536, 65'536, 0},
      {"A100", 8, 0, 2048, 32, 167'936, 166'912, 1'024},  {"RTX 3090", 8, 6, 1536, 16, 102'400, 101'376, 1'024},
      {"L40S", 8, 9, 1536, 24, 102'400, 101'376, 1'024},  {"H100", 9, 0, 2048, 32, 233'472, 232'448, 1'024},
      {"B200", 10, 0, 2048, 32, 233'472, 232'448, 1'024}, {"RTX 5090", 12, 0, 1536, 24, 102'400, 101'376, 1'024},
  };
  for (const Known& known : kKnown) {
    const std::optional<SmLimits> limits = architecture_sm_limits(known.major, known.minor);
    ASSERT_TRUE(limits.has_value()) << known.gpu;
    EXPECT_EQ(limits->max_threads_per_sm, known.threads_per_sm) << known.gpu;
    EXPECT_EQ(limits->max_blocks_per_sm, known.blocks_per_sm) << known.gpu;
    EXPECT_EQ(limits->shared_memory_per_sm, known.shared_per_sm) << known.gpu;
    EXPECT_EQ(limits->shared_memory_per_block_optin, known.shared_per_block_optin) << known.gpu;
    EXPECT_EQ(limits->reserved_shared_memory_per_block, known.reserved) << known.gpu;
    // One block that opts in to everything takes all of the SM's shared memory.
    EXPECT_EQ(limits->shared_memory_per_block_optin + limits->reserved_shared_memory_per_block,
              limits->shared_memory_per_sm)
        << known.gpu;
  }
  EXPECT_EQ(std::size(dlprof::detail::kArchitectureLimits), std::size(kKnown));
}

// --- NVIDIA's own calculator. ---

TEST(OccupancyTest, MatchesNvidiasOccupancyCalculator) {
  // Answers of cudaOccMaxActiveBlocksPerMultiprocessor from cuda_occupancy.h (CUDA 13.0), called
  // as Kineto calls it (static shared memory 0, the rest dynamic, default per-block limit), with a
  // cudaOccDeviceProp holding the table's values: they check the rules, not the table.
  struct Row {
    int major;
    int minor;
    std::uint32_t threads;
    std::uint32_t registers;
    std::uint32_t dynamic_shared;
    int active_blocks;
    unsigned limiting_factors;  // cudaOccLimitingFactor bits
  };
  constexpr Row kRows[] = {
      {7, 0, 64, 48, 0, 20, 0x2},     {7, 0, 96, 37, 3000, 16, 0x2},   {7, 0, 192, 24, 20000, 4, 0x4},
      {7, 0, 640, 30, 6000, 3, 0x3},  {7, 0, 160, 90, 24000, 4, 0x6},  {7, 5, 64, 48, 0, 16, 0x9},
      {7, 5, 96, 37, 3000, 10, 0x1},  {7, 5, 192, 24, 20000, 3, 0x4},  {7, 5, 640, 30, 6000, 1, 0x1},
      {7, 5, 160, 90, 24000, 2, 0x4}, {8, 0, 64, 48, 0, 20, 0x2},      {8, 0, 96, 37, 3000, 16, 0x2},
      {8, 0, 192, 24, 20000, 7, 0x4}, {8, 0, 640, 30, 6000, 3, 0x3},   {8, 0, 160, 90, 24000, 4, 0x2},
      {8, 6, 64, 48, 0, 16, 0x8},     {8, 6, 96, 37, 3000, 16, 0xb},   {8, 6, 192, 24, 20000, 4, 0x4},
      {8, 6, 640, 30, 6000, 2, 0x1},  {8, 6, 160, 90, 24000, 4, 0x6},  {8, 9, 64, 48, 0, 20, 0x2},
      {8, 9, 96, 37, 3000, 16, 0x3},  {8, 9, 192, 24, 20000, 4, 0x4},  {8, 9, 640, 30, 6000, 2, 0x1},
      {8, 9, 160, 90, 24000, 4, 0x6}, {9, 0, 64, 48, 0, 20, 0x2},      {9, 0, 96, 37, 3000, 16, 0x2},
      {9, 0, 192, 24, 20000, 10, 0x1}, {9, 0, 640, 30, 6000, 3, 0x3},  {9, 0, 160, 90, 24000, 4, 0x2},
      {10, 0, 64, 48, 0, 20, 0x2},    {10, 0, 96, 37, 3000, 16, 0x2},  {10, 0, 192, 24, 20000, 10, 0x1},
      {10, 0, 640, 30, 6000, 3, 0x3}, {10, 0, 160, 90, 24000, 4, 0x2}, {12, 0, 64, 48, 0, 20, 0x2},
      {12, 0, 96, 37, 3000, 16, 0x3}, {12, 0, 192, 24, 20000, 4, 0x4}, {12, 0, 640, 30, 6000, 2, 0x1},
      {12, 0, 160, 90, 24000, 4, 0x6},
  };
  for (const Row& row : kRows) {
    const KernelOccupancy occupancy = compute_occupancy(launch(row.threads, row.registers, 0, row.dynamic_shared),
                                                        gpu(row.major, row.minor, 100), SharedMemoryLimit::Default);
    EXPECT_EQ(occupancy.active_blocks_per_sm, row.active_blocks)
        << "sm_" << row.major << row.minor << " " << row.threads << " threads, " << row.registers << " registers, "
        << row.dynamic_shared << " bytes";
    EXPECT_EQ(occupancy.limiting_factors, static_cast<LimitingFactor>(row.limiting_factors))
        << "sm_" << row.major << row.minor << " " << row.threads << " threads, " << row.registers << " registers, "
        << row.dynamic_shared << " bytes";
  }
}

TEST(OccupancyTest, ErrorsHaveNames) {
  EXPECT_EQ(dlprof::detail::to_string(OccupancyError::None), "None");
  EXPECT_EQ(dlprof::detail::to_string(OccupancyError::TooMuchSharedMemory), "TooMuchSharedMemory");
  EXPECT_EQ(dlprof::detail::to_string(OccupancyError::UnknownArchitecture), "UnknownArchitecture");
}

}  // namespace
