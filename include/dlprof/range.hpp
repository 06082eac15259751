// dlprof/range.hpp: ranges, marks and counters, the annotations a training loop writes.
//
//   DLPROF_RANGE("forward", dlprof::Category::Forward);   // literal name: registered once
//   DLPROF_RANGE_F("epoch {} step {}", epoch, step);       // formatted after the window closes
//   DLPROF_FUNCTION();                                     // named after the enclosing function
//   dlprof::mark("checkpoint saved");
//   dlprof::counter("loss", loss);
//
// Cost: while no Profiler window is open and no NVTX tool is attached, a range is one relaxed
// load and a branch at each end. While recording, it reads the clock twice and writes one
// 32-byte event to its thread's ring: no lock, no allocation, no system call. A DLPROF_RANGE_F
// whose arguments are numbers, bools, chars or pointers writes a second event that keeps them,
// and its name is formatted when the window is assembled; with other arguments (strings, user
// types) it formats and interns its name as it begins. While GPU activity
// is recorded too, it also pushes an external correlation id so the kernels it launches link to
// it (detail/correlation.hpp). Ranges are also NVTX ranges in the "dlprof" domain when an NVTX
// tool (Nsight Systems) is attached.
#pragma once

#include <pthread.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/core.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/detail/recording/format_arguments.hpp"
#include "dlprof/detail/recording/nvtx.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/site.hpp"
#include "dlprof/detail/recording/slow_path.hpp"
#include "dlprof/category.hpp"

DLPROF_BEGIN_NAMESPACE

/// A range on the calling thread, from construction to destruction (LIFO, like NVTX's
/// scoped_range). Cannot be copied, moved or allocated on the heap.
///
/// Prefer the macros: DLPROF_RANGE for literal names (cheapest: the name is never copied),
/// DLPROF_RANGE_F for formatted names. Constructing a ScopedRange from a std::string_view
/// interns the name while recording (a hash and a per-thread cache lookup).
class ScopedRange {
 public:
  /// Range named by a static site (what DLPROF_RANGE and DLPROF_FUNCTION expand to).
  DLPROF_ALWAYS_INLINE explicit ScopedRange(const detail::Site& site) noexcept : flags_(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) {
      if (flags_ & detail::kNvtxAttached) detail::nvtx_push(site);
      if (flags_ & detail::kRecording) {
        name_ = detail::site_name_id(site);
        category_ = site.category;
        begin_recording();
      }
    }
  }

  /// Range with a name known only at run time.
  explicit ScopedRange(std::string_view name, Category category = Category::User) noexcept
      : flags_(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) begin_dynamic(name, category);
  }

  /// Range whose name is formatted with fmt, only when it will be recorded or shown in NVTX.
  /// The check is inline and the formatting out of line: left to the compiler, the whole
  /// constructor (fmt and a try/catch inside) is not inlined, and an idle DLPROF_RANGE_F would
  /// pay a call just to read the flag.
  template <class... Args>
  DLPROF_ALWAYS_INLINE ScopedRange(Category category, fmt::format_string<Args...> format, Args&&... args) noexcept
      : flags_(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) begin_formatted(category, format, std::forward<Args>(args)...);
  }

  DLPROF_ALWAYS_INLINE ~ScopedRange() {
    if (DLPROF_UNLIKELY(flags_ != 0)) {
      if (flags_ & detail::kRecording) {
        const std::int64_t end = detail::now_ticks();
        if (flags_ & kOpenOnRing)
          if (detail::ThreadRing* ring = detail::t_ring) ring->close_range();  // none in a fork's child
        if (stack_ != 0) detail::push_event(detail::stack_event(stack_, begin_));
        detail::push_event(detail::Event{name_, begin_, {end}, detail::RecordKind::Range, category_, correlation_sequence_});
        if (correlation_sequence_ != 0) detail::pop_external_correlation();
      }
      if (flags_ & detail::kNvtxAttached) detail::nvtx_pop();
    }
  }

  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;
  ScopedRange(ScopedRange&&) = delete;
  ScopedRange& operator=(ScopedRange&&) = delete;
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

 protected:
  /// A range that has not begun: a derived range begins itself.
  explicit ScopedRange(std::uint32_t flags) noexcept : flags_(flags) {}

  /// Set in flags_ when the range is on its thread's stack of open ranges (detail::ThreadRing).
  static constexpr std::uint32_t kOpenOnRing = 1u << 31;

  /// The recording part of a constructor, once name_ and category_ are set: the ring first, so
  /// that attaching a thread's first ring is not timed, and the call stack (with_stack), so that
  /// taking it is not either; then the start time, then the range on the ring's stack of open
  /// ranges, with the arguments its name is formatted with where it has them.
  DLPROF_ALWAYS_INLINE void begin_recording(const detail::FormatArguments* arguments = nullptr) noexcept {
    detail::ThreadRing* ring = detail::current_ring();
    if (DLPROF_UNLIKELY(flags_ & detail::kWithStack)) capture_stack();
    if (flags_ & detail::kCorrelating)
      correlation_sequence_ = detail::push_external_correlation(name_, stack_, detail::RecordKind::Range, arguments);
    begin_ = detail::now_ticks();
    if (DLPROF_LIKELY(ring != nullptr)) {
      ring->open_range(name_, begin_, category_, correlation_sequence_, stack_, arguments);
      flags_ |= kOpenOnRing;
    }
  }

  /// Out of line, so that a range's inlined code grows by a call; the slow path takes the stack
  /// from this function's caller, the range's, outwards.
  DLPROF_NOINLINE void capture_stack() noexcept {
    if (const detail::RecordingSlowPath* slow_path = detail::recording_slow_path())
      stack_ = slow_path->capture_stack(__builtin_frame_address(0));
  }

  /// Formatted names are written into a per-thread array; one longer than it is formatted again
  /// into a per-thread string (its arguments' formatters run twice).
  static constexpr std::size_t kFormatArray = 256;

  template <class... Args>
  DLPROF_NOINLINE void begin_formatted(Category category, fmt::format_string<Args...> format, Args&&... args) noexcept {
    thread_local char formatted[kFormatArray];
    thread_local std::string longer;
    std::string_view name;
    // Checked against the arguments where the range was written; formatted here with them as
    // lvalues, whose format_string type differs (and is consteval to make in C++20).
    const auto checked = fmt::runtime(static_cast<fmt::string_view>(format));
    try {
      const auto written = fmt::format_to_n(formatted, kFormatArray, checked, args...);
      if (written.size <= kFormatArray) {
        name = std::string_view(formatted, written.size);
      } else {
        longer.clear();
        fmt::format_to(std::back_inserter(longer), checked, args...);
        name = longer;
      }
    } catch (...) {  // a bad argument (or no memory) must not stop training: record the format string itself
      const fmt::string_view raw = format;
      name = std::string_view(raw.data(), raw.size());
    }
    begin_dynamic(name, category);
  }

  void begin_dynamic(std::string_view name, Category category) noexcept {
    if (flags_ & detail::kNvtxAttached) detail::nvtx_push(name, category);
    if (flags_ & detail::kRecording) {
      try {
        name_ = detail::intern(name);
      } catch (...) {  // no memory to intern the name: keep NVTX balanced, record nothing
        flags_ &= ~detail::kRecording;
        return;
      }
      category_ = category;
      begin_recording();
    }
  }

  std::uint32_t flags_;
  std::uint32_t correlation_sequence_ = 0;  // non-zero: an external correlation id was pushed
  Category category_ = Category::User;
  std::uint32_t stack_ = 0;  // with_stack: its id in the stack table (0: none)
  detail::NameId name_ = 0;
  std::int64_t begin_ = 0;
};

/// What DLPROF_RANGE_F expands to: a range named by `format_site`'s format. While only
/// recording, arguments that can be kept (detail::kFormatArgumentsKeepable) are copied into the
/// range, and its name is formatted when its window is assembled; otherwise, and for NVTX, the
/// name is formatted as it begins.
class FormattedRange : public ScopedRange {
 public:
  template <class... Args>
  DLPROF_ALWAYS_INLINE FormattedRange(const detail::Site& format_site, fmt::format_string<Args...> format, Args&&... args) noexcept
      : ScopedRange(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) {
      if constexpr (detail::kFormatArgumentsKeepable<Args...>) {
        if ((flags_ & (detail::kRecording | detail::kNvtxAttached)) == detail::kRecording) {
          name_ = detail::format_site_name_id(format_site);
          category_ = format_site.category;
          arguments_ = detail::keep_format_arguments(args...);
          flags_ |= kKeptArguments;
          begin_recording(&arguments_);
          return;
        }
      }
      begin_formatted(format_site.category, format, std::forward<Args>(args)...);
    }
  }

  /// A range with kept arguments ends here: its arguments and its Range go to the ring together.
  /// Any other ends in ~ScopedRange.
  DLPROF_ALWAYS_INLINE ~FormattedRange() {
    if (DLPROF_UNLIKELY(flags_ & kKeptArguments)) {
      const std::int64_t end = detail::now_ticks();
      if (flags_ & kOpenOnRing)
        if (detail::ThreadRing* ring = detail::t_ring) ring->close_range();  // none in a fork's child
      if (stack_ != 0) detail::push_event(detail::stack_event(stack_, begin_));
      detail::push_formatted_range(name_, begin_, end, category_, correlation_sequence_, arguments_);
      if (correlation_sequence_ != 0) detail::pop_external_correlation();
      flags_ = 0;
    }
  }

  FormattedRange(const FormattedRange&) = delete;
  FormattedRange& operator=(const FormattedRange&) = delete;

 private:
  /// Set in flags_ when arguments_ holds the arguments the name is formatted with.
  static constexpr std::uint32_t kKeptArguments = 1u << 30;
  detail::FormatArguments arguments_;  // set with kKeptArguments
};

/// An instant event on the calling thread's timeline (and an NVTX mark).
inline void mark(std::string_view name) noexcept {
  const std::uint32_t flags = detail::active_flags();
  if (DLPROF_LIKELY(flags == 0)) return;
  if (flags & detail::kNvtxAttached) detail::nvtx_mark(name);
  if (flags & detail::kRecording) {
    try {
      const detail::NameId id = detail::intern(name);
      const std::int64_t now = detail::now_ticks();
      detail::push_event(detail::Event{id, now, {now}, detail::RecordKind::Instant, Category::User});
    } catch (...) {  // no memory to intern the name: the mark is lost
    }
  }
}

/// One sample of a counter track (loss, samples/s, queue depth...), drawn as a graph by
/// Perfetto and chrome://tracing.
inline void counter(std::string_view name, double value) noexcept {
  if (DLPROF_LIKELY(!detail::is_recording())) return;
  try {
    detail::Event event{detail::intern(name), detail::now_ticks(), {0}, detail::RecordKind::Counter, Category::User};
    event.value = value;
    detail::push_event(event);
  } catch (...) {  // no memory to intern the name: the sample is lost
  }
}

/// Names the calling thread in traces (and for the OS, truncated to 15 characters).
inline void set_thread_name(std::string_view name) {
  char os_name[16] = {};
  name.substr(0, sizeof(os_name) - 1).copy(os_name, sizeof(os_name) - 1);
  pthread_setname_np(pthread_self(), os_name);
  if (const detail::RecordingSlowPath* slow_path = detail::recording_slow_path())
    slow_path->set_thread_name(name);  // renames the ring too
  else
    detail::t_pending_thread_name.assign(name.data(), name.size());  // no Profiler has started yet
}

DLPROF_END_NAMESPACE

#if defined(__COUNTER__)
#  define DLPROF_UNIQUE_(prefix) DLPROF_CONCAT_(prefix, __COUNTER__)
#else
#  define DLPROF_UNIQUE_(prefix) DLPROF_CONCAT_(prefix, __LINE__)
#endif

/// A format literal that fmt checks against its arguments at compile time. Where fmt's
/// format_string is consteval (C++20), the literal itself, through fmt's public API. In C++17
/// fmt's public way is FMT_STRING, whose <fmt/format.h> would take an instrumented file from
/// 1.24x to 1.58x NVTX3's compile time; this is FMT_STRING without it (fmt::detail::compile_string
/// is what FMT_STRING derives from, in <fmt/core.h>).
#if defined(FMT_HAS_CONSTEVAL)
#  define DLPROF_FMT_STRING_(literal) literal
#else
#  define DLPROF_FMT_STRING_(literal)                                                               \
    [] {                                                                                           \
      struct DlprofFormatString : ::fmt::detail::compile_string {                                  \
        using char_type [[maybe_unused]] = char;                                                   \
        constexpr operator ::fmt::string_view() const { return ::fmt::string_view(literal, sizeof(literal) - 1); } \
      };                                                                                           \
      return DlprofFormatString{};                                                                 \
    }()
#endif

#if defined(DLPROF_DISABLE)
// Compiled out: the macros expand to nothing and their arguments are not evaluated.
#  define DLPROF_RANGE(...) static_cast<void>(0)
#  define DLPROF_RANGE_F(...) static_cast<void>(0)
#  define DLPROF_FUNCTION() static_cast<void>(0)
#else
/// DLPROF_RANGE("name") or DLPROF_RANGE("name", dlprof::Category::Forward): a range from here to
/// the end of the enclosing scope. The name must be a string literal.
#  define DLPROF_RANGE(...) DLPROF_RANGE_AS_(DLPROF_UNIQUE_(dlprof_range_), __VA_ARGS__)
/// DLPROF_RANGE_F("epoch {} step {}", e, s): a range whose name is formatted by fmt (checked at
/// compile time), only while recording or while an NVTX tool is attached. The format must be a
/// string literal.
/// One declaration, so that it stands alone as the body of a loop: the site is a static of a
/// lambda of its own, constant-initialised (no guard).
#  define DLPROF_RANGE_F(format, ...)                                                              \
    const ::dlprof::FormattedRange DLPROF_UNIQUE_(dlprof_range_)(                                   \
        []() -> const ::dlprof::detail::Site& {                                                    \
          static ::dlprof::detail::Site site{format};                                              \
          return site;                                                                             \
        }(),                                                                                       \
        DLPROF_FMT_STRING_(format), __VA_ARGS__)
/// A range named after the enclosing function.
#  define DLPROF_FUNCTION() DLPROF_RANGE(__func__)
#  define DLPROF_RANGE_AS_(id, ...)                                    \
    static ::dlprof::detail::Site DLPROF_CONCAT_(id, _site){__VA_ARGS__}; \
    const ::dlprof::ScopedRange id { DLPROF_CONCAT_(id, _site) }
#endif
