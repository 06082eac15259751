// dlprof/detail/backends/cupti_library.hpp: the CUDA driver and CUPTI, opened at run time.
//
// Why dlopen rather than linking CUDA::cupti and CUDA::cuda_driver: a program built with GPU
// collection must still start where there is no driver (a CPU-only CI runner, a login node) or no
// CUPTI next to it. Linked, the loader would refuse to start it; opened, a missing library is one
// warning and a CPU-only trace. Only the headers' types and constants are compiled in.
#pragma once

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A symbol of a dlopen'ed library as a typed function pointer; null when absent.
template <class Function>
Function load_symbol(void* library, const char* name) noexcept {
  return reinterpret_cast<Function>(::dlsym(library, name));
}

/// What CUPTI's error codes mean for someone starting a profiler, for the ones seen in practice.
inline std::string_view cupti_error_hint(int code) noexcept {
  switch (code) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return "GPU performance counters are restricted to administrators (driver option "
             "NVreg_RestrictProfilingToAdminUsers=1): run as root or set the option to 0";
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return "another profiler (Nsight Systems, nsys, or torch.profiler/Kineto) already owns CUPTI in this process";
    case CUPTI_ERROR_UNKNOWN: return "no usable CUDA driver or device";
    case CUPTI_ERROR_NOT_INITIALIZED: return "CUPTI could not initialise the CUDA driver";
    default: return {};
  }
}

/// The few driver API entry points dlprof needs: device discovery, properties, synchronisation.
struct CudaDriver {
  CUresult (*init)(unsigned int flags) = nullptr;
  CUresult (*driver_get_version)(int* version) = nullptr;
  CUresult (*device_get_count)(int* count) = nullptr;
  CUresult (*device_get)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*device_get_attribute)(int* value, CUdevice_attribute attribute, CUdevice device) = nullptr;
  CUresult (*device_get_name)(char* name, int length, CUdevice device) = nullptr;
  CUresult (*device_total_mem)(std::size_t* bytes, CUdevice device) = nullptr;
  CUresult (*ctx_get_current)(CUcontext* context) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*get_error_name)(CUresult error, const char** name) = nullptr;
  /// "0000:3b:00.0": how NVML finds the device; null in a driver without it.
  CUresult (*device_get_pci_bus_id)(char* bus_id, int length, CUdevice device) = nullptr;

  /// Opens libcuda.so.1; on failure returns false with the reason in `error`.
  bool open(std::string& error) {
    void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = ::dlerror();
      error = fmt::format("no CUDA driver: cannot load libcuda.so.1 ({})", reason != nullptr ? reason : "not found");
      return false;
    }
    init = load_symbol<decltype(init)>(library, "cuInit");
    driver_get_version = load_symbol<decltype(driver_get_version)>(library, "cuDriverGetVersion");
    device_get_count = load_symbol<decltype(device_get_count)>(library, "cuDeviceGetCount");
    device_get = load_symbol<decltype(device_get)>(library, "cuDeviceGet");
    device_get_attribute = load_symbol<decltype(device_get_attribute)>(library, "cuDeviceGetAttribute");
    device_get_name = load_symbol<decltype(device_get_name)>(library, "cuDeviceGetName");
    device_total_mem = load_symbol<decltype(device_total_mem)>(library, "cuDeviceTotalMem_v2");
    ctx_get_current = load_symbol<decltype(ctx_get_current)>(library, "cuCtxGetCurrent");
    ctx_synchronize = load_symbol<decltype(ctx_synchronize)>(library, "cuCtxSynchronize");
    get_error_name = load_symbol<decltype(get_error_name)>(library, "cuGetErrorName");
    device_get_pci_bus_id = load_symbol<decltype(device_get_pci_bus_id)>(library, "cuDeviceGetPCIBusId");
    if (init == nullptr || device_get_count == nullptr || device_get == nullptr || device_get_attribute == nullptr ||
        device_get_name == nullptr || device_total_mem == nullptr || ctx_get_current == nullptr ||
        ctx_synchronize == nullptr) {
      error = "the CUDA driver (libcuda.so.1) lacks an entry point dlprof needs; it is too old";
      return false;
    }
    return true;
  }

  /// "CUDA_ERROR_NO_DEVICE (100)".
  std::string describe(CUresult result) const {
    const char* name = nullptr;
    if (get_error_name == nullptr || get_error_name(result, &name) != CUDA_SUCCESS || name == nullptr)
      return fmt::format("CUDA error {}", static_cast<int>(result));
    return fmt::format("{} ({})", name, static_cast<int>(result));
  }
};

/// CUPTI's activity API, as far as dlprof uses it.
struct CuptiLibrary {
  CUptiResult (*get_version)(std::uint32_t* version) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult result, const char** text) = nullptr;
  CUptiResult (*subscribe)(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* data) = nullptr;
  CUptiResult (*set_thread_id_type)(CUpti_ActivityThreadIdType type) = nullptr;
  CUptiResult (*register_timestamp_callback)(CUpti_TimestampCallbackFunc callback) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc requested,
                                    CUpti_BuffersCallbackCompleteFunc completed) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind kind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind kind) = nullptr;
  CUptiResult (*flush_all)(std::uint32_t flag) = nullptr;
  CUptiResult (*get_next_record)(std::uint8_t* buffer, std::size_t valid_size, CUpti_Activity** record) = nullptr;
  CUptiResult (*get_num_dropped_records)(CUcontext context, std::uint32_t stream, std::size_t* dropped) = nullptr;
  CUptiResult (*get_callback_name)(CUpti_CallbackDomain domain, std::uint32_t cbid, const char** name) = nullptr;
  CUptiResult (*push_external_correlation_id)(CUpti_ExternalCorrelationKind kind, std::uint64_t id) = nullptr;
  CUptiResult (*pop_external_correlation_id)(CUpti_ExternalCorrelationKind kind, std::uint64_t* id) = nullptr;
  /// Records of one runtime or driver call on or off; null in CUPTIs before CUDA 12.6.
  CUptiResult (*enable_runtime_api)(CUpti_CallbackId cbid, std::uint8_t enable) = nullptr;
  CUptiResult (*enable_driver_api)(CUpti_CallbackId cbid, std::uint8_t enable) = nullptr;
  /// One callback of the subscriber on or off: the graph node callbacks; null if absent.
  CUptiResult (*enable_callback)(std::uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid) = nullptr;
  /// The id of a graph node, as the records of the work it replays carry it; null if absent.
  CUptiResult (*get_graph_node_id)(CUgraphNode node, std::uint64_t* id) = nullptr;

  /// Opens libcupti.so.<major> of the CUPTI these headers describe: first where the dynamic
  /// loader looks, then in the toolkit dlprof was configured with; DLPROF_CUPTI_LIBRARY names
  /// another file. On failure returns false with the reason in `error`.
  bool open(std::string& error) {
    std::vector<std::string> candidates;
    if (const char* path = std::getenv("DLPROF_CUPTI_LIBRARY"); path != nullptr && *path != '\0')
      candidates.emplace_back(path);
    const std::string soname = fmt::format("libcupti.so.{}", CUPTI_API_VERSION / 10000);
    candidates.push_back(soname);
#if defined(DLPROF_CUPTI_LIBRARY_DIR)
    candidates.push_back(fmt::format("{}/{}", DLPROF_CUPTI_LIBRARY_DIR, soname));
#endif
    void* library = nullptr;
    std::string reasons;
    for (const std::string& candidate : candidates) {
      library = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library != nullptr) break;
      const char* reason = ::dlerror();
      reasons += fmt::format("{}{}", reasons.empty() ? "" : "; ", reason != nullptr ? reason : candidate);
    }
    if (library == nullptr) {
      error = fmt::format("cannot load CUPTI ({}); set DLPROF_CUPTI_LIBRARY to its path", reasons);
      return false;
    }
    get_version = load_symbol<decltype(get_version)>(library, "cuptiGetVersion");
    get_result_string = load_symbol<decltype(get_result_string)>(library, "cuptiGetResultString");
    subscribe = load_symbol<decltype(subscribe)>(library, "cuptiSubscribe");
    set_thread_id_type = load_symbol<decltype(set_thread_id_type)>(library, "cuptiSetThreadIdType");
    register_timestamp_callback =
        load_symbol<decltype(register_timestamp_callback)>(library, "cuptiActivityRegisterTimestampCallback");
    register_callbacks = load_symbol<decltype(register_callbacks)>(library, "cuptiActivityRegisterCallbacks");
    enable = load_symbol<decltype(enable)>(library, "cuptiActivityEnable");
    disable = load_symbol<decltype(disable)>(library, "cuptiActivityDisable");
    flush_all = load_symbol<decltype(flush_all)>(library, "cuptiActivityFlushAll");
    get_next_record = load_symbol<decltype(get_next_record)>(library, "cuptiActivityGetNextRecord");
    get_num_dropped_records =
        load_symbol<decltype(get_num_dropped_records)>(library, "cuptiActivityGetNumDroppedRecords");
    get_callback_name = load_symbol<decltype(get_callback_name)>(library, "cuptiGetCallbackName");
    push_external_correlation_id =
        load_symbol<decltype(push_external_correlation_id)>(library, "cuptiActivityPushExternalCorrelationId");
    pop_external_correlation_id =
        load_symbol<decltype(pop_external_correlation_id)>(library, "cuptiActivityPopExternalCorrelationId");
    enable_runtime_api = load_symbol<decltype(enable_runtime_api)>(library, "cuptiActivityEnableRuntimeApi");
    enable_driver_api = load_symbol<decltype(enable_driver_api)>(library, "cuptiActivityEnableDriverApi");
    enable_callback = load_symbol<decltype(enable_callback)>(library, "cuptiEnableCallback");
    get_graph_node_id = load_symbol<decltype(get_graph_node_id)>(library, "cuptiGetGraphNodeId");
    if (get_version == nullptr || subscribe == nullptr || register_callbacks == nullptr || enable == nullptr ||
        disable == nullptr || flush_all == nullptr || get_next_record == nullptr ||
        push_external_correlation_id == nullptr || pop_external_correlation_id == nullptr) {
      error = "the CUPTI library found lacks an entry point dlprof needs; it is older than CUDA 11";
      return false;
    }
    return true;
  }

  /// "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35): <what it means>".
  std::string describe(CUptiResult result) const {
    const char* text = nullptr;
    std::string described = get_result_string != nullptr && get_result_string(result, &text) == CUPTI_SUCCESS &&
                                    text != nullptr
                                ? fmt::format("{} ({})", text, static_cast<int>(result))
                                : fmt::format("CUPTI error {}", static_cast<int>(result));
    if (const std::string_view hint = cupti_error_hint(result); !hint.empty()) described += fmt::format(": {}", hint);
    return described;
  }
};

}  // namespace detail
DLPROF_END_NAMESPACE
