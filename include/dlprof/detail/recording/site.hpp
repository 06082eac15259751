// dlprof/detail/recording/site.hpp: how an event names itself.
//
// A literal given to DLPROF_RANGE lives in a static Site whose address is the event's name id:
// nothing is copied or hashed while recording. So does the format of a DLPROF_RANGE_F whose
// arguments can be kept (format_arguments.hpp): its name is formatted when the window is
// assembled. Names known only at run time (other DLPROF_RANGE_F, ScopedRange(std::string_view),
// mark, counter) are interned once in the process's name table (name_table.hpp) and referred to
// by index; a small per-thread cache answers repeated names without the table's lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string_view>
#include <type_traits>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/slow_path.hpp"
#include "dlprof/category.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

template <class T>
struct always_false : std::false_type {};

/// A static description of a range written in the source: its literal name and category.
/// Constant-initialised (constexpr constructor), so a function-local `static Site` costs no
/// guard. Its address is the name id of every event it records. The NVTX handle is filled in on
/// first use while an NVTX tool is attached.
struct Site {
  const char* name;
  Category category;
  mutable std::atomic<const void*> nvtx_handle{nullptr};

  // Explicit, so that a ScopedRange given a string (std::string, const char*, a literal) takes
  // it as a std::string_view rather than finding two conversions.
  template <std::size_t N>
  constexpr explicit Site(const char (&literal)[N], Category cat = Category::User) noexcept : name(literal), category(cat) {}

  /// Anything but a literal is refused with a sentence instead of template noise.
  template <class T, class = std::enable_if_t<!std::is_array_v<T>>>
  explicit Site(const T&, Category = Category::User) : name(nullptr), category(Category::User) {
    static_assert(always_false<T>::value,
                  "DLPROF_RANGE takes a string literal; for a name known only at run time use "
                  "DLPROF_RANGE_F or dlprof::ScopedRange(std::string_view)");
  }
};

static_assert(alignof(Site) >= 4, "a site's address leaves two bits for its id's tags");

inline NameId site_name_id(const Site& site) noexcept { return static_cast<NameId>(reinterpret_cast<std::uintptr_t>(&site)); }
inline NameId format_site_name_id(const Site& site) noexcept { return site_name_id(site) | kFormatSiteTag; }
inline bool is_site_id(NameId id) noexcept { return (id & 1u) == 0; }
inline const Site& site_of(NameId id) noexcept {
  return *reinterpret_cast<const Site*>(static_cast<std::uintptr_t>(id & ~kFormatSiteTag));
}

/// Direct-mapped per-thread cache in front of the name table: a hit is a hash, a compare and no
/// lock; a miss takes the table's lock (RecordingSlowPath::intern).
class InternCache {
 public:
  /// The id of `name`; `*text`, when given, points to the interned copy (NUL-terminated, stable
  /// for the process). Throws std::bad_alloc when the name cannot be interned.
  NameId intern(std::string_view name, const char** text = nullptr) {
    const std::size_t hash = std::hash<std::string_view>{}(name);
    Entry& entry = entries_[hash & (kEntries - 1)];
    if (entry.text == nullptr || entry.hash != hash || std::string_view(entry.text, entry.length) != name) {
      const RecordingSlowPath* slow_path = recording_slow_path();
      if (slow_path == nullptr) throw std::bad_alloc();
      const char* stored = nullptr;
      const NameId id = slow_path->intern(name, &stored);
      entry = Entry{hash, id, stored, std::char_traits<char>::length(stored)};
    }
    if (text != nullptr) *text = entry.text;
    return entry.id;
  }

 private:
  static constexpr std::size_t kEntries = 256;
  struct Entry {
    std::size_t hash;
    NameId id;
    const char* text;
    std::size_t length;
  };
  Entry entries_[kEntries] = {};
};

inline thread_local InternCache t_intern_cache;

/// The id of a name known only at run time. Throws std::bad_alloc when it cannot be interned.
inline NameId intern(std::string_view name) { return t_intern_cache.intern(name); }

}  // namespace detail
DLPROF_END_NAMESPACE
