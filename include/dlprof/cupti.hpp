// dlprof/cupti.hpp: GPU activity through CUPTI. Link dlprof::cupti (profiler.hpp then includes
// this header) or include it yourself, and `.activities({Activity::CPU, Activity::CUDA})` records
// every kernel, copy, fill, synchronisation and CUDA API call of the recorded steps, linked to the
// range that launched it:
//
//   dlprof::Profiler prof(dlprof::ProfilerOptions{}
//       .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
//       .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/3)));
//
// Start-up is probed in order: driver and devices, CUPTI library and version, subscription,
// activity kinds. Any failure (no driver, no device, CUPTI missing, another profiler such as
// Nsight Systems owning CUPTI, counters restricted to administrators) prints one warning naming
// the cause and the CUDA/CUPTI error, and the program goes on recording CPU activity only.
//
// Kinds collected: CONCURRENT_KERNEL (never KIND_KERNEL, which serialises kernels), MEMCPY,
// MEMCPY2, MEMSET, RUNTIME, DRIVER, SYNCHRONIZATION, EXTERNAL_CORRELATION, OVERHEAD, and MEMORY2
// with profile_memory. CUPTI is enabled from the warm-up steps on, so its start-up cost falls
// outside the recorded steps, and disabled when the schedule goes idle.
//
// Work a CUDA graph replays is attributed to the op or range that captured it: CUPTI's graph node
// callbacks tell which scope was open on the capturing thread as each node was created, for graphs
// captured while a Profiler records, in this window or an earlier one
// (detail/backends/graph_node_captures.hpp).
//
// Where the driver's NVML is present, each GPU's SM and memory clocks, power and clock limits
// are read every GpuCollectionOptions::device_counter_period while a window records, and written
// as counter tracks on the GPU's row.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/detail/backends/cupti_library.hpp"
#include "dlprof/detail/backends/cupti_records.hpp"
#include "dlprof/detail/backends/gpu_activity.hpp"
#include "dlprof/detail/backends/gpu_clock_sampler.hpp"
#include "dlprof/detail/backends/graph_node_captures.hpp"
#include "dlprof/detail/backends/nvml_library.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/device_properties.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The process's CUPTI activity session. CUPTI is process-wide, so there is one, never
/// destroyed: CUPTI may still call back while static objects are being torn down at exit.
class CuptiBackend final : public GpuBackend {
 public:
  static CuptiBackend& instance() {
    static CuptiBackend* backend = new CuptiBackend();
    return *backend;
  }

  /// A backend that opens libcuda.so.1 and libcupti itself (what instance() holds).
  CuptiBackend() = default;
  /// A backend over entry points given instead of opened: how the tests play a driver without a
  /// device, CUPTI owned by another profiler, or counters restricted to administrators. Without
  /// `nvml`, no clocks or power are read.
  CuptiBackend(CudaDriver driver, CuptiLibrary cupti, std::optional<NvmlLibrary> nvml = std::nullopt)
      : libraries_given_(true), driver_(std::move(driver)), cupti_(std::move(cupti)), nvml_(std::move(nvml)) {}

  bool enable(const GpuCollectionOptions& options) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!probed_) {
      probed_ = true;
      available_ = probe();
    }
    if (!available_) return false;
    collector_->set_limits(options.max_records_per_window, options.keep_newest);
    if (enabled_) return true;
    kinds_ = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
              CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
              CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,
              CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
              CUPTI_ACTIVITY_KIND_OVERHEAD};
    if (options.profile_memory) kinds_.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
    for (std::size_t i = 0; i < kinds_.size(); ++i) {
      const CUptiResult result = cupti_.enable(kinds_[i]);
      if (result == CUPTI_SUCCESS) continue;
      for (std::size_t j = 0; j < i; ++j) cupti_.disable(kinds_[j]);
      available_ = false;
      warn_unavailable(fmt::format("cuptiActivityEnable(kind {}) failed: {}", static_cast<int>(kinds_[i]),
                                   cupti_.describe(result)));
      return false;
    }
    leave_out_untraced_apis();
    counter_period_ = options.device_counter_period;
    g_push_external_id.store(&push_external_id, std::memory_order_relaxed);
    g_pop_external_id.store(&pop_external_id, std::memory_order_relaxed);
    enabled_ = true;
    return true;
  }

  void disable() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!enabled_) return;
    sampler_.stop();
    for (const CUpti_ActivityKind kind : kinds_) cupti_.disable(kind);
    cupti_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // hand back buffers; nothing is collecting
    enabled_ = false;
  }

  void begin_window() override {
    cupti_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // warm-up records: read and discarded
    collector_->begin_window(clock(), devices_);
    sampler_.stop();
    std::uint64_t dropped = 0;
    (void)sampler_.take(dropped);
    if (sampler_.attached() && counter_period_.count() > 0) {
      sampler_.read();  // the clocks as the window opens, however short it is
      sampler_.start(counter_period_);
    }
  }

  DeviceActivity end_window() override {
    // Like torch.profiler, wait for the GPU work the window launched, so it is in this trace.
    CUcontext context = nullptr;
    if (driver_.ctx_get_current(&context) == CUDA_SUCCESS && context != nullptr) driver_.ctx_synchronize();
    cupti_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    DeviceActivity activity = collector_->end_window();
    if (sampler_.attached() && counter_period_.count() > 0) {
      sampler_.stop();
      sampler_.read();  // and as it closes
      activity.device_counters = sampler_.take(activity.stats.dropped_device_counters);
    }
    activity.graph_node_captures = graph_nodes_.of(activity.gpu);
    activity.stats.cupti_version = cupti_version_;
    activity.stats.driver_version = driver_version_;
    return activity;
  }

  void discard_before(std::int64_t tick) override {
    collector_->discard_before(clock().from_ticks(tick));
    sampler_.discard_before(clock().from_ticks(tick));
  }

  /// The runtime and driver calls the trace leaves out (is_untraced_api), by callback id.
  struct UntracedApis {
    std::vector<CUpti_CallbackId> runtime, driver;
  };
  const UntracedApis& untraced_apis() const noexcept { return untraced_; }

  /// Why GPU activity is not collected; empty while it is, or before the first attempt.
  std::string unavailable_reason() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return unavailable_reason_;
  }

 private:
  /// Asks CUPTI to record none of the calls the trace leaves out, where it can (CUDA 12.6 and
  /// later): enabling RUNTIME and DRIVER turns every call back on, so after each enable. The
  /// collector drops the records of those calls that an older CUPTI still writes.
  void leave_out_untraced_apis() {
    if (cupti_.enable_runtime_api != nullptr)
      for (const CUpti_CallbackId cbid : untraced_.runtime) cupti_.enable_runtime_api(cbid, 0);
    if (cupti_.enable_driver_api != nullptr)
      for (const CUpti_CallbackId cbid : untraced_.driver) cupti_.enable_driver_api(cbid, 0);
  }

  /// The callback ids of the untraced calls this CUPTI knows, found by name once: their ids
  /// differ from one CUDA version to the next.
  void find_untraced_apis() {
    if (cupti_.get_callback_name == nullptr) return;
    const auto find = [this](CUpti_CallbackDomain domain, std::uint32_t end, std::vector<CUpti_CallbackId>& ids) {
      for (std::uint32_t cbid = 1; cbid < end; ++cbid) {
        const char* name = nullptr;
        if (cupti_.get_callback_name(domain, cbid, &name) == CUPTI_SUCCESS && name != nullptr &&
            is_untraced_api(api_display_name(name)))
          ids.push_back(cbid);
      }
    };
    find(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, untraced_.runtime);
    find(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, untraced_.driver);
  }

  bool probe() {
    std::string error;
    if (!libraries_given_ && !driver_.open(error)) return warn_unavailable(error);
    if (const CUresult result = driver_.init(0); result != CUDA_SUCCESS)
      return warn_unavailable(fmt::format("cuInit failed: {}", driver_.describe(result)));
    int count = 0;
    if (const CUresult result = driver_.device_get_count(&count); result != CUDA_SUCCESS)
      return warn_unavailable(fmt::format("cuDeviceGetCount failed: {}", driver_.describe(result)));
    if (count == 0) return warn_unavailable("no CUDA device is visible (check CUDA_VISIBLE_DEVICES)");
    int driver_version = 0;
    if (driver_.driver_get_version != nullptr && driver_.driver_get_version(&driver_version) == CUDA_SUCCESS)
      driver_version_ = fmt::format("{}", driver_version);
    for (int ordinal = 0; ordinal < count; ++ordinal) devices_.push_back(device_properties(ordinal));

    if (!libraries_given_ && !cupti_.open(error)) return warn_unavailable(error);
    std::uint32_t version = 0;
    if (const CUptiResult result = cupti_.get_version(&version); result != CUPTI_SUCCESS)
      return warn_unavailable(fmt::format("cuptiGetVersion failed: {}", cupti_.describe(result)));
    cupti_version_ = fmt::format("{}", version);
    if (const CUptiResult result = cupti_.subscribe(&subscriber_, &on_callback, nullptr); result != CUPTI_SUCCESS)
      return warn_unavailable(fmt::format("cuptiSubscribe failed: {}", cupti_.describe(result)));
    // API records carry the OS thread id, the tid CPU events are written with.
    if (cupti_.set_thread_id_type != nullptr) cupti_.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    select_clock();
    s_clock_ = BackendClock{true, sample_clocks(), process_ns_per_tick()};
    if (cupti_.register_timestamp_callback == nullptr ||
        cupti_.register_timestamp_callback(&timestamp) != CUPTI_SUCCESS)
      s_clock_.ticks = false;  // CUPTI keeps CLOCK_REALTIME, which the collector takes as it is
    collector_ = std::make_unique<RecordCollector>(cupti_, kDefaultGpuRecordsPerWindow);
    pool_ = std::make_unique<BufferPool>(/*preallocated=*/8, /*max_buffers=*/64);
    s_active_ = this;  // CUPTI's callbacks carry no user pointer
    if (const CUptiResult result = cupti_.register_callbacks(&buffer_requested, &buffer_completed);
        result != CUPTI_SUCCESS)
      return warn_unavailable(fmt::format("cuptiActivityRegisterCallbacks failed: {}", cupti_.describe(result)));
    find_untraced_apis();
    follow_graph_nodes();
    attach_nvml();
    return true;
  }

  /// Asks CUPTI to call on_callback() as graph nodes are created, cloned and destroyed. Without
  /// those callbacks (a CUPTI before 11.7), replayed work links to its graph launch alone.
  void follow_graph_nodes() {
    if (cupti_.enable_callback == nullptr || cupti_.get_graph_node_id == nullptr) return;
    for (const CUpti_CallbackId cbid : {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
                                        CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING})
      cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, cbid);
  }

  /// A graph node callback, on the thread creating, cloning or destroying the node.
  void on_graph_node(CUpti_CallbackId cbid, const CUpti_GraphData& graph) noexcept {
    std::uint64_t node = 0;
    if (graph.node == nullptr || cupti_.get_graph_node_id(graph.node, &node) != CUPTI_SUCCESS) return;
    switch (cbid) {
      case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
        if (const CorrelatedScope* scope = t_correlated_scopes.innermost()) graph_nodes_.created(node, *scope);
        break;
      case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED: {
        std::uint64_t original = 0;
        if (graph.originalNode != nullptr && cupti_.get_graph_node_id(graph.originalNode, &original) == CUPTI_SUCCESS)
          graph_nodes_.cloned(node, original);
        break;
      }
      case CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING: graph_nodes_.destroyed(node); break;
      default: break;
    }
  }

  /// Finds NVML and the devices in it, for clocks and power. Where it cannot, one warning says
  /// why, and kernels, copies and calls are recorded as ever.
  void attach_nvml() {
    std::string reason;
    if (!libraries_given_) {
      nvml_.emplace();
      if (!nvml_->open("libnvidia-ml.so.1", reason)) nvml_.reset();
    }
    if (nvml_) {
      std::vector<std::string> bus_ids;
      for (int ordinal = 0; ordinal < static_cast<int>(devices_.size()); ++ordinal) bus_ids.push_back(pci_bus_id(ordinal));
      if (sampler_.attach(*nvml_, bus_ids, &timestamp_ns, reason) && reason.empty()) return;
    }
    if (!reason.empty()) detail::print_warning("GPU clocks and power will not be recorded: " + reason);
  }

  std::string pci_bus_id(int ordinal) const {
    CUdevice device = 0;
    char bus_id[32] = {};
    if (driver_.device_get_pci_bus_id == nullptr || driver_.device_get(&device, ordinal) != CUDA_SUCCESS ||
        driver_.device_get_pci_bus_id(bus_id, sizeof(bus_id) - 1, device) != CUDA_SUCCESS)
      return {};
    return bus_id;
  }

  DeviceProperties device_properties(int ordinal) const {
    DeviceProperties properties;
    properties.id = ordinal;
    CUdevice device = 0;
    if (driver_.device_get(&device, ordinal) != CUDA_SUCCESS) return properties;
    char name[256] = {};
    if (driver_.device_get_name(name, sizeof(name) - 1, device) == CUDA_SUCCESS) properties.name = name;
    std::size_t memory = 0;
    if (driver_.device_total_mem(&memory, device) == CUDA_SUCCESS)
      properties.total_global_mem = static_cast<std::int64_t>(memory);
    const auto attribute = [&](CUdevice_attribute which) {
      int value = 0;
      return driver_.device_get_attribute(&value, which, device) == CUDA_SUCCESS ? value : 0;
    };
    properties.compute_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    properties.compute_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    properties.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    properties.max_threads_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    properties.regs_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    properties.regs_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    properties.warp_size = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    properties.shared_mem_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    properties.shared_mem_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    properties.shared_mem_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    properties.num_sms = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    return properties;
  }

  /// Prints the one warning of the process and returns false.
  bool warn_unavailable(std::string reason) {
    unavailable_reason_ = std::move(reason);
    detail::print_warning("GPU activity will not be recorded (CPU only): " + unavailable_reason_);
    return false;
  }

  static BackendClock clock() noexcept { return s_clock_; }

  static std::uint64_t CUPTIAPI timestamp() {
    return static_cast<std::uint64_t>(s_clock_.from_ticks(now_ticks()));
  }
  static std::int64_t timestamp_ns() { return s_clock_.from_ticks(now_ticks()); }

  static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || data == nullptr) return;
    const void* descriptor = static_cast<const CUpti_ResourceData*>(data)->resourceDescriptor;
    if (descriptor != nullptr) s_active_->on_graph_node(cbid, *static_cast<const CUpti_GraphData*>(descriptor));
  }

  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *buffer = s_active_->pool_->acquire();
    *size = *buffer != nullptr ? BufferPool::kBufferBytes : 0;  // no buffer: CUPTI drops and counts
    *max_records = 0;                                            // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer,
                                        std::size_t /*size*/, std::size_t valid_size) {
    CuptiBackend& backend = *s_active_;
    if (buffer != nullptr) backend.collector_->buffer_completed(context, stream, buffer, valid_size);
    backend.pool_->release(buffer);
  }

  static void push_external_id(std::uint64_t id) noexcept {
    s_active_->cupti_.push_external_correlation_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
  }
  static void pop_external_id() noexcept {
    std::uint64_t popped = 0;
    s_active_->cupti_.pop_external_correlation_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
  }

  mutable std::mutex mutex_;  // guards probing and enabling
  bool libraries_given_ = false;
  bool probed_ = false;
  bool available_ = false;
  bool enabled_ = false;
  std::string unavailable_reason_;
  CudaDriver driver_;
  CuptiLibrary cupti_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::vector<CUpti_ActivityKind> kinds_;
  std::vector<DeviceProperties> devices_;
  std::string cupti_version_;
  UntracedApis untraced_;
  std::string driver_version_;
  std::unique_ptr<BufferPool> pool_;  // 32 MiB lent to CUPTI, up to 256 MiB under load
  std::unique_ptr<RecordCollector> collector_;
  GraphNodeCaptures graph_nodes_;
  std::optional<NvmlLibrary> nvml_;
  GpuClockSampler sampler_;
  std::chrono::nanoseconds counter_period_{0};
  // Read by CUPTI's callbacks, which carry no user pointer; set by probe() before CUPTI can call.
  static inline BackendClock s_clock_{};
  static inline CuptiBackend* s_active_ = nullptr;
};

inline GpuBackend& cupti_backend() { return CuptiBackend::instance(); }

/// Registers the backend when any translation unit of the program includes this header.
inline const bool g_cupti_backend_registered = [] {
  g_gpu_backend.store(&cupti_backend, std::memory_order_release);
  return true;
}();

}  // namespace detail
DLPROF_END_NAMESPACE
