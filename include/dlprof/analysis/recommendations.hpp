// dlprof/analysis/recommendations.hpp: what to change, from a trace. Each rule looks for one
// known cause of a slow training step, and when it finds it says so with the numbers it rests on
// and the fix:
//
//   id                    fires when                                             fix
//   dataloader_bound      DataLoader > 5 % of the average step (TensorBoard's)   more loader workers, persistent
//                                                                                workers, prefetching
//   pageable_copies       >= 10 % of host-to-device bytes from pageable memory   pin the host buffers
//   synchronous_copies    host-to-device copies through a blocking call          non_blocking copies from
//                         (cudaMemcpy, or any copy from pageable memory)         pinned memory
//                         holding the CPU >= 1 % of the steps' span
//   layout_transposes     NCHW <-> NHWC transpose kernels > 2 % of kernel time   channels_last
//   fp32_without_tensor_cores  GEMM/conv kernels of float32 ops (or ops of unknown automatic mixed precision
//                         dtype) on compute capability >= 7 (AMD: an Instinct
//                         MI100 or later), no Tensor Core (matrix-core) kernel
//   gemm_dims_not_multiple_of_8  > 10 % of GEMM kernel time in ops with M, N    pad to multiples of 8
//                         or K not a multiple of 8
//   fp32_matmuls_on_cuda_cores  float32 matrix products and convolutions on     TF32, or bfloat16 autocast
//                         the CUDA cores of a GPU with TF32 Tensor Cores
//                         (compute capability >= 8) while other kernels use
//                         Tensor Cores (roofline.hpp: their rate against the
//                         vector units' roof); saves half their time
//   elementwise_chains    runs of >= 3 memory-bound elementwise kernels          fuse them (torch.compile,
//                         (flops.hpp's elementwise ops, the norms, softmax,      a fused kernel)
//                         dropout) back to back on one stream over one shape,
//                         each re-reading what the last wrote; fused, a run
//                         costs about its longest kernel
//   low_gpu_utilization   a GPU busy < 50 % of the steady steps (steady_state.hpp),  larger batch, faster input
//                         outside graph capture
//   first_calls           (a note) no steady step, and first calls (context      profile after warm-up
//                         creation, lazy loading) explain half the idle time:
//                         no batch-size advice then
//   graph_capture_phase   a GPU busy < 50 % of the steps' span because they are  profile the replays
//                         mostly CUDA/HIP graph capture, which runs no kernel
//   host_bound            a GPU idle >= 30 % of the steady steps, over half of   CUDA graphs, torch.compile,
//                         it waiting for the host (HTA's idle time), with short  fused/foreach optimizers
//                         kernels (median below the launch call or 10 us); it
//                         stands for low_gpu_utilization and launch_bound then
//   per_parameter_optimizer  >= 32 element-wise update ops (add_, mul_, addcmul_, foreach or fused optimizer
//                         ...) per Optimizer.step range and no _foreach_/_fused_
//                         op: saves half of the optimizer's time
//   launch_bound          stretches of >= 32 consecutive kernels each shorter    CUDA graphs, fusion
//                         than its launch call, > 10 % of the steps' span;
//                         kernels of a graph replay are not compared with the
//                         one call that launched the whole graph
//   scalar_read_syncs     Tensor.item(), `if tensor:` and the like wait for the  keep values on the GPU, read
//                         GPU, which then idles until the host launches again    them every N steps
//   synchronize_calls     cudaDeviceSynchronize / cudaStreamSynchronize in the   remove them from the step
//                         step, the GPU idle after them                          (time with CUDA events)
//   copies_wait_for_gpu   copy calls far longer than their transfer: the host    non_blocking copies into
//                         waited for the work queued before them                 pinned memory, an event
//                         (host_syncs.hpp: each point saves the lesser of its wait and the GPU idle after it)
//
// On AMD's GPUs (matrix_units_of) the rules speak of matrix cores, not Tensor Cores.
//   communication_heavy   Communication > 10 % of the average step               bucketing, fewer/larger
//                                                                                collectives, accumulation
//   low_comm_overlap      communication kernels < 50 % overlapped by compute     overlap (DDP buckets,
//                                                                                separate streams)
//   memory_near_capacity  a GPU's peak allocated memory > 90 % of its memory     checkpointing, AMP, smaller
//                                                                                batch
//   straggler             (several ranks) one rank the last to arrive at the    balance the phase that
//                         collectives holding most of their skew, by > 5 % of    makes it late
//                         the step (collectives.hpp: c10d's calls, else the
//                         communication kernels); never from step lengths
//   exposed_communication collectives with no computation alongside > 10 % of   start each bucket's
//                         the step, on average over the ranks                    all-reduce during backward
//
// Thresholds follow TensorBoard's profiler plugin where it has the rule (DataLoader 5 %, GPU
// utilization 50 %, communication 10 %, memory 90 %, AMP on compute capability >= 7).
//
// Each finding estimates the time a step saves once it is fixed (impact_ns), per step and from
// the trace's own numbers: all of the time in the role or kernels it removes (DataLoader, blocking
// copy calls, transposes, launch gaps, exposed or unhidden communication, idle GPU time, a
// straggler's excess), half of the time it speeds up (pinned over pageable copies, Tensor Cores
// over float32, aligned over misaligned GEMMs). A finding fires only when it saves at least
// kMinSharePercent of the median step and kMinImpactNs; findings are ranked by what they save.
// A risk (memory near capacity) or a note (what to profile instead) saves no time: each comes
// after the findings that do, whatever its size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlprof/analysis/collectives.hpp"
#include "dlprof/analysis/comm_comp_overlap.hpp"
#include "dlprof/analysis/detail/intervals.hpp"
#include "dlprof/analysis/host_syncs.hpp"
#include "dlprof/analysis/idle_time_breakdown.hpp"
#include "dlprof/analysis/kernel_attribution.hpp"
#include "dlprof/analysis/kernel_table.hpp"
#include "dlprof/analysis/model_patterns.hpp"
#include "dlprof/analysis/short_kernel_name.hpp"
#include "dlprof/analysis/options.hpp"
#include "dlprof/analysis/steady_state.hpp"
#include "dlprof/analysis/step_breakdown.hpp"
#include "dlprof/analysis/tensor_cores.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/sorted_runs.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/flops.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// How a finding ranks: by the share of the step it saves (high >= 10 %, medium >= 5 %, low
/// below), or, saving no time, as a risk or a note after those that do.
enum class Severity : std::uint8_t { High, Medium, Low, Risk, Note };

constexpr std::string_view to_string(Severity severity) noexcept {
  switch (severity) {
    case Severity::High: return "high";
    case Severity::Medium: return "medium";
    case Severity::Low: return "low";
    case Severity::Risk: return "risk";
    case Severity::Note: return "note";
  }
  return "low";
}

/// The floors a finding that saves time must pass: a share of the median step and an absolute
/// time per step, so that neither a long step's crumbs nor a short step's microseconds fire.
inline constexpr double kMinSharePercent = 2.0;
inline constexpr double kMinImpactNs = 50'000;

/// One finding: what is wrong, the numbers that show it, what to change, and what it saves.
struct Recommendation {
  std::string id;        ///< stable, one per rule (see the table above)
  std::string text;      ///< the problem and the fix, in a sentence or two
  std::string evidence;  ///< the measurements it rests on
  std::string action;    ///< the fix in a few words
  double impact_ns = 0;  ///< estimated time a step saves once fixed (the worst rank's); 0 for a risk or note
  double share = 0;      ///< impact_ns in % of the median step
  Severity severity = Severity::Low;
  std::vector<std::int64_t> ranks;  ///< the ranks it holds on, ascending
  std::int64_t worst_rank = 0;      ///< the rank it saves the most on

  bool saves_time() const noexcept { return severity != Severity::Risk && severity != Severity::Note; }
};

namespace detail {

// CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind values, as Trace's CopyDetails holds them.
inline constexpr std::uint8_t kHostToDevice = 1;
inline constexpr std::uint8_t kPageable = 1;

inline std::string format_ms(double ns) { return fmt::format("{:.3f} ms", ns / 1e6); }

inline std::string format_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
  if (bytes >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024));
  if (bytes >= 1024.0) return fmt::format("{:.2f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

inline double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

inline bool contains_ignoring_case(std::string_view text, std::string_view lower_pattern) noexcept {
  if (lower_pattern.size() > text.size()) return false;
  for (std::size_t i = 0; i + lower_pattern.size() <= text.size(); ++i) {
    std::size_t j = 0;
    while (j < lower_pattern.size()) {
      char c = text[i + j];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != lower_pattern[j]) break;
      ++j;
    }
    if (j == lower_pattern.size()) return true;
  }
  return false;
}

/// Kernels that convert between NCHW and NHWC (cuDNN's nchwToNhwcKernel / nhwcToNchwKernel,
/// TensorRT-style nchw2nhwc, PyTorch's channels-last copies named after the layouts).
inline bool is_layout_transpose(std::string_view kernel_name) noexcept {
  constexpr std::string_view kPatterns[] = {"nchwtonhwc", "nhwctonchw", "nchw2nhwc", "nhwc2nchw",
                                            "nchw_to_nhwc", "nhwc_to_nchw"};
  for (const std::string_view pattern : kPatterns)
    if (contains_ignoring_case(kernel_name, pattern)) return true;
  return false;
}

/// Ops whose float32 kernels Tensor Cores run under AMP (TensorBoard's list, with the aten
/// variants the dispatcher and autograd call).
inline bool is_tensor_core_eligible_op(std::string_view op) noexcept {
  constexpr std::string_view kOps[] = {
      "aten::mm",          "aten::addmm",        "aten::bmm",          "aten::baddbmm",   "aten::matmul",
      "aten::linear",      "aten::addbmm",       "aten::conv1d",       "aten::conv2d",    "aten::conv3d",
      "aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::conv_transpose1d",
      "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution_backward",
      "aten::cudnn_convolution_transpose", "aten::_scaled_dot_product_attention",
      // PyTorch 1.x's backward convolutions, before convolution_backward (1.10) took their place.
      "aten::cudnn_convolution_backward", "aten::cudnn_convolution_backward_input",
      "aten::cudnn_convolution_backward_weight", "aten::cudnn_convolution_transpose_backward",
      "aten::cudnn_convolution_transpose_backward_input", "aten::cudnn_convolution_transpose_backward_weight"};
  for (const std::string_view name : kOps)
    if (op == name) return true;
  return false;
}

/// Whether an op may compute in float32, from the first type of its "Input type" text. Without
/// record_shapes nothing says, and the op counts (as TensorBoard counts every eligible op): a
/// half-precision op would have run Tensor Core kernels, which the rule also requires absent.
inline bool may_compute_in_float32(std::string_view input_types) noexcept {
  return input_types.find('"') == std::string_view::npos || first_input_type(input_types) == "float";
}

/// (M, N, K) of a matrix-product op from its recorded inputs; false for other ops or shapes.
inline bool gemm_dims(std::string_view op, std::string_view dims, std::string_view types, std::uint64_t& m,
                      std::uint64_t& n, std::uint64_t& k) {
  if (op != "aten::mm" && op != "aten::bmm" && op != "aten::matmul" && op != "aten::addmm" && op != "aten::baddbmm" &&
      op != "aten::linear")
    return false;
  ::dlprof::detail::flops::ParsedInputs inputs;
  if (!inputs.parse(dims, types, {})) return false;
  using ::dlprof::detail::flops::Shape;
  const auto product = [&](const Shape* a, const Shape* b) {
    if (a == nullptr || b == nullptr || a->rank < 2 || b->rank < 2) return false;
    m = (*a)[a->rank - 2];
    k = a->back();
    n = b->back();
    return true;
  };
  if (op == "aten::mm" || op == "aten::bmm" || op == "aten::matmul") return product(inputs.tensor(0), inputs.tensor(1));
  if (op == "aten::addmm" || op == "aten::baddbmm") return product(inputs.tensor(1), inputs.tensor(2));
  if (op == "aten::linear") {
    const Shape* input = inputs.tensor(0);
    const Shape* weight = inputs.tensor(1);
    if (input == nullptr || weight == nullptr || input->rank == 0 || weight->rank != 2) return false;
    m = 1;
    for (std::size_t i = 0; i + 1 < input->rank; ++i) m *= (*input)[i];
    k = input->back();
    n = (*weight)[0];
    return true;
  }
  return false;
}

/// A call that launches a whole CUDA or HIP graph: cudaGraphLaunch, hipGraphLaunch, the driver's
/// cuGraphLaunch (CUPTI's "_v10000" suffixes included).
inline bool is_graph_launch(std::string_view call) noexcept {
  using dlprof::detail::starts_with;
  return starts_with(call, "cudaGraphLaunch") || starts_with(call, "hipGraphLaunch") || starts_with(call, "cuGraphLaunch");
}

inline bool is_graph_capture_begin(std::string_view call) noexcept {
  using dlprof::detail::starts_with;
  return starts_with(call, "cudaStreamBeginCapture") || starts_with(call, "hipStreamBeginCapture") ||
         starts_with(call, "cuStreamBeginCapture");
}

inline bool is_graph_capture_end(std::string_view call) noexcept {
  using dlprof::detail::starts_with;
  return starts_with(call, "cudaStreamEndCapture") || starts_with(call, "hipStreamEndCapture") ||
         starts_with(call, "cuStreamEndCapture");
}

/// AMD's GPUs with matrix cores: the Instinct models of three digits (MI100, MI210, MI250X,
/// MI300X, MI325X, MI355X: CDNA), not the two-digit Vega ones (MI50, MI60), by name, as their
/// compute capability (9.0 for both) does not tell them apart.
inline bool has_amd_matrix_cores(std::string_view name) noexcept {
  for (std::size_t at = name.find("MI"); at != std::string_view::npos; at = name.find("MI", at + 1)) {
    std::size_t digits = 0;
    while (at + 2 + digits < name.size() && name[at + 2 + digits] >= '0' && name[at + 2 + digits] <= '9') ++digits;
    if (digits == 3) return true;
  }
  return false;
}

/// The median; of an even count, the mean of the two middle values.
inline double median(std::vector<std::int64_t> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  if (values.size() % 2 != 0) return static_cast<double>(*middle);
  return (static_cast<double>(*middle) + static_cast<double>(*std::max_element(values.begin(), middle))) / 2;
}

inline Severity severity_of_share(double share) noexcept {
  return share >= 10.0 ? Severity::High : share >= 5.0 ? Severity::Medium : Severity::Low;
}

/// A finding that saves `impact_ns` per step, on steps of `median_step_ns`.
inline Recommendation time_finding(std::string id, std::string text, std::string evidence, std::string action,
                                   double impact_ns, double median_step_ns) {
  Recommendation finding;
  finding.id = std::move(id);
  finding.text = std::move(text);
  finding.evidence = std::move(evidence);
  finding.action = std::move(action);
  finding.impact_ns = impact_ns;
  finding.share = percent(impact_ns, median_step_ns);
  finding.severity = severity_of_share(finding.share);
  return finding;
}

/// A finding that saves no time: a risk, or a note on what to profile instead.
inline Recommendation advisory_finding(std::string id, std::string text, std::string evidence, std::string action,
                                       Severity severity) {
  Recommendation finding = time_finding(std::move(id), std::move(text), std::move(evidence), std::move(action), 0, 0);
  finding.severity = severity;
  return finding;
}

/// Whether a trace's ops or ranges include a backward pass (autograd's "...Backward0" nodes,
/// aten's "..._backward" ops, a user's "backward" range): without one it is inference, and no
/// advice speaks of gradients.
inline bool has_backward_pass(const Trace& trace) {
  std::vector<std::int8_t> backward_by_name(trace.names.size(), -1);
  for (const TraceEvent& event : trace.events) {
    if (event.kind != EventKind::Op && event.kind != EventKind::Range) continue;
    std::int8_t& known = backward_by_name[event.name];
    if (known < 0) known = contains_ignoring_case(trace.names[event.name], "backward") ? 1 : 0;
    if (known == 1) return true;
  }
  return false;
}

/// Drops the findings under the floors and ranks the rest: time findings by the time they save,
/// then risks, then notes, each in the order found.
inline void rank_findings(std::vector<Recommendation>& findings) {
  findings.erase(std::remove_if(findings.begin(), findings.end(),
                                [](const Recommendation& finding) {
                                  return finding.saves_time() &&
                                         (finding.share < kMinSharePercent || finding.impact_ns < kMinImpactNs);
                                }),
                 findings.end());
  std::stable_sort(findings.begin(), findings.end(), [](const Recommendation& a, const Recommendation& b) {
    if (a.saves_time() != b.saves_time()) return a.saves_time();
    if (!a.saves_time()) return a.severity < b.severity;
    return a.impact_ns > b.impact_ns;
  });
}

/// Everything the per-trace rules read, computed once.
struct RuleInputs {
  const Trace& trace;
  const StepBreakdown& steps;
  const KernelAttribution& kernels;
  const CommCompOverlap& overlap;
  const SteadyState& steady;
  MatrixUnits units = MatrixUnits::TensorCores;
  std::int64_t kernel_ns = 0;  ///< summed kernel durations
  std::int64_t span_ns = 0;    ///< the steps' span (first start to last end)
  double steps_count = 1;      ///< the steps the window totals are divided by (1 without steps)
  double median_step_ns = 0;   ///< the findings' shares are of this: of the steady steps, while any is
  bool has_backward = false;
  UnfusedAttention attention;
  int compute_major = 0;               ///< the trace's highest; from kernel names where no device says (NVIDIA)
  bool compute_major_from_names = false;
  std::string_view with_matrix_cores;  ///< an AMD GPU of the trace that has matrix cores
  /// (correlation, index into trace.api_events) of every call with one, by correlation: a sorted
  /// array, not a hash map, as a trace's hundreds of thousands of calls miss the cache in one.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> calls_by_correlation;

  RuleInputs(const Trace& t, const StepBreakdown& s, const KernelAttribution& k, const CommCompOverlap& o,
             const SteadyState& steady_state)
      : trace(t), steps(s), kernels(k), overlap(o), steady(steady_state), units(s.matrix_units) {
    for (const GpuEvent& work : t.gpu_events)
      if (work.kind == GpuEventKind::Kernel) kernel_ns += work.duration_ns();
    if (!steps.steps.empty()) span_ns = steps.steps.back().end_ns - steps.steps.front().start_ns;
    steps_count = static_cast<double>(std::max<std::size_t>(steps.steps.size(), 1));
    std::vector<std::int64_t> durations;
    const bool any_steady = steady.steady_steps() != 0;
    for (std::size_t i = 0; i < steps.steps.size(); ++i)
      if (!any_steady || steady.steady[i]) durations.push_back(steps.steps[i].duration_ns());
    median_step_ns = durations.empty() ? static_cast<double>(t.window_ns()) : median(durations);
    has_backward = has_backward_pass(t);
    attention = unfused_attention(k);
    for (const DeviceProperties& device : t.devices) {
      compute_major = std::max(compute_major, device.compute_major);
      if (with_matrix_cores.empty() && has_amd_matrix_cores(device.name)) with_matrix_cores = device.name;
    }
    // Without deviceProperties, NVIDIA's libraries name the architecture in their kernels' names.
    compute_major_from_names = units != MatrixUnits::MatrixCores && compute_major == 0;
    if (compute_major_from_names) compute_major = compute_major_from_kernel_names(t);
    calls_by_correlation.reserve(t.api_events.size());
    for (std::size_t i = 0; i < t.api_events.size(); ++i)
      if (t.api_events[i].correlation != 0)
        calls_by_correlation.emplace_back(t.api_events[i].correlation, static_cast<std::uint32_t>(i));
    // The first call of a correlation wins, as the first insertion into a map would.
    dlprof::detail::stable_sort_runs(calls_by_correlation.begin(), calls_by_correlation.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  /// A window total as time per step.
  double per_step(double window_ns) const noexcept { return window_ns / steps_count; }

  Recommendation finding(std::string id, std::string text, std::string evidence, std::string action,
                         double impact_ns) const {
    return time_finding(std::move(id), std::move(text), std::move(evidence), std::move(action), impact_ns, median_step_ns);
  }

  /// Whether the GPU has matrix units the rules know: Tensor Cores from compute capability 7,
  /// AMD's matrix cores from the Instinct MI100.
  bool has_matrix_units() const noexcept {
    if (units == MatrixUnits::Unknown) return false;
    return units == MatrixUnits::MatrixCores ? !with_matrix_cores.empty() : compute_major >= 7;
  }

  /// The API call that issued the GPU work of `correlation`; null for none (or 0).
  const ApiEvent* call_of(std::uint32_t correlation) const noexcept {
    if (correlation == 0) return nullptr;
    const auto found = std::lower_bound(calls_by_correlation.begin(), calls_by_correlation.end(), correlation,
                                        [](const auto& entry, std::uint32_t key) { return entry.first < key; });
    return found != calls_by_correlation.end() && found->first == correlation ? &trace.api_events[found->second] : nullptr;
  }
};

inline void dataloader_bound(const RuleInputs& in, std::vector<Recommendation>& out) {
  const auto average = in.steps.average_ns();
  const double step = in.steps.average_step_ns();
  const double loading = average[static_cast<std::size_t>(StepRole::DataLoader)];
  const double share = percent(loading, step);
  if (share <= 5.0) return;
  out.push_back(in.finding("dataloader_bound",
                 fmt::format("{:.1f}% of the step is DataLoader: load batches in parallel with training. Raise the "
                             "number of loader workers (torch::data::DataLoaderOptions().workers(n); num_workers in "
                             "Python), keep them alive across epochs (persistent_workers) and let them prefetch "
                             "batches ahead (DataLoaderOptions().max_jobs; prefetch_factor).",
                             share),
                 fmt::format("DataLoader {} of the average step {} ({:.1f}%), over {} steps", format_ms(loading),
                             format_ms(step), share, in.steps.steps.size()),
                 "more loader workers, kept alive, prefetching", loading));
}

inline void host_to_device_copies(const RuleInputs& in, std::vector<Recommendation>& out) {
  std::size_t copies = 0, pageable = 0, synchronous = 0;
  std::uint64_t bytes = 0, pageable_bytes = 0;
  std::int64_t pageable_ns = 0, blocked_ns = 0;
  for (const GpuEvent& work : in.trace.gpu_events) {
    if (work.kind != GpuEventKind::Memcpy || work.copy.copy_kind != kHostToDevice) continue;
    ++copies;
    bytes += work.copy.bytes;
    const bool from_pageable = work.copy.source_kind == kPageable;
    if (from_pageable) {
      ++pageable;
      pageable_bytes += work.copy.bytes;
      pageable_ns += work.duration_ns();
    }
    const ApiEvent* call = in.call_of(work.correlation);
    const bool blocking_call = call != nullptr && in.trace.names[call->name].find("Async") == std::string::npos;
    if (blocking_call || from_pageable) {  // a copy from pageable memory returns only once staged
      ++synchronous;
      // A call that waited for the GPU's queued work before copying is a synchronisation point
      // (host_syncs): only its own part is the copy's.
      if (call != nullptr) blocked_ns += call->duration_ns() - copy_wait_ns(call->duration_ns(), work.duration_ns());
    }
  }
  const double pageable_share = percent(static_cast<double>(pageable_bytes), static_cast<double>(bytes));
  if (pageable > 0 && pageable_share >= 10.0)
    out.push_back(in.finding("pageable_copies",
                   fmt::format("{:.0f}% of host-to-device bytes come from pageable memory: the driver stages them "
                               "through a pinned buffer, so they are slow and block the CPU. Pin the host buffers "
                               "(torch: DataLoaderOptions with pinned batches or tensor.pin_memory(); CUDA: "
                               "cudaHostAlloc / cudaHostRegister).",
                               pageable_share),
                   fmt::format("{} of {} host-to-device copies from pageable memory, {} of {}, {} on the GPU", pageable,
                               copies, format_bytes(static_cast<double>(pageable_bytes)),
                               format_bytes(static_cast<double>(bytes)), format_ms(static_cast<double>(pageable_ns))),
                   "pin the host buffers of host-to-device copies",
                   in.per_step(static_cast<double>(pageable_ns)) / 2));  // pinned copies run about twice as fast
  const std::int64_t span = in.span_ns > 0 ? in.span_ns : in.trace.window_ns();
  if (synchronous > 0 && percent(static_cast<double>(blocked_ns), static_cast<double>(span)) >= 1.0)
    out.push_back(in.finding("synchronous_copies",
                   "Host-to-device copies block the CPU before compute can be queued: copy asynchronously from pinned "
                   "memory (tensor.to(device, /*non_blocking=*/true) on a pinned tensor; cudaMemcpyAsync on a "
                   "stream) so the copy of the next batch overlaps the current step.",
                   fmt::format("{} of {} host-to-device copies synchronous (blocking call or pageable source), {} "
                               "spent in their calls on the CPU ({:.1f}% of the steps' span)",
                               synchronous, copies, format_ms(static_cast<double>(blocked_ns)),
                               percent(static_cast<double>(blocked_ns), static_cast<double>(span))),
                   "copy asynchronously (non_blocking) from pinned memory", in.per_step(static_cast<double>(blocked_ns))));
}

inline void layout_transposes(const RuleInputs& in, std::vector<Recommendation>& out) {
  std::size_t count = 0;
  std::int64_t ns = 0;
  std::string_view example;
  std::vector<std::int8_t> transpose_by_name(in.trace.names.size(), -1);  // a name is matched once, not per kernel
  const auto is_transpose = [&](std::uint32_t name) {
    if (transpose_by_name[name] < 0) transpose_by_name[name] = is_layout_transpose(in.trace.names[name]) ? 1 : 0;
    return transpose_by_name[name] == 1;
  };
  for (const GpuEvent& work : in.trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel || !is_transpose(work.name)) continue;
    ++count;
    ns += work.duration_ns();
    if (example.empty()) example = in.trace.names[work.name];
  }
  const double share = percent(static_cast<double>(ns), static_cast<double>(in.kernel_ns));
  if (count == 0 || share <= 2.0) return;
  out.push_back(in.finding("layout_transposes",
                 fmt::format("{:.1f}% of kernel time converts tensors between NCHW and NHWC around convolutions: keep "
                             "the model and its inputs in channels_last (model->to(torch::MemoryFormat::ChannelsLast), "
                             "input.contiguous(torch::MemoryFormat::ChannelsLast)) so cuDNN needs no transposes.",
                             share),
                 fmt::format("{} transpose kernels ({}), {} of {} kernel time", count, example,
                             format_ms(static_cast<double>(ns)), format_ms(static_cast<double>(in.kernel_ns))),
                 "keep the model and inputs in channels_last", in.per_step(static_cast<double>(ns))));
}

/// Whether unfused attention takes enough GPU time to be a finding of its own (> 15 %).
inline bool unfused_attention_is_a_finding(const RuleInputs& in) noexcept {
  return in.attention.blocks != 0 &&
         percent(static_cast<double>(in.attention.total_ns()), static_cast<double>(in.kernel_ns)) > 15.0;
}

/// " in layer nn.Module: Linear_fc1", or nothing where no layer is known.
inline std::string in_layer(std::string_view layer) {
  return layer.empty() ? std::string() : fmt::format(" in layer {}", layer);
}

/// "aten::mm with M=30 N=100 K=64 (c10::Half: rows need multiples of 8) in layer ..."
inline std::string describe_gemm(const AttributedKernel& kernel, std::uint64_t m, std::uint64_t n, std::uint64_t k,
                                 std::string_view type, std::uint32_t alignment) {
  if (alignment != 0)
    return fmt::format("{} with M={} N={} K={} on a kernel for rows aligned to {} element{} (align{}){}", kernel.op, m, n,
                       k, alignment, alignment == 1 ? "" : "s", alignment, in_layer(kernel.layer));
  return fmt::format("{} with M={} N={} K={} ({}: rows need multiples of {}){}", kernel.op, m, n, k, type,
                     16 / element_bytes(type), in_layer(kernel.layer));
}

inline void tensor_core_use(const RuleInputs& in, std::vector<Recommendation>& out) {
  const std::vector<AttributedKernel>& rows = in.kernels.kernels;
  // The token counts: M of the forward matrix products of linear layers. In the weight gradient
  // (dW = dY^T X) the token count is K, of operands that are transposed views whose rows are the
  // hidden sizes: it decides no alignment there.
  std::vector<std::uint64_t> token_counts;
  for (const AttributedKernel& kernel : rows) {
    std::uint64_t m = 0, n = 0, k = 0;
    if (kernel.direction == Direction::Forward && gemm_dims(kernel.op, kernel.input_dims, kernel.input_types, m, n, k))
      token_counts.push_back(m);
  }
  std::sort(token_counts.begin(), token_counts.end());
  bool any_tensor_core = false;
  std::int64_t eligible_ns = 0, gemm_ns = 0, misaligned_ns = 0, attention_misaligned_ns = 0;
  std::string misaligned_example, attention_example;
  for (std::size_t row = 0; row < rows.size(); ++row) {
    const AttributedKernel& kernel = rows[row];
    if (kernel.work->kind != GpuEventKind::Kernel) continue;
    any_tensor_core = any_tensor_core || kernel.tensor_cores;
    if (is_tensor_core_eligible_op(kernel.op) && may_compute_in_float32(kernel.input_types)) eligible_ns += kernel.duration_ns;
    std::uint64_t m = 0, n = 0, k = 0;
    if (!gemm_dims(kernel.op, kernel.input_dims, kernel.input_types, m, n, k)) continue;
    gemm_ns += kernel.duration_ns;
    // A GEMM loads 16 bytes at a time from rows that start 16-byte aligned: N (the rows of B and
    // C) and K (of A) decide it, M (the token count) never. The kernel's own alignN says best.
    const std::string_view type = first_input_type(kernel.input_types);
    const std::uint32_t bytes = element_bytes(type);
    const std::uint32_t alignment = kernel_alignment(kernel.name);
    bool misaligned = false;
    if (alignment != 0) {
      misaligned = bytes != 0 ? alignment * bytes < 16 : alignment <= 2;
    } else {
      // Float32 GEMMs matter only on Tensor Cores (TF32); 64-bit ones never run on them.
      if (bytes == 0 || bytes > 4 || (bytes == 4 && !kernel.tensor_cores)) continue;
      const std::uint64_t needed = 16 / bytes;
      const bool k_is_tokens = kernel.direction == Direction::Backward &&
                               std::binary_search(token_counts.begin(), token_counts.end(), k);
      misaligned = n % needed != 0 || (k % needed != 0 && !k_is_tokens);
    }
    if (!misaligned) continue;
    // Attention's products take the sequence length as N or K: SDPA, not padding, is the fix.
    const bool attention = in.attention.is_product(row);
    (attention ? attention_misaligned_ns : misaligned_ns) += kernel.duration_ns;
    std::string& example = attention ? attention_example : misaligned_example;
    if (example.empty()) example = describe_gemm(kernel, m, n, k, type, alignment);
  }
  const bool amd = in.units == MatrixUnits::MatrixCores;
  const std::string_view units = to_string(in.units);
  if (!any_tensor_core && eligible_ns > 0 && in.has_matrix_units())
    out.push_back(in.finding("fp32_without_tensor_cores",
                   fmt::format("Matrix products and convolutions run in float32 and no kernel uses {}, which this GPU "
                               "({}) has: enable automatic mixed precision (torch::autocast / torch.autocast with "
                               "float16 or bfloat16){}.",
                               units,
                               amd ? std::string(in.with_matrix_cores)
                                   : fmt::format("compute capability {}.x{}", in.compute_major,
                                                 in.compute_major_from_names ? ", from its kernels' names" : ""),
                               amd ? "" : ", or TF32 on Ampere and later"),
                   fmt::format("{} of float32 GEMM/conv kernels ({:.1f}% of kernel time), 0 {} kernels",
                               format_ms(static_cast<double>(eligible_ns)),
                               percent(static_cast<double>(eligible_ns), static_cast<double>(in.kernel_ns)),
                               amd ? "matrix-core" : "Tensor Core"),
                   amd ? "enable automatic mixed precision" : "enable automatic mixed precision or TF32",
                   in.per_step(static_cast<double>(eligible_ns)) / 2));  // Tensor Cores run them at least twice as fast
  const double misaligned_share = percent(static_cast<double>(misaligned_ns), static_cast<double>(gemm_ns));
  const double attention_share = percent(static_cast<double>(attention_misaligned_ns), static_cast<double>(gemm_ns));
  // Aligned, they run on the vectorised kernels, about twice as fast.
  if (misaligned_share > 10.0)
    out.push_back(in.finding("gemm_dims_not_multiple_of_8",
                   fmt::format("{:.0f}% of matrix-product kernel time is in products whose rows are not 16-byte aligned "
                               "(N or K not a multiple of 8 in half precision), so the GEMM libraries fall back to "
                               "slower kernels off {}: pad the hidden, head and vocabulary sizes to multiples of 8 (64 "
                               "is better still). The token count (M) need not be.",
                               misaligned_share, units),
                   fmt::format("{} of {} GEMM kernel time; e.g. {}", format_ms(static_cast<double>(misaligned_ns)),
                               format_ms(static_cast<double>(gemm_ns)), misaligned_example),
                   "pad hidden and vocabulary sizes to multiples of 8", in.per_step(static_cast<double>(misaligned_ns)) / 2));
  else if (attention_share > 10.0 && !unfused_attention_is_a_finding(in))
    out.push_back(in.finding("gemm_dims_not_multiple_of_8",
                   fmt::format("{:.0f}% of matrix-product kernel time is in attention's batched products, whose rows "
                               "are not 16-byte aligned because the sequence length is not a multiple of 8: use "
                               "scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention, "
                               "at::scaled_dot_product_attention), whose fused kernels take any sequence length, "
                               "rather than padding the sequence.",
                               attention_share),
                   fmt::format("{} of {} GEMM kernel time; e.g. {}", format_ms(static_cast<double>(attention_misaligned_ns)),
                               format_ms(static_cast<double>(gemm_ns)), attention_example),
                   "use scaled_dot_product_attention", in.per_step(static_cast<double>(attention_misaligned_ns)) / 2));
}

/// Attention computed op by op (model_patterns.hpp): SDPA's fused kernel never writes the scores,
/// so the softmax and the scaling, masking and dropout kernels between the products go; the
/// products remain.
inline void unfused_attention_rule(const RuleInputs& in, std::vector<Recommendation>& out) {
  if (!unfused_attention_is_a_finding(in)) return;
  const UnfusedAttention& attention = in.attention;
  const double share = percent(static_cast<double>(attention.total_ns()), static_cast<double>(in.kernel_ns));
  out.push_back(in.finding(
      "unfused_attention",
      fmt::format("{:.1f}% of kernel time is attention computed op by op: batched matrix products around {}, which "
                  "write the whole score matrix to memory and read it back for the scaling, masking, softmax and "
                  "dropout. Use scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention; "
                  "at::scaled_dot_product_attention; attn_implementation=\"sdpa\" in Hugging Face models): its "
                  "FlashAttention and memory-efficient kernels compute the block in one pass.",
                  share, attention.softmax_op),
      fmt::format("{} attention blocks: products {}, softmax and the kernels between them {}, of {} kernel time",
                  attention.blocks, format_ms(static_cast<double>(attention.products_ns)),
                  format_ms(static_cast<double>(attention.softmax_ns)), format_ms(static_cast<double>(in.kernel_ns))),
      "use scaled_dot_product_attention (FlashAttention)", in.per_step(static_cast<double>(attention.softmax_ns))));
}

/// Float32 matrix products and convolutions left on the CUDA cores of a GPU whose Tensor Cores
/// run TF32 (compute capability 8 and later) while other kernels use Tensor Cores: TF32 or a
/// bfloat16 autocast region moves them to the Tensor Cores, whose TF32 roof is several times the
/// CUDA cores' FP32 one. Without any Tensor Core kernel fp32_without_tensor_cores says so instead.
/// Half of their time is saved, the convention for time a change speeds up.
inline void fp32_matmuls_on_cuda_cores(const RuleInputs& in, const DevicePeaks* peaks, std::vector<Recommendation>& out) {
  if (in.units != MatrixUnits::TensorCores || in.compute_major < 8) return;
  const KernelTable table = kernel_table(in.trace, in.kernels, peaks);
  if (std::none_of(table.rows.begin(), table.rows.end(), [](const KernelTableRow& row) { return row.matrix_units; })) return;
  std::int64_t fp32_ns = 0;
  const KernelTableRow* largest = nullptr;
  for (const KernelTableRow& row : table.rows) {
    if (row.matrix_units || row.precision != Precision::FP32 || !is_tensor_core_eligible_op(row.op)) continue;
    fp32_ns += row.kernel_ns;
    if (largest == nullptr || row.kernel_ns > largest->kernel_ns) largest = &row;
  }
  if (largest == nullptr) return;
  std::string rate;
  if (largest->efficiency)
    rate = fmt::format(", {:.1f} TFLOP/s: {:.0f}% of the CUDA cores' {} TFLOP/s", largest->tflops(),
                       100 * *largest->efficiency, largest->peak_tflops);
  out.push_back(in.finding(
      "fp32_matmuls_on_cuda_cores",
      "Matrix products or convolutions run in float32 on the CUDA cores while the GPU's Tensor Cores, which run "
      "them as TF32 at several times the rate, serve other kernels: allow TF32 "
      "(at::globalContext().setAllowTF32CuBLAS(true) and setAllowTF32CuDNN(true); "
      "torch.backends.cuda.matmul.allow_tf32 = True), or run them in a bfloat16 autocast region.",
      fmt::format("{} of float32 GEMM/conv kernels off Tensor Cores; the longest: {} {}{} ({} calls, {}{})",
                  format_ms(static_cast<double>(fp32_ns)), largest->op, largest->input_dims, in_layer(largest->layer),
                  largest->calls, format_ms(static_cast<double>(largest->kernel_ns)), rate),
      "allow TF32 or autocast to bfloat16", in.per_step(static_cast<double>(fp32_ns)) / 2));
}

/// Ops whose kernels only stream memory: elementwise arithmetic and activations (flops.hpp), the
/// norms, softmax and dropout.
inline bool is_memory_bound_elementwise(std::string_view op) noexcept {
  using dlprof::detail::flops::is_elementwise;
  using dlprof::detail::flops::kPerElementOps;
  using dlprof::detail::flops::layout_of;
  return is_elementwise(op) || layout_of(kPerElementOps, op) != nullptr;
}

/// Runs of memory-bound elementwise kernels launched one after another on one stream, each by its
/// own op over the same shape: each reads back what the one before wrote. One fused kernel moves
/// the data once, and takes about as long as the run's longest kernel.
inline void elementwise_chains(const RuleInputs& in, std::vector<Recommendation>& out) {
  constexpr std::size_t kMinRun = 3;
  std::vector<const AttributedKernel*> kernels;
  for (const AttributedKernel& kernel : in.kernels.kernels)
    if (kernel.work->kind == GpuEventKind::Kernel) kernels.push_back(&kernel);
  // By stream, then start: a run is consecutive on its stream.
  std::stable_sort(kernels.begin(), kernels.end(), [](const AttributedKernel* a, const AttributedKernel* b) {
    return std::tie(a->work->device, a->work->stream, a->work->start_ns) <
           std::tie(b->work->device, b->work->stream, b->work->start_ns);
  });
  std::int64_t saved_ns = 0;
  std::size_t runs = 0;
  std::size_t run_kernels = 0;
  std::string example;
  std::int64_t example_ns = 0;
  const auto output_shape = [](std::string_view dims) {  // the first input's shape stands for the run's
    const std::size_t end = dims.find(']');
    return end == std::string_view::npos ? dims : dims.substr(0, end + 1);
  };
  const auto close_run = [&](std::size_t begin, std::size_t end) {
    if (end - begin < kMinRun) return;
    std::int64_t total = 0;
    std::int64_t longest = 0;
    for (std::size_t i = begin; i < end; ++i) {
      total += kernels[i]->duration_ns;
      longest = std::max(longest, kernels[i]->duration_ns);
    }
    saved_ns += total - longest;
    ++runs;
    run_kernels += end - begin;
    if (total - longest > example_ns) {
      example_ns = total - longest;
      std::vector<std::string_view> ops;
      for (std::size_t i = begin; i < end && ops.size() < 6; ++i) ops.push_back(kernels[i]->op);
      example = fmt::format("{}{} over {}{}: {} kernels, {}", fmt::join(ops, " -> "), end - begin > ops.size() ? " -> ..." : "",
                            output_shape(kernels[begin]->input_dims).substr(1), in_layer(kernels[begin]->layer), end - begin,
                            format_ms(static_cast<double>(total)));
    }
  };
  const auto eligible = [&](std::size_t i) {
    return i < kernels.size() && !kernels[i]->tensor_cores && !kernels[i]->input_dims.empty() &&
           is_memory_bound_elementwise(kernels[i]->op);
  };
  std::size_t begin = 0;
  for (std::size_t i = 0; i <= kernels.size(); ++i) {
    const bool continues = eligible(i) && (i == begin || (kernels[i]->work->stream == kernels[i - 1]->work->stream &&
                                                          kernels[i]->work->device == kernels[i - 1]->work->device &&
                                                          output_shape(kernels[i]->input_dims) ==
                                                              output_shape(kernels[begin]->input_dims)));
    if (continues) continue;
    close_run(begin, i);
    begin = eligible(i) ? i : i + 1;  // this kernel may start the next run
  }
  if (runs == 0) return;
  out.push_back(in.finding(
      "elementwise_chains",
      "Elementwise kernels run in chains over the same tensors, each reading back from memory what the one before "
      "wrote; they are bound by memory, not arithmetic: fuse each chain into one kernel (torch.compile, or a fused "
      "op such as a fused bias-activation or a fused norm), which reads the inputs once and writes the result once.",
      fmt::format("{} chain{} of {} kernels in all, {} to save by fusing them; the largest: {}", runs, runs == 1 ? "" : "s",
                  run_kernels, format_ms(static_cast<double>(saved_ns)), example),
      "fuse elementwise chains (torch.compile)", in.per_step(static_cast<double>(saved_ns))));
}

/// Kernels that only convert dtypes above 10 % of kernel time. Half of them go once weights and
/// inputs are kept in the compute dtype; the rest (float32 islands such as norms and losses) stay.
inline void dtype_casts(const RuleInputs& in, std::vector<Recommendation>& out) {
  std::int64_t cast_ns = 0;
  std::size_t casts = 0;
  const AttributedKernel* longest = nullptr;
  PerName<CopyName> name_of_copy(in.trace, copy_name);
  for (const AttributedKernel& kernel : in.kernels.kernels) {
    if (kernel.work->kind != GpuEventKind::Kernel || !is_dtype_cast_kernel(kernel, name_of_copy(kernel.work->name))) continue;
    cast_ns += kernel.duration_ns;
    ++casts;
    if (longest == nullptr || kernel.duration_ns > longest->duration_ns) longest = &kernel;
  }
  const double share = percent(static_cast<double>(cast_ns), static_cast<double>(in.kernel_ns));
  if (casts == 0 || share <= 10.0) return;
  std::string where;
  if (!longest->op.empty())
    where = longest->parent_op.empty() ? fmt::format(" in {}", longest->op)
                                       : fmt::format(" in {} under {}", longest->op, longest->parent_op);
  out.push_back(in.finding(
      "dtype_casts",
      fmt::format("{:.1f}% of kernel time converts tensors from one dtype to another: keep weights and inputs in the "
                  "dtype the model computes in. Load the model in bfloat16 or float16 (model->to(torch::kBFloat16)) "
                  "or run the whole step in one autocast region, which casts each weight once; cast the inputs once, "
                  "before the step; and remove .float() / .half() round trips between layers.",
                  share),
      fmt::format("{} cast kernels, {} of {} kernel time; the longest {}{}", casts, format_ms(static_cast<double>(cast_ns)),
                  format_ms(static_cast<double>(in.kernel_ns)), format_ms(static_cast<double>(longest->duration_ns)), where),
      "keep tensors in the compute dtype", in.per_step(static_cast<double>(cast_ns)) / 2));
}

/// One kernel of no library, computing in float32 on CUDA cores, above half of the kernel time: a
/// hand-written kernel a library does better. Half of it is saved, the convention for time a
/// change speeds up.
inline void dominant_custom_kernel_rule(const RuleInputs& in, std::vector<Recommendation>& out) {
  const DominantCustomKernel kernel = dominant_custom_kernel(in.trace, in.kernels);
  const double share = percent(static_cast<double>(kernel.ns), static_cast<double>(in.kernel_ns));
  if (kernel.ns == 0 || share <= 50.0) return;
  const bool amd = in.units == MatrixUnits::MatrixCores;
  const std::string_view blas = amd ? "hipBLASLt or rocBLAS" : "cuBLAS or cuBLASLt";
  out.push_back(in.finding(
      "dominant_custom_kernel",
      fmt::format("One kernel that no library provides takes {:.1f}% of kernel time and computes in float32 on the {} "
                  "cores{}. If it is a matrix product, compare it with {} on the same shapes (torch.matmul, "
                  "{}){}: a library GEMM is several times faster than a hand-written one. Otherwise compare its "
                  "achieved bandwidth and FLOP rate with the GPU's limits and tile it through shared memory.",
                  share, amd ? "shader" : "CUDA",
                  in.has_matrix_units() ? fmt::format(", not on the {} this GPU has", to_string(in.units)) : std::string(),
                  blas, amd ? "hipblasLtMatmul" : "cublasGemmEx",
                  in.has_matrix_units() ? (amd ? " in bfloat16 on matrix cores" : " in TF32 or bfloat16 on Tensor Cores")
                                        : ""),
      fmt::format("{}: {} launches, {} of {} kernel time", short_kernel_name(kernel.name),
                  kernel.launches, format_ms(static_cast<double>(kernel.ns)), format_ms(static_cast<double>(in.kernel_ns))),
      fmt::format("compare the kernel with {}", blas), in.per_step(static_cast<double>(kernel.ns)) / 2));
}

/// Random tensors generated on the CPU inside the step and copied to the GPU: what the GPU idles
/// while the host generates them is saved (model_patterns.hpp).
inline void cpu_tensor_creation_rule(const RuleInputs& in, std::vector<Recommendation>& out) {
  const CpuTensorCreation creation = cpu_tensor_creation(in.trace, in.steps);
  if (creation.ops == 0 || creation.gpu_idle_ns <= 0) return;
  out.push_back(in.finding(
      "cpu_tensor_creation",
      fmt::format("The step generates random tensors on the CPU ({}) and copies them to the GPU, which idles while "
                  "the host fills them: create them on the GPU (torch::randn(sizes, torch::kCUDA); torch.randn(..., "
                  "device=\"cuda\")), where a kernel fills them and no copy is needed.",
                  creation.example),
      fmt::format("{} random op{} on the CPU followed by a host-to-device copy: {} on the host, the GPU idle {} of it",
                  creation.ops, creation.ops == 1 ? "" : "s", format_ms(static_cast<double>(creation.host_ns)),
                  format_ms(static_cast<double>(creation.gpu_idle_ns))),
      "create random tensors on the GPU", in.per_step(static_cast<double>(creation.gpu_idle_ns))));
}

/// The stretches a thread spent capturing a CUDA or HIP graph, from its BeginCapture call to its
/// EndCapture call, within [span_start, span_end): kernels launched then are recorded into the
/// graph, not run. A capture the window cuts holds to the span's edge.
inline std::vector<Interval> graph_capture_spans(const Trace& trace, std::int64_t span_start, std::int64_t span_end,
                                                 std::size_t& captures) {
  std::vector<std::int8_t> kind_of_name(trace.names.size(), -1);  // 0: neither, 1: begin, 2: end
  std::vector<Interval> spans;
  captures = 0;
  std::uint32_t thread = UINT32_MAX;
  std::int64_t open_since = INT64_MIN;  // INT64_MIN: not capturing
  const auto close = [&](std::int64_t end) {
    spans.push_back({std::max(open_since, span_start), std::min(end, span_end)});
    ++captures;
    open_since = INT64_MIN;
  };
  for (const ApiEvent& call : trace.api_events) {  // by thread, then start
    if (call.thread != thread) {
      if (open_since != INT64_MIN) close(span_end);
      thread = call.thread;
    }
    if (kind_of_name[call.name] < 0) {
      const std::string_view name = trace.names[call.name];
      kind_of_name[call.name] = is_graph_capture_begin(name) ? 1 : is_graph_capture_end(name) ? 2 : 0;
    }
    if (kind_of_name[call.name] == 1 && open_since == INT64_MIN) open_since = call.start_ns;
    if (kind_of_name[call.name] == 2) {
      if (open_since == INT64_MIN) open_since = span_start;
      close(call.end_ns);
    }
  }
  if (open_since != INT64_MIN) close(span_end);
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const Interval& span) { return span.end <= span.start; }),
              spans.end());
  merge(spans);
  return spans;
}

/// "cudaFree 8262.903 ms, cudaLaunchKernel 4219.3 ms in step 3": the longest first calls of the
/// flagged steps, at most three.
inline std::string first_calls_text(const SteadyState& steady) {
  std::vector<std::pair<const FirstCall*, std::int64_t>> calls;  // (call, its step's number)
  for (const FlaggedStep& step : steady.flagged)
    for (const FirstCall& call : step.calls) calls.emplace_back(&call, step.number);
  std::stable_sort(calls.begin(), calls.end(),
                   [](const auto& a, const auto& b) { return a.first->duration_ns > b.first->duration_ns; });
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < calls.size() && i < 3; ++i)
    texts.push_back(fmt::format("{} {}{}", calls[i].first->name, format_ms(static_cast<double>(calls[i].first->duration_ns)),
                                calls[i].second >= 0 ? fmt::format(" in step {}", calls[i].second) : std::string()));
  return fmt::format("{}", fmt::join(texts, ", "));
}

/// Steps that all hold first calls explaining most of the GPU's idle time: a note to profile after
/// warm-up, and no advice for the idle time. Returns whether it was given.
inline bool first_calls_note(const RuleInputs& in, std::vector<Recommendation>& out) {
  if (in.steady.steady_steps() != 0 || in.steady.first_call_ns == 0 || in.steps.devices.empty()) return false;
  double idle_ns = 0;  // the idlest device's idle time over the steps' span
  for (const DeviceMetrics& device : in.steps.devices)
    idle_ns = std::max(idle_ns, (1.0 - device.utilization) * static_cast<double>(in.span_ns));
  if (2.0 * static_cast<double>(in.steady.first_call_ns) < idle_ns) return false;
  const double share = percent(static_cast<double>(in.steady.first_call_ns), static_cast<double>(in.span_ns));
  out.push_back(advisory_finding(
      "first_calls",
      fmt::format("{:.1f}% of the steps is first calls, which a process makes once: CUDA's context creation, lazy "
                  "module loading in a first launch, the caching allocator's first growth. They, not a want of "
                  "work, leave the GPU idle, and no step of this window is free of them: profile steps after "
                  "warm-up (torch.profiler.schedule(wait=1, warmup=1, active=3), or dlprof's schedule alike) to "
                  "see the steady state.",
                  share),
      fmt::format("first calls (>= {} ms, the GPU idle): {} in all, {} of the steps' span; {}",
                  kMinFirstCallNs / 1'000'000, format_ms(static_cast<double>(in.steady.first_call_ns)),
                  format_ms(static_cast<double>(in.span_ns)), first_calls_text(in.steady)),
      "profile steps after warm-up", Severity::Note));
  return true;
}

/// A GPU busy less than half of the steady steps: a larger batch, unless graph capture, which
/// runs no kernel, or first calls, which happen once, explain it.
inline void gpu_utilization(const RuleInputs& in, std::vector<Recommendation>& out) {
  if (first_calls_note(in, out)) return;
  // Steps left out of the steady state: the steady steps' utilization.
  if (in.steady.steady_steps() != 0 && !in.steady.flagged.empty()) {
    std::vector<std::string> low;
    double idle_ns = 0;  // the idlest low device's idle time over the steady steps
    for (const SteadyUtilization& device : in.steady.utilization) {
      if (device.utilization >= 0.5) continue;
      low.push_back(fmt::format("GPU {} busy {:.1f}% of the {} steady steps", device.device, 100.0 * device.utilization,
                                in.steady.steady_steps()));
      idle_ns = std::max(idle_ns, (1.0 - device.utilization) * static_cast<double>(in.steady.steady_ns));
    }
    if (low.empty()) return;
    out.push_back(in.finding("low_gpu_utilization",
                   "The GPU is idle more than half of the step: give it more work per launch (a larger batch) and "
                   "make sure the input pipeline and the host code keep up (see the other findings). Note that a "
                   "larger batch can change convergence.",
                   fmt::format("{} ({} left out: first calls, outliers or a mid-flight start)", fmt::join(low, "; "),
                               in.steps.steps.size() - in.steady.steady_steps()),
                   "keep the GPU fed with more work per launch",
                   idle_ns / static_cast<double>(in.steady.steady_steps())));
    return;
  }
  std::vector<const DeviceMetrics*> low;
  for (const DeviceMetrics& device : in.steps.devices)
    if (device.kernel_ns > 0 && device.utilization < 0.5) low.push_back(&device);
  if (low.empty()) return;
  const std::vector<Interval> steps_span = {{in.steps.steps.front().start_ns, in.steps.steps.back().end_ns}};
  std::size_t captures = 0;
  const std::vector<Interval> capturing = graph_capture_spans(in.trace, steps_span[0].start, steps_span[0].end, captures);
  const std::vector<Interval> not_capturing = subtract(steps_span, capturing);
  const std::int64_t span_ns = total_length(steps_span);
  const std::int64_t capture_ns = total_length(capturing);
  const double capture_share = percent(static_cast<double>(capture_ns), static_cast<double>(span_ns));
  std::vector<std::string> low_outside, low_overall;
  double idle_ns = 0;  // the idlest low device's idle time outside capture, over the window
  for (const DeviceMetrics* device : low) {
    low_overall.push_back(fmt::format("GPU {} busy {:.1f}% of the steps' span", device->device, 100.0 * device->utilization));
    if (capture_ns == 0) {
      low_outside.push_back(low_overall.back());
      idle_ns = std::max(idle_ns, (1.0 - device->utilization) * static_cast<double>(span_ns));
      continue;
    }
    std::vector<Interval> busy;
    for (const GpuEvent& work : in.trace.gpu_events)
      if (work.kind == GpuEventKind::Kernel && work.device == device->device) busy.push_back({work.start_ns, work.end_ns});
    merge(busy);
    const std::int64_t outside_ns = span_ns - capture_ns;
    const double busy_outside = percent(static_cast<double>(intersection_length(busy, not_capturing)), static_cast<double>(outside_ns));
    if (capture_share < 50.0 && busy_outside < 50.0) {
      low_outside.push_back(fmt::format("GPU {} busy {:.1f}% of the steps' span outside graph capture", device->device, busy_outside));
      idle_ns = std::max(idle_ns, (1.0 - busy_outside / 100.0) * static_cast<double>(outside_ns));
    }
  }
  const std::string graphs = in.units == MatrixUnits::MatrixCores ? "HIP" : "CUDA";
  if (!low_outside.empty()) {
    out.push_back(in.finding("low_gpu_utilization",
                   "The GPU is idle more than half of the step: give it more work per launch (a larger batch) and "
                   "make sure the input pipeline and the host code keep up (see the other findings). Note that a "
                   "larger batch can change convergence.",
                   fmt::format("{}", fmt::join(low_outside, "; ")), "keep the GPU fed with more work per launch",
                   in.per_step(idle_ns)));
    return;
  }
  out.push_back(advisory_finding("graph_capture_phase",
                 fmt::format("{:.1f}% of the steps' span is {} graph capture, during which the kernels launched are "
                             "recorded into a graph, not run: the GPU is idle because the graph is being built, not "
                             "for want of work, and a larger batch would not change that. Profile the steps that "
                             "replay the graph, after warm-up, to see how busy the GPU is.",
                             capture_share, graphs),
                 fmt::format("{}; {} stream capture{} over {} ({:.1f}% of the steps' span)", fmt::join(low_overall, "; "),
                             captures, captures == 1 ? "" : "s", format_ms(static_cast<double>(capture_ns)), capture_share),
                 "profile the steps that replay the graph", Severity::Note));
}

/// The element-wise ops a per-parameter optimizer runs for every parameter (SGD with momentum,
/// Adam, AdamW, RMSprop, Adagrad: torch.optim's for-loop implementations).
inline bool is_per_parameter_update_op(std::string_view op) noexcept {
  constexpr std::string_view kOps[] = {"aten::add_",     "aten::mul_",  "aten::addcmul_", "aten::addcdiv_",
                                       "aten::lerp_",    "aten::sqrt",  "aten::div_",     "aten::sub_",
                                       "aten::sqrt_",    "aten::div",   "aten::maximum",  "aten::copy_"};
  for (const std::string_view name : kOps)
    if (op == name) return true;
  return false;
}

/// An optimizer that updates one parameter at a time: in its step ranges (Optimizer.step#...), at
/// least kMinUpdateOps element-wise ops per step and none of torch's multi-tensor kernels
/// (aten::_foreach_*, aten::_fused_*). Saves half of the optimizer's time, the convention for time
/// a change speeds up: foreach and fused optimizers launch a few kernels for all parameters.
inline void per_parameter_optimizer(const RuleInputs& in, std::vector<Recommendation>& out) {
  constexpr std::size_t kMinUpdateOps = 32;
  using dlprof::detail::starts_with;
  std::vector<std::int8_t> kind_of_name(in.trace.names.size(), -1);  // 0 other, 1 update op, 2 multi-tensor op
  std::size_t steps = 0, update_ops = 0, multi_tensor_ops = 0;
  std::int64_t optimizer_ns = 0;
  std::string_view optimizer;
  std::int64_t open_end = INT64_MIN;  // the end of the optimizer step range being walked
  std::uint32_t thread = UINT32_MAX;
  std::map<std::string_view, std::size_t> update_counts;
  for (const TraceEvent& event : in.trace.events) {  // by thread, then start: a range's ops follow it
    if (event.thread != thread) {
      thread = event.thread;
      open_end = INT64_MIN;
    }
    const std::string_view name = in.trace.names[event.name];
    if (event.kind == EventKind::Range && event.category == Category::Optimizer && starts_with(name, "Optimizer.step")) {
      if (event.start_ns < open_end) continue;  // nested in one already counted
      ++steps;
      optimizer_ns += event.duration_ns();
      optimizer = name;
      open_end = event.end_ns;
      continue;
    }
    if (event.kind != EventKind::Op || event.start_ns >= open_end) continue;
    std::int8_t& kind = kind_of_name[event.name];
    if (kind < 0)
      kind = starts_with(name, "aten::_foreach_") || starts_with(name, "aten::_fused_") ? 2 : is_per_parameter_update_op(name) ? 1 : 0;
    if (kind == 1) {
      ++update_ops;
      ++update_counts[name];
    }
    multi_tensor_ops += kind == 2;
  }
  if (steps == 0 || multi_tensor_ops != 0 || update_ops < kMinUpdateOps * steps) return;
  std::vector<std::pair<std::size_t, std::string_view>> by_count;
  for (const auto& [name, count] : update_counts) by_count.emplace_back(count, name);
  std::sort(by_count.rbegin(), by_count.rend());
  std::vector<std::string> top;
  for (std::size_t i = 0; i < by_count.size() && i < 4; ++i)
    top.push_back(fmt::format("{} x{}", by_count[i].second, by_count[i].first));
  const double per_step_ops = static_cast<double>(update_ops) / static_cast<double>(steps);
  out.push_back(in.finding(
      "per_parameter_optimizer",
      fmt::format("The optimizer updates its parameters one at a time: {:.0f} element-wise ops per optimizer step, "
                  "each a kernel launch, and no multi-tensor kernel. Use the foreach or fused implementation "
                  "(torch.optim.AdamW(..., fused=True) or foreach=True; torch::optim's fused Adam where built), which "
                  "updates every parameter in a few launches.",
                  per_step_ops),
      fmt::format("{}: {} step{}, {} update ops ({}), {} per step in the optimizer", optimizer, steps, steps == 1 ? "" : "s",
                  update_ops, fmt::join(top, ", "), format_ms(static_cast<double>(optimizer_ns) / static_cast<double>(steps))),
      "use a foreach or fused optimizer", in.per_step(static_cast<double>(optimizer_ns)) / 2));
}

/// Kernels shorter than this are short, as TensorBoard's plugin counts them.
inline constexpr std::int64_t kShortKernelNs = 10'000;

/// A GPU idle >= 30 % of the judged steps (the steady ones, while any is), mostly waiting for the
/// host to launch (HTA's idle-time breakdown: host wait over half its idle time), with short
/// kernels (their median below the median launch call, or below 10 us): the host's launch rate
/// sets the step time. Saves the host-wait share of the idle time. Returns whether it fired.
inline bool host_bound(const RuleInputs& in, const IdleTimeBreakdown& idle, std::vector<Recommendation>& out) {
  if (in.steps.steps.empty() || (in.steady.steady_steps() == 0 && in.steady.first_call_ns > 0)) return false;
  const bool partial = in.steady.steady_steps() != 0 && !in.steady.flagged.empty();
  std::vector<Interval> judged;  // the judged steps, by start
  for (std::size_t i = 0; i < in.steps.steps.size(); ++i)
    if (!partial || in.steady.steady[i]) judged.push_back({in.steps.steps[i].start_ns, in.steps.steps[i].end_ns});
  merge(judged);
  const double judged_ns = static_cast<double>(total_length(judged));
  const double judged_steps = static_cast<double>(partial ? in.steady.steady_steps() : in.steps.steps.size());
  // The idlest GPU of the judged steps.
  std::uint32_t device = 0;
  double idle_share = -1;
  if (partial) {
    for (const SteadyUtilization& gpu : in.steady.utilization)
      if (1.0 - gpu.utilization > idle_share) std::tie(device, idle_share) = std::make_pair(gpu.device, 1.0 - gpu.utilization);
  } else {
    for (const DeviceMetrics& gpu : in.steps.devices)
      if (1.0 - gpu.utilization > idle_share) std::tie(device, idle_share) = std::make_pair(gpu.device, 1.0 - gpu.utilization);
  }
  if (idle_share < 0.30 || judged_ns <= 0) return false;
  std::int64_t host_wait_ns = 0, idle_ns = 0;
  for (const StreamIdleTime& stream : idle.streams)
    if (stream.device == device) {
      host_wait_ns += stream.host_wait_ns;
      idle_ns += stream.idle_ns();
    }
  const double host_wait_share = idle_ns > 0 ? static_cast<double>(host_wait_ns) / static_cast<double>(idle_ns) : 0.0;
  if (host_wait_share <= 0.5) return false;
  std::vector<std::int64_t> kernel_durations, call_durations;
  std::size_t short_kernels = 0;
  for (const GpuEvent& work : in.trace.gpu_events) {
    if (work.kind != GpuEventKind::Kernel || work.device != device) continue;
    const auto after = std::upper_bound(judged.begin(), judged.end(), work.start_ns,
                                        [](std::int64_t time, const Interval& span) { return time < span.start; });
    if (after == judged.begin() || std::prev(after)->end <= work.start_ns) continue;
    kernel_durations.push_back(work.duration_ns());
    short_kernels += work.duration_ns() < kShortKernelNs;
    const ApiEvent* call = in.call_of(work.correlation);
    if (call != nullptr && !is_graph_launch(in.trace.names[call->name])) call_durations.push_back(call->duration_ns());
  }
  if (kernel_durations.empty()) return false;
  const double median_kernel = median(kernel_durations);
  const double median_call = median(call_durations);
  if (!(median_kernel < static_cast<double>(kShortKernelNs) || (!call_durations.empty() && median_kernel < median_call)))
    return false;
  const double saving = idle_share * host_wait_share * judged_ns / judged_steps;
  out.push_back(in.finding(
      "host_bound",
      fmt::format("The GPU idles {:.1f}% of the step waiting for the host to launch its work, and its kernels are "
                  "short: the host's launch rate, not the GPU, sets the step time. Capture the step in a {} graph "
                  "(torch.compile(mode=\"reduce-overhead\"), torch.cuda.graphs, at::cuda::CUDAGraph) and fuse small "
                  "ops (torch.compile){}; a larger batch also gives each launch more work.",
                  100.0 * idle_share, in.units == MatrixUnits::MatrixCores ? "HIP" : "CUDA",
                  in.has_backward ? ", and use a fused or foreach optimizer (fused=True, foreach=True)" : ""),
      fmt::format("GPU {} idle {:.1f}% of the {}steps, {:.1f}% of its idle time waiting for the host (HTA's idle "
                  "time); median kernel {:.1f} us, median launch call {:.1f} us; {} of {} kernels are short (< {} us)",
                  device, 100.0 * idle_share, partial ? "steady " : "", 100.0 * host_wait_share, median_kernel / 1e3,
                  median_call / 1e3, short_kernels, kernel_durations.size(), kShortKernelNs / 1000),
      fmt::format("capture the step in a {} graph; fuse kernels", in.units == MatrixUnits::MatrixCores ? "HIP" : "CUDA"),
      saving));
  return true;
}

/// Runs of consecutive kernels on one stream, each shorter than the call that launched it: the
/// GPU finishes every kernel before the CPU has launched the next.
inline void launch_bound(const RuleInputs& in, std::vector<Recommendation>& out) {
  constexpr std::size_t kMinRun = 32;
  std::map<std::pair<std::uint32_t, std::int64_t>, std::vector<const GpuEvent*>> streams;
  for (const GpuEvent& work : in.trace.gpu_events)
    if (work.kind == GpuEventKind::Kernel) streams[{work.device, work.stream}].push_back(&work);
  std::size_t runs = 0, kernels_in_runs = 0;
  std::int64_t run_span_ns = 0, run_kernel_ns = 0;
  std::vector<std::int64_t> kernel_durations, call_durations;
  for (auto& stream : streams) {
    std::vector<const GpuEvent*>& kernels = stream.second;  // not a structured binding: close_run captures it
    std::sort(kernels.begin(), kernels.end(), [](const GpuEvent* a, const GpuEvent* b) { return a->start_ns < b->start_ns; });
    std::size_t begin = 0;
    const auto close_run = [&](std::size_t end) {
      if (end - begin >= kMinRun) {
        ++runs;
        kernels_in_runs += end - begin;
        run_span_ns += kernels[end - 1]->end_ns - kernels[begin]->start_ns;
        for (std::size_t i = begin; i < end; ++i) {
          run_kernel_ns += kernels[i]->duration_ns();
          kernel_durations.push_back(kernels[i]->duration_ns());
          call_durations.push_back(in.call_of(kernels[i]->correlation)->duration_ns());
        }
      }
    };
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      const ApiEvent* call = in.call_of(kernels[i]->correlation);
      // A graph replay's kernels share the one call that launched the whole graph: they are in a
      // graph already, and no kernel of it waits for a launch of its own.
      const bool starved = call != nullptr && !is_graph_launch(in.trace.names[call->name]) &&
                           kernels[i]->duration_ns() < call->duration_ns();
      if (starved) continue;
      close_run(i);
      begin = i + 1;
    }
    close_run(kernels.size());
  }
  const std::int64_t span = in.span_ns > 0 ? in.span_ns : in.trace.window_ns();
  const double share = percent(static_cast<double>(run_span_ns), static_cast<double>(span));
  if (runs == 0 || share <= 10.0) return;
  // A graph (or fused kernels) closes the gaps in which the GPU waits for the next launch.
  out.push_back(in.finding("launch_bound",
                 fmt::format("{:.1f}% of the time the GPU runs long stretches of kernels shorter than the calls that "
                             "launch them, so it waits for the CPU: capture the stretch in a CUDA graph "
                             "(at::cuda::CUDAGraph; torch.cuda.graphs), or fuse the small kernels (torch.compile, "
                             "fused optimizers, fewer elementwise ops).",
                             share),
                 fmt::format("{} stretches of >= {} kernels, {} kernels over {}; median kernel {:.1f} us, median "
                             "launch call {:.1f} us",
                             runs, kMinRun, kernels_in_runs, format_ms(static_cast<double>(run_span_ns)),
                             median(kernel_durations) / 1e3,
                             median(call_durations) / 1e3),
                 "capture the launch-bound stretches in a CUDA graph, or fuse kernels",
                 in.per_step(static_cast<double>(run_span_ns - run_kernel_ns))));
}

/// One synchronisation site in a sentence: "4 scalar reads (28.796 ms of waiting, the GPU idle
/// 3.000 ms after them) in aten::item from model.py(143): forward".
inline std::string describe_sync_site(const SyncSite& site) {
  std::string place;
  if (!site.op.empty()) place += fmt::format(" in {}", site.op);
  if (!site.frame.empty()) place += fmt::format(" from {}", site.frame);
  else if (!site.range.empty()) place += fmt::format(" in range {}", site.range);
  const std::string idle = format_ms(static_cast<double>(site.gpu_idle_after_ns));
  if (site.kind == SyncKind::CopyWait)
    return fmt::format("the host waited {} for the GPU at a {} copy ({}){}; {} such cop{} waited {}, the GPU idle {} after them",
                       format_ms(static_cast<double>(site.longest_wait_ns)),
                       format_bytes(static_cast<double>(site.longest_wait_bytes)), site.call, place, site.count,
                       site.count == 1 ? "y" : "ies", format_ms(static_cast<double>(site.wait_ns)), idle);
  return fmt::format("{} {}{} ({} of waiting, the GPU idle {} after them){}", site.count,
                     site.kind == SyncKind::ScalarRead ? "scalar read" : site.call, site.count == 1 ? "" : "s",
                     format_ms(static_cast<double>(site.wait_ns)), idle, place);
}

/// A rule's id, its problem and fix, and the fix in a few words.
struct RuleAdvice {
  std::string_view id;
  std::string_view text;
  std::string_view action;
};

/// The advice for each kind of synchronisation point, by SyncKind.
inline constexpr RuleAdvice kSyncAdvice[kSyncKindCount] = {
    {"synchronize_calls",
     "The step calls cudaDeviceSynchronize or cudaStreamSynchronize (torch.cuda.synchronize()): the host waits for all "
     "queued work, and the GPU then idles until the host launches again. Remove them from the step; time with CUDA "
     "events (torch.cuda.Event), and wait on an event only where the host needs a result.",
     "remove synchronize calls from the step"},
    {"scalar_read_syncs",
     "Reading a GPU tensor's value on the host (Tensor.item(), `if tensor:`, .tolist(), printing a loss) waits for "
     "every kernel queued before it, and the GPU then idles until the host launches again. Keep values on the GPU "
     "(accumulate losses and metrics as tensors, read them every N steps) and replace Python conditions on tensors "
     "with tensor ops (torch.where, masks).",
     "keep values on the GPU; read them every N steps"},
    {"copies_wait_for_gpu",
     "Copies between host and GPU take far longer than their transfer: the host waits in them for the work queued "
     "before the copy, so it is that work, not the copy, that takes the time, and the GPU idles after it until the "
     "host launches again. Copy with non_blocking=True into pinned memory (cudaMemcpyAsync) and wait on a CUDA event "
     "only where the host needs the values.",
     "copy asynchronously; wait on an event only where needed"},
};

/// The host's waits for the GPU, one finding per kind of synchronisation point: what the GPU
/// idles after them is what removing them saves (host_syncs.hpp).
inline void host_synchronizations(const RuleInputs& in, const HostSyncs& syncs, std::vector<Recommendation>& out) {
  for (std::size_t k = 0; k < kSyncKindCount; ++k) {
    const auto kind = static_cast<SyncKind>(k);
    std::int64_t saving = 0, wait = 0;
    std::size_t points = 0;
    std::vector<std::string> top;  // the sites that save the most, at most three
    for (const SyncSite& site : syncs.sites) {
      if (site.kind != kind) continue;
      saving += site.saving_ns;
      wait += site.wait_ns;
      points += site.count;
      if (top.size() < 3) top.push_back(describe_sync_site(site));
    }
    if (saving <= 0) continue;
    const double per_step = in.per_step(static_cast<double>(saving));
    const RuleAdvice& advice = kSyncAdvice[k];
    out.push_back(in.finding(std::string(advice.id), std::string(advice.text),
                             fmt::format("{} points over the steps, {} of waiting, {} per step saved once gone; {}", points,
                                         format_ms(static_cast<double>(wait)), format_ms(per_step), fmt::join(top, "; ")),
                             std::string(advice.action), per_step));
  }
}

inline void communication(const RuleInputs& in, std::vector<Recommendation>& out) {
  const auto average = in.steps.average_ns();
  const double step = in.steps.average_step_ns();
  const double comm = average[static_cast<std::size_t>(StepRole::Communication)];
  const double share = percent(comm, step);
  // Advice by phase: gradients and DDP's buckets only where there is a backward pass.
  if (share > 10.0)
    out.push_back(in.finding(
        "communication_heavy",
        in.has_backward
            ? fmt::format("{:.1f}% of the step is communication: exchange less often or in larger pieces (gradient "
                          "accumulation, larger batches, gradient compression, larger DDP buckets).",
                          share)
            : fmt::format("{:.1f}% of the step is communication, with no backward pass: send fewer, larger messages "
                          "(fuse small collectives, larger micro-batches) and shard the model so that fewer layers "
                          "need a collective.",
                          share),
        fmt::format("Communication {} of the average step {} ({:.1f}%)", format_ms(comm), format_ms(step), share),
        "communicate less often, in larger pieces", comm));
  if (in.overlap.has_communication() && in.overlap.overlap_percent() < 50.0)
    out.push_back(in.finding(
        "low_comm_overlap",
        in.has_backward
            ? fmt::format("Only {:.1f}% of communication overlaps computation: start collectives while the backward "
                          "pass still runs (DDP gradient buckets, bucket_cap_mb; collectives on their own stream) so "
                          "the GPU computes while it communicates.",
                          in.overlap.overlap_percent())
            : fmt::format("Only {:.1f}% of communication overlaps computation, with no backward pass: issue "
                          "collectives on their own stream and give the GPU independent work meanwhile (the next "
                          "micro-batch or layer), so that it computes while it communicates.",
                          in.overlap.overlap_percent()),
        fmt::format("communication kernels {}, of which overlapped by computation {}",
                    format_ms(static_cast<double>(in.overlap.communication_ns)),
                    format_ms(static_cast<double>(in.overlap.overlap_ns))),
        "overlap communication with computation",
        in.per_step(static_cast<double>(in.overlap.communication_ns - in.overlap.overlap_ns))));
}

inline void memory_near_capacity(const RuleInputs& in, std::vector<Recommendation>& out) {
  std::map<std::int32_t, std::int64_t> peak;  // device -> peak bytes allocated
  for (const MemoryEvent& memory : in.trace.memory_events)
    if (is_gpu_memory(memory.device_type)) peak[memory.device] = std::max(peak[memory.device], memory.total_allocated);
  std::vector<std::string> full;  // the devices above 90 %, with their peaks
  std::int32_t fullest = 0;
  double fullest_share = 0;
  for (const auto& [device, bytes] : peak) {
    const DevicePropertiesOf found = device_properties_of(in.trace.devices, device);
    if (!found || found.properties->total_global_mem <= 0) continue;
    const DeviceProperties* properties = found.properties;
    const double share = percent(static_cast<double>(bytes), static_cast<double>(properties->total_global_mem));
    if (share <= 90.0) continue;
    full.push_back(fmt::format("peak allocated {} of {} on GPU {}", format_bytes(static_cast<double>(bytes)),
                               format_bytes(static_cast<double>(properties->total_global_mem)), device));
    if (share > fullest_share) {
      fullest_share = share;
      fullest = device;
    }
  }
  if (full.empty()) return;
  out.push_back(advisory_finding("memory_near_capacity",
                                 fmt::format("GPU {} peaks at {:.1f}% of its memory: one larger batch or activation will "
                                             "not fit. Trade compute for memory with activation (gradient) "
                                             "checkpointing, halve activations with mixed precision, or lower the "
                                             "batch size.",
                                             fullest, fullest_share),
                                 fmt::format("{}", fmt::join(full, "; ")),
                                 "leave memory headroom (checkpointing, mixed precision)", Severity::Risk));
}

/// "0-3, 5, 7" for ascending ranks.
inline std::string rank_list(const std::vector<std::int64_t>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t last = i;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    if (!out.empty()) out += ", ";
    out += last > i + 1 ? fmt::format("{}-{}", ranks[i], ranks[last])
                        : last == i + 1 ? fmt::format("{}, {}", ranks[i], ranks[last]) : fmt::format("{}", ranks[i]);
    i = last + 1;
  }
  return out;
}

/// The findings of every rank as one list, a rule found on several ranks as one finding: told by
/// the rank it saves the most on (its impact, text and evidence), naming every rank it holds on
/// ("ranks 0-3, 5 (worst: rank 2): ...") when the report covers several. `per_rank` holds each
/// rank's findings, in rank order.
inline void add_findings_of_ranks(std::vector<std::pair<std::int64_t, std::vector<Recommendation>>>&& per_rank,
                                  std::vector<Recommendation>& out) {
  const bool several_ranks = per_rank.size() > 1;
  std::vector<Recommendation> merged;  // one per rule id, in order of first appearance
  for (auto& [rank, findings] : per_rank)
    for (Recommendation& finding : findings) {
      const auto same_rule = std::find_if(merged.begin(), merged.end(),
                                          [&](const Recommendation& other) { return other.id == finding.id; });
      if (same_rule == merged.end()) {
        finding.ranks = {rank};
        finding.worst_rank = rank;
        merged.push_back(std::move(finding));
        continue;
      }
      if (std::find(same_rule->ranks.begin(), same_rule->ranks.end(), rank) == same_rule->ranks.end())
        same_rule->ranks.push_back(rank);
      if (finding.impact_ns > same_rule->impact_ns) {
        std::vector<std::int64_t> ranks = std::move(same_rule->ranks);
        *same_rule = std::move(finding);
        same_rule->ranks = std::move(ranks);
        same_rule->worst_rank = rank;
      }
    }
  for (Recommendation& finding : merged) {
    std::sort(finding.ranks.begin(), finding.ranks.end());
    if (several_ranks) {
      finding.text = finding.ranks.size() == 1
                         ? fmt::format("rank {}: {}", finding.worst_rank, finding.text)
                         : fmt::format("ranks {} (worst: rank {}): {}", rank_list(finding.ranks), finding.worst_rank,
                                       finding.text);
      if (finding.ranks.size() > 1) finding.evidence = fmt::format("rank {}: {}", finding.worst_rank, finding.evidence);
    }
    out.push_back(std::move(finding));
  }
}

/// The straggler of the collectives: the rank the others wait for, and the phase that makes it late.
inline void collective_straggler(const CollectiveAnalysis& collectives, std::vector<Recommendation>& out) {
  const Straggler& s = *collectives.straggler;
  double others_waiting = 0, step_ns = 0;
  std::size_t others = 0;
  for (const RankPhases& rank : collectives.ranks) {
    step_ns += rank.step_ns;
    if (rank.rank != s.rank) {
      others_waiting += rank.waiting_ns;
      ++others;
    }
  }
  if (others != 0) others_waiting /= static_cast<double>(others);
  if (!collectives.ranks.empty()) step_ns /= static_cast<double>(collectives.ranks.size());
  const std::string arrives = fmt::format("Rank {} arrives last at {} of {} collectives, {} after the first rank on average: "
                                          "the other ranks wait for it in every collective.",
                                          s.rank, s.last_arrivals, s.instances, format_ms(s.mean_lateness_ns));
  const std::string evidence = fmt::format("rank {} last at {}/{} collectives, {} late on average; the other ranks wait {} per "
                                           "step inside collectives",
                                           s.rank, s.last_arrivals, s.instances, format_ms(s.mean_lateness_ns),
                                           format_ms(others_waiting));
  // Balanced, the straggler's late phase takes the others' median time: the excess is saved. With
  // no phase to blame, the others would stop waiting for it: the time it holds them back.
  Recommendation finding =
      s.phase ? time_finding("straggler",
                             fmt::format("{} Its {} takes {} per step against the other ranks' median of {}: balance that "
                                         "work (data, model shards, a slower device or host) across the ranks.",
                                         arrives, to_string(*s.phase), format_ms(s.phase_ns), format_ms(s.others_median_phase_ns)),
                             fmt::format("{}; {} {} vs median {} (+{})", evidence, to_string(*s.phase), format_ms(s.phase_ns),
                                         format_ms(s.others_median_phase_ns), format_ms(s.excess_ns())),
                             fmt::format("balance rank {}'s {}", s.rank, to_string(*s.phase)), s.excess_ns(), step_ns)
              : time_finding("straggler",
                             fmt::format("{} No annotated phase of its steps is longer than the other ranks': compare what it "
                                         "runs before each collective (its data, host, device or link) with another rank's.",
                                         arrives),
                             evidence, fmt::format("find what delays rank {}", s.rank), s.held_back_ns, step_ns);
  finding.ranks = {s.rank};
  finding.worst_rank = s.rank;
  out.push_back(std::move(finding));
}

/// Communication with no computation alongside, above 10 % of the step on average over the ranks.
inline void exposed_communication(const CollectiveAnalysis& collectives, std::vector<Recommendation>& out) {
  double exposed = 0, step = 0, most_exposed = -1;
  bool backward = false;
  std::vector<std::int64_t> ranks;
  std::int64_t worst_rank = 0;
  for (const RankPhases& rank : collectives.ranks) {
    if (rank.exposed_communication_ns > most_exposed) {
      most_exposed = rank.exposed_communication_ns;
      worst_rank = rank.rank;
    }
    exposed += rank.exposed_communication_ns;
    step += rank.step_ns;
    backward = backward || rank.phase_ns[static_cast<std::size_t>(StepPhase::Backward)] > 0;
    ranks.push_back(rank.rank);
  }
  if (step <= 0 || exposed / step <= 0.10) return;
  const double share = 100.0 * exposed / step;
  const double per_rank = exposed / static_cast<double>(collectives.ranks.size());
  Recommendation finding = time_finding(
      "exposed_communication",
      backward ? fmt::format("{:.1f}% of each step is spent in collectives with no computation alongside. Start each "
                             "gradient bucket's all-reduce as soon as backward has produced it (DDP's bucket hooks, "
                             "asynchronous work waited for before the optimizer), so communication hides behind the "
                             "rest of backward, and use fewer, larger buckets.",
                             share)
               : fmt::format("{:.1f}% of each step is spent in collectives with no computation alongside, with no "
                             "backward pass: issue them on their own stream beside independent computation (the next "
                             "micro-batch or layer), and fuse small ones.",
                             share),
      fmt::format("{} of exposed communication per step on average over {} ranks ({:.1f}% of the step)",
                  format_ms(per_rank), collectives.ranks.size(), share),
      "hide collectives behind computation", per_rank, step / static_cast<double>(collectives.ranks.size()));
  std::sort(ranks.begin(), ranks.end());
  finding.ranks = std::move(ranks);
  finding.worst_rank = worst_rank;
  out.push_back(std::move(finding));
}

}  // namespace detail

/// The findings of one trace (one rank) from its analyses, which a caller that has them (make_report)
/// gives so that none is computed twice.
/// `peaks` stands for the roofs of every GPU of the trace (dlprof-report --peaks); null: each
/// GPU's own (device_peaks.hpp).
inline std::vector<Recommendation> recommendations(const Trace& trace, const StepBreakdown& steps,
                                                   const KernelAttribution& kernels, const CommCompOverlap& overlap,
                                                   const IdleTimeBreakdown& idle, const HostSyncs& syncs,
                                                   const SteadyState& steady, const DevicePeaks* peaks = nullptr) {
  const detail::RuleInputs in(trace, steps, kernels, overlap, steady);
  std::vector<Recommendation> out;
  detail::dataloader_bound(in, out);
  detail::host_to_device_copies(in, out);
  detail::layout_transposes(in, out);
  detail::tensor_core_use(in, out);
  detail::fp32_matmuls_on_cuda_cores(in, peaks, out);
  detail::elementwise_chains(in, out);
  detail::unfused_attention_rule(in, out);
  detail::dtype_casts(in, out);
  detail::dominant_custom_kernel_rule(in, out);
  detail::cpu_tensor_creation_rule(in, out);
  // Host-bound idle time is one finding: the launch-bound stretches and the batch size are its
  // parts and its alternative.
  if (!detail::host_bound(in, idle, out)) {
    detail::gpu_utilization(in, out);
    detail::launch_bound(in, out);
  }
  detail::host_synchronizations(in, syncs, out);
  detail::per_parameter_optimizer(in, out);
  detail::communication(in, out);
  detail::memory_near_capacity(in, out);
  for (Recommendation& finding : out) {
    finding.ranks = {trace.distributed.rank};
    finding.worst_rank = trace.distributed.rank;
  }
  detail::rank_findings(out);
  return out;
}

/// The findings of one trace (one rank).
inline std::vector<Recommendation> recommendations(const Trace& trace, const AnalysisOptions& options = {}) {
  const StepBreakdown steps = step_breakdown(trace);
  return recommendations(trace, steps, kernel_attribution(trace), comm_comp_overlap(trace, options),
                         idle_time_breakdown(trace, options), host_syncs(trace), steady_state(trace, steps));
}

/// The findings of every rank, a rule found on several ranks as one finding (add_findings_of_ranks),
/// and, from the collectives across the ranks, whether one rank holds the others back and how
/// much communication no computation hides, ranked by what they save.
inline std::vector<Recommendation> recommendations(const std::vector<Trace>& ranks, const AnalysisOptions& options = {}) {
  std::vector<std::pair<std::int64_t, std::vector<Recommendation>>> per_rank;
  std::vector<RankCollectives> collectives;
  for (const Trace& trace : ranks) {
    per_rank.emplace_back(trace.distributed.rank, recommendations(trace, options));
    collectives.push_back(summarize_collectives(trace));
  }
  std::vector<Recommendation> out;
  detail::add_findings_of_ranks(std::move(per_rank), out);
  if (ranks.size() > 1) {
    const CollectiveAnalysis across = analyze_collectives(collectives);
    if (across.straggler) detail::collective_straggler(across, out);
    if (!across.empty()) detail::exposed_communication(across, out);
  }
  detail::rank_findings(out);
  return out;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
