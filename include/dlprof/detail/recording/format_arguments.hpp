// dlprof/detail/recording/format_arguments.hpp: the arguments of a DLPROF_RANGE_F kept as bytes,
// so that the range's name is formatted when its window is assembled rather than while it is
// timed.
//
// Arguments fmt formats by value (integers, floating point, bool, char, untyped pointers) are
// copied into 16 bytes with a 4-bit type code each; they are formatted later exactly as now,
// because each is kept at the type fmt itself would map it to. Arguments that refer to memory the
// range does not own (strings, views, user types) cannot be kept: such a range formats its name
// at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// How a kept argument is stored and read back: fmt's own mapping of the argument's type (a
/// short is formatted as an int, an unsigned char as an unsigned).
enum class FormatArgumentType : std::uint8_t {
  End = 0,  ///< no more arguments
  Bool = 1,
  Char = 2,
  Int32 = 3,
  UInt32 = 4,
  Int64 = 5,
  UInt64 = 6,
  Float = 7,
  Double = 8,
  Pointer = 9,  ///< an untyped pointer, formatted as its address
};

constexpr std::size_t format_argument_size(FormatArgumentType type) noexcept {
  switch (type) {
    case FormatArgumentType::Bool:
    case FormatArgumentType::Char:
    case FormatArgumentType::Int32:
    case FormatArgumentType::UInt32:
    case FormatArgumentType::Float: return 4;
    case FormatArgumentType::Int64:
    case FormatArgumentType::UInt64:
    case FormatArgumentType::Double:
    case FormatArgumentType::Pointer: return 8;
    case FormatArgumentType::End: break;
  }
  return 0;
}

/// The bytes of a range's kept arguments, one after another at 4 or 8 bytes each, and their
/// types, 4 bits each from the lowest (End after the last).
struct FormatArguments {
  static constexpr std::size_t kBytes = 16;
  static constexpr std::size_t kMaxArguments = kBytes / 4;
  std::uint64_t words[kBytes / 8];
  std::uint32_t types;
};

/// The type a value of T is kept as, or End when it cannot be kept.
template <class T>
constexpr FormatArgumentType format_argument_type() noexcept {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  if constexpr (std::is_same_v<U, bool>) {
    return FormatArgumentType::Bool;
  } else if constexpr (std::is_same_v<U, char>) {
    return FormatArgumentType::Char;
  } else if constexpr (std::is_integral_v<U> && sizeof(U) <= 4) {  // char8_t, wchar_t and the like are refused by fmt itself
    return std::is_signed_v<U> ? FormatArgumentType::Int32 : FormatArgumentType::UInt32;
  } else if constexpr (std::is_integral_v<U> && sizeof(U) == 8) {
    return std::is_signed_v<U> ? FormatArgumentType::Int64 : FormatArgumentType::UInt64;
  } else if constexpr (std::is_same_v<U, float>) {
    return FormatArgumentType::Float;
  } else if constexpr (std::is_same_v<U, double>) {
    return FormatArgumentType::Double;
  } else if constexpr (std::is_same_v<U, void*> || std::is_same_v<U, const void*> || std::is_same_v<U, std::nullptr_t>) {
    return FormatArgumentType::Pointer;
  } else {
    return FormatArgumentType::End;  // strings, views, long double, 128-bit integers, user types
  }
}

/// Whether arguments of these types can all be kept in one FormatArguments.
template <class... Args>
inline constexpr bool kFormatArgumentsKeepable =
    ((format_argument_type<Args>() != FormatArgumentType::End) && ...) &&
    (std::size_t{0} + ... + format_argument_size(format_argument_type<Args>())) <= FormatArguments::kBytes;

/// The value of an argument of type T as it is kept.
template <class T>
constexpr auto kept_format_argument(const T& value) noexcept {
  constexpr FormatArgumentType type = format_argument_type<T>();
  if constexpr (type == FormatArgumentType::Bool || type == FormatArgumentType::Char || type == FormatArgumentType::Int32)
    return static_cast<std::int32_t>(value);
  else if constexpr (type == FormatArgumentType::UInt32)
    return static_cast<std::uint32_t>(value);
  else if constexpr (type == FormatArgumentType::Int64)
    return static_cast<std::int64_t>(value);
  else if constexpr (type == FormatArgumentType::UInt64)
    return static_cast<std::uint64_t>(value);
  else if constexpr (type == FormatArgumentType::Pointer)
    return static_cast<const void*>(value);
  else
    return value;  // float, double
}

/// The arguments kept as their types say; only for kFormatArgumentsKeepable types.
template <class... Args>
DLPROF_ALWAYS_INLINE FormatArguments keep_format_arguments(const Args&... args) noexcept {
  static_assert(kFormatArgumentsKeepable<Args...>, "these arguments cannot be kept");
  FormatArguments kept{{0, 0}, 0};
  unsigned char bytes[FormatArguments::kBytes] = {};
  std::size_t offset = 0;
  std::uint32_t shift = 0;
  const auto keep = [&](const auto& value) {
    const auto stored = kept_format_argument(value);
    std::memcpy(bytes + offset, &stored, sizeof(stored));
    offset += sizeof(stored);
    kept.types |= static_cast<std::uint32_t>(format_argument_type<std::remove_reference_t<decltype(value)>>()) << shift;
    shift += 4;
  };
  (keep(args), ...);
  std::memcpy(kept.words, bytes, sizeof(bytes));
  return kept;
}

}  // namespace detail
DLPROF_END_NAMESPACE
