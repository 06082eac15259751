// dlprof/import/detail/chunked_parse.hpp: a trace's JSON text parsed in parts, on two threads,
// from memory or straight from its file. Parsing is most of reading a trace, and one JSON parse
// cannot be shared, so the text is cut between two events of its events array into parts of
// about ReadOptions::parse_chunk_bytes: the calling thread parses the head (the document up to
// the first cut) into the TraceBuilder; both threads then parse the following parts, each into a
// RawEventLog, and the calling thread gives the logs to the builder in order, part by part, and
// parses what follows the events array (Kineto writes "baseTimeNanoseconds" there) last, as a
// document of its own. A text in memory is parsed where it is; read from a file, or inflated
// from gzip data as it goes, a part lives in one of a few buffers, each reused once its log is
// given to the builder, so the memory a read takes grows with the events it keeps, not with the
// size of the text.
//
// A cut is a guess made by looking at bytes ("}", a comma and whitespace, "{"), checked as the
// part is parsed: its parse must close an event at the guessed "}" and be between events there.
// Each part's text is its own: the byte after the "}" becomes NUL, so no parse runs on, and the
// byte before the next part's "{" becomes "[", so that part reads as an array. Anything
// unexpected (a wrong guess, any error, a text the JsonScanner does not read) makes the chunked
// parse give up: the text is then parsed again, whole and pristine, by RapidJSON on one thread,
// which reports errors exactly where they are. The head and the parts are read by the JsonScanner
// (json_scanner.hpp), what follows the events array by RapidJSON.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/import/detail/json_parser.hpp"
#include "dlprof/import/detail/json_scanner.hpp"
#include "dlprof/import/detail/raw_event.hpp"
#include "dlprof/import/detail/trace_builder.hpp"
#include "dlprof/import/detail/trace_file.hpp"
#include "dlprof/import/detail/trace_handler.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

inline bool is_json_space(char c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// The "}" that ends an event and the "{" that starts the next one, at a cut.
struct Cut {
  std::size_t head_end;
  std::size_t rest_start;
};

/// Whether the "}" at `brace` is followed by a comma and a "{" (whitespace around the comma)
/// within `size` bytes, and where that "{" is.
inline std::optional<std::size_t> next_event_after(const char* text, std::size_t size, std::size_t brace) noexcept {
  std::size_t next = brace + 1;
  while (next < size && is_json_space(text[next])) ++next;
  if (next == size || text[next] != ',') return std::nullopt;
  ++next;
  while (next < size && is_json_space(text[next])) ++next;
  if (next == size || text[next] != '{') return std::nullopt;
  return next;
}

/// Whether the 16-byte aligned block that holds the "}" at `head_end` ends before the byte ahead
/// of the "{" at `rest_start` (which becomes "["). RapidJSON's SIMD scans (SSE2, NEON) read
/// whole aligned blocks, up to the one that holds the character they stop at, and never a byte
/// ahead of where they start: a part that ends at such a cut reads nothing of the next part,
/// which another thread rewrites in place, and the NUL after the "}" and the "[" are two bytes.
inline bool scans_stay_apart(const char* text, std::size_t head_end, std::size_t rest_start) noexcept {
  const auto address = [text](std::size_t offset) { return reinterpret_cast<std::uintptr_t>(text + offset); };
  return (address(head_end) | 15u) < address(rest_start - 1);
}

/// The first cut at or after `from`, searched within `window` bytes, whose parts scans_stay_apart:
/// where events are separated by a comma, a newline and indentation, one cut in four.
inline std::optional<Cut> find_cut_after(const char* text, std::size_t size, std::size_t from, std::size_t window) {
  const std::size_t last = std::min(size, from + window);
  for (std::size_t at = from; at < last;) {
    const void* brace = std::memchr(text + at, '}', last - at);
    if (brace == nullptr) return std::nullopt;
    const std::size_t head_end = static_cast<std::size_t>(static_cast<const char*>(brace) - text);
    at = head_end + 1;
    const std::optional<std::size_t> next = next_event_after(text, size, head_end);
    if (next && scans_stay_apart(text, head_end, *next)) return Cut{head_end, *next};
  }
  return std::nullopt;
}

/// The last cut in `size` bytes that starts after `from`: a buffer of a file is cut as late as
/// it can be, and what follows is carried into the next one.
inline std::optional<Cut> find_last_cut(const char* text, std::size_t size, std::size_t from) noexcept {
  std::size_t end = size;
  while (end > from) {
    const void* brace = ::memrchr(text + from, '}', end - from);
    if (brace == nullptr) return std::nullopt;
    const std::size_t head_end = static_cast<std::size_t>(static_cast<const char*>(brace) - text);
    if (const std::optional<std::size_t> next = next_event_after(text, size, head_end)) return Cut{head_end, *next};
    end = head_end;
  }
  return std::nullopt;
}

/// A part of the text: `base[open]` is where its parse starts (the document's start, for the
/// head; the byte before its first "{", which becomes "[", for the others) and `base[end - 1]`
/// the "}" of its last event, followed by a NUL; the last part runs to `end`, the text's end.
/// `base_offset` is the offset of base[0] in the whole text.
struct TextPart {
  char* base = nullptr;
  std::size_t base_offset = 0;
  std::size_t open = 0;
  std::size_t end = 0;
  bool last = false;
  std::size_t buffer = 0;  ///< which of its source's buffers holds it
  /// How far its source had been read when it was handed out, for progress: text bytes, or the
  /// compressed bytes of gzip data inflated as it is read.
  std::uint64_t read_to = 0;
};

/// The parts of a text that is in memory, each parsed where it is: cut where scans_stay_apart, so
/// that no thread reads what another rewrites (in-situ strings, the "[" of a part).
class MemoryParts {
 public:
  MemoryParts(char* text, std::size_t size, std::size_t part_bytes) noexcept : text_(text), size_(size), part_bytes_(part_bytes) {}

  TextPart first() { return part_from(0); }

  std::optional<TextPart> next() {
    if (done_) return std::nullopt;
    return part_from(rest_start_ - 1);
  }

  void release(const TextPart&) noexcept {}

 private:
  // A cut within a MiB after the part's size, or none: the rest is one part (a trace whose
  // events are written without spaces, "},{", is read on one thread).
  static constexpr std::size_t kWindow = std::size_t{1} << 20;

  TextPart part_from(std::size_t open) {
    TextPart part;
    part.base = text_;
    part.open = open;
    const std::size_t from = open + part_bytes_;
    const std::optional<Cut> cut = from < size_ ? find_cut_after(text_, size_, from, kWindow) : std::nullopt;
    if (!cut) {
      part.end = size_;
      part.read_to = part.end;
      part.last = true;
      done_ = true;
      return part;
    }
    part.end = cut->head_end + 1;
    part.read_to = part.end;
    text_[part.end] = '\0';
    rest_start_ = cut->rest_start;
    return part;
  }

  char* text_;
  std::size_t size_;
  std::size_t part_bytes_;
  std::size_t rest_start_ = 0;
  bool done_ = false;
};

/// The parts of a text read as it goes (a file, or gzip data inflated as it is read), into a few
/// buffers as they are handed out: each holds what was carried over from the one before (the
/// start of an event, after the last cut), then about a part's worth of the text.
class StreamParts {
 public:
  /// Reads at most `room` (> 0) bytes into `out`; returns how many, 0 at the end of the text.
  /// Throws FileFailure (a read error, a text beyond ReadOptions::max_json_bytes).
  using Read = std::function<std::size_t(char* out, std::size_t room)>;
  /// How far the source has been read, when that is not the text read (TextPart::read_to).
  using Position = std::function<std::uint64_t()>;

  /// `buffers`: how many parts may be handed out and not yet released. Without `position`, a
  /// part's read_to is where it ends in the text.
  StreamParts(Read read, Position position, std::size_t part_bytes, std::size_t buffers)
      : read_(std::move(read)), position_(std::move(position)), part_bytes_(part_bytes), buffers_(buffers) {
    free_.resize(buffers, true);
  }

  TextPart first() { return read_part(true); }

  std::optional<TextPart> next() {
    if (done_) return std::nullopt;
    return read_part(false);
  }

  void release(const TextPart& part) noexcept { free_[part.buffer] = true; }

 private:
  TextPart read_part(bool first) {
    std::size_t index = 0;
    while (!free_[index]) ++index;  // the caller keeps fewer parts out than there are buffers
    free_[index] = false;
    ByteBuffer& buffer = buffers_[index];
    // Byte 0 of a part after the head is the one before its first "{", which becomes "[".
    const std::size_t start = first ? 0 : 1;
    buffer.resize(0);
    buffer.resize(start + carry_.size());
    if (!carry_.empty()) std::memcpy(buffer.data() + start, carry_.data(), carry_.size());
    const std::uint64_t base_offset = text_offset_ - carry_.size() - start;
    carry_.clear();
    std::size_t searched = start;
    for (;;) {
      fill(buffer, part_bytes_);
      const std::optional<Cut> cut = eof_ ? std::nullopt : find_last_cut(buffer.data(), buffer.size(), searched);
      if (eof_ || cut) {
        TextPart part;
        part.base = buffer.data();
        part.base_offset = static_cast<std::size_t>(base_offset);
        part.open = 0;
        part.buffer = index;
        if (eof_) {
          part.end = buffer.size();
          part.last = true;
          done_ = true;
        } else {
          part.end = cut->head_end + 1;
          carry_.assign(buffer.data() + cut->rest_start, buffer.size() - cut->rest_start);
          buffer.resize(part.end);
        }
        part.read_to = position_ ? position_() : part.base_offset + part.end;
        buffer.terminate();
        return part;
      }
      // No cut yet (an event, or a document's head, longer than a part): read on. A cut whose
      // "}" is among the last bytes searched may end in what comes next.
      constexpr std::size_t kOverlap = 4096;
      searched = std::max(start, buffer.size() > kOverlap ? buffer.size() - kOverlap : 0);
      fill(buffer, buffer.size() + std::max(buffer.size(), kOverlap));
    }
  }

  /// Reads until `buffer` holds `size` bytes or the text ends. The buffer grows with what is
  /// read, at most doubling, so that a part of any size (UINT64_MAX: the whole text in one)
  /// takes the memory of the text there is, not of the size asked for.
  void fill(ByteBuffer& buffer, std::size_t size) {
    constexpr std::size_t kFirstRead = std::size_t{4} << 20;
    while (!eof_ && buffer.size() < size) {
      const std::size_t room = std::min(size - buffer.size(), std::max(buffer.size(), kFirstRead));
      buffer.reserve(buffer.size() + room + ByteBuffer::kPadding);
      const std::size_t count = read_(buffer.data() + buffer.size(), room);
      if (count == 0) {
        eof_ = true;
        break;
      }
      buffer.resize(buffer.size() + count);
      text_offset_ += count;
    }
  }

  Read read_;
  Position position_;
  std::size_t part_bytes_;
  std::vector<ByteBuffer> buffers_;
  std::vector<bool> free_;
  std::string carry_;
  std::uint64_t text_offset_ = 0;  ///< of the text read so far
  bool eof_ = false;
  bool done_ = false;
};

/// Parses the rest of a document at `at` in `text` (`size` bytes), once its events array has
/// been read: nothing, "}" or the object's remaining members, read as an object of their own
/// (", "k": v}" -> "{ "k": v}"). Whether it parsed to the end.
inline bool parse_after_events(char* text, std::size_t at, std::size_t size, TraceHandler& handler, std::size_t base_offset) {
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
  const std::size_t tail_open = at;
  ++at;
  skip_space();
  if (at == size || text[at] != '"') return false;
  text[tail_open] = '{';
  const JsonParseEnd tail_end = run_json_parser(text, tail_open, handler, SIZE_MAX, base_offset);
  return tail_end.error == rapidjson::kParseErrorNone && tail_end.offset == size;
}

/// Parses `source`'s parts (`total_bytes` in all, in the units of TextPart::read_to) into
/// `handler` (the head, the part after the events array) and its `builder` (every event, in order)
/// on this thread and one more. False when the text did not parse this way (a cut guessed wrong,
/// an event too long to log, or an error): what was read must be dropped and the text parsed again
/// on one thread. Throws ParseFailure for an error in the events the builder is given or after the
/// events array, which the text's first error then is, and the source's FileFailure.
/// `parsed(read_to)` is called as the parts up to one read to `read_to` have been read.
template <class Parts>
bool parse_in_parts(Parts& source, std::uint64_t total_bytes, TraceHandler& handler, TraceBuilder& builder,
                    std::size_t max_parts_out, const std::function<void(std::size_t)>& parsed) {
  TextPart head = source.first();
  if (head.last) {  // one part: the whole document
    const JsonParseEnd end = run_json_parser(head.base, 0, handler, SIZE_MAX, head.base_offset);
    check_json_end(end, head.base, head.end);
    if (parsed) parsed(head.read_to);
    return true;
  }

  struct Slot {
    TextPart part;
    RawEventLog* log = nullptr;
    bool parsed = false;
    bool ok = false;
    std::size_t after_events = 0;  ///< the last part: where its events array ended
  };
  std::deque<Slot> slots;  // every part after the head, in order; elements never move
  std::vector<std::unique_ptr<RawEventLog>> logs;  // as many as parts are out at once
  std::vector<RawEventLog*> free_logs;
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t claimed = 0;
  std::size_t given = 0;  ///< parts whose logs the builder has had
  bool all_claimed = false;
  bool failed = false;
  std::exception_ptr failure;  ///< a file problem while reading parts

  // The next part for a thread to parse, or none (all claimed, too many out, or a failure).
  const auto claim = [&]() -> Slot* {
    if (failed || all_claimed || claimed - given >= max_parts_out) return nullptr;
    std::optional<TextPart> part;
    try {
      part = source.next();
    } catch (...) {
      failure = std::current_exception();
      failed = true;
      changed.notify_all();
      return nullptr;
    }
    if (!part) {
      all_claimed = true;
      changed.notify_all();
      return nullptr;
    }
    Slot& slot = slots.emplace_back();
    slot.part = *part;
    if (free_logs.empty()) free_logs.push_back(logs.emplace_back(std::make_unique<RawEventLog>()).get());
    slot.log = free_logs.back();
    free_logs.pop_back();
    ++claimed;
    return &slot;
  };
  // Each thread's handler reports the events it leaves out and the values it ignores to its own
  // builder, merged into `builder` at the end.
  TraceBuilder worker_problems(builder.strict());
  TraceBuilder main_problems(builder.strict());
  const auto parse_slot = [&](Slot& slot, TraceBuilder& problems) {
    const TextPart& part = slot.part;
    slot.log->reset(part.base, part.base_offset);
    slot.log->reserve_for(part.end - part.open);
    bool ok = false;
    try {
      part.base[part.open] = '[';
      TraceHandler rest_handler(problems);
      rest_handler.log_events_to(*slot.log);
      if (part.last) {
        const ScanResult end = scan_json(part.base, part.open, rest_handler, SIZE_MAX, part.base_offset);
        ok = end.end == ScanEnd::Done;
        slot.after_events = end.offset;
      } else {
        const ScanResult end = scan_json(part.base, part.open, rest_handler, part.end - 1, part.base_offset);
        ok = end.end == ScanEnd::Stopped && rest_handler.between_events();
      }
      ok = ok && !slot.log->overflowed();
    } catch (const ParseFailure&) {
    }
    const std::lock_guard<std::mutex> lock(mutex);
    slot.parsed = true;
    slot.ok = ok;
    failed = failed || !ok;
    changed.notify_all();
  };

  std::thread worker([&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return failed || all_claimed || claimed - given < max_parts_out; });
      Slot* slot = claim();
      if (slot == nullptr) {
        if (failed || all_claimed) return;
        continue;
      }
      lock.unlock();
      parse_slot(*slot, worker_problems);
      lock.lock();
    }
  });
  struct Stopper {
    std::thread& thread;
    std::mutex& mutex;
    std::condition_variable& changed;
    bool& failed;
    ~Stopper() {
      {
        const std::lock_guard<std::mutex> lock(mutex);
        failed = true;
        changed.notify_all();
      }
      thread.join();
    }
  };
  bool read_all = false;
  Slot* last = nullptr;
  {
    const Stopper stopper{worker, mutex, changed, failed};
    const ScanResult head_end = scan_json(head.base, head.open, handler, head.end - 1, head.base_offset);
    if (head_end.end != ScanEnd::Stopped || !handler.between_events()) return false;
    builder.expect_more(head.read_to, total_bytes);
    if (parsed) parsed(head.read_to);
    {
      const std::lock_guard<std::mutex> lock(mutex);
      source.release(head);
      changed.notify_all();
    }
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      // The builder takes the parts parsed so far, in order; the logs go back for reuse.
      while (given < claimed && slots[given].parsed && !failed) {
        Slot& slot = slots[given];
        lock.unlock();
        slot.log->replay([&](const RawEvent& event) { builder.add_event(event); });
        builder.expect_more(slot.part.read_to, total_bytes);
        if (parsed) parsed(slot.part.read_to);
        lock.lock();
        if (slot.part.last) {
          last = &slot;
        } else {
          source.release(slot.part);
        }
        free_logs.push_back(slot.log);
        slot.log = nullptr;
        ++given;
        changed.notify_all();
      }
      if (failed) break;
      if (all_claimed && given == claimed) {
        read_all = true;
        break;
      }
      if (Slot* slot = claim()) {
        lock.unlock();
        parse_slot(*slot, main_problems);
        lock.lock();
        continue;
      }
      if (failed) break;
      changed.wait(lock, [&] {
        return failed || (given < claimed && slots[given].parsed) || (!all_claimed && claimed - given < max_parts_out) ||
               (all_claimed && given == claimed);
      });
    }
  }
  if (failure) std::rethrow_exception(failure);
  if (!read_all || last == nullptr) return false;
  builder.merge_read_result(worker_problems);
  builder.merge_read_result(main_problems);
  return parse_after_events(last->part.base, last->after_events, last->part.end, handler, last->part.base_offset);
}

}  // namespace detail::reader
DLPROF_END_NAMESPACE
