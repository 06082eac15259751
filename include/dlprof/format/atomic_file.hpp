// dlprof/format/atomic_file.hpp: the file a trace or a report is written to, so that no reader
// ever sees half of one (DESIGN.md: every file written is valid JSON or not there at all), and
// so that a path that is a symbolic link, a character device or a FIFO is written as a user means
// it. The trace writer (export/chrome_trace.hpp) and dlprof-report's --output write through here.
#pragma once

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

/// mkdir -p: creates `dir` and the directories above it that are missing. Returns 0, or the errno
/// of the first component that could not be made a directory (ENOTDIR where a file is in the way).
inline int make_directories(const std::string& dir) {
  std::string prefix;
  prefix.reserve(dir.size());
  for (std::size_t i = 0; i <= dir.size(); ++i) {
    if (i < dir.size()) prefix.push_back(dir[i]);
    const bool component_ends = i == dir.size() || (dir[i] == '/' && i + 1 < dir.size() && dir[i + 1] != '/');
    if (!component_ends || prefix.empty() || prefix == "/") continue;
    if (::mkdir(prefix.c_str(), 0777) == 0) continue;
    const int error = errno;
    struct stat status {};
    if (error == EEXIST || error == EACCES || error == EROFS) {
      if (::stat(prefix.c_str(), &status) == 0) {
        if (S_ISDIR(status.st_mode)) continue;
        return ENOTDIR;
      }
    }
    return error;
  }
  return 0;
}

/// SIGPIPE held off the calling thread while it writes to a FIFO: a reader that goes away makes
/// the write fail with EPIPE, as for any other write error, instead of ending the process.
class SigpipeBlocked {
 public:
  SigpipeBlocked() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    already_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &previous_) == 0 && sigismember(&previous_, SIGPIPE) == 0;
  }
  ~SigpipeBlocked() {
    if (!blocked_) return;
    sigset_t pending;
    sigpending(&pending);
    if (!already_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);  // the one our write raised: taken, never delivered
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
  bool already_pending_ = false;
  bool blocked_ = false;
};

/// The file a trace (or a report) is written to; gzip-compressed when asked. A regular file, or
/// a path that does not exist yet, is written under a temporary name in the same directory and
/// renamed into place by commit(), so a reader sees either nothing or the whole file. A symbolic
/// link is followed first: its target is replaced (created when it does not exist) and the link
/// stays a link. A character device or a FIFO is opened and written as it is, never replaced
/// (saving to /dev/null as root must not replace /dev/null; opening a FIFO waits for its reader).
/// Anything else (a directory, a block device, a socket) is refused. Destroyed without commit(),
/// it removes its temporary file. Errors throw std::runtime_error "dlprof: cannot write <what>
/// '<path>': <step>: <reason>", naming the path as given.
class AtomicFile {
 public:
  AtomicFile(std::string path, bool gzip, std::string_view what = "trace")
      : path_(std::move(path)), what_(what), gzip_(gzip) {
    // stat() follows links as open() will, /proc's magic ones (/dev/stdout) included.
    struct stat status {};
    if (::stat(path_.c_str(), &status) == 0 && !S_ISREG(status.st_mode)) {
      if (!S_ISCHR(status.st_mode) && !S_ISFIFO(status.st_mode))
        fail_because(S_ISDIR(status.st_mode) ? "it is a directory"
                                             : "it is not a regular file, a character device or a FIFO");
      direct_ = true;
    }
    errno = 0;
    if (direct_) {
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    } else {
      static std::atomic<std::uint64_t> sequence{0};
      target_ = follow_links();
      temporary_ = fmt::format("{}.tmp.{}.{}", target_, static_cast<long>(::getpid()),
                               sequence.fetch_add(1, std::memory_order_relaxed));
      fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd_ < 0) fail("open", errno);
    if (gzip_) {
      gz_ = gzdopen(fd_, "wb6");
      if (gz_ == nullptr) {
        const int error = errno != 0 ? errno : ENOMEM;
        discard();
        fail("open", error);
      }
      fd_ = -1;  // closed by gzclose
    }
  }

  ~AtomicFile() {
    if (!committed_) discard();
  }

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view bytes) {
    std::optional<SigpipeBlocked> sigpipe;
    if (direct_) sigpipe.emplace();
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
    std::optional<SigpipeBlocked> sigpipe;
    if (direct_) sigpipe.emplace();
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
    if (!direct_ && std::rename(temporary_.c_str(), target_.c_str()) != 0) fail("rename", errno);
    committed_ = true;
  }

 private:
  /// The path with its symbolic links followed (at most 40, the kernel's limit), each relative
  /// link from the directory that holds it; the last one's target need not exist. The temporary
  /// file goes beside that target, so that the rename replaces the target and not the link.
  std::string follow_links() const {
    std::string target = path_;
    for (int links = 0; links < 40; ++links) {
      struct stat status {};
      if (::lstat(target.c_str(), &status) != 0 || !S_ISLNK(status.st_mode)) return target;
      char link[PATH_MAX];
      const ssize_t size = ::readlink(target.c_str(), link, sizeof(link));
      if (size < 0) fail("readlink", errno);
      if (static_cast<std::size_t>(size) == sizeof(link)) fail("readlink", ENAMETOOLONG);
      const std::string_view next(link, static_cast<std::size_t>(size));
      const std::size_t slash = target.rfind('/');
      if (next.substr(0, 1) == "/" || slash == std::string::npos)
        target.assign(next);
      else
        target = target.substr(0, slash + 1).append(next);
    }
    fail("open", ELOOP);
  }

  void discard() noexcept {
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
    gz_ = nullptr;
    fd_ = -1;
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
  }

  [[noreturn]] void fail(std::string_view step, int error) const {
    fail_because(fmt::format("{}: {}", step, errno_text(error)));
  }
  [[noreturn]] void fail_because(std::string_view reason) const {
    throw std::runtime_error(fmt::format("dlprof: cannot write {}{}'{}': {}", what_, what_.empty() ? "" : " ", path_, reason));
  }

  std::string path_;
  std::string what_;
  std::string target_;     // where the temporary file is renamed to (path_ with its links followed)
  std::string temporary_;  // empty when the file is written directly
  bool gzip_;
  bool direct_ = false;  // a character device or a FIFO: written in place, never renamed over
  gzFile gz_ = nullptr;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace detail
DLPROF_END_NAMESPACE
