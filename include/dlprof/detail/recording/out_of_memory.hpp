// dlprof/detail/recording/out_of_memory.hpp: an allocation an allocator could not make, as a
// record in the reporting thread's ring and as the process's last such report, which a flight
// recorder's dump names when an exception then leaves a ProfilingScope.
#pragma once

#include <atomic>
#include <cstdint>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The process's out-of-memory reports: how many, and the last one's request.
struct OutOfMemoryReports {
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::int64_t> bytes{0};
  std::atomic<std::uint32_t> device{0};  ///< pack_memory_device()
};

inline OutOfMemoryReports g_out_of_memory_reports;

/// Called by an allocator's report, just before it throws: no allocation, no lock.
inline void report_out_of_memory(std::int64_t bytes, std::int64_t total_allocated, std::int64_t total_reserved,
                                  MemoryDeviceType type, std::int32_t device) noexcept {
  const std::uint32_t packed = pack_memory_device(type, type == MemoryDeviceType::CPU ? -1 : device);
  g_out_of_memory_reports.bytes.store(bytes, std::memory_order_relaxed);
  g_out_of_memory_reports.device.store(packed, std::memory_order_relaxed);
  g_out_of_memory_reports.count.fetch_add(1, std::memory_order_release);
  if ((active_flags() & kRecording) == 0) return;
  const std::int64_t now = now_ticks();
  push_event(Event{static_cast<NameId>(total_allocated), now, {total_reserved}, RecordKind::MemoryTotals, Category::User});
  push_event(Event{static_cast<NameId>(bytes), now, {0}, RecordKind::OutOfMemory, Category::User, packed});
}

}  // namespace detail
DLPROF_END_NAMESPACE
