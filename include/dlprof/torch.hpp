// dlprof/torch.hpp: LibTorch's operators in the trace. Link dlprof::torch (profiler.hpp then
// includes this header) or include it yourself, and every ATen op and autograd node of the
// recorded steps becomes a `cpu_op` slice on its thread, as torch.profiler records them:
//
//   dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(1, 1, 3)));
//   prof.start();
//   for (auto& batch : dlprof::annotate(*loader)) { ...model, loss.backward(), optimizer.step()...; prof.step(); }
//
// Each op carries `External id` (kernels it launches link to it when CUDA activity is recorded),
// and ops that autograd numbers carry `Sequence number` and `Fwd thread id`; backward nodes, and
// every op run inside one, are in the Backward category, and a `fwdbwd` flow links each backward
// node to the forward op it differentiates.
//
// With record_shapes (or with_flops), ops also carry `Input Dims` ([[4, 8], [8, 8]]), `Input
// type` (["float", "float"]; "Scalar" for scalars, "ScalarList" for int, float and bool lists,
// "TensorList" for tensor lists, "" otherwise) and `Concrete Inputs` (the values of scalars and
// lists as strings, ["", "", "[2, 2]", "1", "False"]), as torch.profiler 2.x writes them; with
// with_flops, ops with a formula (flops.hpp) carry `flops`. LibTorch's RecordFunction::inputs()
// asserts in a translation unit built without NDEBUG, so there inputs are left out, with one
// warning; build the file that includes this header with NDEBUG.
//
// Cost: the observer is a global RecordFunction callback installed only while the schedule is
// warming up or recording and removed when it goes idle, so an idle step pays LibTorch's own
// RecordFunction cost and nothing of dlprof's. While installed it keeps no per-op allocation: a
// per-thread stack of open ops and two 32-byte events per numbered op (one otherwise). A thread
// that runs ops while recording keeps its state (about 40 KiB, thread-local) and allocates, on
// its first op, the 64 KiB history its name lookups are predicted from (with record_shapes,
// another for its input lookups).
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/optim.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "dlprof/annotate.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/backends/op_observer.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/out_of_memory.hpp"
#include "dlprof/detail/recording/stack_table.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/category.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/memory_tag.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Whether a Profiler window records LibTorch's allocations (profile_memory): what an annotated
/// optimizer's memory holds is tagged only then.
inline std::atomic<bool> g_torch_memory_reports{false};

/// LibTorch's allocator reports (c10's memory-reporting hook) turned into Memory events. LibTorch
/// looks the reporter up in the thread's PROFILER_STATE debug info, which it hands on to the
/// threads that run work for this one (autograd's device threads, at::launch).
class TorchMemoryReporter final : public c10::MemoryReportingInfoBase {
  // LibTorch 1.x passes the totals as int64_t, 2.x as size_t (and so may its out-of-memory report).
  template <class>
  struct TotalsOf;
  template <class Class, class Pointer, class Size, class Total, class Device>
  struct TotalsOf<void (Class::*)(Pointer, Size, Total, Total, Device)> {
    using type = Total;
  };
  using Total = typename TotalsOf<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;
  template <class>
  struct OutOfMemoryTotalsOf;
  template <class Class, class Size, class Total, class Device>
  struct OutOfMemoryTotalsOf<void (Class::*)(Size, Total, Total, Device)> {
    using type = Total;
  };
  using OutOfMemoryTotal = typename OutOfMemoryTotalsOf<decltype(&c10::MemoryReportingInfoBase::reportOutOfMemory)>::type;

 public:
  void reportMemoryUsage(void* address, std::int64_t bytes, Total total_allocated, Total total_reserved,
                         c10::Device device) override {
    if (!reporting_.load(std::memory_order_relaxed) || (active_flags() & kRecording) == 0) return;
    const std::int64_t now = now_ticks();
    push_event(Event{static_cast<NameId>(total_allocated), now, {static_cast<std::int64_t>(total_reserved)},
                     RecordKind::MemoryTotals, Category::User});
    const MemoryDeviceType type = device.is_cuda() ? MemoryDeviceType::CUDA : MemoryDeviceType::CPU;
    push_event(Event{reinterpret_cast<NameId>(address), now, {bytes}, RecordKind::Memory, Category::User,
                     pack_memory_device(type, device.is_cpu() ? -1 : device.index())});
  }
  void reportOutOfMemory(std::int64_t bytes, OutOfMemoryTotal total_allocated, OutOfMemoryTotal total_reserved,
                         c10::Device device) override {
    if (!reporting_.load(std::memory_order_relaxed)) return;
    report_out_of_memory(bytes, static_cast<std::int64_t>(total_allocated), static_cast<std::int64_t>(total_reserved),
                         device.is_cuda() ? MemoryDeviceType::CUDA : MemoryDeviceType::CPU, device.is_cpu() ? -1 : device.index());
  }
  bool memoryProfilingEnabled() const override { return reporting_.load(std::memory_order_relaxed); }

  /// Off for good: LibTorch may still hold this reporter on threads it handed it to.
  void stop() noexcept { reporting_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> reporting_{true};
};

/// Predicts a thread's next lookup in a cache from the order of its last ones: a training step
/// makes the same lookups in the same order step after step, and after an op's compute the entry
/// a lookup reads is rarely in cache, while a predicted one can be prefetched as soon as the next
/// op enters, before its key is even known. It keeps the entries (`Ref`s, value-initialised for
/// none) that its last kLength lookups found, in order, and predicts that the lookups go on as
/// they went on before: it follows that history while the predictions hold and, at the first
/// that fails, starts again after the previous occurrence of the entry the lookup did find (each
/// entry keeps the lookup count of its last occurrence). In steady state every prediction holds.
/// The whole order is followed, not each entry's last successor, because an input recurs with
/// different ops after it in one step. The cache still checks each prediction against the key.
template <class Ref>
class LookupHistory {
 public:
  /// Lookups kept: more than a thread's step makes, or its lookups are not predicted.
  static constexpr std::size_t kLength = 8192;

  /// Allocates the history (64 KiB), once; the cache calls it on a miss. Without the memory for
  /// it, nothing is predicted.
  void allocate() noexcept {
    if (!history_.empty()) return;
    try {
      history_.resize(kLength);
    } catch (...) {
    }
  }

  /// The entry the next lookup is predicted to find; Ref{} for none.
  Ref predicted() const noexcept { return predicted_; }

  /// Appends `found`, the entry the lookup just made found or added, and predicts the next one:
  /// after the prediction that held, or else after `found`'s previous occurrence. `seen` is the
  /// count `found` kept (0: never found before); the entry keeps the count returned.
  std::uint64_t follow(Ref found, std::uint64_t seen, bool was_predicted) noexcept {
    if (history_.empty()) return 0;  // not allocated: no memory for it
    std::uint64_t next = was_predicted ? followed_ + 1 : seen;
    history_[lookups_ % kLength] = found;
    ++lookups_;
    // Only lookups made since the entry was added, and still in the history, are followed: they
    // are after the cache last started over, so their entries are in it.
    if (next == 0 || next >= lookups_ || lookups_ - next > kLength) next = 0;
    followed_ = next;
    predicted_ = next == 0 ? Ref{} : history_[next % kLength];
    return lookups_;
  }

  /// Forgets the prediction: the cache starts over, and counts kept by its old entries go with them.
  void start_over() noexcept {
    followed_ = 0;
    predicted_ = Ref{};
  }

 private:
  Ref predicted_{};
  std::uint64_t followed_ = 0;  // the lookup of the history that predicted_ comes from
  std::uint64_t lookups_ = 0;   // made since the history was created
  std::vector<Ref> history_;    // the last kLength lookups' entries, by lookup count
};

/// A dense tensor: one with strides (sparse and MKL-DNN layouts have none, and asking throws).
inline bool has_strides(const at::Tensor& tensor) noexcept { return tensor.layout() == c10::kStrided; }

/// The interned texts of an op's inputs (dims, strides, types, concrete values), cached per thread by the
/// raw values they are made of: a training step calls the same ops on the same shapes again and
/// again, and formatting three texts with fmt and interning them costs more than the rest of the
/// observer together. A lookup walks the inputs once into a key of words on the stack, hashes it
/// and probes an open-addressed table from the hash's low bits: each slot holds the hash's high
/// half and where the entry lies in an arena, so only an entry whose slot matches is read and
/// compared word by word. A miss formats, interns and
/// appends the entry (hash, texts, key) to the arena. Entries lie there in the order they were
/// first seen, a step's op order, so a step in steady state reads the arena front to back.
///
/// A LookupHistory predicts each lookup's entry, prefetched when the op before it enters and again
/// when it enters, along with its inputs, and compared with the key first: a lookup then hashes
/// nothing and reads no slot, and the entry it compares arrives while the inputs are loading,
/// not after them (unpredicted, the slot, the entry's header and its key words are three misses
/// in a row once an op's compute has evicted them).
///
/// Any key that repeats hits once it is in, whatever the others hash to: the table doubles to stay
/// at most half full, up to kMaxEntries, and starts over empty when that many are in (inputs that
/// never repeat, such as a value that changes on every call). A table of fixed sets would let
/// keys that fall in one set evict each other on every step and be formatted again each time.
class InputTextCache {
 public:
  /// Inputs whose key would take more words are formatted every time (a conv2d's backward takes
  /// 43, a conv3d's 50).
  static constexpr std::size_t kMaxWords = 128;
  /// Distinct keys kept at most; at that many the cache starts over.
  static constexpr std::size_t kMaxEntries = 4096;

  /// Starts loading the inputs' tensor objects, which the key reads: after an op's compute has
  /// run they are rarely in cache, and loading them together overlaps their misses. Every line
  /// the object spans, to its last byte: allocations are 16-byte aligned, so a TensorImpl of
  /// 192 bytes spans four lines three times in four, and its dtype lies in the fourth.
  static void prefetch_inputs(const at::RecordFunction& fn) noexcept {
    for (const c10::IValue& input : fn.inputs()) {
      if (!input.isTensor()) continue;
      const char* impl = reinterpret_cast<const char*>(input.unsafeToTensorImpl());
      for (std::size_t line = 0; line < sizeof(c10::TensorImpl); line += 64) __builtin_prefetch(impl + line);
      __builtin_prefetch(impl + sizeof(c10::TensorImpl) - 1);
    }
  }

  /// Starts loading the entry the next lookup is predicted to find: its header and key words.
  void prefetch_predicted() const noexcept {
    const std::uint64_t predicted = history_.predicted();
    if (predicted == 0) return;
    const char* entry = reinterpret_cast<const char*>(&arena_[offset_of(predicted)]);
    const std::size_t bytes = (kHeader + words_of(predicted)) * sizeof(std::int64_t);
    for (std::size_t line = 0; line < bytes && line < kMaxPrefetchBytes; line += 64) __builtin_prefetch(entry + line);
  }

  /// The ids of `fn`'s input texts, formatted by `format(fn, shape, types_and_concrete)` on a miss
  /// only: a key that repeats calls it once until the cache starts over. `shape` packs the dims'
  /// and the strides' ids (pack_op_input_shape()); 0: nothing interned.
  template <class Format>
  void texts(const at::RecordFunction& fn, NameId& dims, std::int64_t& types_and_concrete, Format&& format) {
    Key key;
    if (!make_key(fn, key)) {
      format(fn, dims, types_and_concrete);
      return;
    }
    const std::uint64_t predicted = history_.predicted();
    if (predicted != 0 && same_key(offset_of(predicted), key))
      return found(offset_of(predicted), true, dims, types_and_concrete);
    // Hashed only when the prediction fails: a hash is a chain of a multiply, a rotate and an
    // xor per word, the longest part of a predicted lookup.
    const std::uint64_t hash = hash_of(key);
    const std::uint64_t high = hash >> 32;
    std::size_t slot = 0;
    if (!slots_.empty()) {
      const std::size_t mask = slots_.size() - 1;
      for (slot = hash & mask; slots_[slot] != 0; slot = (slot + 1) & mask) {
        if ((slots_[slot] >> 32) != high) continue;
        const std::size_t offset = static_cast<std::uint32_t>(slots_[slot]) - 1;
        if (same_key(offset, key)) return found(offset, false, dims, types_and_concrete);
      }
    }
    format(fn, dims, types_and_concrete);
    if (dims == 0) return;  // nothing interned: nothing to keep
    try {
      follow(insert(key, hash, slot, dims, types_and_concrete), false);
    } catch (...) {  // no memory to keep it: the texts stand, formatted again next time
    }
  }

 private:
  static constexpr std::size_t kInitialSlots = 256;
  /// A prefetch covers this much of a predicted entry: the header and a conv2d backward's key.
  static constexpr std::size_t kMaxPrefetchBytes = 512;
  // An entry in the arena: these header words, then the key's words. kSeen is the number of
  // lookups made when the entry was last found or added, counting that one.
  static constexpr std::size_t kHash = 0, kDims = 1, kTypesAndConcrete = 2, kLength = 3, kSeen = 4, kHeader = 5;
  struct Key {
    std::uint32_t length;
    std::int64_t words[kMaxWords];
  };

  /// A reference to an entry: its offset + 1 (never 0, no entry) and, in the high half, its key's
  /// length in words, so that a prefetch knows how far the entry reaches without reading it.
  static std::uint64_t reference(std::size_t offset, std::int64_t words) noexcept {
    return (static_cast<std::uint64_t>(words) << 32) | (static_cast<std::uint64_t>(offset) + 1);
  }
  static std::size_t offset_of(std::uint64_t reference) noexcept { return static_cast<std::uint32_t>(reference) - 1; }
  static std::size_t words_of(std::uint64_t reference) noexcept { return reference >> 32; }

  /// Compared by length and words, not hash: the hash is not computed when a prediction holds.
  bool same_key(std::size_t offset, const Key& key) const noexcept {
    const std::int64_t* entry = &arena_[offset];
    return entry[kLength] == key.length && same_words(entry + kHeader, key.words, key.length);
  }

  void found(std::size_t offset, bool was_predicted, NameId& dims, std::int64_t& types_and_concrete) noexcept {
    dims = static_cast<NameId>(arena_[offset + kDims]);
    types_and_concrete = arena_[offset + kTypesAndConcrete];
    follow(offset, was_predicted);
  }

  void follow(std::size_t offset, bool was_predicted) noexcept {
    const std::uint64_t seen = static_cast<std::uint64_t>(arena_[offset + kSeen]);
    arena_[offset + kSeen] =
        static_cast<std::int64_t>(history_.follow(reference(offset, arena_[offset + kLength]), seen, was_predicted));
  }

  /// Appends the entry and returns its offset; `slot` is the empty slot the lookup ended on (any
  /// slot when there were none).
  std::size_t insert(const Key& key, std::uint64_t hash, std::size_t slot, NameId dims,
                     std::int64_t types_and_concrete) {
    history_.allocate();
    if (entries_ == kMaxEntries) {
      std::fill(slots_.begin(), slots_.end(), 0);
      arena_.clear();
      entries_ = 0;
      history_.start_over();
      slot = free_slot(hash);
    } else if (2 * (entries_ + 1) > slots_.size()) {
      grow();
      slot = free_slot(hash);
    }
    const std::size_t offset = arena_.size();
    arena_.resize(offset + kHeader + key.length);  // all or nothing: the only step that may throw after grow()
    std::int64_t* entry = &arena_[offset];
    entry[kHash] = static_cast<std::int64_t>(hash);
    entry[kDims] = static_cast<std::int64_t>(dims);
    entry[kTypesAndConcrete] = types_and_concrete;
    entry[kLength] = key.length;
    entry[kSeen] = 0;
    std::memcpy(entry + kHeader, key.words, key.length * sizeof(std::int64_t));
    slots_[slot] = slot_value(hash, offset);
    ++entries_;
    return offset;
  }

  /// Twice the slots (kInitialSlots at first), the entries placed again from their stored hashes.
  void grow() {
    std::vector<std::uint64_t> slots(slots_.empty() ? kInitialSlots : 2 * slots_.size(), 0);
    slots_.swap(slots);
    for (std::size_t offset = 0; offset < arena_.size();
         offset += kHeader + static_cast<std::size_t>(arena_[offset + kLength])) {
      const auto hash = static_cast<std::uint64_t>(arena_[offset + kHash]);
      slots_[free_slot(hash)] = slot_value(hash, offset);
    }
  }

  std::size_t free_slot(std::uint64_t hash) const noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t slot = hash & mask;
    while (slots_[slot] != 0) slot = (slot + 1) & mask;
    return slot;
  }

  /// The hash's high half and the entry's offset + 1 (never 0, the empty slot).
  static std::uint64_t slot_value(std::uint64_t hash, std::size_t offset) noexcept {
    return (hash >> 32 << 32) | (static_cast<std::uint64_t>(offset) + 1);
  }

  enum Tag : std::int64_t {
    kTensor = 1, kBool, kInt, kDouble, kOtherScalar, kIntList, kDoubleList, kBoolList, kTensorList, kOther,
    kUnstridedTensor, kNestedTensor
  };

  /// Everything the four texts depend on, in words: a defined tensor's tag, dtype and rank in one
  /// word, then its sizes and strides (a sparse tensor's sizes only, a nested tensor's neither);
  /// a scalar's tag and value (a double's bits); a list's tag and length, then its values; any
  /// other input's tag. False when it does not fit.
  static bool make_key(const at::RecordFunction& fn, Key& key) noexcept {
    std::uint32_t n = 0;
    const auto room = [&](std::size_t words) { return n + words <= kMaxWords; };
    for (const c10::IValue& input : fn.inputs()) {
      if (input.isTensor() && input.toTensor().defined()) {
        const at::Tensor& tensor = input.toTensor();
        const auto dtype = static_cast<std::int64_t>(tensor.scalar_type()) << 8;
        if (tensor.is_nested()) {
          if (!room(1)) return false;
          key.words[n++] = kNestedTensor | dtype;
          continue;
        }
        const c10::IntArrayRef sizes = tensor.sizes();
        const bool strided = has_strides(tensor);
        if (!room(1 + (strided ? 2 : 1) * sizes.size())) return false;
        key.words[n++] = (strided ? kTensor : kUnstridedTensor) | dtype | (static_cast<std::int64_t>(sizes.size()) << 16);
        for (const std::int64_t size : sizes) key.words[n++] = size;
        if (strided)
          for (const std::int64_t stride : tensor.strides()) key.words[n++] = stride;
      } else if (input.isBool() || input.isInt() || input.isDouble()) {
        if (!room(2)) return false;
        key.words[n++] = input.isBool() ? kBool : input.isInt() ? kInt : kDouble;
        key.words[n++] = input.isBool() ? input.toBool() : input.isInt() ? input.toInt() : double_bits(input.toDouble());
      } else if (input.isList()) {
        // The element type decides the texts (an empty int list is a ScalarList, an empty tensor
        // list a TensorList); the values are read through the list's IValues, which copies no
        // List handle (each copy is an atomic reference count up and down).
        const std::int64_t tag = input.isIntList()      ? kIntList
                                 : input.isDoubleList() ? kDoubleList
                                 : input.isBoolList()   ? kBoolList
                                 : input.isTensorList() ? kTensorList
                                                        : kOther;
        if (tag == kTensorList || tag == kOther) {
          if (!room(1)) return false;
          key.words[n++] = tag;
          continue;
        }
        const c10::ArrayRef<c10::IValue> values = input.toListRef();
        if (!room(2 + values.size())) return false;
        key.words[n++] = tag;
        key.words[n++] = static_cast<std::int64_t>(values.size());
        for (const c10::IValue& value : values) {
          switch (tag) {
            case kIntList: key.words[n++] = value.toInt(); break;
            case kDoubleList: key.words[n++] = double_bits(value.toDouble()); break;
            default: key.words[n++] = value.toBool(); break;  // kBoolList
          }
        }
      } else {
        if (!room(1)) return false;
        key.words[n++] = input.isScalar() ? kOtherScalar : kOther;
      }
    }
    key.length = n;
    return true;
  }

  static std::uint64_t hash_of(const Key& key) noexcept {
    // Each word's product is independent of the others, so only a rotate and an xor per word are
    // serial; murmur3's finaliser then spreads it into the low bits the slot index takes.
    std::uint64_t hash = 0x9E3779B97F4A7C15ull ^ key.length;
    for (std::uint32_t i = 0; i < key.length; ++i)
      hash = ((hash << 5) | (hash >> 59)) ^ (static_cast<std::uint64_t>(key.words[i]) * 0xFF51AFD7ED558CCDull);
    hash ^= hash >> 33;
    hash *= 0xC4CEB9FE1A85EC53ull;
    hash ^= hash >> 33;
    return hash;
  }

  /// Inline: keys are a few words, shorter than a call to memcmp costs.
  static bool same_words(const std::int64_t* a, const std::int64_t* b, std::uint32_t length) noexcept {
    for (std::uint32_t i = 0; i < length; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }

  static std::int64_t double_bits(double value) noexcept {
    std::int64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
  }

  // What prefetch_predicted() reads, in the object's first line (ThreadState).
  LookupHistory<std::uint64_t> history_;  // of references to entries
  std::vector<std::int64_t> arena_;   // at most kMaxEntries * (kHeader + kMaxWords) words: offsets fit 32 bits
  std::vector<std::uint64_t> slots_;  // a power of two of them once the first entry is in
  std::size_t entries_ = 0;
};

// LibTorch's RecordFunction is laid out differently with and without NDEBUG, so whether the
// observer may read op inputs depends on the translation unit. The observer's code lives in an
// inline namespace named after that switch: a program with Debug and Release files holds two
// observers, each consistent with its files, never one inline function with two bodies.
#if defined(NDEBUG)
#  define DLPROF_TORCH_OBSERVER_NAMESPACE ndebug
#else
#  define DLPROF_TORCH_OBSERVER_NAMESPACE debug
#endif
inline namespace DLPROF_TORCH_OBSERVER_NAMESPACE {

/// LibTorch's RecordFunction callbacks turned into Op events.
class TorchOpObserver final : public OpObserver {
 public:
  static TorchOpObserver& instance() {
    static TorchOpObserver* observer = new TorchOpObserver();  // callbacks may run during exit
    return *observer;
  }

  /// Whether this translation unit can read op inputs (see the header comment).
#if defined(NDEBUG)
  static constexpr bool kCanReadInputs = true;
#else
  static constexpr bool kCanReadInputs = false;
#endif

  void enable(const OpObserverOptions& options) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handle_ != 0) return;
    bool shapes = options.record_shapes || options.with_flops;
    if (shapes && !kCanReadInputs) {
      shapes = false;
      static std::once_flag warned;
      std::call_once(warned, [] {
        print_warning(
            "record_shapes and with_flops need NDEBUG where dlprof/torch.hpp is included (LibTorch's "
            "RecordFunction::inputs() asserts otherwise): recording ops without input shapes or FLOPs");
      });
    }
    record_inputs_.store(shapes, std::memory_order_relaxed);
    if (options.profile_memory) start_memory_reports();
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                        .needsInputs(shapes)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                 at::RecordScope::USER_SCOPE}));
  }

  void disable() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_memory_reports();
    if (handle_ == 0) return;
    at::removeCallback(handle_);
    handle_ = 0;
  }

  /// Whether the callback is installed now.
  bool installed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return handle_ != 0;
  }

 private:
  /// Installs a memory reporter on the calling thread (the one driving the Profiler).
  void start_memory_reports() {
    g_torch_memory_reports.store(true, std::memory_order_relaxed);
    memory_reporter_ = std::make_shared<TorchMemoryReporter>();
    memory_reporter_thread_ = std::this_thread::get_id();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, memory_reporter_);
  }

  void stop_memory_reports() {
    g_torch_memory_reports.store(false, std::memory_order_relaxed);
    if (memory_reporter_ == nullptr) return;
    memory_reporter_->stop();
    // Debug info is a per-thread stack: only the thread that pushed it can pop it, and only
    // while it is still on top.
    if (memory_reporter_thread_ == std::this_thread::get_id() &&
        c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == memory_reporter_.get())
      c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    memory_reporter_.reset();
  }

  /// An op entered on this thread and not yet left: one cache line, which on_enter prefetches.
  struct alignas(64) OpenOp {
    const at::RecordFunction* record;  // LibTorch calls on_exit with the object it called on_enter with
    std::int64_t start;
    NameId name;
    std::int64_t sequence_number;
    std::uint64_t forward_thread_id;
    NameId input_shape;  // the dims' and strides' ids (pack_op_input_shape()); 0: no inputs recorded
    std::int64_t input_types_and_concrete;  // pack_op_input_names()
    std::uint32_t correlation_sequence;
    bool backward;
    bool opens_backward;  // a backward node, or the engine's evaluate_function around one
  };
  static_assert(sizeof(OpenOp) == 64, "an open op is one cache line");

  /// The ops open on a thread. Fixed depth, so entering an op never allocates; deeper nesting
  /// than this is not recorded.
  struct OpenOps {
    static constexpr std::size_t kMaxDepth = 128;
    std::size_t depth = 0;  // first: its line is one of those every entry reads first (ThreadState)
    std::uint32_t backward_depth = 0;  // open ops that make what they contain backward
    std::array<OpenOp, kMaxDepth> ops;
    std::array<StackId, kMaxDepth> stacks;  // with_stack: each open op's; apart, as ops' lines are full
  };

  /// Op names by the address LibTorch hands them at, the entry a LookupHistory predicts compared
  /// first. RecordFunction::name() reads the operator's schema, which an op's compute has
  /// evicted; the predicted entry is prefetched before that, where the entry at the name's
  /// address can only be loaded after it. Operator names live in the dispatcher for the whole
  /// run, so an address repeats and a hit costs one comparison with the interned text instead of
  /// measuring and hashing the name. Names built for one call (autograd's "evaluate_
  /// function: ..." and backward nodes', a sixth of a small model's ops) come back at a recycled
  /// address with another text: the comparison catches it, and a second table keyed by the
  /// text's length and last bytes finds them without hashing the whole text as interning does.
  class OpNameCache {
   public:
    /// One cache line: a hit reads this line and the name, both prefetched.
    struct alignas(64) Name {
      const char* address = nullptr;
      const char* text = nullptr;  // the interned copy, stable for the process
      NameId id = 0;
      std::uint64_t seen = 0;    // LookupHistory::follow()'s count
      std::uint32_t length = 0;  // a name of 4 GiB or more never matches: interned on every call
      bool runs_backward_node = false;  // autograd's evaluate_function around a backward node
      /// The text and its terminator when they fit: most op names do, and comparing with this
      /// copy spares a hit the load of the interned text (a miss after an op's compute).
      char short_text[27] = {};
    };
    static_assert(sizeof(Name) == 64, "a name entry is one cache line");

    /// Whether the entry's text is `name`'s, reading the interned copy only for long names.
    static bool same_text(const char* name, const Name& entry) noexcept {
      if (entry.length < sizeof(entry.short_text)) return std::strcmp(name, entry.short_text) == 0;
      return std::strcmp(name, entry.text) == 0;
    }

    /// Starts loading the entry the next lookup is predicted to find.
    void prefetch_predicted() const noexcept { __builtin_prefetch(history_.predicted()); }

    /// Starts loading the entry at `name`'s address, which lookup(name) reads when the prediction fails.
    void prefetch(const char* name) const noexcept {
      __builtin_prefetch(&by_address_[slot(reinterpret_cast<std::uintptr_t>(name))]);
    }

    const Name& lookup(const char* name) {
      Name* predicted = history_.predicted();
      if (predicted != nullptr && same_text(name, *predicted)) return follow(*predicted, true);
      Name& at_address = by_address_[slot(reinterpret_cast<std::uintptr_t>(name))];
      if (at_address.address == name && same_text(name, at_address)) return follow(at_address, false);
      const std::size_t length = std::strlen(name);
      // Two ways by text, the one found less recently replaced: in a single way, two names built
      // per call that share a slot (1 in 256) would evict each other and be interned on every call.
      const std::size_t text_slot = slot(text_key(name, length));
      Name* const ways[2] = {&by_text_[text_slot], &by_text_[text_slot ^ 1]};
      Name* with_text = nullptr;
      for (Name* way : ways)
        if (way->text != nullptr && way->length == length && same_text(name, *way)) {
          with_text = way;
          break;
        }
      if (with_text == nullptr) {
        history_.allocate();
        const char* text = nullptr;
        const NameId id = t_intern_cache.intern(std::string_view(name, length), &text);
        with_text = ways[0]->seen <= ways[1]->seen ? ways[0] : ways[1];
        *with_text = Name{};
        with_text->text = text;
        with_text->id = id;
        with_text->length = static_cast<std::uint32_t>(length);
        with_text->runs_backward_node = starts_with(std::string_view(name, length), kineto::name::kEvaluateFunction);
        if (length < sizeof(with_text->short_text)) std::memcpy(with_text->short_text, name, length + 1);
      }
      at_address = *with_text;
      at_address.address = name;
      return follow(*with_text, false);  // the entry by text: a name built per call comes back at other addresses
    }

   private:
    static constexpr unsigned kBits = 8;
    static std::size_t slot(std::uint64_t key) noexcept { return (key * 0x9E3779B97F4A7C15ull) >> (64 - kBits); }
    const Name& follow(Name& found, bool was_predicted) noexcept {
      found.seen = history_.follow(&found, found.seen, was_predicted);
      return found;
    }
    /// The length and the last eight bytes (names of one kind share their start).
    static std::uint64_t text_key(const char* name, std::size_t length) noexcept {
      std::uint64_t tail = 0;
      const std::size_t tail_length = length < sizeof(tail) ? length : sizeof(tail);
      std::memcpy(&tail, name + length - tail_length, tail_length);
      return (tail ^ (tail >> 29)) + length * 0xC4CEB9FE1A85EC53ull;
    }
    LookupHistory<Name*> history_;  // first: in the line the op's entry reads first (ThreadState)
    Name by_address_[std::size_t{1} << kBits];
    Name by_text_[std::size_t{1} << kBits];
  };

  /// What the callbacks keep per thread, in one thread_local so that a callback pays for one
  /// initialisation check instead of one per object. After an op's compute none of it is in
  /// cache: what every entry reads first (the two caches' predictions, the open-op depth) lies
  /// at the start of their objects, lines that load together.
  struct alignas(64) ThreadState {
    OpNameCache names;
    InputTextCache inputs;  // allocates on its first miss only
    OpenOps open;
  };
  static ThreadState& thread_state() {
    thread_local ThreadState state;
    return state;
  }

  static std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
    const std::uint32_t flags = active_flags();
    if ((flags & kRecording) == 0) return nullptr;  // installed for the warm-up, not recording yet
    ThreadState& state = thread_state();
    OpenOps& open = state.open;
    if (open.depth == OpenOps::kMaxDepth) return nullptr;
    const bool inputs = kCanReadInputs && fn.needsInputs() && record_inputs_.load(std::memory_order_relaxed);
    // After an op's compute has run, little of what follows is in cache: start every load whose
    // address is known, so that their misses overlap instead of following one another. The
    // predicted entries first: fn.name() itself waits for the operator's schema.
    state.names.prefetch_predicted();
    if (inputs) {
      InputTextCache::prefetch_inputs(fn);
      state.inputs.prefetch_predicted();
    }
    const char* name = fn.name();
    if (name == nullptr) name = "<unnamed op>";
    OpenOp& op = open.ops[open.depth];
    __builtin_prefetch(name);
    state.names.prefetch(name);
    __builtin_prefetch(&op, 1);
    bool runs_backward_node;
    try {
      const OpNameCache::Name& interned = state.names.lookup(name);
      op.name = interned.id;
      runs_backward_node = interned.runs_backward_node;
    } catch (...) {  // no memory to intern the name: this op is not recorded
      return nullptr;
    }
    ++open.depth;
    op.record = &fn;
    op.opens_backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION || runs_backward_node;
    op.backward = op.opens_backward || open.backward_depth > 0;
    if (op.opens_backward) ++open.backward_depth;
    op.sequence_number = fn.seqNr();
    op.forward_thread_id = fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? fn.forwardThreadId() : fn.threadId();
    op.input_shape = 0;
    if (inputs) state.inputs.texts(fn, op.input_shape, op.input_types_and_concrete, &format_inputs);
    // A backward op's own stack shows autograd's engine: the assembly gives it its forward op's.
    const StackId stack =
        (flags & kWithStack) != 0 && !op.backward ? capture_call_stack(__builtin_frame_address(0)) : kNoStackId;
    open.stacks[open.depth - 1] = stack;
    op.correlation_sequence =
        (flags & kCorrelating) != 0 ? push_external_correlation(op.name, stack, RecordKind::Op) : 0;
    // The next op's entries, predicted now, start loading during this op's compute: when it is
    // short they are still in cache at the next entry, which prefetches them again in case not.
    state.names.prefetch_predicted();
    if (inputs) state.inputs.prefetch_predicted();
    op.start = now_ticks();
    return nullptr;
  }

  /// Formats and interns the op's input dims, strides, types and concrete values as the JSON
  /// texts torch.profiler writes for them (Input Dims, Input Strides, Input type, Concrete
  /// Inputs); `shape` is the dims' and strides' ids packed (pack_op_input_shape()), 0 when they
  /// cannot be interned.
  static void format_inputs(const at::RecordFunction& fn, NameId& shape, std::int64_t& types_and_concrete) {
    thread_local fmt::memory_buffer dims;
    thread_local fmt::memory_buffer strides;
    thread_local fmt::memory_buffer types;
    thread_local fmt::memory_buffer concrete;
    dims.clear();
    strides.clear();
    types.clear();
    concrete.clear();
    auto dims_out = std::back_inserter(dims);
    auto strides_out = std::back_inserter(strides);
    auto types_out = std::back_inserter(types);
    auto concrete_out = std::back_inserter(concrete);
    bool first = true;
    for (const c10::IValue& input : fn.inputs()) {
      const char* separator = first ? "[" : ", ";
      first = false;
      if (input.isTensor() && input.toTensor().defined()) {
        const at::Tensor& tensor = input.toTensor();
        if (tensor.is_nested()) {  // sizes differ per component: none to write
          fmt::format_to(dims_out, "{}[]", separator);
          fmt::format_to(strides_out, "{}[]", separator);
        } else {
          fmt::format_to(dims_out, "{}[{}]", separator, fmt::join(tensor.sizes().begin(), tensor.sizes().end(), ", "));
          if (has_strides(tensor))
            fmt::format_to(strides_out, "{}[{}]", separator, fmt::join(tensor.strides().begin(), tensor.strides().end(), ", "));
          else
            fmt::format_to(strides_out, "{}[]", separator);
        }
        const auto dtype = tensor.dtype().name();
        fmt::format_to(types_out, "{}\"{}\"", separator, std::string_view(dtype.data(), dtype.size()));
        fmt::format_to(concrete_out, "{}\"\"", separator);
      } else {
        fmt::format_to(dims_out, "{}[]", separator);
        fmt::format_to(strides_out, "{}[]", separator);
        fmt::format_to(types_out, "{}\"{}\"", separator, type_of_non_tensor(input));
        fmt::format_to(concrete_out, "{}\"", separator);
        write_concrete_value(input, concrete);
        concrete.push_back('"');
      }
    }
    const std::string_view close = first ? "[]" : "]";  // no inputs at all: empty lists
    dims.append(close);
    strides.append(close);
    types.append(close);
    concrete.append(close);
    try {
      shape = pack_op_input_shape(intern(std::string_view(dims.data(), dims.size())),
                                  intern(std::string_view(strides.data(), strides.size())));
      types_and_concrete = pack_op_input_names(intern(std::string_view(types.data(), types.size())),
                                               intern(std::string_view(concrete.data(), concrete.size())));
    } catch (...) {  // no memory to intern them: the op is recorded without its inputs
      shape = 0;
    }
  }

  static const char* type_of_non_tensor(const c10::IValue& input) noexcept {
    if (input.isScalar() || input.isBool()) return "Scalar";
    if (input.isIntList() || input.isDoubleList() || input.isBoolList()) return "ScalarList";
    if (input.isTensorList()) return "TensorList";
    return "";
  }

  /// A scalar's or a list's value as torch.profiler writes it in `Concrete Inputs` (Python's
  /// spelling of booleans); nothing for other values.
  static void write_concrete_value(const c10::IValue& input, fmt::memory_buffer& out) {
    auto it = std::back_inserter(out);
    const auto boolean = [](bool value) { return value ? "True" : "False"; };
    if (input.isBool()) {
      fmt::format_to(it, "{}", boolean(input.toBool()));
    } else if (input.isInt()) {
      fmt::format_to(it, "{}", input.toInt());
    } else if (input.isDouble()) {
      fmt::format_to(it, "{}", input.toDouble());
    } else if (input.isIntList()) {
      const auto values = input.toIntList();
      fmt::format_to(it, "[{}]", fmt::join(values.begin(), values.end(), ", "));
    } else if (input.isDoubleList()) {
      const auto values = input.toDoubleList();
      fmt::format_to(it, "[{}]", fmt::join(values.begin(), values.end(), ", "));
    } else if (input.isBoolList()) {
      const auto values = input.toBoolList();
      out.push_back('[');
      for (std::size_t i = 0; i < values.size(); ++i) fmt::format_to(it, "{}{}", i == 0 ? "" : ", ", boolean(values.get(i)));
      out.push_back(']');
    }
  }

  static void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
    const std::int64_t end = now_ticks();
    OpenOps& open = thread_state().open;
    // Ops leave in the order they entered; one entered before recording began is not there.
    std::size_t index = open.depth;
    while (index > 0 && open.ops[index - 1].record != &fn) --index;
    if (index == 0) return;
    while (open.depth >= index) {  // ops above the one leaving never reported their end: drop them
      const OpenOp& op = open.ops[--open.depth];
      if (op.opens_backward) --open.backward_depth;
      if (op.correlation_sequence != 0) pop_external_correlation();
      if (open.depth + 1 != index) continue;
      if (const StackId stack = open.stacks[open.depth]; stack != kNoStackId) push_event(stack_event(stack, op.start));
      if (op.input_shape != 0) {
        const auto [dims, strides] = unpack_op_input_shape(op.input_shape);
        push_event(Event{dims, op.start, {op.input_types_and_concrete}, RecordKind::OpInputs, Category::User,
                         static_cast<std::uint32_t>(strides)});
      }
      if (op.sequence_number >= 0)
        push_event(Event{static_cast<NameId>(op.sequence_number), op.start,
                         {static_cast<std::int64_t>(op.forward_thread_id)}, RecordKind::OpDetails, Category::User});
      push_event(Event{op.name, op.start, {end}, RecordKind::Op, op.backward ? Category::Backward : Category::User,
                       op.correlation_sequence});
    }
  }

  TorchOpObserver() = default;

  mutable std::mutex mutex_;  // guards handle_ and the memory reporter
  at::CallbackHandle handle_ = 0;
  std::shared_ptr<TorchMemoryReporter> memory_reporter_;
  std::thread::id memory_reporter_thread_;
  static inline std::atomic<bool> record_inputs_{false};  // read by the callbacks on every thread
};

inline OpObserver& torch_op_observer() { return TorchOpObserver::instance(); }

/// Registers the observer when any translation unit of the program includes this header. Where
/// Debug and Release files both do, the Release files' observer is the program's: it can read
/// op inputs, whichever registers first.
inline const bool g_torch_op_observer_registered = [] {
  if (TorchOpObserver::kCanReadInputs) {
    g_op_observer.store(&torch_op_observer, std::memory_order_release);
  } else {
    OpObserverAccessor none = nullptr;
    g_op_observer.compare_exchange_strong(none, &torch_op_observer, std::memory_order_acq_rel);
  }
  return true;
}();

}  // namespace DLPROF_TORCH_OBSERVER_NAMESPACE
}  // namespace detail

/// Says what `tensor`'s storage holds (tag_memory()): the allocation LibTorch's allocator reported.
inline void tag_memory(const at::Tensor& tensor, MemoryCategory category) noexcept {
  if ((detail::active_flags() & detail::kRecording) == 0 || !tensor.defined() || !tensor.has_storage()) return;
  const c10::Storage& storage = tensor.storage();
  const c10::Device device = storage.device();
  tag_memory(storage.data_ptr().get(), storage.nbytes(), category, device.is_cuda() ? MemoryDeviceType::CUDA : MemoryDeviceType::CPU,
             device.is_cpu() ? -1 : device.index());
}

namespace detail {

/// The tensors of a torch::optim optimizer's state for one parameter: those of LibTorch's
/// optimizers that keep some (an optimizer of another type keeps its state untagged).
template <class Visit>
void for_each_state_tensor(const torch::optim::OptimizerParamState& state, Visit&& visit) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    visit(sgd->momentum_buffer());
  } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    visit(adam->exp_avg());
    visit(adam->exp_avg_sq());
    visit(adam->max_exp_avg_sq());
  } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    visit(adamw->exp_avg());
    visit(adamw->exp_avg_sq());
    visit(adamw->max_exp_avg_sq());
  } else if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    visit(adagrad->sum());
  } else if (const auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    visit(rmsprop->square_avg());
    visit(rmsprop->momentum_buffer());
    visit(rmsprop->grad_avg());
  }
}

/// Tags a torch::optim optimizer's parameters, their gradients and its state, while a window
/// records LibTorch's allocations.
inline void tag_optimizer_memory(const torch::optim::Optimizer& optimizer) noexcept {
  if (!g_torch_memory_reports.load(std::memory_order_relaxed) || (active_flags() & kRecording) == 0) return;
  try {
    for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
      for (const at::Tensor& parameter : group.params()) {
        tag_memory(parameter, MemoryCategory::Parameter);
        tag_memory(parameter.grad(), MemoryCategory::Gradient);
      }
    for (const auto& [key, state] : optimizer.state())
      if (state != nullptr)
        for_each_state_tensor(*state, [](const at::Tensor& tensor) { tag_memory(tensor, MemoryCategory::OptimizerState); });
  } catch (...) {  // a tensor LibTorch cannot describe: the rest stays untagged
  }
}

template <class Optimizer>
struct OptimizerMemoryTags<Optimizer, std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, Optimizer>>> {
  static void tag(const Optimizer& optimizer) noexcept { tag_optimizer_memory(optimizer); }
};

}  // namespace detail
DLPROF_END_NAMESPACE
#include "dlprof/torch_modules.hpp"
