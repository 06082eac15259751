// dlprof/import/detail/trace_file.hpp: the bytes of a trace file, decompressed when they are
// gzip (recognised by its magic bytes, whatever the file's name), in one buffer the JSON parser
// works in, with a NUL after the text (in-situ parsing stops there).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#if DLPROF_HAS_LIBDEFLATE
#  include <libdeflate.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::reader {

/// Faults in the pages of a new mapped buffer on a thread of its own while the caller writes into
/// it, until the object goes. MADV_POPULATE_WRITE maps each page writable without writing to it,
/// so both threads may touch a page at once. The pages of a text are new to the process: zeroing
/// them, or compacting memory for huge pages, on the writing thread takes as long as inflating
/// into them, and stalls for tens of milliseconds when memory is fragmented. The thread stops when
/// the writer is done, so a size that lies (a gzip trailer's) costs about as much memory as the
/// writer wrote. Where the kernel (before 5.14) or its headers lack the advice, or no thread can
/// be started, the writer faults the pages in itself.
class PagesFaultedAhead {
 public:
  PagesFaultedAhead(char* data, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    const long page = ::sysconf(_SC_PAGESIZE);
    if (bytes < kWorthAThread || page <= 0 || reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(page) != 0)
      return;
    try {
      thread_ = std::thread([this, data, bytes] {
        for (std::size_t at = 0; at < bytes && !done_.load(std::memory_order_relaxed); at += kStep)
          if (::madvise(data + at, std::min(kStep, bytes - at), MADV_POPULATE_WRITE) != 0) return;
      });
    } catch (const std::system_error&) {
    }
#else
    (void)data;
    (void)bytes;
#endif
  }
  PagesFaultedAhead(const PagesFaultedAhead&) = delete;
  PagesFaultedAhead& operator=(const PagesFaultedAhead&) = delete;
  ~PagesFaultedAhead() {
    done_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr std::size_t kStep = std::size_t{2} << 20;  // a huge page: a multiple of every page size
  static constexpr std::size_t kWorthAThread = std::size_t{4} << 20;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// gzip's CRC-32 of `size` bytes at `data`, continuing from `crc` (0 to start): libdeflate's,
/// which folds with carry-less multiplication where the CPU has it (zlib 1.2's bytewise CRC takes
/// a sixth of reading a trace), or zlib's crc32_z without libdeflate.
inline std::uint32_t crc32(std::uint32_t crc, const unsigned char* data, std::size_t size) noexcept {
#if DLPROF_HAS_LIBDEFLATE
  return libdeflate_crc32(crc, data, size);
#else
  return static_cast<std::uint32_t>(crc32_z(crc, data, size));
#endif
}

/// A problem with a file as a whole (missing, unreadable, corrupt gzip, too large).
struct FileFailure {
  std::string message;
};

[[noreturn]] inline void fail_file(std::string message) { throw FileFailure{std::move(message)}; }

/// Bytes in one block, uninitialised until written: a size hint costs no memory until used. A
/// small block is malloc'd and grows with realloc; a large one (a trace's text) is mapped, in
/// huge pages where the kernel gives them, and grows by remapping: the pages of a text are new to
/// the process on each read, and faulting them in 4 KiB at a time would take a tenth of reading it.
class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(ByteBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)), mapped_(std::exchange(other.mapped_, false)) {}
  ByteBuffer& operator=(ByteBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    std::swap(mapped_, other.mapped_);
    return *this;
  }
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;
  ~ByteBuffer() {
    if (mapped_)
      ::munmap(data_, capacity_);
    else
      std::free(data_);
  }

  char* data() noexcept { return data_; }
  const char* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }

  void reserve(std::size_t capacity) {
    if (capacity <= capacity_) return;
    if (!mapped_ && capacity < kMappedBytes) {
      void* grown = std::realloc(data_, capacity);
      if (grown == nullptr) throw std::bad_alloc();
      data_ = static_cast<char*>(grown);
      capacity_ = capacity;
      return;
    }
    const std::size_t bytes = (capacity + kHugePage - 1) / kHugePage * kHugePage;
    void* block = mapped_ ? ::mremap(data_, capacity_, bytes, MREMAP_MAYMOVE)
                          : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) throw std::bad_alloc();
    ::madvise(block, bytes, MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages
    if (!mapped_) {
      if (size_ != 0) std::memcpy(block, data_, size_);
      std::free(data_);
    }
    data_ = static_cast<char*>(block);
    capacity_ = bytes;
    mapped_ = true;
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
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kMappedBytes = kHugePage;

  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  bool mapped_ = false;  ///< mmap'd (capacity_ bytes), else malloc'd
};

inline bool is_gzip(std::string_view bytes) noexcept {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

/// Called with (bytes done, bytes in all) as a long step goes on.
using ByteProgress = std::function<void(std::uint64_t, std::uint64_t)>;

/// A file opened for reading, closed with the object: not a directory, and of at most `limit`
/// bytes as it stands.
class OpenFile {
 public:
  OpenFile(const std::string& path, std::uint64_t limit) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail_file(std::strerror(errno));
    struct stat status {};
    if (::fstat(fd_, &status) != 0) fail_file(std::strerror(errno));
    if (S_ISDIR(status.st_mode)) fail_file("is a directory");
    size_ = static_cast<std::uint64_t>(status.st_size);
    regular_ = S_ISREG(status.st_mode);
    if (size_ > limit)
      fail_file(fmt::format("the file has {} bytes, more than the limit of {} (ReadOptions::max_json_bytes)", size_, limit));
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile() { ::close(fd_); }

  int fd() const noexcept { return fd_; }
  std::uint64_t size() const noexcept { return size_; }
  bool regular() const noexcept { return regular_; }  ///< not a pipe or a device: its size is what it holds

 private:
  int fd_;
  std::uint64_t size_ = 0;
  bool regular_ = false;
};

/// Reads a whole file; more than `limit` bytes is an error.
inline ByteBuffer read_file(const std::string& path, std::uint64_t limit) {
  const OpenFile file(path, limit);
  const int fd = file.fd();
  ByteBuffer buffer;
  // A pipe or a file that grows reads on past its size.
  buffer.reserve(static_cast<std::size_t>(file.size()) + ByteBuffer::kPadding);
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

/// zlib's inflate over every member of gzip data (as gzip -d and Python's gzip read them), into
/// output the caller places call by call. Each member's CRC-32 and length are checked against its
/// trailer as its output is written, so a caller may change output once a call has returned:
/// zlib reads back from the output only within one call and keeps its own window between calls.
class GzipInflater {
 public:
  explicit GzipInflater(std::string_view compressed) : compressed_(compressed) {
    if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) fail_file("cannot initialise zlib");
#if ZLIB_VERNUM >= 0x1290
    if (inflateValidate(&stream_, 0) != Z_OK) {
      inflateEnd(&stream_);
      fail_file("cannot configure zlib");
    }
#endif
  }
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;
  ~GzipInflater() { inflateEnd(&stream_); }

  /// The size of the text the trailer announces: the last member's size modulo 2^32, which is the
  /// usual single member's exact size. 0 when the data is too short to have one.
  static std::uint64_t announced_size(std::string_view compressed) noexcept {
    if (compressed.size() < 18) return 0;
    const auto* trailer = reinterpret_cast<const unsigned char*>(compressed.data() + compressed.size() - 4);
    return std::uint64_t{trailer[0]} | std::uint64_t{trailer[1]} << 8 | std::uint64_t{trailer[2]} << 16 |
           std::uint64_t{trailer[3]} << 24;
  }

  /// Inflates into the `room` (> 0) bytes at `out`; returns how many it wrote. Throws FileFailure.
  std::size_t inflate_into(char* out, std::size_t room) {
    // zlib counts in 32 bits: feed and drain at most 1 GiB at a time.
    constexpr std::size_t kStep = std::size_t{1} << 30;
    const auto* input = reinterpret_cast<const unsigned char*>(compressed_.data());
    stream_.next_in = const_cast<unsigned char*>(input + consumed_);
    stream_.avail_in = static_cast<uInt>(std::min(compressed_.size() - consumed_, kStep));
    stream_.next_out = reinterpret_cast<unsigned char*>(out);
    stream_.avail_out = static_cast<uInt>(std::min(room, kStep));
    const uInt offered_in = stream_.avail_in;
    const uInt offered_out = stream_.avail_out;
    const int status = inflate(&stream_, Z_NO_FLUSH);
    consumed_ += offered_in - stream_.avail_in;
    const std::size_t written = offered_out - stream_.avail_out;
    if (kChecksMembers) member_crc_ = crc32(member_crc_, reinterpret_cast<const unsigned char*>(out), written);
    member_size_ += written;
    if (status == Z_STREAM_END) {
      end_member();
      return written;
    }
    if (status == Z_DATA_ERROR || status == Z_NEED_DICT)
      fail_file(fmt::format("corrupt gzip data at compressed byte {}: {}", consumed_,
                            stream_.msg != nullptr ? stream_.msg : "invalid data"));
    if (status == Z_MEM_ERROR) throw std::bad_alloc();
    if (status == Z_BUF_ERROR && consumed_ == compressed_.size() && stream_.avail_out != 0)
      fail_file(fmt::format("truncated gzip data: the stream ends early, after {} compressed bytes", consumed_));
    if (status != Z_OK && status != Z_BUF_ERROR) fail_file(fmt::format("zlib error {}", status));
    return written;
  }

  bool finished() const noexcept { return finished_; }
  std::size_t consumed() const noexcept { return consumed_; }

 private:
  // crc32() checks each member where zlib lets its own check be turned off (1.2.9): with
  // libdeflate, at memory speed instead of zlib's sixth of the time it takes to read a trace.
#if ZLIB_VERNUM >= 0x1290
  static constexpr bool kChecksMembers = true;
#else
  static constexpr bool kChecksMembers = false;
#endif

  void end_member() {
    if (kChecksMembers) {
      const auto* trailer = reinterpret_cast<const unsigned char*>(compressed_.data() + consumed_ - 8);
      const auto le32 = [](const unsigned char* bytes) {
        return std::uint32_t{bytes[0]} | std::uint32_t{bytes[1]} << 8 | std::uint32_t{bytes[2]} << 16 |
               std::uint32_t{bytes[3]} << 24;
      };
      if (member_crc_ != le32(trailer))
        fail_file(fmt::format("corrupt gzip data: CRC-32 mismatch in the member ending at compressed byte {}", consumed_));
      if (static_cast<std::uint32_t>(member_size_) != le32(trailer + 4))
        fail_file(fmt::format("corrupt gzip data: length mismatch in the member ending at compressed byte {}", consumed_));
    }
    member_crc_ = 0;
    member_size_ = 0;
    const std::string_view rest = compressed_.substr(consumed_);
    if (is_gzip(rest)) {  // another member
      if (inflateReset(&stream_) != Z_OK) fail_file("cannot reset zlib");
      return;
    }
    // Padding with zeros after the last member is accepted, as gzip -d accepts it.
    if (!std::all_of(rest.begin(), rest.end(), [](char c) { return c == '\0'; }))
      fail_file(fmt::format("not gzip data after the end of the gzip stream, at compressed byte {}", consumed_));
    finished_ = true;
  }

  std::string_view compressed_;
  z_stream stream_{};
  std::size_t consumed_ = 0;
  std::uint32_t member_crc_ = 0;
  std::uint64_t member_size_ = 0;
  bool finished_ = false;
};

/// The most text `compressed` can inflate to within `limit`: deflate expands at most 1032:1, so a
/// larger announced size is a lie (and must not reserve memory).
inline std::uint64_t most_inflated(std::string_view compressed, std::uint64_t limit) noexcept {
  return std::min<std::uint64_t>(limit, std::uint64_t{compressed.size()} * 1032 + 4096);
}

/// How inflating gzip data whole into room for the size its trailer announces went.
enum class WholeInflation : std::uint8_t {
  Done,    ///< the text is in the buffer
  Longer,  ///< the text is longer than announced (several members, or 4 GiB or more)
  Failed,  ///< anything else: zlib reads the data again and names what is wrong
};

#if DLPROF_HAS_LIBDEFLATE
/// Inflates gzip data of one member with libdeflate, whole, into `output` (empty, with room for
/// the size the trailer announces): libdeflate inflates a whole buffer several times faster
/// than zlib's stream.
inline WholeInflation inflate_whole(std::string_view compressed, ByteBuffer& output) {
  const std::uint64_t announced = GzipInflater::announced_size(compressed);
  if (announced == 0 || announced + ByteBuffer::kPadding > output.capacity()) return WholeInflation::Failed;
  struct Free {
    void operator()(libdeflate_decompressor* decompressor) const noexcept { libdeflate_free_decompressor(decompressor); }
  };
  const std::unique_ptr<libdeflate_decompressor, Free> decompressor(libdeflate_alloc_decompressor());
  if (decompressor == nullptr) throw std::bad_alloc();
  std::size_t used = 0;
  std::size_t written = 0;
  // libdeflate checks the member's CRC-32 and size.
  const libdeflate_result result = libdeflate_gzip_decompress_ex(decompressor.get(), compressed.data(), compressed.size(),
                                                                 output.data(), static_cast<std::size_t>(announced), &used,
                                                                 &written);
  if (result == LIBDEFLATE_INSUFFICIENT_SPACE) return WholeInflation::Longer;
  if (result != LIBDEFLATE_SUCCESS) return WholeInflation::Failed;
  const std::string_view rest = compressed.substr(used);
  if (!std::all_of(rest.begin(), rest.end(), [](char c) { return c == '\0'; })) return WholeInflation::Longer;  // another member
  output.resize(written);
  return WholeInflation::Done;
}
#endif

/// The text of gzip data inflated whole, when it is the size the trailer announces, within
/// `limit`: one member of less than 4 GiB, as trace files are. Nothing for a text longer than that
/// (several members, or 4 GiB or more, whose size the trailer gives modulo 2^32), which is then
/// inflated part by part as it is parsed, and for one longer than `limit`, which the parse in
/// parts refuses. Throws FileFailure for data that is not gzip as it must be.
inline std::optional<ByteBuffer> inflate_as_announced(std::string_view compressed, std::uint64_t limit,
                                                      const ByteProgress& progress) {
  const std::uint64_t announced = GzipInflater::announced_size(compressed);
  if (announced == 0 || announced > most_inflated(compressed, limit)) return std::nullopt;
  ByteBuffer output;
  output.reserve(static_cast<std::size_t>(announced) + ByteBuffer::kPadding);
  const PagesFaultedAhead faulted(output.data(), static_cast<std::size_t>(announced));  // joined before `output` goes
#if DLPROF_HAS_LIBDEFLATE
  switch (inflate_whole(compressed, output)) {
    case WholeInflation::Done:
      if (progress) progress(compressed.size(), compressed.size());
      return output;
    case WholeInflation::Longer: return std::nullopt;
    case WholeInflation::Failed: break;
  }
#endif
  GzipInflater inflater(compressed);
  std::uint64_t next_report = std::uint64_t{16} << 20;
  while (!inflater.finished()) {
    if (output.size() == announced) {
      char beyond = 0;  // a text longer than announced is not inflated whole
      if (inflater.inflate_into(&beyond, 1) != 0) return std::nullopt;
      continue;
    }
    output.resize(output.size() + inflater.inflate_into(output.data() + output.size(), announced - output.size()));
    if (progress && output.size() >= next_report) {
      progress(inflater.consumed(), compressed.size());
      next_report = output.size() + (std::uint64_t{16} << 20);
    }
  }
  if (progress) progress(compressed.size(), compressed.size());
  return output;
}

/// Inflates gzip data into a new buffer of at most `limit` bytes, whatever the size the trailer
/// announces: for a text read whole again (an error's line and column); a gzip bomb stops at
/// `limit`.
inline ByteBuffer gunzip(std::string_view compressed, std::uint64_t limit) {
  const std::uint64_t most = most_inflated(compressed, limit);
  ByteBuffer output;
  // The padding terminate() adds stays spare all along: no copy at the end.
  constexpr std::size_t kSpare = ByteBuffer::kPadding;
  output.reserve(static_cast<std::size_t>(std::min(
                     std::max<std::uint64_t>(GzipInflater::announced_size(compressed), compressed.size() * 4ull), most)) +
                 kSpare);
#if DLPROF_HAS_LIBDEFLATE
  if (inflate_whole(compressed, output) == WholeInflation::Done) return output;
#endif
  GzipInflater inflater(compressed);
  while (!inflater.finished()) {
    if (output.size() == output.capacity() - kSpare) {
      if (output.size() >= limit)
        fail_file(fmt::format("the gzip data decompresses to more than {} bytes (ReadOptions::max_json_bytes)", limit));
      output.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{output.capacity()} * 2, limit + kSpare)));
    }
    output.resize(output.size() + inflater.inflate_into(output.data() + output.size(), output.capacity() - kSpare - output.size()));
  }
  return output;
}

}  // namespace detail::reader
DLPROF_END_NAMESPACE
