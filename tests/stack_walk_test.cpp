// The stack walkers (detail/recording/stack_walk.hpp): frame-pointer chains, good and corrupt, within
// their bounds; the unwind tables; recursion seen alike by both; a thread with a small stack.
#include <dlprof/detail/recording/stack_walk.hpp>

#include <gtest/gtest.h>
#include <pthread.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stack_walk_test {

using dlprof::detail::StackBounds;
using dlprof::detail::walk_frame_chain;

/// A fake stack of 64 slots: frame `at` saves `caller` (a slot index, or a raw value) and `ret`.
struct FakeStack {
  alignas(16) std::array<std::uintptr_t, 64> slots{};
  std::uintptr_t address(std::size_t slot) const { return reinterpret_cast<std::uintptr_t>(&slots[slot]); }
  StackBounds bounds() const { return {address(0), address(0) + sizeof(slots)}; }
  void frame(std::size_t at, std::uintptr_t caller, std::uintptr_t ret) {
    slots[at] = caller;
    slots[at + 1] = ret;
  }
  std::vector<std::uintptr_t> walk(std::size_t from, std::size_t capacity = 16, std::size_t skip = 0) const {
    std::vector<std::uintptr_t> out(capacity);
    out.resize(walk_frame_chain(address(from), bounds(), out.data(), capacity, skip));
    return out;
  }
};

TEST(StackWalkTest, AFrameChainGivesItsReturnAddressesInnermostFirst) {
  FakeStack stack;
  stack.frame(0, stack.address(8), 0x1000);
  stack.frame(8, stack.address(20), 0x2000);
  stack.frame(20, 0, 0x3000);  // the outermost frame: no caller
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000, 0x2000, 0x3000}));
  EXPECT_EQ(stack.walk(0, 2), (std::vector<std::uintptr_t>{0x1000, 0x2000})) << "capped";
  EXPECT_EQ(stack.walk(0, 16, 1), (std::vector<std::uintptr_t>{0x2000, 0x3000})) << "the innermost skipped";
}

TEST(StackWalkTest, ACorruptChainEndsTheWalkWithoutReadingOutsideTheStack) {
  FakeStack stack;
  stack.frame(0, stack.address(8), 0x1000);
  stack.frame(8, stack.address(0), 0x2000);  // points back down: a loop
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000, 0x2000}));
  stack.frame(8, stack.address(8), 0x2000);  // points to itself
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000, 0x2000}));
  stack.frame(8, stack.address(20) + 3, 0x2000);  // misaligned
  stack.frame(20, 0, 0x3000);
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000, 0x2000}));
  stack.frame(8, stack.address(63), 0x2000);  // its return address would lie past the stack's end
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000, 0x2000}));
  stack.frame(8, stack.bounds().high + 4096, 0x2000);  // outside the stack
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000, 0x2000}));
  stack.frame(8, stack.address(20), 0);  // no return address
  EXPECT_EQ(stack.walk(0), (std::vector<std::uintptr_t>{0x1000}));
  std::uintptr_t out[4];
  EXPECT_EQ(walk_frame_chain(stack.address(0), StackBounds{}, out, 4, 0), 0u) << "bounds unknown: no frame";
  EXPECT_EQ(walk_frame_chain(0, stack.bounds(), out, 4, 0), 0u) << "no frame pointer";
}

// Recursion whose every frame keeps its frame pointer, down to the function it calls at the
// bottom, and which no optimisation flattens: the call is followed by work on its result.
#define DLPROF_TEST_KEEPS_FRAME_POINTER __attribute__((noinline, optimize("no-omit-frame-pointer")))

DLPROF_TEST_KEEPS_FRAME_POINTER int recurse(int depth, void (*at_bottom)(void*), void* context) {
  if (depth == 0) {
    at_bottom(context);
    return 0;
  }
  const int below = recurse(depth - 1, at_bottom, context);
  asm volatile("" ::: "memory");
  return below + 1;
}

struct Frames {
  std::array<std::uintptr_t, 128> addresses{};
  std::size_t count = 0;
};

struct Captured {
  Frames by_pointers, by_tables, by_libgcc, by_libunwind;
};

/// Every unwinder, each called from the same frame at a site of its own: their first addresses
/// differ, the ones after them do not.
DLPROF_TEST_KEEPS_FRAME_POINTER void capture_both(void* context) {
  Captured& captured = *static_cast<Captured*>(context);
  Frames& pointers = captured.by_pointers;
  pointers.count = dlprof::detail::walk_frame_pointers(pointers.addresses.data(), pointers.addresses.size());
  Frames& tables = captured.by_tables;
  tables.count = dlprof::detail::unwind_with_tables(tables.addresses.data(), tables.addresses.size());
  Frames& libgcc = captured.by_libgcc;
  libgcc.count = dlprof::detail::unwind_with_libgcc(libgcc.addresses.data(), libgcc.addresses.size());
  Frames& libunwind = captured.by_libunwind;
  libunwind.count = dlprof::detail::unwind_with_libunwind(libunwind.addresses.data(), libunwind.addresses.size());
}

/// The longest run of one repeated address: a recursion's call site, once a frame.
std::size_t longest_repeat(const std::uintptr_t* frames, std::size_t count) {
  std::size_t longest = 0;
  for (std::size_t i = 0, run = 0; i < count; ++i) {
    run = i > 0 && frames[i] == frames[i - 1] ? run + 1 : 1;
    if (run > longest) longest = run;
  }
  return longest;
}

/// Where the recursion's repeated call site first appears, or `count`.
std::size_t first_repeat(const std::uintptr_t* frames, std::size_t count) {
  for (std::size_t i = 1; i < count; ++i)
    if (frames[i] == frames[i - 1]) return i - 1;
  return count;
}

/// Whether `frames` hold a recursion `depth` deep, frame by frame, at the same addresses as the
/// frame-pointer walk's.
void expect_the_recursion(const Frames& frames, const Frames& by_pointers, std::size_t depth) {
  ASSERT_GE(frames.count, depth + 1);
  EXPECT_GE(longest_repeat(frames.addresses.data(), frames.count), depth);
  const std::size_t here = first_repeat(frames.addresses.data(), frames.count);
  const std::size_t there = first_repeat(by_pointers.addresses.data(), by_pointers.count);
  ASSERT_LE(here + depth, frames.count);
  ASSERT_LE(there + depth, by_pointers.count);
  EXPECT_EQ(here, there) << "as many frames before the recursion";
  for (std::size_t i = 0; i < depth; ++i)
    EXPECT_EQ(frames.addresses[here + i], by_pointers.addresses[there + i]) << "frame " << i << " of the recursion";
}

TEST(StackWalkTest, TheFramePointersAndLibgccSeeARecursionFrameByFrameAndAgree) {
  constexpr std::size_t kDepth = 12;
  Captured captured;
  recurse(kDepth, &capture_both, &captured);
  ASSERT_GE(captured.by_pointers.count, kDepth + 1);
  EXPECT_GE(longest_repeat(captured.by_pointers.addresses.data(), captured.by_pointers.count), kDepth);
  {
    SCOPED_TRACE("the unwind tables");
    expect_the_recursion(captured.by_tables, captured.by_pointers, kDepth);
  }
  SCOPED_TRACE("libgcc");
  expect_the_recursion(captured.by_libgcc, captured.by_pointers, kDepth);
}

TEST(StackWalkTest, LibunwindSeesTheRecursionAsTheFramePointersDo) {
  if (dlprof::detail::libunwind_backtrace() == nullptr)
    GTEST_SKIP() << "libunwind is not used here (libunwind.so.8 cannot be opened, or ThreadSanitizer runs)";
  constexpr std::size_t kDepth = 12;
  Captured captured;
  recurse(kDepth, &capture_both, &captured);
  expect_the_recursion(captured.by_libunwind, captured.by_pointers, kDepth);
}

TEST(StackWalkTest, WithoutLibunwindItsUnwinderTakesNoFrame) {
  if (dlprof::detail::libunwind_backtrace() != nullptr) GTEST_SKIP() << "libunwind is used here";
  std::uintptr_t frames[8];
  EXPECT_EQ(dlprof::detail::unwind_with_libunwind(frames, 8), 0u);
}

struct Capped {
  std::array<std::uintptr_t, 8> all{};
  std::array<std::uintptr_t, 8> skipped{};
  std::size_t all_count = 0;
  std::size_t skipped_count = 0;
};

DLPROF_TEST_KEEPS_FRAME_POINTER void capture_capped(void* context) {
  Capped& capped = *static_cast<Capped*>(context);
  capped.all_count = dlprof::detail::unwind_with_tables(capped.all.data(), capped.all.size());
  capped.skipped_count = dlprof::detail::unwind_with_tables(capped.skipped.data(), 3, /*skip=*/2);
}

TEST(StackWalkTest, TheTablesStopAtTheirCapacityAndSkipTheInnermost) {
  Capped capped;
  recurse(20, &capture_capped, &capped);
  EXPECT_EQ(capped.all_count, capped.all.size());
  ASSERT_EQ(capped.skipped_count, 3u);
  EXPECT_EQ(capped.skipped[1], capped.all[3]) << "the recursion's call site, past the different call sites";
  EXPECT_EQ(capped.skipped[2], capped.all[4]);
}

struct SmallStackRun {
  StackBounds bounds;
  std::uintptr_t local = 0;
  Captured captured;
};

TEST(StackWalkTest, AThreadsBoundsHoldItsFramesAndASmallStackIsWalked) {
  int local = 0;
  const StackBounds main = dlprof::detail::this_thread_stack_bounds();
  EXPECT_TRUE(main.holds(reinterpret_cast<std::uintptr_t>(&local), sizeof(local)));

  SmallStackRun run;
  pthread_attr_t attributes;
  ASSERT_EQ(::pthread_attr_init(&attributes), 0);
  ASSERT_EQ(::pthread_attr_setstacksize(&attributes, 64 * 1024), 0);
  pthread_t thread;
  ASSERT_EQ(::pthread_create(
                &thread, &attributes,
                [](void* argument) -> void* {
                  SmallStackRun& run = *static_cast<SmallStackRun*>(argument);
                  int here = 0;
                  run.local = reinterpret_cast<std::uintptr_t>(&here);
                  run.bounds = dlprof::detail::this_thread_stack_bounds();
                  recurse(40, &capture_both, &run.captured);
                  return nullptr;
                },
                &run),
            0);
  ASSERT_EQ(::pthread_join(thread, nullptr), 0);
  ::pthread_attr_destroy(&attributes);
  EXPECT_TRUE(run.bounds.holds(run.local, sizeof(int)));
  EXPECT_GE(run.bounds.high - run.bounds.low, 64u * 1024) << "ThreadSanitizer gives threads more";
  EXPECT_GE(run.captured.by_pointers.count, 41u);
  EXPECT_GE(run.captured.by_tables.count, 41u);
  EXPECT_GE(run.captured.by_libgcc.count, 41u);
}

}  // namespace stack_walk_test
