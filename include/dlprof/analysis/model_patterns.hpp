// dlprof/analysis/model_patterns.hpp: what the model's code does that a faster form of the same
// model would not, as a performance engineer reads it from the kernels and ops of a trace:
//
//   unfused attention    a softmax between two batched matrix products on one stream, as eager
//                        attention runs it (scores = Q K^T, scale, mask, softmax, dropout, @ V);
//                        SDPA / FlashAttention computes the same in one kernel that never writes
//                        the scores to memory
//   dtype casts          kernels that only convert a tensor's dtype (aten::_to_copy's copies,
//                        PyTorch's casting copy kernels)
//   dominant custom kernel  one kernel, of no library, above half of the GPU time, computing in
//                        float32 on CUDA cores
//   CPU tensor creation  random tensors generated on the CPU inside the step and copied to the GPU
//   GEMM alignment       matrix products whose rows are not 16-byte aligned, which keeps the GEMM
//                        libraries off their vectorised (alignN) kernels
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/kernel_attribution.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/flops.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {
namespace detail {

constexpr bool has(std::string_view text, std::string_view part) noexcept {
  return text.find(part) != std::string_view::npos;
}

}  // namespace detail

/// A softmax over attention scores, forward or backward (aten::_safe_softmax is SDPA's math
/// fallback's); log_softmax is a loss's, not attention's.
inline bool is_softmax_op(std::string_view op) noexcept {
  return op == "aten::softmax" || op == "aten::_softmax" || op == "aten::_safe_softmax" ||
         op == "aten::_softmax_backward_data";
}

/// The batched matrix products eager attention computes its scores and output with.
inline bool is_batched_product_op(std::string_view op) noexcept {
  return op == "aten::bmm" || op == "aten::baddbmm" || op == "aten::matmul" || op == "aten::einsum";
}

/// What a kernel is in an unfused attention block.
enum class AttentionRole : std::uint8_t { None, Product, Softmax };

/// The unfused attention blocks of a trace: on each stream, a softmax kernel with a batched
/// product among the kUnfusedAttentionWindow kernels before it and another among those after it.
struct UnfusedAttention {
  std::size_t blocks = 0;
  std::int64_t products_ns = 0;  ///< the blocks' batched products
  std::int64_t softmax_ns = 0;   ///< the softmax and the kernels between the products (scale, mask, dropout)
  std::string_view softmax_op;   ///< the first block's softmax op
  std::vector<AttentionRole> roles;  ///< per KernelAttribution row

  std::int64_t total_ns() const noexcept { return products_ns + softmax_ns; }
  bool is_product(std::size_t row) const noexcept { return !roles.empty() && roles[row] == AttentionRole::Product; }
};

/// How many kernels may lie between a softmax and the products around it: scaling, masking and
/// dropout take one or two each.
inline constexpr std::size_t kUnfusedAttentionWindow = 8;

inline UnfusedAttention unfused_attention(const KernelAttribution& attribution) {
  const std::vector<AttributedKernel>& rows = attribution.kernels;
  UnfusedAttention result;
  result.roles.assign(rows.size(), AttentionRole::None);
  std::map<std::pair<std::uint32_t, std::int64_t>, std::vector<std::size_t>> streams;  // rows by start, per stream
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].work->kind == GpuEventKind::Kernel) streams[{rows[i].work->device, rows[i].work->stream}].push_back(i);
  for (const auto& entry : streams) {
    const std::vector<std::size_t>& order = entry.second;
    for (std::size_t at = 0; at < order.size(); ++at) {
      if (!is_softmax_op(rows[order[at]].op)) continue;
      std::size_t before = at, after = at;
      for (std::size_t back = 1; back <= kUnfusedAttentionWindow && back <= at; ++back)
        if (is_batched_product_op(rows[order[at - back]].op)) {
          before = at - back;
          break;
        }
      for (std::size_t ahead = 1; ahead <= kUnfusedAttentionWindow && at + ahead < order.size(); ++ahead)
        if (is_batched_product_op(rows[order[at + ahead]].op)) {
          after = at + ahead;
          break;
        }
      if (before == at || after == at) continue;
      if (result.blocks++ == 0) result.softmax_op = rows[order[at]].op;
      for (std::size_t k = before; k <= after; ++k)
        result.roles[order[k]] = is_batched_product_op(rows[order[k]].op) ? AttentionRole::Product : AttentionRole::Softmax;
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (result.roles[i] == AttentionRole::Product) result.products_ns += rows[i].duration_ns;
    if (result.roles[i] == AttentionRole::Softmax) result.softmax_ns += rows[i].duration_ns;
  }
  return result;
}

/// What a kernel's name says of a copy: that it casts (PyTorch's LoadWithCast / StoreWithCast
/// loaders, bfloat16_copy_kernel_cuda, float8_copy_kernel_cuda, a Triton kernel fused from
/// _to_copy alone), that it does not (a "nocast" copy), or nothing.
enum class CopyName : std::int8_t { Casts, NoCast, Unknown };

inline CopyName copy_name(std::string_view name) noexcept {
  using detail::has;
  if (has(name, "LoadWithCast") || has(name, "StoreWithCast") || has(name, "bfloat16_copy_kernel") ||
      has(name, "float8_copy_kernel"))
    return CopyName::Casts;
  const std::size_t fused = name.find("_fused__to_copy");
  if (fused != std::string_view::npos && dlprof::detail::starts_with(name, "triton_")) {
    std::string_view rest = name.substr(fused + 15);  // "_<n>" at most
    if (!rest.empty() && rest.front() == '_') rest.remove_prefix(1);
    return std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; }) ? CopyName::Casts
                                                                                              : CopyName::Unknown;
  }
  return has(name, "nocast") ? CopyName::NoCast : CopyName::Unknown;
}

/// A kernel that only converts a tensor's dtype: one whose name says so (copy_name), or, where
/// its name does not say, a copy run for aten::_to_copy (tensor.to(dtype), .float(), autocast's
/// casts).
inline bool is_dtype_cast_kernel(const AttributedKernel& kernel, CopyName name) noexcept {
  if (name != CopyName::Unknown) return name == CopyName::Casts;
  return kernel.op == "aten::_to_copy" || (kernel.op == "aten::copy_" && kernel.parent_op == "aten::_to_copy");
}

inline bool is_dtype_cast_kernel(const AttributedKernel& kernel) noexcept {
  return is_dtype_cast_kernel(kernel, copy_name(kernel.name));
}

/// A kernel of a library or of PyTorch itself, which its authors tuned: cuBLAS, cuDNN, CUTLASS,
/// NCCL, ATen, Triton's generated kernels, AMD's Tensile, rocBLAS, MIOpen, Composable Kernel.
inline bool is_library_kernel(std::string_view name) noexcept {
  constexpr std::string_view kMarks[] = {
      "at::",    "c10::",   "cublas",   "cutlass", "cudnn",  "nccl",    "rccl",  "triton", "xmma",   "sgemm",
      "hgemm",   "gemv",    "gemmSN",   "Cijk_",   "rocblas", "hipblas", "miopen", "MIOpen", "ck::",  "cub::",
      "thrust::", "flash",  "fmha",     "fused_",  "volta_", "turing_", "ampere_", "hopper_", "sm90_", "sm80_",
      "sm75_",   "sm70_",   "sm100_",   "implicit_convolve", "winograd", "scudnn", "deep_gemm", "cuda::"};
  for (const std::string_view mark : kMarks)
    if (detail::has(name, mark)) return true;
  return false;
}

/// The first type of an op's "Input type" text ("c10::Half" of "[\"c10::Half\", \"\"]"); empty
/// when it names none.
inline std::string_view first_input_type(std::string_view input_types) noexcept {
  const std::size_t open = input_types.find('"');
  if (open == std::string_view::npos) return {};
  const std::size_t close = input_types.find('"', open + 1);
  return close == std::string_view::npos ? std::string_view() : input_types.substr(open + 1, close - open - 1);
}

/// Whether a kernel computes in float32, from its op's first input type or, for a kernel no op
/// launched, the parameter types of its demangled name ("(float const*, float*, int)").
inline bool computes_in_float32(const AttributedKernel& kernel) noexcept {
  using detail::has;
  if (kernel.input_types.find('"') != std::string_view::npos) return first_input_type(kernel.input_types) == "float";
  const std::string_view name = kernel.name;
  return has(name, "float") && !has(name, "half") && !has(name, "Half") && !has(name, "bfloat") &&
         !has(name, "BFloat") && !has(name, "bf16") && !has(name, "fp8") && !has(name, "float8");
}

/// The kernel (by name) that takes the most GPU time, when no library wrote it, it uses no Tensor
/// Core, and it computes in float32; `ns` is 0 when there is none.
struct DominantCustomKernel {
  std::string_view name;
  std::int64_t ns = 0;
  std::size_t launches = 0;
};

inline DominantCustomKernel dominant_custom_kernel(const Trace& trace, const KernelAttribution& attribution) {
  struct Total {
    std::int64_t ns = 0;
    std::size_t launches = 0;
    const AttributedKernel* first = nullptr;
    bool tensor_cores = false;
  };
  std::vector<Total> by_name(trace.names.size());  // by Trace::names index: no string compared
  for (const AttributedKernel& kernel : attribution.kernels) {
    if (kernel.work->kind != GpuEventKind::Kernel) continue;
    Total& total = by_name[kernel.work->name];
    total.ns += kernel.duration_ns;
    ++total.launches;
    total.tensor_cores = total.tensor_cores || kernel.tensor_cores;
    if (total.first == nullptr) total.first = &kernel;
  }
  const auto top = std::max_element(by_name.begin(), by_name.end(), [](const Total& a, const Total& b) { return a.ns < b.ns; });
  if (top == by_name.end() || top->first == nullptr || top->tensor_cores || is_library_kernel(top->first->name) ||
      !computes_in_float32(*top->first))
    return {};
  return {top->first->name, top->ns, top->launches};
}

/// Ops that fill a tensor with random values: on the CPU, the host generates every element.
inline bool is_random_creation_op(std::string_view op) noexcept {
  constexpr std::string_view kOps[] = {"aten::randn",      "aten::rand",         "aten::randint",  "aten::randperm",
                                       "aten::normal_",    "aten::uniform_",     "aten::bernoulli_", "aten::bernoulli",
                                       "aten::random_",    "aten::exponential_", "aten::randn_like", "aten::rand_like",
                                       "aten::randint_like", "aten::multinomial"};
  for (const std::string_view name : kOps)
    if (op == name) return true;
  return false;
}

/// Random tensors made on the CPU inside the steps, then copied to a GPU: outermost random ops
/// that launch no GPU work, outside a DataLoader, followed in their step on their thread by a
/// host-to-device copy. What they cost the step is the time the copy's GPU idles while the host
/// generates them.
struct CpuTensorCreation {
  std::size_t ops = 0;
  std::int64_t host_ns = 0;      ///< the ops' own time
  std::int64_t gpu_idle_ns = 0;  ///< of it, the time the copy's GPU idles
  std::string_view example;      ///< the longest op's name
};

inline CpuTensorCreation cpu_tensor_creation(const Trace& trace, const StepBreakdown& steps) {
  constexpr std::uint8_t kHostToDevice = 1;  // CUpti_ActivityMemcpyKind
  CpuTensorCreation result;
  if (steps.steps.empty()) return result;
  // Host-to-device copies by (thread of their call, call start), with their device.
  std::vector<std::tuple<std::uint32_t, std::int64_t, std::uint32_t>> copies;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> call_of_correlation;  // (correlation, api index)
  for (std::uint32_t i = 0; i < trace.api_events.size(); ++i)
    if (trace.api_events[i].correlation != 0) call_of_correlation.emplace_back(trace.api_events[i].correlation, i);
  std::sort(call_of_correlation.begin(), call_of_correlation.end());
  std::map<std::uint32_t, std::vector<detail::Interval>> busy;  // device -> merged GPU work
  for (const GpuEvent& work : trace.gpu_events) {
    if (detail::is_device_work(work.kind)) busy[work.device].push_back({work.start_ns, work.end_ns});
    if (work.kind != GpuEventKind::Memcpy || work.copy.copy_kind != kHostToDevice || work.correlation == 0) continue;
    const auto call = std::lower_bound(call_of_correlation.begin(), call_of_correlation.end(),
                                       std::make_pair(work.correlation, std::uint32_t{0}));
    if (call == call_of_correlation.end() || call->first != work.correlation) continue;
    const ApiEvent& launch = trace.api_events[call->second];
    copies.emplace_back(launch.thread, launch.start_ns, work.device);
  }
  if (copies.empty()) return result;
  std::sort(copies.begin(), copies.end());
  for (auto& entry : busy) detail::merge(entry.second);
  // Calls that launch GPU work, by (thread, start): an op with one inside runs on a GPU.
  std::vector<std::pair<std::uint32_t, std::int64_t>> launches;
  for (const ApiEvent& call : trace.api_events)
    if (call.correlation != 0) launches.emplace_back(call.thread, call.start_ns);
  std::sort(launches.begin(), launches.end());

  std::int64_t longest = -1;
  std::uint32_t thread = UINT32_MAX;
  std::int64_t counted_until = INT64_MIN, loader_until = INT64_MIN;
  for (const TraceEvent& event : trace.events) {  // by thread, then start: enclosing slices first
    if (event.thread != thread) {
      thread = event.thread;
      counted_until = loader_until = INT64_MIN;
    }
    if (detail::slice_role(event, trace.names[event.name]) == detail::SliceRole::DataLoader) {
      loader_until = std::max(loader_until, event.end_ns);
      continue;
    }
    if (event.kind != EventKind::Op || event.start_ns < counted_until || event.start_ns < loader_until ||
        !is_random_creation_op(trace.names[event.name]))
      continue;
    const auto step = std::upper_bound(steps.steps.begin(), steps.steps.end(), event.start_ns,
                                       [](std::int64_t time, const StepTime& s) { return time < s.start_ns; });
    if (step == steps.steps.begin() || std::prev(step)->end_ns <= event.start_ns) continue;
    const std::int64_t step_end = std::prev(step)->end_ns;
    const auto launch = std::lower_bound(launches.begin(), launches.end(), std::make_pair(thread, event.start_ns));
    if (launch != launches.end() && launch->first == thread && launch->second <= event.end_ns) continue;  // on a GPU
    const auto copy = std::lower_bound(copies.begin(), copies.end(), std::make_tuple(thread, event.end_ns, std::uint32_t{0}));
    if (copy == copies.end() || std::get<0>(*copy) != thread || std::get<1>(*copy) >= step_end) continue;
    counted_until = event.end_ns;
    ++result.ops;
    result.host_ns += event.duration_ns();
    const std::vector<detail::Interval>& device_busy = busy[std::get<2>(*copy)];
    const std::vector<detail::Interval> span = {{event.start_ns, event.end_ns}};
    result.gpu_idle_ns += event.duration_ns() - detail::intersection_length(span, device_busy);
    if (event.duration_ns() > longest) {
      longest = event.duration_ns();
      result.example = trace.names[event.name];
    }
  }
  return result;
}

/// The N of a GEMM kernel's "alignN" (CUTLASS's and cuBLAS's name for the elements its loads
/// are aligned to); 0 when its name does not say.
inline std::uint32_t kernel_alignment(std::string_view name) noexcept {
  for (std::size_t at = name.find("align"); at != std::string_view::npos; at = name.find("align", at + 1)) {
    std::uint32_t value = 0;
    std::size_t digit = at + 5;
    while (digit < name.size() && name[digit] >= '0' && name[digit] <= '9' && value < 1000)
      value = value * 10 + static_cast<std::uint32_t>(name[digit++] - '0');
    if (digit > at + 5) return value;
  }
  return 0;
}

/// The bytes of one element of a record_shapes type; 0 for one this does not know.
inline std::uint32_t element_bytes(std::string_view type) noexcept {
  using detail::has;
  if (has(type, "Float8") || has(type, "Float4")) return 1;
  if (has(type, "Half") || has(type, "BFloat16")) return 2;
  if (type == "float") return 4;
  if (type == "double") return 8;
  return 0;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
