// A CUDA driver and a CUPTI session played on a machine without a GPU: the real libcupti walks
// the activity buffers and names the API calls; device discovery, enabling, flushing and the
// external correlation stack are played here, and launch_kernel() writes the records CUPTI would
// write for a cudaLaunchKernel, the graph node callbacks CUPTI makes as CUDA builds a graph, and the
// records of a graph's replay. Used by the backend tests and by the program that writes a GPU
// trace for HTA and TensorBoard to open.
#pragma once

#include <dlprof/cupti.hpp>
#include <dlprof/profiler.hpp>
#include <dlprof/detail/recording/ring_registry.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dlprof_test {

using dlprof::detail::CudaDriver;
using dlprof::detail::CuptiBackend;
using dlprof::detail::CuptiLibrary;
using dlprof::detail::NvmlLibrary;

/// What the played driver and CUPTI session were asked, and what they answer.
struct Played {
  CUresult init_result = CUDA_SUCCESS;
  int device_count = 1;
  CUptiResult subscribe_result = CUPTI_SUCCESS;
  CUpti_ActivityKind refused_kind = CUPTI_ACTIVITY_KIND_INVALID;
  CUptiResult refusal = CUPTI_SUCCESS;
  std::vector<CUpti_ActivityKind> enabled;
  std::vector<CUpti_ActivityKind> disabled;
  std::vector<std::uint32_t> flushes;
  int synchronizations = 0;
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  CUpti_CallbackFunc callback = nullptr;  // the subscriber's
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> callbacks_on;  // cuptiEnableCallback(1, ...)
  std::vector<std::uint64_t> external_ids;  // CUPTI's external correlation stack
  std::vector<CUpti_CallbackId> runtime_apis_off, driver_apis_off;  // cuptiActivityEnable{Runtime,Driver}Api(id, 0)
  std::vector<std::uint8_t> pending;        // records completed at the next flush
  std::uint32_t next_correlation = 100;
  // NVML: the GPUs it knows by PCI bus id.
  int nvml_init_result = 0;
  std::vector<std::string> nvml_bus_ids = {"00000000:19:00.0"};
};
inline Played played;

/// What each played NVML reading gives: set by a test while the sampler's thread reads.
struct PlayedReadings {
  std::atomic<unsigned int> sm_mhz{1755};
  std::atomic<unsigned int> memory_mhz{2619};
  std::atomic<unsigned int> milliwatts{612'400};
  std::atomic<unsigned long long> clock_reasons{0x4};  // the software power cap
  std::atomic<int> count{0};                           // nvmlDeviceGetClockInfo(SM) calls

  void reset() {
    sm_mhz = 1755;
    memory_mhz = 2619;
    milliwatts = 612'400;
    clock_reasons = 0x4;
    count = 0;
  }
};
inline PlayedReadings readings;

inline CudaDriver played_driver() {
  CudaDriver driver;
  driver.init = [](unsigned) { return played.init_result; };
  driver.driver_get_version = [](int* version) {
    *version = 13000;
    return CUDA_SUCCESS;
  };
  driver.device_get_count = [](int* count) {
    *count = played.device_count;
    return CUDA_SUCCESS;
  };
  driver.device_get = [](CUdevice* device, int ordinal) {
    *device = ordinal;
    return CUDA_SUCCESS;
  };
  driver.device_get_attribute = [](int* value, CUdevice_attribute attribute, CUdevice) {
    switch (attribute) {
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *value = 65536; break;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 232448; break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = 233472; break;
      default: *value = 0;
    }
    return CUDA_SUCCESS;
  };
  driver.device_get_name = [](char* name, int length, CUdevice) {
    std::strncpy(name, "NVIDIA H100 80GB HBM3", static_cast<std::size_t>(length));
    return CUDA_SUCCESS;
  };
  driver.device_total_mem = [](std::size_t* bytes, CUdevice) {
    *bytes = std::size_t{85} << 30;
    return CUDA_SUCCESS;
  };
  driver.ctx_get_current = [](CUcontext* context) {
    static int fake_context;
    *context = reinterpret_cast<CUcontext>(&fake_context);
    return CUDA_SUCCESS;
  };
  driver.ctx_synchronize = [] {
    ++played.synchronizations;
    return CUDA_SUCCESS;
  };
  driver.device_get_pci_bus_id = [](char* bus_id, int length, CUdevice device) {
    // The driver's form ("0000:19:00.0"); NVML's own has an 8-digit domain and takes both.
    std::snprintf(bus_id, static_cast<std::size_t>(length), "0000:%02x:00.0", 0x19 + static_cast<int>(device));
    return CUDA_SUCCESS;
  };
  driver.get_error_name = [](CUresult result, const char** name) {
    *name = result == CUDA_ERROR_UNKNOWN ? "CUDA_ERROR_UNKNOWN" : "CUDA_ERROR_NO_DEVICE";
    return CUDA_SUCCESS;
  };
  return driver;
}

/// NVML with one GPU per bus id in played.nvml_bus_ids: device i is bus 0x19 + i. It answers as
/// the driver's NVML does: "0000:19:00.0" and "00000000:19:00.0" name one device.
inline NvmlLibrary played_nvml() {
  NvmlLibrary nvml;
  nvml.init = [] { return played.nvml_init_result; };
  nvml.shutdown = [] { return 0; };
  nvml.error_string = [](int result) { return result == 4 ? "Insufficient Permissions" : "Unknown Error"; };
  nvml.device_by_pci_bus_id = [](const char* bus_id, dlprof::detail::nvml::Device* device) {
    unsigned int domain = 0, bus = 0;
    if (std::sscanf(bus_id, "%x:%x:", &domain, &bus) != 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
    for (std::size_t i = 0; i < played.nvml_bus_ids.size(); ++i) {
      unsigned int known_domain = 0, known_bus = 0;
      std::sscanf(played.nvml_bus_ids[i].c_str(), "%x:%x:", &known_domain, &known_bus);
      if (known_domain == domain && known_bus == bus) {
        *device = reinterpret_cast<dlprof::detail::nvml::Device>(i + 1);
        return 0;
      }
    }
    return 6;  // NVML_ERROR_NOT_FOUND
  };
  nvml.clock_info = [](dlprof::detail::nvml::Device, dlprof::detail::nvml::ClockType type, unsigned int* mhz) {
    if (type == dlprof::detail::nvml::kSmClock) ++readings.count;
    *mhz = type == dlprof::detail::nvml::kSmClock ? readings.sm_mhz.load() : readings.memory_mhz.load();
    return 0;
  };
  nvml.power_usage = [](dlprof::detail::nvml::Device, unsigned int* milliwatts) {
    *milliwatts = readings.milliwatts;
    return 0;
  };
  nvml.clocks_event_reasons = [](dlprof::detail::nvml::Device, unsigned long long* reasons) {
    *reasons = readings.clock_reasons;
    return 0;
  };
  return nvml;
}

/// The real libcupti (it reads buffers and names callbacks without a driver), with the calls that
/// need a GPU played.
inline CuptiLibrary played_cupti() {
  CuptiLibrary cupti;
  std::string error;
  if (!cupti.open(error)) return cupti;
  cupti.get_version = [](std::uint32_t* version) {
    *version = 130001;
    return CUPTI_SUCCESS;
  };
  cupti.subscribe = [](CUpti_SubscriberHandle*, CUpti_CallbackFunc callback, void*) {
    if (played.subscribe_result == CUPTI_SUCCESS) played.callback = callback;
    return played.subscribe_result;
  };
  cupti.enable_callback = [](std::uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    const auto callback = std::make_pair(domain, cbid);
    auto& on = played.callbacks_on;
    if (enable != 0 && std::find(on.begin(), on.end(), callback) == on.end()) on.push_back(callback);
    if (enable == 0) on.erase(std::remove(on.begin(), on.end(), callback), on.end());
    return CUPTI_SUCCESS;
  };
  // A played node's handle is its id.
  cupti.get_graph_node_id = [](CUgraphNode node, std::uint64_t* id) {
    if (node == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = reinterpret_cast<std::uintptr_t>(node);
    return CUPTI_SUCCESS;
  };
  cupti.set_thread_id_type = [](CUpti_ActivityThreadIdType) { return CUPTI_SUCCESS; };
  cupti.register_timestamp_callback = [](CUpti_TimestampCallbackFunc callback) {
    played.timestamp = callback;
    return CUPTI_SUCCESS;
  };
  cupti.register_callbacks = [](CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed) {
    played.requested = requested;
    played.completed = completed;
    return CUPTI_SUCCESS;
  };
  cupti.enable = [](CUpti_ActivityKind kind) {
    if (kind == played.refused_kind) return played.refusal;
    played.enabled.push_back(kind);
    return CUPTI_SUCCESS;
  };
  cupti.disable = [](CUpti_ActivityKind kind) {
    played.disabled.push_back(kind);
    return CUPTI_SUCCESS;
  };
  cupti.flush_all = [](std::uint32_t flag) {
    played.flushes.push_back(flag);
    if (played.pending.empty()) return CUPTI_SUCCESS;
    std::uint8_t* buffer = nullptr;
    std::size_t size = 0;
    std::size_t max_records = 0;
    played.requested(&buffer, &size, &max_records);
    EXPECT_GE(size, played.pending.size());
    std::memcpy(buffer, played.pending.data(), played.pending.size());
    const std::size_t valid = played.pending.size();
    played.pending.clear();
    played.completed(nullptr, 0, buffer, size, valid);
    return CUPTI_SUCCESS;
  };
  cupti.enable_runtime_api = [](CUpti_CallbackId cbid, std::uint8_t enable) {
    if (enable == 0) played.runtime_apis_off.push_back(cbid);
    return CUPTI_SUCCESS;
  };
  cupti.enable_driver_api = [](CUpti_CallbackId cbid, std::uint8_t enable) {
    if (enable == 0) played.driver_apis_off.push_back(cbid);
    return CUPTI_SUCCESS;
  };
  cupti.get_num_dropped_records = [](CUcontext, std::uint32_t, std::size_t* dropped) {
    *dropped = 0;
    return CUPTI_SUCCESS;
  };
  cupti.push_external_correlation_id = [](CUpti_ExternalCorrelationKind kind, std::uint64_t id) {
    EXPECT_EQ(kind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
    played.external_ids.push_back(id);
    return CUPTI_SUCCESS;
  };
  cupti.pop_external_correlation_id = [](CUpti_ExternalCorrelationKind, std::uint64_t* id) {
    *id = played.external_ids.back();
    played.external_ids.pop_back();
    return CUPTI_SUCCESS;
  };
  return cupti;
}

template <class Record>
inline void append_record(const Record& record) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&record);
  played.pending.insert(played.pending.end(), bytes, bytes + sizeof(Record));
}

/// When each played stream is next free: work on one stream runs one piece at a time.
inline std::map<std::uint32_t, std::uint64_t> stream_busy_until;

/// The runtime record of a call on this thread, and the external correlation record for the id
/// on top of the stack; returns the call record. Timestamps come from the clock CUPTI was given.
/// A call that blocks (a synchronisation) returns once the clock passes `blocks_until`.
inline CUpti_ActivityAPI record_call(CUpti_CallbackId cbid, std::uint64_t blocks_until = 0) {
  CUpti_ActivityAPI call{};
  call.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  call.cbid = cbid;
  call.start = played.timestamp();
  while (played.timestamp() < blocks_until) {
  }
  call.end = played.timestamp();
  call.processId = static_cast<std::uint32_t>(::getpid());
  call.threadId = static_cast<std::uint32_t>(dlprof::detail::current_os_tid());
  call.correlationId = played.next_correlation++;
  append_record(call);
  if (!played.external_ids.empty()) {
    CUpti_ActivityExternalCorrelation link{};
    link.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    link.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    link.externalId = played.external_ids.back();
    link.correlationId = call.correlationId;
    append_record(link);
  }
  return call;
}

/// CUPTI records nothing while its activity kinds are off.
inline bool activity_on() {
  return played.timestamp != nullptr && played.enabled.size() > played.disabled.size();
}

/// The interval the GPU runs a piece of work of `duration_ns` queued on `stream` by `call`:
/// 2 µs after the launch returns, or when the stream is free.
inline std::pair<std::uint64_t, std::uint64_t> schedule_on(std::uint32_t stream, const CUpti_ActivityAPI& call,
                                                           std::uint64_t duration_ns) {
  const std::uint64_t start = std::max(call.end + 2000, stream_busy_until[stream]);
  stream_busy_until[stream] = start + duration_ns;
  return {start, start + duration_ns};
}

/// The record of a kernel `call` launched on `stream` of device 0: 264 blocks of 256 threads, 32
/// registers each.
inline CUpti_ActivityKernel10 kernel_record(const CUpti_ActivityAPI& call, const char* mangled_name, std::uint32_t stream,
                                            std::uint64_t duration_ns) {
  CUpti_ActivityKernel10 kernel{};
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  const auto [start, end] = schedule_on(stream, call, duration_ns);
  kernel.start = start;
  kernel.end = end;
  kernel.deviceId = 0;
  kernel.contextId = 1;
  kernel.streamId = stream;
  kernel.gridX = 264;
  kernel.gridY = kernel.gridZ = 1;
  kernel.blockX = 256;
  kernel.blockY = kernel.blockZ = 1;
  kernel.registersPerThread = 32;
  kernel.correlationId = call.correlationId;
  kernel.name = mangled_name;
  return kernel;
}

/// What cudaLaunchKernel does under CUPTI with activity on: its API, external correlation and
/// kernel records.
inline void launch_kernel(const char* mangled_name, std::uint32_t stream, std::uint64_t duration_ns = 10000) {
  if (!activity_on()) return;
  const CUpti_ActivityAPI call = record_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
  const CUpti_ActivityKernel10 kernel = kernel_record(call, mangled_name, stream, duration_ns);
  append_record(kernel);
}

/// cudaMemcpyAsync from host memory to the device.
inline void copy_to_device(std::uint64_t bytes, bool pinned, std::uint32_t stream, std::uint64_t duration_ns) {
  if (!activity_on()) return;
  const CUpti_ActivityAPI call = record_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020);
  CUpti_ActivityMemcpy6 copy{};
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.srcKind = pinned ? CUPTI_ACTIVITY_MEMORY_KIND_PINNED : CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  copy.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  copy.bytes = bytes;
  const auto [start, end] = schedule_on(stream, call, duration_ns);
  copy.start = start;
  copy.end = end;
  copy.deviceId = 0;
  copy.contextId = 1;
  copy.streamId = stream;
  copy.correlationId = call.correlationId;
  append_record(copy);
}

/// cudaMemsetAsync on the device.
inline void fill_on_device(std::uint64_t bytes, std::uint32_t stream, std::uint64_t duration_ns) {
  if (!activity_on()) return;
  const CUpti_ActivityAPI call = record_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020);
  CUpti_ActivityMemset4 fill{};
  fill.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  fill.bytes = bytes;
  const auto [start, end] = schedule_on(stream, call, duration_ns);
  fill.start = start;
  fill.end = end;
  fill.deviceId = 0;
  fill.contextId = 1;
  fill.streamId = stream;
  fill.correlationId = call.correlationId;
  fill.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  append_record(fill);
}

/// cudaStreamSynchronize: the calling thread waits until the stream's work is done.
inline void synchronize_stream(std::uint32_t stream) {
  if (!activity_on()) return;
  const CUpti_ActivityAPI call =
      record_call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, stream_busy_until[stream]);
  CUpti_ActivitySynchronization2 sync{};
  sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.start = call.start;
  sync.end = call.end;
  sync.correlationId = call.correlationId;
  sync.contextId = 1;
  sync.streamId = stream;
  sync.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  append_record(sync);
}

/// The graph node callback CUPTI makes on this thread, where the subscriber turned it on.
inline void graph_node_callback(CUpti_CallbackId cbid, std::uint64_t node, std::uint64_t original = 0) {
  const auto& on = played.callbacks_on;
  if (played.callback == nullptr ||
      std::find(on.begin(), on.end(), std::make_pair(CUPTI_CB_DOMAIN_RESOURCE, cbid)) == on.end())
    return;
  CUpti_GraphData graph{};
  graph.node = reinterpret_cast<CUgraphNode>(static_cast<std::uintptr_t>(node));
  graph.originalNode = reinterpret_cast<CUgraphNode>(static_cast<std::uintptr_t>(original));
  graph.nodeType = CU_GRAPH_NODE_TYPE_KERNEL;
  CUpti_ResourceData resource{};
  resource.resourceDescriptor = &graph;
  played.callback(nullptr, CUPTI_CB_DOMAIN_RESOURCE, cbid, &resource);
}

/// CUDA creates graph node `node` on this thread: a launch under stream capture, or cudaGraphAdd*Node.
inline void create_graph_node(std::uint64_t node) { graph_node_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node); }
/// cudaGraphInstantiate (or cudaGraphClone) copies `original` into another graph as `node`.
inline void clone_graph_node(std::uint64_t node, std::uint64_t original) {
  graph_node_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node, original);
}
inline void destroy_graph_node(std::uint64_t node) { graph_node_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, node); }

/// What cudaGraphLaunch does under CUPTI with activity on: its API and external correlation
/// records, and one kernel record per node of graph `graph_id`, each carrying the launch's
/// correlation id and its node's id, one after another on `stream`.
inline void launch_graph(std::uint32_t graph_id, const std::vector<std::pair<std::uint64_t, const char*>>& kernels,
                         std::uint32_t stream, std::uint64_t duration_ns = 10000) {
  if (!activity_on()) return;
  const CUpti_ActivityAPI call = record_call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000);
  for (const auto& [node, mangled_name] : kernels) {
    CUpti_ActivityKernel10 kernel = kernel_record(call, mangled_name, stream, duration_ns);
    kernel.graphId = graph_id;
    kernel.graphNodeId = node;
    append_record(kernel);
  }
}

}  // namespace dlprof_test
