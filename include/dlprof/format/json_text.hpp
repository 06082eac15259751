// dlprof/format/json_text.hpp: the one JSON text writer. The trace writer, the reader (the JSON
// texts it keeps of values it re-writes) and the report's JSON all write strings through
// append_json_string(), so each of them writes valid JSON whatever bytes a name holds: quotes and
// backslashes escaped, control characters (NUL included) as \u00XX, and every byte that is not
// part of valid UTF-8 replaced by U+FFFD (detail/text.hpp's repair), which Python's json, HTA and
// Perfetto need.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Fixed pieces of JSON text, for joined_text and key_text.
namespace json_piece {
inline constexpr std::string_view kNothing = "";
inline constexpr std::string_view kComma = ", ";
inline constexpr std::string_view kQuote = "\"";
inline constexpr std::string_view kKeyEnd = "\": ";
inline constexpr std::string_view kArgsOpening = ", \"args\": {";
}  // namespace json_piece

/// The concatenation of `Parts`, made at compile time: a vocabulary name joined to the JSON around
/// it is written with one copy of a known size, as a literal would be.
template <const std::string_view&... Parts>
struct JoinedText {
  static constexpr std::size_t kSize = (std::size_t{0} + ... + Parts.size());
  static constexpr std::array<char, kSize + 1> kChars = [] {
    std::array<char, kSize + 1> chars{};
    std::size_t at = 0;
    for (const std::string_view part : {std::string_view{}, Parts...})
      for (const char c : part) chars[at++] = c;
    return chars;
  }();
};
template <const std::string_view&... Parts>
inline constexpr std::string_view joined_text{JoinedText<Parts...>::kChars.data(), JoinedText<Parts...>::kSize};

/// `<Before>"<Key>": `, joined at compile time.
template <const std::string_view& Before, const std::string_view& Key>
inline constexpr std::string_view key_text = joined_text<Before, json_piece::kQuote, Key, json_piece::kKeyEnd>;

/// Appends bytes to a std::string or an fmt::memory_buffer.
template <class Out>
void append_bytes(Out& out, std::string_view bytes) {
  out.append(bytes.data(), bytes.data() + bytes.size());
}

/// Appends `text` as a JSON string literal: quotes and backslashes escaped, control characters
/// as \u00XX, invalid UTF-8 as U+FFFD. `Out` is a std::string or an fmt::memory_buffer. Runs of
/// plain bytes are copied whole: the trace writer escapes every name through here.
template <class Out>
void append_json_string(Out& out, std::string_view text) {
  constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t copied = 0;  // bytes of `text` already in `out`
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x80 && byte != '"' && byte != '\\') {
      ++i;
      continue;
    }
    std::size_t length = 1;
    if (byte >= 0x80) {
      length = utf8_sequence_length(text.substr(i));
      if (length != 0) {
        i += length;
        continue;
      }
      length = 1;
    }
    append_bytes(out, text.substr(copied, i - copied));
    if (byte >= 0x80) {
      append_bytes(out, kReplacementCharacter);
    } else if (byte < 0x20) {
      const char escape[6] = {'\\', 'u', '0', '0', kHex[byte >> 4], kHex[byte & 0xFu]};
      append_bytes(out, std::string_view(escape, sizeof(escape)));
    } else {
      out.push_back('\\');
      out.push_back(static_cast<char>(byte));
    }
    i += length;
    copied = i;
  }
  append_bytes(out, text.substr(copied));
  out.push_back('"');
}

/// JSON has no NaN or infinity. A counter sample that is not finite is written as the string
/// "NaN", "Infinity" or "-Infinity" (Python's json module and JavaScript spell them so, bare), and
/// the reader takes those strings back as numbers: the file stays valid JSON and the sample
/// round-trips.
inline constexpr std::string_view kNonFiniteNames[] = {"NaN", "Infinity", "-Infinity"};

inline std::string_view non_finite_name(double value) noexcept {
  return std::isnan(value) ? kNonFiniteNames[0] : value > 0 ? kNonFiniteNames[1] : kNonFiniteNames[2];
}

constexpr bool is_non_finite_name(std::string_view text) noexcept {
  return text == kNonFiniteNames[0] || text == kNonFiniteNames[1] || text == kNonFiniteNames[2];
}

/// Appends JSON text to a buffer: fragments as they are, numbers, and strings escaped. Holds no
/// state of its own: layout (commas, indentation) is the caller's.
class JsonWriter {
 public:
  explicit JsonWriter(fmt::memory_buffer& out) noexcept : out_(out) {}

  /// Appends by growing the buffer and copying: inlined, a literal fragment becomes a few moves
  /// of a known size (buffer::append copies in a loop through a capacity check).
  DLPROF_ALWAYS_INLINE void raw(std::string_view text) {
    const std::size_t size = out_.size();
    out_.resize(size + text.size());
    std::memcpy(out_.data() + size, text.data(), text.size());
  }
  void character(char c) { out_.push_back(c); }

  /// `<before>"<key>": `, one growth of the buffer for the three pieces: `key` is a name of
  /// format/vocabulary.hpp, plain ASCII that needs no escape.
  DLPROF_ALWAYS_INLINE void key(std::string_view before, std::string_view key) {
    const std::size_t size = out_.size();
    out_.resize(size + before.size() + key.size() + 4);
    char* at = out_.data() + size;
    std::memcpy(at, before.data(), before.size());
    at += before.size();
    *at++ = '"';
    std::memcpy(at, key.data(), key.size());
    at += key.size();
    std::memcpy(at, "\": ", 3);
  }

  void integer(std::int64_t value) {
    const fmt::format_int formatted(value);
    raw(std::string_view(formatted.data(), formatted.size()));
  }

  /// Nanoseconds as microseconds with exactly three decimals (Kineto's fmtTs), clamped at 0.
  void microseconds(std::int64_t ns) {
    if (ns < 0) ns = 0;
    integer(ns / 1000);
    const auto fraction = static_cast<int>(ns % 1000);
    const char digits[4] = {'.', static_cast<char>('0' + fraction / 100), static_cast<char>('0' + fraction / 10 % 10),
                            static_cast<char>('0' + fraction % 10)};
    raw(std::string_view(digits, 4));
  }

  /// A finite number in its shortest exact form; NaN and infinities become null (JSON has none).
  /// fmt::format runs libfmt's compiled formatter; fmt::format_to into this buffer would compile
  /// all of fmt's formatting into every file that includes the writer.
  void number(double value) { raw(std::isfinite(value) ? fmt::format("{}", value) : std::string("null")); }

  /// A counter's sample: a number, or for NaN and the infinities their name as a string
  /// (non_finite_name()), which the reader takes back as the number.
  void sample(double value) {
    if (std::isfinite(value)) {
      number(value);
      return;
    }
    character('"');
    raw(non_finite_name(value));
    character('"');
  }

  /// A JSON string literal (append_json_string()).
  void string(std::string_view text) { append_json_string(out_, text); }

 private:
  fmt::memory_buffer& out_;
};

}  // namespace detail
DLPROF_END_NAMESPACE
