// dlprof/detail/window/flight_log_file.hpp: the flight log's file. A flight recorder with a trace
// directory keeps its threads' rings in a file-backed shared mapping there (format/
// flight_log_file.hpp lays it out), so that when its process dies without running a handler
// (SIGKILL, the OOM killer, a container's memory limit) the kernel still holds the last steps, and
// dlprof-report reads them (import/crash_dump.hpp).
//
// Recording costs what it costs with rings on the heap: a ring placed in the file is the same
// ThreadRing, its counters and events in the mapping, and a range writes the same fixed-size
// record. A step's end notes the step's number and time there; the Profiler's watcher thread, every
// 200 ms, the time and the text of the names new events used, off the training thread. The kernel
// writes the mapping's dirty pages back in the background. Each slot's disk blocks are reserved before a
// ring is placed in it, so that a full disk gives that thread a ring on the heap instead of a
// SIGBUS. A thread that finds no free slot gets a ring on the heap too, counted in the header.
//
// The process holds a write lock on the file while it lives (the kernel drops it when the process
// dies, however it dies), and deletes the file when its recorder stops or leaves a dump. A fork's
// child maps the file privately and closes it: its rings never write into the parent's log, and
// the lock is the parent's alone.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/fork_generation.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/window/event_names.hpp"
#include "dlprof/format/atomic_file.hpp"
#include "dlprof/format/flight_log_file.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t round_up_to_multiple(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

/// The file a flight recorder's rings live in, while it runs and as long as a ring placed there
/// is held (each ring's deleter holds the file).
class FlightLogFile final : public RingPlacement, public std::enable_shared_from_this<FlightLogFile> {
 public:
  /// Slots for this many threads' rings; more threads record into rings on the heap.
  static constexpr std::size_t kSlots = 64;
  /// Room for the text of the names the rings use.
  static constexpr std::size_t kNameBytes = std::size_t{4} << 20;

  /// Creates `<directory>/<worker>.<unix_time_ns>.dlprof-flight` for rings of `capacity` events
  /// (a power of two), with `header`'s identity (pid, clock, rank, process name). Returns null
  /// with `problem` set when the file cannot be made, locked or mapped.
  static std::shared_ptr<FlightLogFile> create(const std::string& directory, const std::string& worker, std::size_t capacity,
                                               const FlightLogHeader& identity, std::string& problem) {
    const std::string path = fmt::format("{}/{}.{}{}", directory, worker, clock_ns(CLOCK_REALTIME), kFlightLogSuffix);
    if (path.size() >= sizeof(path_)) {
      problem = fmt::format("the path '{}' is longer than {} bytes", path, sizeof(path_) - 1);
      return nullptr;
    }
    // Past the file size limit, a write raises SIGXFSZ, which ends the process unless it is caught.
    rlimit file_size{};
    const std::size_t bytes = file_bytes(capacity);
    if (::getrlimit(RLIMIT_FSIZE, &file_size) == 0 && file_size.rlim_cur != RLIM_INFINITY && file_size.rlim_cur < bytes) {
      problem = fmt::format("the file size limit (RLIMIT_FSIZE, {} bytes) is below the flight log's {} bytes",
                            static_cast<std::uint64_t>(file_size.rlim_cur), bytes);
      return nullptr;
    }
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      problem = fmt::format("cannot create '{}': {}", path, errno_text(errno));
      return nullptr;
    }
    std::shared_ptr<FlightLogFile> file(new FlightLogFile(fd, path, capacity));
    if (!file->open(identity, problem)) return nullptr;
    return file;
  }

  FlightLogFile(const FlightLogFile&) = delete;
  FlightLogFile& operator=(const FlightLogFile&) = delete;

  virtual ~FlightLogFile() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    if (!removed_ && generation_ == fork_generation()) ::unlink(path_);
    if (fd_ >= 0) ::close(fd_);
  }

  /// A ring for a thread in a free slot of the file, or null: none is free, the slot's blocks
  /// cannot be reserved, the ring would hold another number of events, or this is a fork's child.
  /// Under the ring registry's lock.
  std::shared_ptr<ThreadRing> make_ring(std::size_t capacity, std::int64_t os_tid, std::string thread_name,
                                        std::uint32_t thread_ordinal) override {
    if (capacity != capacity_ || generation_ != fork_generation() || private_) return nullptr;
    std::size_t index = kSlots;
    {
      std::lock_guard<std::mutex> lock(slots_mutex_);
      while (!free_slots_.empty()) {
        const std::size_t candidate = free_slots_.back();
        free_slots_.pop_back();
        if (reserved_[candidate] || reserve(candidate)) {
          index = candidate;
          break;
        }
        // No disk for this slot: it stays out of use.
      }
      if (index == kSlots) {
        ++header().threads_outside;
        return nullptr;
      }
    }
    char* slot_base = base_ + kSlotsOffset + index * slot_bytes_;
    std::memset(slot_base, 0, kEventsOffset);
    auto* events = reinterpret_cast<Event*>(slot_base + kEventsOffset);
    std::memset(static_cast<void*>(events), 0, capacity_ * sizeof(Event));  // its pages faulted in now, not while recording
    auto* slot = reinterpret_cast<FlightLogSlot*>(slot_base);
    ThreadRing* ring = new (slot_base + kRingOffset)
        ThreadRing(*slot, events, capacity_, os_tid, std::move(thread_name), thread_ordinal);
    __atomic_store_n(&slot->state, static_cast<std::uint32_t>(FlightLogSlotState::InUse), __ATOMIC_RELEASE);
    return std::shared_ptr<ThreadRing>(ring, SlotRelease{shared_from_this(), index});
  }

  FlightLogHeader& header() noexcept { return *reinterpret_cast<FlightLogHeader*>(base_); }
  const char* path() const noexcept { return path_; }

  /// The step in progress is numbered `step`; it began at `start_tick` (INT64_MIN: not recorded).
  void step_began(std::int64_t step, std::int64_t start_tick) noexcept {
    header().step = step;
    header().step_start_tick = start_tick;
  }
  void step_numbered(std::int64_t step) noexcept { header().step = step; }

  /// Step `step` ended; the kept steps now begin at `window_start_tick`.
  void step_ended(std::int64_t step, std::int64_t window_start_tick) noexcept {
    FlightLogHeader& log = header();
    log.last_step_end = now();
    log.last_seen = log.last_step_end;
    log.last_step_ended = step;
    log.window_start_tick = window_start_tick;
  }

  /// Writes the text of the names `ring`'s events used since the last call, and those of the
  /// ranges it is inside, where the file has not written them yet. Under the registry's lock.
  void write_new_names(ThreadRing& ring) noexcept {
    if (names_full_) return;
    const auto write = [this](NameId id) { write_name(id); };
    ring.scan_new_events([&](const Event* first, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i) for_each_name_of(first[i], write);
    });
    ThreadRing::TrackedOpenRanges open;
    ring.open_ranges(open);
    for (std::uint32_t i = 0; i < open.size; ++i) write_name(open.ranges[i].name);
  }

  /// The process called exit() with the recorder running: a reader says so rather than that it
  /// was killed. Fields of its own: the watcher may be noting the time meanwhile.
  void note_exit() noexcept {
    if (generation_ != fork_generation() || private_) return;
    header().exit_seen = now();
    header().exit_called = 1;
  }

  /// The process is alive now: a reader ends the log here at the earliest.
  void note_alive() noexcept { header().last_seen = now(); }

  /// Deletes the file: the recorder stopped, or the process left a dump. Async-signal-safe.
  void remove() noexcept {
    if (removed_ || generation_ != fork_generation()) return;
    removed_ = true;
    ::unlink(path_);
  }

  /// In a fork's child, before anything there writes to a ring: maps the file privately, so
  /// that what the child writes stays the child's.
  /// Then it lets go of the file, whose lock the child shares with its parent.
  void make_private_in_child() noexcept override {
    private_ = true;
    if (base_ != nullptr && ::mmap(base_, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd_, 0) == MAP_FAILED) {
      // Without a private copy of the file, a private copy of nothing: the child's rings are retired.
      ::mmap(base_, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0);
    }
    ::close(fd_);
    fd_ = -1;
  }

 private:
  /// Both clocks once: where the log ends is told to a microsecond, not to sample_clocks()'s
  /// nanoseconds, at a step's end.
  static ClockSample now() noexcept { return ClockSample{now_ticks(), clock_ns(CLOCK_REALTIME)}; }

  /// Returns a ring's slot to the file when the last holder of the ring lets it go.
  struct SlotRelease {
    std::shared_ptr<FlightLogFile> file;
    std::size_t index;
    void operator()(ThreadRing* ring) const noexcept {
      ring->~ThreadRing();
      file->free_slot(index);
    }
  };

  static constexpr std::size_t kPage = 4096;
  static constexpr std::size_t kRingOffset = round_up_to_multiple(sizeof(FlightLogSlot), alignof(ThreadRing));

  static constexpr std::size_t kNamesOffset = round_up_to_multiple(sizeof(FlightLogHeader), kPage);
  static constexpr std::size_t kSlotsOffset = kNamesOffset + kNameBytes;
  static constexpr std::size_t kEventsOffset = round_up_to_multiple(kRingOffset + sizeof(ThreadRing), kPage);  // within a slot
  static constexpr std::size_t slot_bytes(std::size_t capacity) { return round_up_to_multiple(kEventsOffset + capacity * sizeof(Event), kPage); }
  static constexpr std::size_t file_bytes(std::size_t capacity) { return kSlotsOffset + kSlots * slot_bytes(capacity); }

  FlightLogFile(int fd, const std::string& path, std::size_t capacity)
      : fd_(fd),
        capacity_(capacity),
        slot_bytes_(slot_bytes(capacity)),
        bytes_(file_bytes(capacity)),
        generation_(fork_generation()),
        reserved_(kSlots, false) {
    std::memcpy(path_, path.c_str(), path.size() + 1);
    free_slots_.reserve(kSlots);
    for (std::size_t i = kSlots; i-- > 0;) free_slots_.push_back(i);
  }

  bool open(const FlightLogHeader& identity, std::string& problem) {
    const auto fail = [&](const char* what) {
      problem = fmt::format("cannot {} '{}': {}", what, path_, errno_text(errno));
      return false;
    };
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = 0;
    lock.l_len = 1;
    // An open file description's lock: closing another descriptor of the file (a read of it from
    // this process) keeps it, where a process's lock would go. Where the kernel has none, a
    // process's lock.
    if (::fcntl(fd_, F_OFD_SETLK, &lock) != 0 && (errno != EINVAL || ::fcntl(fd_, F_SETLK, &lock) != 0)) return fail("lock");
    if (::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) return fail("size");
    if (const int error = ::posix_fallocate(fd_, 0, static_cast<off_t>(kSlotsOffset)); error != 0) {
      errno = error;
      return fail("reserve the disk space of");
    }
    void* mapped = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (mapped == MAP_FAILED) return fail("map");
    base_ = static_cast<char*>(mapped);
    FlightLogHeader& log = header();
    log = identity;
    std::memcpy(log.magic, kFlightLogMagic, sizeof(log.magic));
    log.version = kFlightLogVersion;
    log.header_bytes = sizeof(FlightLogHeader);
    log.event_bytes = sizeof(Event);
    log.names_offset = kNamesOffset;
    log.names_bytes = kNameBytes;
    log.names_used = 0;
    log.slots_offset = kSlotsOffset;
    log.slot_bytes = slot_bytes_;
    log.slot_count = kSlots;
    log.threads_outside = 0;
    log.last_step_ended = INT64_MIN;
    log.last_step_end = log.origin;
    log.last_seen = log.origin;
    return true;
  }

  /// Reserves the disk blocks of slot `index`, under slots_mutex_.
  bool reserve(std::size_t index) noexcept {
    const off_t offset = static_cast<off_t>(kSlotsOffset + index * slot_bytes_);
    if (::posix_fallocate(fd_, offset, static_cast<off_t>(slot_bytes_)) != 0) return false;
    reserved_[index] = true;
    return true;
  }

  void free_slot(std::size_t index) noexcept {
    auto* slot = reinterpret_cast<FlightLogSlot*>(base_ + kSlotsOffset + index * slot_bytes_);
    __atomic_store_n(&slot->state, static_cast<std::uint32_t>(FlightLogSlotState::Free), __ATOMIC_RELEASE);
    std::lock_guard<std::mutex> lock(slots_mutex_);
    free_slots_.push_back(index);  // reserved for kSlots: does not allocate
  }

  void write_name(NameId id) noexcept {
    if (names_full_ || names_.full() || !names_.first_sight(id)) return;
    const char* text = name_text(id);
    if (text == nullptr) return;
    const std::size_t length = ::strnlen(text, 4096);
    FlightLogHeader& log = header();
    const std::size_t used = static_cast<std::size_t>(log.names_used);
    const std::size_t record = sizeof(FlightLogName) + round_up_to_multiple(length, 8);
    if (record > kNameBytes - used) {
      names_full_ = true;
      return;
    }
    char* at = base_ + kNamesOffset + used;
    const FlightLogName name{id, static_cast<std::uint32_t>(length), 0};
    std::memcpy(at, &name, sizeof(name));
    std::memcpy(at + sizeof(name), text, length);
    __atomic_store_n(&log.names_used, used + record, __ATOMIC_RELEASE);
  }

  int fd_;
  char path_[4096] = {};
  std::size_t capacity_;
  std::size_t slot_bytes_;
  std::size_t bytes_;
  char* base_ = nullptr;
  std::uint32_t generation_;
  bool private_ = false;
  bool removed_ = false;
  std::mutex slots_mutex_;
  std::vector<std::size_t> free_slots_;
  std::vector<bool> reserved_;
  WrittenNames names_;
  bool names_full_ = false;
};

}  // namespace detail
DLPROF_END_NAMESPACE
