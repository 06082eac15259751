// dlprof/import/detail/split_parse.hpp: a large trace parsed on two threads. Parsing is four
// fifths of reading a trace, and one JSON parse cannot be shared, so the text is cut between two
// events of its events array: this thread parses the head, a second thread the rest of the array
// into a RawEventLog, which the builder takes after the head's events; what follows the array
// (Kineto writes "baseTimeNanoseconds" there) is parsed last, as a document of its own.
//
// The cut is a guess made by looking at bytes ("}", a comma and whitespace, "{"), checked as the
// head is parsed: its parse must close an event at the guessed "}" and be between events there.
// The threads never touch the same bytes: the byte after the "}" becomes NUL, so the head's parse
// cannot run on, and the byte before the "{" becomes "[", so the rest reads as an array. Anything
// unexpected (no cut, a wrong guess, any error) makes the split parse give up; the text, changed
// in place by then, is parsed again from a pristine copy on one thread, which reports errors
// exactly where they are.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include "dlprof/config.hpp"
#include "dlprof/import/detail/json_parser.hpp"
#include "dlprof/import/detail/raw_event.hpp"
#include "dlprof/import/detail/trace_builder.hpp"
#include "dlprof/import/detail/trace_handler.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::json {

/// The head ends with the "}" at `head_end`; the rest starts with the "{" at `rest_start`.
struct SplitPoint {
  std::size_t head_end;
  std::size_t rest_start;
};

inline bool is_json_space(char c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// The first "}" at or after `from` followed by a comma and a "{", with whitespace around the comma
/// (at least one byte of it: the two rewritten bytes must differ). Searched within `window` bytes.
inline std::optional<SplitPoint> find_split(const char* text, std::size_t size, std::size_t from, std::size_t window) {
  const std::size_t last = std::min(size, from + window);
  for (std::size_t at = from; at < last;) {
    const void* brace = std::memchr(text + at, '}', last - at);
    if (brace == nullptr) return std::nullopt;
    const std::size_t head_end = static_cast<std::size_t>(static_cast<const char*>(brace) - text);
    at = head_end + 1;
    std::size_t next = at;
    while (next < size && is_json_space(text[next])) ++next;
    if (next == size || text[next] != ',') continue;
    ++next;
    while (next < size && is_json_space(text[next])) ++next;
    if (next < size && text[next] == '{' && next - head_end >= 3) return SplitPoint{head_end, next};
  }
  return std::nullopt;
}

/// Parses the `size` bytes of JSON at `text` (followed by NUL padding) into `handler` (reading
/// the head) and `builder` (its builder: the rest's events are added to it), the head being about
/// `head_share` of the text. False when the text did not parse this way: it has been changed in
/// place, and `builder` holds part of it; both must be dropped.
inline bool parse_split(char* text, std::size_t size, TraceHandler& handler, TraceBuilder& builder, double head_share) {
  // A cut within the first MiB after the share, or none (a trace whose events are written
  // without spaces, "},{", is read on one thread).
  constexpr std::size_t kWindow = std::size_t{1} << 20;
  const std::optional<SplitPoint> split =
      find_split(text, size, static_cast<std::size_t>(static_cast<double>(size) * head_share), kWindow);
  if (!split) return false;
  text[split->head_end + 1] = '\0';
  const std::size_t rest_open = split->rest_start - 1;
  text[rest_open] = '[';

  RawEventLog rest_events(text);
  rest_events.reserve_for(size - rest_open);
  JsonParseEnd rest_end;
  std::exception_ptr rest_failure;
  // The rest's handler logs events; what else reaches its builder is the events it leaves out
  // and the values it ignores, merged into `builder` once the rest is parsed.
  TraceBuilder rest_builder(builder.strict());
  std::thread rest_thread([&] {
    try {
      TraceHandler rest_handler(rest_builder);
      rest_handler.log_events_to(rest_events);
      rest_end = run_json_parser<rapidjson::kParseStopWhenDoneFlag>(text, rest_open, rest_handler);
    } catch (...) {
      rest_failure = std::current_exception();
    }
  });
  struct Joiner {
    std::thread& thread;
    ~Joiner() { thread.join(); }
  };
  bool head_parsed = false;
  {
    const Joiner joiner{rest_thread};
    try {
      const JsonParseEnd head_end = run_json_parser(text, 0, handler, split->head_end);
      head_parsed = head_end.error == rapidjson::kParseErrorTermination && handler.between_events();
    } catch (const ParseFailure&) {
    }
  }
  if (rest_failure) {
    try {
      std::rethrow_exception(rest_failure);
    } catch (const ParseFailure&) {
      return false;
    }
  }
  if (!head_parsed || rest_end.error != rapidjson::kParseErrorNone) return false;

  // Errors the builder finds in the rest's events are the text's first: everything before them
  // has parsed.
  rest_events.replay([&](const RawEvent& event) { builder.add_event(event); });
  builder.merge_read_result(rest_builder);

  std::size_t at = rest_end.offset;
  const auto skip_space = [&] {
    while (at < size && is_json_space(text[at])) ++at;
  };
  skip_space();
  if (!handler.end_events()) return at == size;  // a bare array of events: nothing may follow
  if (at < size && text[at] == '}') {
    ++at;
    skip_space();
    return at == size;
  }
  if (at == size || text[at] != ',') return false;
  // The object's remaining members, read as an object of their own: ", "k": v}" -> "{ "k": v}".
  const std::size_t tail_open = at;
  ++at;
  skip_space();
  if (at == size || text[at] != '"') return false;
  text[tail_open] = '{';
  const JsonParseEnd tail_end = run_json_parser(text, tail_open, handler);
  return tail_end.error == rapidjson::kParseErrorNone && tail_end.offset == size;
}

}  // namespace detail::json
DLPROF_END_NAMESPACE
