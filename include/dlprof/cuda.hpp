// dlprof/cuda.hpp: ranges around raw CUDA calls, without touching the kernels ("monkey-patch
// style"): replace a launch or a copy by its wrapper and it becomes a range named after what it
// does, linked to the kernel or copy it causes when GPU activity is recorded (dlprof::cupti).
//
//   dlprof::cuda::launch(gemm_tiled, grid, block, 0, stream, a, b, c, m, n, k);  // range "gemm_tiled"
//   dlprof::cuda::launch(sgd_update<float>, grid, block, 0, stream, w, g, lr, n); // "sgd_update<float>"
//   DLPROF_CUDA_LAUNCH(relu_forward, grid, block, 0, stream, x, n);              // "relu_forward", cheapest
//   dlprof::cuda::memcpy_async(device, host, bytes, cudaMemcpyHostToDevice, copy_stream);  // "cudaMemcpyAsync HtoD"
//
//   dlprof::cuda::StepTimer gpu_step(stream);   // GPU time of a step, from CUDA events
//   gpu_step.begin(); ...launches...; gpu_step.end();
//   float ms = gpu_step.elapsed_ms();           // waits; also the "gpu step ms" counter while recording
//
// Every wrapper returns the cudaError_t of the call it wraps. Cost: while no Profiler window is
// open and no NVTX tool is attached, a wrapper adds what an idle range costs (one relaxed load and
// a branch) to the CUDA call. launch() names its range after the kernel the first time a
// recorded launch needs it (cudaFuncGetName and the demangler, CUDA 12.3 and later) and keeps
// the name: later launches look it up under a lock. Older toolkits name it "cudaLaunchKernel".
//
// Builds with the host compiler (link CUDA::cudart) and with nvcc.
#pragma once

#if defined(__CUDACC__)
#  include <cuda_runtime.h>
#else
#  include <cuda_runtime_api.h>
#endif

#include <cxxabi.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/category.hpp"
#include "dlprof/range.hpp"

DLPROF_BEGIN_NAMESPACE
namespace cuda {
namespace detail {

/// The name of a range around a launch whose kernel the runtime cannot name.
inline constexpr std::string_view kUnnamedLaunch = "cudaLaunchKernel";

/// The name a kernel's ranges get: demangled, without return type, parameter list or
/// "(anonymous namespace)::" (nvcc gives every file's anonymous namespace a distinct mangled
/// name; the demangler prints them all alike, so it tells nothing). Template arguments and named
/// namespaces stay: "_Z10sgd_updateIfEvPT_PKS0_S0_i" -> "sgd_update<float>". A name that does not
/// demangle (an extern "C" kernel) is kept as it is.
inline std::string kernel_range_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);

  // The parameter list is the last top-level parenthesised group; scanning back from the end
  // skips parentheses inside it ("void (*)(int)" parameters).
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (std::size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      else if (name[i] == '(' && --depth == 0) {
        name.erase(i);
        break;
      }
    }
  }
  // A function template's demangled name begins with its return type ("void "): what precedes
  // the last space outside template arguments and parentheses.
  int depth = 0;
  for (std::size_t i = name.size(); i-- > 0;) {
    const char c = name[i];
    if (c == '>' || c == ')') ++depth;
    else if (c == '<' || c == '(') --depth;
    else if (c == ' ' && depth == 0) {
      name.erase(0, i + 1);
      break;
    }
  }
  constexpr std::string_view kAnonymous = "(anonymous namespace)::";
  for (std::size_t at = name.find(kAnonymous); at != std::string::npos; at = name.find(kAnonymous, at))
    name.erase(at, kAnonymous.size());
  return name;
}

/// Asks the runtime for a kernel's name. A failure must not surface in the caller's next
/// cudaGetLastError(): the error it leaves is cleared, unless an earlier one was pending.
inline std::string resolve_kernel_name(const void* kernel) {
#if CUDART_VERSION >= 12030
  const bool error_pending = cudaPeekAtLastError() != cudaSuccess;
  const char* mangled = nullptr;
  if (cudaFuncGetName(&mangled, kernel) == cudaSuccess && mangled != nullptr) return kernel_range_name(mangled);
  if (!error_pending) static_cast<void>(cudaGetLastError());
#else
  static_cast<void>(kernel);
#endif
  return std::string(kUnnamedLaunch);
}

/// A kernel's display name, resolved on first use and kept for the life of the process (the
/// view stays valid, through exit too: the table is never destroyed): a recording loop demangles
/// each kernel once.
inline std::string_view kernel_name(const void* kernel) {
  static std::mutex mutex;
  static auto* const names = new std::unordered_map<const void*, std::string>();  // nodes never move
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = names->find(kernel);
  if (found != names->end()) return found->second;
  return names->emplace(kernel, resolve_kernel_name(kernel)).first->second;
}

template <class... Types>
struct TypeList {};

template <class Params, class Args, class = void>
struct ArgumentsConvert : std::false_type {};
template <class... Params, class... Args>
struct ArgumentsConvert<TypeList<Params...>, TypeList<Args...>, std::enable_if_t<sizeof...(Params) == sizeof...(Args)>>
    : std::conjunction<std::is_convertible<Args, Params>...> {};

/// The arguments of one launch, converted to the kernel's parameter types (as `<<<>>>` converts
/// them), and the array of their addresses that cudaLaunchKernel reads. It points into itself,
/// so it stays where it was made.
template <class... Params>
class KernelArguments {
 public:
  template <class... Args>
  explicit KernelArguments(Args&&... args)
      : values_(std::forward<Args>(args)...),
        pointers_(std::apply([](auto&... value) { return std::array<void*, sizeof...(Params)>{&value...}; }, values_)) {}

  KernelArguments(const KernelArguments&) = delete;
  KernelArguments& operator=(const KernelArguments&) = delete;

  /// Null for a kernel without parameters, which cudaLaunchKernel accepts.
  void** pointers() noexcept { return pointers_.data(); }

 private:
  std::tuple<Params...> values_;
  std::array<void*, sizeof...(Params)> pointers_;
};

/// cudaLaunchKernel with typed arguments, no range.
template <class... KernelParams, class... Args>
cudaError_t launch_unannotated(void (*kernel)(KernelParams...), dim3 grid, dim3 block, std::size_t shared_memory_bytes,
                               cudaStream_t stream, Args&&... args) {
  static_assert(ArgumentsConvert<TypeList<std::decay_t<KernelParams>...>, TypeList<Args&&...>>::value,
                "dlprof::cuda::launch: give one argument per kernel parameter, each implicitly convertible to it");
  KernelArguments<std::decay_t<KernelParams>...> arguments(std::forward<Args>(args)...);
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, arguments.pointers(), shared_memory_bytes,
                          stream);
}

// The copy and fill ranges, one static site per name: nothing is built or interned per call.
// cudaMemcpyDefault is named "Default" rather than resolved with cudaPointerGetAttributes: that
// would add driver calls to every copy, and to the trace it is meant to explain.
inline dlprof::detail::Site g_memcpy_sites[] = {
    dlprof::detail::Site{"cudaMemcpy HtoH"}, dlprof::detail::Site{"cudaMemcpy HtoD"},
    dlprof::detail::Site{"cudaMemcpy DtoH"}, dlprof::detail::Site{"cudaMemcpy DtoD"},
    dlprof::detail::Site{"cudaMemcpy Default"}, dlprof::detail::Site{"cudaMemcpy"}};
inline dlprof::detail::Site g_memcpy_async_sites[] = {
    dlprof::detail::Site{"cudaMemcpyAsync HtoH"}, dlprof::detail::Site{"cudaMemcpyAsync HtoD"},
    dlprof::detail::Site{"cudaMemcpyAsync DtoH"}, dlprof::detail::Site{"cudaMemcpyAsync DtoD"},
    dlprof::detail::Site{"cudaMemcpyAsync Default"}, dlprof::detail::Site{"cudaMemcpyAsync"}};
inline dlprof::detail::Site g_memset_site{"cudaMemset"};
inline dlprof::detail::Site g_memset_async_site{"cudaMemsetAsync"};

/// The range of a copy: its direction, or no direction for a kind outside cudaMemcpyKind (the
/// call then fails with cudaErrorInvalidMemcpyDirection).
inline const dlprof::detail::Site& memcpy_site(cudaMemcpyKind kind, bool async) noexcept {
  const auto index = static_cast<unsigned>(kind);
  constexpr unsigned kUnknownKind = 5;
  return (async ? g_memcpy_async_sites : g_memcpy_sites)[index < kUnknownKind ? index : kUnknownKind];
}

[[noreturn]] inline void throw_cuda_error(std::string_view call, cudaError_t error) {
  throw std::runtime_error(
      fmt::format("dlprof::cuda: {} failed: {} ({})", call, cudaGetErrorString(error), cudaGetErrorName(error)));
}

/// A CUDA event that belongs to one object: created with it, destroyed with it, moved with it.
class OwnedEvent {
 public:
  OwnedEvent() {
    if (const cudaError_t error = cudaEventCreate(&event_); error != cudaSuccess) throw_cuda_error("cudaEventCreate", error);
  }
  ~OwnedEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  OwnedEvent(OwnedEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  OwnedEvent& operator=(OwnedEvent&& other) noexcept {
    std::swap(event_, other.event_);  // `other` destroys what this owned
    return *this;
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;

  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace detail

/// The name launch() gives a kernel's ranges ("gemm_tiled", "sgd_update<float>"), or
/// "cudaLaunchKernel" when the runtime cannot name it (no driver, not a kernel, CUDA < 12.3).
/// Resolved once per kernel; the view stays valid for the life of the process.
template <class... KernelParams>
std::string_view kernel_name(void (*kernel)(KernelParams...)) {
  return detail::kernel_name(reinterpret_cast<const void*>(kernel));
}

/// Launches `kernel` like `kernel<<<grid, block, shared_memory_bytes, stream>>>(args...)`, inside
/// a range named after it. Each argument converts implicitly to its parameter's type.
template <class... KernelParams, class... Args>
cudaError_t launch(void (*kernel)(KernelParams...), dim3 grid, dim3 block, std::size_t shared_memory_bytes,
                   cudaStream_t stream, Args&&... args) {
  if (DLPROF_LIKELY(dlprof::detail::active_flags() == 0))
    return detail::launch_unannotated(kernel, grid, block, shared_memory_bytes, stream, std::forward<Args>(args)...);
  const ScopedRange range(kernel_name(kernel), Category::User);
  return detail::launch_unannotated(kernel, grid, block, shared_memory_bytes, stream, std::forward<Args>(args)...);
}

/// cudaMemcpy in a range named after its direction: "cudaMemcpy HtoD", "cudaMemcpy DtoH"...
inline cudaError_t memcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  const ScopedRange range(detail::memcpy_site(kind, /*async=*/false));
  return cudaMemcpy(dst, src, bytes, kind);
}

/// cudaMemcpyAsync in a range named after its direction: "cudaMemcpyAsync HtoD"...
inline cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                                cudaStream_t stream = nullptr) {
  const ScopedRange range(detail::memcpy_site(kind, /*async=*/true));
  return cudaMemcpyAsync(dst, src, bytes, kind, stream);
}

/// cudaMemset in a range "cudaMemset".
inline cudaError_t memset(void* ptr, int value, std::size_t bytes) {
  const ScopedRange range(detail::g_memset_site);
  return cudaMemset(ptr, value, bytes);
}

/// cudaMemsetAsync in a range "cudaMemsetAsync".
inline cudaError_t memset_async(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr) {
  const ScopedRange range(detail::g_memset_async_site);
  return cudaMemsetAsync(ptr, value, bytes, stream);
}

/// GPU time of a step (or any span of a stream's work), from a pair of CUDA events:
///
///   StepTimer timer(stream);
///   timer.begin(); ...work on `stream`...; timer.end();
///   float ms = timer.elapsed_ms();
///
/// Each measurement, the first time it is read, is also a sample of the "gpu step ms" counter
/// when a Profiler window is open. CUDA failures throw std::runtime_error naming the error;
/// calls out of order (end() before begin(), reading before end()) throw std::logic_error.
/// Movable, not copyable; a moved-from timer may only be destroyed or assigned to.
class StepTimer {
 public:
  explicit StepTimer(cudaStream_t stream = nullptr) : stream_(stream) {}

  StepTimer(StepTimer&&) noexcept = default;
  StepTimer& operator=(StepTimer&&) noexcept = default;
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  /// Marks the start: work queued on the stream after this call is timed.
  void begin() {
    record(begin_);
    state_ = State::Begun;
  }

  /// Marks the end: work queued on the stream before this call is timed.
  void end() {
    if (state_ != State::Begun) throw std::logic_error("dlprof::cuda::StepTimer::end() without begin()");
    record(end_);
    state_ = State::Ended;
    reported_ = false;
  }

  /// Milliseconds of GPU time between begin() and end(); waits for the end to be reached.
  float elapsed_ms() {
    require_ended("elapsed_ms");
    if (const cudaError_t error = cudaEventSynchronize(end_.get()); error != cudaSuccess)
      detail::throw_cuda_error("cudaEventSynchronize", error);
    return measure();
  }

  /// The same without waiting: empty while the GPU has not reached end() yet.
  std::optional<float> last_ms() {
    require_ended("last_ms");
    const cudaError_t status = cudaEventQuery(end_.get());
    if (status == cudaErrorNotReady) return std::nullopt;
    if (status != cudaSuccess) detail::throw_cuda_error("cudaEventQuery", status);
    return measure();
  }

  cudaStream_t stream() const noexcept { return stream_; }

 private:
  enum class State : unsigned char { Idle, Begun, Ended };

  void record(const detail::OwnedEvent& event) {
    if (const cudaError_t error = cudaEventRecord(event.get(), stream_); error != cudaSuccess)
      detail::throw_cuda_error("cudaEventRecord", error);
  }

  void require_ended(const char* method) const {
    if (state_ != State::Ended)
      throw std::logic_error(fmt::format("dlprof::cuda::StepTimer::{}(): end() has not been called since begin()", method));
  }

  float measure() {
    float ms = 0;
    if (const cudaError_t error = cudaEventElapsedTime(&ms, begin_.get(), end_.get()); error != cudaSuccess)
      detail::throw_cuda_error("cudaEventElapsedTime", error);
    if (!reported_) {
      reported_ = true;
      dlprof::counter("gpu step ms", ms);
    }
    return ms;
  }

  cudaStream_t stream_;
  detail::OwnedEvent begin_;
  detail::OwnedEvent end_;
  State state_ = State::Idle;
  bool reported_ = false;  // this measurement has been sampled as a counter
};

}  // namespace cuda
DLPROF_END_NAMESPACE

#if defined(DLPROF_DISABLE)
// Compiled out: the launch stays, its range goes.
#  define DLPROF_CUDA_LAUNCH(kernel, ...) ::dlprof::cuda::detail::launch_unannotated(kernel, __VA_ARGS__)
#else
/// DLPROF_CUDA_LAUNCH(kernel, grid, block, shared_memory_bytes, stream, args...): launch() in a
/// range named by the kernel expression as written, registered once like DLPROF_RANGE's name:
/// no lookup, no demangling. A template with several arguments needs parentheses,
/// `(gemm<true, false>)`, and they are part of the name. Evaluates to the cudaError_t.
#  define DLPROF_CUDA_LAUNCH(kernel, ...)                                            \
    ([&]() -> cudaError_t {                                                         \
      static ::dlprof::detail::Site dlprof_cuda_launch_site{#kernel};               \
      const ::dlprof::ScopedRange dlprof_cuda_launch_range{dlprof_cuda_launch_site}; \
      return ::dlprof::cuda::detail::launch_unannotated(kernel, __VA_ARGS__);       \
    }())
#endif
