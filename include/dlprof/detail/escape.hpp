// dlprof/detail/escape.hpp: names made safe for each output. A name is whatever bytes a program or
// a trace file gave: a thread name cut mid-character by prctl's 15 bytes, a kernel name holding
// `<` and `&`, a terminal escape sequence. Every writer escapes through here: JSON string
// literals (the trace writer, the reader's re-written JSON texts, the report's JSON), HTML text
// (the report's page) and terminal text (the report's tables). Each repairs text that is not
// UTF-8 the same way, every byte that is not part of a valid sequence becoming U+FFFD, so that
// every output is valid UTF-8 (Python's json, HTA and Perfetto refuse anything else).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

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

/// `text` as HTML text or attribute value: valid UTF-8, with & < > " ' as entities.
inline std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : valid_utf8(text)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

/// `text` for a terminal: valid UTF-8 without a control character, so that a name can neither
/// drive the terminal (ESC]0;title BEL sets the window's title, ESC[2J clears the screen) nor
/// break a table's line. Controls become visible C-style escapes, one column per character:
/// \n, \r and \t; \xHH for the other C0 controls and DEL (ESC is \x1b); \u0080 to \u009f for the
/// C1 controls. Bytes that are not UTF-8 become U+FFFD. A backslash in a name stays as it is.
inline std::string terminal_text(std::string_view text) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto byte = static_cast<unsigned char>(text[0]);
    std::size_t length = utf8_sequence_length(text);
    if (length == 0) {
      out += kReplacementCharacter;
      length = 1;
    } else if (byte == '\n') {
      out += "\\n";
    } else if (byte == '\r') {
      out += "\\r";
    } else if (byte == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7F) {
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xFu]);
    } else if (byte == 0xC2 && static_cast<unsigned char>(text[1]) < 0xA0) {  // U+0080 to U+009F
      const auto code_point = static_cast<unsigned char>(text[1]);
      out += "\\u00";
      out.push_back(kHex[code_point >> 4]);
      out.push_back(kHex[code_point & 0xFu]);
    } else {
      out.append(text.data(), length);
    }
    text.remove_prefix(length);
  }
  return out;
}

}  // namespace detail
DLPROF_END_NAMESPACE
