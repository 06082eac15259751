// dlprof/detail/text.hpp: what every layer does with text. A name is whatever bytes a program or
// a trace file gave: a thread name cut mid-character by prctl's 15 bytes, a kernel name holding
// `<` and `&`, a terminal escape sequence. Here are the prefix and suffix tests, a text's width in
// columns and its cut to a column with "..." in the middle, the one UTF-8
// repair (every byte that is not part of a valid sequence becomes U+FFFD, so that every output
// is valid UTF-8: Python's json, HTA and Perfetto refuse anything else), the escapes for HTML
// and for a terminal built on it, and the one warning line on stderr. JSON string literals are
// format/json_text.hpp's, on the same repair.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

constexpr bool starts_with(std::string_view text, std::string_view prefix) noexcept {
  return text.substr(0, prefix.size()) == prefix;
}

constexpr bool ends_with(std::string_view text, std::string_view suffix) noexcept {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

/// Calls `visit(field)` for each piece of `text` between any of the `separators`: every piece,
/// empty ones included ("1,,3" has three), or with `skip_empty` only the others (words between
/// blanks). Stops early when `visit` returns false.
template <class Visit>
void for_each_field(std::string_view text, std::string_view separators, bool skip_empty, Visit&& visit) {
  for (;;) {
    const std::size_t end = text.find_first_of(separators);
    const std::string_view field = text.substr(0, end);
    if (!(skip_empty && field.empty()) && !visit(field)) return;
    if (end == std::string_view::npos) return;
    text.remove_prefix(end + 1);
  }
}

/// Characters (code points) in `text`, as a terminal gives each a column.
inline std::size_t text_width(std::string_view text) noexcept {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0u) != 0x80u; }));
}

/// Byte offset of the `count`th code point of `text` (its size when there are fewer).
inline std::size_t code_point_offset(std::string_view text, std::size_t count) noexcept {
  std::size_t offset = 0;
  for (std::size_t seen = 0; offset < text.size(); ++offset) {
    if ((static_cast<unsigned char>(text[offset]) & 0xC0u) == 0x80u) continue;
    if (seen++ == count) return offset;
  }
  return text.size();
}

/// `text` cut to `width` characters with "..." in the middle: a kernel's name says what it is at
/// the start and which variant at the end (its template arguments and parameters).
inline std::string shorten(std::string_view text, std::size_t width) {
  const std::size_t length = text_width(text);
  if (length <= width) return std::string(text);
  if (width <= 3) return std::string(text.substr(0, code_point_offset(text, width)));
  const std::size_t head = (width - 3) * 2 / 3;
  const std::size_t tail = width - 3 - head;
  std::string out(text.substr(0, code_point_offset(text, head)));
  out += "...";
  out += text.substr(code_point_offset(text, length - tail));
  return out;
}

/// Writes "dlprof: warning: <message>" and a newline to stderr in one write, so that lines from
/// several threads never interleave.
inline void print_warning(std::string_view message) noexcept {
  constexpr std::string_view kPrefix = "dlprof: warning: ";
  try {
    std::string line;
    line.reserve(kPrefix.size() + message.size() + 1);
    line.append(kPrefix).append(message).push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  } catch (...) {  // no memory for the line: the pieces, which may interleave
    std::fwrite(kPrefix.data(), 1, kPrefix.size(), stderr);
    std::fwrite(message.data(), 1, message.size(), stderr);
    std::fputc('\n', stderr);
  }
}

/// U+FFFD REPLACEMENT CHARACTER, in UTF-8.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

/// Length of the valid UTF-8 sequence at the start of `text` (not empty), or 0 when it is not
/// one (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, beyond
/// U+10FFFF).
inline std::size_t utf8_sequence_length(std::string_view text) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t code_point = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code_point = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code_point = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code_point = lead & 0x07u;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0u) != 0x80u) return 0;
    code_point = (code_point << 6) | (byte(i) & 0x3Fu);
  }
  const bool overlong = (length == 3 && code_point < 0x800) || (length == 4 && code_point < 0x10000);
  const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
  if (overlong || surrogate || code_point > 0x10FFFF) return 0;
  return length;
}

/// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const std::size_t length = utf8_sequence_length(text);
    if (length == 0) {
      out += kReplacementCharacter;
      text.remove_prefix(1);
    } else {
      out.append(text.data(), length);
      text.remove_prefix(length);
    }
  }
  return out;
}

/// Appends the visible form of the control character that starts `sequence` (a valid UTF-8
/// sequence of `length` bytes) and returns true, or returns false for any other character: \n,
/// \r and \t; \xHH for the other C0 controls and DEL (ESC is \x1b); \u0080 to \u009f for the C1
/// controls. One column per character, so a table's rows keep their alignment.
inline bool append_visible_control(std::string& out, std::string_view sequence, std::size_t length) {
  constexpr char kHex[] = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(sequence[0]);
  if (byte == '\n') {
    out += "\\n";
  } else if (byte == '\r') {
    out += "\\r";
  } else if (byte == '\t') {
    out += "\\t";
  } else if (byte < 0x20 || byte == 0x7F) {
    out += "\\x";
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xFu]);
  } else if (length == 2 && byte == 0xC2 && static_cast<unsigned char>(sequence[1]) < 0xA0) {  // U+0080 to U+009F
    const auto code_point = static_cast<unsigned char>(sequence[1]);
    out += "\\u00";
    out.push_back(kHex[code_point >> 4]);
    out.push_back(kHex[code_point & 0xFu]);
  } else {
    return false;
  }
  return true;
}

/// `text` as HTML text or attribute value: valid UTF-8, with & < > " ' as entities, and the
/// control characters that HTML does not allow in text (all but \t, \n and \r; NUL included)
/// shown as terminal_text() shows them.
inline std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const char c = text[0];
    std::size_t length = utf8_sequence_length(text);
    if (length == 0) {
      out += kReplacementCharacter;
      length = 1;
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '"') {
      out += "&quot;";
    } else if (c == '\'') {
      out += "&#39;";
    } else if (c == '\t' || c == '\n' || c == '\r' || !append_visible_control(out, text, length)) {
      out.append(text.data(), length);
    }
    text.remove_prefix(length);
  }
  return out;
}

/// `text` for a terminal: valid UTF-8 without a control character, so that a name can neither
/// drive the terminal (ESC]0;title BEL sets the window's title, ESC[2J clears the screen) nor
/// break a table's line. Controls become visible C-style escapes (append_visible_control()).
/// Bytes that are not UTF-8 become U+FFFD. A backslash in a name stays as it is.
inline std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    std::size_t length = utf8_sequence_length(text);
    if (length == 0) {
      out += kReplacementCharacter;
      length = 1;
    } else if (!append_visible_control(out, text, length)) {
      out.append(text.data(), length);
    }
    text.remove_prefix(length);
  }
  return out;
}

}  // namespace detail
DLPROF_END_NAMESPACE
