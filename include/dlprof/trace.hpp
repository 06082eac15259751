// dlprof/trace.hpp: one recording window, drained from the rings and put on the CLOCK_REALTIME
// axis. Immutable once built: handlers, the writer and the summaries only read it. The model
// only: writing one is export/chrome_trace.hpp's (save_chrome_trace), reading one
// import/chrome_trace.hpp's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/category.hpp"
#include "dlprof/memory_category.hpp"

DLPROF_BEGIN_NAMESPACE

/// A c10d process group, as torch.profiler lists it in `distributedInfo.pg_config`.
struct ProcessGroupInfo {
  std::string name = "0";                 ///< pg_name
  std::string desc = "default_pg";        ///< pg_desc
  std::string backend_config = "cpu:gloo";  ///< "cpu:gloo", "cuda:nccl", ...
  std::int64_t size = 1;                  ///< pg_size
  std::vector<std::int64_t> ranks;        ///< its members' global ranks
};

/// This process's clock against a reference rank's, estimated from round trips between them: a
/// time t of this process is t + offset_ns on the reference's clock, to within uncertainty_ns.
struct ClockOffset {
  std::int64_t reference_rank = 0;
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;  ///< half the shortest round trip
  std::int64_t round_trips = 0;
};

/// This process's place in a distributed job, as written to `distributedInfo`.
struct DistributedInfo {
  std::string backend;
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  std::vector<ProcessGroupInfo> groups;  ///< pg_config, pg_count: the groups the process registered
  std::string nccl_version;              ///< "2.21.5"; empty when unknown
  /// Written as dlprof_clock_offset: what dlprof-report puts the ranks on one clock with.
  std::optional<ClockOffset> clock_offset;
};

/// What a collective moved: the args of its `record_param_comms` op, which is the op of category
/// Communication that starts at `start_ns` on `thread` (c10d's record, docs/trace-format.md §2.4).
struct CollectiveCall {
  std::uint32_t thread = 0;  ///< index into Trace::threads
  std::int64_t start_ns = 0;
  std::string name;     ///< "Collective name": "allreduce", "broadcast", "send", ...
  std::string backend;  ///< "gloo", "nccl"; empty when unknown
  std::string dtype;    ///< "Float"
  std::int64_t in_nelems = 0;
  std::int64_t out_nelems = 0;
  std::int64_t group_size = 0;
  std::int64_t rank = -1;  ///< in the group
  std::string group_name;
  std::string group_desc;
  std::string group_ranks;  ///< "[0, 1, 2, 3]"
  std::string in_split;     ///< "[]"
  std::string out_split;
  std::int64_t peer = -1;  ///< send: "Dst Rank"; recv: "Src Rank"
  std::int64_t seq = -1;   ///< "Seq"
};

/// A thread that recorded events in the window.
struct ThreadInfo {
  std::int64_t os_tid = 0;
  std::string name;
};

/// One event of a trace. Times are CLOCK_REALTIME nanoseconds.
struct TraceEvent {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;    ///< == start_ns for instants and counters
  double value = 0;           ///< counter sample
  std::uint64_t external_id = 0;  ///< slices: the `External id` GPU work links to; 0 otherwise
  std::int64_t sequence_number = -1;  ///< ops: autograd's sequence number linking forward and backward; -1 if none
  std::uint64_t forward_thread_id = 0;  ///< ops with a sequence number: the thread that ran the forward op
  std::uint32_t inputs = kNoInputs;  ///< ops with record_shapes or with_flops: index into Trace::op_inputs
  std::uint32_t stack = kNoStack;    ///< ranges and ops with a call stack: index into Trace::stacks

  static constexpr std::uint32_t kNoInputs = UINT32_MAX;
  static constexpr std::uint32_t kNoStack = UINT32_MAX;
  std::uint32_t name = 0;     ///< index into Trace::names
  std::uint32_t thread = 0;   ///< index into Trace::threads
  EventKind kind = EventKind::Range;
  Category category = Category::User;

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// What an op was called with, as torch.profiler writes it (record_shapes), and what that costs
/// (with_flops). Ops of one name called with the same inputs share one.
struct OpInputs {
  std::uint32_t dims = 0;      ///< index into Trace::names: JSON text, e.g. "[[4, 8], [8, 8]]"
  std::uint32_t types = 0;     ///< e.g. "[\"float\", \"float\"]"
  std::uint32_t concrete = 0;  ///< scalar and list values, e.g. "[\"\", \"\", \"[2, 2]\", \"1\"]"
  std::uint32_t op = 0;        ///< the op's name, index into Trace::names
  std::uint64_t flops = 0;     ///< with_flops and a formula for the op (flops.hpp); 0 otherwise
  std::uint64_t bytes = 0;     ///< bytes its tensors read and write, where flops are estimated; 0 if not known
  /// Each tensor's strides, e.g. "[[8, 1], [0, 1]]" (torch.profiler since PyTorch 2.1); kNoText
  /// where the trace has none.
  std::uint32_t strides = kNoText;

  static constexpr std::uint32_t kNoText = UINT32_MAX;
};

/// A module (the executable or a shared library) of the recording process, for symbolising the
/// return addresses of its stacks offline.
struct LoadedModule {
  std::string path;
  std::string build_id;       ///< the GNU build id in hex; empty when the module has none
  std::uint64_t base = 0;     ///< the load bias: an address in the module less this is its ELF address
  std::uint64_t start = 0;    ///< the addresses its executable segments span, [start, end)
  std::uint64_t end = 0;
};

/// One frame of a call stack: a return address in the recording process (Trace::modules tells
/// whose), or the text a trace gave it ("train.cpp(142): forward", torch.profiler's
/// "model.py(12): forward"), or both once symbolised.
struct StackFrame {
  std::uint64_t address = 0;    ///< 0 where the trace gave only text
  std::uint32_t text = kNoText;  ///< index into Trace::names; kNoText where not symbolised

  static constexpr std::uint32_t kNoText = UINT32_MAX;
};

/// A call stack: Trace::stack_frames[first, first + depth), the innermost frame first.
struct CallStack {
  std::uint32_t first = 0;
  std::uint32_t depth = 0;
};

/// What a GPU event is; each is written with its Kineto category (kernel, gpu_memcpy, ...).
enum class GpuEventKind : std::uint8_t {
  Kernel,
  Memcpy,      ///< one device (HtoD, DtoH, DtoD on one GPU, ...)
  MemcpyPeer,  ///< between two devices
  Memset,
  Sync,        ///< cuda_sync: stream, event or context synchronisation, stream wait
  Annotation   ///< gpu_user_annotation: the GPU span of the work one range launched on a stream
};

/// Launch configuration and resources of a kernel, with Kineto's occupancy figures.
struct KernelDetails {
  std::uint32_t grid[3] = {1, 1, 1};
  std::uint32_t block[3] = {1, 1, 1};
  std::uint32_t registers_per_thread = 0;
  std::uint32_t static_shared_memory = 0;   ///< bytes
  std::uint32_t dynamic_shared_memory = 0;  ///< bytes
  std::int64_t queued_ns = 0;               ///< CUPTI's queued timestamp; 0 when not collected
  float blocks_per_sm = 0;
  float warps_per_sm = 0;
  int est_achieved_occupancy_percent = 0;  ///< negative: unknown (Kineto's -99, also for a kernel read without it)
};

/// A copy or a fill: size and the kinds of memory at both ends (CUPTI's enum values).
struct CopyDetails {
  std::uint64_t bytes = 0;
  std::uint8_t copy_kind = 0;    ///< CUpti_ActivityMemcpyKind (HtoD = 1, ...)
  std::uint8_t source_kind = 0;  ///< CUpti_ActivityMemoryKind (Pageable = 1, Pinned = 2, Device = 3, ...)
  std::uint8_t destination_kind = 0;
  std::uint32_t source_device = 0;  ///< peer copies
  std::uint32_t destination_device = 0;
  std::uint32_t source_context = 0;
  std::uint32_t destination_context = 0;
};

/// A synchronisation: CUpti_ActivitySynchronizationType and the CUDA event waited on.
struct SyncDetails {
  std::uint8_t type = 0;
  std::uint32_t cuda_event_id = 0;
};

/// Work a GPU did, on the device's timeline (pid = device, tid = stream in the trace).
struct GpuEvent {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t external_id = 0;  ///< External id of the range that launched it; 0 if none
  std::uint32_t name = 0;         ///< index into Trace::names
  std::uint32_t device = 0;
  std::uint32_t context = 0;
  std::int64_t stream = 0;        ///< CUDA stream id; -1 for a context synchronisation
  std::uint32_t correlation = 0;  ///< CUPTI correlation id shared with the API call; 0 if none
  GpuEventKind kind = GpuEventKind::Kernel;
  /// Kernels, copies and fills a CUDA graph replayed: CUPTI's id of the graph and of its node
  /// (0: launched on their own, or not said).
  std::uint32_t graph_id = 0;
  std::uint64_t graph_node_id = 0;
  /// Replayed work whose graph node was seen captured: the op or range open on the capturing
  /// thread (index into Trace::names; kNotCaptured where not known) and its call stack (index
  /// into Trace::stacks; TraceEvent::kNoStack where none).
  std::uint32_t captured_by = kNotCaptured;
  std::uint32_t capture_stack = TraceEvent::kNoStack;
  KernelDetails kernel;  ///< Kernel only
  CopyDetails copy;      ///< Memcpy, MemcpyPeer, Memset (bytes and memory kind)
  SyncDetails sync;      ///< Sync only

  static constexpr std::uint32_t kNotCaptured = UINT32_MAX;

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// A call into the CUDA runtime or driver API, on the calling thread's timeline.
struct ApiEvent {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t external_id = 0;  ///< External id of the innermost range around the call; 0 if none
  std::uint32_t name = 0;         ///< index into Trace::names, e.g. "cudaLaunchKernel"
  std::uint32_t thread = 0;       ///< index into Trace::threads
  std::uint32_t cbid = 0;         ///< CUPTI callback id
  std::uint32_t correlation = 0;
  bool driver = false;            ///< cuda_driver rather than cuda_runtime

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// An allocation (bytes > 0) or release (bytes < 0), as a `[memory]` instant event: from a
/// framework's allocator (LibTorch's, with profile_memory) or from CUPTI (cudaMalloc, cudaFree).
struct MemoryEvent {
  std::int64_t time_ns = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  /// On the device after this event: the allocator's own count, or, from CUPTI, counted from the
  /// window's start.
  std::int64_t total_allocated = 0;
  std::int64_t total_reserved = 0;  ///< held by a caching allocator, used or not (== allocated without one)
  MemoryDeviceType device_type = MemoryDeviceType::CUDA;
  std::int32_t device = 0;   ///< device index; -1 for the CPU
  std::uint32_t thread = 0;  ///< index into Trace::threads
};

/// What a program said a piece of memory holds (tag_memory(); an annotated LibTorch optimizer
/// tags its parameters, their gradients and its state after each step): a `[memory category]`
/// instant event.
struct MemoryTag {
  std::int64_t time_ns = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;  ///< -1 for the CPU
  MemoryCategory category = MemoryCategory::Unknown;
  std::uint32_t thread = 0;  ///< index into Trace::threads
};

/// An allocation the allocator could not make: LibTorch's out-of-memory report (torch.profiler's
/// `[OutOfMemory]` instant), made just before it throws.
struct OutOfMemoryEvent {
  std::int64_t time_ns = 0;
  std::int64_t bytes = 0;            ///< asked for
  std::int64_t total_allocated = 0;  ///< on the device then, by the allocator's count
  std::int64_t total_reserved = 0;
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;  ///< -1 for the CPU
  std::uint32_t thread = 0;  ///< index into Trace::threads
};

/// What a device counter measures: a GPU's clocks, power and the reasons its clocks are held
/// below their maximum, read from NVML while a window records.
enum class DeviceCounterKind : std::uint8_t {
  SmClockMhz,
  MemoryClockMhz,
  PowerWatts,
  LimitedByPower,        ///< 1 while the power cap or the power brake holds the clocks down, else 0
  LimitedByTemperature,  ///< 1 while a thermal slowdown does
  LimitedOtherwise,      ///< 1 while anything else does (a hardware slowdown, an applications-clock setting, sync boost)
};

/// One reading of a device counter, on the device's row of the trace.
struct DeviceCounterSample {
  std::int64_t time_ns = 0;
  double value = 0;
  std::uint32_t device = 0;
  DeviceCounterKind kind = DeviceCounterKind::SmClockMhz;
};

/// A reading of a thread's scheduler accounting (Linux's schedstat), taken at each recorded
/// step's end and at the window's ends: the time the thread ran on a CPU, and the time it was
/// runnable but waited for one, both counted from any fixed origin (the thread's start, or the
/// trace's first reading when read from a file). Differences between readings are what count.
struct ThreadCpuSample {
  std::int64_t time_ns = 0;
  std::int64_t cpu_ns = 0;
  std::int64_t run_delay_ns = -1;  ///< -1: not known (a kernel without schedstat)
  std::uint32_t thread = 0;        ///< index into Trace::threads
};

/// A CPU slice whose args name a GPU stream, as torch.compile's Inductor writes its Triton
/// launches (cpu_op "triton_poi_fused_add_0" with "stream": 7). Read from files only.
struct CpuSliceOnStream {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint32_t name = 0;  ///< index into Trace::names
  std::int64_t stream = 0;

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// Time CUPTI itself spent (buffer flushes, instrumentation), on its own row.
struct OverheadEvent {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint32_t name = 0;
};

/// How GPU collection went in a window: what was lost and why.
struct GpuCollectionStats {
  bool enabled = false;                 ///< a GPU backend collected this window
  std::uint64_t records = 0;            ///< activity records read from CUPTI's buffers
  std::uint64_t dropped_records = 0;    ///< translated records lost to a full device buffer
  std::uint64_t cupti_dropped_records = 0;  ///< records CUPTI itself dropped (no buffer available)
  std::uint64_t unknown_records = 0;    ///< records of kinds dlprof does not translate, skipped
  std::uint64_t late_records = 0;       ///< records of an earlier window that arrived after it closed
  std::uint64_t clipped_annotations = 0;///< gpu_user_annotation spans shortened so slices nest
  std::uint64_t dropped_device_counters = 0;  ///< clock and power readings that gave way to newer ones
  std::string cupti_version;            ///< e.g. "13.0"; empty if unknown
  std::string driver_version;
};

/// What reading a trace file left out or could not take as written: what a report of that file
/// must say. Empty for a trace recorded in-process and for a file read without surprises.
struct ReadResult {
  /// Events unusable on their own (a "ts" or "dur" that is not a time, a negative "dur", a "name"
  /// that is an object, ...), left out of the trace.
  std::uint64_t skipped_events = 0;
  std::string first_skip_reason;      ///< why the first of them was left out
  std::size_t first_skip_offset = 0;  ///< where it starts: a byte of the (decompressed) JSON text
  /// Values of an unexpected type that the reader could neither use nor convert: event args (left
  /// out of their event) and metadata fields (kept as JSON text in Trace::metadata).
  std::uint64_t ignored_values = 0;
  /// One line each, for people: the first ignored value, slices of a device category the reader
  /// does not know and how they were counted, ...
  std::vector<std::string> notes;
  /// False for a JSON object without "traceEvents" (a config.json, a report): no trace at all.
  /// read_trace_set leaves such a file of a directory out; read_trace reads it as an empty trace
  /// with a note.
  bool has_trace_events = true;

  bool empty() const noexcept { return skipped_events == 0 && ignored_values == 0 && notes.empty(); }
};

/// What one recording window collected. Events are ordered by thread, then by start time,
/// enclosing ranges before the ranges they enclose; ranges on one thread nest strictly.
struct Trace {
  std::vector<TraceEvent> events;
  std::vector<std::string> names;
  std::vector<ThreadInfo> threads;
  std::vector<OpInputs> op_inputs;  ///< what ops were called with; TraceEvent::inputs indexes it
  std::vector<CollectiveCall> collectives;  ///< in the order of their ops' start
  /// with_stack: the distinct call stacks of ranges and ops (TraceEvent::stack), their frames, and
  /// the modules the frames' addresses are in (by start address).
  std::vector<CallStack> stacks;
  std::vector<StackFrame> stack_frames;
  std::vector<LoadedModule> modules;
  std::uint64_t stackless_events = 0;  ///< with_stack: events recorded without theirs (stack table full)
  std::int64_t pid = 0;
  std::string process_name;
  std::int64_t window_start_ns = 0;  ///< CLOCK_REALTIME ns when recording started
  std::int64_t window_end_ns = 0;    ///< and when it stopped
  std::uint64_t dropped_events = 0;  ///< events lost to full rings during the window
  std::uint64_t clipped_ranges = 0;  ///< ranges shortened so that slices nest (see chrome_trace.hpp)
  std::uint64_t overflowed_names = 0;  ///< dynamic names recorded under the name table's overflow name (table full)
  std::string clock_source;          ///< "tsc" or "clock_monotonic"
  /// A flight recorder's dump: why it was written ("slow step 40: ...", "SIGSEGV in step 12");
  /// empty for any other trace.
  std::string flight_recorder_dump;
  /// Read from a Chrome-trace file: what its `ts` values count from (baseTimeNanoseconds; 0 for
  /// absolute µs, before 2024). HTA rounds the file's own numbers, so the HTA-compatible analyses
  /// round from here. Empty for a trace recorded in-process.
  std::optional<std::int64_t> file_time_base_ns;
  DistributedInfo distributed;
  std::vector<DeviceProperties> devices;
  /// GPU side (empty without Activity::CUDA): device work sorted by device, stream and start; API
  /// calls sorted by thread and start.
  std::vector<GpuEvent> gpu_events;
  std::vector<ApiEvent> api_events;
  std::vector<MemoryEvent> memory_events;
  std::vector<MemoryTag> memory_tags;  ///< by time
  std::vector<OutOfMemoryEvent> out_of_memory;  ///< by time
  std::vector<OverheadEvent> overhead_events;
  /// Clocks, power and clock limits of the GPUs, by device, kind and time.
  std::vector<DeviceCounterSample> device_counters;
  /// The recording threads' CPU time and run-queue wait, by thread, then time.
  std::vector<ThreadCpuSample> thread_cpu;
  std::uint64_t dropped_thread_cpu_readings = 0;  ///< readings that gave way to newer ones
  /// The CPU slices of `events` that name a GPU stream, by start. Holistic Trace Analysis takes
  /// any event with a stream for GPU work and counts their CPU time as GPU time; the analyses do
  /// so only with AnalysisOptions::hta_compat.
  std::vector<CpuSliceOnStream> cpu_slices_on_streams;
  GpuCollectionStats gpu;
  /// Extra top-level keys, written verbatim: the value must already be JSON text.
  std::vector<std::pair<std::string, std::string>> metadata;
  /// Read from a file: what the reader left out or changed (import/chrome_trace.hpp).
  ReadResult read_result;

  std::string_view name_of(const TraceEvent& event) const noexcept { return names[event.name]; }
  std::int64_t window_ns() const noexcept { return window_end_ns - window_start_ns; }
};

DLPROF_END_NAMESPACE
