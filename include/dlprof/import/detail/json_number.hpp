// dlprof/import/detail/json_number.hpp: JSON number texts to integers, exactly. Trace timestamps
// are microseconds with up to 16 integer digits and 3 decimals (1694039959123456.789): a double
// holds 15-17 significant digits, so going through one would lose nanoseconds. The text is read
// as a decimal instead: digits and exponent, scaled by a power of ten, rounded once.
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>
#include <system_error>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

enum class NumberError : std::uint8_t {
  None,
  NotANumber,   ///< not a JSON number
  OutOfRange,   ///< beyond the limit asked for
  NotIntegral,  ///< has a fractional part where an integer is needed
};

/// A number's magnitude and sign: `negative` with `magnitude` 0 is -0.
struct ScaledNumber {
  std::uint64_t magnitude = 0;
  bool negative = false;
  NumberError error = NumberError::None;
};

/// The value of the JSON number `text` times 10^scale, rounded half away from zero to an integer
/// (or, with `integral`, an error if that drops a non-zero digit), exactly: no floating point.
/// The magnitude must not exceed `limit`.
inline ScaledNumber scale_number(std::string_view text, int scale, std::uint64_t limit, bool integral) noexcept {
  // The common case first: no sign, no exponent, at most `scale` decimals, and few enough
  // digits that the scaled value fits 64 bits ("1712195495519689.612" µs as ns, "135071").
  if (scale >= 0 && !text.empty() && text[0] >= '0' && text[0] <= '9' &&
      (text[0] != '0' || text.size() == 1 || text[1] == '.')) {
    std::uint64_t magnitude = 0;
    std::size_t i = 0;
    while (i < text.size() && i < 20 && text[i] >= '0' && text[i] <= '9') magnitude = magnitude * 10 + (text[i++] - '0');
    const std::size_t integer_digits = i;
    int decimals = 0;
    bool plain = integer_digits + static_cast<std::size_t>(scale) <= 19;  // 10^19 - 1 < 2^64
    if (plain && i < text.size()) {
      plain = text[i++] == '.';
      while (plain && i < text.size() && decimals < scale && text[i] >= '0' && text[i] <= '9') {
        magnitude = magnitude * 10 + (text[i++] - '0');
        ++decimals;
      }
      plain = plain && decimals > 0 && i == text.size();
    }
    if (plain) {
      for (; decimals < scale; ++decimals) magnitude *= 10;
      if (magnitude <= limit) return ScaledNumber{magnitude, false, NumberError::None};
    }
  }
  ScaledNumber result;
  const char* p = text.data();
  const char* const end = p + text.size();
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (p != end && *p == '-') {
    result.negative = true;
    ++p;
  }
  // JSON's grammar: int [frac] [exp]; int has no leading zeros.
  const char* const integer_begin = p;
  if (p == end || !is_digit(*p)) return {0, false, NumberError::NotANumber};
  if (*p == '0') {
    ++p;
  } else {
    while (p != end && is_digit(*p)) ++p;
  }
  const char* const integer_end = p;
  const char* fraction_begin = p;
  const char* fraction_end = p;
  if (p != end && *p == '.') {
    fraction_begin = ++p;
    while (p != end && is_digit(*p)) ++p;
    fraction_end = p;
    if (fraction_begin == fraction_end) return {0, false, NumberError::NotANumber};
  }
  // The exponent saturates: beyond a few dozen either way the value is 0 or out of range anyway.
  constexpr std::int64_t kExponentCap = 100'000;
  std::int64_t exponent = 0;
  if (p != end && (*p == 'e' || *p == 'E')) {
    ++p;
    bool exponent_negative = false;
    if (p != end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
    if (p == end || !is_digit(*p)) return {0, false, NumberError::NotANumber};
    while (p != end && is_digit(*p)) {
      if (exponent < kExponentCap) exponent = exponent * 10 + (*p - '0');
      ++p;
    }
    if (exponent_negative) exponent = -exponent;
  }
  if (p != end) return {0, false, NumberError::NotANumber};

  // The digits d1 d2 ... dn (integer then fraction) stand for D * 10^shift.
  const std::int64_t shift = exponent - (fraction_end - fraction_begin) + scale;
  const auto digit_at = [&](std::int64_t i) -> int {  // i-th of the n digits
    const std::int64_t integer_digits = integer_end - integer_begin;
    return i < integer_digits ? integer_begin[i] - '0' : fraction_begin[i - integer_digits] - '0';
  };
  const std::int64_t digit_count = (integer_end - integer_begin) + (fraction_end - fraction_begin);
  // Digits [0, kept) form the integer part of the scaled value; the rest are dropped.
  const std::int64_t kept = shift >= 0 ? digit_count : digit_count + shift;
  std::uint64_t magnitude = 0;
  for (std::int64_t i = 0; i < kept && i < digit_count; ++i) {
    if (__builtin_mul_overflow(magnitude, std::uint64_t{10}, &magnitude) ||
        __builtin_add_overflow(magnitude, static_cast<std::uint64_t>(digit_at(i)), &magnitude))
      return {0, false, NumberError::OutOfRange};
  }
  if (shift > 0 && magnitude != 0) {
    for (std::int64_t i = 0; i < shift; ++i)
      if (__builtin_mul_overflow(magnitude, std::uint64_t{10}, &magnitude)) return {0, false, NumberError::OutOfRange};
  }
  if (kept < digit_count) {
    const std::int64_t first_dropped = kept < 0 ? -1 : kept;  // kept < 0: the value is below 0.1
    bool dropped_nonzero = false;
    for (std::int64_t i = first_dropped < 0 ? 0 : first_dropped; i < digit_count && !dropped_nonzero; ++i)
      dropped_nonzero = digit_at(i) != 0;
    if (integral && dropped_nonzero) return {0, false, NumberError::NotIntegral};
    // Half away from zero: only the first dropped digit decides.
    if (first_dropped >= 0 && digit_at(first_dropped) >= 5 &&
        __builtin_add_overflow(magnitude, std::uint64_t{1}, &magnitude))
      return {0, false, NumberError::OutOfRange};
  }
  if (magnitude > limit) return {0, false, NumberError::OutOfRange};
  result.magnitude = magnitude;
  return result;
}

/// A signed integer in [-limit, limit] from `text` times 10^scale (see scale_number).
inline NumberError to_int64(std::string_view text, int scale, std::int64_t limit, bool integral,
                            std::int64_t* value) noexcept {
  const ScaledNumber number = scale_number(text, scale, static_cast<std::uint64_t>(limit), integral);
  if (number.error != NumberError::None) return number.error;
  *value = number.negative ? -static_cast<std::int64_t>(number.magnitude) : static_cast<std::int64_t>(number.magnitude);
  return NumberError::None;
}

/// An unsigned integer no larger than `limit`; a negative value is out of range (-0 is 0).
inline NumberError to_uint64(std::string_view text, std::uint64_t limit, std::uint64_t* value) noexcept {
  const ScaledNumber number = scale_number(text, 0, limit, /*integral=*/true);
  if (number.error != NumberError::None) return number.error;
  if (number.negative && number.magnitude != 0) return NumberError::OutOfRange;
  *value = number.magnitude;
  return NumberError::None;
}

/// A double (counter samples, occupancy figures), nearest to the text.
inline NumberError to_double(std::string_view text, double* value) noexcept {
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, *value);
  if (error == std::errc::result_out_of_range) return NumberError::OutOfRange;
  if (error != std::errc() || stop != end) return NumberError::NotANumber;
  return NumberError::None;
}

}  // namespace detail::reader
DLPROF_END_NAMESPACE
