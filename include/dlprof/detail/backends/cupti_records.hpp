// dlprof/detail/backends/cupti_records.hpp: CUPTI's activity buffers, from the pool that lends them to
// the records translated out of them.
//
// CUPTI asks for an empty buffer whenever it needs one (BufferPool::acquire: pre-allocated, so
// no allocation on that path once warmed up) and hands it back full, on its own thread or inside
// a flush (RecordCollector::buffer_completed). The collector walks the records with
// cuptiActivityGetNextRecord, translates those of a recording window into the trace's event
// types, and counts the rest: records outside a window, records of kinds it does not translate,
// records of a window already closed, records lost to a full store, and CUPTI's own drops.
#pragma once

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/backends/cupti_library.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Activity buffers for CUPTI, allocated ahead and reused. When all are lent out it allocates
/// up to `max_buffers`; past that CUPTI gets no buffer and counts the records it must drop.
class BufferPool {
 public:
  static constexpr std::size_t kBufferBytes = std::size_t{4} << 20;  // Kineto's default size too
  static constexpr std::size_t kAlignment = 8;                         // ACTIVITY_RECORD_ALIGNMENT

  BufferPool(std::size_t preallocated, std::size_t max_buffers) : max_buffers_(max_buffers) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < preallocated && allocated_ < max_buffers_; ++i) free_.push_back(allocate());
  }
  ~BufferPool() {
    for (std::uint8_t* buffer : free_) std::free(buffer);
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// An empty buffer, or null when `max_buffers` are lent out.
  std::uint8_t* acquire() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      std::uint8_t* buffer = free_.back();
      free_.pop_back();
      return buffer;
    }
    return allocated_ < max_buffers_ ? allocate() : nullptr;
  }

  void release(std::uint8_t* buffer) noexcept {
    if (buffer == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(buffer);  // capacity reserved for max_buffers_: never reallocates
  }

  std::size_t allocated() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return allocated_;
  }

 private:
  std::uint8_t* allocate() noexcept {
    if (free_.capacity() < max_buffers_) free_.reserve(max_buffers_);
    auto* buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kAlignment, kBufferBytes));
    if (buffer != nullptr) ++allocated_;
    return buffer;
  }

  mutable std::mutex mutex_;
  std::vector<std::uint8_t*> free_;
  std::size_t allocated_ = 0;
  std::size_t max_buffers_;
};

/// A kernel's name as Kineto writes it: demangled, and "kernel" spelled "Kernel".
inline std::string kernel_display_name(const char* mangled) {
  if (mangled == nullptr) return "<unnamed kernel>";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? std::string(demangled.get()) : std::string(mangled);
  if (name == "kernel") name = "Kernel";
  return name;
}

/// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": CUPTI's callback names carry the API version
/// that introduced the entry point; the CUDA names (and Kineto's) do not.
inline std::string api_display_name(std::string_view callback_name) {
  const std::size_t suffix = callback_name.rfind("_v");
  if (suffix != std::string_view::npos && suffix + 2 < callback_name.size() &&
      std::all_of(callback_name.begin() + static_cast<std::ptrdiff_t>(suffix + 2), callback_name.end(),
                  [](char c) { return c >= '0' && c <= '9'; }))
    callback_name = callback_name.substr(0, suffix);
  return std::string(callback_name);
}

/// Whether a runtime or driver call (its name as api_display_name spells it) stays out of the
/// trace: calls that ask something or set the calling thread's device and change nothing on the
/// GPU. LibTorch makes several per op (cudaGetDevice, cuDevicePrimaryCtxGetState,
/// cudaGetLastError), and recording each costs the launching thread about what the launch's own
/// record does. Kineto leaves most of them out too (its runtime block list). Per-thread-stream
/// (`_ptsz`) and later (`_v2`) entry points count as the call they stand for.
inline bool is_untraced_api(std::string_view name) noexcept {
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const std::string_view tail : {std::string_view("_ptsz"), std::string_view("_ptds")}) {
      if (name.size() > tail.size() && name.substr(name.size() - tail.size()) == tail) {
        name.remove_suffix(tail.size());
        stripped = true;
      }
    }
    const std::size_t version = name.rfind("_v");
    if (version != std::string_view::npos && version + 2 < name.size() &&
        std::all_of(name.begin() + static_cast<std::ptrdiff_t>(version + 2), name.end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      name = name.substr(0, version);
      stripped = true;
    }
  }
  static constexpr std::string_view kUntraced[] = {  // sorted
      "cuCtxGetCurrent",
      "cuCtxGetDevice",
      "cuCtxGetId",
      "cuCtxGetStreamPriorityRange",
      "cuCtxSetCurrent",
      "cuDeviceGet",
      "cuDeviceGetAttribute",
      "cuDevicePrimaryCtxGetState",
      "cuDriverGetVersion",
      "cuFuncGetAttribute",
      "cuFuncGetName",
      "cuFuncGetParamInfo",
      "cuGetErrorName",
      "cuGetErrorString",
      "cuGetProcAddress",
      "cuKernelGetAttribute",
      "cuKernelGetFunction",
      "cuKernelGetName",
      "cuPointerGetAttribute",
      "cuPointerGetAttributes",
      "cuStreamGetCaptureInfo",
      "cuStreamGetCtx",
      "cuStreamGetId",
      "cuStreamIsCapturing",
      "cuThreadExchangeStreamCaptureMode",
      "cudaDeviceGetAttribute",
      "cudaDriverGetVersion",
      "cudaFuncGetAttributes",
      "cudaFuncGetName",
      "cudaGetDevice",
      "cudaGetDeviceCount",
      "cudaGetDeviceFlags",
      "cudaGetDeviceProperties",
      "cudaGetDriverEntryPoint",
      "cudaGetDriverEntryPointByVersion",
      "cudaGetErrorName",
      "cudaGetErrorString",
      "cudaGetFuncBySymbol",
      "cudaGetKernel",
      "cudaGetLastError",
      "cudaPeekAtLastError",
      "cudaPointerGetAttributes",
      "cudaRuntimeGetVersion",
      "cudaSetDevice",
      "cudaStreamGetCaptureInfo",
      "cudaStreamIsCapturing",
      "cudaThreadExchangeStreamCaptureMode",
  };
  return std::binary_search(std::begin(kUntraced), std::end(kUntraced), name);
}

/// CUPTI's overhead kinds as Kineto names them.
inline std::string_view overhead_kind_name(CUpti_ActivityOverheadKind kind) noexcept {
  switch (kind) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "Driver Compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "Buffer Flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "Instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "Resource";
    default: return "Unknown";
  }
}

/// Translates completed activity buffers into one window's DeviceActivity.
class RecordCollector {
 public:
  /// `max_records`: translated records a window may hold; more are dropped and counted.
  RecordCollector(const CuptiLibrary& cupti, std::size_t max_records) : cupti_(cupti), max_records_(max_records) {}

  /// Takes effect from the next window. `keep_newest`: a full window drops its oldest records
  /// for new ones, else the new ones.
  void set_limits(std::size_t max_records, bool keep_newest) {
    std::lock_guard<std::mutex> lock(mutex_);
    max_records_ = max_records;
    keep_newest_ = keep_newest;
  }

  /// Forgets the window's records that ended before `timestamp` (the backend's clock), and those
  /// completed later. The work is done once the window has grown by half since it was last
  /// done, or when it is full, so that a step costs no scan of the records it keeps.
  void discard_before(std::int64_t timestamp) {
    std::lock_guard<std::mutex> lock(mutex_);
    discard_before_ = std::max(discard_before_, timestamp);
    if (stored_ >= kept_after_discard_ + kept_after_discard_ / 2 + kMinRecordsBetweenDiscards) erase_before(discard_before_);
  }

  /// Starts a window: records completed from now on are kept (until end_window()).
  void begin_window(BackendClock clock, std::vector<DeviceProperties> devices) {
    std::lock_guard<std::mutex> lock(mutex_);
    activity_ = DeviceActivity{};
    forget_names();
    activity_.clock = clock;
    activity_.devices = std::move(devices);
    activity_.stats.late_records = late_since_last_window_;
    late_since_last_window_ = 0;
    stored_ = 0;
    kept_after_discard_ = 0;
    discard_before_ = INT64_MIN;
    discarded_calls_through_ = 0;
    collecting_ = true;
  }

  /// Ends the window and hands it over. Records of it completed later are counted as late.
  DeviceActivity end_window() {
    std::lock_guard<std::mutex> lock(mutex_);
    collecting_ = false;
    activity_.stats.late_records += late_since_last_window_;  // arrived while this window was open
    late_since_last_window_ = 0;
    // Sync records name a context, not a device: resolved now, from every record seen so far,
    // so the order records arrive in does not matter.
    for (GpuEvent& event : activity_.gpu)
      if (event.kind == GpuEventKind::Sync) {
        const auto device = device_of_context_.find(event.context);
        if (device != device_of_context_.end()) event.device = device->second;
      }
    closed_correlation_ = std::max(closed_correlation_, window_max_correlation_);
    if (discard_before_ != INT64_MIN) erase_before(discard_before_);
    activity_.names = std::move(names_);
    forget_names();
    return std::move(activity_);
  }

  /// CUPTI's buffer-completed callback: translates every record of `buffer`. Also adds the
  /// records CUPTI dropped for (context, stream), when it can tell.
  void buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer, std::size_t valid_size) {
    std::lock_guard<std::mutex> lock(mutex_);
    CUpti_Activity* record = nullptr;
    while (valid_size > 0 && cupti_.get_next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) translate(*record);
    std::size_t dropped = 0;
    if (cupti_.get_num_dropped_records != nullptr &&
        cupti_.get_num_dropped_records(context, stream, &dropped) == CUPTI_SUCCESS)
      activity_.stats.cupti_dropped_records += dropped;
  }

  /// Records CUPTI could not store because no buffer was available.
  void add_cupti_dropped(std::uint64_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    activity_.stats.cupti_dropped_records += count;
  }

 private:
  void translate(const CUpti_Activity& record) {
    switch (record.kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto& kernel = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
        if (!keep(kernel.correlationId)) return;
        GpuEvent event = device_work(GpuEventKind::Kernel, kernel.start, kernel.end, kernel.deviceId,
                                     kernel.contextId, kernel.streamId, kernel.correlationId);
        event.name = kernel_name(kernel.name);
        KernelDetails& details = event.kernel;
        details.grid[0] = static_cast<std::uint32_t>(kernel.gridX);
        details.grid[1] = static_cast<std::uint32_t>(kernel.gridY);
        details.grid[2] = static_cast<std::uint32_t>(kernel.gridZ);
        details.block[0] = static_cast<std::uint32_t>(kernel.blockX);
        details.block[1] = static_cast<std::uint32_t>(kernel.blockY);
        details.block[2] = static_cast<std::uint32_t>(kernel.blockZ);
        details.registers_per_thread = kernel.registersPerThread;
        details.static_shared_memory = static_cast<std::uint32_t>(kernel.staticSharedMemory);
        details.dynamic_shared_memory = static_cast<std::uint32_t>(kernel.dynamicSharedMemory);
        details.queued_ns = static_cast<std::int64_t>(kernel.queued);
        event.graph_id = kernel.graphId;
        event.graph_node_id = kernel.graphNodeId;
        store(activity_.gpu, event);
        return;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto& copy = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
        if (!keep(copy.correlationId)) return;
        store(activity_.gpu, copy_event(GpuEventKind::Memcpy, copy));
        return;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        const auto& copy = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4&>(record);
        if (!keep(copy.correlationId)) return;
        GpuEvent event = copy_event(GpuEventKind::MemcpyPeer, copy);
        event.copy.source_device = copy.srcDeviceId;
        event.copy.destination_device = copy.dstDeviceId;
        event.copy.source_context = copy.srcContextId;
        event.copy.destination_context = copy.dstContextId;
        store(activity_.gpu, event);
        return;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto& fill = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
        if (!keep(fill.correlationId)) return;
        GpuEvent event = device_work(GpuEventKind::Memset, fill.start, fill.end, fill.deviceId, fill.contextId,
                                     fill.streamId, fill.correlationId);
        event.name = intern(fill_name(static_cast<std::uint8_t>(fill.memoryKind)));
        event.copy.bytes = fill.bytes;
        event.copy.destination_kind = static_cast<std::uint8_t>(fill.memoryKind);
        event.graph_id = fill.graphId;
        event.graph_node_id = fill.graphNodeId;
        store(activity_.gpu, event);
        return;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto& call = reinterpret_cast<const CUpti_ActivityAPI&>(record);
        if (!keep(call.correlationId)) return;
        window_max_correlation_ = std::max(window_max_correlation_, call.correlationId);
        const bool driver = record.kind == CUPTI_ACTIVITY_KIND_DRIVER;
        const ApiName name = api_name(driver, call.cbid);
        if (name.untraced) return;  // recorded by a CUPTI that cannot leave single calls out
        ApiEvent event;
        event.start_ns = static_cast<std::int64_t>(call.start);
        event.end_ns = static_cast<std::int64_t>(call.end);
        event.driver = driver;
        event.cbid = call.cbid;
        event.correlation = call.correlationId;
        event.thread = call.threadId;  // the OS thread id: the backend sets CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM
        event.name = name.id;
        store(activity_.api, event);
        return;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto& sync = reinterpret_cast<const CUpti_ActivitySynchronization2&>(record);
        if (!keep(sync.correlationId)) return;
        const bool has_stream = sync.streamId != CUPTI_SYNCHRONIZATION_INVALID_VALUE;
        // The device is filled in by end_window(), once the context's work has been seen.
        GpuEvent event = device_work(GpuEventKind::Sync, sync.start, sync.end, 0, sync.contextId, 0, sync.correlationId);
        event.stream = has_stream ? std::int64_t{sync.streamId} : -1;
        event.sync.type = static_cast<std::uint8_t>(sync.type);
        event.sync.cuda_event_id = sync.cudaEventId;
        event.name = intern(std::string(sync_kind_name(event.sync.type)));
        store(activity_.gpu, event);
        return;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto& link = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
        if (!keep(link.correlationId)) return;
        store(activity_.external_correlations, ExternalCorrelation{link.correlationId, link.externalId});
        return;
      }
      case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const auto& memory = reinterpret_cast<const CUpti_ActivityMemory4&>(record);
        if (!keep(memory.correlationId)) return;
        const bool release = memory.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
        if (!release && memory.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) return;
        RawMemoryEvent event;
        event.timestamp = static_cast<std::int64_t>(memory.timestamp);
        event.address = memory.address;
        event.bytes = release ? -static_cast<std::int64_t>(memory.bytes) : static_cast<std::int64_t>(memory.bytes);
        event.device = memory.deviceId;
        event.correlation = memory.correlationId;
        store(activity_.memory, event);
        return;
      }
      case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const auto& overhead = reinterpret_cast<const CUpti_ActivityOverhead3&>(record);
        if (!collecting_) return;
        OverheadEvent event;
        event.start_ns = static_cast<std::int64_t>(overhead.start);
        event.end_ns = static_cast<std::int64_t>(overhead.end);
        event.name = intern(std::string(overhead_kind_name(overhead.overheadKind)));
        store(activity_.overhead, event);
        return;
      }
      default:
        if (collecting_) {
          ++activity_.stats.records;
          ++activity_.stats.unknown_records;
        }
        return;
    }
  }

  /// What a copy record and a peer-copy record have in common: "Memcpy HtoD (Pageable -> Device)".
  template <class CopyRecord>
  GpuEvent copy_event(GpuEventKind kind, const CopyRecord& copy) {
    GpuEvent event = device_work(kind, copy.start, copy.end, copy.deviceId, copy.contextId, copy.streamId,
                                 copy.correlationId);
    event.name = intern(copy_name(copy.copyKind, copy.srcKind, copy.dstKind));
    event.copy.bytes = copy.bytes;
    event.copy.copy_kind = copy.copyKind;
    event.copy.source_kind = copy.srcKind;
    event.copy.destination_kind = copy.dstKind;
    event.graph_id = copy.graphId;
    event.graph_node_id = copy.graphNodeId;
    return event;
  }

  /// Whether a record is for the open window. Counts it, or counts it late, unless it was
  /// launched in a flight recorder's step that gave way.
  bool keep(std::uint32_t correlation) noexcept {
    if (correlation != 0 && correlation <= closed_correlation_) {
      ++late_since_last_window_;  // launched in a window that is already closed
      return false;
    }
    if (correlation != 0 && correlation <= discarded_calls_through_) return false;  // launched in a step that gave way
    if (!collecting_) return false;  // warm-up, or between windows
    ++activity_.stats.records;
    return true;
  }

  template <class Record>
  void store(std::vector<Record>& records, const Record& record) {
    if (stored_ >= max_records_ && keep_newest_) make_room();
    if (stored_ >= max_records_) {
      ++activity_.stats.dropped_records;
      return;
    }
    ++stored_;
    records.push_back(record);
  }

  /// Room in a full window that keeps its newest records: those of the steps that gave way go,
  /// then the records of the oldest quarter of the calls, counted as dropped.
  void make_room() {
    if (discard_before_ != INT64_MIN) erase_before(discard_before_);
    if (stored_ < max_records_) return;
    correlations_.clear();
    for (const ApiEvent& event : activity_.api) correlations_.push_back(event.correlation);
    for (const GpuEvent& event : activity_.gpu)
      if (event.correlation != 0) correlations_.push_back(event.correlation);
    if (correlations_.empty()) return;  // nothing launched by a call: the new record is dropped
    const auto quarter = correlations_.begin() + static_cast<std::ptrdiff_t>(correlations_.size() / 4);
    std::nth_element(correlations_.begin(), quarter, correlations_.end());
    activity_.stats.dropped_records += erase_calls_through(*quarter);
  }

  /// Erases the calls that ended before `timestamp` with everything they launched, and the work
  /// no call launched that ended before it. Returns how many records went.
  std::uint64_t erase_before(std::int64_t timestamp) {
    const std::size_t before = stored_;
    std::uint32_t newest_gone_call = 0;
    erase_if(activity_.api, [&](const ApiEvent& event) {
      if (event.end_ns >= timestamp) return false;
      newest_gone_call = std::max(newest_gone_call, event.correlation);
      return true;
    });
    erase_if(activity_.gpu, [&](const GpuEvent& event) { return event.correlation == 0 && event.end_ns < timestamp; });
    erase_if(activity_.memory, [&](const RawMemoryEvent& event) { return event.correlation == 0 && event.timestamp < timestamp; });
    erase_if(activity_.overhead, [&](const OverheadEvent& event) { return event.end_ns < timestamp; });
    // Correlation ids grow with every call: work of an id below the oldest call kept was launched
    // before the window, though it may run, and complete, inside it.
    for (const ApiEvent& event : activity_.api) newest_gone_call = std::min(newest_gone_call, event.correlation - 1);
    erase_calls_through(newest_gone_call);
    return before - stored_;
  }

  /// Erases the records of calls with ids up to `correlation`, and forgets those completed later.
  /// Returns how many records went.
  std::uint64_t erase_calls_through(std::uint32_t correlation) {
    const std::size_t before = stored_;
    discarded_calls_through_ = std::max(discarded_calls_through_, correlation);
    const auto gone = [&](std::uint32_t id) { return id != 0 && id <= discarded_calls_through_; };
    erase_if(activity_.api, [&](const ApiEvent& event) { return gone(event.correlation); });
    erase_if(activity_.gpu, [&](const GpuEvent& event) { return gone(event.correlation); });
    erase_if(activity_.memory, [&](const RawMemoryEvent& event) { return gone(event.correlation); });
    erase_if(activity_.external_correlations, [&](const ExternalCorrelation& link) { return gone(link.correlation); });
    stored_ = activity_.gpu.size() + activity_.api.size() + activity_.memory.size() + activity_.overhead.size() +
              activity_.external_correlations.size();
    kept_after_discard_ = stored_;
    return before - stored_;
  }

  template <class Record, class Predicate>
  static void erase_if(std::vector<Record>& records, Predicate&& gone) {
    records.erase(std::remove_if(records.begin(), records.end(), gone), records.end());
  }

  GpuEvent device_work(GpuEventKind kind, std::uint64_t start, std::uint64_t end, std::uint32_t device,
                       std::uint32_t context, std::uint32_t stream, std::uint32_t correlation) {
    if (kind != GpuEventKind::Sync) device_of_context_[context] = device;
    GpuEvent event;
    event.kind = kind;
    event.start_ns = static_cast<std::int64_t>(start);
    event.end_ns = static_cast<std::int64_t>(end);
    event.device = device;
    event.context = context;
    event.stream = stream;
    event.correlation = correlation;
    return event;
  }

  std::uint32_t intern(std::string name) {
    auto [found, inserted] = name_index_.try_emplace(std::move(name), static_cast<std::uint32_t>(names_.size()));
    if (inserted) names_.push_back(found->first);
    return found->second;
  }

  void forget_names() {
    names_.clear();
    name_index_.clear();
    kernel_names_.clear();
    api_names_.clear();
  }

  /// CUPTI keeps a kernel's name at one address for the life of the module: demangle each once.
  std::uint32_t kernel_name(const char* mangled) {
    auto [found, inserted] = kernel_names_.try_emplace(mangled, 0u);
    if (inserted) found->second = intern(kernel_display_name(mangled));
    return found->second;
  }

  struct ApiName {
    std::uint32_t id = 0;
    bool untraced = false;  ///< is_untraced_api
  };

  ApiName api_name(bool driver, std::uint32_t cbid) {
    const std::uint64_t key = (std::uint64_t{driver} << 32) | cbid;
    auto [found, inserted] = api_names_.try_emplace(key);
    if (inserted) {
      const char* name = nullptr;
      const CUpti_CallbackDomain domain = driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
      if (cupti_.get_callback_name == nullptr || cupti_.get_callback_name(domain, cbid, &name) != CUPTI_SUCCESS ||
          name == nullptr) {
        found->second.id = intern(fmt::format("{} API call {}", driver ? "driver" : "runtime", cbid));
      } else {
        std::string display_name = api_display_name(name);
        found->second.untraced = is_untraced_api(display_name);
        found->second.id = intern(std::move(display_name));
      }
    }
    return found->second;
  }

  const CuptiLibrary& cupti_;
  std::size_t max_records_;
  std::mutex mutex_;  // the completion thread translates while the profiler's thread opens and closes windows
  DeviceActivity activity_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::uint32_t> name_index_;
  std::unordered_map<const char*, std::uint32_t> kernel_names_;
  std::unordered_map<std::uint64_t, ApiName> api_names_;
  std::size_t stored_ = 0;
  bool keep_newest_ = false;
  std::int64_t discard_before_ = INT64_MIN;  ///< records that end before it are not wanted
  std::size_t kept_after_discard_ = 0;
  static constexpr std::size_t kMinRecordsBetweenDiscards = 4096;
  std::uint32_t discarded_calls_through_ = 0;  ///< records of calls up to this id are not wanted
  std::vector<std::uint32_t> correlations_;    ///< make_room()'s scratch
  bool collecting_ = false;
  std::uint32_t window_max_correlation_ = 0;
  std::uint32_t closed_correlation_ = 0;  // calls up to this id belong to closed windows
  std::uint64_t late_since_last_window_ = 0;
  std::unordered_map<std::uint32_t, std::uint32_t> device_of_context_;  // learnt from kernels, copies and fills
};

}  // namespace detail
DLPROF_END_NAMESPACE
