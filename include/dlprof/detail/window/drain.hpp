// dlprof/detail/window/drain.hpp: empties every thread's ring at the end of a window into the
// events assemble.hpp makes a Trace of, and resolves the process's own names for it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/recording/stack_table.hpp"
#include "dlprof/detail/window/assemble.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// Empties every ring, keeping the events that started inside [start_tick, end_tick]: later ones
/// belong to no window, earlier ones to a window already closed. A range that began in the window
/// and is still open at its end (one around the step() or stop() that ends it) is kept, ending at
/// `end_tick`, and counted in clipped_open; when it ends later its own event is outside every
/// window. Ranges open deeper than a ring tracks are counted as dropped.
template <class Deferred = void>
DrainedEvents drain_rings(std::int64_t start_tick, std::int64_t end_tick) {
  DrainedEvents drained;
  drained.end_tick = end_tick;
  std::vector<ThreadRing::OpenRange> open;
  RingRegistry::instance().drain_all([&](ThreadRing& ring) {
    DrainedEvents::Thread thread{ring.os_tid(), ring.thread_ordinal(), ring.thread_name(), {}};
    // Read before the events: a range that ends in between is in both, and kept once below.
    open.clear();
    if (!ring.exited() && !ring.superseded()) drained.dropped += ring.open_ranges(open);
    thread.events.reserve(ring.pending());  // one allocation instead of a growth per doubling
    ring.drain([&](const Event* first, std::size_t count) { thread.events.insert(thread.events.end(), first, first + count); });
    // Copied in bulk, then the few outside the window dropped: testing each event on its way
    // would cost the drain a branch per event in its copy loop.
    thread.events.erase(std::remove_if(thread.events.begin(), thread.events.end(),
                                       [&](const Event& event) { return event.start < start_tick || event.start > end_tick; }),
                        thread.events.end());
    drained.dropped += ring.take_new_drops();
    for (const ThreadRing::OpenRange& range : open) {
      if (range.start < start_tick || range.start > end_tick) continue;
      const bool ended_meanwhile = std::any_of(thread.events.begin(), thread.events.end(), [&](const Event& event) {
        return event.kind == RecordKind::Range && event.start == range.start && event.name == range.name;
      });
      if (ended_meanwhile) continue;
      append_open_range(thread.events, range, end_tick);
      ++drained.clipped_open;
    }
    if (!thread.events.empty()) drained.threads.push_back(std::move(thread));
  });
  drained.dropped += RingRegistry::instance().take_ringless_events();
  return drained;
}

/// The names and stacks of a process's own events: the intern table's and the stack table's,
/// resolved under their locks (taken in that order, the only order both are held in).
struct InternedNames {
  template <class Fn>
  void with_lock(Fn&& fn) const {
    InternTable::instance().with_lock([&] { StackTable::instance().with_lock(std::forward<Fn>(fn)); });
  }
  std::string_view operator()(NameId id) const { return name_of_unlocked(id); }
  std::pair<const std::uintptr_t*, std::size_t> stack(std::uint64_t id) const {
    return id > UINT32_MAX ? std::pair<const std::uintptr_t*, std::size_t>{nullptr, 0}
                           : StackTable::instance().frames_of_unlocked(static_cast<StackId>(id));
  }
};

}  // namespace detail
DLPROF_END_NAMESPACE
