// dlprof/flops.hpp: floating-point operations and memory traffic of a framework op, estimated
// from the shapes torch.profiler records for it (record_shapes): the "flops" torch.profiler's
// with_flops reports, and the bytes a roofline needs next to them.
//
//   estimate_op_cost("aten::mm", "[[2, 10], [10, 128]]", "[\"float\", \"float\"]", "[\"\", \"\"]")
//     -> OpCost{5120, 6224}: 2*2*10*128 FLOPs; (20 + 1280 read + 256 written) * 4 bytes
//
// What is counted, and why
// - FLOPs count a multiply and an add as two, PyProf's convention and PyTorch's
//   (torch/csrc/profiler/util.cpp computeFlops, torch.utils.flop_counter): a product of an
//   [m, k] and a [k, n] matrix is 2*m*k*n. The figures match PyTorch's with_flops exactly for the
//   ops it counts (aten::conv2d, mm, addmm, bmm, baddbmm, mul, add).
// - Only the products are counted where PyTorch counts only them: addmm and baddbmm ignore their
//   bias and beta/alpha scaling, linear and the convolutions their bias.
// - Elementwise ops count one FLOP per output element, whatever their arithmetic (an addcmul_ is
//   one, not three): PyTorch counts mul and add so. The output is the broadcast of the tensor
//   inputs' shapes. (PyTorch itself takes the first input's shape; the two differ only when the
//   first input is the smaller operand of a broadcast.)
// - Bytes are the algorithmic bytes PyProf counts, what an op must read and write at least: every
//   tensor input read once and every output written once, at the element size of its type; the
//   outputs' type is taken to be the first tensor input's. Gathers read only the rows they pick
//   of their table, and copies and fills do not read their destination. Where a tensor's element
//   type is one this header does not know, the bytes are unknown (nothing), never 0.
// - Ops with no formula have no estimate at all. Among them are the ops over tensor lists (the
//   foreach and fused optimizers, aten::cat): torch.profiler records no element type for a
//   TensorList. An optimizer written as a loop over its parameters runs elementwise ops, which
//   are counted.
//
// The ops
// - matrix products: aten::mm, addmm, bmm, baddbmm, matmul (dot, mm, batched with broadcast of
//   the batch dims, 1-D operands promoted as torch.matmul does), linear.
// - convolutions: aten::conv1d, conv2d, conv3d, conv_transpose1d/2d/3d, convolution,
//   _convolution, cudnn_convolution, cudnn_convolution_transpose, mkldnn_convolution (each with
//   its own argument order), and aten::convolution_backward.
// - elementwise: the names in detail::flops::kElementwiseOps (arithmetic, activations and their
//   backwards, the optimisers' in-place addcmul_/addcdiv_/lerp_).
// - reductions over recorded dimensions (kReductionLayouts: sum, mean, amax, amin, logsumexp,
//   prod, the vector norms); softmax, log-softmax and their backwards; the layer, batch, group,
//   instance and RMS norms and their backwards; dropout (kPerElementOps, kNormBackwardLayouts,
//   each with the FLOPs per element it counts and why).
// - attention: scaled_dot_product_attention and the flash, memory-efficient and cuDNN kernels'
//   ops, forward and backward (kAttentionLayouts).
// - gathers: aten::embedding, index_select, gather, embedding_dense_backward; copies and casts
//   (aten::copy_) and fills (aten::fill_, zero_).
//
// Totals must not add an op and the ops it contains: aten::linear runs aten::addmm (or matmul),
// aten::conv2d runs aten::convolution, which runs aten::_convolution, which runs a backend's
// convolution. A caller summing a trace counts, on each path from the root, only the outermost op
// that has a cost.
//
// The texts are the three JSON lists torch.profiler writes per op and dlprof's LibTorch observer
// writes exactly as it does:
//   input dims       [[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], []]      ([] for a non-tensor)
//   input types      ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]
//   concrete inputs  ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]         ("" for tensors)
// Concrete inputs may be given as an empty text (not recorded): ops whose formula needs an
// argument's value (the convolutions' strides, paddings, ...) then have no estimate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE

/// Work of one op: floating-point operations (multiply and add counted as two) and bytes read
/// plus written.
struct OpCost {
  std::uint64_t flops = 0;
  /// Nothing where a tensor's element type is not known (a dtype this header does not list).
  std::optional<std::uint64_t> bytes;
};

namespace detail::flops {

/// An unsigned 64-bit count whose arithmetic remembers overflow, so a formula reads as algebra
/// and is checked once, at the end.
class Count {
 public:
  constexpr Count(std::uint64_t value = 0) noexcept : value_(value) {}  // NOLINT: implicit by design

  constexpr std::uint64_t value() const noexcept { return value_; }
  constexpr bool overflowed() const noexcept { return overflowed_; }

  constexpr Count& operator*=(Count other) noexcept {
    overflowed_ = overflowed_ || other.overflowed_ || (value_ != 0 && other.value_ > UINT64_MAX / value_);
    value_ *= other.value_;  // unsigned: wraps, never undefined; the flag says so
    return *this;
  }
  constexpr Count& operator+=(Count other) noexcept {
    overflowed_ = overflowed_ || other.overflowed_ || other.value_ > UINT64_MAX - value_;
    value_ += other.value_;
    return *this;
  }
  friend constexpr Count operator*(Count a, Count b) noexcept { return a *= b; }
  friend constexpr Count operator+(Count a, Count b) noexcept { return a += b; }

 private:
  std::uint64_t value_ = 0;
  bool overflowed_ = false;
};

// Fixed capacities keep parsing free of allocation. Every op with a formula has fewer inputs
// (aten::_convolution has 13) and real tensors fewer dimensions; an op beyond them has no
// estimate.
inline constexpr std::size_t kMaxInputs = 16;
inline constexpr std::size_t kMaxRank = 16;

/// The sizes of one tensor.
struct Shape {
  std::array<std::uint64_t, kMaxRank> dims{};
  std::size_t rank = 0;

  std::uint64_t operator[](std::size_t i) const noexcept { return dims[i]; }
  std::uint64_t back() const noexcept { return dims[rank - 1]; }
  bool push_back(std::uint64_t size) noexcept {
    if (rank == kMaxRank) return false;
    dims[rank++] = size;
    return true;
  }
  Count numel() const noexcept {
    Count n = 1;
    for (std::size_t i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  /// The first `count` sizes (the batch dimensions of a matrix product).
  Shape leading(std::size_t count) const noexcept {
    Shape head;
    for (std::size_t i = 0; i < count && i < rank; ++i) head.push_back(dims[i]);
    return head;
  }
  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.rank != b.rank) return false;
    for (std::size_t i = 0; i < a.rank; ++i)
      if (a.dims[i] != b.dims[i]) return false;
    return true;
  }
};

/// The shape two shapes broadcast to (numpy's rule, which torch follows), or nullopt when they
/// do not broadcast.
inline std::optional<Shape> broadcast(const Shape& a, const Shape& b) noexcept {
  const Shape& longer = a.rank >= b.rank ? a : b;
  const Shape& shorter = a.rank >= b.rank ? b : a;
  Shape result = longer;
  const std::size_t offset = longer.rank - shorter.rank;
  for (std::size_t i = 0; i < shorter.rank; ++i) {
    const std::uint64_t x = longer[offset + i];
    const std::uint64_t y = shorter[i];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    result.dims[offset + i] = x == 1 ? y : x;
  }
  return result;
}

/// A cursor over one of the recorded texts. It accepts exactly what the writers produce: no
/// whitespace other than the ", " between list elements.
class Reader {
 public:
  explicit Reader(std::string_view text) noexcept : text_(text) {}

  bool at_end() const noexcept { return pos_ == text_.size(); }
  bool next_is(char c) const noexcept { return pos_ < text_.size() && text_[pos_] == c; }
  bool eat(char c) noexcept {
    if (!next_is(c)) return false;
    ++pos_;
    return true;
  }
  bool eat(std::string_view token) noexcept {
    if (text_.size() - pos_ < token.size() || std::string_view(text_.data() + pos_, token.size()) != token)
      return false;
    pos_ += token.size();
    return true;
  }

  /// A decimal integer in int64 range, JSON-style: optional '-', no leading zeros.
  bool read_int(std::int64_t& out) noexcept {
    const bool negative = eat('-');
    if (!next_is_digit()) return false;
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1])) return false;
    std::uint64_t magnitude = 0;
    const std::uint64_t limit = negative ? std::uint64_t{INT64_MAX} + 1 : std::uint64_t{INT64_MAX};
    while (next_is_digit()) {
      const auto digit = static_cast<std::uint64_t>(text_[pos_++] - '0');
      if (magnitude > (limit - digit) / 10) return false;
      magnitude = magnitude * 10 + digit;
    }
    // Negating in unsigned arithmetic: INT64_MIN's magnitude does not fit an int64.
    out = negative ? static_cast<std::int64_t>(~magnitude + 1) : static_cast<std::int64_t>(magnitude);
    return true;
  }

  /// A JSON string; `out` is its raw content between the quotes (escapes left as they are: no
  /// value a formula reads contains one).
  bool read_string(std::string_view& out) noexcept {
    if (!eat('"')) return false;
    const std::size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') {
        out = std::string_view(text_.data() + start, pos_ - start);
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\' && pos_ + 1 == text_.size()) return false;
      pos_ += c == '\\' ? 2 : 1;
    }
    return false;
  }

  /// `[e, e, ...]`, calling `read_element(*this)` for each element; false when it fails or the
  /// punctuation is wrong.
  template <class ReadElement>
  bool read_list(ReadElement&& read_element) noexcept {
    if (!eat('[')) return false;
    if (eat(']')) return true;
    do {
      if (!read_element(*this)) return false;
    } while (eat(", "));
    return eat(']');
  }

 private:
  static bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
  bool next_is_digit() const noexcept { return pos_ < text_.size() && is_digit(text_[pos_]); }

  std::string_view text_;
  std::size_t pos_ = 0;
};

/// Up to kMaxRank integers of a concrete list argument such as a stride.
struct IntList {
  std::array<std::int64_t, kMaxRank> values{};
  std::size_t size = 0;

  std::int64_t operator[](std::size_t i) const noexcept { return values[i]; }
};

/// Reads a concrete scalar: an integer, or a bool as torch writes it (True is 1, False 0).
inline bool read_concrete_int(Reader& reader, std::int64_t& out) noexcept {
  if (reader.eat("True")) {
    out = 1;
    return true;
  }
  if (reader.eat("False")) {
    out = 0;
    return true;
  }
  return reader.read_int(out);
}

/// A concrete scalar argument ("2", "False"); false when it is anything else ("", "0.5"). (An
/// out-parameter, not an optional: GCC 12 sees an optional<int64_t> here as maybe-uninitialized.)
inline bool concrete_int(std::string_view text, std::int64_t& out) noexcept {
  Reader reader(text);
  return read_concrete_int(reader, out) && reader.at_end();
}

/// A concrete list argument ("[2, 2]", "[False, True, True]"), or nullopt.
inline std::optional<IntList> concrete_int_list(std::string_view text) noexcept {
  Reader reader(text);
  IntList list;
  const bool ok = reader.read_list([&list](Reader& r) {
    std::int64_t value = 0;
    if (list.size == kMaxRank || !read_concrete_int(r, value)) return false;
    list.values[list.size++] = value;
    return true;
  });
  if (!ok || !reader.at_end()) return std::nullopt;
  return list;
}

/// Element size of a dtype as torch.profiler names it, or 0 when unknown. Both GCC's and
/// Clang's spellings of the integer types: LibTorch names them as its compiler does.
inline std::uint64_t element_size(std::string_view dtype) noexcept {
  struct Entry {
    std::string_view name;
    std::uint64_t size;
  };
  static constexpr Entry kSizes[] = {
      {"float", 4},
      {"double", 8},
      {"c10::Half", 2},
      {"c10::BFloat16", 2},
      {"long int", 8},
      {"long", 8},
      {"int", 4},
      {"short int", 2},
      {"short", 2},
      {"signed char", 1},
      {"unsigned char", 1},
      {"bool", 1},
      {"short unsigned int", 2},
      {"unsigned short", 2},
      {"unsigned int", 4},
      {"long unsigned int", 8},
      {"unsigned long", 8},
      {"c10::complex<c10::Half>", 4},
      {"c10::complex<float>", 8},
      {"c10::complex<double>", 16},
      {"c10::Float8_e4m3fn", 1},
      {"c10::Float8_e5m2", 1},
      {"c10::Float8_e4m3fnuz", 1},
      {"c10::Float8_e5m2fnuz", 1},
      {"c10::qint8", 1},
      {"c10::quint8", 1},
      {"c10::qint32", 4},
  };
  for (const Entry& entry : kSizes)
    if (entry.name == dtype) return entry.size;
  return 0;
}

/// Whether an input type names a tensor's dtype rather than one of the markers torch.profiler
/// writes for other arguments. Unknown dtypes are tensors too (their bytes are unknown).
inline bool is_tensor_type(std::string_view type) noexcept {
  return !(type.empty() || type == "Scalar" || type == "ScalarList" || type == "TensorList" ||
           type == "GenericList");
}

/// The inputs of one op, parsed from the three recorded texts.
class ParsedInputs {
 public:
  /// Parses the texts; false when any is malformed, they disagree on the number of inputs, or
  /// there are more than kMaxInputs.
  bool parse(std::string_view dims, std::string_view types, std::string_view concrete) noexcept {
    count_ = 0;
    concrete_.fill(std::string_view());
    broadcast_dims_.fill(0);
    if (!parse_dims(dims)) return false;
    std::size_t type_count = 0;
    if (!parse_strings(types, types_, type_count) || type_count != count_) return false;
    if (concrete.empty()) return true;  // not recorded: every value reads as ""
    std::size_t concrete_count = 0;
    return parse_strings(concrete, concrete_, concrete_count) && concrete_count == count_;
  }

  /// Reads torch.profiler's Input Strides ("[[8, 1], [0, 1], []]"): an input whose stride is 0 in
  /// a dimension (an expanded view) reads one element along it. Texts that do not parse, or that
  /// disagree with the dims, are ignored: every input is then read whole.
  void parse_strides(std::string_view text) noexcept {
    broadcast_dims_.fill(0);
    if (text.empty()) return;
    std::array<std::uint32_t, kMaxInputs> found{};
    std::size_t count = 0;
    Reader reader(text);
    const bool ok = reader.read_list([&](Reader& r) {
      if (count == kMaxInputs) return false;
      const std::size_t input = count++;
      if (r.eat("[[")) return read_nested_sizes(r);  // a TensorList's
      std::size_t dim = 0;
      return r.read_list([&](Reader& element) {
        std::int64_t stride = 0;
        if (!element.read_int(stride) || dim == kMaxRank) return false;
        if (stride == 0) found[input] |= 1U << dim;
        ++dim;
        return true;
      }) && (!is_shape_[input] || dim == shapes_[input].rank || dim == 0);
    });
    if (ok && reader.at_end() && count == count_) broadcast_dims_ = found;
  }

  std::size_t size() const noexcept { return count_; }
  /// The elements input `i` (a tensor) holds in memory: its numel, less the dimensions it is
  /// expanded along (stride 0).
  Count stored_numel(std::size_t i) const noexcept {
    const Shape& shape = shapes_[i];
    Count n = 1;
    for (std::size_t d = 0; d < shape.rank; ++d)
      if ((broadcast_dims_[i] >> d & 1U) == 0) n *= shape[d];
    return n;
  }
  /// The shape of input `i` when it is a tensor, else nullptr.
  const Shape* tensor(std::size_t i) const noexcept {
    return i < count_ && is_shape_[i] && is_tensor_type(types_[i]) ? &shapes_[i] : nullptr;
  }
  std::string_view type(std::size_t i) const noexcept { return i < count_ ? types_[i] : std::string_view(); }
  std::string_view concrete(std::size_t i) const noexcept { return i < count_ ? concrete_[i] : std::string_view(); }

 private:
  // Each element is a list of sizes, or (torch.profiler's own writer, for a TensorList) a list
  // of such lists, which is no tensor's shape. Nesting stops there: depth is bounded by design.
  bool parse_dims(std::string_view text) noexcept {
    Reader reader(text);
    const bool ok = reader.read_list([this](Reader& r) {
      if (count_ == kMaxInputs) return false;
      Shape& shape = shapes_[count_];
      shape.rank = 0;
      is_shape_[count_] = !r.eat("[[");
      const bool element_ok = is_shape_[count_] ? read_sizes(r, shape) : read_nested_sizes(r);
      ++count_;
      return element_ok;
    });
    return ok && reader.at_end();
  }
  static bool read_sizes(Reader& reader, Shape& shape) noexcept {
    return reader.read_list([&shape](Reader& r) {
      std::int64_t size = 0;
      return r.read_int(size) && size >= 0 && shape.push_back(static_cast<std::uint64_t>(size));
    });
  }
  // Called after "[[": the rest of a list of size lists, read and dropped.
  static bool read_nested_sizes(Reader& reader) noexcept {
    do {
      if (!reader.eat(']')) {  // the "[" of this size list is already consumed
        do {
          std::int64_t size = 0;
          if (!reader.read_int(size) || size < 0) return false;
        } while (reader.eat(", "));
        if (!reader.eat(']')) return false;
      }
    } while (reader.eat(", ["));
    return reader.eat(']');
  }
  static bool parse_strings(std::string_view text, std::array<std::string_view, kMaxInputs>& out,
                            std::size_t& count) noexcept {
    Reader reader(text);
    const bool ok = reader.read_list([&out, &count](Reader& r) {
      return count < kMaxInputs && r.read_string(out[count++]);
    });
    return ok && reader.at_end();
  }

  std::array<Shape, kMaxInputs> shapes_{};
  std::array<bool, kMaxInputs> is_shape_{};
  std::array<std::uint32_t, kMaxInputs> broadcast_dims_{};  ///< per input, a bit per dimension of stride 0
  std::array<std::string_view, kMaxInputs> types_{};
  std::array<std::string_view, kMaxInputs> concrete_{};
  std::size_t count_ = 0;
};

/// What a formula computes: FLOPs, and what the op reads and writes (for its bytes). The output
/// elements are of the first tensor input's type.
struct Work {
  static constexpr std::uint32_t kEveryInput = ~std::uint32_t{0};
  constexpr Work(Count flops_count = 0, Count output_elements = 0) noexcept
      : flops(flops_count), output_numel(output_elements) {}
  Count flops;
  Count output_numel;
  /// The tensor inputs read whole, a bit per input index; a copy does not read its destination,
  /// and a gather reads only the rows it picks (gathered_numel) of its table.
  std::uint32_t read_inputs = kEveryInput;
  Count gathered_numel;  ///< elements of the first tensor input's type read besides read_inputs
  Count extra_bytes;     ///< bytes of a fixed element size written besides the output (a dropout mask)
};

// ---- matrix products ----------------------------------------------------------------------

/// torch.matmul of an `a` and a `b`: a 1-D `a` is a row [1, k], a 1-D `b` a column [k, 1], and
/// the dimensions before the last two broadcast (a batch).
inline std::optional<Work> matmul_work(const Shape& a, const Shape& b) noexcept {
  if (a.rank == 0 || b.rank == 0) return std::nullopt;
  const std::uint64_t m = a.rank == 1 ? 1 : a[a.rank - 2];
  const std::uint64_t k = a.back();
  const std::uint64_t b_k = b.rank == 1 ? b[0] : b[b.rank - 2];
  const std::uint64_t n = b.rank == 1 ? 1 : b.back();
  if (k != b_k) return std::nullopt;
  const std::optional<Shape> batch =
      broadcast(a.leading(a.rank >= 2 ? a.rank - 2 : 0), b.leading(b.rank >= 2 ? b.rank - 2 : 0));
  if (!batch) return std::nullopt;
  const Count products = batch->numel() * m * n;
  return Work{2 * products * k, products};
}

/// [m, k] x [k, n], exactly two dimensions each (aten::mm, aten::addmm's operands).
inline std::optional<Work> mm_work(const Shape* a, const Shape* b) noexcept {
  if (a == nullptr || b == nullptr || a->rank != 2 || b->rank != 2) return std::nullopt;
  return matmul_work(*a, *b);
}

/// [b, m, k] x [b, k, n] with equal batch sizes (aten::bmm, aten::baddbmm's operands).
inline std::optional<Work> bmm_work(const Shape* a, const Shape* b) noexcept {
  if (a == nullptr || b == nullptr || a->rank != 3 || b->rank != 3 || (*a)[0] != (*b)[0]) return std::nullopt;
  return matmul_work(*a, *b);
}

/// aten::linear(input [..., in], weight [out, in], bias?): one [in] x [in, out] product per row.
inline std::optional<Work> linear_work(const ParsedInputs& inputs) noexcept {
  const Shape* input = inputs.tensor(0);
  const Shape* weight = inputs.tensor(1);
  if (input == nullptr || weight == nullptr || input->rank == 0 || weight->rank != 2) return std::nullopt;
  const std::uint64_t in = input->back();
  if ((*weight)[1] != in) return std::nullopt;
  // The rows are the leading dimensions' product, not numel / in, which in == 0 would break.
  const Count rows_times_out = input->leading(input->rank - 1).numel() * (*weight)[0];
  return Work{2 * rows_times_out * in, rows_times_out};
}

// ---- convolutions -------------------------------------------------------------------------

/// Where an op's convolution arguments sit among its inputs (kAbsent: not in its schema, its
/// default applies). Orders are native_functions.yaml's.
struct ConvLayout {
  static constexpr int kAbsent = -1;
  std::string_view op;
  int input = 0;
  int weight = 1;
  int stride = kAbsent;
  int padding = kAbsent;
  int dilation = kAbsent;
  int transposed = kAbsent;  ///< the argument saying so, for ops that may be either
  int output_padding = kAbsent;
  int groups = kAbsent;
  std::size_t spatial_dims = 0;  ///< 0: as many as the weight has beyond its first two
  bool always_transposed = false;
  /// The torch.nn.functional-level ops have defaults, so trailing arguments may be missing.
  bool trailing_defaults = false;
};

// Fields in order: op, input, weight, stride, padding, dilation, transposed, output_padding,
// groups, spatial_dims, always_transposed, trailing_defaults. Each row's comment is its schema.
inline constexpr ConvLayout kConvLayouts[] = {
    // (input, weight, bias, stride, padding, dilation, groups)
    {"aten::conv1d", 0, 1, 3, 4, 5, ConvLayout::kAbsent, ConvLayout::kAbsent, 6, 1, false, true},
    {"aten::conv2d", 0, 1, 3, 4, 5, ConvLayout::kAbsent, ConvLayout::kAbsent, 6, 2, false, true},
    {"aten::conv3d", 0, 1, 3, 4, 5, ConvLayout::kAbsent, ConvLayout::kAbsent, 6, 3, false, true},
    // (input, weight, bias, stride, padding, output_padding, groups, dilation)
    {"aten::conv_transpose1d", 0, 1, 3, 4, 7, ConvLayout::kAbsent, 5, 6, 1, true, true},
    {"aten::conv_transpose2d", 0, 1, 3, 4, 7, ConvLayout::kAbsent, 5, 6, 2, true, true},
    {"aten::conv_transpose3d", 0, 1, 3, 4, 7, ConvLayout::kAbsent, 5, 6, 3, true, true},
    // (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups[, ...])
    {"aten::convolution", 0, 1, 3, 4, 5, 6, 7, 8, 0, false, false},
    {"aten::_convolution", 0, 1, 3, 4, 5, 6, 7, 8, 0, false, false},
    // (self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    {"aten::cudnn_convolution", 0, 1, 3, 2, 4, ConvLayout::kAbsent, ConvLayout::kAbsent, 5, 0, false, false},
    // (self, weight, padding, output_padding, stride, dilation, groups, benchmark, ...)
    {"aten::cudnn_convolution_transpose", 0, 1, 4, 2, 5, ConvLayout::kAbsent, 3, 6, 0, true, false},
    // (self, weight, bias, padding, stride, dilation, groups): padding before stride
    {"aten::mkldnn_convolution", 0, 1, 4, 3, 5, ConvLayout::kAbsent, ConvLayout::kAbsent, 6, 0, false, false},
    // (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    //  output_padding, groups, output_mask)
    {"aten::convolution_backward", 1, 2, 4, 5, 6, 7, 8, 9, 0, false, false},
};

/// The values of one convolution, per spatial dimension.
struct ConvParams {
  IntList stride;
  IntList padding;
  IntList dilation;
  IntList output_padding;
  std::int64_t groups = 1;
  bool transposed = false;
};

/// One argument of a convolution: its concrete value, or `fallback` when the layout has no such
/// argument or the op omitted a trailing one that has a default.
inline std::optional<std::string_view> conv_argument(const ParsedInputs& inputs, const ConvLayout& layout, int index,
                                                     std::string_view fallback) noexcept {
  if (index == ConvLayout::kAbsent) return fallback;
  if (static_cast<std::size_t>(index) >= inputs.size())
    return layout.trailing_defaults ? std::optional<std::string_view>(fallback) : std::nullopt;
  return inputs.concrete(static_cast<std::size_t>(index));
}

/// A per-dimension list argument, a one-element list broadcast to every spatial dimension (torch
/// accepts stride=[1] for a conv2d); nullopt when absent, malformed, of another length, or below
/// `minimum`.
inline std::optional<IntList> spatial_list(std::optional<std::string_view> text, std::size_t spatial_dims,
                                           std::int64_t minimum) noexcept {
  if (!text) return std::nullopt;
  std::optional<IntList> list = concrete_int_list(*text);
  if (!list || (list->size != 1 && list->size != spatial_dims)) return std::nullopt;
  if (list->size == 1) {
    list->values.fill(list->values[0]);
    list->size = spatial_dims;
  }
  for (std::size_t i = 0; i < list->size; ++i)
    if ((*list)[i] < minimum) return std::nullopt;
  return list;
}

inline std::optional<ConvParams> conv_params(const ParsedInputs& inputs, const ConvLayout& layout,
                                             std::size_t spatial_dims) noexcept {
  const auto stride = spatial_list(conv_argument(inputs, layout, layout.stride, "[1]"), spatial_dims, 1);
  const auto padding = spatial_list(conv_argument(inputs, layout, layout.padding, "[0]"), spatial_dims, 0);
  const auto dilation = spatial_list(conv_argument(inputs, layout, layout.dilation, "[1]"), spatial_dims, 1);
  const auto output_padding =
      spatial_list(conv_argument(inputs, layout, layout.output_padding, "[0]"), spatial_dims, 0);
  const auto groups_text = conv_argument(inputs, layout, layout.groups, "1");
  const auto transposed_text = conv_argument(inputs, layout, layout.transposed, "False");
  std::int64_t groups = 0;
  std::int64_t transposed = 0;
  if (!stride || !padding || !dilation || !output_padding || !groups_text || !concrete_int(*groups_text, groups) ||
      groups < 1 || !transposed_text || !concrete_int(*transposed_text, transposed))
    return std::nullopt;
  return ConvParams{*stride, *padding, *dilation, *output_padding, groups, layout.always_transposed || transposed != 0};
}

/// Output size of one spatial dimension of a convolution: floor((H + 2p - d(R-1) - 1) / s) + 1;
/// nullopt when not positive. Every value is checked before use, so no step overflows.
inline std::optional<std::uint64_t> conv_output_size(std::uint64_t in, std::uint64_t kernel, std::int64_t stride,
                                                     std::int64_t padding, std::int64_t dilation) noexcept {
  if (kernel == 0) return std::nullopt;
  const Count padded = Count(in) + 2 * Count(static_cast<std::uint64_t>(padding));
  const Count span = Count(static_cast<std::uint64_t>(dilation)) * (kernel - 1) + 1;  // kernel extent
  if (padded.overflowed() || span.overflowed() || padded.value() < span.value()) return std::nullopt;
  return (padded.value() - span.value()) / static_cast<std::uint64_t>(stride) + 1;
}

/// Output size of one spatial dimension of a transposed convolution:
/// (H - 1)s - 2p + d(R-1) + output_padding + 1; nullopt when not positive.
inline std::optional<std::uint64_t> conv_transpose_output_size(std::uint64_t in, std::uint64_t kernel,
                                                               std::int64_t stride, std::int64_t padding,
                                                               std::int64_t dilation,
                                                               std::int64_t output_padding) noexcept {
  if (kernel == 0 || in == 0) return std::nullopt;
  const Count grown = Count(in - 1) * static_cast<std::uint64_t>(stride) +
                      Count(static_cast<std::uint64_t>(dilation)) * (kernel - 1) +
                      static_cast<std::uint64_t>(output_padding) + 1;
  const Count trimmed = 2 * Count(static_cast<std::uint64_t>(padding));
  if (grown.overflowed() || trimmed.overflowed() || grown.value() <= trimmed.value()) return std::nullopt;
  return grown.value() - trimmed.value();
}

/// Cost and output shape of a convolution of `input` ([N, C, spatial...], or unbatched
/// [C, spatial...]) with `weight`.
///
/// Forward: weight [K, C/groups, kernel...]; every output element is a dot product of
/// (C/groups) * prod(kernel) pairs: 2 * N * K * prod(output spatial) * (C/groups) * prod(kernel).
///
/// Transposed: weight [C, K/groups, kernel...]; it is the gradient of the forward convolution
/// from its output [N, K, out...] to its input [N, C, in...] with the same weight, and costs
/// what that forward convolution costs: every input element is multiplied by each of the
/// (K/groups) * prod(kernel) weights of its group, 2 * N * C * prod(input spatial) *
/// (K/groups) * prod(kernel) (torch.utils.flop_counter counts it so).
struct ConvResult {
  Count flops;
  Shape output;
};
inline std::optional<ConvResult> conv_cost(const Shape& input, const Shape& weight, const ConvParams& params,
                                           std::size_t spatial_dims) noexcept {
  const bool batched = input.rank == spatial_dims + 2;
  if (weight.rank != spatial_dims + 2 || (!batched && input.rank != spatial_dims + 1)) return std::nullopt;
  const std::uint64_t batch = batched ? input[0] : 1;
  const std::uint64_t channels = input[batched ? 1 : 0];
  const auto groups = static_cast<std::uint64_t>(params.groups);
  // weight[1] is the channels each output (forward) or input (transposed) element of a group
  // meets: C/groups forward, K/groups transposed.
  const std::uint64_t group_channels = weight[1];
  const Count out_channels = params.transposed ? Count(group_channels) * groups : Count(weight[0]);
  const bool channels_fit = params.transposed ? weight[0] == channels && channels % groups == 0
                                              : channels % groups == 0 && channels / groups == group_channels &&
                                                    weight[0] % groups == 0;
  if (!channels_fit || out_channels.overflowed()) return std::nullopt;

  ConvResult result;
  if (batched) result.output.push_back(batch);
  result.output.push_back(out_channels.value());
  Count kernel_volume = 1;
  Count spatial_volume = 1;  // of the output (forward) or of the input (transposed)
  for (std::size_t d = 0; d < spatial_dims; ++d) {
    const std::uint64_t in = input[input.rank - spatial_dims + d];
    const std::uint64_t kernel = weight[2 + d];
    const std::optional<std::uint64_t> out =
        params.transposed ? conv_transpose_output_size(in, kernel, params.stride[d], params.padding[d],
                                                       params.dilation[d], params.output_padding[d])
                          : conv_output_size(in, kernel, params.stride[d], params.padding[d], params.dilation[d]);
    if (!out) return std::nullopt;
    result.output.push_back(*out);
    kernel_volume *= kernel;
    spatial_volume *= params.transposed ? in : *out;
  }
  const Count element_channels = params.transposed ? Count(channels) : out_channels;
  result.flops = 2 * Count(batch) * element_channels * spatial_volume * group_channels * kernel_volume;
  return result;
}

/// The number of spatial dimensions the layout fixes, or the weight implies.
inline std::optional<std::size_t> conv_spatial_dims(const ConvLayout& layout, const Shape& weight) noexcept {
  if (layout.spatial_dims != 0) return layout.spatial_dims;
  if (weight.rank < 3) return std::nullopt;
  return weight.rank - 2;
}

/// A forward (or transposed) convolution op: FLOPs of the product, its output written.
inline std::optional<Work> conv_work(const ParsedInputs& inputs, const ConvLayout& layout) noexcept {
  const Shape* input = inputs.tensor(static_cast<std::size_t>(layout.input));
  const Shape* weight = inputs.tensor(static_cast<std::size_t>(layout.weight));
  if (input == nullptr || weight == nullptr) return std::nullopt;
  const std::optional<std::size_t> spatial_dims = conv_spatial_dims(layout, *weight);
  if (!spatial_dims) return std::nullopt;
  const std::optional<ConvParams> params = conv_params(inputs, layout, *spatial_dims);
  if (!params) return std::nullopt;
  const std::optional<ConvResult> conv = conv_cost(*input, *weight, *params, *spatial_dims);
  if (!conv) return std::nullopt;
  return Work{conv->flops, conv->output.numel()};
}

/// aten::convolution_backward: the gradient of the input and the gradient of the weight each
/// cost one forward convolution (each is a convolution of the same sizes); the bias gradient,
/// a sum, is not counted. It writes the gradients its output_mask asks for.
inline std::optional<Work> conv_backward_work(const ParsedInputs& inputs, const ConvLayout& layout) noexcept {
  constexpr std::size_t kGradOutput = 0;
  constexpr std::size_t kOutputMask = 10;
  const Shape* grad_output = inputs.tensor(kGradOutput);
  const Shape* input = inputs.tensor(static_cast<std::size_t>(layout.input));
  const Shape* weight = inputs.tensor(static_cast<std::size_t>(layout.weight));
  const std::optional<IntList> mask = concrete_int_list(inputs.concrete(kOutputMask));
  if (grad_output == nullptr || input == nullptr || weight == nullptr || !mask || mask->size != 3) return std::nullopt;
  const std::optional<std::size_t> spatial_dims = conv_spatial_dims(layout, *weight);
  if (!spatial_dims) return std::nullopt;
  const std::optional<ConvParams> params = conv_params(inputs, layout, *spatial_dims);
  if (!params) return std::nullopt;
  const std::optional<ConvResult> forward = conv_cost(*input, *weight, *params, *spatial_dims);
  // The arguments must describe the convolution whose gradient arrives, or they are misread.
  if (!forward || !(forward->output == *grad_output)) return std::nullopt;
  const bool grad_input = (*mask)[0] != 0;
  const bool grad_weight = (*mask)[1] != 0;
  const bool grad_bias = (*mask)[2] != 0;
  Work work;
  work.flops = forward->flops * (std::uint64_t{grad_input} + std::uint64_t{grad_weight});
  if (grad_input) work.output_numel += input->numel();
  if (grad_weight) work.output_numel += weight->numel();
  if (grad_bias) work.output_numel += (*grad_output)[grad_output->rank == *spatial_dims + 2 ? 1 : 0];
  return work;
}

// ---- elementwise --------------------------------------------------------------------------

/// Ops counted as one FLOP per output element. Their first tensor input has the output's
/// dtype (which is why comparisons and aten::where, whose first input is bool, are not here).
inline constexpr std::string_view kElementwiseOps[] = {
    "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::rsub", "aten::mul", "aten::mul_",
    "aten::div", "aten::div_", "aten::neg", "aten::neg_", "aten::reciprocal", "aten::reciprocal_",
    "aten::abs", "aten::abs_", "aten::pow", "aten::pow_", "aten::exp", "aten::exp_", "aten::log",
    "aten::log_", "aten::sqrt", "aten::sqrt_", "aten::rsqrt", "aten::rsqrt_", "aten::clamp", "aten::clamp_",
    "aten::relu", "aten::relu_", "aten::threshold", "aten::threshold_", "aten::threshold_backward",
    "aten::leaky_relu", "aten::leaky_relu_", "aten::leaky_relu_backward",
    "aten::sigmoid", "aten::sigmoid_", "aten::sigmoid_backward", "aten::tanh", "aten::tanh_",
    "aten::tanh_backward", "aten::gelu", "aten::gelu_", "aten::gelu_backward", "aten::silu", "aten::silu_",
    "aten::silu_backward", "aten::addcmul", "aten::addcmul_", "aten::addcdiv", "aten::addcdiv_",
    "aten::lerp", "aten::lerp_",
};

/// One FLOP per element of the broadcast of the tensor inputs.
inline std::optional<Work> elementwise_work(const ParsedInputs& inputs) noexcept {
  std::optional<Shape> output;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Shape* shape = inputs.tensor(i);
    if (shape == nullptr) continue;
    output = output ? broadcast(*output, *shape) : std::optional<Shape>(*shape);
    if (!output) return std::nullopt;
  }
  if (!output) return std::nullopt;  // no tensor at all
  const Count elements = output->numel();
  return Work{elements, elements};
}

// ---- reductions ---------------------------------------------------------------------------

/// A reduction and where its dimensions are: one FLOP per element read (a sum's adds; a norm's
/// square-and-add counts two). The output is the input without the reduced dimensions.
struct ReductionLayout {
  std::string_view op;
  std::size_t dims = 1;         ///< the input holding the dimension(s) reduced
  std::uint64_t flops_per_element = 1;
};

inline constexpr ReductionLayout kReductionLayouts[] = {
    {"aten::sum", 1, 1},  {"aten::mean", 1, 1},      {"aten::amax", 1, 1},
    {"aten::amin", 1, 1}, {"aten::logsumexp", 1, 3}, {"aten::prod", 1, 1},
    // (self, ord, dim, keepdim, dtype) and (self, p, dim, keepdim)
    {"aten::linalg_vector_norm", 2, 2}, {"aten::norm", 2, 2},
};

/// The elements a reduction of `input` over the dimensions `dims` (a list, one integer, or none:
/// every dimension) writes; the keepdim flag does not change the count.
inline std::optional<Count> reduced_numel(const ParsedInputs& inputs, const Shape& input, std::size_t dims) noexcept {
  const std::string_view type = inputs.type(dims);
  const std::string_view text = inputs.concrete(dims);
  IntList reduced;
  if (dims >= inputs.size() || (text.empty() && type != "ScalarList" && type != "Scalar")) {
    return Count(1);  // absent or None: every dimension
  } else if (std::optional<IntList> list = concrete_int_list(text)) {
    if (list->size == 0) return Count(1);
    reduced = *list;
  } else if (std::int64_t dim = 0; type == "Scalar" && concrete_int(text, dim)) {
    reduced.values[reduced.size++] = dim;
  } else {
    return std::nullopt;  // a dimension not recorded
  }
  std::array<bool, kMaxRank> is_reduced{};
  const auto rank = static_cast<std::int64_t>(input.rank == 0 ? 1 : input.rank);
  for (std::size_t i = 0; i < reduced.size; ++i) {
    const std::int64_t dim = reduced[i] < 0 ? reduced[i] + rank : reduced[i];
    if (dim < 0 || dim >= rank) return std::nullopt;
    is_reduced[static_cast<std::size_t>(dim)] = true;
  }
  Count kept = 1;
  for (std::size_t d = 0; d < input.rank; ++d)
    if (!is_reduced[d]) kept *= input[d];
  return kept;
}

inline std::optional<Work> reduction_work(const ParsedInputs& inputs, const ReductionLayout& layout) noexcept {
  const Shape* input = inputs.tensor(0);
  if (input == nullptr) return std::nullopt;
  const std::optional<Count> output = reduced_numel(inputs, *input, layout.dims);
  if (!output) return std::nullopt;
  return Work{input->numel() * layout.flops_per_element, *output};
}

// ---- softmax and normalizations ---------------------------------------------------------------

/// Ops that write one element per element of their first input and count a fixed number of
/// FLOPs per element: the arithmetic of their passes over it.
/// - softmax and log-softmax: 5 (the max, the subtraction, the exponential, the sum, the division
///   or the logarithm's subtraction); their backwards 4 (a product, the sum, a subtraction, a
///   product).
/// - layer, batch, group and instance norms: 7 (a sum for the mean, a sum of squares for the
///   variance, 2; normalizing (x - mean) * rstd, 2; scaling and shifting, 2); RMS norms 4.
/// - dropout: 1 (the scaling), and its mask, a byte per element, written beside the output.
/// The statistics a norm saves for its backward (a value per row or channel) are left out of its
/// bytes: they are smaller than the output by the normalized size.
struct PerElementLayout {
  std::string_view op;
  std::uint64_t flops_per_element = 1;
  std::uint64_t extra_bytes_per_element = 0;
};

inline constexpr PerElementLayout kPerElementOps[] = {
    {"aten::_softmax", 5, 0},
    {"aten::softmax", 5, 0},
    {"aten::_safe_softmax", 5, 0},
    {"aten::_log_softmax", 5, 0},
    {"aten::log_softmax", 5, 0},
    {"aten::_softmax_backward_data", 4, 0},
    {"aten::_log_softmax_backward_data", 4, 0},
    {"aten::layer_norm", 7, 0},
    {"aten::native_layer_norm", 7, 0},
    {"aten::batch_norm", 7, 0},
    {"aten::_batch_norm_impl_index", 7, 0},
    {"aten::native_batch_norm", 7, 0},
    {"aten::_native_batch_norm_legit", 7, 0},
    {"aten::_native_batch_norm_legit_no_training", 7, 0},
    {"aten::cudnn_batch_norm", 7, 0},
    {"aten::miopen_batch_norm", 7, 0},
    {"aten::group_norm", 7, 0},
    {"aten::native_group_norm", 7, 0},
    {"aten::instance_norm", 7, 0},
    {"aten::rms_norm", 4, 0},
    {"aten::_fused_rms_norm", 4, 0},
    {"aten::native_dropout", 1, 1},
    {"aten::native_dropout_backward", 1, 0},
};

inline std::optional<Work> per_element_work(const ParsedInputs& inputs, const PerElementLayout& layout) noexcept {
  const Shape* input = inputs.tensor(0);
  if (input == nullptr) return std::nullopt;
  const Count elements = input->numel();
  Work work{elements * layout.flops_per_element, elements};
  work.extra_bytes = elements * layout.extra_bytes_per_element;
  return work;
}

/// A normalization's backward: twice its forward's FLOPs per element (7 or 4, as above), and the
/// gradients its output_mask asks for (all three where it has no mask): the input's, the
/// weight's and the bias's (of the weight's shape).
struct NormBackwardLayout {
  static constexpr int kNoMask = -1;
  std::string_view op;
  std::size_t input = 1;
  std::size_t weight = 5;
  int output_mask = kNoMask;
  std::uint64_t forward_flops_per_element = 7;
};

inline constexpr NormBackwardLayout kNormBackwardLayouts[] = {
    // (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    {"aten::native_layer_norm_backward", 1, 5, 7, 7},
    // (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)
    {"aten::native_batch_norm_backward", 1, 2, 9, 7},
    // (input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon, reserveSpace)
    {"aten::cudnn_batch_norm_backward", 0, 2, NormBackwardLayout::kNoMask, 7},
    {"aten::miopen_batch_norm_backward", 0, 2, NormBackwardLayout::kNoMask, 7},
    // (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
    {"aten::native_group_norm_backward", 1, 4, 9, 7},
    // (grad_out, input, normalized_shape, rstd, weight, output_mask)
    {"aten::_fused_rms_norm_backward", 1, 4, 5, 4},
};

inline std::optional<Work> norm_backward_work(const ParsedInputs& inputs, const NormBackwardLayout& layout) noexcept {
  const Shape* input = inputs.tensor(layout.input);
  if (input == nullptr) return std::nullopt;
  std::array<bool, 3> wanted{true, true, true};
  if (layout.output_mask != NormBackwardLayout::kNoMask) {
    const std::optional<IntList> mask = concrete_int_list(inputs.concrete(static_cast<std::size_t>(layout.output_mask)));
    if (!mask || mask->size < 2) return std::nullopt;
    for (std::size_t i = 0; i < mask->size && i < wanted.size(); ++i) wanted[i] = (*mask)[i] != 0;
    if (mask->size == 2) wanted[2] = false;  // an RMS norm has no bias
  }
  const Shape* weight = inputs.tensor(layout.weight);
  const Count weight_numel = weight == nullptr ? Count(0) : weight->numel();
  Work work{input->numel() * (2 * layout.forward_flops_per_element), 0};
  if (wanted[0]) work.output_numel += input->numel();
  if (wanted[1]) work.output_numel += weight_numel;
  if (wanted[2]) work.output_numel += weight_numel;
  return work;
}

// ---- attention ----------------------------------------------------------------------------

/// Scaled dot-product attention, torch.utils.flop_counter's count: the two products of the
/// forward, Q Kᵀ and P V, are 2·B·H·Lq·Lk·(E + Ev); the backward's four (dV, dP, dQ, dK) twice
/// that. A causal mask (is_causal, or the memory-efficient kernel's mask type) leaves the
/// kernels half of it to do, which is what is counted then. Query, key and value are
/// [B, H, L, E] for the scaled_dot_product ops and [B, L, H, E] for the flash and
/// memory-efficient kernels' own ops; a key and value of fewer heads (grouped-query attention)
/// are read as they are. The forward writes the output; the backward the gradients of query, key
/// and value.
struct AttentionLayout {
  static constexpr int kNone = -1;
  std::string_view op;
  std::size_t query = 0;        ///< key and value follow it
  bool sequence_before_heads = false;
  bool backward = false;
  int is_causal = kNone;         ///< a bool argument
  int custom_mask_type = kNone;  ///< the memory-efficient kernel's: 0 none, 1 and 2 causal
};

inline constexpr AttentionLayout kAttentionLayouts[] = {
    // (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    {"aten::scaled_dot_product_attention", 0, false, false, 5},
    // (query, key, value, dropout_p, is_causal, return_debug_mask, scale)
    {"aten::_scaled_dot_product_flash_attention", 0, false, false, 4},
    {"aten::_scaled_dot_product_flash_attention_for_cpu", 0, false, false, 4},
    // (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)
    {"aten::_scaled_dot_product_efficient_attention", 0, false, false, 6},
    {"aten::_scaled_dot_product_cudnn_attention", 0, false, false, 6},
    // (query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, compute_log_sumexp,
    //  dropout_p, is_causal, ...)
    {"aten::_cudnn_attention_forward", 0, false, false, 10},
    // (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    {"aten::_flash_attention_forward", 0, true, false, 8},
    // (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    //  dropout_p, custom_mask_type, ...)
    {"aten::_efficient_attention_forward", 0, true, false, AttentionLayout::kNone, 9},
    // (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    //  dropout_p, is_causal, ...)
    {"aten::_scaled_dot_product_flash_attention_backward", 1, false, true, 11},
    {"aten::_flash_attention_backward", 1, true, true, 11},
    // (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset,
    //  dropout_p, grad_input_mask, is_causal, ...)
    {"aten::_scaled_dot_product_efficient_attention_backward", 1, false, true, 11},
    // (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
    //  cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    {"aten::_scaled_dot_product_cudnn_attention_backward", 1, false, true, 14},
    {"aten::_cudnn_attention_backward", 1, false, true, 14},
    // (grad_out, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    //  max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type, ...)
    {"aten::_efficient_attention_backward", 1, true, true, AttentionLayout::kNone, 14},
};

inline std::optional<Work> attention_work(const ParsedInputs& inputs, const AttentionLayout& layout) noexcept {
  const Shape* query = inputs.tensor(layout.query);
  const Shape* key = inputs.tensor(layout.query + 1);
  const Shape* value = inputs.tensor(layout.query + 2);
  // Variable-length batches ([total, H, E] with cumulative lengths) have no per-sequence sizes here.
  if (query == nullptr || key == nullptr || value == nullptr || query->rank != 4 || key->rank != 4 ||
      value->rank != 4)
    return std::nullopt;
  const std::size_t heads = layout.sequence_before_heads ? 2 : 1;
  const std::size_t sequence = layout.sequence_before_heads ? 1 : 2;
  const std::uint64_t embedding = (*query)[3];
  const std::uint64_t value_embedding = (*value)[3];
  if ((*key)[3] != embedding || (*key)[0] != (*query)[0] || (*value)[0] != (*query)[0] ||
      (*key)[sequence] != (*value)[sequence] || (*key)[heads] == 0 || (*query)[heads] % (*key)[heads] != 0)
    return std::nullopt;
  std::int64_t causal = 0;
  if (layout.is_causal != AttentionLayout::kNone &&
      !concrete_int(inputs.concrete(static_cast<std::size_t>(layout.is_causal)), causal))
    return std::nullopt;
  if (layout.custom_mask_type != AttentionLayout::kNone &&
      !concrete_int(inputs.concrete(static_cast<std::size_t>(layout.custom_mask_type)), causal))
    return std::nullopt;
  const Count scores = Count((*query)[0]) * (*query)[heads] * (*query)[sequence] * (*key)[sequence];
  Count flops = 2 * scores * (Count(embedding) + value_embedding);
  if (layout.backward) flops *= 2;
  // Halved after the products: a causal mask skips half the score blocks.
  const Count counted = causal != 0 ? Count(flops.value() / 2) : flops;
  Work work{flops.overflowed() ? flops : counted, 0};
  if (layout.backward)
    work.output_numel = query->numel() + key->numel() + value->numel();
  else
    work.output_numel = Count((*query)[0]) * (*query)[heads] * (*query)[sequence] * value_embedding;
  return work;
}

// ---- gathers, copies and fills ------------------------------------------------------------

/// A gather: its output's elements are read from the table (the first input) and written; the
/// index is read whole. No FLOPs.
/// - aten::embedding(weight [N, D], indices, ...): indices.numel · D.
/// - aten::index_select(self, dim, index): self with dimension dim of index.numel.
/// - aten::gather(self, dim, index, sparse_grad): index's shape.
inline std::optional<Work> gather_work(std::string_view op, const ParsedInputs& inputs) noexcept {
  const Shape* table = inputs.tensor(0);
  const std::size_t index_at = op == "aten::embedding" ? 1 : 2;
  const Shape* index = inputs.tensor(index_at);
  if (table == nullptr || index == nullptr || table->rank == 0) return std::nullopt;
  Count picked = 0;
  if (op == "aten::embedding") {
    if (table->rank != 2) return std::nullopt;
    picked = index->numel() * table->back();
  } else if (op == "aten::gather") {
    picked = index->numel();
  } else {
    std::int64_t dim = 0;
    if (!concrete_int(inputs.concrete(1), dim)) return std::nullopt;
    if (dim < 0) dim += static_cast<std::int64_t>(table->rank);
    if (dim < 0 || dim >= static_cast<std::int64_t>(table->rank)) return std::nullopt;
    picked = index->numel();
    for (std::size_t d = 0; d < table->rank; ++d)
      if (d != static_cast<std::size_t>(dim)) picked *= (*table)[d];
  }
  Work work{0, picked};
  work.read_inputs = 1U << index_at;
  work.gathered_numel = picked;
  return work;
}

/// aten::embedding_dense_backward(grad_output [..., D], indices, num_weights, ...): the gradient
/// rows added into a [num_weights, D] table, one FLOP per gradient element.
inline std::optional<Work> embedding_backward_work(const ParsedInputs& inputs) noexcept {
  const Shape* grad = inputs.tensor(0);
  std::int64_t rows = 0;
  if (grad == nullptr || grad->rank == 0 || !concrete_int(inputs.concrete(2), rows) || rows < 0) return std::nullopt;
  return Work{grad->numel(), Count(static_cast<std::uint64_t>(rows)) * grad->back()};
}

/// aten::copy_(self, src, non_blocking): src read, self written (a cast when their types
/// differ); aten::fill_ and aten::zero_: self written. No FLOPs.
inline std::optional<Work> copy_work(std::string_view op, const ParsedInputs& inputs) noexcept {
  const Shape* destination = inputs.tensor(0);
  if (destination == nullptr) return std::nullopt;
  Work work{0, destination->numel()};
  work.read_inputs = op == "aten::copy_" ? 1U << 1 : 0U;
  if (op == "aten::copy_" && inputs.tensor(1) == nullptr) return std::nullopt;
  return work;
}

// ---- dispatch -----------------------------------------------------------------------------

inline bool is_elementwise(std::string_view op) noexcept {
  for (std::string_view name : kElementwiseOps)
    if (name == op) return true;
  return false;
}

/// The row of `table` for `op`, or nullptr.
template <class Layout, std::size_t N>
constexpr const Layout* layout_of(const Layout (&table)[N], std::string_view op) noexcept {
  for (const Layout& layout : table)
    if (layout.op == op) return &layout;
  return nullptr;
}

inline const ConvLayout* conv_layout(std::string_view op) noexcept { return layout_of(kConvLayouts, op); }

inline bool is_gather(std::string_view op) noexcept {
  return op == "aten::embedding" || op == "aten::index_select" || op == "aten::gather";
}

inline bool is_copy(std::string_view op) noexcept {
  return op == "aten::copy_" || op == "aten::fill_" || op == "aten::zero_";
}

/// Whether `op` has a formula, checked before any text is parsed.
inline bool has_formula(std::string_view op) noexcept {
  return op == "aten::mm" || op == "aten::addmm" || op == "aten::bmm" || op == "aten::baddbmm" ||
         op == "aten::matmul" || op == "aten::linear" || conv_layout(op) != nullptr || is_elementwise(op) ||
         layout_of(kReductionLayouts, op) != nullptr || layout_of(kPerElementOps, op) != nullptr ||
         layout_of(kNormBackwardLayouts, op) != nullptr || layout_of(kAttentionLayouts, op) != nullptr ||
         is_gather(op) || op == "aten::embedding_dense_backward" || is_copy(op);
}

inline std::optional<Work> op_work(std::string_view op, const ParsedInputs& inputs) noexcept {
  if (op == "aten::mm") return mm_work(inputs.tensor(0), inputs.tensor(1));
  if (op == "aten::addmm") return mm_work(inputs.tensor(1), inputs.tensor(2));
  if (op == "aten::bmm") return bmm_work(inputs.tensor(0), inputs.tensor(1));
  if (op == "aten::baddbmm") return bmm_work(inputs.tensor(1), inputs.tensor(2));
  if (op == "aten::matmul") {
    const Shape* a = inputs.tensor(0);
    const Shape* b = inputs.tensor(1);
    return a != nullptr && b != nullptr ? matmul_work(*a, *b) : std::nullopt;
  }
  if (op == "aten::linear") return linear_work(inputs);
  if (const ConvLayout* layout = conv_layout(op))
    return op == "aten::convolution_backward" ? conv_backward_work(inputs, *layout) : conv_work(inputs, *layout);
  if (is_elementwise(op)) return elementwise_work(inputs);
  if (const ReductionLayout* layout = layout_of(kReductionLayouts, op)) return reduction_work(inputs, *layout);
  if (const PerElementLayout* layout = layout_of(kPerElementOps, op)) return per_element_work(inputs, *layout);
  if (const NormBackwardLayout* layout = layout_of(kNormBackwardLayouts, op)) return norm_backward_work(inputs, *layout);
  if (const AttentionLayout* layout = layout_of(kAttentionLayouts, op)) return attention_work(inputs, *layout);
  if (is_gather(op)) return gather_work(op, inputs);
  if (op == "aten::embedding_dense_backward") return embedding_backward_work(inputs);
  if (is_copy(op)) return copy_work(op, inputs);
  return std::nullopt;
}

/// The tensor inputs the work reads, each element they hold once (an expanded view's once, not
/// once per index), the gathered elements and the output, at the element sizes of their types (the output's and the gathered elements' that of the first tensor
/// input); nothing when a type's size is not known.
inline std::optional<Count> bytes_moved(const ParsedInputs& inputs, const Work& work) noexcept {
  Count bytes = work.extra_bytes;
  std::uint64_t output_element_size = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Shape* shape = inputs.tensor(i);
    if (shape == nullptr) continue;
    const std::uint64_t size = element_size(inputs.type(i));
    if (size == 0) return std::nullopt;
    if (output_element_size == 0) output_element_size = size;
    if ((work.read_inputs >> i & 1U) != 0) bytes += inputs.stored_numel(i) * size;
  }
  return bytes + (work.output_numel + work.gathered_numel) * output_element_size;
}

}  // namespace detail::flops

/// FLOPs and bytes of one framework op, from the JSON texts torch.profiler records for it with
/// record_shapes ("Input Dims", "Input type", "Concrete Inputs", and since PyTorch 2.1 "Input
/// Strides", which may be left empty; see the top of this header for what is counted and which
/// ops).
///
/// nullopt when the op has no formula, its inputs do not fit the formula (missing tensors,
/// mismatched sizes, an unrecorded argument the formula needs), a text is malformed, or a count
/// overflows 64 bits. Never throws; allocates nothing.
///
/// \code{.cpp}
/// auto cost = dlprof::estimate_op_cost("aten::mul", "[[2, 3, 8, 8], []]", R"(["float", "Scalar"])",
///                                      R"(["", "2"])");   // OpCost{384, 3072}
/// \endcode
inline std::optional<OpCost> estimate_op_cost(std::string_view op_name, std::string_view input_dims,
                                              std::string_view input_types,
                                              std::string_view concrete_inputs,
                                              std::string_view input_strides = {}) noexcept {
  using namespace detail::flops;
  if (!has_formula(op_name)) return std::nullopt;
  ParsedInputs inputs;
  if (!inputs.parse(input_dims, input_types, concrete_inputs)) return std::nullopt;
  inputs.parse_strides(input_strides);
  const std::optional<Work> work = op_work(op_name, inputs);
  if (!work) return std::nullopt;
  const std::optional<Count> bytes = bytes_moved(inputs, *work);
  if (work->flops.overflowed() || (bytes && bytes->overflowed())) return std::nullopt;
  return OpCost{work->flops.value(), bytes ? std::optional<std::uint64_t>(bytes->value()) : std::nullopt};
}

DLPROF_END_NAMESPACE
