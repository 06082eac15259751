// CUPTI's activity records through dlprof's real path: real record structs of the CUPTI headers,
// packed into an activity buffer as CUPTI packs them, walked by the real libcupti
// (cuptiActivityGetNextRecord, cuptiGetCallbackName: both work without a driver), translated by
// RecordCollector, joined to a CPU trace by merge_device_activity and written as Kineto's Chrome
// trace JSON, which is parsed back and checked value by value (docs/trace-format.md §2.3-2.6).
#include <dlprof/detail/window/assemble.hpp>
#include <dlprof/detail/backends/cupti_library.hpp>
#include <dlprof/detail/backends/cupti_records.hpp>
#include <dlprof/detail/backends/gpu_activity.hpp>
#include <dlprof/detail/window/gpu_merge.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/trace.hpp>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

namespace d = dlprof::detail;
// Ordered: the tests check that args come in Kineto's order.
using json = nlohmann::ordered_json;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Kineto's base time for 2024-05 (docs/trace-format.md §2.1): a multiple of 7,889,238 s.
constexpr std::int64_t kBaseNs = 1'711'964'646'000'000'000;
// The window: from 1 s after the base (ts 1000000.000) for 10 ms.
constexpr std::int64_t kWindowStart = kBaseNs + 1'000'000'000;
constexpr std::int64_t kWindowEnd = kWindowStart + 10'000'000;
constexpr std::int64_t kPid = 4242;
constexpr std::uint32_t kMainTid = 4243;    // thread index 0 of every CPU trace
constexpr std::uint32_t kWorkerTid = 4250;  // thread index 1 where a test adds it
constexpr std::size_t kMaxRecords = std::size_t{1} << 20;
constexpr const char* kGemm = "_Z10gemm_tiledPKfS0_Pfiii";
constexpr const char* kGemmDemangled = "gemm_tiled(float const*, float const*, float*, int, int, int)";

// CLOCK_REALTIME timestamps, used as they are.
const d::BackendClock kRealtime{false, d::ClockSample{0, 0}, 1.0};

constexpr std::int64_t at(std::int64_t offset_ns) { return kWindowStart + offset_ns; }

// ---------------------------------------------------------------------------------------------
// CUPTI's side: the library, records and buffers.

struct OpenedCupti {
  d::CuptiLibrary library;
  std::string error;
  bool ok = false;
};

const OpenedCupti& opened_cupti() {
  static const OpenedCupti opened = [] {
    OpenedCupti result;
    result.ok = result.library.open(result.error);
    return result;
  }();
  return opened;
}

/// An activity buffer as CUPTI fills one: records back to back, each as long as its struct, from
/// an 8-byte aligned start (ACTIVITY_RECORD_ALIGNMENT).
class ActivityBufferBuilder {
 public:
  template <class Record>
  ActivityBufferBuilder& add(const Record& record) {
    static_assert(std::is_trivially_copyable_v<Record>);
    static_assert(sizeof(Record) % 8 == 0, "CUPTI's records are padded to 8 bytes");
    const std::size_t offset = size_;
    size_ += sizeof(Record);
    storage_.resize((size_ + 7) / 8);
    std::memcpy(reinterpret_cast<std::uint8_t*>(storage_.data()) + offset, &record, sizeof(Record));
    return *this;
  }

  std::uint8_t* buffer() { return reinterpret_cast<std::uint8_t*>(storage_.data()); }
  std::size_t valid_size() const { return size_; }

 private:
  std::vector<std::uint64_t> storage_;  // 8-byte aligned
  std::size_t size_ = 0;
};

CUpti_ActivityAPI api_record(CUpti_ActivityKind kind, std::uint32_t cbid, std::uint32_t correlation,
                             std::int64_t start, std::int64_t end, std::uint32_t thread) {
  CUpti_ActivityAPI record{};
  record.kind = kind;
  record.cbid = cbid;
  record.start = static_cast<std::uint64_t>(start);
  record.end = static_cast<std::uint64_t>(end);
  record.processId = static_cast<std::uint32_t>(kPid);
  record.threadId = thread;
  record.correlationId = correlation;
  return record;
}

CUpti_ActivityAPI runtime(std::uint32_t cbid, std::uint32_t correlation, std::int64_t start, std::int64_t end,
                          std::uint32_t thread = kMainTid) {
  return api_record(CUPTI_ACTIVITY_KIND_RUNTIME, cbid, correlation, start, end, thread);
}

CUpti_ActivityAPI launch(std::uint32_t correlation, std::int64_t start, std::int64_t end,
                         std::uint32_t thread = kMainTid) {
  return runtime(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, correlation, start, end, thread);
}

CUpti_ActivityAPI driver(std::uint32_t cbid, std::uint32_t correlation, std::int64_t start, std::int64_t end,
                         std::uint32_t thread = kMainTid) {
  return api_record(CUPTI_ACTIVITY_KIND_DRIVER, cbid, correlation, start, end, thread);
}

CUpti_ActivityKernel10 kernel(const char* name, std::uint32_t correlation, std::int64_t start, std::int64_t end,
                              std::uint32_t stream = 7, std::uint32_t device = 0, std::uint32_t context = 1) {
  CUpti_ActivityKernel10 record{};
  record.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  record.name = name;
  record.correlationId = correlation;
  record.start = static_cast<std::uint64_t>(start);
  record.end = static_cast<std::uint64_t>(end);
  record.completed = record.end;
  record.deviceId = device;
  record.contextId = context;
  record.streamId = stream;
  record.gridX = record.gridY = record.gridZ = 1;
  record.blockX = record.blockY = record.blockZ = 1;
  return record;
}

/// A memset of device memory.
CUpti_ActivityMemset4 fill_record(std::uint32_t correlation, std::int64_t start, std::int64_t end, std::uint64_t bytes,
                                  std::uint32_t stream = 7) {
  CUpti_ActivityMemset4 record{};
  record.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  record.bytes = bytes;
  record.start = static_cast<std::uint64_t>(start);
  record.end = static_cast<std::uint64_t>(end);
  record.deviceId = 0;
  record.contextId = 1;
  record.streamId = stream;
  record.correlationId = correlation;
  record.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  return record;
}

CUpti_ActivityExternalCorrelation external(std::uint32_t correlation, std::uint64_t external_id) {
  CUpti_ActivityExternalCorrelation record{};
  record.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  record.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  record.externalId = external_id;
  record.correlationId = correlation;
  return record;
}

CUpti_ActivityMemcpy6 memcpy_record(std::uint8_t copy_kind, std::uint8_t source, std::uint8_t destination,
                                    std::uint64_t bytes, std::uint32_t correlation, std::int64_t start,
                                    std::int64_t end, std::uint32_t stream = 7, std::uint32_t device = 0,
                                    std::uint32_t context = 1) {
  CUpti_ActivityMemcpy6 record{};
  record.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  record.copyKind = copy_kind;
  record.srcKind = source;
  record.dstKind = destination;
  record.bytes = bytes;
  record.start = static_cast<std::uint64_t>(start);
  record.end = static_cast<std::uint64_t>(end);
  record.deviceId = device;
  record.contextId = context;
  record.streamId = stream;
  record.correlationId = correlation;
  return record;
}

CUpti_ActivitySynchronization2 sync_record(CUpti_ActivitySynchronizationType type, std::uint32_t correlation,
                                           std::int64_t start, std::int64_t end, std::uint32_t context,
                                           std::uint32_t stream) {
  CUpti_ActivitySynchronization2 record{};
  record.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  record.type = type;
  record.start = static_cast<std::uint64_t>(start);
  record.end = static_cast<std::uint64_t>(end);
  record.correlationId = correlation;
  record.contextId = context;
  record.streamId = stream;
  record.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  return record;
}

CUpti_ActivityMemory4 memory_record(CUpti_ActivityMemoryOperationType operation, std::uint32_t correlation,
                                    std::int64_t timestamp, std::uint64_t address, std::uint64_t bytes,
                                    std::uint32_t device = 0) {
  CUpti_ActivityMemory4 record{};
  record.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  record.memoryOperationType = operation;
  record.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  record.correlationId = correlation;
  record.address = address;
  record.bytes = bytes;
  record.timestamp = static_cast<std::uint64_t>(timestamp);
  record.processId = static_cast<std::uint32_t>(kPid);
  record.deviceId = device;
  record.contextId = 1;
  record.streamId = 7;
  return record;
}

CUpti_ActivityOverhead3 overhead_record(CUpti_ActivityOverheadKind kind, std::int64_t start, std::int64_t end) {
  CUpti_ActivityOverhead3 record{};
  record.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  record.overheadKind = kind;
  record.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  record.start = static_cast<std::uint64_t>(start);
  record.end = static_cast<std::uint64_t>(end);
  return record;
}

// Records of kinds dlprof does not translate.
CUpti_ActivityMarker2 marker_record(std::int64_t timestamp) {
  CUpti_ActivityMarker2 record{};
  record.kind = CUPTI_ACTIVITY_KIND_MARKER;
  record.flags = CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS;
  record.timestamp = static_cast<std::uint64_t>(timestamp);
  record.id = 1;
  record.name = "a marker";
  return record;
}

CUpti_ActivityContext3 context_record() {
  CUpti_ActivityContext3 record{};
  record.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
  record.contextId = 1;
  record.deviceId = 0;
  record.nullStreamId = 7;
  return record;
}

// An A100 as torch.profiler describes it.
dlprof::DeviceProperties a100(int id = 0) {
  dlprof::DeviceProperties device;
  device.id = id;
  device.name = "NVIDIA A100-SXM4-80GB";
  device.total_global_mem = 85'097'971'712;
  device.compute_major = 8;
  device.compute_minor = 0;
  device.max_threads_per_block = 1024;
  device.max_threads_per_multiprocessor = 2048;
  device.regs_per_block = 65536;
  device.regs_per_multiprocessor = 65536;
  device.warp_size = 32;
  device.shared_mem_per_block = 49152;
  device.shared_mem_per_block_optin = 166912;
  device.shared_mem_per_multiprocessor = 167936;
  device.num_sms = 108;
  return device;
}

// ---------------------------------------------------------------------------------------------
// The CPU side: a Trace laid out as assemble_trace() lays it out, with ranges that pushed external
// ids (thread ordinal = thread index + 1).

std::uint64_t pushed_id(std::uint32_t sequence, std::uint32_t thread = 0) {
  return d::make_external_id(thread + 1, sequence);
}

class CpuTrace {
 public:
  explicit CpuTrace(std::int64_t window_start_ns = kWindowStart, std::int64_t window_end_ns = kWindowEnd) {
    trace_.window_start_ns = window_start_ns;
    trace_.window_end_ns = window_end_ns;
    trace_.pid = kPid;
    trace_.process_name = "trainer";
    trace_.clock_source = "tsc";
    trace_.threads = {dlprof::ThreadInfo{kMainTid, "main"}};
  }

  std::uint32_t add_thread(std::int64_t os_tid, std::string name) {
    trace_.threads.push_back(dlprof::ThreadInfo{os_tid, std::move(name)});
    return static_cast<std::uint32_t>(trace_.threads.size() - 1);
  }

  /// A range; with a sequence number it pushed pushed_id(sequence, thread) while open.
  CpuTrace& range(std::string_view name, std::int64_t start, std::int64_t end, std::uint32_t sequence = 0,
                  std::uint32_t thread = 0, dlprof::EventKind kind = dlprof::EventKind::Range) {
    dlprof::TraceEvent event;
    event.kind = kind;
    event.start_ns = start;
    event.end_ns = end;
    event.thread = thread;
    event.external_id = sequence != 0 ? pushed_id(sequence, thread) : 0;
    event.name = static_cast<std::uint32_t>(trace_.names.size());
    trace_.names.emplace_back(name);
    trace_.events.push_back(event);
    return *this;
  }

  CpuTrace& step(std::string_view name, std::int64_t start, std::int64_t end) {
    return range(name, start, end, 0, 0, dlprof::EventKind::Step);
  }

  CpuTrace& instant(std::string_view name, std::int64_t time, std::uint32_t thread = 0) {
    range(name, time, time, 0, thread, dlprof::EventKind::Instant);
    return *this;
  }

  /// Ordered by thread, then as order_and_nest() orders a thread: what assemble_trace() hands on.
  dlprof::Trace finish() {
    dlprof::Trace trace = trace_;
    std::stable_sort(trace.events.begin(), trace.events.end(),
                     [](const dlprof::TraceEvent& a, const dlprof::TraceEvent& b) { return a.thread < b.thread; });
    for (std::size_t begin = 0; begin < trace.events.size();) {
      std::size_t end = begin;
      while (end < trace.events.size() && trace.events[end].thread == trace.events[begin].thread) ++end;
      trace.clipped_ranges += d::order_and_nest(trace.events, begin, end);
      begin = end;
    }
    return trace;
  }

 private:
  dlprof::Trace trace_;
};

// ---------------------------------------------------------------------------------------------
// The written trace and checks over it.

std::int64_t ns_of(const json& microseconds) { return kBaseNs + std::llround(microseconds.get<double>() * 1000.0); }
std::int64_t duration_of(const json& microseconds) { return std::llround(microseconds.get<double>() * 1000.0); }
// "1002000.183": a time as the file spells it.
std::string ts_text(std::int64_t ns) { return fmt::format("{}.{:03}", (ns - kBaseNs) / 1000, (ns - kBaseNs) % 1000); }

std::vector<std::string> keys_of(const json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

std::vector<json> events_where(const json& document, const std::function<bool(const json&)>& predicate) {
  std::vector<json> events;
  for (const json& event : document.at("traceEvents"))
    if (predicate(event)) events.push_back(event);
  return events;
}

std::function<bool(const json&)> slice(std::string_view category) {
  return [category = std::string(category)](const json& event) {
    return event.value("ph", "") == "X" && event.value("cat", "") == category;
  };
}

std::function<bool(const json&)> slice(std::string_view category, std::uint32_t correlation) {
  return [category = std::string(category), correlation](const json& event) {
    return event.value("ph", "") == "X" && event.value("cat", "") == category && event.contains("args") &&
           event.at("args").contains("correlation") && event.at("args").at("correlation") == correlation;
  };
}

std::function<bool(const json&)> named_slice(std::string_view category, std::string_view name) {
  return [category = std::string(category), name = std::string(name)](const json& event) {
    return event.value("ph", "") == "X" && event.value("cat", "") == category && event.value("name", "") == name;
  };
}

std::function<bool(const json&)> flow(char phase, std::uint32_t id) {
  return [phase, id](const json& event) {
    return event.value("ph", "") == std::string(1, phase) && event.value("cat", "") == "ac2g" && event.at("id") == id;
  };
}

std::function<bool(const json&)> metadata(std::string_view name, std::int64_t pid, std::int64_t tid) {
  return [name = std::string(name), pid, tid](const json& event) {
    return event.value("ph", "") == "M" && event.value("name", "") == name && event.at("pid") == pid &&
           event.at("tid") == tid;
  };
}

/// The one event that matches, or null (with a failure) when there are none or several.
json the_event(const json& document, const std::function<bool(const json&)>& predicate, std::string_view what) {
  const std::vector<json> found = events_where(document, predicate);
  if (found.size() != 1) {
    ADD_FAILURE() << "expected exactly one " << what << ", found " << found.size();
    return json();
  }
  return found.front();
}

std::size_t index_of(const json& document, const json& event) {
  const json& events = document.at("traceEvents");
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i] == event) return i;
  return events.size();
}

/// Perfetto's rule: the X slices of one (pid, tid) nest, each pair disjoint or one inside the other.
void expect_slices_nest(const json& document) {
  struct Slice {
    std::int64_t start;
    std::int64_t end;
    std::string label;
  };
  std::map<std::string, std::vector<Slice>> rows;
  for (const json& event : document.at("traceEvents")) {
    if (event.value("ph", "") != "X") continue;
    const std::int64_t start = ns_of(event.at("ts"));
    const std::int64_t end = start + duration_of(event.at("dur"));
    rows[event.at("pid").dump() + "/" + event.at("tid").dump()].push_back(
        Slice{start, end, event.value("cat", "") + " '" + event.value("name", "") + "' @" + ts_text(start)});
  }
  for (auto& [row, slices] : rows) {
    for (std::size_t i = 0; i < slices.size(); ++i)
      for (std::size_t j = i + 1; j < slices.size(); ++j) {
        const Slice& a = slices[i];
        const Slice& b = slices[j];
        const bool disjoint = a.end <= b.start || b.end <= a.start;
        const bool nested = (a.start <= b.start && b.end <= a.end) || (b.start <= a.start && a.end <= b.end);
        EXPECT_TRUE(disjoint || nested) << "row " << row << ": " << a.label << " [" << a.start << ", " << a.end
                                        << "] and " << b.label << " [" << b.start << ", " << b.end
                                        << "] overlap without nesting";
      }
  }
}

/// Every ac2g flow has one start and one end, each on a slice that begins where it sits.
void expect_flows_paired(const json& document) {
  std::map<std::int64_t, std::pair<int, int>> counts;  // id -> (starts, ends)
  for (const json& event : document.at("traceEvents")) {
    const std::string phase = event.value("ph", "");
    if (phase != "s" && phase != "f") continue;
    EXPECT_EQ(event.at("cat"), "ac2g");
    EXPECT_EQ(event.at("name"), "ac2g");
    EXPECT_EQ(event.contains("bp"), phase == "f") << event.dump();
    if (phase == "f") {
      EXPECT_EQ(event.at("bp"), "e");
    }
    const std::int64_t id = event.at("id").get<std::int64_t>();
    (phase == "s" ? counts[id].first : counts[id].second) += 1;
    const auto bound = events_where(document, [&](const json& other) {
      return other.value("ph", "") == "X" && other.at("pid") == event.at("pid") && other.at("tid") == event.at("tid") &&
             other.at("ts") == event.at("ts") && other.contains("args") && other.at("args").contains("correlation") &&
             other.at("args").at("correlation") == id;
    });
    EXPECT_EQ(bound.size(), 1u) << "flow " << event.dump() << " is on no slice of its correlation";
  }
  for (const auto& [id, count] : counts)
    EXPECT_EQ(count, std::make_pair(1, 1)) << "ac2g flow " << id << ": " << count.first << " start(s), "
                                           << count.second << " end(s)";
}

struct Written {
  dlprof::Trace trace;
  std::string text;
  json document;
};

/// What the Profiler does at the end of a window with GPU activity: External ids assigned, device
/// activity merged, the trace written; then parsed back and checked for nesting and flows.
Written write_window(CpuTrace& cpu, d::DeviceActivity activity, const d::ClockMap& clock = d::ClockMap{}) {
  Written written;
  written.trace = cpu.finish();
  const auto pushed_to_trace = d::assign_external_ids(written.trace);
  d::merge_device_activity(written.trace, std::move(activity), clock, pushed_to_trace);
  fmt::memory_buffer buffer;
  dlprof::write_chrome_trace(written.trace, buffer, "cupti_records_test.pt.trace.json");
  written.text = fmt::to_string(buffer);
  written.document = json::parse(written.text);
  expect_slices_nest(written.document);
  expect_flows_paired(written.document);
  return written;
}

/// The trace External id the range named `name` was given.
std::uint64_t trace_id_of(const dlprof::Trace& trace, std::string_view name) {
  for (const dlprof::TraceEvent& event : trace.events)
    if (trace.name_of(event) == name) return event.external_id;
  ADD_FAILURE() << "no range named " << name;
  return 0;
}

class CuptiRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!opened_cupti().ok) GTEST_SKIP() << "CUPTI cannot be opened: " << opened_cupti().error;
  }

  static const d::CuptiLibrary& cupti() { return opened_cupti().library; }

  static void deliver(d::RecordCollector& collector, ActivityBufferBuilder& buffer) {
    collector.buffer_completed(nullptr, 0, buffer.buffer(), buffer.valid_size());
  }

  /// One window: begin_window, every buffer completed in order, end_window.
  static d::DeviceActivity collect(std::vector<ActivityBufferBuilder*> buffers,
                                   std::vector<dlprof::DeviceProperties> devices = {},
                                   d::BackendClock clock = kRealtime) {
    d::RecordCollector collector(cupti(), kMaxRecords);
    collector.begin_window(clock, std::move(devices));
    for (ActivityBufferBuilder* buffer : buffers) deliver(collector, *buffer);
    return collector.end_window();
  }
};

// ---------------------------------------------------------------------------------------------
// 1. Kernels.

TEST_F(CuptiRecordsTest, KernelIsWrittenWithKinetosNameTimesAndArgsInOrder) {
  CpuTrace cpu;
  cpu.step("ProfilerStep#3", at(1'000'000), at(9'000'000))
      .range("forward", at(1'500'000), at(8'000'000), 1)
      .range("aten::mm", at(1'900'000), at(2'100'000), 2);
  CUpti_ActivityKernel10 gemm = kernel(kGemm, 57541, at(2'000'183), at(2'041'590));
  gemm.gridX = 512;
  gemm.blockX = 512;
  gemm.registersPerThread = 40;
  gemm.staticSharedMemory = 256;
  gemm.dynamicSharedMemory = 144;
  ActivityBufferBuilder buffer;
  buffer.add(external(57541, pushed_id(2)))
      .add(launch(57541, at(1'983'767), at(1'999'400)))
      .add(gemm)
      .add(kernel("kernel", 57542, at(3'000'000), at(3'000'500), 8));  // no runtime record, no range
  const Written written = write_window(cpu, collect({&buffer}, {a100()}));

  const json event = the_event(written.document, slice("kernel", 57541), "gemm kernel");
  ASSERT_FALSE(event.is_null());
  EXPECT_EQ(event.at("name"), kGemmDemangled);
  EXPECT_EQ(event.at("pid"), 0);
  EXPECT_EQ(event.at("tid"), 7);
  EXPECT_EQ(ns_of(event.at("ts")), at(2'000'183));
  EXPECT_EQ(duration_of(event.at("dur")), 41'407);
  EXPECT_THAT(written.text, HasSubstr("\"ts\": 1002000.183, \"dur\": 41.407"));
  const json& args = event.at("args");
  EXPECT_THAT(keys_of(args),
              ElementsAre("External id", "queued", "device", "context", "stream", "correlation", "registers per thread",
                          "shared memory", "blocks per SM", "warps per SM", "grid", "block",
                          "est. achieved occupancy %"));
  const std::uint64_t mm = trace_id_of(written.trace, "aten::mm");
  EXPECT_EQ(mm, 3u);  // ProfilerStep#3, forward, aten::mm
  EXPECT_EQ(args.at("External id"), mm);
  EXPECT_EQ(args.at("queued"), 0);
  EXPECT_EQ(args.at("device"), 0);
  EXPECT_EQ(args.at("context"), 1);
  EXPECT_EQ(args.at("stream"), 7);
  EXPECT_EQ(args.at("correlation"), 57541);
  EXPECT_EQ(args.at("registers per thread"), 40);
  EXPECT_EQ(args.at("shared memory"), 400);
  EXPECT_NEAR(args.at("blocks per SM").get<double>(), 4.740741, 1e-9);
  EXPECT_NEAR(args.at("warps per SM").get<double>(), 75.851852, 1e-9);
  EXPECT_EQ(args.at("grid"), json::parse("[512, 1, 1]"));
  EXPECT_EQ(args.at("block"), json::parse("[512, 1, 1]"));
  EXPECT_EQ(args.at("est. achieved occupancy %"), 75);
  // Kineto's six decimals, as in its A100 trace for exactly this launch.
  EXPECT_THAT(written.text, HasSubstr("\"blocks per SM\": 4.740741, \"warps per SM\": 75.851852, \"grid\": [512, 1, 1], "
                                      "\"block\": [512, 1, 1], \"est. achieved occupancy %\": 75}"));

  // The exact name "kernel" is Kineto's "Kernel"; with no range it has no External id.
  const json renamed = the_event(written.document, slice("kernel", 57542), "kernel named 'kernel'");
  ASSERT_FALSE(renamed.is_null());
  EXPECT_EQ(renamed.at("name"), "Kernel");
  EXPECT_EQ(renamed.at("tid"), 8);
  EXPECT_FALSE(renamed.at("args").contains("External id"));
  EXPECT_EQ(keys_of(renamed.at("args")).front(), "queued");
}

TEST_F(CuptiRecordsTest, AGraphsKernelsAndFillsCarryTheGraphAndNodeTheyReplay) {
  CpuTrace cpu;
  cpu.step("ProfilerStep#1", at(1'000'000), at(9'000'000)).range("replay", at(1'100'000), at(1'300'000), 1);
  CUpti_ActivityKernel10 node = kernel(kGemm, 300, at(1'400'000), at(1'450'000));
  node.graphId = 4;
  node.graphNodeId = 0x100000002ull;  // CUPTI's ids do not fit 32 bits
  CUpti_ActivityMemset4 fill = fill_record(300, at(1'460'000), at(1'461'000), 4096);
  fill.graphId = 4;
  fill.graphNodeId = 9;
  ActivityBufferBuilder buffer;
  buffer.add(external(300, pushed_id(1)))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, 300, at(1'150'000), at(1'160'000)))
      .add(node)
      .add(fill)
      .add(kernel("_Z4stepv", 301, at(2'000'000), at(2'001'000)));
  const Written written = write_window(cpu, collect({&buffer}, {a100()}));

  const json replayed = the_event(written.document, slice("kernel", 300), "the graph's kernel");
  ASSERT_FALSE(replayed.is_null());
  EXPECT_EQ(replayed.at("args").at("graph id"), 4);
  EXPECT_EQ(replayed.at("args").at("graph node id"), 0x100000002ull);
  EXPECT_EQ(keys_of(replayed.at("args")).back(), "graph node id");
  const json filled = the_event(written.document, slice("gpu_memset", 300), "the graph's fill");
  ASSERT_FALSE(filled.is_null());
  EXPECT_EQ(filled.at("args").at("graph node id"), 9);
  const json alone = the_event(written.document, slice("kernel", 301), "a kernel launched on its own");
  ASSERT_FALSE(alone.is_null());
  EXPECT_FALSE(alone.at("args").contains("graph id"));
}

TEST_F(CuptiRecordsTest, KernelQueuedTimeIsWrittenInMicrosecondsAndKernelKindIsTranslatedToo) {
  CpuTrace cpu;
  CUpti_ActivityKernel10 serial = kernel("_Z4stepv", 10, at(1'000'500), at(1'001'500));
  serial.kind = CUPTI_ACTIVITY_KIND_KERNEL;  // the serial kernel kind uses the same record
  serial.queued = static_cast<std::uint64_t>(at(1'000'123));
  ActivityBufferBuilder buffer;
  buffer.add(serial);
  const Written written = write_window(cpu, collect({&buffer}));
  const json event = the_event(written.document, slice("kernel", 10), "kernel");
  ASSERT_FALSE(event.is_null());
  EXPECT_EQ(event.at("name"), "step()");
  EXPECT_EQ(event.at("args").at("queued"), at(1'000'123) / 1000);  // Kineto's us(): truncated
  // No properties for device 0: Kineto's "unknown" occupancy.
  EXPECT_EQ(event.at("args").at("est. achieved occupancy %"), d::kKinetoOccupancyUnknown);
}

// 2. API calls.

TEST_F(CuptiRecordsTest, RuntimeAndDriverCallsAreNamedFromCuptisCallbackTable) {
  CpuTrace cpu;
  cpu.range("forward", at(1'000'000), at(2'000'000), 1);
  ActivityBufferBuilder buffer;
  buffer.add(external(20, pushed_id(1)))
      .add(launch(20, at(1'100'000), at(1'105'321)))
      .add(kernel(kGemm, 20, at(1'200'000), at(1'300'000)))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000, 21, at(2'500'000), at(2'500'999)))
      .add(driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 22, at(3'000'000), at(3'004'000), 4260));
  const Written written = write_window(cpu, collect({&buffer}));

  const json call = the_event(written.document, slice("cuda_runtime", 20), "cudaLaunchKernel");
  ASSERT_FALSE(call.is_null());
  EXPECT_EQ(call.at("name"), "cudaLaunchKernel");
  EXPECT_EQ(call.at("pid"), kPid);
  EXPECT_EQ(call.at("tid"), kMainTid);
  EXPECT_EQ(ns_of(call.at("ts")), at(1'100'000));
  EXPECT_EQ(duration_of(call.at("dur")), 5'321);
  EXPECT_THAT(keys_of(call.at("args")), ElementsAre("External id", "cbid", "correlation"));
  EXPECT_EQ(call.at("args").at("External id"), trace_id_of(written.trace, "forward"));
  EXPECT_EQ(call.at("args").at("cbid"), 211);
  EXPECT_EQ(call.at("args").at("correlation"), 20);
  // The kernel it launched carries the same External id (docs/trace-format.md §2.4).
  const json launched = the_event(written.document, slice("kernel", 20), "kernel");
  ASSERT_FALSE(launched.is_null());
  EXPECT_EQ(launched.at("args").at("External id"), call.at("args").at("External id"));

  const json copy = the_event(written.document, slice("cuda_runtime", 21), "cudaMemcpyAsync_ptsz");
  ASSERT_FALSE(copy.is_null());
  EXPECT_EQ(copy.at("name"), "cudaMemcpyAsync_ptsz");
  EXPECT_THAT(keys_of(copy.at("args")), ElementsAre("cbid", "correlation"));  // no range: no External id
  EXPECT_EQ(copy.at("args").at("cbid"), CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000);

  const json driver_call = the_event(written.document, slice("cuda_driver", 22), "cuLaunchKernel");
  ASSERT_FALSE(driver_call.is_null());
  EXPECT_EQ(driver_call.at("name"), "cuLaunchKernel");
  EXPECT_EQ(driver_call.at("pid"), kPid);
  EXPECT_EQ(driver_call.at("tid"), 4260);
  EXPECT_THAT(keys_of(driver_call.at("args")), ElementsAre("cbid", "correlation"));
  EXPECT_EQ(driver_call.at("args").at("cbid"), 307);
  EXPECT_TRUE(events_where(written.document, slice("cuda_runtime", 22)).empty());
  // The calling thread recorded no range: it is added to the trace's threads and labelled.
  const json thread = the_event(written.document, metadata("thread_name", kPid, 4260), "thread_name of 4260");
  ASSERT_FALSE(thread.is_null());
  EXPECT_EQ(thread.at("args").at("name"), "thread 4260 ()");
}

// 3. ac2g flows.

TEST_F(CuptiRecordsTest, Ac2gFlowLinksTheLaunchToItsKernelAndOnlyWhenBothAreInTheTrace) {
  CpuTrace cpu;
  cpu.range("forward", at(1'000'000), at(2'000'000), 1);
  ActivityBufferBuilder buffer;
  buffer.add(external(100, pushed_id(1)))
      .add(launch(100, at(1'100'000), at(1'105'000)))
      .add(kernel(kGemm, 100, at(1'200'001), at(1'300'000)))
      .add(kernel(kGemm, 101, at(1'400'000), at(1'500'000)))  // its runtime record is absent
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 102, at(1'600'000), at(1'650'000)));  // no device work
  const Written written = write_window(cpu, collect({&buffer}));

  const json call = the_event(written.document, slice("cuda_runtime", 100), "launch");
  const json launched = the_event(written.document, slice("kernel", 100), "kernel");
  const json start = the_event(written.document, flow('s', 100), "flow start");
  const json end = the_event(written.document, flow('f', 100), "flow end");
  ASSERT_FALSE(call.is_null() || launched.is_null() || start.is_null() || end.is_null());
  EXPECT_EQ(start.at("pid"), call.at("pid"));
  EXPECT_EQ(start.at("tid"), call.at("tid"));
  EXPECT_EQ(start.at("ts"), call.at("ts"));
  EXPECT_FALSE(start.contains("bp"));
  EXPECT_EQ(end.at("pid"), 0);
  EXPECT_EQ(end.at("tid"), 7);
  EXPECT_EQ(end.at("ts"), launched.at("ts"));
  EXPECT_EQ(ns_of(end.at("ts")), at(1'200'001));
  EXPECT_EQ(end.at("bp"), "e");
  EXPECT_EQ(launched.at("args").at("correlation"), call.at("args").at("correlation"));
  // Each flow event right after its slice (docs/trace-format.md §2.5).
  EXPECT_EQ(index_of(written.document, start), index_of(written.document, call) + 1);
  EXPECT_EQ(index_of(written.document, end), index_of(written.document, launched) + 1);

  EXPECT_EQ(events_where(written.document, slice("kernel", 101)).size(), 1u);
  EXPECT_THAT(events_where(written.document, flow('f', 101)), IsEmpty());
  EXPECT_THAT(events_where(written.document, flow('s', 102)), IsEmpty());
  EXPECT_EQ(events_where(written.document, [](const json& e) { return e.value("cat", "") == "ac2g"; }).size(), 2u);
}

// 4. Copies and fills.

TEST_F(CuptiRecordsTest, MemcpyAndMemsetRecordsGetKinetosNamesAndArgs) {
  CpuTrace cpu;
  cpu.range("copy", at(500'000), at(900'000), 1);
  CUpti_ActivityMemcpyPtoP4 peer{};
  peer.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
  peer.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  peer.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  peer.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  peer.bytes = 2'000'000;
  peer.start = static_cast<std::uint64_t>(at(1'000'000));
  peer.end = static_cast<std::uint64_t>(at(1'001'000));
  peer.deviceId = 1;
  peer.contextId = 2;
  peer.streamId = 9;
  peer.srcDeviceId = 0;
  peer.srcContextId = 1;
  peer.dstDeviceId = 1;
  peer.dstContextId = 2;
  peer.correlationId = 203;
  const CUpti_ActivityMemset4 fill = fill_record(204, at(1'106'000), at(1'106'512), 65536);
  ActivityBufferBuilder buffer;
  buffer.add(external(200, pushed_id(1)))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 200, at(600'000), at(610'000)))
      .add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
                         CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 1'048'576, 200, at(1'100'000), at(1'101'000)))
      .add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                         CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 4096, 201, at(1'102'000), at(1'104'048)))
      .add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                         CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 512, 202, at(1'105'000), at(1'105'000)))
      .add(peer)
      .add(fill);
  const Written written = write_window(cpu, collect({&buffer}));

  const json htod = the_event(written.document, slice("gpu_memcpy", 200), "HtoD");
  ASSERT_FALSE(htod.is_null());
  EXPECT_EQ(htod.at("name"), "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(htod.at("pid"), 0);
  EXPECT_EQ(htod.at("tid"), 7);
  EXPECT_EQ(ns_of(htod.at("ts")), at(1'100'000));
  EXPECT_EQ(duration_of(htod.at("dur")), 1'000);
  EXPECT_THAT(keys_of(htod.at("args")), ElementsAre("External id", "device", "context", "stream", "correlation",
                                                    "bytes", "memory bandwidth (GB/s)"));
  EXPECT_EQ(htod.at("args").at("External id"), trace_id_of(written.trace, "copy"));
  EXPECT_EQ(htod.at("args").at("device"), 0);
  EXPECT_EQ(htod.at("args").at("context"), 1);
  EXPECT_EQ(htod.at("args").at("stream"), 7);
  EXPECT_EQ(htod.at("args").at("correlation"), 200);
  EXPECT_EQ(htod.at("args").at("bytes"), 1'048'576);
  EXPECT_DOUBLE_EQ(htod.at("args").at("memory bandwidth (GB/s)").get<double>(), 1048.576);  // bytes per ns
  EXPECT_THAT(written.text, HasSubstr("\"bytes\": 1048576, \"memory bandwidth (GB/s)\": 1048.576}"));

  const json dtoh = the_event(written.document, slice("gpu_memcpy", 201), "DtoH");
  ASSERT_FALSE(dtoh.is_null());
  EXPECT_EQ(dtoh.at("name"), "Memcpy DtoH (Device -> Pinned)");
  EXPECT_THAT(keys_of(dtoh.at("args")),
              ElementsAre("device", "context", "stream", "correlation", "bytes", "memory bandwidth (GB/s)"));
  EXPECT_DOUBLE_EQ(dtoh.at("args").at("memory bandwidth (GB/s)").get<double>(), 2.0);

  const json dtod = the_event(written.document, slice("gpu_memcpy", 202), "DtoD");
  ASSERT_FALSE(dtod.is_null());
  EXPECT_EQ(dtod.at("name"), "Memcpy DtoD (Device -> Device)");
  EXPECT_EQ(dtod.at("dur"), 0.0);
  EXPECT_EQ(dtod.at("args").at("memory bandwidth (GB/s)"), "N/A");  // start == end

  const json p2p = the_event(written.document, slice("gpu_memcpy", 203), "peer copy");
  ASSERT_FALSE(p2p.is_null());
  EXPECT_EQ(p2p.at("name"), "Memcpy PtoP (Device -> Device)");
  EXPECT_EQ(p2p.at("pid"), 1);
  EXPECT_EQ(p2p.at("tid"), 9);
  EXPECT_THAT(keys_of(p2p.at("args")),
              ElementsAre("fromDevice", "inDevice", "toDevice", "fromContext", "inContext", "toContext", "stream",
                          "correlation", "bytes", "memory bandwidth (GB/s)"));
  const json& peer_args = p2p.at("args");
  EXPECT_EQ(peer_args.at("fromDevice"), 0);
  EXPECT_EQ(peer_args.at("inDevice"), 1);
  EXPECT_EQ(peer_args.at("toDevice"), 1);
  EXPECT_EQ(peer_args.at("fromContext"), 1);
  EXPECT_EQ(peer_args.at("inContext"), 2);
  EXPECT_EQ(peer_args.at("toContext"), 2);
  EXPECT_EQ(peer_args.at("stream"), 9);
  EXPECT_EQ(peer_args.at("correlation"), 203);
  EXPECT_EQ(peer_args.at("bytes"), 2'000'000);
  EXPECT_DOUBLE_EQ(peer_args.at("memory bandwidth (GB/s)").get<double>(), 2000.0);

  const json memset_event = the_event(written.document, slice("gpu_memset", 204), "memset");
  ASSERT_FALSE(memset_event.is_null());
  EXPECT_EQ(memset_event.at("name"), "Memset (Device)");
  EXPECT_EQ(memset_event.at("pid"), 0);
  EXPECT_EQ(memset_event.at("tid"), 7);
  EXPECT_EQ(duration_of(memset_event.at("dur")), 512);
  EXPECT_THAT(keys_of(memset_event.at("args")),
              ElementsAre("device", "context", "stream", "correlation", "bytes", "memory bandwidth (GB/s)"));
  EXPECT_EQ(memset_event.at("args").at("bytes"), 65536);
  EXPECT_DOUBLE_EQ(memset_event.at("args").at("memory bandwidth (GB/s)").get<double>(), 128.0);

  // The launch of the HtoD copy flows to it.
  EXPECT_EQ(events_where(written.document, flow('s', 200)).size(), 1u);
  EXPECT_EQ(events_where(written.document, flow('f', 200)).size(), 1u);
}

// 5. Synchronisation.

TEST_F(CuptiRecordsTest, SynchronizationRecordsGoToASyncRowOfTheirStream) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(kernel(kGemm, 300, at(1'000'000), at(1'500'000), 7, 1, 2))  // context 2 is on device 1
      .add(sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 301, at(1'000'100), at(1'500'200), 2,
                       7))
      .add(sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, 302, at(2'000'000), at(2'003'000), 2,
                       CUPTI_SYNCHRONIZATION_INVALID_VALUE));
  const Written written = write_window(cpu, collect({&buffer}));

  const json stream_sync = the_event(written.document, slice("cuda_sync", 301), "Stream Sync");
  ASSERT_FALSE(stream_sync.is_null());
  EXPECT_EQ(stream_sync.at("name"), "Stream Sync");
  EXPECT_EQ(stream_sync.at("pid"), 1);
  EXPECT_EQ(stream_sync.at("tid"), 1'000'007);
  EXPECT_EQ(ns_of(stream_sync.at("ts")), at(1'000'100));
  EXPECT_EQ(duration_of(stream_sync.at("dur")), 500'100);
  EXPECT_THAT(keys_of(stream_sync.at("args")), ElementsAre("cuda_sync_kind", "stream", "correlation", "device", "context"));
  EXPECT_EQ(stream_sync.at("args").at("cuda_sync_kind"), "Stream Sync");
  EXPECT_EQ(stream_sync.at("args").at("stream"), 7);
  EXPECT_EQ(stream_sync.at("args").at("correlation"), 301);
  EXPECT_EQ(stream_sync.at("args").at("device"), 1);
  EXPECT_EQ(stream_sync.at("args").at("context"), 2);
  const json sync_row = the_event(written.document, metadata("thread_name", 1, 1'000'007), "sync row name");
  ASSERT_FALSE(sync_row.is_null());
  EXPECT_EQ(sync_row.at("args").at("name"), "stream 7 (sync)");
  // The wait overlaps the kernel it waits for: on a row of its own, not the kernel's.
  const json waited = the_event(written.document, slice("kernel", 300), "kernel");
  ASSERT_FALSE(waited.is_null());
  EXPECT_EQ(waited.at("tid"), 7);

  const json context_sync = the_event(written.document, slice("cuda_sync", 302), "Context Sync");
  ASSERT_FALSE(context_sync.is_null());
  EXPECT_EQ(context_sync.at("name"), "Context Sync");
  EXPECT_EQ(context_sync.at("args").at("cuda_sync_kind"), "Context Sync");
  EXPECT_EQ(context_sync.at("args").at("stream"), -1);
  EXPECT_EQ(context_sync.at("pid"), 1);
  EXPECT_EQ(context_sync.at("tid"), 1'000'000);
}

// A sync is a wait, not launched work: Kineto draws no ac2g flow to it, and a flow that starts on
// the synchronising call with no end would dangle.
TEST_F(CuptiRecordsTest, SynchronizingCallGetsNoAc2gFlow) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(launch(310, at(900'000), at(905'000)))
      .add(kernel(kGemm, 310, at(1'000'000), at(1'500'000)))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 311, at(1'000'050), at(1'500'300)))
      .add(sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 311, at(1'000'100), at(1'500'200), 1,
                       7));
  const Written written = write_window(cpu, collect({&buffer}));  // checks every flow has both ends
  const json call = the_event(written.document, slice("cuda_runtime", 311), "cudaStreamSynchronize");
  const json sync = the_event(written.document, slice("cuda_sync", 311), "Stream Sync");
  ASSERT_FALSE(call.is_null() || sync.is_null());
  EXPECT_EQ(call.at("name"), "cudaStreamSynchronize");
  EXPECT_EQ(sync.at("args").at("correlation"), call.at("args").at("correlation"));
  EXPECT_THAT(events_where(written.document, flow('s', 311)), IsEmpty());
  EXPECT_THAT(events_where(written.document, flow('f', 311)), IsEmpty());
  // The launch before it still flows to its kernel.
  EXPECT_EQ(events_where(written.document, flow('s', 310)).size(), 1u);
  EXPECT_EQ(events_where(written.document, flow('f', 310)).size(), 1u);
}

// 6. gpu_user_annotation.

TEST_F(CuptiRecordsTest, RangeGetsOneGpuAnnotationPerStreamAroundItsKernels) {
  CpuTrace cpu;
  cpu.range("forward", at(1'000'000), at(3'000'000), 1);
  ActivityBufferBuilder buffer;
  for (std::uint32_t correlation : {400u, 401u, 402u}) buffer.add(external(correlation, pushed_id(1)));
  buffer.add(launch(400, at(1'100'000), at(1'105'000)))
      .add(launch(401, at(1'200'000), at(1'205'000)))
      .add(launch(402, at(1'300'000), at(1'305'000)))
      .add(kernel(kGemm, 400, at(3'100'100), at(3'200'200), 7))
      .add(kernel(kGemm, 401, at(3'300'300), at(3'400'400), 7))
      .add(kernel(kGemm, 402, at(3'150'000), at(3'250'000), 8));
  const Written written = write_window(cpu, collect({&buffer}));

  const std::uint64_t forward = trace_id_of(written.trace, "forward");
  const auto spans = events_where(written.document, slice("gpu_user_annotation"));
  ASSERT_EQ(spans.size(), 2u);
  for (const json& span : spans) {
    EXPECT_EQ(span.at("name"), "forward");
    EXPECT_EQ(span.at("pid"), 0);
    EXPECT_THAT(keys_of(span.at("args")), ElementsAre("External id"));
    EXPECT_EQ(span.at("args").at("External id"), forward);
  }
  const json stream7 = the_event(written.document, [](const json& e) {
    return slice("gpu_user_annotation")(e) && e.at("tid") == 7;
  }, "span on stream 7");
  const json stream8 = the_event(written.document, [](const json& e) {
    return slice("gpu_user_annotation")(e) && e.at("tid") == 8;
  }, "span on stream 8");
  ASSERT_FALSE(stream7.is_null() || stream8.is_null());
  EXPECT_EQ(ns_of(stream7.at("ts")), at(3'100'100) - 1);
  EXPECT_EQ(duration_of(stream7.at("dur")), at(3'400'400) + 1 - (at(3'100'100) - 1));
  EXPECT_EQ(ns_of(stream8.at("ts")), at(3'150'000) - 1);
  EXPECT_EQ(duration_of(stream8.at("dur")), 100'002);
  EXPECT_THAT(written.text, HasSubstr(fmt::format("\"ts\": {}, \"dur\": 300.302", ts_text(at(3'100'099)))));
  // The span comes before the kernels it encloses.
  const json first = the_event(written.document, slice("kernel", 400), "kernel 400");
  EXPECT_LT(index_of(written.document, stream7), index_of(written.document, first));
  EXPECT_EQ(written.trace.gpu.clipped_annotations, 0u);
}

TEST_F(CuptiRecordsTest, GpuAnnotationIsNotWidenedOntoANeighboursKernelThatTouchesIt) {
  CpuTrace cpu;
  cpu.range("a", at(1'000'000), at(1'100'000), 1).range("b", at(1'200'000), at(1'400'000), 2);
  ActivityBufferBuilder buffer;
  buffer.add(external(410, pushed_id(1)))
      .add(external(411, pushed_id(2)))
      .add(external(412, pushed_id(2)))
      .add(launch(410, at(1'010'000), at(1'015'000)))
      .add(launch(411, at(1'210'000), at(1'215'000)))
      .add(launch(412, at(1'310'000), at(1'315'000)))
      .add(kernel(kGemm, 410, at(2'000'000), at(2'001'000)))
      .add(kernel(kGemm, 411, at(2'001'000), at(2'002'000)))  // starts where 410 ends
      .add(kernel(kGemm, 412, at(2'003'000), at(2'004'000)));
  const Written written = write_window(cpu, collect({&buffer}));

  const json a = the_event(written.document, named_slice("gpu_user_annotation", "a"), "span of a");
  const json b = the_event(written.document, named_slice("gpu_user_annotation", "b"), "span of b");
  ASSERT_FALSE(a.is_null() || b.is_null());
  // a: widened before its kernel, not after it (b's kernel starts there).
  EXPECT_EQ(ns_of(a.at("ts")), at(2'000'000) - 1);
  EXPECT_EQ(ns_of(a.at("ts")) + duration_of(a.at("dur")), at(2'001'000));
  // b: not widened before its first kernel (a's kernel ends there), widened after its last.
  EXPECT_EQ(ns_of(b.at("ts")), at(2'001'000));
  EXPECT_EQ(ns_of(b.at("ts")) + duration_of(b.at("dur")), at(2'004'000) + 1);
}

// Kernels of two ranges 1 ns apart: widening both facing sides by 1 ns makes the spans overlap.
TEST_F(CuptiRecordsTest, GpuAnnotationsOfKernelsOneNanosecondApartStayDisjoint) {
  CpuTrace cpu;
  cpu.range("a", at(1'000'000), at(1'100'000), 1).range("b", at(1'200'000), at(1'300'000), 2);
  ActivityBufferBuilder buffer;
  buffer.add(external(420, pushed_id(1)))
      .add(external(421, pushed_id(2)))
      .add(launch(420, at(1'010'000), at(1'015'000)))
      .add(launch(421, at(1'210'000), at(1'215'000)))
      .add(kernel(kGemm, 420, at(2'000'000), at(2'001'000)))
      .add(kernel(kGemm, 421, at(2'001'001), at(2'002'000)));  // 1 ns after 420
  const Written written = write_window(cpu, collect({&buffer}));  // checks nesting too
  const json a = the_event(written.document, named_slice("gpu_user_annotation", "a"), "span of a");
  const json b = the_event(written.document, named_slice("gpu_user_annotation", "b"), "span of b");
  ASSERT_FALSE(a.is_null() || b.is_null());
  EXPECT_LE(ns_of(a.at("ts")) + duration_of(a.at("dur")), ns_of(b.at("ts")))
      << "span of a ends at " << ts_text(ns_of(a.at("ts")) + duration_of(a.at("dur"))) << ", span of b starts at "
      << ts_text(ns_of(b.at("ts")));
}

TEST_F(CuptiRecordsTest, InterleavedLaunchesFromTwoThreadsAreClippedToNestAndCounted) {
  CpuTrace cpu;
  const std::uint32_t worker = cpu.add_thread(kWorkerTid, "worker");
  cpu.range("t1", at(1'000'000), at(2'000'000), 1).range("t2", at(1'000'500), at(2'000'500), 1, worker);
  ActivityBufferBuilder buffer;
  buffer.add(external(430, pushed_id(1)))
      .add(external(432, pushed_id(1)))
      .add(external(431, pushed_id(1, worker)))
      .add(external(433, pushed_id(1, worker)))
      .add(launch(430, at(1'100'000), at(1'105'000)))
      .add(launch(432, at(1'300'000), at(1'305'000)))
      .add(launch(431, at(1'200'000), at(1'205'000), kWorkerTid))
      .add(launch(433, at(1'400'000), at(1'405'000), kWorkerTid))
      .add(kernel(kGemm, 430, at(3'000'000), at(3'000'100)))
      .add(kernel(kGemm, 431, at(3'000'200), at(3'000'300)))
      .add(kernel(kGemm, 432, at(3'000'400), at(3'000'500)))
      .add(kernel(kGemm, 433, at(3'000'600), at(3'000'700)));
  const Written written = write_window(cpu, collect({&buffer}));

  const json t1 = the_event(written.document, named_slice("gpu_user_annotation", "t1"), "span of t1");
  const json t2 = the_event(written.document, named_slice("gpu_user_annotation", "t2"), "span of t2");
  ASSERT_FALSE(t1.is_null() || t2.is_null());
  EXPECT_EQ(t1.at("args").at("External id"), trace_id_of(written.trace, "t1"));
  EXPECT_EQ(t2.at("args").at("External id"), trace_id_of(written.trace, "t2"));
  EXPECT_NE(trace_id_of(written.trace, "t1"), trace_id_of(written.trace, "t2"));
  EXPECT_EQ(ns_of(t1.at("ts")), at(3'000'000) - 1);
  EXPECT_EQ(ns_of(t1.at("ts")) + duration_of(t1.at("dur")), at(3'000'500) + 1);
  // t2 ran to 3'000'700; it is cut at t1's end so the two nest.
  EXPECT_EQ(ns_of(t2.at("ts")), at(3'000'200) - 1);
  EXPECT_EQ(ns_of(t2.at("ts")) + duration_of(t2.at("dur")), at(3'000'500) + 1);
  EXPECT_EQ(written.trace.gpu.clipped_annotations, 1u);
  EXPECT_EQ(written.document.at("dlprof_gpu_clipped_annotations"), 1);
}

// 7. Window rules.

TEST_F(CuptiRecordsTest, CallStartedBeforeTheWindowIsLeftOutWithItsKernel) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(launch(500, kWindowStart - 500, kWindowStart + 500))
      .add(kernel(kGemm, 500, at(1'000), at(2'000)))  // inside the window, but its call is not
      .add(launch(501, at(3'000), at(4'000)))
      .add(kernel(kGemm, 501, at(5'000), at(6'000)))
      .add(launch(502, kWindowEnd - 100, kWindowEnd + 900))  // starts inside: kept, with its kernel after the end
      .add(kernel(kGemm, 502, kWindowEnd + 1'000, kWindowEnd + 2'000));
  const Written written = write_window(cpu, collect({&buffer}));
  EXPECT_THAT(events_where(written.document, slice("cuda_runtime", 500)), IsEmpty());
  EXPECT_THAT(events_where(written.document, slice("kernel", 500)), IsEmpty());
  EXPECT_EQ(events_where(written.document, slice("cuda_runtime", 501)).size(), 1u);
  EXPECT_EQ(events_where(written.document, slice("kernel", 501)).size(), 1u);
  EXPECT_EQ(events_where(written.document, slice("cuda_runtime", 502)).size(), 1u);
  EXPECT_EQ(events_where(written.document, slice("kernel", 502)).size(), 1u);
  EXPECT_EQ(written.trace.api_events.size(), 2u);
  EXPECT_EQ(written.trace.gpu_events.size(), 2u);
}

TEST_F(CuptiRecordsTest, KernelWithoutItsCallIsKeptOnlyWhenItStartsInsideTheWindow) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(kernel(kGemm, 510, kWindowStart - 100, kWindowStart + 100))
      .add(kernel(kGemm, 511, at(5'000), at(6'000)))
      .add(kernel(kGemm, 512, kWindowEnd + 1, kWindowEnd + 1'000))
      .add(kernel(kGemm, 513, kWindowStart, kWindowStart + 10))  // both bounds are inside
      .add(kernel(kGemm, 514, kWindowEnd, kWindowEnd + 10));
  const Written written = write_window(cpu, collect({&buffer}));
  std::vector<std::uint32_t> kept;
  for (const json& event : events_where(written.document, slice("kernel")))
    kept.push_back(event.at("args").at("correlation").get<std::uint32_t>());
  std::sort(kept.begin(), kept.end());
  EXPECT_THAT(kept, ElementsAre(511u, 513u, 514u));
}

// A flight recorder's window: the records of steps that gave way go, with the work their calls
// launched, including work completed after they went, and none of it counts as dropped.
TEST_F(CuptiRecordsTest, AFlightRecordersStepsThatGaveWayTakeTheirCallsAndTheirWorkAlong) {
  d::RecordCollector collector(cupti(), kMaxRecords);
  collector.set_limits(kMaxRecords, /*keep_newest=*/true);
  collector.begin_window(kRealtime, {});
  ActivityBufferBuilder old_steps;
  old_steps.add(launch(800, at(1'000), at(2'000)))
      .add(external(800, 41))
      .add(kernel(kGemm, 800, at(3'000), at(4'000)))
      .add(launch(801, at(5'000), at(6'000)))  // its kernel runs late, after the cut
      .add(launch(802, at(12'000), at(13'000)));
  deliver(collector, old_steps);
  collector.discard_before(10'000 + at(0));  // steps before 10 us gave way
  ActivityBufferBuilder later;
  later.add(kernel(kGemm, 801, at(11'000), at(14'000)))  // launched before the cut: goes
      .add(kernel(kGemm, 802, at(14'000), at(15'000)));
  deliver(collector, later);
  const d::DeviceActivity window = collector.end_window();
  ASSERT_EQ(window.api.size(), 1u);
  EXPECT_EQ(window.api[0].correlation, 802u);
  ASSERT_EQ(window.gpu.size(), 1u);
  EXPECT_EQ(window.gpu[0].correlation, 802u);
  EXPECT_THAT(window.external_correlations, IsEmpty());
  EXPECT_EQ(window.stats.dropped_records, 0u);
  EXPECT_EQ(window.stats.late_records, 0u);
}

// Full, a flight recorder's window drops the records of its oldest calls to make room; any
// other window drops the new records.
TEST_F(CuptiRecordsTest, AFullFlightRecorderWindowDropsItsOldestCallsFirst) {
  for (const bool keep_newest : {true, false}) {
    d::RecordCollector collector(cupti(), kMaxRecords);
    collector.set_limits(8, keep_newest);
    collector.begin_window(kRealtime, {});
    ActivityBufferBuilder buffer;
    for (std::uint32_t call = 900; call < 910; ++call) {
      const std::int64_t start = at(static_cast<std::int64_t>(call - 900) * 10'000);
      buffer.add(launch(call, start, start + 1'000)).add(kernel(kGemm, call, start + 2'000, start + 3'000));
    }
    deliver(collector, buffer);
    const d::DeviceActivity window = collector.end_window();
    std::vector<std::uint32_t> kernels;
    for (const dlprof::GpuEvent& work : window.gpu) kernels.push_back(work.correlation);
    EXPECT_EQ(window.api.size() + window.gpu.size(), 8u);
    if (keep_newest) {
      EXPECT_THAT(kernels, ElementsAre(906u, 907u, 908u, 909u));
    } else {
      EXPECT_THAT(kernels, ElementsAre(900u, 901u, 902u, 903u));
    }
    EXPECT_EQ(window.stats.dropped_records, 12u);
    EXPECT_EQ(window.stats.records, 20u);
  }
}

TEST_F(CuptiRecordsTest, RecordsCompletedAfterTheWindowClosedAreCountedLateInTheNextWindow) {
  d::RecordCollector collector(cupti(), kMaxRecords);
  collector.begin_window(kRealtime, {});
  ActivityBufferBuilder during;
  during.add(launch(600, at(1'000), at(2'000)))
      .add(kernel(kGemm, 600, at(3'000), at(4'000)))
      .add(launch(601, at(5'000), at(6'000)));
  deliver(collector, during);
  d::DeviceActivity first = collector.end_window();
  EXPECT_EQ(first.api.size(), 2u);
  EXPECT_EQ(first.gpu.size(), 1u);
  EXPECT_EQ(first.stats.late_records, 0u);

  // After end_window(): the kernel of 601 and a copy of 600 belong to the closed window; 602 was
  // called after it (between windows): discarded, not late.
  ActivityBufferBuilder after;
  after.add(kernel(kGemm, 601, at(7'000), at(8'000)))
      .add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
                         CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 64, 600, at(9'000), at(9'100)))
      .add(launch(602, at(20'000), at(21'000)))
      .add(kernel(kGemm, 602, at(22'000), at(23'000)));
  deliver(collector, after);

  collector.begin_window(kRealtime, {});
  d::DeviceActivity second = collector.end_window();
  EXPECT_EQ(second.stats.late_records, 2u);
  EXPECT_THAT(second.gpu, IsEmpty());
  EXPECT_THAT(second.api, IsEmpty());
  EXPECT_EQ(second.stats.records, 0u);

  CpuTrace first_cpu;
  const Written first_written = write_window(first_cpu, std::move(first));
  EXPECT_EQ(first_written.document.at("dlprof_gpu_late_records"), 0);
  EXPECT_EQ(events_where(first_written.document, slice("kernel")).size(), 1u);
  CpuTrace second_cpu(kWindowStart + 100'000'000, kWindowEnd + 100'000'000);
  const Written second_written = write_window(second_cpu, std::move(second));
  EXPECT_EQ(second_written.document.at("dlprof_gpu_late_records"), 2);
  EXPECT_EQ(second_written.document.at("dlprof_gpu_records"), 0);
}

// A record of window 1 completed while window 2 is open is late for window 2's trace; it must
// not wait for a window 3 that may never come.
TEST_F(CuptiRecordsTest, LateRecordCompletedDuringTheNextWindowIsCountedInThatWindow) {
  d::RecordCollector collector(cupti(), kMaxRecords);
  collector.begin_window(kRealtime, {});
  ActivityBufferBuilder first_buffer;
  first_buffer.add(launch(700, at(1'000), at(2'000)));
  deliver(collector, first_buffer);
  const d::DeviceActivity first = collector.end_window();
  EXPECT_EQ(first.api.size(), 1u);

  collector.begin_window(kRealtime, {});
  ActivityBufferBuilder second_buffer;
  second_buffer.add(kernel(kGemm, 700, at(3'000), at(4'000)))  // window 1's kernel, late
      .add(launch(701, at(5'000), at(6'000)))
      .add(kernel(kGemm, 701, at(7'000), at(8'000)));
  deliver(collector, second_buffer);
  const d::DeviceActivity second = collector.end_window();
  ASSERT_EQ(second.gpu.size(), 1u);
  EXPECT_EQ(second.gpu.front().correlation, 701u);
  EXPECT_EQ(second.stats.late_records, 1u) << "the late kernel of window 1 is not in window 2's count";

  collector.begin_window(kRealtime, {});
  const d::DeviceActivity third = collector.end_window();
  EXPECT_EQ(third.stats.late_records, 0u) << "window 3 is charged with a record that arrived before it began";
}

TEST_F(CuptiRecordsTest, WarmUpRecordsCompletedBeforeBeginWindowAreDiscarded) {
  d::RecordCollector collector(cupti(), kMaxRecords);
  ActivityBufferBuilder warm_up;
  warm_up.add(launch(800, at(1'000), at(2'000)))
      .add(kernel(kGemm, 800, at(3'000), at(4'000)))
      .add(external(800, pushed_id(1)))
      .add(memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 800, at(1'500), 0x7f0000000000, 256))
      .add(overhead_record(CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, at(5'000), at(6'000)))
      .add(marker_record(at(7'000)));
  deliver(collector, warm_up);

  collector.begin_window(kRealtime, {});
  ActivityBufferBuilder recorded;
  recorded.add(launch(801, at(10'000), at(11'000))).add(kernel(kGemm, 801, at(12'000), at(13'000)));
  deliver(collector, recorded);
  d::DeviceActivity activity = collector.end_window();

  ASSERT_EQ(activity.api.size(), 1u);
  EXPECT_EQ(activity.api.front().correlation, 801u);
  ASSERT_EQ(activity.gpu.size(), 1u);
  EXPECT_EQ(activity.gpu.front().correlation, 801u);
  EXPECT_THAT(activity.external_correlations, IsEmpty());
  EXPECT_THAT(activity.memory, IsEmpty());
  EXPECT_THAT(activity.overhead, IsEmpty());
  EXPECT_EQ(activity.stats.records, 2u);
  EXPECT_EQ(activity.stats.unknown_records, 0u);
  EXPECT_EQ(activity.stats.late_records, 0u);

  CpuTrace cpu;
  const Written written = write_window(cpu, std::move(activity));
  EXPECT_EQ(events_where(written.document, slice("kernel")).size(), 1u);
  EXPECT_EQ(written.document.at("dlprof_gpu_records"), 2);
}

// 8. Record order.

TEST_F(CuptiRecordsTest, RecordsOutOfOrderAndSplitAcrossBuffersGiveTheSameTrace) {
  const auto make_cpu = [] {
    CpuTrace cpu;
    cpu.range("forward", at(1'000'000), at(2'000'000), 1);
    return cpu;
  };
  const auto call = launch(900, at(1'100'000), at(1'110'000));
  const auto link = external(900, pushed_id(1));
  const auto launched = kernel(kGemm, 900, at(2'500'000), at(2'600'000));
  const auto copy_call = runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 901, at(1'200'000), at(1'210'000));
  const auto copy = memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                                  CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 4096, 901, at(2'700'000), at(2'701'000));

  ActivityBufferBuilder in_order;
  in_order.add(link).add(call).add(launched).add(copy_call).add(copy);
  CpuTrace cpu_in_order = make_cpu();
  const Written expected = write_window(cpu_in_order, collect({&in_order}));

  ActivityBufferBuilder first;
  first.add(launched).add(copy);  // device work first
  ActivityBufferBuilder second;
  second.add(copy_call).add(call).add(link);  // the external correlation last
  CpuTrace cpu_out_of_order = make_cpu();
  const Written shuffled = write_window(cpu_out_of_order, collect({&first, &second}));

  EXPECT_EQ(shuffled.document, expected.document);
  const json event = the_event(shuffled.document, slice("kernel", 900), "kernel");
  ASSERT_FALSE(event.is_null());
  EXPECT_EQ(event.at("args").at("External id"), trace_id_of(shuffled.trace, "forward"));
  EXPECT_EQ(events_where(shuffled.document, flow('f', 900)).size(), 1u);
  EXPECT_EQ(events_where(shuffled.document, named_slice("gpu_user_annotation", "forward")).size(), 1u);
}

// A sync record names a context; the device it is written on must not depend on whether the
// context's kernel record came before it in the buffer.
TEST_F(CuptiRecordsTest, SyncRecordBeforeItsContextsKernelStillLandsOnThatDevice) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(sync_record(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 911, at(1'000'100), at(1'500'200), 2,
                         7))
      .add(kernel(kGemm, 910, at(1'000'000), at(1'500'000), 7, 1, 2));  // context 2 is on device 1
  const Written written = write_window(cpu, collect({&buffer}));
  const json sync = the_event(written.document, slice("cuda_sync", 911), "Stream Sync");
  ASSERT_FALSE(sync.is_null());
  EXPECT_EQ(sync.at("pid"), 1);
  EXPECT_EQ(sync.at("args").at("device"), 1);
}

// 9. What is skipped or lost is counted.

TEST_F(CuptiRecordsTest, UnknownKindsAreSkippedAndCounted) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(marker_record(at(1'000))).add(context_record()).add(kernel(kGemm, 1000, at(2'000), at(3'000)));
  d::DeviceActivity activity = collect({&buffer});
  EXPECT_EQ(activity.stats.unknown_records, 2u);
  EXPECT_EQ(activity.stats.records, 3u);
  EXPECT_EQ(activity.stats.dropped_records, 0u);
  EXPECT_EQ(activity.stats.cupti_dropped_records, 0u);
  ASSERT_EQ(activity.gpu.size(), 1u);  // the record after them is read from its right offset
  EXPECT_EQ(activity.gpu.front().correlation, 1000u);
  const Written written = write_window(cpu, std::move(activity));
  EXPECT_EQ(written.document.at("dlprof_gpu_unknown_records"), 2);
  EXPECT_EQ(written.document.at("dlprof_gpu_records"), 3);
  const json event = the_event(written.document, slice("kernel", 1000), "kernel");
  ASSERT_FALSE(event.is_null());
  EXPECT_EQ(event.at("name"), kGemmDemangled);
}

TEST_F(CuptiRecordsTest, StoreBoundKeepsTheFirstRecordsAndCountsTheRest) {
  d::RecordCollector collector(cupti(), 3);
  collector.begin_window(kRealtime, {});
  ActivityBufferBuilder buffer;
  for (std::uint32_t i = 0; i < 5; ++i)
    buffer.add(kernel(kGemm, 1010 + i, at(10'000 * (i + 1)), at(10'000 * (i + 1) + 5'000)));
  deliver(collector, buffer);
  collector.add_cupti_dropped(7);
  d::DeviceActivity activity = collector.end_window();
  ASSERT_EQ(activity.gpu.size(), 3u);
  EXPECT_EQ(activity.gpu[0].correlation, 1010u);
  EXPECT_EQ(activity.gpu[1].correlation, 1011u);
  EXPECT_EQ(activity.gpu[2].correlation, 1012u);
  EXPECT_EQ(activity.stats.dropped_records, 2u);
  EXPECT_EQ(activity.stats.records, 5u);
  EXPECT_EQ(activity.stats.cupti_dropped_records, 7u);

  CpuTrace cpu;
  const Written written = write_window(cpu, std::move(activity));
  EXPECT_EQ(written.document.at("dlprof_gpu_dropped_records"), 2);
  EXPECT_EQ(written.document.at("dlprof_cupti_dropped_records"), 7);
  EXPECT_EQ(written.document.at("dlprof_gpu_records"), 5);
  EXPECT_EQ(events_where(written.document, slice("kernel")).size(), 3u);
}

// 10. Allocations.

TEST_F(CuptiRecordsTest, AllocationsBecomeMemoryInstantsOnTheCallingThreadWithARunningTotal) {
  CpuTrace cpu;
  const std::uint32_t worker = cpu.add_thread(kWorkerTid, "worker");
  cpu.range("alloc", at(1'000'000), at(2'000'000), 1).range("worker alloc", at(1'190'000), at(1'260'000), 1, worker);
  constexpr std::uint64_t kFirst = 0x7f3a00000000;
  constexpr std::uint64_t kSecond = 0x7f3a00200000;
  ActivityBufferBuilder buffer;
  buffer.add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 1100, at(1'100'000), at(1'150'000)))
      .add(memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 1100, at(1'120'000), kFirst, 1'048'576))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 1101, at(1'200'000), at(1'250'000), kWorkerTid))
      .add(memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 1101, at(1'220'000), kSecond, 4096))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, 1102, at(1'300'000), at(1'350'000)))
      .add(memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, 1102, at(1'320'000), kFirst, 1'048'576))
      .add(runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 1103, at(1'400'000), at(1'450'000)))
      .add(memory_record(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 1103, at(1'420'000), kFirst, 512, 1));
  const Written written = write_window(cpu, collect({&buffer}));

  const auto memory = events_where(written.document, [](const json& e) { return e.value("name", "") == "[memory]"; });
  ASSERT_EQ(memory.size(), 4u);
  struct Expected {
    std::int64_t time;
    std::int64_t tid;
    std::int64_t device;
    std::uint64_t address;
    std::int64_t bytes;
    std::int64_t total;
  };
  const Expected expected[] = {
      {at(1'120'000), kMainTid, 0, kFirst, 1'048'576, 1'048'576},
      {at(1'220'000), kWorkerTid, 0, kSecond, 4096, 1'052'672},
      {at(1'320'000), kMainTid, 0, kFirst, -1'048'576, 4096},
      {at(1'420'000), kMainTid, 1, kFirst, 512, 512},  // another device: its own total
  };
  for (std::size_t i = 0; i < memory.size(); ++i) {
    const json& event = memory[i];
    SCOPED_TRACE(event.dump());
    EXPECT_EQ(event.at("ph"), "i");
    EXPECT_EQ(event.at("cat"), "cpu_instant_event");
    EXPECT_EQ(event.at("s"), "t");
    EXPECT_EQ(event.at("pid"), kPid);
    EXPECT_EQ(event.at("tid"), expected[i].tid);
    EXPECT_EQ(ns_of(event.at("ts")), expected[i].time);
    EXPECT_THAT(keys_of(event.at("args")),
                ElementsAre("Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved"));
    EXPECT_EQ(event.at("args").at("Device Type"), 1);
    EXPECT_EQ(event.at("args").at("Device Id"), expected[i].device);
    EXPECT_EQ(event.at("args").at("Addr"), expected[i].address);
    EXPECT_EQ(event.at("args").at("Bytes"), expected[i].bytes);
    EXPECT_EQ(event.at("args").at("Total Allocated"), expected[i].total);
    EXPECT_EQ(event.at("args").at("Total Reserved"), expected[i].total);
  }
  // The calls themselves are on the same threads.
  const json worker_call = the_event(written.document, slice("cuda_runtime", 1101), "worker's cudaMalloc");
  ASSERT_FALSE(worker_call.is_null());
  EXPECT_EQ(worker_call.at("name"), "cudaMalloc");
  EXPECT_EQ(worker_call.at("tid"), kWorkerTid);
  const json free_call = the_event(written.document, slice("cuda_runtime", 1102), "cudaFree");
  ASSERT_FALSE(free_call.is_null());
  EXPECT_EQ(free_call.at("name"), "cudaFree");
}

// 11. CUPTI's overhead.

TEST_F(CuptiRecordsTest, OverheadRecordsAreWrittenOnPidMinusOne) {
  CpuTrace cpu;
  ActivityBufferBuilder buffer;
  buffer.add(overhead_record(CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, at(4'000'000), at(4'250'000)))
      .add(overhead_record(CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION, at(5'000'000), at(5'000'750)))
      .add(overhead_record(CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, kWindowStart - 1'000, kWindowStart - 10));
  const Written written = write_window(cpu, collect({&buffer}));
  const auto overhead = events_where(written.document, slice("overhead"));
  ASSERT_EQ(overhead.size(), 2u);  // the flush before the window is left out
  EXPECT_EQ(overhead[0].at("name"), "Buffer Flush");
  EXPECT_EQ(overhead[0].at("pid"), -1);
  EXPECT_EQ(overhead[0].at("tid"), 0);
  EXPECT_EQ(ns_of(overhead[0].at("ts")), at(4'000'000));
  EXPECT_EQ(duration_of(overhead[0].at("dur")), 250'000);
  EXPECT_FALSE(overhead[0].contains("args"));
  EXPECT_EQ(overhead[1].at("name"), "Instrumentation");
  EXPECT_EQ(duration_of(overhead[1].at("dur")), 750);
  EXPECT_THAT(written.text, HasSubstr("{\"ph\": \"X\", \"cat\": \"overhead\", \"name\": \"Buffer Flush\", \"pid\": -1, "
                                      "\"tid\": 0, \"ts\": 1004000.000, \"dur\": 250.000}"));
}

// 12. Devices and GPU rows.

TEST_F(CuptiRecordsTest, DevicePropertiesAndGpuProcessMetadataAreKinetos) {
  CpuTrace cpu;
  dlprof::DeviceProperties second = a100(1);
  second.name = "NVIDIA H100 80GB HBM3";
  second.compute_major = 9;
  second.num_sms = 132;
  second.shared_mem_per_block_optin = 232448;
  second.shared_mem_per_multiprocessor = 233472;
  ActivityBufferBuilder buffer;
  buffer.add(kernel(kGemm, 1300, at(1'000), at(2'000), 7, 0)).add(kernel(kGemm, 1301, at(3'000), at(4'000), 13, 1));
  const Written written = write_window(cpu, collect({&buffer}, {a100(0), second}));

  const json& devices = written.document.at("deviceProperties");
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_THAT(keys_of(devices[0]),
              ElementsAre("id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock",
                          "maxThreadsPerMultiprocessor", "regsPerBlock", "warpSize", "sharedMemPerBlock", "numSms",
                          "regsPerMultiprocessor", "sharedMemPerBlockOptin", "sharedMemPerMultiprocessor"));
  EXPECT_EQ(devices[0], json::parse(R"({"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85097971712,
      "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 108,
      "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936})"));
  EXPECT_EQ(devices[1].at("id"), 1);
  EXPECT_EQ(devices[1].at("name"), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(devices[1].at("computeMajor"), 9);
  EXPECT_EQ(devices[1].at("numSms"), 132);

  for (std::int64_t device : {0, 1}) {
    SCOPED_TRACE(device);
    const json name = the_event(written.document, metadata("process_name", device, 0), "process_name");
    const json labels = the_event(written.document, metadata("process_labels", device, 0), "process_labels");
    const json sort = the_event(written.document, metadata("process_sort_index", device, 0), "process_sort_index");
    ASSERT_FALSE(name.is_null() || labels.is_null() || sort.is_null());
    EXPECT_EQ(name.at("args").at("name"), "trainer");
    EXPECT_EQ(labels.at("args").at("labels"), fmt::format("GPU {}", device));
    EXPECT_EQ(sort.at("args").at("sort_index"), 5'000'000 + device);
    EXPECT_EQ(ns_of(name.at("ts")), kWindowStart);
  }
  const json stream7 = the_event(written.document, metadata("thread_name", 0, 7), "stream 7 name");
  const json stream13 = the_event(written.document, metadata("thread_name", 1, 13), "stream 13 name");
  const json sort7 = the_event(written.document, metadata("thread_sort_index", 0, 7), "stream 7 sort");
  ASSERT_FALSE(stream7.is_null() || stream13.is_null() || sort7.is_null());
  EXPECT_EQ(stream7.at("args").at("name"), "stream 7 ");
  EXPECT_EQ(stream13.at("args").at("name"), "stream 13 ");
  EXPECT_EQ(sort7.at("args").at("sort_index"), 7);
  // The kernel on the H100 gets that device's occupancy.
  const json h100_kernel = the_event(written.document, slice("kernel", 1301), "kernel on device 1");
  ASSERT_FALSE(h100_kernel.is_null());
  EXPECT_NEAR(h100_kernel.at("args").at("blocks per SM").get<double>(), 1.0 / 132.0, 1e-6);
}

// 13. Buffers.

TEST(CuptiBufferPoolTest, PreallocatedBuffersAreLentThenReusedAndTheBoundHolds) {
  d::BufferPool pool(2, 3);
  EXPECT_EQ(pool.allocated(), 2u);
  std::uint8_t* a = pool.acquire();
  std::uint8_t* b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.allocated(), 2u);  // both preallocated
  std::uint8_t* c = pool.acquire();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(pool.allocated(), 3u);
  EXPECT_EQ(pool.acquire(), nullptr);  // max_buffers lent out
  EXPECT_EQ(pool.allocated(), 3u);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  for (std::uint8_t* buffer : {a, b, c}) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer) % d::BufferPool::kAlignment, 0u);
    std::memset(buffer, 0xA5, d::BufferPool::kBufferBytes);  // the whole buffer is usable
  }
  EXPECT_EQ(d::BufferPool::kAlignment, 8u);
  EXPECT_EQ(d::BufferPool::kBufferBytes, std::size_t{4} << 20);

  pool.release(b);
  std::uint8_t* reused = pool.acquire();
  EXPECT_EQ(reused, b);  // reused, not allocated
  EXPECT_EQ(pool.allocated(), 3u);
  pool.release(nullptr);  // CUPTI may hand back nothing
  EXPECT_EQ(pool.acquire(), nullptr);
  pool.release(a);
  pool.release(reused);
  pool.release(c);
}

TEST(CuptiBufferPoolTest, PreallocationStopsAtTheBound) {
  d::BufferPool pool(5, 2);
  EXPECT_EQ(pool.allocated(), 2u);
  std::uint8_t* a = pool.acquire();
  std::uint8_t* b = pool.acquire();
  EXPECT_NE(a, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(pool.acquire(), nullptr);
  pool.release(a);
  pool.release(b);
}

TEST_F(CuptiRecordsTest, RecordsInAPoolBufferAreTranslated) {
  d::BufferPool pool(1, 1);
  std::uint8_t* buffer = pool.acquire();
  ASSERT_NE(buffer, nullptr);
  ActivityBufferBuilder records;
  records.add(launch(1400, at(1'000), at(2'000))).add(kernel(kGemm, 1400, at(3'000), at(4'000)));
  std::memcpy(buffer, records.buffer(), records.valid_size());
  d::RecordCollector collector(cupti(), kMaxRecords);
  collector.begin_window(kRealtime, {});
  collector.buffer_completed(nullptr, 0, buffer, records.valid_size());
  pool.release(buffer);
  const d::DeviceActivity activity = collector.end_window();
  ASSERT_EQ(activity.api.size(), 1u);
  ASSERT_EQ(activity.gpu.size(), 1u);
  EXPECT_EQ(activity.gpu.front().correlation, 1400u);
  EXPECT_EQ(activity.names.at(activity.gpu.front().name), kGemmDemangled);
  EXPECT_EQ(activity.names.at(activity.api.front().name), "cudaLaunchKernel");
}

// 14. Names.

TEST(CuptiNamesTest, ApiDisplayNameStripsCuptisVersionSuffix) {
  EXPECT_EQ(d::api_display_name("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(d::api_display_name("cudaMemcpyAsync_ptsz_v7000"), "cudaMemcpyAsync_ptsz");
  EXPECT_EQ(d::api_display_name("cudaMalloc_v3020"), "cudaMalloc");
  EXPECT_EQ(d::api_display_name("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(d::api_display_name("cudaGraphLaunch_v10000"), "cudaGraphLaunch");
  EXPECT_EQ(d::api_display_name("cudaStreamGetCaptureInfo_v2_v11030"), "cudaStreamGetCaptureInfo_v2");
  EXPECT_EQ(d::api_display_name("cudaFoo_v"), "cudaFoo_v");        // no digits: not a version
  EXPECT_EQ(d::api_display_name("cudaFoo_v12a"), "cudaFoo_v12a");  // not only digits
  EXPECT_EQ(d::api_display_name(""), "");
}

TEST(CuptiNamesTest, KernelDisplayNameDemanglesAndRenamesKernel) {
  EXPECT_EQ(d::kernel_display_name(kGemm), kGemmDemangled);
  EXPECT_EQ(d::kernel_display_name(nullptr), "<unnamed kernel>");
  EXPECT_EQ(d::kernel_display_name("kernel"), "Kernel");
  EXPECT_EQ(d::kernel_display_name("_Z6kernelv"), "kernel()");  // only the exact name is renamed
  EXPECT_EQ(d::kernel_display_name("_Zinvalid!"), "_Zinvalid!");
  EXPECT_EQ(d::kernel_display_name("my_c_kernel"), "my_c_kernel");
  EXPECT_EQ(d::kernel_display_name("_ZN4cuda6detail10vectorized3addIfEEvPT_S4_i"),
            "void cuda::detail::vectorized::add<float>(float*, float*, int)");
}

TEST_F(CuptiRecordsTest, CuptisCallbackTableNamesTheCallsWithoutTheirVersion) {
  const char* name = nullptr;
  ASSERT_NE(cupti().get_callback_name, nullptr);
  ASSERT_EQ(cupti().get_callback_name(CUPTI_CB_DOMAIN_RUNTIME_API, 211, &name), CUPTI_SUCCESS);
  ASSERT_NE(name, nullptr);
  EXPECT_STREQ(name, "cudaLaunchKernel_v7000");
  EXPECT_EQ(d::api_display_name(name), "cudaLaunchKernel");
}

// The tick axis: with CUPTI's timestamp callback, GPU timestamps map through ticks.

TEST_F(CuptiRecordsTest, TickClockPutsGpuTimestampsWhereCpuEventsOfTheSameTickAre) {
  // CLOCK_MONOTONIC ticks (1 ns each); the backend's origin was sampled when CUPTI was enabled,
  // the window's map at its own start, with a slightly different measured rate.
  const d::BackendClock backend{true, d::ClockSample{10'000'000, kWindowStart - 40'000'017}, 1.0};
  const d::ClockMap window(d::ClockSample{50'000'000, kWindowStart + 3}, 1.0000003);
  const std::int64_t range_start = 50'100'000, range_end = 50'900'000, mark = 50'500'000;
  CpuTrace cpu;
  cpu.range("step", window.to_realtime_ns(range_start), window.to_realtime_ns(range_end), 1)
      .instant("mark", window.to_realtime_ns(mark));
  CUpti_ActivityKernel10 launched = kernel(kGemm, 1500, backend.from_ticks(mark), backend.from_ticks(mark + 100'000));
  launched.queued = static_cast<std::uint64_t>(backend.from_ticks(mark - 2'500));
  ActivityBufferBuilder buffer;
  buffer.add(external(1500, pushed_id(1)))
      .add(launch(1500, backend.from_ticks(range_start), backend.from_ticks(range_start + 7'000)))
      .add(launched);
  const Written written = write_window(cpu, collect({&buffer}, {}, backend), window);

  const json range = the_event(written.document, named_slice("user_annotation", "step"), "range");
  const json instant = the_event(written.document, [](const json& e) { return e.value("name", "") == "mark"; }, "mark");
  const json call = the_event(written.document, slice("cuda_runtime", 1500), "launch");
  const json gpu = the_event(written.document, slice("kernel", 1500), "kernel");
  ASSERT_FALSE(range.is_null() || instant.is_null() || call.is_null() || gpu.is_null());
  // The call, timed by CUPTI at the range's start tick, starts exactly where the range starts.
  EXPECT_EQ(call.at("ts"), range.at("ts"));
  EXPECT_EQ(ns_of(call.at("ts")), window.to_realtime_ns(range_start));
  EXPECT_EQ(duration_of(call.at("dur")), window.to_realtime_ns(range_start + 7'000) - window.to_realtime_ns(range_start));
  // The kernel at the mark's tick is at the mark.
  EXPECT_EQ(gpu.at("ts"), instant.at("ts"));
  EXPECT_EQ(ns_of(gpu.at("ts")), window.to_realtime_ns(mark));
  EXPECT_EQ(duration_of(gpu.at("dur")), window.to_realtime_ns(mark + 100'000) - window.to_realtime_ns(mark));
  EXPECT_EQ(gpu.at("args").at("queued"), window.to_realtime_ns(mark - 2'500) / 1000);
  // The raw backend timestamps differ from the window's (40 ms of origin apart): they were mapped.
  EXPECT_NE(backend.from_ticks(mark), window.to_realtime_ns(mark));
}

TEST(CuptiClockTest, TscBackendClockRecoversTheWindowsNanosecondsForTheSameMapAndStaysWithinOneOtherwise) {
  // A 2.7 GHz TSC. One tick is 0.37 ns: the backend's nanosecond timestamps cannot name every
  // tick, but through one map they come back to the CPU's nanoseconds exactly.
  const d::ClockSample origin{1'000'000, kWindowStart};
  const d::BackendClock backend{true, origin, 0.37};
  const d::ClockMap same(origin, 0.37);
  const d::ClockMap window(d::ClockSample{9'000'000, kWindowStart + 2'960'003}, 0.37 * 1.0000001);
  std::int64_t previous = INT64_MIN;
  for (std::int64_t tick = 20'000'000; tick < 20'020'000; ++tick) {
    const std::int64_t timestamp = backend.from_ticks(tick);
    EXPECT_EQ(same.to_realtime_ns(backend.to_ticks(timestamp)), same.to_realtime_ns(tick)) << tick;
    const std::int64_t mapped = window.to_realtime_ns(backend.to_ticks(timestamp));
    EXPECT_LE(std::llabs(mapped - window.to_realtime_ns(tick)), 1) << tick;
    EXPECT_GE(mapped, previous) << "the map must stay monotonic: " << tick;  // a kernel never precedes its call
    previous = mapped;
  }
}

}  // namespace
