// dlprof/import/chrome_trace.hpp: reads Chrome-trace JSON written by dlprof or by
// torch.profiler/Kineto (any era of docs/trace-format.md) back into a dlprof::Trace, so the
// analyses that run in-process run offline on anyone's traces. Needs the dlprof::import target
// (RapidJSON and zlib).
//
// \code{.cpp}
// #include <dlprof/import/chrome_trace.hpp>
//
// dlprof::Trace trace = dlprof::read_trace("log/run/host_1234.1716423322123456789.pt.trace.json.gz");
// std::vector<dlprof::Trace> ranks = dlprof::read_trace_set({"log/run"});   // one per rank
// std::vector<std::vector<dlprof::Trace>> windows = dlprof::read_trace_windows({"log/run"});
// \endcode
//
// What is read. Files: JSON or gzip-compressed JSON (recognised by its magic bytes), a top-level
// object with "traceEvents" or a bare array of events (an object without "traceEvents" reads as
// an empty trace with ReadResult::has_trace_events false). Times: ts/dur in microseconds, integers
// (absolute, before 2024) or decimals (relative to "baseTimeNanoseconds" since 2024, or absolute
// with sub-µs digits), read exactly into int64 nanoseconds from the number's text: three
// decimals exactly, rounded half away from zero beyond.
//
// The mapping into Trace (the analyses rely on it):
//  * "X" cpu_op / Operator -> TraceEvent kind Op. args "External id" (or "external id"),
//    "Sequence number", "Fwd thread id" -> external_id, sequence_number, forward_thread_id.
//    Category Backward for an op that is an autograd node (name matching `Backward\d*$`) or
//    autograd's frame around one (`autograd::engine::evaluate_function...`), and for every op
//    nested in one (same thread, time containment, ranges in between included); User otherwise.
//  * "X" user_annotation, cpu_instant_event -> kind Range; python_function -> kind PythonFrame;
//    category from the name: DataLoader ("enumerate(DataLoader)#", "enumerate(DataPipe)#"),
//    Optimizer ("Optimizer."), Communication ("nccl:", "gloo:"), Forward ("nn.Module:"), User
//    otherwise.
//    Any CPU slice named `^ProfilerStep#\d+` (Operator in old traces) -> kind Step, category
//    Step, the name kept ("ProfilerStep#101").
//  * On any CPU slice: "Input Dims" (or "Input dims"), "Input type", "Concrete Inputs" -> an
//    OpInputs entry: each arg's JSON re-written compactly as torch writes it ("[[4, 8], [8, 8]]",
//    ", " between elements, ": " after keys) into Trace::names, an empty text where absent;
//    "flops" -> OpInputs::flops (bytes stay 0). Slices of one name with equal inputs share one.
//    "stream" other than -1 (torch.compile's Triton launch ops) -> a CpuSliceOnStream too.
//  * "X" cuda_runtime / Runtime / cuda_driver -> ApiEvent (driver for cuda_driver): cbid,
//    correlation, External id; on the calling CPU thread.
//  * "X" kernel / Kernel, gpu_memcpy / Memcpy, gpu_memset / Memset, cuda_sync,
//    gpu_user_annotation -> GpuEvent Kernel, Memcpy (MemcpyPeer for PtoP or fromDevice/toDevice
//    args), Memset, Sync, Annotation. device: args "device" (peer copies: "inDevice"), else pid;
//    stream: args "stream", else XPU's "sycl queue", else, for gpu_user_annotation and the
//    string tids of old traces ("stream 7" -> 7), the tid, else -1 (no stream, as HTA reads it:
//    MTIA's dma_request copies sit on a thread's row); syncs: args "stream" only, -1 when
//    absent; (uint32)-1 is -1. correlation, External id, context. Kernels: grid, block,
//    "registers per thread", "shared memory" (into static_shared_memory; dynamic is 0),
//    queued (µs -> queued_ns), "blocks per SM" and "warps per SM" ("inf" accepted),
//    "est. achieved occupancy %" (-99, Kineto's unknown, where absent, as in ROCm's traces).
//    Copies and fills: bytes; copy_kind, source_kind and
//    destination_kind (CUPTI's enum values) from the name, "Memcpy HtoD (Pageable -> Device)",
//    "Memset (Device)"; peer copies' fromDevice/toDevice/fromContext/toContext. Syncs: name kept,
//    type from "cuda_sync_kind" (Event Sync 1, Stream Wait Event 2, Stream Sync 3, Context Sync
//    4), cuda_event_id from "wait_on_cuda_event_id".
//  * "X" overhead -> OverheadEvent. "X" Trace (Kineto's span of the window) -> the window only.
//  * "i" [memory] -> MemoryEvent ("Device Type", "Device Id", "Addr", "Bytes", "Total
//    Allocated", "Total Reserved"); other "i" on a numeric pid -> Instant; Kineto's own marks on
//    string pids ("Iteration Start: ...", "Record Window End") -> the window only. "C" -> one
//    Counter event per numeric arg (the strings "NaN", "Infinity" and "-Infinity" are numbers,
//    as dlprof writes them), named like the counter for the arg "value" (dlprof's), else
//    "<name> <arg>".
//  * "M" process_name / thread_name -> Trace::process_name and ThreadInfo::name ("thread 7
//    (name)" -> "name"). Flows ("s"/"f": ac2g is carried by correlation, fwdbwd by sequence
//    numbers), other phases, unknown categories and unknown args are ignored.
//  * Threads: one ThreadInfo per CPU (pid, tid) with events, os_tid = tid, plus threads of the
//    process named by metadata only; in order of first mention. A string tid names its thread.
//    Trace::pid: the pid most CPU events carry.
//  * window_start_ns / window_end_ns: the earliest start and latest end of every event read,
//    the Trace span, metadata and Kineto's marks included. file_time_base_ns: what the file's ts
//    count from (baseTimeNanoseconds; 0 for absolute µs).
//  * distributedInfo -> Trace::distributed (backend, rank, world_size; rank 0 of 1 when absent,
//    as HTA assumes; a negative rank or a world size below 1 is not used, but kept in the
//    metadata with a note); deviceProperties -> Trace::devices; dlprof's own keys
//    (dlprof_dropped_events, dlprof_clock, dlprof_gpu_*, cupti_version, ...) -> their fields
//    (gpu.enabled also when the file has GPU work or API calls); every other top-level key
//    except schemaVersion, displayTimeUnit, baseTimeNanoseconds, traceName and dlprof_version ->
//    Trace::metadata as compact JSON text.
//  * Order: as trace.hpp promises. Events by thread, start, longer first (a step before a range
//    of equal extent), then file order; GPU work by device, stream, start; API calls by thread,
//    start; memory events by time. Slices are not clipped: a trace whose slices overlap
//    partially keeps them so (clipped_ranges is what the file says).
//
// Devices: CUDA; ROCm (Kineto writes HIP calls and kernels under the CUDA categories); XPU
// (xpu_runtime, xpu_driver); MTIA (mtia_runtime; mtia_ccp_events -> Kernel, its copies being
// "dma..." kernels); PrivateUse1 backends (privateuse1_runtime, privateuse1_driver), grouped as
// Holistic Trace Analysis 0.6 groups them. A slice of a category the reader does not know that
// names kernels, copies or fills, or that sits on a "stream", is device work of a device it does
// not know: a Kernel (Memcpy, Memset), with one note per category in Trace::read_result.
//
// Errors. A trace is refused, with a TraceReadError naming the file and, for JSON problems, the
// byte offset, line and column, when it is not one: a missing file, corrupt or truncated gzip, bad
// JSON, a document that is not an object or array, "traceEvents" that is not an array, nesting
// deeper than 256 levels, a string or number of 4 GiB or more, more than
// ReadOptions::max_json_bytes, a base time that pushes an event beyond 2^62 ns (the year 2116), or
// no usable event where some were left out (the first one's reason). Everything else is read
// leniently, as traces from every PyTorch version and device need, and said in Trace::read_result:
// an event whose ph, ts, dur, pid, tid or name is unusable (not a number, negative, out of range,
// an object, ...) is left out and counted, the first with its reason and byte offset; an arg of an
// unexpected type is left out of its event and counted; a top-level, deviceProperties or
// distributedInfo value of an unexpected type is kept as JSON text in Trace::metadata
// ("deviceProperties[0].numSms") with a note; a number where text is expected is its text
// ("cupti_version": 28) and a string holding a number where a number is expected is that number.
// ReadOptions::strict refuses all of those instead (the first one found), and clamps a negative dur
// at 0 as Kineto does.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"
#include "dlprof/format/launch_protocol.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/import/crash_dump.hpp"
#include "dlprof/import/detail/chunked_parse.hpp"
#include "dlprof/import/detail/json_parser.hpp"
#include "dlprof/import/detail/trace_builder.hpp"
#include "dlprof/import/detail/trace_file.hpp"
#include "dlprof/import/detail/trace_handler.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// A file that could not be read as a trace. what(): "dlprof: cannot read trace '<file>': <reason>",
/// with " at byte <offset> (line <l>, column <c>)" before the reason for problems in the JSON text
/// (offsets count bytes of the decompressed text; lines and columns from 1).
class TraceReadError : public std::runtime_error {
 public:
  TraceReadError(std::string source, std::string reason)
      : std::runtime_error(fmt::format("dlprof: cannot read trace '{}': {}", source, reason)),
        source_(std::move(source)),
        reason_(std::move(reason)) {}

  TraceReadError(std::string source, std::string reason, std::size_t offset, std::optional<std::size_t> line,
                 std::optional<std::size_t> column)
      : std::runtime_error(
            line ? fmt::format("dlprof: cannot read trace '{}' at byte {} (line {}, column {}): {}", source, offset, *line,
                               column.value_or(0), reason)
                 : fmt::format("dlprof: cannot read trace '{}' at byte {}: {}", source, offset, reason)),
        source_(std::move(source)),
        reason_(std::move(reason)),
        offset_(offset),
        line_(line),
        column_(column) {}

  const std::string& source() const noexcept { return source_; }
  const std::string& reason() const noexcept { return reason_; }
  /// Byte offset in the (decompressed) JSON text, for problems in it.
  std::optional<std::size_t> offset() const noexcept { return offset_; }
  std::optional<std::size_t> line() const noexcept { return line_; }
  std::optional<std::size_t> column() const noexcept { return column_; }

 private:
  std::string source_;
  std::string reason_;
  std::optional<std::size_t> offset_;
  std::optional<std::size_t> line_;
  std::optional<std::size_t> column_;
};

/// How far a long load has got: given to ReadOptions::progress.
struct ReadProgress {
  enum class Stage : std::uint8_t { Decompressing, Parsing };
  std::string_view source;        ///< the file
  std::size_t file_index = 0;     ///< read_trace_set: which file, from 0
  std::size_t file_count = 1;     ///< and of how many
  Stage stage = Stage::Parsing;
  std::uint64_t bytes_done = 0;   ///< compressed bytes inflated, or JSON bytes parsed
  std::uint64_t bytes_total = 0;  ///< of that many
};

namespace detail::reader {

/// ReadOptions::max_json_bytes's default: half the machine's physical memory, and at least 4 GiB.
inline std::uint64_t default_max_json_bytes() noexcept {
  static const std::uint64_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_bytes = ::sysconf(_SC_PAGESIZE);
    const std::uint64_t half =
        pages > 0 && page_bytes > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_bytes) / 2 : 0;
    return std::max(half, std::uint64_t{1} << 32);
  }();
  return bytes;
}

}  // namespace detail::reader

struct ReadOptions {
  /// Called from the reading thread every few thousand events, every 16 MiB of data inflated
  /// whole and every part of a text inflated part by part (Decompressing: compressed bytes), and
  /// once per file when it is parsed (Parsing, bytes_done == bytes_total). Keep it cheap.
  std::function<void(const ReadProgress&)> progress;
  /// Largest JSON text accepted (file or decompressed data): a gzip bomb or a runaway file is
  /// refused with an error instead of filling memory. Some texts are held whole in memory (the
  /// text of a gzip member under 4 GiB, a text read again to place an error's line and column),
  /// so the default is half the machine's physical memory, and at least 4 GiB.
  std::uint64_t max_json_bytes = detail::reader::default_max_json_bytes();
  /// A JSON text is parsed in parts of about this many bytes, cut between two events, on two
  /// threads (what the trace holds is the same); a file that is not gzip, and gzip data whose text
  /// is not the size its trailer announces (several members, or a text of 4 GiB or more), is read
  /// part by part, so its text is never in memory whole. UINT64_MAX: one part, on one thread.
  std::uint64_t parse_part_bytes = std::uint64_t{1} << 20;
  /// Refuse every value of an unexpected type and every unusable event (TraceReadError naming
  /// the first), instead of leaving them out and saying so in Trace::read_result.
  bool strict = false;
};

namespace detail::reader {

/// Line and column (from 1, in bytes) of `offset` in `text`.
inline std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t offset) noexcept {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset;) {  // memchr must not see the null data of an empty text
    const void* newline = std::memchr(text.data() + i, '\n', offset - i);
    if (newline == nullptr) break;
    i = static_cast<std::size_t>(static_cast<const char*>(newline) - text.data()) + 1;
    ++line;
    line_start = i;
  }
  return {line, offset - line_start + 1};
}

/// Reads text of `bytes_total` bytes into a Trace: `parse(handler, builder, parsed)` feeds it to
/// the handler, and says whether it could (nothing when not); `parsed(done)` reports progress.
/// `stage` Decompressing: the text is inflated as it is parsed, and `bytes_total` and `parsed`
/// count compressed bytes (the handler's offsets in the text say nothing of them). `pristine` gives
/// the text again, unmodified, for line and column numbers of an error (in-situ parsing rewrites
/// strings).
template <class Parse>
std::optional<Trace> build_trace(const std::string& source, const ReadOptions& options, std::size_t file_index,
                                 std::size_t file_count, std::uint64_t bytes_total, ReadProgress::Stage stage,
                                 const std::function<std::optional<ByteBuffer>()>& pristine, Parse&& parse) {
  ReadProgress progress;
  progress.source = source;
  progress.file_index = file_index;
  progress.file_count = file_count;
  progress.stage = stage;
  progress.bytes_total = bytes_total;
  try {
    TraceBuilder builder(options.strict);
    std::function<void(std::size_t)> on_events;
    if (options.progress) {
      on_events = [&](std::size_t done) {
        progress.bytes_done = done;
        options.progress(progress);
      };
    }
    TraceHandler handler(builder, stage == ReadProgress::Stage::Parsing ? on_events : nullptr);
    if (!parse(handler, builder, on_events)) return std::nullopt;
    Trace trace = builder.finish();
    if (options.progress) {
      progress.stage = ReadProgress::Stage::Parsing;
      progress.bytes_done = progress.bytes_total;
      options.progress(progress);
    }
    return trace;
  } catch (const ParseFailure& failure) {
    std::optional<ByteBuffer> original = pristine();
    if (!original) throw TraceReadError(source, failure.message, failure.offset, std::nullopt, std::nullopt);
    const auto [line, column] = line_and_column(std::string_view(original->data(), original->size()), failure.offset);
    throw TraceReadError(source, failure.message, failure.offset, line, column);
  }
}

/// Parts of a text handed out and not yet given to the builder: enough for both threads to
/// parse while the builder takes one.
inline constexpr std::size_t kPartsOut = 4;

inline std::size_t part_bytes(const ReadOptions& options) noexcept {
  return static_cast<std::size_t>(std::min<std::uint64_t>(std::max<std::uint64_t>(options.parse_part_bytes, 1), SIZE_MAX / 4));
}

/// Parses the JSON in `text` (consumed: parsed in place) into a Trace, whole, on one thread: what
/// reports an error exactly where it is.
inline Trace parse_whole(ByteBuffer text, const std::string& source, const ReadOptions& options, std::size_t file_index,
                         std::size_t file_count, const std::function<std::optional<ByteBuffer>()>& pristine) {
  text.terminate();
  return *build_trace(source, options, file_index, file_count, text.size(), ReadProgress::Stage::Parsing, pristine,
                      [&](TraceHandler& handler, TraceBuilder&, const std::function<void(std::size_t)>&) {
                        parse_json_in_place(text.data(), text.size(), handler);
                        return true;
                      });
}

/// The text `pristine` gives again, for a read that did not go as planned.
inline ByteBuffer text_again(const std::function<std::optional<ByteBuffer>()>& pristine) {
  std::optional<ByteBuffer> again = pristine();
  if (!again) fail_file("the file changed while it was read");
  return std::move(*again);
}

/// Parses the JSON in `text` (consumed: parsed in place) into a Trace, in parts on two threads
/// (chunked_parse.hpp), or, when that does not go as planned, whole on one.
inline Trace parse_text(ByteBuffer text, const std::string& source, const ReadOptions& options, std::size_t file_index,
                        std::size_t file_count, const std::function<std::optional<ByteBuffer>()>& pristine) {
  if (text.size() <= options.parse_part_bytes)
    return parse_whole(std::move(text), source, options, file_index, file_count, pristine);
  text.terminate();
  std::optional<Trace> trace = build_trace(
      source, options, file_index, file_count, text.size(), ReadProgress::Stage::Parsing, pristine,
      [&](TraceHandler& handler, TraceBuilder& builder, const std::function<void(std::size_t)>& parsed) {
        MemoryParts parts(text.data(), text.size(), part_bytes(options));
        return parse_in_parts(parts, text.size(), handler, builder, kPartsOut, parsed);
      });
  if (trace) return std::move(*trace);
  return parse_whole(text_again(pristine), source, options, file_index, file_count, pristine);
}

/// Gzip data whose text is not inflated whole (inflate_as_announced), inflated part by part as it
/// is parsed (chunked_parse.hpp); nothing when that did not go as planned and the text must be
/// parsed whole.
inline std::optional<Trace> read_gzip_in_parts(std::string_view compressed, const std::string& source,
                                               const ReadOptions& options, std::size_t file_index, std::size_t file_count,
                                               const std::function<std::optional<ByteBuffer>()>& pristine) {
  return build_trace(
      source, options, file_index, file_count, compressed.size(), ReadProgress::Stage::Decompressing, pristine,
      [&](TraceHandler& handler, TraceBuilder& builder, const std::function<void(std::size_t)>& parsed) {
        GzipInflater inflater(compressed);
        std::uint64_t inflated = 0;
        const auto read = [&](char* out, std::size_t room) {
          std::size_t written = 0;
          while (written == 0 && !inflater.finished()) written = inflater.inflate_into(out, room);
          inflated += written;
          if (inflated > options.max_json_bytes)
            fail_file(fmt::format("the gzip data decompresses to more than {} bytes (ReadOptions::max_json_bytes)",
                                  options.max_json_bytes));
          return written;
        };
        // The head, the parts out, and the last part, kept until what follows its events is read.
        StreamParts parts(read, [&] { return std::uint64_t{inflater.consumed()}; }, part_bytes(options), kPartsOut + 2);
        return parse_in_parts(parts, compressed.size(), handler, builder, kPartsOut, parsed);
      });
}

inline ByteBuffer copy_bytes(std::string_view bytes) {
  ByteBuffer buffer;
  buffer.resize(bytes.size());
  if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());
  return buffer;
}

/// ReadOptions::progress for inflating: compressed bytes done, of how many.
inline ByteProgress inflation_progress(const std::string& source, const ReadOptions& options, std::size_t file_index,
                                       std::size_t file_count) {
  if (!options.progress) return nullptr;
  return [&options, &source, file_index, file_count](std::uint64_t done, std::uint64_t total) {
    ReadProgress progress;
    progress.source = source;
    progress.file_index = file_index;
    progress.file_count = file_count;
    progress.stage = ReadProgress::Stage::Decompressing;
    progress.bytes_done = done;
    progress.bytes_total = total;
    options.progress(progress);
  };
}

/// The JSON text of a file's bytes, whole: inflated when they are gzip.
inline ByteBuffer json_text(ByteBuffer bytes, std::uint64_t limit) {
  if (!is_gzip(std::string_view(bytes.data(), bytes.size()))) return bytes;
  return gunzip(std::string_view(bytes.data(), bytes.size()), limit);
}

/// The Trace of a file's bytes or of bytes in memory, which `bytes_of()` gives (again, for an
/// error's line and column).
template <class Bytes>
Trace read_bytes(const std::string& source, const ReadOptions& options, std::size_t file_index, std::size_t file_count,
                 Bytes&& bytes_of) {
  const auto reread = [&]() -> std::optional<ByteBuffer> {
    try {
      return json_text(bytes_of(), options.max_json_bytes);
    } catch (const FileFailure&) {
      return std::nullopt;  // changed or gone since: the error keeps its offset
    }
  };
  try {
    ByteBuffer bytes = bytes_of();
    const std::string_view compressed(bytes.data(), bytes.size());
    if (!is_gzip(compressed)) return parse_text(std::move(bytes), source, options, file_index, file_count, reread);
    std::optional<ByteBuffer> text = inflate_as_announced(compressed, options.max_json_bytes,
                                                          inflation_progress(source, options, file_index, file_count));
    if (text) {
      bytes = ByteBuffer();  // the compressed bytes: no longer needed
      return parse_text(std::move(*text), source, options, file_index, file_count, reread);
    }
    if (std::optional<Trace> trace = read_gzip_in_parts(compressed, source, options, file_index, file_count, reread))
      return std::move(*trace);
    // Inflated whole, where the parse in parts may have given up before the data's own error (a
    // CRC-32 that does not match): that error is the read's.
    return parse_whole(json_text(bytes_of(), options.max_json_bytes), source, options, file_index, file_count, reread);
  } catch (const FileFailure& failure) {
    throw TraceReadError(source, failure.message);
  }
}

/// A file that is not gzip, read part by part (chunked_parse.hpp); nothing when that did not go as
/// planned and the file must be read whole.
inline std::optional<Trace> read_in_parts(int fd, std::uint64_t file_bytes, const std::string& path, const ReadOptions& options,
                                          std::size_t file_index, std::size_t file_count) {
  const auto pristine = [&]() -> std::optional<ByteBuffer> {
    try {
      return read_file(path, options.max_json_bytes);
    } catch (const FileFailure&) {
      return std::nullopt;  // changed or gone since: the error keeps its offset
    }
  };
  return build_trace(path, options, file_index, file_count, file_bytes, ReadProgress::Stage::Parsing, pristine,
                     [&](TraceHandler& handler, TraceBuilder& builder, const std::function<void(std::size_t)>& parsed) {
                       std::uint64_t file_offset = 0;
                       const auto read = [&](char* out, std::size_t room) {
                         for (;;) {
                           const ssize_t count = ::read(fd, out, room);
                           if (count < 0 && errno == EINTR) continue;
                           if (count < 0) fail_file(std::strerror(errno));
                           file_offset += static_cast<std::uint64_t>(count);
                           if (file_offset > options.max_json_bytes)
                             fail_file(fmt::format("the file has more than {} bytes (ReadOptions::max_json_bytes)",
                                                   options.max_json_bytes));
                           return static_cast<std::size_t>(count);
                         }
                       };
                       // The head, the parts out, and the last part, kept until what follows its events is read.
                       StreamParts parts(read, nullptr, part_bytes(options), kPartsOut + 2);
                       return parse_in_parts(parts, file_bytes, handler, builder, kPartsOut, parsed);
                     });
}

inline Trace read_one(const std::string& path, const ReadOptions& options, std::size_t file_index, std::size_t file_count) {
  try {
    const OpenFile file(path, options.max_json_bytes);
    char magic[sizeof(kCrashMagic)] = {};
    if (file.regular() && ::pread(file.fd(), magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) &&
        has_crash_magic(std::string_view(magic, sizeof(magic)))) {
      const ByteBuffer bytes = read_file(path, options.max_json_bytes);
      std::string problem;
      std::optional<Trace> trace = crash_dump_trace(std::string_view(bytes.data(), bytes.size()), problem);
      if (!trace) throw TraceReadError(path, problem);
      return std::move(*trace);
    }
    if (file.regular() && ::pread(file.fd(), magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) &&
        has_flight_log_magic(std::string_view(magic, sizeof(magic)))) {
      std::string problem;
      std::optional<Trace> trace = flight_log_trace(file.fd(), file.size(), problem);
      if (!trace) throw TraceReadError(path, problem);
      return std::move(*trace);
    }
    if (file.regular() && file.size() > options.parse_part_bytes && ::pread(file.fd(), magic, 2, 0) == 2 &&
        !is_gzip(std::string_view(magic, 2))) {
      if (std::optional<Trace> trace = read_in_parts(file.fd(), file.size(), path, options, file_index, file_count))
        return std::move(*trace);
    }
  } catch (const FileFailure& failure) {
    throw TraceReadError(path, failure.message);
  }
  return read_bytes(path, options, file_index, file_count, [&] { return read_file(path, options.max_json_bytes); });
}

}  // namespace detail::reader

/// Reads one trace file (JSON or gzip-compressed JSON, whatever its name). Throws TraceReadError.
inline Trace read_trace(const std::string& path, const ReadOptions& options = {}) {
  return detail::reader::read_one(path, options, 0, 1);
}

/// Reads a trace from memory: JSON text, or gzip-compressed JSON. `source_name` names it in
/// errors and progress. Throws TraceReadError.
inline Trace parse_trace(std::string_view json, std::string_view source_name, const ReadOptions& options = {}) {
  using namespace detail::reader;
  return read_bytes(std::string(source_name), options, 0, 1, [&] {
    if (json.size() > options.max_json_bytes)
      fail_file(fmt::format("the text has {} bytes, more than the limit of {} (ReadOptions::max_json_bytes)", json.size(),
                            options.max_json_bytes));
    return copy_bytes(json);
  });
}

namespace detail::reader {

/// A file of a trace set: named on its own, or found in a named directory.
struct TraceSetFile {
  std::string path;
  bool in_directory = false;
};

inline std::vector<TraceSetFile> trace_set_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<TraceSetFile> files;
  for (const std::string& path : paths) {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) throw TraceReadError(path, std::strerror(ENOENT));
    if (error) throw TraceReadError(path, error.message());
    if (!fs::is_directory(status)) {
      files.push_back({path, false});
      continue;
    }
    std::vector<std::string> found;
    for (fs::directory_iterator entry(path, error), end; !error && entry != end; entry.increment(error)) {
      std::error_code entry_error;
      const std::string name = entry->path().filename().string();
      if ((detail::is_trace_file_name(name) || detail::is_flight_log_file_name(name)) && !entry->is_directory(entry_error))
        found.push_back(entry->path().string());
    }
    if (error) throw TraceReadError(path, error.message());
    if (found.empty())
      throw TraceReadError(path, "no trace files (*.json, *.gz, *.dlprof-crash, *.dlprof-flight) in the directory");
    std::sort(found.begin(), found.end());
    for (std::string& file : found) files.push_back({std::move(file), true});
  }
  return files;
}

}  // namespace detail::reader

/// The files read_trace_set() reads for `paths`, in its order: each file named, and each named
/// directory's files ending in ".json" or ".gz" (sorted; not its subdirectories). Throws
/// TraceReadError as read_trace_set() does for a path that does not exist and a directory with
/// no such file.
inline std::vector<std::string> trace_set_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (detail::reader::TraceSetFile& file : detail::reader::trace_set_files(paths)) files.push_back(std::move(file.path));
  return files;
}

/// One recording window of a run as read_trace_windows(paths, options, summarize) gives it: what
/// `summarize` kept of each rank's trace, by rank, and what the reader noted about the window (a
/// rank it lacks, a file it left out).
template <class Summary>
struct TraceWindow {
  std::vector<Summary> ranks;
  std::vector<std::string> notes;
};

/// read_trace_windows() for runs too large to hold: each trace is handed to `summarize` as soon as
/// it is read and only what that returns is kept, so that the memory holds one trace at a time and
/// every rank's summary. The windows and the errors are read_trace_windows()'s; its notes are each
/// window's `notes`.
template <class Summarize>
std::vector<TraceWindow<std::invoke_result_t<Summarize&, Trace&&>>> read_trace_windows(const std::vector<std::string>& paths,
                                                                                       const ReadOptions& options,
                                                                                       Summarize&& summarize) {
  using Summary = std::invoke_result_t<Summarize&, Trace&&>;
  const std::vector<detail::reader::TraceSetFile> files = detail::reader::trace_set_files(paths);
  // What windowing reads of a trace, kept beside its summary.
  struct FileTrace {
    std::int64_t rank;
    std::int64_t start_ns;
    std::int64_t end_ns;
    std::size_t file;
    Summary summary;
  };
  std::vector<FileTrace> traces;
  std::vector<std::string> left_out;
  std::vector<TraceReadError> unreadable;  // a directory's files a lenient read goes on without
  traces.reserve(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    Trace trace;
    try {
      trace = detail::reader::read_one(files[i].path, options, i, files.size());
    } catch (const TraceReadError& error) {
      if (options.strict || !files[i].in_directory) throw;
      unreadable.push_back(error);
      continue;
    }
    if (files[i].in_directory && !trace.read_result.has_trace_events) {
      left_out.push_back(files[i].path);
      continue;
    }
    const std::int64_t rank = trace.distributed.rank;
    const std::int64_t start_ns = trace.window_start_ns;
    const std::int64_t end_ns = trace.window_end_ns;
    traces.push_back({rank, start_ns, end_ns, i, summarize(std::move(trace))});
  }
  if (traces.empty() && !unreadable.empty()) throw unreadable.front();
  if (traces.empty())
    throw TraceReadError(std::filesystem::path(left_out.front()).parent_path().string(),
                         fmt::format("no trace in the directory: {} JSON file{} without \"{}\"", left_out.size(),
                                     left_out.size() == 1 ? "" : "s", kineto::key::kTraceEvents));
  // Each rank's traces in time order; the k-th of each rank is in window k.
  std::stable_sort(traces.begin(), traces.end(), [](const FileTrace& a, const FileTrace& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.start_ns < b.start_ns;
  });
  std::vector<TraceWindow<Summary>> windows;
  std::vector<std::pair<std::int64_t, std::size_t>> windows_of_rank;
  for (std::size_t first = 0; first < traces.size();) {
    const std::int64_t rank = traces[first].rank;
    std::size_t end = first + 1;
    for (; end < traces.size() && traces[end].rank == rank; ++end) {
      // Windows of one run follow each other; two traces sharing time (or starting together, as
      // two traces without events do) are two runs, or one file read twice.
      const FileTrace& before = traces[end - 1];
      const FileTrace& after = traces[end];
      if (after.start_ns < before.end_ns || after.start_ns == before.start_ns)
        throw TraceReadError(files[after.file].path,
                             fmt::format("rank {} is also the rank of '{}', and their times overlap: not two windows of one "
                                         "run (one file per rank and window)",
                                         rank, files[before.file].path));
    }
    if (windows.size() < end - first) windows.resize(end - first);
    for (std::size_t k = 0; k < end - first; ++k) windows[k].ranks.push_back(std::move(traces[first + k].summary));
    windows_of_rank.emplace_back(rank, end - first);
    first = end;
  }
  for (std::size_t k = 0; k < windows.size(); ++k) {
    std::vector<std::string>& notes = windows[k].notes;
    std::vector<std::string> missing;
    for (const auto& [rank, count] : windows_of_rank)
      if (count <= k) missing.push_back(fmt::format("rank {} ({} file{})", rank, count, count == 1 ? "" : "s"));
    if (!missing.empty())
      notes.push_back(fmt::format("window {} of {} has no trace of {}: each rank's trace files are its windows, in time order",
                                  k + 1, windows.size(), fmt::join(missing, ", ")));
    for (const std::string& file : left_out)
      notes.push_back(
          fmt::format("'{}' left out of the set: a JSON object without \"{}\", not a trace", file, kineto::key::kTraceEvents));
    for (const TraceReadError& error : unreadable)
      notes.push_back(fmt::format("left out of the set, unreadable (a truncated or damaged file?): {}", error.what()));
  }
  return windows;
}

/// Reads the traces of a run window by window: one trace set per recording window, in time order,
/// each sorted by rank (Trace::distributed.rank). A Profiler whose schedule repeats writes a file
/// per window and rank (tensorboard_trace_handler), so a directory may hold several files of one
/// rank: each rank's files, ordered by the time their trace starts (Trace::window_start_ns), are
/// its windows, and window k holds the k-th file of every rank that has one (TensorBoard's
/// profiler plugin shows them as the "spans" of a worker). A rank with fewer files than another
/// is missing from the last windows, which say so in their first trace's read_result.notes.
/// Paths, files left out (noted in every window) and errors are those of read_trace_set(), except
/// that two files of one rank are refused (naming both) only when their times overlap, or start
/// together (two traces without events): then they are not two windows of one run.
inline std::vector<std::vector<Trace>> read_trace_windows(const std::vector<std::string>& paths,
                                                          const ReadOptions& options = {}) {
  std::vector<std::vector<Trace>> windows;
  for (TraceWindow<Trace>& window : read_trace_windows(paths, options, [](Trace&& trace) { return std::move(trace); })) {
    std::vector<std::string>& notes = window.ranks.front().read_result.notes;
    notes.insert(notes.end(), std::make_move_iterator(window.notes.begin()), std::make_move_iterator(window.notes.end()));
    windows.push_back(std::move(window.ranks));
  }
  return windows;
}

/// Reads the traces of a run, one Trace per rank, sorted by rank (Trace::distributed.rank).
/// Each path is a trace file, or a directory whose files ending in ".json" or ".gz" are read
/// (not its subdirectories), as Holistic Trace Analysis lists a trace directory. A JSON file of a
/// directory that is not a trace (an object without "traceEvents": a config.json, a report) is
/// left out, with a note in the first trace's read_result. Several files of one rank are windows
/// of the run (read_trace_windows()): the latest window is returned, and a note in its first
/// trace's read_result says how many there are. A directory's file that cannot be read (truncated,
/// damaged) is left out of a lenient read, with a note naming it and the error, so that the other
/// ranks are still read. Throws TraceReadError for a named file that cannot be read (any file, in a
/// strict read), a path that does not exist, a directory with no trace file (none readable: the
/// first error), and two files of one rank whose times overlap (naming both).
inline std::vector<Trace> read_trace_set(const std::vector<std::string>& paths, const ReadOptions& options = {}) {
  std::vector<std::vector<Trace>> windows = read_trace_windows(paths, options);
  std::vector<Trace> latest = std::move(windows.back());
  if (windows.size() > 1)
    latest.front().read_result.notes.push_back(fmt::format(
        "window {0} of {0}, the latest: ranks have several trace files, their windows in time order; "
        "read_trace_windows() reads every window (dlprof-report --window N)",
        windows.size()));
  return latest;
}

DLPROF_END_NAMESPACE
