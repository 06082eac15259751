// The CUPTI backend driven through the Profiler, with the real libcupti walking the activity
// buffers and a played driver and CUPTI session around it: how start-up failures are reported,
// which activity kinds are enabled when, and that kernels launched inside ranges come out of a
// scheduled Profiler linked to those ranges exactly as Kineto links them.
#include <dlprof/cupti.hpp>
#include <dlprof/analysis/call_stacks.hpp>
#include <dlprof/analysis/cuda_graphs.hpp>
#include <dlprof/analysis/kernel_attribution.hpp>
#include <dlprof/analysis/kernel_type.hpp>
#include <dlprof/collective.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "played_cuda.hpp"

namespace {

using dlprof::detail::CuptiBackend;
using dlprof::detail::CuptiLibrary;
using dlprof_test::clone_graph_node;
using dlprof_test::create_graph_node;
using dlprof_test::destroy_graph_node;
using dlprof_test::launch_graph;
using dlprof_test::launch_kernel;
using dlprof_test::played;
using dlprof_test::played_cupti;
using dlprof_test::played_driver;
using dlprof_test::Played;
using testing::HasSubstr;

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
  EXPECT_FALSE(backend.enable({}));
  EXPECT_FALSE(backend.enable({}));  // asked again: still off, and no second warning
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
  EXPECT_FALSE(backend.enable({}));
  testing::internal::GetCapturedStderr();
  EXPECT_THAT(backend.unavailable_reason(), HasSubstr("no CUDA device is visible"));
}

TEST_F(CuptiBackendTest, AnotherProfilerOwningCuptiIsNamed) {
  played.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  CuptiBackend backend(played_driver(), played_cupti());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(backend.enable({}));
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              HasSubstr("cuptiSubscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39): another profiler "
                        "(Nsight Systems, nsys, or torch.profiler/Kineto) already owns CUPTI"));
}

TEST_F(CuptiBackendTest, RestrictedCountersAreNamedAndKindsAlreadyOnAreTurnedOff) {
  played.refused_kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  played.refusal = CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
  CuptiBackend backend(played_driver(), played_cupti());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(backend.enable({}));
  EXPECT_FALSE(backend.enable({}));
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, HasSubstr("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35): GPU performance counters are restricted "
                                 "to administrators"));
  EXPECT_EQ(printed.find("warning", printed.find("warning") + 1), std::string::npos) << "warned twice: " << printed;
  EXPECT_EQ(played.disabled, played.enabled);  // everything turned on before the refusal is off again
}

TEST_F(CuptiBackendTest, EnablesConcurrentKernelsNeverTheSerialisingKind) {
  CuptiBackend backend(played_driver(), played_cupti());
  ASSERT_TRUE(backend.enable({}));
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
  ASSERT_TRUE(backend.enable({/*profile_memory=*/true}));
  EXPECT_THAT(played.enabled, testing::Contains(CUPTI_ACTIVITY_KIND_MEMORY2));
  EXPECT_THAT(played.enabled, testing::Not(testing::Contains(CUPTI_ACTIVITY_KIND_KERNEL)));
  backend.disable();
}

TEST_F(CuptiBackendTest, TheProfilersRecordLimitBoundsAWindow) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                .gpu_records_per_window(4));
  profiler.start();
  for (int i = 0; i < 3; ++i) launch_kernel("_Z4stepv", 7);  // 3 calls, 3 kernels: 6 records
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->gpu.records, 6u);
  EXPECT_EQ(trace->gpu.dropped_records, 2u);
  EXPECT_THROW(dlprof::ProfilerOptions{}.gpu_records_per_window(0), std::invalid_argument);
}

TEST_F(CuptiBackendTest, ReadsDevicePropertiesFromTheDriver) {
  CuptiBackend backend(played_driver(), played_cupti());
  ASSERT_TRUE(backend.enable({}));
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

// The calls LibTorch makes around every op that change nothing on the GPU (cudaGetDevice,
// cudaGetLastError, cuDevicePrimaryCtxGetState): CUPTI is asked not to record them, each time its
// kinds are enabled, and a record of one that an older CUPTI still writes stays out of the trace
// while the launch beside it is kept.
TEST_F(CuptiBackendTest, CallsThatChangeNothingOnTheGpuStayOutOfTheTrace) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  dlprof::Profiler profiler(
      dlprof::ProfilerOptions{}.activities({dlprof::Activity::CPU, dlprof::Activity::CUDA}));
  profiler.start();
  {
    DLPROF_RANGE("op");
    dlprof_test::record_call(CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020);
    launch_kernel("_Z4stepv", 7);
    dlprof_test::record_call(CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020);
  }
  profiler.stop();
  EXPECT_THAT(played.runtime_apis_off, testing::IsSupersetOf({CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
                                                               CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
                                                               CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_v10000}));
  EXPECT_THAT(played.runtime_apis_off, testing::Not(testing::Contains(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)));
  EXPECT_THAT(played.runtime_apis_off,
              testing::Not(testing::Contains(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020)));
  EXPECT_THAT(played.driver_apis_off, testing::IsSupersetOf({CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxGetState,
                                                              CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent}));
  EXPECT_THAT(played.driver_apis_off, testing::Not(testing::Contains(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)));

  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  const nlohmann::json json = load_trace(*trace);
  std::vector<std::string> calls;
  for (const auto& event : json["traceEvents"])
    if (event.value("cat", "") == "cuda_runtime") calls.push_back(event["name"]);
  EXPECT_THAT(calls, testing::ElementsAre("cudaLaunchKernel"));
}

TEST(UntracedApiTest, QueriesAreLeftOutUnderEveryEntryPointNameAndWorkIsKept) {
  using dlprof::detail::is_untraced_api;
  for (const char* name : {"cudaGetDevice", "cudaStreamIsCapturing_ptsz", "cudaStreamGetCaptureInfo_v2",
                           "cudaStreamGetCaptureInfo_v2_ptsz", "cuDevicePrimaryCtxGetState", "cuCtxGetDevice_v2",
                           "cuKernelGetName", "cudaGetDriverEntryPointByVersion_ptsz"})
    EXPECT_TRUE(is_untraced_api(name)) << name;
  for (const char* name : {"cudaLaunchKernel", "cudaLaunchKernelExC_ptsz", "cuLaunchKernel", "cudaMemcpyAsync",
                           "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMalloc", "cudaEventQuery",
                           "cudaGraphLaunch", "cudaGetDeviceX", "", "_v2", "cudaGetDevice_vX"})
    EXPECT_FALSE(is_untraced_api(name)) << name;
}

// An NCCL all-reduce: its kernel links to the nccl:all_reduce range inside the collective's
// record_param_comms op, as Kineto links it to c10d's nccl:all_reduce op, and is communication to
// HTA's kernel types.
TEST_F(CuptiBackendTest, NcclKernelsLinkToTheirCollective) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.activities({dlprof::Activity::CPU, dlprof::Activity::CUDA}));
  profiler.start();
  {
    DLPROF_RANGE("all_reduce_gradients", dlprof::Category::Communication);
    dlprof::Collective call{"allreduce", "nccl", "Float", 1 << 20, 1 << 20, 8, 3};
    call.seq = 11;
    const dlprof::ScopedCollective recorded(call);
    launch_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 21);
  }
  launch_kernel("_Z9bias_reluPfPKfi", 7);
  profiler.stop();
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  ASSERT_EQ(trace->collectives.size(), 1u);
  EXPECT_EQ(trace->collectives[0].seq, 11);
  const nlohmann::json json = load_trace(*trace);
  const auto& events = json["traceEvents"];
  const nlohmann::json* op = nullptr;
  const nlohmann::json* nccl = nullptr;
  for (const auto& event : events) {
    if (event.value("name", "") == "record_param_comms") op = &event;
    if (event.value("cat", "") == "kernel" && event.value("name", "").rfind("ncclDevKernel", 0) == 0) nccl = &event;
  }
  ASSERT_NE(op, nullptr);
  ASSERT_NE(nccl, nullptr);
  const nlohmann::json* range = find_by_external_id(events, "user_annotation", (*nccl)["args"].at("External id").get<std::int64_t>());
  ASSERT_NE(range, nullptr);
  EXPECT_EQ((*range)["name"], "nccl:all_reduce");
  EXPECT_LE((*op)["ts"].get<double>(), (*range)["ts"].get<double>());
  EXPECT_GE((*op)["ts"].get<double>() + (*op)["dur"].get<double>(),
            (*range)["ts"].get<double>() + (*range)["dur"].get<double>());
  EXPECT_EQ((*op)["args"]["Collective name"], "allreduce");
  EXPECT_EQ((*op)["args"]["Group size"], 8);
  for (const dlprof::GpuEvent& work : trace->gpu_events) {
    if (work.kind != dlprof::GpuEventKind::Kernel) continue;
    const std::string& name = trace->names[work.name];
    EXPECT_EQ(dlprof::analysis::kernel_type(name), name.rfind("nccl", 0) == 0 ? dlprof::analysis::KernelType::Communication
                                                                              : dlprof::analysis::KernelType::Computation);
  }
}

/// The kernels of a trace by name, in the order of their start.
std::vector<std::string> kernel_names(const dlprof::Trace& trace) {
  std::vector<const dlprof::GpuEvent*> kernels;
  for (const dlprof::GpuEvent& work : trace.gpu_events)
    if (work.kind == dlprof::GpuEventKind::Kernel) kernels.push_back(&work);
  std::sort(kernels.begin(), kernels.end(), [](const auto* a, const auto* b) { return a->start_ns < b->start_ns; });
  std::vector<std::string> names;
  for (const dlprof::GpuEvent* kernel : kernels) names.push_back(trace.names[kernel->name]);
  return names;
}

/// A flight recorder over 10 steps that each launch one kernel named after the step, dumped
/// after the last: the dump's trace.
std::shared_ptr<const dlprof::Trace> flight_dump_of_ten_steps(std::size_t flight_steps, std::size_t records) {
  std::vector<std::shared_ptr<const dlprof::Trace>> dumps;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .mode(dlprof::Mode::FlightRecorder)
                                .flight_steps(flight_steps)
                                .slow_step_factor(0)
                                .gpu_records_per_window(records)
                                .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                .on_trace_ready([&](const dlprof::Trace& trace) {
                                  dumps.push_back(std::make_shared<dlprof::Trace>(trace));
                                }));
  // CUPTI's records point at names that live as long as their module.
  static const char* const kKernels[] = {"_Z5step0v", "_Z5step1v", "_Z5step2v", "_Z5step3v", "_Z5step4v",
                                         "_Z5step5v", "_Z5step6v", "_Z5step7v", "_Z5step8v", "_Z5step9v"};
  profiler.start();
  for (const char* kernel : kKernels) {
    {
      DLPROF_RANGE("train_step");
      launch_kernel(kernel, 7);
    }
    profiler.step();
  }
  EXPECT_TRUE(profiler.dump("asked by the test"));
  profiler.stop();
  EXPECT_EQ(dumps.size(), 1u);
  return dumps.empty() ? nullptr : dumps.front();
}

TEST_F(CuptiBackendTest, AFlightRecordersDumpHoldsTheGpuRecordsOfItsKeptStepsOnly) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  const auto trace = flight_dump_of_ten_steps(/*flight_steps=*/3, /*records=*/1000);
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->flight_recorder_dump, "asked by the test");
  EXPECT_THAT(kernel_names(*trace), testing::ElementsAre("step7()", "step8()", "step9()"));
  EXPECT_EQ(trace->api_events.size(), 3u);
  EXPECT_EQ(trace->gpu.dropped_records, 0u) << "the steps that gave way are not drops";
  for (const dlprof::GpuEvent& work : trace->gpu_events) EXPECT_NE(work.external_id, 0u) << "linked to its range";
}

TEST_F(CuptiBackendTest, AFlightRecorderOutOfGpuRecordsDropsTheOldestFirst) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  // Each step makes 3 records (the call, its kernel, the external correlation): 6 hold 2 steps.
  const auto trace = flight_dump_of_ten_steps(/*flight_steps=*/3, /*records=*/6);
  ASSERT_NE(trace, nullptr);
  EXPECT_THAT(kernel_names(*trace), testing::ElementsAre("step8()", "step9()"));
  EXPECT_EQ(trace->gpu.dropped_records, 3u) << "step 7's records, the oldest kept";
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

/// Captures two nodes inside an "attention" range, from a call site of its own.
DLPROF_NOINLINE void capture_attention_nodes() {
  DLPROF_RANGE("attention");
  create_graph_node(11);
  create_graph_node(12);
}

// A graph's replay links each kernel to the graph launch, as any launch; the graph node callbacks
// tie each kernel to the range that was open as its node was captured, in an earlier window, with
// that range's call stack, through instantiation's clones, whichever callback comes first.
TEST_F(CuptiBackendTest, WorkAGraphReplaysIsAttributedToTheScopeThatCapturedItsNode) {
  CuptiBackend backend(played_driver(), played_cupti());
  use(backend);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}
                                .activities({dlprof::Activity::CPU, dlprof::Activity::CUDA})
                                .with_stack(true)
                                .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/1, /*repeat=*/2)));
  profiler.start();
  create_graph_node(15);  // in a warm-up step: no scope is recorded, nothing is known of it
  for (int step = 0; step < 4; ++step) {
    if (step == 1) {  // recorded: the graph is captured and instantiated
      {
        DLPROF_RANGE("capture");
        capture_attention_nodes();
        {
          DLPROF_RANGE_F("mlp {}", 3);
          create_graph_node(13);
        }
        create_graph_node(14);
      }
      {
        DLPROF_RANGE("instantiate");
        create_graph_node(111);  // announced as created, then as a clone
        clone_graph_node(111, 11);
        clone_graph_node(112, 12);  // the other way round
        create_graph_node(112);
        clone_graph_node(113, 13);
        clone_graph_node(114, 14);
        create_graph_node(115);
        clone_graph_node(115, 15);
      }
      destroy_graph_node(11);  // the captured graph goes; its instantiation stays
    }
    if (step == 3) {
      DLPROF_RANGE("replay");
      launch_graph(5, {{111, "_Z9attentionv"}, {112, "_Z9attentionv"}, {113, "_Z3mlpv"}, {114, "_Z4lossv"}, {115, "_Z6cachedv"}}, 7);
    }
    profiler.step();
  }
  profiler.stop();
  EXPECT_THAT(played.callbacks_on,
              testing::IsSupersetOf({std::make_pair(CUPTI_CB_DOMAIN_RESOURCE, CUpti_CallbackId{CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED}),
                                     std::make_pair(CUPTI_CB_DOMAIN_RESOURCE, CUpti_CallbackId{CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED})}));
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);

  // In the file: each kernel with the scope that captured its node, and that scope's stack.
  const nlohmann::json json = load_trace(*trace);
  std::map<std::int64_t, nlohmann::json> kernel_of_node;
  std::int64_t replay_id = -1;
  for (const auto& event : json["traceEvents"]) {
    if (event.value("cat", "") == "kernel") kernel_of_node[event["args"]["graph node id"].get<std::int64_t>()] = event;
    if (event.value("cat", "") == "user_annotation" && event["name"] == "replay") replay_id = event["args"]["External id"];
  }
  ASSERT_EQ(kernel_of_node.size(), 5u);
  const std::map<std::int64_t, std::string> captured_by = {{111, "attention"}, {112, "attention"}, {113, "mlp 3"}, {114, "capture"}};
  for (const auto& [node, kernel] : kernel_of_node) {
    const auto& args = kernel["args"];
    EXPECT_EQ(args["graph id"], 5);
    EXPECT_EQ(args["External id"], replay_id) << "linked to its launch as ever";
    const auto expected = captured_by.find(node);
    if (expected == captured_by.end()) {
      EXPECT_FALSE(args.contains("captured by")) << kernel.dump();
      EXPECT_FALSE(args.contains("capture call stack")) << kernel.dump();
      continue;
    }
    EXPECT_EQ(args.value("captured by", ""), expected->second) << node;
    EXPECT_THAT(args.value("capture call stack", ""), HasSubstr("+0x")) << node;
  }
  EXPECT_EQ(kernel_of_node[111]["args"]["capture call stack"], kernel_of_node[112]["args"]["capture call stack"]);
  EXPECT_NE(kernel_of_node[111]["args"]["capture call stack"], kernel_of_node[114]["args"]["capture call stack"])
      << "capture_attention_nodes() is a frame of its own";

  // The kernel table: the capturing scope is the op, and its stack gives the line.
  const dlprof::analysis::KernelAttribution attribution = dlprof::analysis::kernel_attribution(*trace);
  ASSERT_EQ(attribution.kernels.size(), 5u);
  for (const dlprof::analysis::AttributedKernel& row : attribution.kernels) {
    const auto expected = captured_by.find(static_cast<std::int64_t>(row.work->graph_node_id));
    EXPECT_EQ(row.from_capture, expected != captured_by.end()) << row.name;
    if (expected == captured_by.end()) continue;
    EXPECT_EQ(row.op, expected->second);
    EXPECT_THAT(std::string(row.line), HasSubstr("cupti_tests+0x")) << "the test's own frame";
    EXPECT_EQ(row.step, 3);
  }

  // The graph's row names the scope that captured most of its time; the GPU flame graph puts the
  // replays on the stacks that captured them.
  const dlprof::analysis::CudaGraphs graphs = dlprof::analysis::cuda_graphs(*trace);
  ASSERT_EQ(graphs.graphs.size(), 1u);
  EXPECT_EQ(graphs.work, 5u);
  EXPECT_EQ(graphs.captured_work, 4u);
  EXPECT_EQ(graphs.graphs[0].captured_work, 4u);
  EXPECT_EQ(graphs.graphs[0].captured_by, "attention");
  EXPECT_THAT(graphs.graphs[0].captured_at, HasSubstr("cupti_tests+0x"));
  // Each kernel's device times reach the host's clock through the fitted clock pair: a duration
  // may come out a nanosecond short or long.
  const std::string folded = dlprof::analysis::folded_stacks(*trace, dlprof::analysis::StackMetric::SelfGpuTime);
  EXPECT_THAT(folded, testing::ContainsRegex(";attention (19\\.99[89]|20\\.00[0-2])\n"));
  EXPECT_THAT(folded, testing::ContainsRegex(";mlp 3 (9\\.999|10\\.00[01])\n"));
}

TEST(GraphNodeCapturesTest, KeepsScopesThroughClonesWithinItsCapacity) {
  dlprof::detail::GraphNodeCaptures captures(/*capacity=*/2);
  const dlprof::detail::FormatArguments arguments{{42, 0}, 7};
  captures.created(1, dlprof::detail::CorrelatedScope{100, &arguments, 9, dlprof::detail::RecordKind::Range});
  captures.created(1, dlprof::detail::CorrelatedScope{200, nullptr, 0, dlprof::detail::RecordKind::Op});  // known: kept
  captures.created(2, dlprof::detail::CorrelatedScope{300, nullptr, 0, dlprof::detail::RecordKind::Op});
  captures.created(3, dlprof::detail::CorrelatedScope{400, nullptr, 0, dlprof::detail::RecordKind::Op});  // full
  EXPECT_EQ(captures.lost(), 1u);
  captures.destroyed(2);
  captures.cloned(4, 1);
  captures.cloned(5, 3);  // its original was never kept: nothing known
  std::vector<dlprof::GpuEvent> work(4);
  work[0].graph_node_id = 4;
  work[1].graph_node_id = 4;  // replayed twice: one capture
  work[2].graph_node_id = 5;
  work[3].graph_node_id = 0;  // launched on its own
  const std::vector<dlprof::detail::GraphNodeCapture> found = captures.of(work);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].node, 4u);
  EXPECT_EQ(found[0].name, 100u);
  EXPECT_EQ(found[0].stack, 9u);
  EXPECT_TRUE(found[0].has_arguments);
  EXPECT_EQ(found[0].arguments.words[0], 42u);
  EXPECT_EQ(found[0].kind, dlprof::detail::RecordKind::Range);
  captures.cloned(6, 1);  // full again (1 and 4)
  EXPECT_EQ(captures.lost(), 2u);
}

}  // namespace
