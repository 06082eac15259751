// dlprof/detail/window/event_names.hpp: the names the events of a ring use, and their text, as
// the files a flight recorder leaves (a crash file, the flight log's file) write them: with no
// allocation and no lock, so that a signal handler may too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/site.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The name ids an event uses, passed to `use`.
template <class Use>
void for_each_name_of(const Event& event, Use&& use) noexcept {
  switch (event.kind) {
    case RecordKind::Range:
    case RecordKind::Instant:
    case RecordKind::Counter:
    case RecordKind::Op:
    case RecordKind::Collective: use(event.name); break;
    case RecordKind::OpInputs: {
      use(event.name);
      const auto [types, concrete] = unpack_op_input_names(event.end);
      use(types);
      use(concrete);
      if (event.correlation_sequence != 0) use(NameId{event.correlation_sequence});
      break;
    }
    case RecordKind::Step:
    case RecordKind::OpDetails:
    case RecordKind::Memory:
    case RecordKind::MemoryTotals:
    case RecordKind::MemoryTag:
    case RecordKind::OutOfMemory:
    case RecordKind::FormatArguments:
    case RecordKind::Stack: break;
  }
}

/// The text of name `id` as the process knows it (a site's literal, or an interned name), or null.
inline const char* name_text(NameId id) noexcept {
  if (is_site_id(id)) return id == 0 ? nullptr : site_of(id).name;
  return InternTable::instance().published_text(id);
}

/// The names a file has written, so that each is written once: an open-addressing set allocated
/// when the recorder starts. Past three quarters full, every id counts as new.
class WrittenNames {
 public:
  WrittenNames() : slots_(new std::uint64_t[kSize]()) {}

  bool first_sight(NameId id) noexcept {
    if (full()) return true;
    const NameId key = id + 1;  // 0 marks an empty slot
    for (std::size_t i = static_cast<std::size_t>(key * 0x9E3779B97F4A7C15ull) & (kSize - 1);; i = (i + 1) & (kSize - 1)) {
      if (slots_[i] == key) return false;
      if (slots_[i] == 0) {
        slots_[i] = key;
        ++used_;
        return true;
      }
    }
  }
  /// Three quarters full: every id counts as new from now on.
  bool full() const noexcept { return used_ >= kSize / 4 * 3; }
  void clear() noexcept {
    std::memset(slots_.get(), 0, kSize * sizeof(std::uint64_t));
    used_ = 0;
  }

 private:
  static constexpr std::size_t kSize = std::size_t{1} << 16;
  std::unique_ptr<std::uint64_t[]> slots_;
  std::size_t used_ = 0;
};

}  // namespace detail
DLPROF_END_NAMESPACE
