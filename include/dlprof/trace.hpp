// dlprof/trace.hpp: one recording window, drained from the rings and put on the CLOCK_REALTIME
// axis. Immutable once built: handlers, the writer and the summaries only read it.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/device_properties.hpp"
#include "dlprof/event.hpp"

DLPROF_BEGIN_NAMESPACE

/// Rank and world size of this process in a distributed job, as written to `distributedInfo`.
struct DistributedInfo {
  std::string backend;
  std::int64_t rank = 0;
  std::int64_t world_size = 1;

  /// Reads the launchers' variables, first match wins: torchrun (RANK/WORLD_SIZE), Slurm
  /// (SLURM_PROCID/SLURM_NTASKS), Open MPI (OMPI_COMM_WORLD_RANK/_SIZE), MPICH/PMI
  /// (PMI_RANK/PMI_SIZE). Otherwise rank 0 of 1. Unparsable values are ignored.
  static DistributedInfo from_environment() {
    static constexpr std::pair<const char*, const char*> kLaunchers[] = {
        {"RANK", "WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
    };
    DistributedInfo info;
    for (const auto& [rank_variable, size_variable] : kLaunchers) {
      std::int64_t rank = 0;
      if (!parse_non_negative(std::getenv(rank_variable), &rank)) continue;
      std::int64_t size = 0;
      info.rank = rank;
      info.world_size = parse_non_negative(std::getenv(size_variable), &size) && size > rank ? size : rank + 1;
      return info;
    }
    return info;
  }

 private:
  static bool parse_non_negative(const char* text, std::int64_t* value) {
    if (text == nullptr || *text == '\0') return false;
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || parsed < 0) return false;
    *value = parsed;
    return true;
  }
};

/// A thread that recorded events in the window.
struct ThreadInfo {
  std::int64_t os_tid = 0;
  std::string name;
};

/// One event of a trace. Times are CLOCK_REALTIME nanoseconds.
struct TraceEvent {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;    ///< == start_ns for instants and counters
  double value = 0;           ///< counter sample
  std::uint32_t name = 0;     ///< index into Trace::names
  std::uint32_t thread = 0;   ///< index into Trace::threads
  EventKind kind = EventKind::Range;
  Category category = Category::User;

  std::int64_t duration_ns() const noexcept { return end_ns - start_ns; }
};

/// What one recording window collected. Events are ordered by thread, then by start time,
/// enclosing ranges before the ranges they enclose; ranges on one thread nest strictly.
struct Trace {
  std::vector<TraceEvent> events;
  std::vector<std::string> names;
  std::vector<ThreadInfo> threads;
  std::int64_t pid = 0;
  std::string process_name;
  std::int64_t window_start_ns = 0;  ///< CLOCK_REALTIME ns when recording started
  std::int64_t window_end_ns = 0;    ///< and when it stopped
  std::uint64_t dropped_events = 0;  ///< events lost to full rings during the window
  std::uint64_t clipped_ranges = 0;  ///< ranges shortened so that slices nest (see chrome_trace.hpp)
  std::uint64_t overflowed_names = 0;///< dynamic names recorded under a placeholder (table full)
  std::string clock_source;          ///< "tsc" or "clock_monotonic"
  DistributedInfo distributed;
  std::vector<DeviceProperties> devices;
  /// Extra top-level keys, written verbatim: the value must already be JSON text.
  std::vector<std::pair<std::string, std::string>> metadata;

  std::string_view name_of(const TraceEvent& event) const noexcept { return names[event.name]; }
  std::int64_t window_ns() const noexcept { return window_end_ns - window_start_ns; }

  /// Writes the trace as torch.profiler/Kineto Chrome-trace JSON (gzip when `path` ends in
  /// ".gz"), atomically: a temporary file in the same directory, then a rename. Throws
  /// std::runtime_error naming the path and the reason when it cannot.
  void save(const std::string& path) const;
};

DLPROF_END_NAMESPACE

// Trace::save is defined by the writer.
#include "dlprof/export/chrome_trace.hpp"
