// Builds dlprof::Trace values by hand for the analysis tests: CPU slices, CUDA API calls and GPU
// work with their links (External id, correlation id), put in the order the Trace documents
// (events by thread then start, enclosing first; GPU work by device, stream, start; calls by
// thread, start) whatever order the test adds them in. Times are in ns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <dlprof/analysis/options.hpp>
#include <dlprof/trace.hpp>

namespace dlprof_test {

/// One millisecond and one microsecond in the builder's unit.
inline constexpr std::int64_t kMs = 1'000'000;
inline constexpr std::int64_t kUs = 1'000;
/// An NCCL all-reduce kernel as CUDA names it.
inline constexpr std::string_view kNcclAllReduce = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)";

/// PyTorch's bfloat16 add and multiply kernels: one function, told apart by its functor.
inline constexpr std::string_view kBf16AddKernel =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >"
    "(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)";
inline constexpr std::string_view kBf16MulKernel =
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> "
    ">, std::array<char*, 3ul>)";

/// The options under which the analyses give HTA 0.5.0's numbers.
inline dlprof::analysis::AnalysisOptions hta_compat() {
  dlprof::analysis::AnalysisOptions options;
  options.hta_compat = true;
  return options;
}

class AnalysisTraceBuilder {
 public:
  AnalysisTraceBuilder() {
    trace_.threads = {dlprof::ThreadInfo{100, "main"}, dlprof::ThreadInfo{101, "backward"}};
    trace_.gpu.enabled = true;
  }

  /// A cpu_op; returns *this so that ops chain. `external_id` 0 gives none.
  AnalysisTraceBuilder& op(std::string_view name, std::int64_t start, std::int64_t end, std::uint64_t external_id = 0,
                           dlprof::Category category = dlprof::Category::User, std::uint32_t thread = 0) {
    return slice(dlprof::EventKind::Op, name, start, end, external_id, category, thread);
  }
  AnalysisTraceBuilder& range(std::string_view name, std::int64_t start, std::int64_t end,
                              dlprof::Category category = dlprof::Category::User, std::uint32_t thread = 0,
                              std::uint64_t external_id = 0) {
    return slice(dlprof::EventKind::Range, name, start, end, external_id, category, thread);
  }
  /// A cpu_op whose args name a GPU stream, as torch.compile's Triton launch ops do.
  AnalysisTraceBuilder& op_on_stream(std::string_view name, std::int64_t start, std::int64_t end, std::int64_t stream) {
    op(name, start, end);
    trace_.cpu_slices_on_streams.push_back(dlprof::CpuSliceOnStream{start, end, trace_.events.back().name, stream});
    return *this;
  }
  /// A python_function slice (torch.profiler's with_stack).
  AnalysisTraceBuilder& python_frame(std::string_view name, std::int64_t start, std::int64_t end,
                                     dlprof::Category category = dlprof::Category::User, std::uint32_t thread = 0) {
    return slice(dlprof::EventKind::PythonFrame, name, start, end, 0, category, thread);
  }
  AnalysisTraceBuilder& step(std::int64_t number, std::int64_t start, std::int64_t end, std::uint32_t thread = 0) {
    return slice(dlprof::EventKind::Step, "ProfilerStep#" + std::to_string(number), start, end, 0, dlprof::Category::Step,
                 thread);
  }
  /// The last slice added gets record_shapes inputs and a cost; concrete inputs "" are not
  /// recorded.
  AnalysisTraceBuilder& inputs(std::string_view dims, std::string_view types, std::uint64_t flops = 0,
                               std::uint64_t bytes = 0, std::string_view concrete = "") {
    dlprof::OpInputs recorded;
    recorded.dims = name_index(dims);
    recorded.types = name_index(types);
    recorded.concrete = name_index(concrete);
    recorded.op = trace_.events.back().name;
    recorded.flops = flops;
    recorded.bytes = bytes;
    trace_.events.back().inputs = static_cast<std::uint32_t>(trace_.op_inputs.size());
    trace_.op_inputs.push_back(recorded);
    return *this;
  }
  /// The last slice added is an autograd-numbered op: forward, or the backward node run for it.
  AnalysisTraceBuilder& sequence(std::int64_t sequence_number, std::uint64_t forward_thread_os_tid = 100) {
    trace_.events.back().sequence_number = sequence_number;
    trace_.events.back().forward_thread_id = forward_thread_os_tid;
    return *this;
  }

  AnalysisTraceBuilder& call(std::string_view name, std::int64_t start, std::int64_t end, std::uint32_t correlation,
                             std::uint64_t external_id = 0, std::uint32_t thread = 0, bool driver = false) {
    dlprof::ApiEvent event;
    event.name = name_index(name);
    event.start_ns = start;
    event.end_ns = end;
    event.correlation = correlation;
    event.external_id = external_id;
    event.thread = thread;
    event.driver = driver;
    trace_.api_events.push_back(event);
    return *this;
  }

  AnalysisTraceBuilder& kernel(std::string_view name, std::int64_t start, std::int64_t end, std::uint32_t correlation,
                               std::uint64_t external_id = 0, std::int64_t stream = 7, std::uint32_t device = 0) {
    return work(dlprof::GpuEventKind::Kernel, name, start, end, correlation, external_id, stream, device);
  }
  /// Kineto's names: "Memcpy HtoD (Pageable -> Device)"; kind and memory kinds are CUPTI's values.
  AnalysisTraceBuilder& memcpy(std::uint8_t copy_kind, std::int64_t start, std::int64_t end, std::uint32_t correlation,
                               std::uint64_t bytes = 0, std::uint64_t external_id = 0, std::int64_t stream = 7,
                               std::uint8_t source_kind = 1, std::uint8_t destination_kind = 3) {
    static constexpr std::string_view kKinds[] = {"<unknown>", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                                  "AtoD",      "DtoA", "DtoD", "HtoH", "PtoP"};
    static constexpr std::string_view kMemory[] = {"Unknown", "Pageable", "Pinned", "Device"};
    const std::string name = "Memcpy " + std::string(kKinds[copy_kind]) + " (" + std::string(kMemory[source_kind]) +
                             " -> " + std::string(kMemory[destination_kind]) + ")";
    work(copy_kind == 10 ? dlprof::GpuEventKind::MemcpyPeer : dlprof::GpuEventKind::Memcpy, name, start, end,
         correlation, external_id, stream, 0);
    dlprof::CopyDetails& copy = trace_.gpu_events.back().copy;
    copy.bytes = bytes;
    copy.copy_kind = copy_kind;
    copy.source_kind = source_kind;
    copy.destination_kind = destination_kind;
    return *this;
  }
  AnalysisTraceBuilder& memset(std::int64_t start, std::int64_t end, std::uint32_t correlation, std::uint64_t bytes = 0,
                               std::uint64_t external_id = 0, std::int64_t stream = 7) {
    work(dlprof::GpuEventKind::Memset, "Memset (Device)", start, end, correlation, external_id, stream, 0);
    trace_.gpu_events.back().copy.bytes = bytes;
    return *this;
  }
  AnalysisTraceBuilder& sync(std::string_view name, std::int64_t start, std::int64_t end, std::uint32_t correlation,
                             std::int64_t stream = 7) {
    return work(dlprof::GpuEventKind::Sync, name, start, end, correlation, 0, stream, 0);
  }
  AnalysisTraceBuilder& annotation(std::string_view name, std::int64_t start, std::int64_t end,
                                   std::uint64_t external_id, std::int64_t stream = 7) {
    return work(dlprof::GpuEventKind::Annotation, name, start, end, 0, external_id, stream, 0);
  }
  /// Launch configuration and Kineto's occupancy figures of the last kernel added.
  AnalysisTraceBuilder& launch(std::uint32_t grid_x, std::uint32_t block_x, float blocks_per_sm,
                               int achieved_occupancy_percent) {
    dlprof::KernelDetails& details = trace_.gpu_events.back().kernel;
    details.grid[0] = grid_x;
    details.block[0] = block_x;
    details.blocks_per_sm = blocks_per_sm;
    details.est_achieved_occupancy_percent = achieved_occupancy_percent;
    return *this;
  }

  AnalysisTraceBuilder& device(int id, std::string_view name, int compute_major) {
    dlprof::DeviceProperties properties;
    properties.id = id;
    properties.name = std::string(name);
    properties.compute_major = compute_major;
    trace_.devices.push_back(properties);
    return *this;
  }
  /// A collective call: its record_param_comms op on `thread` and what it moved; `call`'s
  /// thread and start are the op's.
  AnalysisTraceBuilder& collective(dlprof::CollectiveCall call, std::int64_t start, std::int64_t end, std::uint32_t thread = 0) {
    call.thread = thread;
    call.start_ns = start;
    trace_.collectives.push_back(std::move(call));
    return op("record_param_comms", start, end, 0, dlprof::Category::Communication, thread);
  }
  AnalysisTraceBuilder& rank(std::int64_t rank, std::int64_t world_size) {
    trace_.distributed.rank = rank;
    trace_.distributed.world_size = world_size;
    return *this;
  }

  /// A `[memory]` event: an allocation (bytes > 0) or a release (bytes < 0); a total of 0 is the
  /// allocator's count not given.
  AnalysisTraceBuilder& memory(std::int64_t time, std::uint64_t address, std::int64_t bytes, std::int64_t total_allocated = 0,
                               std::uint32_t thread = 0, dlprof::MemoryDeviceType device_type = dlprof::MemoryDeviceType::CPU,
                               std::int32_t device = -1) {
    dlprof::MemoryEvent event;
    event.time_ns = time;
    event.address = address;
    event.bytes = bytes;
    event.total_allocated = total_allocated;
    event.device_type = device_type;
    event.device = device;
    event.thread = thread;
    trace_.memory_events.push_back(event);
    return *this;
  }
  /// Another thread; its index is the next of Trace::threads (main is 0, backward 1).
  AnalysisTraceBuilder& thread(std::int64_t os_tid, std::string name) {
    trace_.threads.push_back(dlprof::ThreadInfo{os_tid, std::move(name)});
    return *this;
  }
  /// A reading of a thread's CPU time and run-queue wait (-1: not known).
  AnalysisTraceBuilder& cpu_reading(std::uint32_t thread, std::int64_t time, std::int64_t cpu_ns,
                                    std::int64_t run_delay_ns = -1) {
    trace_.thread_cpu.push_back(dlprof::ThreadCpuSample{time, cpu_ns, run_delay_ns, thread});
    return *this;
  }

  dlprof::Trace trace() const {
    dlprof::Trace out = trace_;
    std::stable_sort(out.thread_cpu.begin(), out.thread_cpu.end(),
                     [](const dlprof::ThreadCpuSample& a, const dlprof::ThreadCpuSample& b) {
                       return std::make_tuple(a.thread, a.time_ns) < std::make_tuple(b.thread, b.time_ns);
                     });
    std::stable_sort(out.events.begin(), out.events.end(), [](const dlprof::TraceEvent& a, const dlprof::TraceEvent& b) {
      return std::make_tuple(a.thread, a.start_ns, -a.end_ns) < std::make_tuple(b.thread, b.start_ns, -b.end_ns);
    });
    std::stable_sort(out.gpu_events.begin(), out.gpu_events.end(), [](const dlprof::GpuEvent& a, const dlprof::GpuEvent& b) {
      return std::make_tuple(a.device, a.stream, a.start_ns) < std::make_tuple(b.device, b.stream, b.start_ns);
    });
    std::stable_sort(out.api_events.begin(), out.api_events.end(), [](const dlprof::ApiEvent& a, const dlprof::ApiEvent& b) {
      return std::make_tuple(a.thread, a.start_ns) < std::make_tuple(b.thread, b.start_ns);
    });
    std::int64_t first = INT64_MAX;
    std::int64_t last = INT64_MIN;
    for (const dlprof::TraceEvent& event : out.events) {
      first = std::min(first, event.start_ns);
      last = std::max(last, event.end_ns);
    }
    out.window_start_ns = first == INT64_MAX ? 0 : first;
    out.window_end_ns = last == INT64_MIN ? 0 : last;
    return out;
  }

 private:
  AnalysisTraceBuilder& slice(dlprof::EventKind kind, std::string_view name, std::int64_t start, std::int64_t end,
                              std::uint64_t external_id, dlprof::Category category, std::uint32_t thread) {
    dlprof::TraceEvent event;
    event.kind = kind;
    event.name = name_index(name);
    event.start_ns = start;
    event.end_ns = end;
    event.external_id = external_id;
    event.category = category;
    event.thread = thread;
    trace_.events.push_back(event);
    return *this;
  }
  AnalysisTraceBuilder& work(dlprof::GpuEventKind kind, std::string_view name, std::int64_t start, std::int64_t end,
                             std::uint32_t correlation, std::uint64_t external_id, std::int64_t stream,
                             std::uint32_t device) {
    dlprof::GpuEvent event;
    event.kind = kind;
    event.name = name_index(name);
    event.start_ns = start;
    event.end_ns = end;
    event.correlation = correlation;
    event.external_id = external_id;
    event.stream = stream;
    event.device = device;
    trace_.gpu_events.push_back(event);
    return *this;
  }
  std::uint32_t name_index(std::string_view name) {
    for (std::uint32_t i = 0; i < trace_.names.size(); ++i)
      if (trace_.names[i] == name) return i;
    trace_.names.emplace_back(name);
    return static_cast<std::uint32_t>(trace_.names.size() - 1);
  }

  dlprof::Trace trace_;
};

/// Four 10 ms steps of a Python loop. In each, a 7.5 ms GEMM runs from 0.5 ms; `loss.item()` in
/// model.py(143) copies 4 bytes in a cudaMemcpyAsync from 1.05 to 8.2 ms (the copy itself takes
/// 1 us at 8.0 ms: the call waited for the GEMM) and a cudaStreamSynchronize to 8.25 ms; the next
/// kernel runs at 9.0 ms. The read waits 7.149 + 0.05 ms, and the GPU idles 0.75 ms after it.
inline dlprof::Trace steps_reading_a_scalar(std::string_view outer_op = "aten::item") {
  AnalysisTraceBuilder builder;
  for (std::int64_t k = 0; k < 4; ++k) {
    const std::int64_t b = k * 10 * kMs;
    const auto correlation = static_cast<std::uint32_t>(10 * k);
    builder.step(k + 1, b, b + 10 * kMs)
        .python_frame("train.py(40): <module>", b, b + 9'900 * kUs)
        .python_frame("model.py(143): forward", b + 900 * kUs, b + 8'400 * kUs)
        .python_frame("/usr/lib/python3/dist-packages/torch/_tensor.py(1024): __bool__", b + 920 * kUs, b + 8'380 * kUs)
        .python_frame("<built-in method item of Tensor object at 0x7f3a>", b + 950 * kUs, b + 8'350 * kUs)
        .call("cudaLaunchKernel", b + 100 * kUs, b + 200 * kUs, correlation + 1)
        .kernel("ampere_sgemm_128x64_nn", b + 500 * kUs, b + 8 * kMs, correlation + 1)
        .op(outer_op, b + 1 * kMs, b + 8'300 * kUs);
    if (outer_op != "aten::item") builder.op("aten::item", b + 1'001 * kUs, b + 8'299 * kUs);
    builder.op("aten::_local_scalar_dense", b + 1'002 * kUs, b + 8'298 * kUs)
        .call("cudaMemcpyAsync", b + 1'050 * kUs, b + 8'200 * kUs, correlation + 2)
        .memcpy(/*DtoH*/ 2, b + 8 * kMs, b + 8'001 * kUs, correlation + 2, 4, 0, 7, /*Device*/ 3, /*Pageable*/ 1)
        .call("cudaStreamSynchronize", b + 8'200 * kUs, b + 8'250 * kUs, correlation + 3)
        .sync("Stream Sync", b + 8'200 * kUs, b + 8'250 * kUs, correlation + 3)
        .call("cudaLaunchKernel", b + 8'900 * kUs, b + 8'950 * kUs, correlation + 4)
        .kernel("void at::native::vectorized_elementwise_kernel<4, at::native::relu>", b + 9 * kMs, b + 9'500 * kUs,
                correlation + 4);
  }
  return builder.trace();
}

/// The all-to-all kernel (NCCL's SendRecv) of ranks_waiting_for_a_late_rank().
inline constexpr std::string_view kNcclSendRecv = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)";

/// Four ranks whose traces name no collective, only NCCL's kernels. In each of steps 5 and 6 the
/// ranks reach an all-to-all 0.3, 1.1, 2.4 and 7.6 ms into its phase; rank 3 arrives last, runs its
/// kernel for 10 us, and every rank's kernel ends then. The ranks started their steps 12, 9, 8 and
/// 3 ms before that phase and end them within 0.9 ms of each other, so rank 0, which waits the
/// most, has the longest steps. Each rank's clock is 37 ms x its rank off rank 0's, and the traces
/// carry no clock offset.
inline std::vector<dlprof::Trace> ranks_waiting_for_a_late_rank() {
  constexpr std::int64_t kArrival[] = {300'000, 1'100'000, 2'400'000, 7'600'000};
  constexpr std::int64_t kLead[] = {12 * kMs, 9 * kMs, 8 * kMs, 3 * kMs};
  constexpr std::int64_t kTail[] = {100'000, 900'000, 500'000, 0};
  constexpr std::int64_t kTransfer = 10'000;
  std::vector<dlprof::Trace> ranks;
  for (std::size_t r = 0; r < 4; ++r) {
    AnalysisTraceBuilder builder;
    builder.rank(static_cast<std::int64_t>(r), 4);
    const std::int64_t clock = static_cast<std::int64_t>(r) * 37 * kMs;
    for (std::int64_t step = 5; step <= 6; ++step) {
      const std::int64_t phase = clock + step * 100 * kMs;
      const std::int64_t end = phase + kArrival[3] + kTransfer;
      const auto correlation = static_cast<std::uint32_t>(step);
      builder.step(step, phase - kLead[r], end + kTail[r])
          .call("cudaLaunchKernel", phase + kArrival[r] - 50'000, phase + kArrival[r] - 40'000, correlation)
          .kernel(kNcclSendRecv, phase + kArrival[r], end, correlation, 0, 21);
    }
    ranks.push_back(builder.trace());
  }
  return ranks;
}

}  // namespace dlprof_test
