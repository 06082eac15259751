// dlprof/format/vocabulary.hpp: the words of the trace format, spelled once. torch.profiler and
// Kineto write them, TensorBoard's plugin, HTA and Perfetto look for them, and dlprof uses them in
// both directions: the writer (export/chrome_trace.hpp), the reader (import/), the CUPTI
// translator, the recording side (ProfilerStep#N, DataLoader and module ranges) and the analyses
// that tell a step or a DataLoader range by its name. A word spelled anywhere else is a word
// that can drift; docs/trace-format.md is the field-by-field contract.
//
// Standard headers and detail/text.hpp only, no fmt: the recording headers include this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"

DLPROF_BEGIN_NAMESPACE
namespace kineto {

/// Event categories ("cat"). The writer writes the first group; the reader also knows the
/// others: the spellings of PyTorch before 1.10, Kineto's other devices (ROCm writes its HIP
/// calls and kernels under the CUDA names; XPU; MTIA; PrivateUse1 backends) and its markers.
namespace cat {
inline constexpr std::string_view kCpuOp = "cpu_op";
inline constexpr std::string_view kUserAnnotation = "user_annotation";
inline constexpr std::string_view kPythonFunction = "python_function";
inline constexpr std::string_view kCpuInstantEvent = "cpu_instant_event";
inline constexpr std::string_view kCounter = "counter";
inline constexpr std::string_view kCudaRuntime = "cuda_runtime";
inline constexpr std::string_view kCudaDriver = "cuda_driver";
inline constexpr std::string_view kKernel = "kernel";
inline constexpr std::string_view kGpuMemcpy = "gpu_memcpy";
inline constexpr std::string_view kGpuMemset = "gpu_memset";
inline constexpr std::string_view kCudaSync = "cuda_sync";
inline constexpr std::string_view kGpuUserAnnotation = "gpu_user_annotation";
inline constexpr std::string_view kOverhead = "overhead";
inline constexpr std::string_view kAc2g = "ac2g";      ///< flows from a launch to its GPU work
inline constexpr std::string_view kFwdbwd = "fwdbwd";  ///< flows from a forward op to its backward op

inline constexpr std::string_view kOperatorLegacy = "Operator";
inline constexpr std::string_view kRuntimeLegacy = "Runtime";
inline constexpr std::string_view kRuntimeLowerLegacy = "runtime";
inline constexpr std::string_view kKernelLegacy = "Kernel";
inline constexpr std::string_view kMemcpyLegacy = "Memcpy";
inline constexpr std::string_view kMemsetLegacy = "Memset";
inline constexpr std::string_view kXpuRuntime = "xpu_runtime";
inline constexpr std::string_view kXpuDriver = "xpu_driver";
inline constexpr std::string_view kMtiaRuntime = "mtia_runtime";
/// MTIA's device work; its copies are "dma..." kernels.
inline constexpr std::string_view kMtiaCcpEvents = "mtia_ccp_events";
inline constexpr std::string_view kPrivateUse1Runtime = "privateuse1_runtime";
inline constexpr std::string_view kPrivateUse1Driver = "privateuse1_driver";
inline constexpr std::string_view kTrace = "Trace";  ///< Kineto's span of the whole window
inline constexpr std::string_view kTraceLower = "trace";
inline constexpr std::string_view kCudaEvent = "cuda_event";                   ///< a marker on a device row
inline constexpr std::string_view kCudaProfilerRange = "cuda_profiler_range";  ///< a marker on a device row
}  // namespace cat

/// Top-level keys of the trace object, in the order Kineto writes them, and dlprof's own, which
/// other tools pass over.
namespace key {
inline constexpr std::string_view kSchemaVersion = "schemaVersion";
inline constexpr std::string_view kDeviceProperties = "deviceProperties";
inline constexpr std::string_view kDistributedInfo = "distributedInfo";
inline constexpr std::string_view kDisplayTimeUnit = "displayTimeUnit";
inline constexpr std::string_view kBaseTimeNanoseconds = "baseTimeNanoseconds";
inline constexpr std::string_view kTraceEvents = "traceEvents";
inline constexpr std::string_view kTraceName = "traceName";
inline constexpr std::string_view kCuptiVersion = "cupti_version";
inline constexpr std::string_view kCudaDriverVersion = "cuda_driver_version";

inline constexpr std::string_view kDlprofVersion = "dlprof_version";
inline constexpr std::string_view kDroppedEvents = "dlprof_dropped_events";
inline constexpr std::string_view kClippedRanges = "dlprof_clipped_ranges";
inline constexpr std::string_view kOverflowedNames = "dlprof_overflowed_names";
inline constexpr std::string_view kClock = "dlprof_clock";
/// This rank's clock against the reference rank's (ClockOffset), and its fields.
inline constexpr std::string_view kClockOffset = "dlprof_clock_offset";
inline constexpr std::string_view kReferenceRank = "reference_rank";
inline constexpr std::string_view kOffsetNs = "offset_ns";
inline constexpr std::string_view kUncertaintyNs = "uncertainty_ns";
inline constexpr std::string_view kRoundTrips = "round_trips";
inline constexpr std::string_view kGpuRecords = "dlprof_gpu_records";
inline constexpr std::string_view kGpuDroppedRecords = "dlprof_gpu_dropped_records";
inline constexpr std::string_view kCuptiDroppedRecords = "dlprof_cupti_dropped_records";
inline constexpr std::string_view kGpuUnknownRecords = "dlprof_gpu_unknown_records";
inline constexpr std::string_view kGpuLateRecords = "dlprof_gpu_late_records";
inline constexpr std::string_view kGpuClippedAnnotations = "dlprof_gpu_clipped_annotations";
inline constexpr std::string_view kDroppedDeviceCounters = "dlprof_dropped_device_counters";
/// Trace::dropped_thread_cpu_readings, written when not 0.
inline constexpr std::string_view kDroppedThreadCpuReadings = "dlprof_dropped_thread_cpu_readings";
/// A flight recorder's dump: why it was written (Trace::flight_recorder_dump).
inline constexpr std::string_view kFlightRecorder = "dlprof_flight_recorder";
/// How the reason of a slow step's dump begins: "slow step 40: 312.000 ms, 12.7x the median ...".
inline constexpr std::string_view kSlowStepDumpPrefix = "slow step ";
/// How the reason of a hung step's dump begins: "hang: step 25 has run 40.215 s, ...; the thread
/// calling step() is inside nccl:all_reduce for 40.200 s, within train_step".
inline constexpr std::string_view kHangDumpPrefix = "hang: ";
/// with_stack: the recording process's modules (Trace::modules), an array of objects with the
/// fields below, and the events recorded without their stacks (Trace::stackless_events), written
/// when not 0.
inline constexpr std::string_view kModules = "dlprof_modules";
inline constexpr std::string_view kModulePath = "path";
inline constexpr std::string_view kModuleBuildId = "build_id";
inline constexpr std::string_view kModuleBase = "base";
inline constexpr std::string_view kModuleStart = "start";
inline constexpr std::string_view kModuleEnd = "end";
inline constexpr std::string_view kStacklessEvents = "dlprof_stackless_events";

/// distributedInfo's fields (DistributedInfo's).
inline constexpr std::string_view kBackend = "backend";
inline constexpr std::string_view kRank = "rank";
inline constexpr std::string_view kWorldSize = "world_size";
inline constexpr std::string_view kPgCount = "pg_count";
inline constexpr std::string_view kPgConfig = "pg_config";
inline constexpr std::string_view kNcclVersion = "nccl_version";
/// pg_config's fields (ProcessGroupInfo's).
inline constexpr std::string_view kPgName = "pg_name";
inline constexpr std::string_view kPgDesc = "pg_desc";
inline constexpr std::string_view kBackendConfig = "backend_config";
inline constexpr std::string_view kPgSize = "pg_size";
inline constexpr std::string_view kRanks = "ranks";
}  // namespace key

/// The fields of a deviceProperties entry, in the order Kineto writes them (DeviceProperties.cpp).
namespace device {
inline constexpr std::string_view kId = "id";
inline constexpr std::string_view kName = "name";
inline constexpr std::string_view kTotalGlobalMem = "totalGlobalMem";
inline constexpr std::string_view kComputeMajor = "computeMajor";
inline constexpr std::string_view kComputeMinor = "computeMinor";
inline constexpr std::string_view kMaxThreadsPerBlock = "maxThreadsPerBlock";
inline constexpr std::string_view kMaxThreadsPerMultiprocessor = "maxThreadsPerMultiprocessor";
inline constexpr std::string_view kRegsPerBlock = "regsPerBlock";
inline constexpr std::string_view kWarpSize = "warpSize";
inline constexpr std::string_view kSharedMemPerBlock = "sharedMemPerBlock";
inline constexpr std::string_view kNumSms = "numSms";
inline constexpr std::string_view kRegsPerMultiprocessor = "regsPerMultiprocessor";
inline constexpr std::string_view kSharedMemPerBlockOptin = "sharedMemPerBlockOptin";
inline constexpr std::string_view kSharedMemPerMultiprocessor = "sharedMemPerMultiprocessor";
}  // namespace device

/// Event args, under the exact keys Kineto, torch and dlprof write.
namespace arg {
// CPU slices.
inline constexpr std::string_view kExternalId = "External id";
inline constexpr std::string_view kExternalIdLower = "external id";  ///< TensorBoard accepts it too
inline constexpr std::string_view kRecordFunctionId = "Record function id";
inline constexpr std::string_view kEvIdx = "Ev Idx";
/// A range's dlprof::Category when it is not User: what the phases of a step are told by.
inline constexpr std::string_view kDlprofCategory = "dlprof category";
inline constexpr std::string_view kFwdThreadId = "Fwd thread id";
inline constexpr std::string_view kSequenceNumber = "Sequence number";
inline constexpr std::string_view kInputDims = "Input Dims";
inline constexpr std::string_view kInputDimsLegacy = "Input dims";
inline constexpr std::string_view kInputType = "Input type";
inline constexpr std::string_view kConcreteInputs = "Concrete Inputs";
inline constexpr std::string_view kInputStrides = "Input Strides";
inline constexpr std::string_view kFlops = "flops";
/// An op's or range's call stack: its frames, the innermost first, each followed by
/// kCallStackSeparator but the last (torch.profiler's stacksToStr). A frame dlprof has not
/// symbolised is its module's file name, '+', and its ELF address in hex ("libtorch_cpu.so+0x1a2b3c"),
/// or its address alone where no module holds it ("0x7f0012345678").
inline constexpr std::string_view kCallStack = "Call stack";
inline constexpr char kCallStackSeparator = ';';
// API calls and device work.
inline constexpr std::string_view kCbid = "cbid";
inline constexpr std::string_view kCorrelation = "correlation";
inline constexpr std::string_view kDevice = "device";
inline constexpr std::string_view kContext = "context";
inline constexpr std::string_view kStream = "stream";
/// XPU's stream: Kineto's XPU plugin writes the SYCL queue of device work, and no "stream".
inline constexpr std::string_view kSyclQueue = "sycl queue";
inline constexpr std::string_view kQueued = "queued";
inline constexpr std::string_view kRegistersPerThread = "registers per thread";
inline constexpr std::string_view kSharedMemory = "shared memory";
inline constexpr std::string_view kBlocksPerSm = "blocks per SM";
inline constexpr std::string_view kWarpsPerSm = "warps per SM";
inline constexpr std::string_view kGrid = "grid";
inline constexpr std::string_view kBlock = "block";
inline constexpr std::string_view kAchievedOccupancy = "est. achieved occupancy %";
/// kAchievedOccupancy's value when Kineto's calculator fails: it then returns an occupancy of -1,
/// written as (int)(0.5 + -1 * 100.0). TensorBoard's plugin skips negative values.
inline constexpr int kOccupancyUnknown = -99;
inline constexpr std::string_view kBytes = "bytes";
/// Of kernels, copies and fills a CUDA graph replayed (CUDA 12+): the graph and its node.
inline constexpr std::string_view kGraphId = "graph id";
inline constexpr std::string_view kGraphNodeId = "graph node id";
/// dlprof's, of replayed work whose graph node it saw captured: the op or range open on the
/// capturing thread, and that scope's call stack (written as kCallStack).
inline constexpr std::string_view kCapturedBy = "captured by";
inline constexpr std::string_view kCaptureCallStack = "capture call stack";
inline constexpr std::string_view kMemoryBandwidth = "memory bandwidth (GB/s)";
inline constexpr std::string_view kFromDevice = "fromDevice";
inline constexpr std::string_view kInDevice = "inDevice";
inline constexpr std::string_view kToDevice = "toDevice";
inline constexpr std::string_view kFromContext = "fromContext";
inline constexpr std::string_view kInContext = "inContext";
inline constexpr std::string_view kToContext = "toContext";
inline constexpr std::string_view kCudaSyncKind = "cuda_sync_kind";
inline constexpr std::string_view kWaitOnCudaEventId = "wait_on_cuda_event_id";
// The `[memory]` instant.
inline constexpr std::string_view kDeviceType = "Device Type";
inline constexpr std::string_view kDeviceId = "Device Id";
inline constexpr std::string_view kAddr = "Addr";
inline constexpr std::string_view kMemoryBytes = "Bytes";
inline constexpr std::string_view kTotalAllocated = "Total Allocated";
inline constexpr std::string_view kTotalReserved = "Total Reserved";
// dlprof's `[memory category]` instant: what the memory at its "Addr" holds (a MemoryCategory's
// name), with the `[memory]` instant's "Device Type", "Device Id" and "Bytes".
inline constexpr std::string_view kMemoryCategory = "memory category";
// A collective's record_param_comms op (CollectiveCall's fields), in c10d's order.
inline constexpr std::string_view kCollectiveName = "Collective name";
inline constexpr std::string_view kDtype = "dtype";
inline constexpr std::string_view kInMsgNelems = "In msg nelems";
inline constexpr std::string_view kOutMsgNelems = "Out msg nelems";
inline constexpr std::string_view kInSplitSize = "In split size";
inline constexpr std::string_view kOutSplitSize = "Out split size";
inline constexpr std::string_view kGroupSize = "Group size";
inline constexpr std::string_view kProcessGroupName = "Process Group Name";
inline constexpr std::string_view kProcessGroupDesc = "Process Group Description";
inline constexpr std::string_view kProcessGroupRanks = "Process Group Ranks";
inline constexpr std::string_view kCommRank = "Rank";
inline constexpr std::string_view kDstRank = "Dst Rank";
inline constexpr std::string_view kSrcRank = "Src Rank";
inline constexpr std::string_view kSeq = "Seq";
// Counters and metadata events.
inline constexpr std::string_view kValue = "value";
/// A thread's CPU-time track (name::kThreadCpuPrefix): the share of the time until its next
/// reading that the thread ran, and that it waited for a CPU (left out where not known).
inline constexpr std::string_view kRunningPercent = "running (%)";
inline constexpr std::string_view kWaitingForCpuPercent = "waiting for a CPU (%)";
inline constexpr std::string_view kName = "name";
inline constexpr std::string_view kLabels = "labels";
inline constexpr std::string_view kSortIndex = "sort_index";
}  // namespace arg

/// Event names with a meaning: torch.profiler's (what TensorBoard's plugin and HTA look for),
/// Kineto's own events, and the metadata events ("ph": "M") that name processes and threads.
namespace name {
/// `ProfilerStep#N`, one per step: is_profiler_step() says which names are steps. HTA takes any
/// name that holds kProfilerStep for one.
inline constexpr std::string_view kProfilerStep = "ProfilerStep";
inline constexpr std::string_view kProfilerStepPrefix = "ProfilerStep#";
/// `enumerate(DataLoader)#<Iterator>.__next__`: a DataLoader fetch.
inline constexpr std::string_view kDataLoaderPrefix = "enumerate(DataLoader)#";
inline constexpr std::string_view kDataLoaderNextSuffix = ".__next__";
inline constexpr std::string_view kDataPipePrefix = "enumerate(DataPipe)#";
/// `Optimizer.step#<Class>.step` and `Optimizer.zero_grad#<Class>.zero_grad`.
inline constexpr std::string_view kOptimizerPrefix = "Optimizer.";
inline constexpr std::string_view kOptimizerStepPrefix = "Optimizer.step#";
inline constexpr std::string_view kOptimizerStepSuffix = ".step";
inline constexpr std::string_view kOptimizerZeroGradPrefix = "Optimizer.zero_grad#";
inline constexpr std::string_view kOptimizerZeroGradSuffix = ".zero_grad";
/// `nn.Module: <Type>`: a module's forward. Read back, any name from "nn.Module:" on is one
/// (is_module_name()).
inline constexpr std::string_view kModulePrefix = "nn.Module: ";
/// The autograd engine's frame around a backward node: `autograd::engine::evaluate_function: MmBackward0`.
inline constexpr std::string_view kEvaluateFunction = "autograd::engine::evaluate_function";
/// The backward node that adds a parameter's gradient into its `.grad`.
inline constexpr std::string_view kAccumulateGrad = "torch::autograd::AccumulateGrad";
/// torch.distributed's collectives: `nccl:all_reduce`, `gloo:broadcast`.
inline constexpr std::string_view kNcclPrefix = "nccl:";
inline constexpr std::string_view kGlooPrefix = "gloo:";

/// The instant of an allocation or a release.
inline constexpr std::string_view kMemory = "[memory]";
/// The instant of an allocation the allocator could not make, with `[memory]`'s args ("Bytes": the
/// bytes asked for; the totals then).
inline constexpr std::string_view kOutOfMemory = "[OutOfMemory]";
/// dlprof's counter of each device's allocated memory by category: "Memory by category (CUDA:0)",
/// one series per category (MemoryCategory's names), in bytes. Derived from the `[memory]` and
/// `[memory category]` instants, and not read back.
inline constexpr std::string_view kMemoryByCategoryPrefix = "Memory by category (";
/// dlprof's instant that says what a piece of memory holds (tag_memory()); Perfetto shows it,
/// TensorBoard's plugin and HTA read only `[memory]`.
inline constexpr std::string_view kMemoryCategoryTag = "[memory category]";
/// Kineto's global instant at the window's end.
inline constexpr std::string_view kRecordWindowEnd = "Record Window End";
/// A copy's name: `Memcpy HtoD (Pageable -> Device)` (copy_name()); a fill's: `Memset (Device)`.
inline constexpr std::string_view kMemcpyPrefix = "Memcpy ";
inline constexpr std::string_view kMemsetPrefix = "Memset (";

inline constexpr std::string_view kProcessName = "process_name";
inline constexpr std::string_view kProcessLabels = "process_labels";
inline constexpr std::string_view kProcessSortIndex = "process_sort_index";
inline constexpr std::string_view kThreadName = "thread_name";
inline constexpr std::string_view kThreadSortIndex = "thread_sort_index";
/// The op c10d records each collective call's arguments on.
inline constexpr std::string_view kRecordParamComms = "record_param_comms";
/// process_labels' label of the process whose threads ran the CPU side.
inline constexpr std::string_view kCpuLabel = "CPU";
/// dlprof's CPU-time tracks, one per recording thread ("ph": "C" on the process, "tid": the
/// thread's): "Thread CPU: " and the thread's label (thread_label()), a reading at each recorded
/// step's end and at the window's ends, its args the shares arg::kRunningPercent and
/// arg::kWaitingForCpuPercent of the time until the thread's next reading. A thread's last reading
/// closes its track with zeros. Perfetto draws each as a graph under the process.
inline constexpr std::string_view kThreadCpuPrefix = "Thread CPU: ";
/// dlprof's GPU counter tracks ("ph": "C", one `{"value": v}` each, on the device's pid), indexed
/// by DeviceCounterKind: Perfetto draws each as a graph under the GPU's process.
inline constexpr std::string_view kDeviceCounters[] = {"SM clock (MHz)",
                                                       "Memory clock (MHz)",
                                                       "Power (W)",
                                                       "Clock limited by power",
                                                       "Clock limited by temperature",
                                                       "Clock limited otherwise"};
}  // namespace name

/// Kineto's spelling of CUPTI's enums, indexed by their values: CUpti_ActivityMemcpyKind
/// (HtoD = 1, ...), CUpti_ActivityMemoryKind (Pageable = 1, ...) and
/// CUpti_ActivitySynchronizationType (Event Sync = 1, ...).
inline constexpr std::string_view kMemcpyKinds[] = {"<unknown>", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                                    "AtoD",      "DtoA", "DtoD", "HtoH", "PtoP"};
inline constexpr std::uint8_t kMemcpyKindPeer = 10;  ///< PtoP: a copy between two devices
inline constexpr std::string_view kMemoryKinds[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                                    "Array",   "Managed",  "Device Static", "Managed Static"};
inline constexpr std::string_view kUnrecognizedMemoryKind = "Unrecognized";
inline constexpr std::string_view kSyncKinds[] = {"Unknown Sync", "Event Sync", "Stream Wait Event", "Stream Sync",
                                                  "Context Sync"};
/// The `[memory]` instant's "Device Type": c10::DeviceType's values (c10/core/DeviceType.h),
/// named as c10::DeviceTypeName names them.
inline constexpr std::string_view kDeviceTypeNames[] = {
    "CPU", "CUDA", "MKLDNN", "OPENGL", "OPENCL", "IDEEP", "HIP", "FPGA", "MAIA", "XLA", "VULKAN",
    "METAL", "XPU", "MPS", "META", "HPU", "VE", "LAZY", "IPU", "MTIA", "PRIVATEUSEONE"};

}  // namespace kineto

namespace detail {

constexpr std::string_view memcpy_kind_name(std::uint8_t kind) noexcept {
  return kind < std::size(kineto::kMemcpyKinds) ? kineto::kMemcpyKinds[kind] : kineto::kMemcpyKinds[0];
}
constexpr std::string_view memory_kind_name(std::uint8_t kind) noexcept {
  return kind < std::size(kineto::kMemoryKinds) ? kineto::kMemoryKinds[kind] : kineto::kUnrecognizedMemoryKind;
}
constexpr std::string_view sync_kind_name(std::uint8_t type) noexcept {
  return type < std::size(kineto::kSyncKinds) ? kineto::kSyncKinds[type] : kineto::kSyncKinds[0];
}

/// The enum value of a spelling of kineto::kMemcpyKinds, ...; 0 (unknown) for any other text.
template <std::size_t N>
constexpr std::uint8_t kind_of(const std::string_view (&names)[N], std::string_view text) noexcept {
  for (std::size_t i = 1; i < N; ++i)
    if (names[i] == text) return static_cast<std::uint8_t>(i);
  return 0;
}
constexpr std::uint8_t memcpy_kind_of(std::string_view text) noexcept { return kind_of(kineto::kMemcpyKinds, text); }
constexpr std::uint8_t memory_kind_of(std::string_view text) noexcept { return kind_of(kineto::kMemoryKinds, text); }
constexpr std::uint8_t sync_type_of(std::string_view text) noexcept { return kind_of(kineto::kSyncKinds, text); }

/// "Memcpy HtoD (Pageable -> Device)", as Kineto names a copy.
inline std::string copy_name(std::uint8_t copy_kind, std::uint8_t source_kind, std::uint8_t destination_kind) {
  std::string name(kineto::name::kMemcpyPrefix);
  name.append(memcpy_kind_name(copy_kind)).append(" (").append(memory_kind_name(source_kind));
  name.append(" -> ").append(memory_kind_name(destination_kind)).push_back(')');
  return name;
}
/// "Memset (Device)", as Kineto names a fill.
inline std::string fill_name(std::uint8_t memory_kind) {
  std::string name(kineto::name::kMemsetPrefix);
  name.append(memory_kind_name(memory_kind)).push_back(')');
  return name;
}

/// The kinds a copy's or a fill's name spells (copy_name(), fill_name()); 0 where it does not.
struct CopyKinds {
  std::uint8_t copy_kind = 0;
  std::uint8_t source_kind = 0;
  std::uint8_t destination_kind = 0;
};
constexpr CopyKinds copy_kinds_of(std::string_view name) noexcept {
  CopyKinds kinds;
  if (!starts_with(name, kineto::name::kMemcpyPrefix)) return kinds;
  const std::string_view rest = name.substr(kineto::name::kMemcpyPrefix.size());
  kinds.copy_kind = memcpy_kind_of(rest.substr(0, rest.find(' ')));
  const std::size_t open = rest.find(" (");
  const std::size_t arrow = rest.find(" -> ");
  if (open != std::string_view::npos && arrow != std::string_view::npos && arrow > open && rest.back() == ')') {
    kinds.source_kind = memory_kind_of(rest.substr(open + 2, arrow - open - 2));
    kinds.destination_kind = memory_kind_of(rest.substr(arrow + 4, rest.size() - arrow - 5));
  }
  return kinds;
}
constexpr std::uint8_t fill_kind_of(std::string_view name) noexcept {
  const std::string_view prefix = kineto::name::kMemsetPrefix;
  if (name.size() <= prefix.size() || !starts_with(name, prefix) || name.back() != ')') return 0;
  return memory_kind_of(name.substr(prefix.size(), name.size() - prefix.size() - 1));
}

/// `^ProfilerStep#\d+`, which HTA and TensorBoard's plugin match: a digit right after the '#'
/// (what follows the digits is not looked at). The reader (which slices become steps), the step
/// breakdown and the kernel attribution all decide here, so that a name such as
/// "ProfilerStep#-1" is a range everywhere, never a step in one table and a range in another.
constexpr bool is_profiler_step(std::string_view name) noexcept {
  constexpr std::string_view kPrefix = kineto::name::kProfilerStepPrefix;
  return name.size() > kPrefix.size() && starts_with(name, kPrefix) && name[kPrefix.size()] >= '0' &&
         name[kPrefix.size()] <= '9';
}

/// N of a step's name: the digits after "ProfilerStep#". -1 for a name that is not a step
/// (is_profiler_step) and for a number beyond int64.
constexpr std::int64_t profiler_step_number(std::string_view name) noexcept {
  if (!is_profiler_step(name)) return -1;
  std::int64_t number = 0;
  for (std::size_t i = kineto::name::kProfilerStepPrefix.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    const int digit = name[i] - '0';
    if (number > (INT64_MAX - digit) / 10) return -1;
    number = number * 10 + digit;
  }
  return number;
}

/// A module's range: "nn.Module:" and anything after it, the space included or not.
constexpr bool is_module_name(std::string_view name) noexcept {
  constexpr std::string_view kColon = kineto::name::kModulePrefix.substr(0, kineto::name::kModulePrefix.size() - 1);
  return starts_with(name, kColon);
}

/// A collective of torch.distributed: "nccl:all_reduce", "gloo:broadcast".
constexpr bool is_communication_name(std::string_view name) noexcept {
  return starts_with(name, kineto::name::kNcclPrefix) || starts_with(name, kineto::name::kGlooPrefix);
}

/// "ProfilerStep#<step>".
inline std::string profiler_step_name(std::int64_t step) {
  return std::string(kineto::name::kProfilerStepPrefix).append(std::to_string(step));
}

/// "CPU", "CUDA:0", "HIP:2": a memory device as c10 names its type ("device type 42:0" for a type
/// c10 does not have).
inline std::string device_label(MemoryDeviceType type, std::int32_t device) {
  if (type == MemoryDeviceType::CPU) return "CPU";
  const auto index = static_cast<std::size_t>(type);
  if (static_cast<int>(type) >= 0 && index < std::size(kineto::kDeviceTypeNames))
    return std::string(kineto::kDeviceTypeNames[index]).append(":").append(std::to_string(device));
  return "device type " + std::to_string(static_cast<int>(type)) + ":" + std::to_string(device);
}

/// "thread <tid> (<name>)": how Kineto and dlprof label a CPU thread.
inline std::string thread_label(std::int64_t os_tid, std::string_view name) {
  std::string label = "thread ";
  label.append(std::to_string(os_tid)).append(" (").append(name).push_back(')');
  return label;
}
/// The thread's own name in a label of thread_label()'s form for `os_tid`; the label itself
/// when it has another form.
inline std::string native_thread_name(std::string_view label, std::int64_t os_tid) {
  const std::string prefix = "thread " + std::to_string(os_tid) + " (";
  if (label.size() > prefix.size() && starts_with(label, prefix) && label.back() == ')')
    return std::string(label.substr(prefix.size(), label.size() - prefix.size() - 1));
  return std::string(label);
}

/// Kineto's ChromeTraceBaseTime: Unix time floored to a 3-month interval, in ns. The writer's
/// times count from it (baseTimeNanoseconds), and so every rank of a job shares one base.
inline std::int64_t chrome_trace_base_time_ns(std::int64_t unix_ns) noexcept {
  constexpr std::int64_t kInterval_s = 7'889'238;
  const std::int64_t seconds = unix_ns / 1'000'000'000;
  return (seconds / kInterval_s) * kInterval_s * 1'000'000'000;
}

}  // namespace detail
DLPROF_END_NAMESPACE
