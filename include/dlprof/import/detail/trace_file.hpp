// dlprof/import/detail/trace_file.hpp: the bytes of a trace file, decompressed when they are
// gzip (recognised by its magic bytes, whatever the file's name), in one buffer the JSON parser
// works in, with a NUL after the text (in-situ parsing stops there).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/import/detail/crc32.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::json {

/// A problem with a file as a whole (missing, unreadable, corrupt gzip, too large).
struct FileFailure {
  std::string message;
};

[[noreturn]] inline void fail_file(std::string message) { throw FileFailure{std::move(message)}; }

/// Bytes in one malloc'd block that grows with realloc (large blocks move by remapping pages,
/// not by copying), uninitialised until written: a size hint costs no memory until used.
class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(ByteBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  ByteBuffer& operator=(ByteBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;
  ~ByteBuffer() { std::free(data_); }

  char* data() noexcept { return data_; }
  const char* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }

  void reserve(std::size_t capacity) {
    if (capacity <= capacity_) return;
    void* grown = std::realloc(data_, capacity);
    if (grown == nullptr) throw std::bad_alloc();
    data_ = static_cast<char*>(grown);
    capacity_ = capacity;
  }
  void resize(std::size_t size) {
    reserve(size);
    size_ = size;
  }

  /// Ends the text with NUL bytes, outside size(): one ends RapidJSON's in-situ stream, and its
  /// SIMD scans load whole aligned 16-byte blocks, up to 15 bytes past that one.
  void terminate() {
    reserve(size_ + kPadding);
    std::memset(data_ + size_, 0, kPadding);
  }

  static constexpr std::size_t kPadding = 16;

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

inline bool is_gzip(std::string_view bytes) noexcept {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

/// Called with (bytes done, bytes in all) as a long step goes on.
using ByteProgress = std::function<void(std::uint64_t, std::uint64_t)>;

/// Reads a whole file; more than `limit` bytes is an error.
inline ByteBuffer read_file(const std::string& path, std::uint64_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) fail_file(std::strerror(errno));
  if (S_ISDIR(status.st_mode)) fail_file("is a directory");
  if (static_cast<std::uint64_t>(status.st_size) > limit)
    fail_file(fmt::format("the file has {} bytes, more than the limit of {} (ReadOptions::max_json_bytes)", status.st_size, limit));
  ByteBuffer buffer;
  // A pipe or a file that grows reads on past its size.
  buffer.reserve(static_cast<std::size_t>(status.st_size) + ByteBuffer::kPadding);
  for (;;) {
    if (buffer.size() == buffer.capacity()) buffer.reserve(buffer.capacity() * 2 + 4096);
    const ssize_t count = ::read(fd, buffer.data() + buffer.size(), buffer.capacity() - buffer.size());
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) fail_file(std::strerror(errno));
    if (count == 0) break;
    buffer.resize(buffer.size() + static_cast<std::size_t>(count));
    if (buffer.size() > limit) fail_file(fmt::format("the file has more than {} bytes (ReadOptions::max_json_bytes)", limit));
  }
  return buffer;
}

/// Checks the gzip trailer ending `member` (CRC-32 and size modulo 2^32) against the member's
/// output, from `start` to the end of `output`.
inline void check_member(std::string_view member, const ByteBuffer& output, std::size_t start) {
  const auto* trailer = reinterpret_cast<const unsigned char*>(member.data() + member.size() - 8);
  const auto le32 = [](const unsigned char* bytes) {
    return std::uint32_t{bytes[0]} | std::uint32_t{bytes[1]} << 8 | std::uint32_t{bytes[2]} << 16 |
           std::uint32_t{bytes[3]} << 24;
  };
  const std::size_t size = output.size() - start;
  if (crc32(0, reinterpret_cast<const unsigned char*>(output.data()) + start, size) != le32(trailer))
    fail_file(fmt::format("corrupt gzip data: CRC-32 mismatch in the member ending at compressed byte {}", member.size()));
  if (static_cast<std::uint32_t>(size) != le32(trailer + 4))
    fail_file(fmt::format("corrupt gzip data: length mismatch in the member ending at compressed byte {}", member.size()));
}

/// Inflates gzip data (every member, as gzip -d and Python's gzip do) into a new buffer of at
/// most `limit` bytes; a gzip bomb stops there.
inline ByteBuffer gunzip(std::string_view compressed, std::uint64_t limit, const ByteProgress& progress) {
  // The last member's trailer holds its size modulo 2^32: the usual single member's exact size.
  std::uint64_t size_hint = 0;
  if (compressed.size() >= 18) {
    const auto* trailer = reinterpret_cast<const unsigned char*>(compressed.data() + compressed.size() - 4);
    size_hint = std::uint64_t{trailer[0]} | std::uint64_t{trailer[1]} << 8 | std::uint64_t{trailer[2]} << 16 |
                std::uint64_t{trailer[3]} << 24;
  }
  // Deflate expands at most 1032:1, so a larger hint is a lie (and must not reserve memory).
  const std::uint64_t most = std::min<std::uint64_t>(limit, std::uint64_t{compressed.size()} * 1032 + 4096);
  ByteBuffer output;
  // The padding terminate() adds stays spare all along: no copy at the end.
  constexpr std::size_t kSpare = ByteBuffer::kPadding;
  output.reserve(static_cast<std::size_t>(std::min(std::max<std::uint64_t>(size_hint, compressed.size() * 4ull), most)) + kSpare);

  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) fail_file("cannot initialise zlib");
  struct Ender {
    z_stream* stream;
    ~Ender() { inflateEnd(stream); }
  } ender{&stream};
#if ZLIB_VERNUM >= 0x1290
  // Each member's CRC and length are checked here, with crc32.hpp's folding CRC: zlib's own is
  // a sixth of the time it takes to read a trace.
  if (inflateValidate(&stream, 0) != Z_OK) fail_file("cannot configure zlib");
  constexpr bool kCheckMembers = true;
#else
  constexpr bool kCheckMembers = false;
#endif
  std::size_t member_start = 0;  // where the current member's output begins
  const auto* input = reinterpret_cast<const unsigned char*>(compressed.data());
  std::size_t consumed = 0;
  std::uint64_t next_report = std::uint64_t{16} << 20;
  for (;;) {
    if (output.size() == output.capacity() - kSpare) {
      if (output.size() >= limit)
        fail_file(fmt::format("the gzip data decompresses to more than {} bytes (ReadOptions::max_json_bytes)", limit));
      output.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{output.capacity()} * 2, limit + kSpare)));
    }
    // zlib counts in 32 bits: feed and drain at most 1 GiB at a time.
    constexpr std::size_t kStep = std::size_t{1} << 30;
    stream.next_in = const_cast<unsigned char*>(input + consumed);
    stream.avail_in = static_cast<uInt>(std::min(compressed.size() - consumed, kStep));
    stream.next_out = reinterpret_cast<unsigned char*>(output.data() + output.size());
    stream.avail_out = static_cast<uInt>(std::min(output.capacity() - kSpare - output.size(), kStep));
    const uInt offered_in = stream.avail_in;
    const uInt offered_out = stream.avail_out;
    const int status = inflate(&stream, Z_NO_FLUSH);
    consumed += offered_in - stream.avail_in;
    output.resize(output.size() + (offered_out - stream.avail_out));
    if (progress && output.size() >= next_report) {
      progress(consumed, compressed.size());
      next_report = output.size() + (std::uint64_t{16} << 20);
    }
    if (status == Z_STREAM_END) {
      if (kCheckMembers) check_member(compressed.substr(0, consumed), output, member_start);
      member_start = output.size();
      const std::string_view rest = compressed.substr(consumed);
      if (rest.empty()) break;
      if (is_gzip(rest)) {  // another member
        if (inflateReset(&stream) != Z_OK) fail_file("cannot reset zlib");
        continue;
      }
      // Padding with zeros after the last member is accepted, as gzip -d accepts it.
      if (std::all_of(rest.begin(), rest.end(), [](char c) { return c == '\0'; })) break;
      fail_file(fmt::format("not gzip data after the end of the gzip stream, at compressed byte {}", consumed));
    }
    if (status == Z_DATA_ERROR || status == Z_NEED_DICT)
      fail_file(fmt::format("corrupt gzip data at compressed byte {}: {}", consumed,
                            stream.msg != nullptr ? stream.msg : "invalid data"));
    if (status == Z_MEM_ERROR) throw std::bad_alloc();
    if (status == Z_BUF_ERROR && consumed == compressed.size() && stream.avail_out != 0)
      fail_file(fmt::format("truncated gzip data: the stream ends early, after {} compressed bytes", consumed));
    if (status != Z_OK && status != Z_BUF_ERROR) fail_file(fmt::format("zlib error {}", status));
  }
  if (progress) progress(compressed.size(), compressed.size());
  return output;
}

}  // namespace detail::json
DLPROF_END_NAMESPACE
