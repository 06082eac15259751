// Framework ops and allocator events as an op observer records them (torch.hpp without LibTorch):
// the ring events an observer pushes, through the collector, the FLOPs estimate, the writer and
// key_averages. Built in every configuration, the sanitizer builds included.
#include <dlprof/profiler.hpp>
#include <dlprof/export/chrome_trace.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

namespace {

using dlprof::detail::Event;
using dlprof::detail::intern;
using dlprof::detail::now_ticks;
using dlprof::detail::push_event;

/// What TorchOpObserver pushes for one op called with recorded inputs: OpInputs, then the Op.
/// Ops of one thread follow each other (none inside another): `ticks` is the thread's cursor.
void push_op(std::string_view name, std::string_view dims, std::string_view types, std::string_view concrete,
             std::int64_t& ticks) {
  const std::int64_t start = ticks;
  ticks += 10;
  push_event(Event{intern(dims), start, {dlprof::detail::pack_op_input_names(intern(types), intern(concrete))},
                   dlprof::detail::RecordKind::OpInputs, dlprof::Category::User});
  push_event(Event{intern(name), start, {start + 5}, dlprof::detail::RecordKind::Op, dlprof::Category::User});
}

/// What TorchMemoryReporter pushes for one allocator report: MemoryTotals, then Memory.
void push_memory(std::uint64_t address, std::int64_t bytes, std::int64_t allocated, std::int64_t reserved,
                 dlprof::MemoryDeviceType type, std::int32_t device) {
  const std::int64_t now = now_ticks();
  push_event(Event{static_cast<dlprof::detail::NameId>(allocated), now, {reserved}, dlprof::detail::RecordKind::MemoryTotals,
                   dlprof::Category::User});
  push_event(Event{address, now, {bytes}, dlprof::detail::RecordKind::Memory, dlprof::Category::User,
                   dlprof::detail::pack_memory_device(type, device)});
}

nlohmann::json write(const dlprof::Trace& trace) {
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "ops.json");
  return nlohmann::json::parse(std::string_view(out.data(), out.size()));
}

constexpr std::string_view kMmDims = "[[2, 10], [10, 128]]";
constexpr std::string_view kMmTypes = R"(["float", "float"])";
constexpr std::string_view kMmConcrete = R"(["", ""])";

TEST(OpEventsTest, OpsCarryTheirInputsAndWithFlopsTheirFlops) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_flops(true));
  profiler.start();
  std::int64_t ticks = now_ticks();
  push_op("aten::mm", kMmDims, kMmTypes, kMmConcrete, ticks);
  push_op("aten::mm", kMmDims, kMmTypes, kMmConcrete, ticks);
  push_op("aten::conv2d", "[[2, 3, 8, 8], [8, 3, 3, 3], [8], [], [], [], []]",
          R"(["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"])",
          R"(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])", ticks);
  push_op("aten::view", "[[4, 8], []]", R"(["float", "ScalarList"])", R"(["", "[32]"])", ticks);
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  EXPECT_EQ(trace.op_inputs.size(), 3u) << "two mm calls with the same inputs share one entry";

  const nlohmann::json json = write(trace);
  std::vector<std::pair<std::string, nlohmann::json>> ops;
  for (const auto& event : json["traceEvents"])
    if (event.value("cat", "") == "cpu_op") ops.emplace_back(event["name"], event["args"]);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0].second["Input Dims"], nlohmann::json::parse(kMmDims));
  EXPECT_EQ(ops[0].second["Input type"], nlohmann::json::parse(kMmTypes));
  EXPECT_EQ(ops[0].second["Concrete Inputs"], nlohmann::json::parse(kMmConcrete));
  EXPECT_EQ(ops[0].second["flops"], 5120);   // 2·2·10·128, as PyTorch counts it
  EXPECT_EQ(ops[1].second["flops"], 5120);
  EXPECT_EQ(ops[2].second["flops"], 13824);  // 2·N·K·P·Q·(C/g)·R·S = 2·2·8·4·4·3·3·3
  EXPECT_EQ(ops[3].second["Concrete Inputs"], nlohmann::json::parse(R"(["", "[32]"])"));
  EXPECT_FALSE(ops[3].second.contains("flops")) << "no formula for a view";

  const dlprof::KeyAverages averages(trace);
  EXPECT_EQ(averages.total_flops(), 2u * 5120u + 13824u);
  EXPECT_EQ(averages.find("aten::mm")->flops, 2u * 5120u);
  EXPECT_THAT(averages.table(), testing::HasSubstr("FLOPs"));
}

TEST(OpEventsTest, WithoutWithFlopsOpsCarryInputsButNoFlops) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  profiler.start();
  std::int64_t ticks = now_ticks();
  push_op("aten::mm", kMmDims, kMmTypes, kMmConcrete, ticks);
  profiler.stop();
  const nlohmann::json json = write(*profiler.last_trace());
  for (const auto& event : json["traceEvents"])
    if (event.value("cat", "") == "cpu_op") {
      EXPECT_EQ(event["args"]["Input Dims"], nlohmann::json::parse(kMmDims));
      EXPECT_FALSE(event["args"].contains("flops"));
    }
  EXPECT_EQ(dlprof::KeyAverages(*profiler.last_trace()).total_flops(), 0u);
  EXPECT_THAT(dlprof::KeyAverages(*profiler.last_trace()).table(), testing::Not(testing::HasSubstr("FLOPs")));
}

TEST(OpEventsTest, AllocatorEventsBecomeMemoryEventsAndThePeakPerDevice) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.profile_memory(true));
  profiler.start();
  push_memory(0x1000, 4096, 4096, 4096, dlprof::MemoryDeviceType::CPU, -1);
  push_memory(0x2000, 1 << 20, (1 << 20) + 4096, 1 << 21, dlprof::MemoryDeviceType::CPU, -1);
  push_memory(0x1000, -4096, 1 << 20, 1 << 21, dlprof::MemoryDeviceType::CPU, -1);
  push_memory(0x7f0000, 512, 512, 2 << 20, dlprof::MemoryDeviceType::CUDA, 1);
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  ASSERT_EQ(trace.memory_events.size(), 4u);
  EXPECT_EQ(trace.memory_events[2].bytes, -4096);
  EXPECT_EQ(trace.memory_events[2].total_allocated, 1 << 20);
  EXPECT_EQ(trace.memory_events[3].device_type, dlprof::MemoryDeviceType::CUDA);
  EXPECT_EQ(trace.memory_events[3].device, 1);
  EXPECT_TRUE(trace.events.empty()) << "allocator events are not slices";

  const nlohmann::json json = write(trace);
  std::vector<nlohmann::json> memory;
  for (const auto& event : json["traceEvents"])
    if (event.value("name", "") == "[memory]") memory.push_back(event);
  ASSERT_EQ(memory.size(), 4u);
  EXPECT_EQ(memory[1]["cat"], "cpu_instant_event");
  EXPECT_EQ(memory[1]["ph"], "i");
  EXPECT_EQ(memory[1]["args"], nlohmann::json::parse(R"({"Device Type": 0, "Device Id": -1, "Addr": 8192,
      "Bytes": 1048576, "Total Allocated": 1052672, "Total Reserved": 2097152})"));
  EXPECT_EQ(memory[3]["args"]["Device Type"], 1);
  EXPECT_EQ(memory[3]["args"]["Device Id"], 1);

  const dlprof::KeyAverages averages(trace);
  ASSERT_EQ(averages.peak_memory().size(), 2u);
  EXPECT_EQ(averages.peak_memory()[0].allocated_bytes, (1 << 20) + 4096);
  EXPECT_EQ(averages.peak_memory()[0].reserved_bytes, 1 << 21);
  EXPECT_EQ(averages.peak_memory()[1].device, 1);
  EXPECT_THAT(averages.table(), testing::HasSubstr("Peak memory:  CPU 1.00 MiB allocated  CUDA:1 512 B allocated, 2.00 MiB reserved"));
}

TEST(OpEventsTest, ManyThreadsRecordOpsWithInputsAndAllocationsConcurrently) {
  constexpr int kThreads = 8, kOpsPerThread = 200;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_flops(true).profile_memory(true));
  profiler.start();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      const std::string dims = fmt::format("[[{}, 10], [10, 128]]", t + 1);
      std::int64_t ticks = now_ticks();
      for (int i = 0; i < kOpsPerThread; ++i) {
        push_op("aten::mm", dims, kMmTypes, kMmConcrete, ticks);
        push_memory(static_cast<std::uint64_t>(t * kOpsPerThread + i + 1), 64, 64, 64, dlprof::MemoryDeviceType::CPU, -1);
      }
    });
  for (std::thread& thread : threads) thread.join();
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  EXPECT_EQ(trace.dropped_events, 0u);
  EXPECT_EQ(trace.events.size(), static_cast<std::size_t>(kThreads * kOpsPerThread));
  EXPECT_EQ(trace.memory_events.size(), static_cast<std::size_t>(kThreads * kOpsPerThread));
  EXPECT_EQ(trace.op_inputs.size(), static_cast<std::size_t>(kThreads));
  std::uint64_t expected_flops = 0;
  for (int t = 0; t < kThreads; ++t) expected_flops += std::uint64_t{kOpsPerThread} * 2 * (t + 1) * 10 * 128;
  EXPECT_EQ(dlprof::KeyAverages(trace).total_flops(), expected_flops);
}

}  // namespace
