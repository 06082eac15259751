// dlprof/detail/recording/nvtx.hpp: every range is also an NVTX range in the "dlprof" domain, with a
// registered string, an NVTX category and a colour, so Nsight Systems shows it.
//
// NVTX calls are no-ops unless a tool injects itself through NVTX_INJECTION64_PATH (that is how
// Nsight Systems attaches). dlprof checks that once at start-up and sets kNvtxAttached, so with
// no tool a range does not even make the (already cheap) NVTX call. DLPROF_NVTX=1 or =0 in the
// environment forces the choice.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/site.hpp"

#if DLPROF_HAS_NVTX
#  include <nvtx3/nvToolsExt.h>
#endif

DLPROF_BEGIN_NAMESPACE
namespace detail {

inline bool nvtx_tool_requested() noexcept {
  if (const char* forced = std::getenv("DLPROF_NVTX")) return std::strcmp(forced, "0") != 0;
  return std::getenv("NVTX_INJECTION64_PATH") != nullptr || std::getenv("NVTX_INJECTION32_PATH") != nullptr;
}

#if DLPROF_HAS_NVTX

inline nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = [] {
    nvtxDomainHandle_t handle = nvtxDomainCreateA("dlprof");
    for (std::uint8_t c = 0; c < kCategoryCount; ++c) {
      const auto category = static_cast<Category>(c);
      const std::string_view name = to_string(category);
      char text[32] = {};  // category names are short literals
      name.copy(text, sizeof(text) - 1);
      nvtxDomainNameCategoryA(handle, c + 1u, text);
    }
    return handle;
  }();
  return domain;
}

inline nvtxEventAttributes_t nvtx_attributes(Category category) noexcept {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.category = static_cast<std::uint32_t>(category) + 1u;  // 0 means "no category" in NVTX
  attributes.colorType = NVTX_COLOR_ARGB;
  attributes.color = nvtx_color(category);
  return attributes;
}

DLPROF_NOINLINE inline void nvtx_push(const Site& site) noexcept {
  const nvtxDomainHandle_t domain = nvtx_domain();
  const void* handle = site.nvtx_handle.load(std::memory_order_acquire);
  if (handle == nullptr) {  // two threads may both register: NVTX returns a valid handle to each
    handle = nvtxDomainRegisterStringA(domain, site.name);
    site.nvtx_handle.store(handle, std::memory_order_release);
  }
  nvtxEventAttributes_t attributes = nvtx_attributes(site.category);
  attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attributes.message.registered = static_cast<nvtxStringHandle_t>(const_cast<void*>(handle));
  nvtxDomainRangePushEx(domain, &attributes);
}

/// NVTX wants a NUL-terminated string; dynamic names are copied into a per-thread buffer.
inline const char* nvtx_c_string(std::string_view text) {
  thread_local std::string buffer;
  buffer.assign(text.data(), text.size());
  return buffer.c_str();
}

DLPROF_NOINLINE inline void nvtx_push(std::string_view name, Category category) noexcept {
  nvtxEventAttributes_t attributes = nvtx_attributes(category);
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = nvtx_c_string(name);
  nvtxDomainRangePushEx(nvtx_domain(), &attributes);
}

DLPROF_NOINLINE inline void nvtx_pop() noexcept { nvtxDomainRangePop(nvtx_domain()); }

DLPROF_NOINLINE inline void nvtx_mark(std::string_view name) noexcept {
  nvtxEventAttributes_t attributes = nvtx_attributes(Category::User);
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = nvtx_c_string(name);
  nvtxDomainMarkEx(nvtx_domain(), &attributes);
}

/// Sets kNvtxAttached once, during static initialisation of the program.
inline const bool g_nvtx_probed = [] {
  if (nvtx_tool_requested()) g_active.fetch_or(kNvtxAttached, std::memory_order_relaxed);
  return true;
}();

#else  // no NVTX headers: the calls vanish and kNvtxAttached is never set

inline void nvtx_push(const Site&) noexcept {}
inline void nvtx_push(std::string_view, Category) noexcept {}
inline void nvtx_pop() noexcept {}
inline void nvtx_mark(std::string_view) noexcept {}

#endif

}  // namespace detail
DLPROF_END_NAMESPACE
