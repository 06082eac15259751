// dlprof/import/detail/json_scanner.hpp: the reader's fast path through the events of a trace,
// a JSON scanner that drives the TraceHandler directly: it knows the shape of Kineto's events, so
// it reads them several times faster than a general SAX reader (bench/reader_bench.cpp).
//
// It reads the parts of a parse in parts (chunked_parse.hpp), and only those: RapidJSON stays
// the reader of record. The scanner accepts a subset of what RapidJSON accepts and gives the
// handler the same calls, with the same views and offsets, for every text it accepts. Anything
// else (a syntax error, NaN or Infinity, a \u escape of a surrogate, a number RapidJSON may
// find too large, a token of 4 GiB) makes it give up; the parse in parts then gives up, and
// RapidJSON parses the whole text again on one thread, which reports errors exactly as before.
// The handler's own failures (ParseFailure) pass through, after the same calls.
//
// Strings are unescaped in place and end in a NUL written where their closing quote was, as
// RapidJSON's in-situ parse leaves them; numbers are views of their text. The string scan reads
// whole aligned 16-byte blocks from the first one after its start, up to the one holding the
// quote that ends it, and every other read is of one byte in the token: what RapidJSON's SSE2
// scans read, which is what the cut between parts allows for (chunked_parse.hpp,
// scans_stay_apart).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__SSE2__)
#  include <emmintrin.h>
#endif

#include "dlprof/config.hpp"
#include "dlprof/import/detail/trace_handler.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

/// How a scan ended.
enum class ScanEnd : std::uint8_t {
  Done,     ///< the value closed; the scan's offset is just past it
  Stopped,  ///< the object closing at `stop_after` closed, and the scan stopped there
  GaveUp,   ///< a text the scanner does not read: parse it with RapidJSON instead
};

struct ScanResult {
  std::size_t offset = 0;
  ScanEnd end = ScanEnd::GaveUp;
};

/// A JSON scanner over a handler with TraceHandler's calls (start_object, key, string, number,
/// ...).
template <class Handler>
class JsonScanner {
 public:
  /// `text` is parsed in place from `start`; the handler is given offsets `base_offset` bytes
  /// on from `text`'s.
  JsonScanner(char* text, std::size_t start, Handler& handler, std::size_t stop_after, std::size_t base_offset) noexcept
      : text_(text), at_(text + start), handler_(handler), stop_after_(stop_after), base_offset_(base_offset) {}

  /// Scans the JSON value at the start (after whitespace), and nothing after it.
  ScanResult scan() {
    skip_space();
    const bool read = value(0);
    if (stopped_) return {offset(at_), ScanEnd::Stopped};
    if (!read) return {offset(at_), ScanEnd::GaveUp};
    return {offset(at_), ScanEnd::Done};
  }

 private:
  /// Deeper than the handler lets a document go (it refuses kMaxDepth first): the scanner's
  /// own bound on its recursion, whatever the handler.
  static constexpr int kMaxScanDepth = static_cast<int>(kMaxDepth) + 16;
  /// RapidJSON gives token lengths in 32 bits.
  static constexpr std::size_t kMaxToken = UINT32_MAX - 1;

  std::size_t offset(const char* at) const noexcept { return static_cast<std::size_t>(at - text_); }
  std::size_t handler_offset(const char* at) const noexcept { return base_offset_ + offset(at); }

  static bool is_space(char c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  static bool is_digit(char c) noexcept { return static_cast<unsigned char>(c - '0') < 10; }

  void skip_space() noexcept {
    while (is_space(*at_)) ++at_;
  }

  /// Past the whitespace, then `separator` and the whitespace after it; false, at the first byte
  /// that is not whitespace, where that is not `separator`.
  bool skip_past(char separator) noexcept {
    skip_space();
    if (*at_ != separator) return false;
    ++at_;
    skip_space();
    return true;
  }

  /// False to give up (or after the stop).
  bool value(int depth) {
    switch (*at_) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': {
        const char* quote = at_;
        std::string_view text;
        if (!string(text)) return false;
        handler_.string(text, handler_offset(quote));
        return true;
      }
      case 't': return literal("true", [&](std::size_t at) { handler_.boolean(true, at); });
      case 'f': return literal("false", [&](std::size_t at) { handler_.boolean(false, at); });
      case 'n': return literal("null", [&](std::size_t at) { handler_.null(at); });
      default: return number();
    }
  }

  template <class Emit>
  bool literal(std::string_view word, Emit&& emit) {
    const char* start = at_;
    for (const char c : word) {  // one byte at a time: a mismatch stops the reading
      if (*at_ != c) return false;
      ++at_;
    }
    emit(handler_offset(start));
    return true;
  }

  /// JSON's number grammar. Gives up on what RapidJSON reads otherwise or may refuse: NaN and
  /// Infinity, an integer part of 300 digits or more, a positive exponent of 300 or more.
  bool number() {
    const char* start = at_;
    if (*at_ == '-') ++at_;
    if (*at_ == '0') {
      ++at_;
    } else if (*at_ >= '1' && *at_ <= '9') {
      const char* digits = at_;
      while (is_digit(*at_)) ++at_;
      if (at_ - digits >= 300) return false;
    } else {
      return false;
    }
    if (*at_ == '.') {
      ++at_;
      if (!is_digit(*at_)) return false;
      while (is_digit(*at_)) ++at_;
    }
    if (*at_ == 'e' || *at_ == 'E') {
      ++at_;
      const bool negative = *at_ == '-';
      if (*at_ == '+' || *at_ == '-') ++at_;
      if (!is_digit(*at_)) return false;
      std::size_t exponent = 0;
      while (is_digit(*at_)) {
        if (exponent < 1000) exponent = exponent * 10 + static_cast<std::size_t>(*at_ - '0');
        ++at_;
      }
      if (!negative && exponent >= 300) return false;
    }
    const auto length = static_cast<std::size_t>(at_ - start);
    if (length > kMaxToken) return false;
    handler_.number(std::string_view(start, length), handler_offset(start));
    return true;
  }

  /// A string at the quote under `at_`, unescaped in place: its view, and `at_` past it.
  bool string(std::string_view& text) {
    char* const start = at_ + 1;
    char* end = start;
    while ((reinterpret_cast<std::uintptr_t>(end) & 15u) != 0) {
      if (ends_plain_run(*end)) return string_end(start, end, text);
      ++end;
    }
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i control = _mm_set1_epi8(0x1f);
    for (;; end += 16) {
      const __m128i block = _mm_load_si128(reinterpret_cast<const __m128i*>(end));
      const __m128i stops = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash)),
                                         _mm_cmpeq_epi8(_mm_max_epu8(block, control), control));
      const auto mask = static_cast<unsigned>(_mm_movemask_epi8(stops));
      if (mask != 0) {
        end += __builtin_ctz(mask);
        break;
      }
    }
#else
    while (!ends_plain_run(*end)) ++end;
#endif
    return string_end(start, end, text);
  }

  /// A quote, a backslash or a control character (NUL included) ends a run of plain bytes.
  static bool ends_plain_run(char c) noexcept {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  }

  /// The string from `start` whose plain bytes run to `end`.
  bool string_end(char* start, char* end, std::string_view& text) {
    if (*end == '\\') return unescape(start, end, text);
    if (*end != '"') return false;
    const auto length = static_cast<std::size_t>(end - start);
    if (length > kMaxToken) return false;
    *end = '\0';
    text = std::string_view(start, length);
    at_ = end + 1;
    return true;
  }

  static int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  /// The rest of a string from its first backslash at `from`, unescaped into the bytes from
  /// `from` on (the text only shrinks).
  bool unescape(char* start, char* from, std::string_view& text) {
    char* in = from;
    char* out = from;
    for (;;) {
      const char c = *in;
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        *out++ = *in++;
        continue;
      }
      ++in;
      switch (*in++) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '/': *out++ = '/'; break;
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case 'n': *out++ = '\n'; break;
        case 'r': *out++ = '\r'; break;
        case 't': *out++ = '\t'; break;
        case 'u': {
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const int digit = hex_digit(*in);
            if (digit < 0) return false;
            code = code * 16 + static_cast<unsigned>(digit);
            ++in;
          }
          if (code >= 0xD800 && code <= 0xDFFF) return false;
          if (code < 0x80) {
            *out++ = static_cast<char>(code);
          } else if (code < 0x800) {
            *out++ = static_cast<char>(0xC0 | (code >> 6));
            *out++ = static_cast<char>(0x80 | (code & 0x3F));
          } else {
            *out++ = static_cast<char>(0xE0 | (code >> 12));
            *out++ = static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            *out++ = static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: return false;
      }
    }
    const auto length = static_cast<std::size_t>(out - start);
    if (length > kMaxToken) return false;
    *out = '\0';
    text = std::string_view(start, length);
    at_ = in + 1;
    return true;
  }

  bool object(int depth) {
    if (depth >= kMaxScanDepth) return false;
    handler_.start_object(handler_offset(at_));
    ++at_;
    skip_space();
    if (*at_ == '}') return close_object();
    for (;;) {
      if (*at_ != '"') return false;
      const char* quote = at_;
      std::string_view key;
      if (!string(key)) return false;
      handler_.key(key, handler_offset(quote));
      if (!skip_past(':')) return false;
      if (!value(depth + 1)) return false;
      if (skip_past(',')) continue;
      if (*at_ == '}') return close_object();
      return false;
    }
  }

  bool close_object() {
    const std::size_t closing = offset(at_);
    handler_.end_object(base_offset_ + closing);
    ++at_;
    if (closing == stop_after_) {
      stopped_ = true;
      return false;
    }
    return true;
  }

  bool array(int depth) {
    if (depth >= kMaxScanDepth) return false;
    handler_.start_array(handler_offset(at_));
    ++at_;
    skip_space();
    if (*at_ != ']') {
      for (;;) {
        if (!value(depth + 1)) return false;
        if (skip_past(',')) continue;
        if (*at_ == ']') break;
        return false;
      }
    }
    handler_.end_array(handler_offset(at_));
    ++at_;
    return true;
  }

  char* text_;
  char* at_;
  Handler& handler_;
  std::size_t stop_after_;
  std::size_t base_offset_;
  bool stopped_ = false;
};

/// Scans the JSON value at `start` in `text` in place into `handler`, stopping after the object
/// that closes at `stop_after` (an offset in `text`); the handler's offsets count from
/// `base_offset` bytes before `text`. Throws the handler's ParseFailure.
template <class Handler>
ScanResult scan_json(char* text, std::size_t start, Handler& handler, std::size_t stop_after = SIZE_MAX,
                     std::size_t base_offset = 0) {
  return JsonScanner<Handler>(text, start, handler, stop_after, base_offset).scan();
}

}  // namespace detail::reader
DLPROF_END_NAMESPACE
