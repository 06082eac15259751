// dlprof/import/detail/json_parser.hpp: RapidJSON's SAX reader driving the TraceHandler.
//
// Why RapidJSON (bench/RESULTS.md, "Reading traces", has the figures): on the 15 MB V100 trace
// its in-situ SAX reader and simdjson's On-Demand API give the same time for parse + mapping
// (both ~2x nlohmann's SAX parser); the mapping, not the tokenizer, is half the time. RapidJSON
// needs no memory beyond the text itself, where simdjson adds a structural index and a string
// buffer (+17 MB, 40% more than the whole reader needs otherwise), validates the whole document,
// reports the byte offset of every syntax error, and is header-only. In-situ parsing unescapes
// strings inside the text, so names are views into it (no copy), and numbers arrive as their
// text (kParseNumbersAsStringsFlag), which timestamps need (json_number.hpp).
#pragma once

#include <cstddef>
#include <string_view>

#if defined(__SSE2__) && !defined(RAPIDJSON_SSE2) && !defined(RAPIDJSON_SSE42) && !defined(RAPIDJSON_NEON)
// Whitespace is skipped 16 bytes at a time: Kineto indents its traces.
#  define RAPIDJSON_SSE2
#endif
#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include "dlprof/config.hpp"
#include "dlprof/import/detail/trace_builder.hpp"
#include "dlprof/import/detail/trace_handler.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::json {

/// RapidJSON's handler concept over TraceHandler, with the offset of each token: in-situ strings
/// and numbers point into the text; the stream's position is just past other tokens.
class RapidJsonAdapter {
 public:
  RapidJsonAdapter(TraceHandler& handler, const char* text, rapidjson::InsituStringStream& stream) noexcept
      : handler_(handler), text_(text), stream_(stream) {}

  bool Null() {
    handler_.null(position() - 4);
    return true;
  }
  bool Bool(bool value) {
    handler_.boolean(value, position() - (value ? 4 : 5));
    return true;
  }
  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    handler_.number(std::string_view(text, length), static_cast<std::size_t>(text - text_));
    return true;
  }
  bool String(const char* text, rapidjson::SizeType length, bool) {
    handler_.string(std::string_view(text, length), static_cast<std::size_t>(text - text_) - 1);
    return true;
  }
  bool Key(const char* text, rapidjson::SizeType length, bool) {
    handler_.key(std::string_view(text, length), static_cast<std::size_t>(text - text_) - 1);
    return true;
  }
  bool StartObject() {
    handler_.start_object(position() - 1);
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    handler_.end_object(position() - 1);
    return true;
  }
  bool StartArray() {
    handler_.start_array(position() - 1);
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    handler_.end_array(position() - 1);
    return true;
  }
  // Never called with kParseNumbersAsStringsFlag; part of the concept.
  bool Int(int) { return true; }
  bool Uint(unsigned) { return true; }
  bool Int64(std::int64_t) { return true; }
  bool Uint64(std::uint64_t) { return true; }
  bool Double(double) { return true; }

 private:
  std::size_t position() noexcept { return stream_.Tell(); }

  TraceHandler& handler_;
  const char* text_;
  rapidjson::InsituStringStream& stream_;
};

/// Parses `size` bytes of JSON at `text` in place (strings are unescaped inside it), followed by
/// a NUL byte. Throws ParseFailure. Recursion is bounded by the handler's depth limit: it refuses
/// each level beyond kMaxDepth as it opens.
inline void parse_json_in_place(char* text, std::size_t size, TraceHandler& handler) {
  // NaN and Infinity: Python's json module writes and reads them, so traces may hold them.
  constexpr unsigned kFlags =
      rapidjson::kParseInsituFlag | rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseNanAndInfFlag;
  rapidjson::Reader reader;
  rapidjson::InsituStringStream stream(text);
  RapidJsonAdapter adapter(handler, text, stream);
  const rapidjson::ParseResult result = reader.Parse<kFlags>(stream, adapter);
  if (result.IsError()) {
    // A NUL byte ends RapidJSON's in-situ stream: name it rather than "document empty" or a
    // missing bracket.
    const std::size_t offset = result.Offset();
    if (offset < size && text[offset] == '\0') fail_at(offset, "NUL byte in the JSON text");
    fail_at(offset, rapidjson::GetParseError_En(result.Code()));
  }
  if (stream.Tell() != size) fail_at(stream.Tell(), "NUL byte in the JSON text");
  handler.finish(size);
}

}  // namespace detail::json
DLPROF_END_NAMESPACE
