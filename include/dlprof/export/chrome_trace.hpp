// dlprof/export/chrome_trace.hpp: writes a Trace as the Chrome-trace JSON that torch.profiler
// (Kineto) writes, so TensorBoard's profiler plugin, Holistic Trace Analysis and Perfetto open it
// unchanged. The field-by-field contract is ../shared/TRACE_FORMAT.md §6; in short:
//  * top level in Kineto's order: schemaVersion, deviceProperties, distributedInfo (one line,
//    `"rank": N` with a space, which HTA's rank regex needs), metadata, displayTimeUnit,
//    baseTimeNanoseconds, traceEvents (Record Window End last), traceName;
//  * ts/dur in microseconds with exactly three decimals, relative to baseTimeNanoseconds, which
//    is the window start floored to Kineto's 3-month interval so every rank shares it;
//  * ranges and ProfilerStep#N are `user_annotation` slices with External id / Ev Idx args.
// Formatting writes into one reused buffer with fmt's integer formatter; nothing is allocated
// per event.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Kineto's ChromeTraceBaseTime: Unix time floored to a 3-month interval, in ns.
inline std::int64_t chrome_trace_base_time_ns(std::int64_t unix_ns) noexcept {
  constexpr std::int64_t kInterval_s = 7'889'238;
  const std::int64_t seconds = unix_ns / 1'000'000'000;
  return (seconds / kInterval_s) * kInterval_s * 1'000'000'000;
}

class JsonWriter {
 public:
  explicit JsonWriter(fmt::memory_buffer& out) noexcept : out_(out) {}

  void raw(std::string_view text) { out_.append(text.data(), text.data() + text.size()); }
  void character(char c) { out_.push_back(c); }

  void integer(std::int64_t value) {
    const fmt::format_int formatted(value);
    out_.append(formatted.data(), formatted.data() + formatted.size());
  }

  /// Nanoseconds as microseconds with exactly three decimals (Kineto's fmtTs), clamped at 0.
  void microseconds(std::int64_t ns) {
    if (ns < 0) ns = 0;
    integer(ns / 1000);
    const auto fraction = static_cast<int>(ns % 1000);
    const char digits[4] = {'.', static_cast<char>('0' + fraction / 100), static_cast<char>('0' + fraction / 10 % 10),
                            static_cast<char>('0' + fraction % 10)};
    out_.append(digits, digits + 4);
  }

  /// A finite number in its shortest exact form; NaN and infinities become null (JSON has none).
  void number(double value) {
    if (!std::isfinite(value)) {
      raw("null");
      return;
    }
    fmt::format_to(std::back_inserter(out_), "{}", value);
  }

  /// A JSON string literal: quotes, backslashes and control characters escaped.
  void string(std::string_view text) {
    out_.push_back('"');
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out_.push_back('\\');
        out_.push_back(c);
      } else if (byte < 0x20) {
        fmt::format_to(std::back_inserter(out_), "\\u{:04x}", static_cast<unsigned>(byte));
      } else {
        out_.push_back(c);
      }
    }
    out_.push_back('"');
  }

 private:
  fmt::memory_buffer& out_;
};

/// The start of an event's object, up to its name: `ph` and `cat` by kind.
constexpr std::string_view event_opening(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::Range:
    case EventKind::Step: return "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": ";
    case EventKind::Instant: return "  {\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"name\": ";
    case EventKind::Counter: return "  {\"ph\": \"C\", \"cat\": \"counter\", \"name\": ";
  }
  return "  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": ";
}

inline void write_device_properties(JsonWriter& json, const DeviceProperties& device) {
  json.raw("{\"id\": ");
  json.integer(device.id);
  json.raw(", \"name\": ");
  json.string(device.name);
  const std::pair<std::string_view, std::int64_t> fields[] = {
      {"totalGlobalMem", device.total_global_mem},
      {"computeMajor", device.compute_major},
      {"computeMinor", device.compute_minor},
      {"maxThreadsPerBlock", device.max_threads_per_block},
      {"maxThreadsPerMultiprocessor", device.max_threads_per_multiprocessor},
      {"regsPerBlock", device.regs_per_block},
      {"warpSize", device.warp_size},
      {"sharedMemPerBlock", device.shared_mem_per_block},
      {"numSms", device.num_sms},
      {"regsPerMultiprocessor", device.regs_per_multiprocessor},
      {"sharedMemPerBlockOptin", device.shared_mem_per_block_optin},
      {"sharedMemPerMultiprocessor", device.shared_mem_per_multiprocessor},
  };
  for (const auto& [key, value] : fields) {
    json.raw(", \"");
    json.raw(key);
    json.raw("\": ");
    json.integer(value);
  }
  json.character('}');
}

}  // namespace detail

/// Appends the Chrome-trace JSON text of `trace` to `out`. `trace_name` is written as traceName
/// (Kineto writes the output path there). With `flush`, whenever `out` holds more than 1 MiB its
/// content is handed to `flush` and cleared, so a writer to a file needs a bounded buffer; what is
/// left in `out` at the end is the caller's to write.
inline void write_chrome_trace(const Trace& trace, fmt::memory_buffer& out, std::string_view trace_name,
                               const std::function<void(std::string_view)>& flush = nullptr) {
  constexpr std::size_t kFlushBytes = std::size_t{1} << 20;
  detail::JsonWriter json(out);
  const std::int64_t base_ns = detail::chrome_trace_base_time_ns(trace.window_start_ns);
  const auto relative = [base_ns](std::int64_t ns) { return ns - base_ns; };

  json.raw("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [");
  for (std::size_t i = 0; i < trace.devices.size(); ++i) {
    json.raw(i == 0 ? "\n    " : ",\n    ");
    detail::write_device_properties(json, trace.devices[i]);
  }
  json.raw(trace.devices.empty() ? "],\n" : "\n  ],\n");
  json.raw("  \"distributedInfo\": {\"backend\": ");
  json.string(trace.distributed.backend);
  json.raw(", \"rank\": ");
  json.integer(trace.distributed.rank);
  json.raw(", \"world_size\": ");
  json.integer(trace.distributed.world_size);
  json.raw("},\n  \"dlprof_version\": \"" DLPROF_VERSION_STRING "\",\n  \"dlprof_dropped_events\": ");
  json.integer(static_cast<std::int64_t>(trace.dropped_events));
  json.raw(",\n  \"dlprof_clipped_ranges\": ");
  json.integer(static_cast<std::int64_t>(trace.clipped_ranges));
  json.raw(",\n  \"dlprof_overflowed_names\": ");
  json.integer(static_cast<std::int64_t>(trace.overflowed_names));
  json.raw(",\n  \"dlprof_clock\": ");
  json.string(trace.clock_source);
  for (const auto& [key, value] : trace.metadata) {
    json.raw(",\n  ");
    json.string(key);
    json.raw(": ");
    json.raw(value);
  }
  json.raw(",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ");
  json.integer(base_ns);
  json.raw(",\n  \"traceEvents\": [\n");

  // Process and thread names, as Kineto labels a CPU process.
  json.raw("  {\"name\": \"process_name\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative(trace.window_start_ns));
  json.raw(", \"pid\": ");
  json.integer(trace.pid);
  json.raw(", \"tid\": 0, \"args\": {\"name\": ");
  json.string(trace.process_name);
  json.raw("}},\n  {\"name\": \"process_labels\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative(trace.window_start_ns));
  json.raw(", \"pid\": ");
  json.integer(trace.pid);
  json.raw(", \"tid\": 0, \"args\": {\"labels\": \"CPU\"}},\n  {\"name\": \"process_sort_index\", \"ph\": \"M\", \"ts\": ");
  json.microseconds(relative(trace.window_start_ns));
  json.raw(", \"pid\": ");
  json.integer(trace.pid);
  json.raw(", \"tid\": 0, \"args\": {\"sort_index\": ");
  json.integer(trace.pid);
  json.raw("}},\n");
  for (const ThreadInfo& thread : trace.threads) {
    json.raw("  {\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": ");
    json.microseconds(relative(trace.window_start_ns));
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(thread.os_tid);
    json.raw(", \"args\": {\"name\": ");
    json.string(fmt::format("thread {} ({})", thread.os_tid, thread.name));
    json.raw("}},\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"ts\": ");
    json.microseconds(relative(trace.window_start_ns));
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(thread.os_tid);
    json.raw(", \"args\": {\"sort_index\": ");
    json.integer(thread.os_tid);
    json.raw("}},\n");
  }

  // Names are escaped once, not once per event.
  fmt::memory_buffer escaped_names_buffer;
  std::vector<std::pair<std::size_t, std::size_t>> escaped_names;
  {
    detail::JsonWriter names_json(escaped_names_buffer);
    escaped_names.reserve(trace.names.size());
    for (const std::string& name : trace.names) {
      const std::size_t begin = escaped_names_buffer.size();
      names_json.string(name);
      escaped_names.emplace_back(begin, escaped_names_buffer.size() - begin);
    }
  }
  const auto write_name = [&](std::uint32_t name) {
    json.raw(std::string_view(escaped_names_buffer.data() + escaped_names[name].first, escaped_names[name].second));
  };

  std::int64_t external_id = 0;
  std::int64_t event_index = 0;
  for (const TraceEvent& event : trace.events) {
    if (flush && out.size() >= kFlushBytes) {
      flush(std::string_view(out.data(), out.size()));
      out.clear();
    }
    // Kineto's field order: ph, cat, name, pid, tid, ts, then what the kind adds.
    json.raw(detail::event_opening(event.kind));
    write_name(event.name);
    json.raw(", \"pid\": ");
    json.integer(trace.pid);
    json.raw(", \"tid\": ");
    json.integer(trace.threads[event.thread].os_tid);
    json.raw(", \"ts\": ");
    json.microseconds(relative(event.start_ns));
    switch (event.kind) {
      case EventKind::Range:
      case EventKind::Step:
        json.raw(", \"dur\": ");
        json.microseconds(event.duration_ns());
        json.raw(", \"args\": {\"External id\": ");
        json.integer(++external_id);
        json.raw(", \"Record function id\": 0, \"Ev Idx\": ");
        json.integer(event_index);
        break;
      case EventKind::Instant:
        json.raw(", \"s\": \"t\", \"args\": {\"Ev Idx\": ");
        json.integer(event_index);
        break;
      case EventKind::Counter:
        json.raw(", \"args\": {\"value\": ");
        json.number(event.value);
        break;
    }
    json.raw("}},\n");
    ++event_index;
  }
  json.raw("  {\"ph\": \"i\", \"s\": \"g\", \"name\": \"Record Window End\", \"pid\": \"\", \"tid\": \"\", \"ts\": ");
  json.microseconds(relative(trace.window_end_ns));
  json.raw("}\n  ],\n  \"traceName\": ");
  json.string(trace_name);
  json.raw("\n}\n");
}

namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

inline bool ends_with(std::string_view text, std::string_view suffix) noexcept {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

/// A file written under a temporary name in the same directory and renamed into place by
/// commit(), so a reader sees either nothing or the whole file; gzip-compressed when asked.
/// Destroyed without commit(), it removes the temporary file. Errors throw std::runtime_error
/// naming the final path, the step that failed and the system's reason.
class AtomicFile {
 public:
  AtomicFile(std::string path, bool gzip) : path_(std::move(path)), gzip_(gzip) {
    static std::atomic<std::uint64_t> sequence{0};
    temporary_ = fmt::format("{}.tmp.{}.{}", path_, static_cast<long>(::getpid()),
                             sequence.fetch_add(1, std::memory_order_relaxed));
    errno = 0;
    if (gzip_) {
      gz_ = gzopen(temporary_.c_str(), "wb6");
      if (gz_ == nullptr) fail("open", errno != 0 ? errno : ENOMEM);
    } else {
      fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd_ < 0) fail("open", errno);
    }
  }

  ~AtomicFile() {
    if (committed_) return;
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
    ::unlink(temporary_.c_str());
  }

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view bytes) {
    while (!bytes.empty()) {
      const std::size_t chunk = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
      errno = 0;
      if (gzip_) {
        const int written = gzwrite(gz_, bytes.data(), static_cast<unsigned>(chunk));
        if (written <= 0) fail("write", errno != 0 ? errno : EIO);
        bytes.remove_prefix(static_cast<std::size_t>(written));
      } else {
        const ssize_t written = ::write(fd_, bytes.data(), chunk);
        if (written < 0 && errno == EINTR) continue;
        if (written < 0) fail("write", errno);
        bytes.remove_prefix(static_cast<std::size_t>(written));
      }
    }
  }

  void commit() {
    errno = 0;
    if (gzip_) {
      const int result = gzclose(gz_);
      gz_ = nullptr;
      if (result != Z_OK) fail("close", errno != 0 ? errno : EIO);
    } else {
      const int result = ::close(fd_);
      fd_ = -1;
      if (result != 0) fail("close", errno);
    }
    if (std::rename(temporary_.c_str(), path_.c_str()) != 0) fail("rename", errno);
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(std::string_view step, int error) const {
    throw std::runtime_error(fmt::format("dlprof: cannot write trace '{}': {}: {}", path_, step, errno_text(error)));
  }

  std::string path_;
  std::string temporary_;
  bool gzip_;
  gzFile gz_ = nullptr;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace detail

inline void Trace::save(const std::string& path) const {
  // Streams through a bounded buffer: memory stays flat however many events the trace holds.
  detail::AtomicFile file(path, detail::ends_with(path, ".gz"));
  fmt::memory_buffer buffer;
  write_chrome_trace(*this, buffer, path, [&file](std::string_view chunk) { file.write(chunk); });
  file.write(std::string_view(buffer.data(), buffer.size()));
  file.commit();
}

DLPROF_END_NAMESPACE
