// dlprof/detail/recording/name_table.hpp: the process's table of names known only at run time.
//
// Interned strings are never freed, so a NameId stays valid for the life of the process (the
// per-thread caches, the op and module name caches and events in flight hold ids). To keep
// memory bounded the table stops growing when the heap memory it takes (strings, their index,
// its buckets) reaches its limit, kDefaultNameTableBytes unless ProfilerOptions::name_table_bytes
// says otherwise: a new name past the limit is recorded under the fixed overflow name, and
// counted, so that each window's trace and report say how many names it lost.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/site.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t kDefaultNameTableBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxNameTableBytes = std::size_t{64} << 30;
inline constexpr std::string_view kOverflowName = "<dlprof: name table full>";

/// Heap bytes one interned name costs, as glibc's malloc lays them out on a 64-bit system: the
/// deque's std::string, its character buffer past the small-string capacity, the index's node
/// (link, key, value and cached hash) and two bucket pointers (the index rehashes at a load
/// factor of 1 and doubles its buckets, so it holds up to two per name).
constexpr std::size_t interned_name_bytes(std::size_t length) noexcept {
  constexpr auto chunk = [](std::size_t request) {
    const std::size_t rounded = (request + sizeof(std::size_t) + 15) & ~std::size_t{15};
    return rounded < 32 ? std::size_t{32} : rounded;
  };
  constexpr std::size_t kSmallStringCapacity = 15;
  constexpr std::size_t kIndexNode = sizeof(void*) + sizeof(std::string_view) + sizeof(std::uint64_t) + sizeof(std::size_t);
  std::size_t bytes = sizeof(std::string) + chunk(kIndexNode) + 2 * sizeof(void*);
  if (length > kSmallStringCapacity) bytes += chunk(length + 1);
  return bytes;
}

/// Interned ids fit in 32 bits: a name costs at least interned_name_bytes(0) of the bounded
/// table. An OpInputs event carries two of them (types and concrete values) in one word.
static_assert(((kMaxNameTableBytes / interned_name_bytes(0) + 2) << 1) < (std::uint64_t{1} << 32),
              "interned ids must fit in 32 bits");

class InternTable {
 public:
  /// Constructed on first use and never destroyed: names are resolved while static objects are
  /// being destroyed (a global Profiler's last window, a trace built as the process exits).
  static InternTable& instance() {
    static InternTable* table = new InternTable();
    return *table;
  }

  /// Id of `name`, adding it on first sight. Takes the table's lock; use intern() instead.
  NameId intern_locked(std::string_view name, const std::string** stored) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(name);
    if (found != index_.end()) {
      *stored = &strings_[found->second];
      return (static_cast<NameId>(found->second) << 1) | 1u;
    }
    if (bytes_ + interned_name_bytes(name.size()) > limit_bytes_) {
      ++overflowed_;
      *stored = &strings_[kOverflowIndex];
      return (NameId{kOverflowIndex} << 1) | 1u;
    }
    return add(name, stored);
  }

  /// The string of an interned id. Strings never move (deque), but the deque's bookkeeping
  /// does: callers hold the lock through with_lock() while resolving many ids.
  const std::string& string_of_unlocked(NameId id) const { return strings_[static_cast<std::size_t>(id >> 1)]; }

  template <class Fn>
  auto with_lock(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    return fn();
  }

  /// The text of the interned name of `id` read without the lock, or null past the first
  /// kPublishedNames names: for a fatal signal's handler, which may take no lock.
  const char* published_text(NameId id) const noexcept {
    const std::size_t index = static_cast<std::size_t>(id >> 1);
    if (index >= kPublishedNames) return nullptr;
    const std::atomic<const char*>* chunk = published_[index / kPublishedChunk].load(std::memory_order_acquire);
    return chunk == nullptr ? nullptr : chunk[index % kPublishedChunk].load(std::memory_order_acquire);
  }

  /// New names recorded under kOverflowName since the process started.
  std::uint64_t overflowed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return overflowed_;
  }

  /// Heap bytes the table takes (interned_name_bytes of each name).
  std::size_t bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }

  /// The heap memory the table may grow to. A limit below what it holds stops its growth; names
  /// already interned stay (ids are never reused).
  void set_limit_bytes(std::size_t limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_bytes_ = limit < kMaxNameTableBytes ? limit : kMaxNameTableBytes;
  }

  /// fork(): held by the forking thread across the fork, so that the child's copy is consistent
  /// and its lock free (pthread_atfork's prepare, parent and child handlers).
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }

 private:
  /// kOverflowName is the first name, so that a full table always holds it.
  static constexpr std::uint32_t kOverflowIndex = 0;
  InternTable() {
    const std::string* stored = nullptr;
    add(kOverflowName, &stored);
  }

  NameId add(std::string_view name, const std::string** stored) {
    const auto index = static_cast<std::uint32_t>(strings_.size());
    std::atomic<const char*>* chunk = nullptr;
    if (index < kPublishedNames) {
      chunk = published_[index / kPublishedChunk].load(std::memory_order_relaxed);
      if (chunk == nullptr) {
        chunk = new std::atomic<const char*>[kPublishedChunk]();
        published_[index / kPublishedChunk].store(chunk, std::memory_order_release);
      }
    }
    strings_.emplace_back(name);
    if (chunk != nullptr) chunk[index % kPublishedChunk].store(strings_.back().c_str(), std::memory_order_release);
    bytes_ += interned_name_bytes(name.size());
    index_.emplace(strings_.back(), index);
    *stored = &strings_.back();
    return (static_cast<NameId>(index) << 1) | 1u;
  }

  /// The texts of the first names, in chunks allocated as the table grows and never freed.
  static constexpr std::size_t kPublishedChunk = 4096;
  static constexpr std::size_t kPublishedNames = std::size_t{1} << 22;

  std::mutex mutex_;
  std::atomic<std::atomic<const char*>*> published_[kPublishedNames / kPublishedChunk] = {};
  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, std::uint32_t> index_;
  std::size_t bytes_ = 0;
  std::size_t limit_bytes_ = kDefaultNameTableBytes;
  std::uint64_t overflowed_ = 0;
};

/// The text of any name id. Interned ids need the table's lock held (InternTable::with_lock).
inline std::string_view name_of_unlocked(NameId id) {
  if (is_site_id(id)) return site_of(id).name;
  return InternTable::instance().string_of_unlocked(id);
}

}  // namespace detail
DLPROF_END_NAMESPACE
