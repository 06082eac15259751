// dlprof/detail/recording/alternate_signal_stack.hpp: a stack of its own for the fatal-signal
// handler on each thread that records.
//
// A runaway recursion dies of SIGSEGV on the guard page below its stack; a handler run on that
// stack faults again at once, and the flight recorder's crash file is never written. The handler
// is installed with SA_ONSTACK, which runs it on the thread's alternate signal stack where the
// thread has one; threads do not inherit one, so once a flight recorder has installed the handler,
// each thread that records gets its own when it attaches its ring, and it is freed when the
// thread ends. A stack the program (or a sanitizer) installed is kept and used.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

class AlternateSignalStack {
 public:
  /// Room for the crash handler's frames (its write buffer, the open ranges, the path: about
  /// 14 KiB) and the kernel's signal frame, with a wide margin for sanitizer builds.
  static constexpr std::size_t kMinBytes = 64 * 1024;

  AlternateSignalStack() = default;
  ~AlternateSignalStack() { release(); }
  AlternateSignalStack(const AlternateSignalStack&) = delete;
  AlternateSignalStack& operator=(const AlternateSignalStack&) = delete;

  /// Gives the calling thread an alternate signal stack, unless it has one (its own, or this).
  /// Failing to (no memory) leaves the thread as it was: only a crash on an overflowed stack
  /// then goes without a crash file.
  void install() noexcept {
    if (memory_ != nullptr) return;
    stack_t current{};
    if (::sigaltstack(nullptr, &current) != 0 || (current.ss_flags & SS_DISABLE) == 0) return;
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t wanted = 4 * static_cast<std::size_t>(SIGSTKSZ) > kMinBytes ? 4 * static_cast<std::size_t>(SIGSTKSZ) : kMinBytes;
    const std::size_t usable = (wanted + page - 1) / page * page;
    void* memory = ::mmap(nullptr, usable + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return;
    // A guard page below it: a handler that overflows this stack faults instead of writing over
    // whatever lies beneath.
    ::mprotect(memory, page, PROT_NONE);
    stack_t stack{};
    stack.ss_sp = static_cast<char*>(memory) + page;
    stack.ss_size = usable;
    stack.ss_flags = 0;
    if (::sigaltstack(&stack, nullptr) != 0) {
      ::munmap(memory, usable + page);
      return;
    }
    memory_ = memory;
    mapped_bytes_ = usable + page;
    page_ = page;
  }

  /// Whether this object's stack is installed: for tests.
  bool installed() const noexcept { return memory_ != nullptr; }

 private:
  /// Takes the stack down and frees it. Where the program has since installed a stack of its
  /// own, that one stays installed; where the thread is running on this one (a handler that ends
  /// the thread), it is left mapped rather than freed under the running handler.
  void release() noexcept {
    if (memory_ == nullptr) return;
    stack_t current{};
    if (::sigaltstack(nullptr, &current) == 0 && current.ss_sp == static_cast<char*>(memory_) + page_) {
      if ((current.ss_flags & SS_ONSTACK) != 0) return;
      stack_t disabled{};
      disabled.ss_flags = SS_DISABLE;
      if (::sigaltstack(&disabled, nullptr) != 0) return;
    }
    ::munmap(memory_, mapped_bytes_);
    memory_ = nullptr;
  }

  void* memory_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  std::size_t page_ = 0;
};

}  // namespace detail
DLPROF_END_NAMESPACE
