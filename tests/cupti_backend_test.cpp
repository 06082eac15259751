// The CUPTI backend driven through the Profiler, with the real libcupti walking the activity
// buffers and a played driver and CUPTI session around it: how start-up failures are reported,
// which activity kinds are enabled when, and that kernels launched inside ranges come out of a
// scheduled Profiler linked to those ranges exactly as Kineto links them.
#include <dlprof/cupti.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace {

using dlprof::detail::CudaDriver;
using dlprof::detail::CuptiBackend;
using dlprof::detail::CuptiLibrary;
using testing::HasSubstr;

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
  std::vector<std::uint64_t> external_ids;  // CUPTI's external correlation stack
  std::vector<std::uint8_t> pending;        // records completed at the next flush
  std::uint32_t next_correlation = 100;
};
Played played;

CudaDriver played_driver() {
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
  driver.get_error_name = [](CUresult result, const char** name) {
    *name = result == CUDA_ERROR_UNKNOWN ? "CUDA_ERROR_UNKNOWN" : "CUDA_ERROR_NO_DEVICE";
    return CUDA_SUCCESS;
  };
  return driver;
}

/// The real libcupti (it reads buffers and names callbacks without a driver), with the calls that
/// need a GPU played.
CuptiLibrary played_cupti() {
  CuptiLibrary cupti;
  std::string error;
  if (!cupti.open(error)) return cupti;
  cupti.get_version = [](std::uint32_t* version) {
    *version = 130001;
    return CUPTI_SUCCESS;
  };
  cupti.subscribe = [](CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) { return played.subscribe_result; };
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
void append_record(const Record& record) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&record);
  played.pending.insert(played.pending.end(), bytes, bytes + sizeof(Record));
}

/// What cudaLaunchKernel does under CUPTI with activity on: an API record on this thread, an external correlation
/// record for the id on top of the stack, and the kernel record, with timestamps from the clock
/// CUPTI was given.
void launch_kernel(const char* mangled_name, std::uint32_t stream) {
  const bool activity_on = played.timestamp != nullptr && played.enabled.size() > played.disabled.size();
  if (!activity_on) return;  // CUPTI records nothing while its activity kinds are off
  const std::uint32_t correlation = played.next_correlation++;
  CUpti_ActivityAPI call{};
  call.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  call.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  call.start = played.timestamp();
  call.end = played.timestamp();
  call.processId = static_cast<std::uint32_t>(::getpid());
  call.threadId = static_cast<std::uint32_t>(dlprof::detail::current_os_tid());
  call.correlationId = correlation;
  append_record(call);
  if (!played.external_ids.empty()) {
    CUpti_ActivityExternalCorrelation link{};
    link.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    link.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    link.externalId = played.external_ids.back();
    link.correlationId = correlation;
    append_record(link);
  }
  CUpti_ActivityKernel10 kernel{};
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.start = call.end + 2000;  // the GPU picks it up 2 µs after the launch returns
  kernel.end = kernel.start + 10000;
  kernel.deviceId = 0;
  kernel.contextId = 1;
  kernel.streamId = stream;
  kernel.gridX = 264;
  kernel.gridY = kernel.gridZ = 1;
  kernel.blockX = 256;
  kernel.blockY = kernel.blockZ = 1;
  kernel.registersPerThread = 32;
  kernel.correlationId = correlation;
  kernel.name = mangled_name;
  append_record(kernel);
}

class CuptiBackendTest : public testing::Test {
 protected:
  void SetUp() override {
    played = Played{};
    CuptiLibrary probe;
    std::string error;
    if (!probe.open(error)) GTEST_SKIP() << "libcupti is not available here: " << error;
  }
  void TearDown() override { dlprof::detail::g_gpu_backend.store(nullptr); }

  /// Makes `backend` the program's GPU backend, as including cupti.hpp makes the real one.
  static void use(CuptiBackend& backend) {
    static CuptiBackend* current = nullptr;
    current = &backend;
    dlprof::detail::g_gpu_backend.store(+[]() -> dlprof::detail::GpuBackend& { return *current; });
  }
};

TEST_F(CuptiBackendTest, ADriverWithoutADeviceGivesOneWarningNamingTheError) {
  played.init_result = CUDA_ERROR_UNKNOWN;
  CuptiBackend backend(played_driver(), played_cupti());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(backend.enable(false));
  EXPECT_FALSE(backend.enable(false));  // asked again: still off, and no second warning
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed,
            "dlprof: warning: GPU activity will not be recorded (CPU only): cuInit failed: CUDA_ERROR_UNKNOWN (999)\n");
  EXPECT_EQ(backend.unavailable_reason(), "cuInit failed: CUDA_ERROR_UNKNOWN (999)");
  EXPECT_TRUE(played.enabled.empty());
}

TEST_F(CuptiBackendTest, NoVisibleDeviceIsNamed) {
  played.device_count = 0;
  CuptiBackend backend(played_driver(), played_cupti());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(backend.enable(false));
  testing::internal::GetCapturedStderr();
  EXPECT_THAT(backend.unavailable_reason(), HasSubstr("no CUDA device is visible"));
}

TEST_F(CuptiBackendTest, AnotherProfilerOwningCuptiIsNamed) {
  played.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  CuptiBackend backend(played_driver(), played_cupti());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(backend.enable(false));
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              HasSubstr("cuptiSubscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39): another profiler "
                        "(Nsight Systems, nsys, or torch.profiler/Kineto) already owns CUPTI"));
}

TEST_F(CuptiBackendTest, RestrictedCountersAreNamedAndKindsAlreadyOnAreTurnedOff) {
  played.refused_kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  played.refusal = CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
  CuptiBackend backend(played_driver(), played_cupti());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(backend.enable(false));
  EXPECT_FALSE(backend.enable(false));
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, HasSubstr("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35): GPU performance counters are restricted "
                                 "to administrators"));
  EXPECT_EQ(printed.find("warning", printed.find("warning") + 1), std::string::npos) << "warned twice: " << printed;
  EXPECT_EQ(played.disabled, played.enabled);  // everything turned on before the refusal is off again
}

TEST_F(CuptiBackendTest, EnablesConcurrentKernelsNeverTheSerialisingKind) {
  CuptiBackend backend(played_driver(), played_cupti());
  ASSERT_TRUE(backend.enable(/*profile_memory=*/false));
  EXPECT_THAT(played.enabled,
              testing::ElementsAre(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                   CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                   CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                   CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_OVERHEAD));
  backend.disable();
  EXPECT_EQ(played.disabled, played.enabled);
  ASSERT_FALSE(played.flushes.empty());
  EXPECT_EQ(played.flushes.back(), CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  played.enabled.clear();
  ASSERT_TRUE(backend.enable(/*profile_memory=*/true));
  EXPECT_THAT(played.enabled, testing::Contains(CUPTI_ACTIVITY_KIND_MEMORY2));
  EXPECT_THAT(played.enabled, testing::Not(testing::Contains(CUPTI_ACTIVITY_KIND_KERNEL)));
  backend.disable();
}

TEST_F(CuptiBackendTest, ReadsDevicePropertiesFromTheDriver) {
  CuptiBackend backend(played_driver(), played_cupti());
  ASSERT_TRUE(backend.enable(false));
  backend.begin_window();
  const dlprof::detail::DeviceActivity activity = backend.end_window();
  ASSERT_EQ(activity.devices.size(), 1u);
  const dlprof::DeviceProperties& h100 = activity.devices[0];
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.compute_major, 9);
  EXPECT_EQ(h100.num_sms, 132);
  EXPECT_EQ(h100.shared_mem_per_block_optin, 232448);
  EXPECT_EQ(h100.total_global_mem, std::int64_t{85} << 30);
  EXPECT_EQ(activity.stats.cupti_version, "130001");
  EXPECT_EQ(activity.stats.driver_version, "13000");
  EXPECT_EQ(played.synchronizations, 1);  // end_window waits for the GPU, as torch.profiler does
  backend.disable();
}

nlohmann::json load_trace(const dlprof::Trace& trace) {
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "trace.json");
  return nlohmann::json::parse(std::string_view(out.data(), out.size()));
}

const nlohmann::json* find_by_external_id(const nlohmann::json& events, std::string_view category, std::int64_t id) {
  for (const auto& event : events)
    if (event.value("cat", "") == category && event["args"].value("External id", -1) == id) return &event;
  return nullptr;
}

TEST_F(CuptiBackendTest, KernelsOfAScheduledRunLinkToTheRangesThatLaunchedThem) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/1)));
  profiler.start();
  std::size_t enabled_before_recording = 0;
  for (int step = 0; step < 5; ++step) {
    if (step == 2) enabled_before_recording = played.enabled.size();  // step 1 was the warm-up
    {
      DLPROF_RANGE("train_step");
      {
        DLPROF_RANGE("forward");
        launch_kernel("_Z10gemm_tiledPKfS0_Pfiii", 7);
        launch_kernel("_Z9bias_reluPfPKfi", 7);
      }
      launch_kernel("_Z10sgd_updatePfPKffi", 13);
    }
    profiler.step();
  }
  profiler.stop();
  EXPECT_GT(enabled_before_recording, 0u) << "CUPTI is enabled in the warm-up step, before recording";
  EXPECT_TRUE(played.external_ids.empty()) << "every pushed id was popped";
  EXPECT_EQ(played.disabled.size(), played.enabled.size()) << "disabled once the schedule went idle";

  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->gpu.late_records, 0u);
  const nlohmann::json json = load_trace(*trace);
  const auto& events = json["traceEvents"];

  // Recorded steps 2 and 3: three launches each; warm-up and idle launches are not in the trace.
  std::vector<nlohmann::json> kernels, calls;
  for (const auto& event : events) {
    if (event.value("cat", "") == "kernel") kernels.push_back(event);
    if (event.value("cat", "") == "cuda_runtime") calls.push_back(event);
  }
  ASSERT_EQ(kernels.size(), 6u);
  ASSERT_EQ(calls.size(), 6u);

  for (const auto& kernel : kernels) {
    const auto& args = kernel["args"];
    const std::int64_t external_id = args.at("External id").get<std::int64_t>();
    const nlohmann::json* range = find_by_external_id(events, "user_annotation", external_id);
    ASSERT_NE(range, nullptr) << kernel.dump();
    const std::string name = kernel["name"];
    // Innermost range: forward for the two forward kernels, train_step for the optimizer's.
    EXPECT_EQ((*range)["name"], name.rfind("sgd_update", 0) == 0 ? "train_step" : "forward") << name;
    // The launch: same correlation, same External id, before the kernel and inside the range.
    const auto call = std::find_if(calls.begin(), calls.end(), [&](const nlohmann::json& c) {
      return c["args"]["correlation"] == args["correlation"];
    });
    ASSERT_NE(call, calls.end());
    EXPECT_EQ((*call)["name"], "cudaLaunchKernel");
    EXPECT_EQ((*call)["args"]["External id"], external_id);
    EXPECT_EQ((*call)["tid"], (*range)["tid"]);
    EXPECT_LT((*call)["ts"].get<double>(), kernel["ts"].get<double>());
    EXPECT_GE((*call)["ts"].get<double>(), (*range)["ts"].get<double>());
    EXPECT_LE((*call)["ts"].get<double>() + (*call)["dur"].get<double>(),
              (*range)["ts"].get<double>() + (*range)["dur"].get<double>());
    EXPECT_EQ(kernel["pid"], 0);
    EXPECT_EQ(kernel["tid"], args["stream"]);
    // 264 blocks on 132 SMs: 2 blocks of 256 threads per SM, 512 of its 2048 threads.
    EXPECT_EQ(args["est. achieved occupancy %"], 25);
  }

  // Each forward range has one GPU span over its two kernels on stream 7.
  int forward_spans = 0;
  for (const auto& event : events) {
    if (event.value("cat", "") != "gpu_user_annotation") continue;
    if (event["name"] == "forward") {
      ++forward_spans;
      EXPECT_EQ(event["tid"], 7);
    }
  }
  EXPECT_EQ(forward_spans, 2);
  ASSERT_EQ(json["deviceProperties"].size(), 1u);
  EXPECT_EQ(json["deviceProperties"][0]["numSms"], 132);
}

TEST_F(CuptiBackendTest, WarmUpKernelsAreDiscardedAndIdleStepsPushNothing) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                .schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/1, /*repeat=*/1)));
  profiler.start();
  std::vector<std::size_t> pushed_per_step;
  for (int step = 0; step < 4; ++step) {
    {
      DLPROF_RANGE("train_step");
      pushed_per_step.push_back(played.external_ids.size());
      launch_kernel("_Z4stepv", 7);
    }
    profiler.step();
  }
  profiler.stop();
  // Step 0 waits, step 1 warms up, step 2 records (ProfilerStep#2 and train_step pushed), step 3 is idle.
  EXPECT_THAT(pushed_per_step, testing::ElementsAre(0u, 0u, 2u, 0u));
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  ASSERT_EQ(trace->gpu_events.size(), 2u);  // the kernel and its gpu_user_annotation
  for (const dlprof::GpuEvent& work : trace->gpu_events) EXPECT_NE(work.external_id, 0u);
  EXPECT_EQ(trace->api_events.size(), 1u);
}

}  // namespace
