// dlprof/memory_tag.hpp: saying what a piece of memory holds, for the report's memory by
// category (analysis/memory_blocks.hpp):
//
//   dlprof::tag_memory(buffer, bytes, dlprof::MemoryCategory::Input);                 // host memory
//   dlprof::tag_memory(device_ptr, bytes, dlprof::MemoryCategory::Parameter, dlprof::MemoryDeviceType::CUDA, 0);
//   dlprof::tag_memory(tensor, dlprof::MemoryCategory::OptimizerState);               // dlprof/torch.hpp
//
// A tag overrides what the report infers for the allocation at that address, and names memory
// allocated before the window (parameters, optimizer state kept from earlier steps) that the
// window would otherwise count as unknown. Tag after allocating and again in later windows: a
// tag is recorded only while a Profiler window records. An annotated LibTorch optimizer
// (dlprof::annotate(optimizer)) tags its parameters, their gradients and its state after each
// step while profile_memory is on.
//
// Cost: while no window records, one relaxed load and a branch; while one does, a 32-byte record
// in the thread's ring, as a range's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dlprof/category.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/memory_category.hpp"

DLPROF_BEGIN_NAMESPACE

/// Says that the `bytes` at `address` on a device (the CPU's index is -1) hold `category`.
inline void tag_memory(const void* address, std::size_t bytes, MemoryCategory category,
                       MemoryDeviceType device_type = MemoryDeviceType::CPU, std::int32_t device = -1) noexcept {
  if ((detail::active_flags() & detail::kRecording) == 0 || address == nullptr || bytes == 0) return;
  detail::push_event(detail::Event{reinterpret_cast<detail::NameId>(address), detail::now_ticks(),
                                   {detail::pack_memory_tag(bytes, category)}, detail::RecordKind::MemoryTag, Category::User,
                                   detail::pack_memory_device(device_type, device_type == MemoryDeviceType::CPU ? -1 : device)});
}

DLPROF_END_NAMESPACE
