// dlprof/import/detail/json_parser.hpp: RapidJSON's SAX reader driving the TraceHandler.
//
// RapidJSON is the reader of record: it parses every text read whole, and every text again when
// the parse in parts gives up, and its messages and byte offsets are the errors a reader of a
// broken file sees. The parts of a large text go through the faster JsonScanner
// (json_scanner.hpp), which reads a subset of what RapidJSON reads, into the same handler calls.
//
// Why RapidJSON: with the same handler behind it, its in-situ SAX reader is the fastest of the
// general readers on Kineto's traces and needs no memory beyond the text (simdjson's structural
// index and string buffer come on top of it). It also validates the whole document, reports the
// byte offset of every syntax error, and is header-only. In-situ parsing unescapes strings inside the text, so names are views
// into it (no copy), and numbers arrive as their text (kParseNumbersAsStringsFlag), which
// timestamps need (json_number.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

// RapidJSON's SIMD switches (RAPIDJSON_SSE2, ...) are left to the program, as dlprof-report sets
// them: defined here they would give RapidJSON's inline functions two bodies in a program whose
// other files include it without them. Their aligned loads read up to 15 bytes past the end of
// the text they scan, which the reader allows: every text ends in NUL padding of its own
// (ByteBuffer::terminate), and a part of a text that another thread parses ends where no such
// load reaches the next part (chunked_parse.hpp, scans_stay_apart).
#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include "dlprof/config.hpp"
#include "dlprof/import/detail/trace_builder.hpp"
#include "dlprof/import/detail/trace_handler.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

/// RapidJSON's handler concept over TraceHandler (or another handler with its calls), with the
/// offset of each token in the text: in-situ strings and numbers point into it; the stream, which
/// starts `stream_start` bytes in, is just past other tokens. The parse ends after the object that
/// closes at `stop_after`. The handler is given offsets in the whole text, of which `text` starts
/// `base_offset` bytes in.
template <class Handler>
class RapidJsonAdapter {
 public:
  RapidJsonAdapter(Handler& handler, const char* text, rapidjson::InsituStringStream& stream, std::size_t stream_start,
                   std::size_t stop_after, std::size_t base_offset) noexcept
      : handler_(handler), text_(text), stream_(stream), stream_start_(stream_start), stop_after_(stop_after),
        base_offset_(base_offset) {}

  bool Null() {
    handler_.null(base_offset_ + position() - 4);
    return true;
  }
  bool Bool(bool value) {
    handler_.boolean(value, base_offset_ + position() - (value ? 4 : 5));
    return true;
  }
  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    const std::size_t offset = base_offset_ + static_cast<std::size_t>(text - text_);
    if (is_number_byte(text[length])) {  // cut short, or a syntax error RapidJSON reports next ("01")
      std::size_t end = length;
      while (is_number_byte(text[end])) ++end;
      if (end > UINT32_MAX) fail_long(offset, "number");
    }
    handler_.number(std::string_view(text, length), offset);
    return true;
  }
  bool String(const char* text, rapidjson::SizeType length, bool) {
    const std::size_t offset = base_offset_ + static_cast<std::size_t>(text - text_) - 1;
    if (text[length] != '\0') fail_long(offset, "string");
    handler_.string(std::string_view(text, length), offset);
    return true;
  }
  bool Key(const char* text, rapidjson::SizeType length, bool) {
    const std::size_t offset = base_offset_ + static_cast<std::size_t>(text - text_) - 1;
    if (text[length] != '\0') fail_long(offset, "key");
    handler_.key(std::string_view(text, length), offset);
    return true;
  }
  bool StartObject() {
    handler_.start_object(base_offset_ + position() - 1);
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    const std::size_t offset = position() - 1;
    handler_.end_object(base_offset_ + offset);
    return offset != stop_after_;
  }
  bool StartArray() {
    handler_.start_array(base_offset_ + position() - 1);
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    handler_.end_array(base_offset_ + position() - 1);
    return true;
  }
  // Never called with kParseNumbersAsStringsFlag; part of the concept.
  bool Int(int) { return true; }
  bool Uint(unsigned) { return true; }
  bool Int64(std::int64_t) { return true; }
  bool Uint64(std::uint64_t) { return true; }
  bool Double(double) { return true; }

 private:
  std::size_t position() noexcept { return stream_start_ + stream_.Tell(); }

  static bool is_number_byte(char c) noexcept {
    return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
  }

  /// RapidJSON gives a token's length in 32 bits, so a token of 4 GiB or more reaches the handler
  /// cut short: an in-situ string is then not followed by the NUL RapidJSON writes after it, a
  /// number is followed by the rest of its 4 GiB. Such a token is refused. (RapidJSON's own assertion stops a
  /// program built without NDEBUG first.)
  [[noreturn]] static void fail_long(std::size_t offset, std::string_view what) {
    fail_at(offset, fmt::format("a {} of 4 GiB or more: the JSON parser takes at most 4 GiB - 1 bytes", what));
  }

  Handler& handler_;
  const char* text_;
  rapidjson::InsituStringStream& stream_;
  std::size_t stream_start_;
  std::size_t stop_after_;
  std::size_t base_offset_;
};

/// Where the parser stopped, and why: kParseErrorNone when the document parsed to its end.
struct JsonParseEnd {
  std::size_t offset = 0;
  rapidjson::ParseErrorCode error = rapidjson::kParseErrorNone;
};

/// Parses the JSON value at `start` in `text` in place (strings are unescaped inside the text,
/// which a NUL byte ends); offsets count from `text`, and the handler's from `base_offset` bytes
/// before it. `kFlags` adds RapidJSON's flags (kParseStopWhenDoneFlag: the value may be followed
/// by more). Throws the handler's ParseFailure; syntax errors, and kParseErrorTermination after
/// the object closing at `stop_after`, are returned.
template <unsigned kFlags = 0, class Handler>
JsonParseEnd run_json_parser(char* text, std::size_t start, Handler& handler, std::size_t stop_after = SIZE_MAX,
                             std::size_t base_offset = 0) {
  // NaN and Infinity: Python's json module writes and reads them, so traces may hold them.
  constexpr unsigned kAllFlags = kFlags | rapidjson::kParseInsituFlag | rapidjson::kParseNumbersAsStringsFlag |
                                 rapidjson::kParseNanAndInfFlag;
  rapidjson::Reader reader;
  rapidjson::InsituStringStream stream(text + start);
  RapidJsonAdapter<Handler> adapter(handler, text, stream, start, stop_after, base_offset);
  const rapidjson::ParseResult result = reader.Parse<kAllFlags>(stream, adapter);
  if (result.IsError()) return JsonParseEnd{start + result.Offset(), result.Code()};
  return JsonParseEnd{start + stream.Tell(), rapidjson::kParseErrorNone};
}

/// Throws ParseFailure unless the parse of a text of `size` bytes ended well, at its end.
inline void check_json_end(const JsonParseEnd& end, const char* text, std::size_t size) {
  // A NUL byte ends RapidJSON's in-situ stream: name it rather than "document empty" or a
  // missing bracket.
  if (end.error != rapidjson::kParseErrorNone) {
    if (end.offset < size && text[end.offset] == '\0') fail_at(end.offset, "NUL byte in the JSON text");
    fail_at(end.offset, rapidjson::GetParseError_En(end.error));
  }
  if (end.offset != size) fail_at(end.offset, "NUL byte in the JSON text");
}

/// Parses `size` bytes of JSON at `text` in place, followed by a NUL byte. Throws ParseFailure.
/// Recursion is bounded by the handler's depth limit: it refuses each level beyond kMaxDepth as
/// it opens.
inline void parse_json_in_place(char* text, std::size_t size, TraceHandler& handler) {
  check_json_end(run_json_parser(text, 0, handler), text, size);
}

}  // namespace detail::reader
DLPROF_END_NAMESPACE
