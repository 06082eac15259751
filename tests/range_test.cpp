// Tests of range.hpp: what DLPROF_RANGE, DLPROF_RANGE_F, DLPROF_FUNCTION, ScopedRange, mark,
// counter and set_thread_name put in a trace, that the idle and recording paths allocate nothing,
// and the interned-name table behind dynamic names.
#include <dlprof/profiler.hpp>
#include <dlprof/detail/recording/ring_registry.hpp>  // the tests' view of the rings

#include <fmt/format.h>  // fmt::formatter<int>::format, which CountedArgument's formatter calls
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// Every allocation of the process goes through these replacements; the ones made by a thread
// while its t_count_allocations is set are counted. The array and nothrow forms of the standard
// library forward to these, so they are counted too.
namespace {

std::atomic<std::size_t> g_allocations{0};
thread_local bool t_count_allocations = false;  // constant-initialised: safe to read in operator new

void* allocate(std::size_t size, std::size_t alignment) {
  if (t_count_allocations) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* block = alignment <= alignof(std::max_align_t)
                    ? std::malloc(size)
                    : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void* operator new(std::size_t size, std::align_val_t alignment) {
  return allocate(size, static_cast<std::size_t>(alignment));
}
// Out of line: inlined into a delete-expression, free() of what operator new returned is taken by
// g++ 12 (-Wmismatched-new-delete) for a mismatch.
[[gnu::noinline]] void operator delete(void* block) noexcept { std::free(block); }
[[gnu::noinline]] void operator delete(void* block, std::size_t) noexcept { std::free(block); }
[[gnu::noinline]] void operator delete(void* block, std::align_val_t) noexcept { std::free(block); }
[[gnu::noinline]] void operator delete(void* block, std::size_t, std::align_val_t) noexcept { std::free(block); }

namespace {

using dlprof::Category;
using dlprof::EventKind;
using dlprof::Trace;
using dlprof::TraceEvent;

// Counts the calling thread's allocations from construction to count().
class AllocationCounter {
 public:
  AllocationCounter() {
    g_allocations.store(0);
    t_count_allocations = true;
  }
  ~AllocationCounter() { t_count_allocations = false; }
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;

  std::size_t count() const { return g_allocations.load(); }
};

// Opens a window with a default Profiler, runs `body` on this thread and returns the trace.
template <class Body>
std::shared_ptr<const Trace> record(Body&& body) {
  dlprof::Profiler profiler;
  profiler.start();
  body();
  profiler.stop();
  return profiler.last_trace();
}

std::vector<TraceEvent> events_named(const Trace& trace, std::string_view name) {
  std::vector<TraceEvent> found;
  for (const TraceEvent& event : trace.events)
    if (trace.name_of(event) == name) found.push_back(event);
  return found;
}

bool contains(const TraceEvent& outer, const TraceEvent& inner) {
  return outer.start_ns <= inner.start_ns && inner.end_ns <= outer.end_ns;
}

std::size_t index_of(const Trace& trace, std::string_view name) {
  for (std::size_t i = 0; i < trace.events.size(); ++i)
    if (trace.name_of(trace.events[i]) == name) return i;
  return trace.events.size();
}

void function_annotated_with_dlprof_function() { DLPROF_FUNCTION(); }

TEST(RangeTest, RangeRecordsItsLiteralNameAndCategory) {
  const auto trace = record([] { DLPROF_RANGE("forward_pass", Category::Forward); });

  ASSERT_NE(trace, nullptr);
  const auto ranges = events_named(*trace, "forward_pass");
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].kind, EventKind::Range);
  EXPECT_EQ(ranges[0].category, Category::Forward);
  EXPECT_GE(ranges[0].end_ns, ranges[0].start_ns);
}

TEST(RangeTest, RangeWithoutCategoryIsUser) {
  const auto trace = record([] { DLPROF_RANGE("uncategorised"); });

  ASSERT_NE(trace, nullptr);
  const auto ranges = events_named(*trace, "uncategorised");
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].category, Category::User);
}

TEST(RangeTest, FunctionRangeIsNamedAfterTheEnclosingFunction) {
  const auto trace = record([] { function_annotated_with_dlprof_function(); });

  ASSERT_NE(trace, nullptr);
  const auto ranges = events_named(*trace, "function_annotated_with_dlprof_function");
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].kind, EventKind::Range);
}

TEST(RangeTest, NestedRangesNestInTheTrace) {
  const auto trace = record([] {
    DLPROF_RANGE("outer");
    {
      DLPROF_RANGE("inner");
    }
  });

  ASSERT_NE(trace, nullptr);
  const auto outer = events_named(*trace, "outer");
  const auto inner = events_named(*trace, "inner");
  ASSERT_EQ(outer.size(), 1u);
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_TRUE(contains(outer[0], inner[0]));
  EXPECT_LT(index_of(*trace, "outer"), index_of(*trace, "inner")) << "an enclosing range comes first";
  EXPECT_EQ(trace->clipped_ranges, 0u);
}

TEST(RangeTest, FormattedRangeRecordsTheFormattedName) {
  const auto trace = record([] {
    const int epoch = 3;
    const int step = 17;
    DLPROF_RANGE_F("epoch {} step {}", epoch, step);
  });

  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(events_named(*trace, "epoch 3 step 17").size(), 1u);
}

TEST(RangeTest, FormattedRangeLongerThanItsArrayIsRecordedWhole) {
  const std::string long_part(300, 'n');
  const auto trace = record([&] { DLPROF_RANGE_F("layer {} {}", 4, long_part); });

  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(events_named(*trace, "layer 4 " + long_part).size(), 1u);
}

// An argument whose formatting is observable: every call of its formatter is counted.
struct CountedArgument {
  int value;
};
std::atomic<int> g_format_calls{0};

}  // namespace

template <>
struct fmt::formatter<CountedArgument> : fmt::formatter<int> {
  template <class FormatContext>
  auto format(const CountedArgument& argument, FormatContext& context) const -> decltype(context.out()) {
    g_format_calls.fetch_add(1);
    return fmt::formatter<int>::format(argument.value, context);
  }
};

namespace {

TEST(RangeTest, FormattedRangeFormatsOnlyWhileRecording) {
  if (dlprof::detail::active_flags() & dlprof::detail::kNvtxAttached)
    GTEST_SKIP() << "an NVTX tool is attached: names are formatted for it even when not recording";
  ASSERT_EQ(dlprof::detail::active_flags(), 0u) << "no Profiler may be recording here";
  g_format_calls.store(0);

  {
    DLPROF_RANGE_F("lazy {}", CountedArgument{5});
  }
  EXPECT_EQ(g_format_calls.load(), 0) << "formatted although nothing records it";

  const auto trace = record([] { DLPROF_RANGE_F("lazy {}", CountedArgument{6}); });
  EXPECT_EQ(g_format_calls.load(), 1);
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(events_named(*trace, "lazy 6").size(), 1u);
}

// Numbers, bools, chars and pointers are kept and formatted when the window is assembled: the
// name is what fmt gives for the same values, type by type and with format specs.
TEST(RangeTest, FormattedRangeKeepsNumbersAndFormatsThemAsFmtWould) {
  const signed char tiny = -7;
  const unsigned short small = 65535;
  const std::int64_t big = -(std::int64_t{1} << 40);
  const std::uint64_t huge = ~std::uint64_t{0};
  const float ratio = 0.1f;
  const double loss = 2.0 / 3.0;
  int object = 0;
  const void* address = &object;
  const auto trace = record([&] {
    DLPROF_RANGE_F("a {} {} {:x}", tiny, small, huge);
    DLPROF_RANGE_F("b {} {:>6} {}", big, true, 'q');
    DLPROF_RANGE_F("c {} {:.3f} {:e}", ratio, loss, 1e-300);
    DLPROF_RANGE_F("d {} {}", address, nullptr);
    DLPROF_RANGE_F("braces {{}} {}", 1);
  });

  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(events_named(*trace, fmt::format("a {} {} {:x}", tiny, small, huge)).size(), 1u);
  EXPECT_EQ(events_named(*trace, fmt::format("b {} {:>6} {}", big, true, 'q')).size(), 1u);
  EXPECT_EQ(events_named(*trace, fmt::format("c {} {:.3f} {:e}", ratio, loss, 1e-300)).size(), 1u);
  EXPECT_EQ(events_named(*trace, fmt::format("d {} {}", address, static_cast<const void*>(nullptr))).size(), 1u);
  EXPECT_EQ(events_named(*trace, "braces {} 1").size(), 1u);
  EXPECT_EQ(events_named(*trace, "c 0.1 0.667 1.000000e-300").size(), 1u) << "a float is formatted as a float, not a double";
}

TEST(RangeTest, FormattedRangeKeepsNothingItDoesNotOwn) {
  std::string text = "before";
  const auto trace = record([&] {
    DLPROF_RANGE_F("text {} {}", std::string_view(text), 1);
    text = "after!";  // the view now shows other bytes: the name was formatted as the range began
  });

  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(events_named(*trace, "text before 1").size(), 1u);
}

TEST(RangeTest, FormattedRangeWithMoreArgumentsThanAreKeptIsFormattedAtOnce) {
  static_assert(!dlprof::detail::kFormatArgumentsKeepable<std::int64_t, std::int64_t, std::int64_t>);
  const auto trace = record([] { DLPROF_RANGE_F("{} {} {}", std::int64_t{1}, std::int64_t{2}, std::int64_t{3}); });

  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(events_named(*trace, "1 2 3").size(), 1u);
}

TEST(RangeTest, FormattedRangeOpenAtTheWindowsEndKeepsItsName) {
  dlprof::Profiler profiler;
  profiler.start();
  {
    DLPROF_RANGE_F("around stop {} {:.1f}", 42, 0.5);
    profiler.stop();
  }
  ASSERT_NE(profiler.last_trace(), nullptr);
  EXPECT_EQ(events_named(*profiler.last_trace(), "around stop 42 0.5").size(), 1u);
  EXPECT_EQ(profiler.last_trace()->clipped_ranges, 1u);
}

// A full ring drops a formatted range whole: never its arguments alone, which would leave the
// range named by its bare format, nor the range alone.
TEST(RangeTest, AFullRingDropsAFormattedRangeWithItsArguments) {
  constexpr int kRanges = 1000;
  dlprof::Profiler profiler(dlprof::ProfilerOptions().events_per_thread(64));
  profiler.start();
  for (int i = 0; i < kRanges; ++i) {
    DLPROF_RANGE_F("dropping {}", i);
  }
  profiler.stop();

  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  std::size_t recorded = 0;
  for (const TraceEvent& event : trace->events) {
    if (event.kind != EventKind::Range) continue;
    EXPECT_THAT(std::string(trace->name_of(event)), testing::MatchesRegex("dropping [0-9]+"));
    ++recorded;
  }
  EXPECT_EQ(recorded, 32u) << "64 slots hold 32 formatted ranges";
  EXPECT_EQ(recorded + trace->dropped_events, static_cast<std::size_t>(kRanges));
}

TEST(RangeTest, ScopedRangeInternsADynamicNameThatDiesRightAfterTheRangeBegins) {
  const std::string expected = "dynamic_range_" + std::string(64, 'x');  // too long for the small-string buffer
  const auto trace = record([&] {
    std::optional<std::string> name(expected);
    const dlprof::ScopedRange range(*name, Category::DataLoader);
    // Overwrite, then free, the caller's characters: a range that kept a view of them instead of
    // interning them would show '?'s (or trip ASan) when the trace is built.
    name->assign(name->size(), '?');
    name.reset();
  });

  ASSERT_NE(trace, nullptr);
  const auto ranges = events_named(*trace, expected);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].category, Category::DataLoader);
  EXPECT_TRUE(events_named(*trace, std::string(expected.size(), '?')).empty());
}

TEST(RangeTest, ScopedRangeTakesEveryKindOfStringWithoutACategory) {
  const std::string owned = "from_std_string";
  const char* pointer = "from_const_char_pointer";
  const auto trace = record([&] {
    { const dlprof::ScopedRange range(owned); }
    { const dlprof::ScopedRange range(pointer); }
    { const dlprof::ScopedRange range("from_literal"); }
    { const dlprof::ScopedRange range(std::string_view("from_string_view")); }
  });

  ASSERT_NE(trace, nullptr);
  for (const char* name : {"from_std_string", "from_const_char_pointer", "from_literal", "from_string_view"}) {
    const auto ranges = events_named(*trace, name);
    ASSERT_EQ(ranges.size(), 1u) << name;
    EXPECT_EQ(ranges[0].category, Category::User) << name;
  }
}

void throw_from_nested_ranges() {
  DLPROF_RANGE("unwound_outer");
  DLPROF_RANGE("unwound_inner");
  throw std::runtime_error("thrown inside two ranges");
}

TEST(RangeTest, ExceptionUnwindingClosesRangesInNestingOrder) {
  const auto trace = record([] {
    EXPECT_THROW(throw_from_nested_ranges(), std::runtime_error);
    DLPROF_RANGE("after_unwind");
  });

  ASSERT_NE(trace, nullptr);
  const auto outer = events_named(*trace, "unwound_outer");
  const auto inner = events_named(*trace, "unwound_inner");
  const auto after = events_named(*trace, "after_unwind");
  ASSERT_EQ(outer.size(), 1u);
  ASSERT_EQ(inner.size(), 1u);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_TRUE(contains(outer[0], inner[0]));
  EXPECT_GE(after[0].start_ns, outer[0].end_ns) << "the unwound ranges must end before the next one begins";
  // Nesting came from the destructors' order, not from the collector clipping ranges into shape.
  EXPECT_EQ(trace->clipped_ranges, 0u);
}

TEST(RangeTest, MarkAndCounterAreRecorded) {
  const auto trace = record([] {
    dlprof::mark("checkpoint_saved");
    dlprof::counter("loss", 0.125);
    dlprof::counter("loss", -3.75);
  });

  ASSERT_NE(trace, nullptr);
  const auto marks = events_named(*trace, "checkpoint_saved");
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0].kind, EventKind::Instant);
  EXPECT_EQ(marks[0].end_ns, marks[0].start_ns);

  std::vector<double> values;
  for (const TraceEvent& sample : events_named(*trace, "loss")) {
    EXPECT_EQ(sample.kind, EventKind::Counter);
    values.push_back(sample.value);
  }
  // Exact values: a sample is stored as the double it was given.
  EXPECT_THAT(values, ::testing::UnorderedElementsAre(0.125, -3.75));
}

TEST(RangeTest, RangesOutsideAWindowAreNotRecorded) {
  {
    DLPROF_RANGE("before_any_window");
  }
  dlprof::Profiler profiler;
  profiler.start();
  {
    DLPROF_RANGE("first_window");
  }
  profiler.stop();
  const auto first = profiler.last_trace();
  {
    DLPROF_RANGE("between_windows");
  }
  profiler.start();
  {
    DLPROF_RANGE("second_window");
  }
  profiler.stop();
  const auto second = profiler.last_trace();

  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->events.size(), 1u);
  EXPECT_EQ(events_named(*first, "first_window").size(), 1u);
  EXPECT_EQ(second->events.size(), 1u);
  EXPECT_EQ(events_named(*second, "second_window").size(), 1u);
}

TEST(RangeTest, IdleThreadNeverAttachesARing) {
  ASSERT_FALSE(dlprof::detail::is_recording());
  bool attached_ring = true;
  std::thread idle([&] {
    for (int i = 0; i < 1'000; ++i) {
      DLPROF_RANGE("idle_thread_range");
    }
    dlprof::mark("idle_thread_mark");
    attached_ring = dlprof::detail::t_ring != nullptr;
  });
  idle.join();
  // Idle annotations write nothing, so the thread never needed a ring.
  EXPECT_FALSE(attached_ring);
}

TEST(RangeAllocationTest, CounterSeesAllocationsOfTheMeasuredThread) {
  // Without this the zero-allocation tests below could pass with a counter that never counts.
  static std::atomic<void*> escape{nullptr};  // keeps the compiler from eliding the allocation
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    escape.store(::operator new(64));
    allocations = counter.count();
  }
  ::operator delete(escape.exchange(nullptr));
  EXPECT_EQ(allocations, 1u);
}

TEST(RangeAllocationTest, RecordingRangesAllocateNothing) {
  constexpr std::size_t kRanges = 10'000;
  dlprof::Profiler profiler;
  profiler.start();
  // start() attached this thread's ring: the one allocation a recording thread makes.
  ASSERT_NE(dlprof::detail::t_ring, nullptr);

  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (std::size_t i = 0; i < kRanges; ++i) {
      DLPROF_RANGE("allocation_free_range");
    }
    allocations = counter.count();
  }
  profiler.stop();

  EXPECT_EQ(allocations, 0u);
  // The ranges measured were really recorded, not skipped.
  ASSERT_NE(profiler.last_trace(), nullptr);
  EXPECT_EQ(events_named(*profiler.last_trace(), "allocation_free_range").size(), kRanges);
}

// A DLPROF_RANGE_F of numbers neither formats nor interns its name while recording: ten thousand
// names, no allocation.
TEST(RangeAllocationTest, RecordingFormattedRangesAllocateNothing) {
  constexpr int kRanges = 10'000;
  dlprof::Profiler profiler;
  profiler.start();
  ASSERT_NE(dlprof::detail::t_ring, nullptr);

  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (int i = 0; i < kRanges; ++i) {
      DLPROF_RANGE_F("allocation-free step {} of {:.1f}", i, 2.5);
    }
    allocations = counter.count();
  }
  profiler.stop();

  EXPECT_EQ(allocations, 0u);
  ASSERT_NE(profiler.last_trace(), nullptr);
  EXPECT_EQ(events_named(*profiler.last_trace(), "allocation-free step 0 of 2.5").size(), 1u);
  EXPECT_EQ(events_named(*profiler.last_trace(), "allocation-free step 9999 of 2.5").size(), 1u);
}

// DLPROF_MODE=off: a Profiler that the launcher turned off takes the idle path all the way,
// through start(), every step() and stop(), with a schedule that would record every step.
TEST(RangeAllocationTest, AProfilerTurnedOffAllocatesNothing) {
  ASSERT_EQ(::setenv("DLPROF_MODE", "off", 1), 0);
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(0, 0, 2)));
  ::unsetenv("DLPROF_MODE");
  ASSERT_EQ(profiler.mode(), dlprof::Mode::Off);
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    profiler.start();
    for (std::size_t step = 0; step < 1'000; ++step) {
      DLPROF_RANGE("off_range");
      DLPROF_RANGE_F("off formatted {}", step);
      dlprof::mark("off_mark");
      profiler.step();
    }
    profiler.stop();
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0u);
  EXPECT_EQ(profiler.step_num(), 1'000);
  EXPECT_EQ(profiler.last_trace(), nullptr);
  EXPECT_FALSE(dlprof::detail::is_recording());
}

TEST(RangeAllocationTest, IdleAnnotationsAllocateNothing) {
  ASSERT_FALSE(dlprof::detail::is_recording());
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (std::size_t i = 0; i < 10'000; ++i) {
      DLPROF_RANGE("idle_range");
      DLPROF_RANGE_F("idle formatted {}", i);
      dlprof::mark("idle_mark");
      dlprof::counter("idle_counter", static_cast<double>(i));
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0u);
}

// The intern tests call the table directly, with no Profiler to install the slow path it sits behind.
class InternTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dlprof::detail::install_recording_slow_path(); }
};

TEST_F(InternTest, SameStringGetsSameIdAndDifferentStringsDifferentIds) {
  const dlprof::detail::NameId first = dlprof::detail::intern("interned_name");
  const std::string copy = "interned_name";
  EXPECT_EQ(dlprof::detail::intern(copy), first);
  EXPECT_NE(dlprof::detail::intern("another_interned_name"), first);
  EXPECT_FALSE(dlprof::detail::is_site_id(first)) << "interned ids must not be mistaken for Site addresses";

  // Another thread has its own cache in front of the table, and must get the same id.
  dlprof::detail::NameId from_other_thread = 0;
  std::thread other([&] { from_other_thread = dlprof::detail::intern("interned_name"); });
  other.join();
  EXPECT_EQ(from_other_thread, first);

  const std::string_view text = dlprof::detail::InternTable::instance().with_lock(
      [&] { return dlprof::detail::name_of_unlocked(first); });
  EXPECT_EQ(text, "interned_name");
}

TEST_F(InternTest, IdsStayStableWhenThePerThreadCacheEvicts) {
  // Far more names than the cache has entries, so most second lookups miss it and go to the table.
  constexpr int kNames = 2'000;
  std::vector<dlprof::detail::NameId> ids;
  for (int i = 0; i < kNames; ++i) ids.push_back(dlprof::detail::intern("evicted_name_" + std::to_string(i)));
  for (int i = 0; i < kNames; ++i) EXPECT_EQ(dlprof::detail::intern("evicted_name_" + std::to_string(i)), ids[i]);
}

std::string trace_thread_name(const Trace& trace, std::int64_t tid) {
  for (const dlprof::ThreadInfo& thread : trace.threads)
    if (thread.os_tid == tid) return thread.name;
  return "<thread not in trace>";
}

std::string os_thread_name() {
  char name[64] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(ThreadNameTest, SetThreadNameNamesTheThreadInTheTrace) {
  // Longer than the 15 characters the OS keeps, so the trace's name can only come from dlprof.
  const std::string early_name = "dlprof-named-before-first-event";
  const std::string late_name = "dlprof-renamed-after-first-event";
  std::int64_t early_tid = 0;
  std::int64_t late_tid = 0;
  std::string late_os_name;
  const auto trace = record([&] {
    std::thread early([&] {
      dlprof::set_thread_name(early_name);  // before the thread has a ring
      early_tid = dlprof::detail::current_os_tid();
      DLPROF_RANGE("named_thread_range");
    });
    std::thread late([&] {
      {
        DLPROF_RANGE("range_before_rename");
      }  // its ring now exists, under the thread's OS name
      dlprof::set_thread_name(late_name);
      late_tid = dlprof::detail::current_os_tid();
      late_os_name = os_thread_name();
      DLPROF_RANGE("renamed_thread_range");
    });
    early.join();
    late.join();
  });

  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace_thread_name(*trace, early_tid), early_name);
  EXPECT_EQ(trace_thread_name(*trace, late_tid), late_name);
  EXPECT_EQ(late_os_name, late_name.substr(0, 15));
}

}  // namespace
