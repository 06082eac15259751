// dlprof/analysis/memory_by_op.hpp: the memory each op allocated, per device, as TensorBoard's
// profiler plugin's Memory view tabulates it: allocation counts, allocated bytes and the size
// increase (allocated less released), each self and total.
//
// An allocation or release (profile_memory's `[memory]` events) belongs to the innermost slice
// of its own thread around it; when that slice is an op, the allocation is the op's own (self),
// and it counts in the totals of every op around that one. One made outside any op (in a range
// of the user's, or outside every slice) is counted apart. Unlike torch's key_averages()
// columns (key_averages.hpp), other threads' allocations never count for an op.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "dlprof/analysis/detail/slice_tree.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {

/// What the calls of one op name allocated on one device.
struct OpMemory {
  std::string name;
  std::uint64_t calls = 0;  ///< calls of the op in the trace, on any device
  std::uint64_t self_allocations = 0;
  std::uint64_t allocations = 0;  ///< its own and those of the ops inside it, at any depth
  std::int64_t self_allocated_bytes = 0;
  std::int64_t allocated_bytes = 0;
  std::int64_t self_size_increase = 0;  ///< bytes allocated less bytes released
  std::int64_t size_increase = 0;
};

/// The ops that allocated or released memory on one device.
struct DeviceOpMemory {
  MemoryDeviceType device_type = MemoryDeviceType::CPU;
  std::int32_t device = -1;  ///< -1 for the CPU
  std::vector<OpMemory> ops;  ///< by self allocated bytes, then by name
  std::uint64_t outside_ops = 0;  ///< allocations and releases made outside every op
};

/// Per device (the CPU first, then GPUs by index), what the ops of `trace` allocated.
inline std::vector<DeviceOpMemory> memory_by_op(const Trace& trace) {
  std::vector<DeviceOpMemory> devices;
  if (trace.memory_events.empty()) return devices;
  const detail::SliceTree tree(trace);
  using DeviceKey = std::pair<int, std::int32_t>;  // (device type, index)
  std::map<DeviceKey, std::size_t> device_index;
  // Per device, each op event's figures, by event index.
  struct Figures {
    std::uint64_t self_allocations = 0, allocations = 0;
    std::int64_t self_allocated = 0, allocated = 0, self_increase = 0, increase = 0;
  };
  std::vector<std::map<std::uint32_t, Figures>> figures;
  for (const MemoryEvent& memory : trace.memory_events) {
    const DeviceKey key{static_cast<int>(memory.device_type), memory.device_type == MemoryDeviceType::CPU ? -1 : memory.device};
    const auto [found, first] = device_index.try_emplace(key, devices.size());
    if (first) {
      devices.push_back(DeviceOpMemory{memory.device_type, key.second, {}, 0});
      figures.emplace_back();
    }
    const std::size_t device = found->second;
    std::uint32_t slice = tree.innermost_at(memory.thread, memory.time_ns);
    if (slice == detail::SliceTree::kNone || trace.events[slice].kind != EventKind::Op) {
      ++devices[device].outside_ops;
      continue;
    }
    const bool allocation = memory.bytes > 0;
    Figures& own = figures[device][slice];
    own.self_allocations += allocation;
    own.self_allocated += allocation ? memory.bytes : 0;
    own.self_increase += memory.bytes;
    for (; slice != detail::SliceTree::kNone; slice = tree.parent(slice)) {
      if (trace.events[slice].kind != EventKind::Op) continue;
      Figures& total = figures[device][slice];
      total.allocations += allocation;
      total.allocated += allocation ? memory.bytes : 0;
      total.increase += memory.bytes;
    }
  }
  std::map<std::uint32_t, std::uint64_t> calls;  // by name
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Op) ++calls[event.name];
  for (std::size_t d = 0; d < devices.size(); ++d) {
    std::map<std::uint32_t, OpMemory> by_name;
    for (const auto& [event, figure] : figures[d]) {
      const std::uint32_t name = trace.events[event].name;
      OpMemory& row = by_name[name];
      row.self_allocations += figure.self_allocations;
      row.allocations += figure.allocations;
      row.self_allocated_bytes += figure.self_allocated;
      row.allocated_bytes += figure.allocated;
      row.self_size_increase += figure.self_increase;
      row.size_increase += figure.increase;
    }
    for (auto& [name, row] : by_name) {
      row.name = trace.names[name];
      row.calls = calls[name];
      devices[d].ops.push_back(std::move(row));
    }
    std::sort(devices[d].ops.begin(), devices[d].ops.end(), [](const OpMemory& a, const OpMemory& b) {
      return std::tie(b.self_allocated_bytes, a.name) < std::tie(a.self_allocated_bytes, b.name);
    });
  }
  std::sort(devices.begin(), devices.end(), [](const DeviceOpMemory& a, const DeviceOpMemory& b) {
    const bool a_cpu = a.device_type == MemoryDeviceType::CPU, b_cpu = b.device_type == MemoryDeviceType::CPU;
    return std::tie(b_cpu, a.device) < std::tie(a_cpu, b.device);
  });
  return devices;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
