// The trace reader (import/chrome_trace.hpp): torch.profiler's traces of every era, dlprof's own
// traces read back field by field, and input that is not a trace.
#include <dlprof/analysis/kernel_attribution.hpp>
#include <dlprof/analysis/step_breakdown.hpp>
#include <dlprof/detail/forward_ops.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/import/chrome_trace.hpp>

#include "sanitized.hpp"
#include "test_files.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using dlprof::ApiEvent;
using dlprof::Category;
using dlprof::EventKind;
using dlprof::GpuEvent;
using dlprof::GpuEventKind;
using dlprof::Trace;
using dlprof::TraceEvent;
using dlprof::TraceReadError;
using dlprof_test::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Helpers

void write_text(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

void write_gzip(const fs::path& path, std::string_view text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

std::string gzip_bytes(std::string_view text) {
  TempDir dir;
  write_gzip(dir.path() / "t.gz", text);
  return dlprof_test::read_file(dir.path() / "t.gz");
}

std::size_t count_events(const Trace& trace, EventKind kind) {
  return static_cast<std::size_t>(std::count_if(trace.events.begin(), trace.events.end(),
                                                [&](const TraceEvent& event) { return event.kind == kind; }));
}

std::size_t count_gpu(const Trace& trace, GpuEventKind kind) {
  return static_cast<std::size_t>(std::count_if(trace.gpu_events.begin(), trace.gpu_events.end(),
                                                [&](const GpuEvent& event) { return event.kind == kind; }));
}

const TraceEvent* find_event(const Trace& trace, std::string_view name) {
  for (const TraceEvent& event : trace.events)
    if (trace.names[event.name] == name) return &event;
  return nullptr;
}

/// The TraceReadError `body` throws; fails the test if it throws nothing else.
template <class Body>
TraceReadError read_error(Body body) {
  try {
    body();
  } catch (const TraceReadError& error) {
    return error;
  }
  ADD_FAILURE() << "no TraceReadError";
  return TraceReadError("", "");
}

Trace parse(std::string_view json) { return dlprof::parse_trace(json, "inline.json"); }

Trace parse_strictly(std::string_view json) {
  dlprof::ReadOptions options;
  options.strict = true;
  return dlprof::parse_trace(json, "inline.json", options);
}

// ---------------------------------------------------------------------------------------------
// torch.profiler's traces (tests/data/reference-traces, written by Kineto on A100 and V100 GPUs)

const fs::path kReferenceTraces = DLPROF_REFERENCE_TRACES_DIR;

class ReferenceTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kReferenceTraces)) GTEST_SKIP() << "no reference traces at " << kReferenceTraces;
  }
  static fs::path only_file(const char* set) { return *fs::directory_iterator(kReferenceTraces / set); }
};

// Expected figures: counted once with Python's json module on the decompressed files (cat and
// ph per event; steps by `^ProfilerStep#\d+`; backward ops by the reader's nesting rule; times
// with decimal.Decimal), then written here.
TEST_F(ReferenceTraceTest, V100ResnetWithSubMicrosecondTimes) {
  const Trace trace = dlprof::read_trace(only_file("hta-1rank-v100-resnet-ns").string());
  EXPECT_EQ(count_events(trace, EventKind::Op), 23910u);
  EXPECT_EQ(count_events(trace, EventKind::Range), 65u);
  EXPECT_EQ(count_events(trace, EventKind::Step), 5u);
  EXPECT_EQ(count_events(trace, EventKind::Instant), 0u);
  EXPECT_EQ(trace.events.size(), 23910u + 65u + 5u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Kernel), 4350u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Memcpy), 1600u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Memset), 145u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Annotation), 15u);
  EXPECT_EQ(trace.gpu_events.size(), 4350u + 1600u + 145u + 15u);
  EXPECT_EQ(trace.api_events.size(), 15329u);
  EXPECT_TRUE(trace.memory_events.empty());
  EXPECT_EQ(std::count_if(trace.events.begin(), trace.events.end(),
                          [](const TraceEvent& e) { return e.kind == EventKind::Op && e.category == Category::Backward; }),
            9535);  // and 25 record_param_comms ops inside backward frames, which stay communication
  // 35 nccl:* ranges and the 45 record_param_comms ops with their collectives' args, 25 of them
  // launched from backward (DDP's hooks) and still communication.
  EXPECT_EQ(std::count_if(trace.events.begin(), trace.events.end(),
                          [](const TraceEvent& e) { return e.category == Category::Communication; }),
            80);
  ASSERT_EQ(trace.collectives.size(), 45u);
  const auto all_reduce = std::find_if(trace.collectives.begin(), trace.collectives.end(),
                                       [](const dlprof::CollectiveCall& call) { return call.name == "allreduce"; });
  ASSERT_NE(all_reduce, trace.collectives.end());
  EXPECT_EQ(all_reduce->dtype, "Float");
  EXPECT_EQ(all_reduce->group_size, 1);
  EXPECT_EQ(all_reduce->group_ranks, "[0]");
  EXPECT_GT(all_reduce->in_nelems, 0);
  EXPECT_EQ(std::count_if(trace.events.begin(), trace.events.end(),
                          [](const TraceEvent& e) { return e.category == Category::Optimizer; }),
            10);

  // "ts": 1712195495502094.565, "dur": 35115.869
  const TraceEvent* step = find_event(trace, "ProfilerStep#101");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->kind, EventKind::Step);
  EXPECT_EQ(step->category, Category::Step);
  EXPECT_EQ(step->start_ns, 1'712'195'495'502'094'565);
  EXPECT_EQ(step->end_ns, 1'712'195'495'502'094'565 + 35'115'869);
  EXPECT_EQ(step->external_id, 1u);
  // The Trace span, "ts": 1712195495406752.797, and Record Window End, 1712195496004644.183.
  EXPECT_EQ(trace.window_start_ns, 1'712'195'495'406'752'797);
  EXPECT_EQ(trace.window_end_ns, 1'712'195'496'004'644'183);
  EXPECT_EQ(trace.file_time_base_ns, 0);  // absolute µs

  EXPECT_EQ(trace.pid, 1102);
  EXPECT_EQ(trace.process_name, "penv#native-main#platform-runtime#python#py_version_3_10");
  ASSERT_EQ(trace.threads.size(), 3u);
  std::map<std::int64_t, std::string> thread_names;
  for (const dlprof::ThreadInfo& thread : trace.threads) thread_names[thread.os_tid] = thread.name;
  EXPECT_EQ(thread_names[1102], "pt_main_thread");
  EXPECT_EQ(thread_names[1262], "pt_autograd_0");  // the later of two thread_name events
  EXPECT_EQ(thread_names.count(-247463936), 1u);

  EXPECT_EQ(trace.distributed.rank, 0);
  EXPECT_EQ(trace.distributed.world_size, 1);
  EXPECT_EQ(trace.distributed.backend, "nccl");
  ASSERT_EQ(trace.devices.size(), 8u);
  EXPECT_EQ(trace.devices[0].name, "Tesla V100-SXM2-32GB");
  EXPECT_EQ(trace.devices[0].total_global_mem, 34079637504);
  EXPECT_EQ(trace.devices[0].compute_major, 7);
  EXPECT_EQ(trace.devices[0].num_sms, 80);
  EXPECT_EQ(trace.devices[0].shared_mem_per_block_optin, 98304);
  EXPECT_EQ(trace.devices[7].id, 7);

  // Everything but the mapped keys, as compact JSON.
  std::map<std::string, std::string> metadata(trace.metadata.begin(), trace.metadata.end());
  EXPECT_EQ(metadata.size(), 15u);
  EXPECT_EQ(metadata["trace_id"], "\"094DFF9CD7781F8ADDEAFBA6A8855CA7\"");
  EXPECT_THAT(metadata["INFO"], ::testing::StartsWith("[\"INFO:2024-04-03 18:51:35 1102:1102 CuptiActivityProfiler"));
  EXPECT_EQ(metadata.count("displayTimeUnit"), 0u);
  EXPECT_EQ(metadata.count("distributedInfo"), 0u);

  // A kernel: "ts": 1712195495505583.000 on device 0, stream 7, launched by a cudaLaunchKernel.
  const auto kernel = std::find_if(trace.gpu_events.begin(), trace.gpu_events.end(),
                                   [](const GpuEvent& e) { return e.kind == GpuEventKind::Kernel; });
  ASSERT_NE(kernel, trace.gpu_events.end());
  EXPECT_EQ(kernel->device, 0u);
  EXPECT_EQ(kernel->stream, 7);
  EXPECT_NE(kernel->correlation, 0u);
  const auto launch = std::find_if(trace.api_events.begin(), trace.api_events.end(),
                                   [&](const ApiEvent& call) { return call.correlation == kernel->correlation; });
  ASSERT_NE(launch, trace.api_events.end());
  EXPECT_EQ(trace.names[launch->name], "cudaLaunchKernel");
  EXPECT_EQ(launch->cbid, 211u);
  EXPECT_EQ(launch->external_id, kernel->external_id);
}

TEST_F(ReferenceTraceTest, A100SimpleAddWithSyncsAndNoSteps) {
  const Trace trace = dlprof::read_trace(only_file("hta-1rank-a100-simple-add").string());
  EXPECT_EQ(count_events(trace, EventKind::Op), 359u);
  EXPECT_EQ(count_events(trace, EventKind::Range), 8u);
  EXPECT_EQ(count_events(trace, EventKind::Step), 0u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Kernel), 79u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Memcpy), 16u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Memset), 3u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Sync), 41u);
  EXPECT_EQ(trace.api_events.size(), 331u);
  ASSERT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads[0].os_tid, 493459);
  EXPECT_EQ(trace.distributed.rank, 0);  // {"rank": 0}
  ASSERT_EQ(trace.devices.size(), 8u);
  EXPECT_EQ(trace.devices[0].name, "NVIDIA A100-PG509-200");
  EXPECT_EQ(trace.devices[0].compute_major, 8);
  // Integer µs: "ts": 1694039968955744
  const TraceEvent* first = find_event(trace, "[param|cuda]");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->start_ns, 1'694'039'968'955'744'000);
  EXPECT_EQ(first->end_ns, (1'694'039'968'955'744 + 41'579'770) * 1000);

  // "Memcpy HtoD (Pageable -> Device)", 92928 bytes.
  const auto copy = std::find_if(trace.gpu_events.begin(), trace.gpu_events.end(),
                                 [&](const GpuEvent& e) { return e.kind == GpuEventKind::Memcpy && e.copy.bytes == 92928; });
  ASSERT_NE(copy, trace.gpu_events.end());
  EXPECT_EQ(copy->copy.copy_kind, 1);         // HtoD
  EXPECT_EQ(copy->copy.source_kind, 1);       // Pageable
  EXPECT_EQ(copy->copy.destination_kind, 3);  // Device
  // "Memset (Device)"
  const auto fill = std::find_if(trace.gpu_events.begin(), trace.gpu_events.end(),
                                 [](const GpuEvent& e) { return e.kind == GpuEventKind::Memset; });
  ASSERT_NE(fill, trace.gpu_events.end());
  EXPECT_EQ(fill->copy.destination_kind, 3);
  // Context Sync: "stream": 4294967295 is CUPTI's "no stream".
  const auto context_sync = std::find_if(trace.gpu_events.begin(), trace.gpu_events.end(), [&](const GpuEvent& e) {
    return e.kind == GpuEventKind::Sync && trace.names[e.name] == "Context Sync";
  });
  ASSERT_NE(context_sync, trace.gpu_events.end());
  EXPECT_EQ(context_sync->stream, -1);
  EXPECT_EQ(context_sync->sync.type, 4);
  // {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_id": 1, "stream": 20, ...}
  const auto wait = std::find_if(trace.gpu_events.begin(), trace.gpu_events.end(), [&](const GpuEvent& e) {
    return e.kind == GpuEventKind::Sync && trace.names[e.name] == "Stream Wait Event" && e.stream == 20;
  });
  ASSERT_NE(wait, trace.gpu_events.end());
  EXPECT_EQ(wait->sync.type, 2);
  EXPECT_EQ(wait->sync.cuda_event_id, 1u);
}

TEST_F(ReferenceTraceTest, TwoRankSetSortedByRank) {
  const std::vector<Trace> ranks = dlprof::read_trace_set({(kReferenceTraces / "hta-2rank-a100-sampled").string()});
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].distributed.rank, 0);
  EXPECT_EQ(ranks[1].distributed.rank, 1);
  EXPECT_EQ(ranks[0].distributed.world_size, 128);
  EXPECT_EQ(ranks[0].pid, 4037);
  EXPECT_EQ(ranks[1].pid, 4045);
  const std::size_t ops[] = {2329, 2302}, ranges[] = {71, 63}, kernels[] = {1154, 1104}, api[] = {1204, 1154},
                    backward[] = {1241, 1266}, inputs[] = {839, 831};
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const Trace& trace = ranks[rank];
    SCOPED_TRACE(rank);
    EXPECT_EQ(count_events(trace, EventKind::Op), ops[rank]);
    EXPECT_EQ(count_events(trace, EventKind::Range), ranges[rank]);
    EXPECT_EQ(count_events(trace, EventKind::Step), 2u);
    EXPECT_EQ(count_gpu(trace, GpuEventKind::Kernel), kernels[rank]);
    EXPECT_EQ(count_gpu(trace, GpuEventKind::Memcpy), 40u);
    EXPECT_EQ(count_gpu(trace, GpuEventKind::Memset), 10u);
    EXPECT_EQ(trace.api_events.size(), api[rank]);
    EXPECT_EQ(static_cast<std::size_t>(std::count_if(trace.events.begin(), trace.events.end(), [](const TraceEvent& e) {
                return e.kind == EventKind::Op && e.category == Category::Backward;
              })),
              backward[rank]);
    EXPECT_EQ(trace.op_inputs.size(), inputs[rank]);
    EXPECT_TRUE(trace.devices.empty());
    EXPECT_EQ(trace.threads.size(), 2u);
  }
  EXPECT_NE(find_event(ranks[1], "ProfilerStep#551"), nullptr);
  // "aten::div" with "Input Dims": [[2048], []], "Input type": ["float", "Scalar"]
  const auto div = std::find_if(ranks[0].op_inputs.begin(), ranks[0].op_inputs.end(), [&](const dlprof::OpInputs& in) {
    return ranks[0].names[in.op] == "aten::div" && ranks[0].names[in.types] == R"(["float", "Scalar"])";
  });
  ASSERT_NE(div, ranks[0].op_inputs.end());
  EXPECT_EQ(ranks[0].names[div->dims], "[[2048], []]");
  EXPECT_EQ(ranks[0].names[div->concrete], "");
  // Files given one by one, in any order, come back sorted by rank.
  const fs::path set = kReferenceTraces / "hta-2rank-a100-sampled";
  const std::vector<Trace> reversed =
      dlprof::read_trace_set({(set / "sampled_rank-1.json.gz").string(), (set / "sampled_rank-0.json.gz").string()});
  ASSERT_EQ(reversed.size(), 2u);
  EXPECT_EQ(reversed[0].pid, 4037);
}

// The reader's sort (detail/sorted_runs.hpp) against std::stable_sort: sequences of one sorted
// run, of a few, and of more runs than it merges (std::stable_sort's own), with ties whose order
// must survive.
TEST(ImportSortTest, SortingSortedRunsKeepsStableSortsOrder) {
  std::mt19937 random(20261125);
  using Item = std::pair<int, std::size_t>;  // a key with many ties, and where the item started
  const auto by_key = [](const Item& a, const Item& b) { return a.first < b.first; };
  for (const std::size_t runs : {1u, 2u, 3u, 7u, 64u, 65u, 1000u}) {
    for (const std::size_t size : {0u, 1u, 2u, 100u, 5000u}) {
      std::vector<Item> items;
      for (std::size_t run = 0; run < runs; ++run) {
        std::vector<int> keys(size / runs + (run < size % runs ? 1 : 0));
        for (int& key : keys) key = static_cast<int>(random() % 50);
        std::sort(keys.begin(), keys.end());
        for (const int key : keys) items.emplace_back(key, items.size());
      }
      std::vector<Item> expected = items;
      std::stable_sort(expected.begin(), expected.end(), by_key);
      dlprof::detail::stable_sort_runs(items.begin(), items.end(), by_key);
      EXPECT_EQ(items, expected) << runs << " runs of " << size << " items in all";
    }
  }
}

TEST_F(ReferenceTraceTest, OrderPromisedByTraceHpp) {
  for (const char* set : {"hta-1rank-v100-resnet-ns", "hta-1rank-a100-simple-add"}) {
    SCOPED_TRACE(set);
    const Trace trace = dlprof::read_trace(only_file(set).string());
    for (std::size_t i = 1; i < trace.events.size(); ++i) {
      const TraceEvent& a = trace.events[i - 1];
      const TraceEvent& b = trace.events[i];
      ASSERT_TRUE(a.thread < b.thread || (a.thread == b.thread && (a.start_ns < b.start_ns ||
                                                                   (a.start_ns == b.start_ns && a.end_ns >= b.end_ns))))
          << i;
    }
    for (std::size_t i = 1; i < trace.gpu_events.size(); ++i) {
      const GpuEvent& a = trace.gpu_events[i - 1];
      const GpuEvent& b = trace.gpu_events[i];
      ASSERT_LE(std::make_tuple(a.device, a.stream, a.start_ns), std::make_tuple(b.device, b.stream, b.start_ns)) << i;
    }
    for (std::size_t i = 1; i < trace.api_events.size(); ++i) {
      const ApiEvent& a = trace.api_events[i - 1];
      const ApiEvent& b = trace.api_events[i];
      ASSERT_LE(std::make_tuple(a.thread, a.start_ns), std::make_tuple(b.thread, b.start_ns)) << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dlprof's own traces, written by save_chrome_trace and read back field by field

Trace every_kind_of_event() {
  Trace trace;
  const auto name = [&](std::string_view text) {
    trace.names.emplace_back(text);
    return static_cast<std::uint32_t>(trace.names.size() - 1);
  };
  constexpr std::int64_t t0 = 1'763'880'000'123'456'789;
  trace.window_start_ns = t0;
  trace.window_end_ns = t0 + 50'000'000;
  trace.pid = 4242;
  trace.process_name = "trainer";
  trace.clock_source = "tsc";
  trace.dropped_events = 3;
  trace.clipped_ranges = 1;
  trace.overflowed_names = 2;
  trace.threads = {dlprof::ThreadInfo{4242, "main"}, dlprof::ThreadInfo{4250, "pt_autograd_0"},
                   dlprof::ThreadInfo{4251, "idle worker"}};
  trace.distributed.backend = "nccl";
  trace.distributed.rank = 3;
  trace.distributed.world_size = 8;
  trace.distributed.clock_offset = dlprof::ClockOffset{0, -1'234'567, 42'000, 16};
  trace.distributed.groups = {dlprof::ProcessGroupInfo{"0", "default_pg", "cuda:nccl", 8, {0, 1, 2, 3, 4, 5, 6, 7}},
                              dlprof::ProcessGroupInfo{"1", "tp \"pairs\"", "cuda:nccl", 2, {2, 3}}};
  trace.distributed.nccl_version = "2.21.5";
  dlprof::DeviceProperties device;
  device.id = 0;
  device.name = "NVIDIA H100 80GB HBM3";
  device.total_global_mem = 84'929'216'512;
  device.compute_major = 9;
  device.compute_minor = 0;
  device.max_threads_per_block = 1024;
  device.max_threads_per_multiprocessor = 2048;
  device.regs_per_block = 65536;
  device.regs_per_multiprocessor = 65536;
  device.warp_size = 32;
  device.shared_mem_per_block = 49152;
  device.shared_mem_per_block_optin = 232448;
  device.shared_mem_per_multiprocessor = 233472;
  device.num_sms = 132;
  trace.devices = {device};
  trace.metadata = {{"record_shapes", "1"}, {"job", R"({"name": "resnet", "tags": ["a", "b\"c"], "n": 1.5})"}};

  const auto slice = [&](std::uint32_t thread, std::string_view text, std::int64_t start, std::int64_t end, EventKind kind,
                         Category category, std::uint64_t external_id) {
    TraceEvent event;
    event.thread = thread;
    event.name = name(text);
    event.start_ns = t0 + start;
    event.end_ns = t0 + end;
    event.kind = kind;
    event.category = category;
    event.external_id = external_id;
    trace.events.push_back(event);
    return &trace.events.back();
  };
  trace.events.reserve(32);
  slice(0, "ProfilerStep#7", 1000, 40'000'000, EventKind::Step, Category::Step, 1);
  slice(0, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 2000, 3'000'000, EventKind::Range,
        Category::DataLoader, 2);
  slice(0, "nn.Module: Linear_0", 3'000'100, 9'000'000, EventKind::Range, Category::Forward, 3);
  TraceEvent* mm = slice(0, "aten::mm", 3'000'200, 8'000'000, EventKind::Op, Category::User, 4);
  mm->sequence_number = 17;
  mm->forward_thread_id = 1;
  mm->inputs = 0;
  trace.op_inputs.push_back(dlprof::OpInputs{name("[[4, 8], [8, 8]]"), name(R"(["float", "float"])"),
                                             name(R"(["", ""])"), mm->name, 512, 0, name("[[8, 1], [1, 8]]")});
  TraceEvent* add = slice(0, "aten::add", 8'000'001, 8'500'000, EventKind::Op, Category::User, 5);
  add->inputs = 1;
  // Call stacks: two frames of modules the trace names (read back as addresses), one of none,
  // and a symbolised one (read back as text); two events share a stack.
  trace.modules = {dlprof::LoadedModule{"/opt/app/train", "0123abcd", 0x555500000000, 0x555500001000, 0x555500009000},
                   dlprof::LoadedModule{"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so", "", 0x7f1000000000,
                                        0x7f1000100000, 0x7f1002000000}};
  trace.stack_frames = {dlprof::StackFrame{0x7f1000123456, dlprof::StackFrame::kNoText},
                        dlprof::StackFrame{0x555500001234, dlprof::StackFrame::kNoText},
                        dlprof::StackFrame{0, name("train.cpp(142): Block::forward")},
                        dlprof::StackFrame{0x42, dlprof::StackFrame::kNoText}};
  trace.stacks = {dlprof::CallStack{0, 3}, dlprof::CallStack{3, 1}};
  mm->stack = 0;
  add->stack = 0;
  trace.events[2].stack = 1;
  trace.stackless_events = 6;
  trace.op_inputs.push_back(dlprof::OpInputs{name("[[4], []]"), name(R"(["float", "Scalar"])"), name(R"(["", "1"])"),
                                             add->name, 0, 0});
  slice(0, "Optimizer.step#SGD.step", 20'000'000, 25'000'000, EventKind::Range, Category::Optimizer, 6);
  slice(0, "record_param_comms", 25'900'000, 27'100'000, EventKind::Op, Category::Communication, 11);
  dlprof::CollectiveCall all_reduce;
  all_reduce.thread = 0;
  all_reduce.start_ns = t0 + 25'900'000;
  all_reduce.name = "allreduce";
  all_reduce.dtype = "BFloat16";
  all_reduce.in_nelems = all_reduce.out_nelems = 1 << 20;
  all_reduce.group_size = 8;
  all_reduce.rank = 3;
  all_reduce.group_name = "0";
  all_reduce.group_desc = "default_pg";
  all_reduce.group_ranks = "[0, 1, 2, 3, 4, 5, 6, 7]";
  all_reduce.in_split = all_reduce.out_split = "[]";
  all_reduce.seq = 41;
  trace.collectives.push_back(all_reduce);
  slice(0, "nccl:all_reduce", 26'000'000, 27'000'000, EventKind::Range, Category::Communication, 7);
  TraceEvent instant;
  instant.thread = 0;
  instant.name = name("checkpoint");
  instant.start_ns = instant.end_ns = t0 + 30'000'000;
  instant.kind = EventKind::Instant;
  trace.events.push_back(instant);
  TraceEvent counter = instant;
  counter.name = name("loss");
  counter.start_ns = counter.end_ns = t0 + 31'000'000;
  counter.kind = EventKind::Counter;
  counter.value = 0.8125;
  trace.events.push_back(counter);
  TraceEvent* backward =
      slice(1, "autograd::engine::evaluate_function: MmBackward0", 10'000'000, 15'000'000, EventKind::Op, Category::Backward, 8);
  backward->sequence_number = 17;
  backward->forward_thread_id = 1;
  slice(1, "MmBackward0", 10'000'100, 14'000'000, EventKind::Op, Category::Backward, 9)->sequence_number = 17;
  trace.events.back().forward_thread_id = 1;
  slice(1, "aten::mm", 10'000'200, 13'000'000, EventKind::Op, Category::Backward, 10);

  const auto work = [&](GpuEventKind kind, std::string_view text, std::uint32_t device_id, std::int64_t stream,
                        std::int64_t start, std::int64_t end, std::uint32_t correlation, std::uint64_t external_id) {
    GpuEvent event;
    event.kind = kind;
    event.name = name(text);
    event.device = device_id;
    event.context = 1;
    event.stream = stream;
    event.start_ns = t0 + start;
    event.end_ns = t0 + end;
    event.correlation = correlation;
    event.external_id = external_id;
    trace.gpu_events.push_back(event);
    return &trace.gpu_events.back();
  };
  trace.gpu_events.reserve(16);
  work(GpuEventKind::Annotation, "nn.Module: Linear_0", 0, 7, 3'100'000, 7'900'000, 0, 3)->context = 0;  // not written
  GpuEvent* kernel = work(GpuEventKind::Kernel, "ampere_sgemm_32x128_nn", 0, 7, 3'200'000, 3'900'000, 101, 4);
  kernel->kernel.grid[0] = 128;
  kernel->kernel.grid[1] = 2;
  kernel->kernel.block[0] = 256;
  kernel->kernel.registers_per_thread = 96;
  kernel->kernel.static_shared_memory = 16384;
  kernel->kernel.queued_ns = 5000;
  kernel->kernel.blocks_per_sm = 0.96875f;
  kernel->kernel.warps_per_sm = 7.75f;
  kernel->kernel.est_achieved_occupancy_percent = 12;
  GpuEvent* copy = work(GpuEventKind::Memcpy, "Memcpy HtoD (Pinned -> Device)", 0, 7, 4'000'000, 4'100'000, 102, 4);
  copy->copy.bytes = 1 << 20;
  copy->copy.copy_kind = 1;
  copy->copy.source_kind = 2;
  copy->copy.destination_kind = 3;
  GpuEvent* fill = work(GpuEventKind::Memset, "Memset (Device)", 0, 7, 4'200'000, 4'300'000, 103, 5);
  fill->copy.bytes = 4096;
  fill->copy.destination_kind = 3;
  GpuEvent* peer = work(GpuEventKind::MemcpyPeer, "Memcpy PtoP (Device -> Device)", 0, 7, 4'400'000, 4'500'000, 104, 5);
  peer->copy.bytes = 8192;
  peer->copy.copy_kind = 10;
  peer->copy.source_kind = 3;
  peer->copy.destination_kind = 3;
  peer->copy.source_device = 0;
  peer->copy.destination_device = 1;
  peer->copy.source_context = 1;
  peer->copy.destination_context = 2;
  GpuEvent* sync = work(GpuEventKind::Sync, "Event Sync", 0, 7, 4'600'000, 4'700'000, 105, 5);
  sync->sync.type = 1;
  sync->sync.cuda_event_id = 9;
  GpuEvent* context_sync = work(GpuEventKind::Sync, "Context Sync", 0, -1, 4'800'000, 4'900'000, 106, 0);
  context_sync->sync.type = 4;
  work(GpuEventKind::Kernel, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 13,
       26'100'000, 26'900'000, 107, 7);
  // trace.hpp's order: device, stream, start.
  std::stable_sort(trace.gpu_events.begin(), trace.gpu_events.end(), [](const GpuEvent& a, const GpuEvent& b) {
    return std::make_tuple(a.device, a.stream, a.start_ns) < std::make_tuple(b.device, b.stream, b.start_ns);
  });

  const auto call = [&](std::string_view text, std::uint32_t thread, std::int64_t start, std::uint32_t cbid,
                        std::uint32_t correlation, std::uint64_t external_id, bool driver) {
    ApiEvent event;
    event.name = name(text);
    event.thread = thread;
    event.start_ns = t0 + start;
    event.end_ns = t0 + start + 5000;
    event.cbid = cbid;
    event.correlation = correlation;
    event.external_id = external_id;
    event.driver = driver;
    trace.api_events.push_back(event);
  };
  call("cudaLaunchKernel", 0, 3'100'000, 211, 101, 4, false);
  call("cudaMemcpyAsync", 0, 3'950'000, 41, 102, 4, false);
  call("cudaMemsetAsync", 0, 4'150'000, 51, 103, 5, false);
  call("cuLaunchKernel", 1, 10'500'000, 307, 108, 10, true);

  dlprof::MemoryEvent allocation;
  allocation.time_ns = t0 + 3'000'300;
  allocation.address = 0x7f00'0000'1000;
  allocation.bytes = 4096;
  allocation.total_allocated = 8192;
  allocation.total_reserved = 2 << 20;
  allocation.device_type = dlprof::MemoryDeviceType::CUDA;
  allocation.device = 0;
  allocation.thread = 0;
  dlprof::MemoryEvent release = allocation;
  release.time_ns = t0 + 12'000'000;
  release.bytes = -4096;
  release.total_allocated = 4096;
  release.device_type = dlprof::MemoryDeviceType::CPU;
  release.device = -1;
  release.thread = 1;
  trace.memory_events = {allocation, release};
  dlprof::MemoryTag tag;
  tag.time_ns = t0 + 3'000'400;
  tag.address = allocation.address;
  tag.bytes = 4096;
  tag.device_type = dlprof::MemoryDeviceType::CUDA;
  tag.device = 0;
  tag.category = dlprof::MemoryCategory::OptimizerState;
  tag.thread = 1;
  trace.memory_tags = {tag};
  dlprof::OutOfMemoryEvent failure;
  failure.time_ns = t0 + 3'000'500;
  failure.bytes = std::int64_t{2} << 30;
  failure.total_allocated = 8192;
  failure.total_reserved = 2 << 20;
  failure.device_type = dlprof::MemoryDeviceType::CUDA;
  failure.device = 0;
  failure.thread = 0;
  trace.out_of_memory = {failure};
  trace.overhead_events = {dlprof::OverheadEvent{t0 + 45'000'000, t0 + 45'100'000, name("Instrumentation")}};

  trace.gpu.enabled = true;
  trace.gpu.records = 11;
  trace.gpu.dropped_records = 1;
  trace.gpu.cupti_dropped_records = 2;
  trace.gpu.unknown_records = 3;
  trace.gpu.late_records = 4;
  trace.gpu.clipped_annotations = 5;
  trace.gpu.cupti_version = "13.0";
  trace.gpu.driver_version = "580.65";
  // Backward ops carry their forward op's stack, as a recorded window gives them.
  dlprof::detail::inherit_forward_stacks(trace);
  return trace;
}

void expect_same(const Trace& expected, const Trace& actual) {
  EXPECT_EQ(actual.pid, expected.pid);
  EXPECT_EQ(actual.process_name, expected.process_name);
  EXPECT_EQ(actual.window_start_ns, expected.window_start_ns);
  EXPECT_EQ(actual.window_end_ns, expected.window_end_ns);
  EXPECT_EQ(actual.dropped_events, expected.dropped_events);
  EXPECT_EQ(actual.clipped_ranges, expected.clipped_ranges);
  EXPECT_EQ(actual.overflowed_names, expected.overflowed_names);
  EXPECT_EQ(actual.clock_source, expected.clock_source);
  EXPECT_EQ(actual.distributed.backend, expected.distributed.backend);
  EXPECT_EQ(actual.distributed.rank, expected.distributed.rank);
  EXPECT_EQ(actual.distributed.world_size, expected.distributed.world_size);
  EXPECT_EQ(actual.distributed.nccl_version, expected.distributed.nccl_version);
  ASSERT_EQ(actual.distributed.groups.size(), expected.distributed.groups.size());
  for (std::size_t i = 0; i < expected.distributed.groups.size(); ++i) {
    const dlprof::ProcessGroupInfo& a = actual.distributed.groups[i];
    const dlprof::ProcessGroupInfo& e = expected.distributed.groups[i];
    EXPECT_EQ(std::tie(a.name, a.desc, a.backend_config, a.size, a.ranks), std::tie(e.name, e.desc, e.backend_config, e.size, e.ranks));
  }
  ASSERT_EQ(actual.distributed.clock_offset.has_value(), expected.distributed.clock_offset.has_value());
  if (const auto& e = expected.distributed.clock_offset) {
    const dlprof::ClockOffset& a = *actual.distributed.clock_offset;
    EXPECT_EQ(std::tie(a.reference_rank, a.offset_ns, a.uncertainty_ns, a.round_trips),
              std::tie(e->reference_rank, e->offset_ns, e->uncertainty_ns, e->round_trips));
  }
  ASSERT_EQ(actual.collectives.size(), expected.collectives.size());
  for (std::size_t i = 0; i < expected.collectives.size(); ++i) {
    const dlprof::CollectiveCall& a = actual.collectives[i];
    const dlprof::CollectiveCall& e = expected.collectives[i];
    EXPECT_EQ(std::tie(a.thread, a.start_ns, a.name, a.dtype, a.in_nelems, a.out_nelems, a.group_size, a.rank,
                       a.group_name, a.group_desc, a.group_ranks, a.in_split, a.out_split, a.peer, a.seq),
              std::tie(e.thread, e.start_ns, e.name, e.dtype, e.in_nelems, e.out_nelems, e.group_size, e.rank,
                       e.group_name, e.group_desc, e.group_ranks, e.in_split, e.out_split, e.peer, e.seq))
        << i;
  }
  EXPECT_EQ(actual.metadata, expected.metadata);
  EXPECT_EQ(actual.read_result.skipped_events, expected.read_result.skipped_events);
  EXPECT_EQ(actual.read_result.first_skip_offset, expected.read_result.first_skip_offset);
  EXPECT_EQ(actual.read_result.first_skip_reason, expected.read_result.first_skip_reason);
  EXPECT_EQ(actual.read_result.ignored_values, expected.read_result.ignored_values);
  EXPECT_EQ(actual.read_result.notes, expected.read_result.notes);
  ASSERT_EQ(actual.threads.size(), expected.threads.size());
  for (std::size_t i = 0; i < expected.threads.size(); ++i) {
    EXPECT_EQ(actual.threads[i].os_tid, expected.threads[i].os_tid) << i;
    EXPECT_EQ(actual.threads[i].name, expected.threads[i].name) << i;
  }
  ASSERT_EQ(actual.devices.size(), expected.devices.size());
  for (std::size_t i = 0; i < expected.devices.size(); ++i) {
    const dlprof::DeviceProperties& a = actual.devices[i];
    const dlprof::DeviceProperties& e = expected.devices[i];
    EXPECT_EQ(std::tie(a.id, a.name, a.total_global_mem, a.compute_major, a.compute_minor, a.max_threads_per_block,
                       a.max_threads_per_multiprocessor, a.regs_per_block, a.regs_per_multiprocessor, a.warp_size,
                       a.shared_mem_per_block, a.shared_mem_per_block_optin, a.shared_mem_per_multiprocessor, a.num_sms),
              std::tie(e.id, e.name, e.total_global_mem, e.compute_major, e.compute_minor, e.max_threads_per_block,
                       e.max_threads_per_multiprocessor, e.regs_per_block, e.regs_per_multiprocessor, e.warp_size,
                       e.shared_mem_per_block, e.shared_mem_per_block_optin, e.shared_mem_per_multiprocessor, e.num_sms));
  }
  // Names are compared as text: the tables may hold them at other indices.
  const auto text = [](const Trace& trace, std::uint32_t index) { return trace.names.at(index); };
  ASSERT_EQ(actual.events.size(), expected.events.size());
  for (std::size_t i = 0; i < expected.events.size(); ++i) {
    SCOPED_TRACE(fmt::format("event {} {}", i, text(expected, expected.events[i].name)));
    const TraceEvent& a = actual.events[i];
    const TraceEvent& e = expected.events[i];
    EXPECT_EQ(text(actual, a.name), text(expected, e.name));
    EXPECT_EQ(a.start_ns, e.start_ns);
    EXPECT_EQ(a.end_ns, e.end_ns);
    EXPECT_EQ(a.kind, e.kind);
    EXPECT_EQ(a.category, e.category);
    EXPECT_EQ(a.thread, e.thread);
    EXPECT_EQ(a.external_id, e.external_id);
    EXPECT_EQ(a.sequence_number, e.sequence_number);
    EXPECT_EQ(a.forward_thread_id, e.forward_thread_id);
    EXPECT_EQ(a.value, e.value);
    ASSERT_EQ(a.stack == TraceEvent::kNoStack, e.stack == TraceEvent::kNoStack);
    if (e.stack != TraceEvent::kNoStack) {
      const dlprof::CallStack& as = actual.stacks.at(a.stack);
      const dlprof::CallStack& es = expected.stacks.at(e.stack);
      ASSERT_EQ(as.depth, es.depth);
      for (std::uint32_t f = 0; f < es.depth; ++f) {
        const dlprof::StackFrame& af = actual.stack_frames.at(as.first + f);
        const dlprof::StackFrame& ef = expected.stack_frames.at(es.first + f);
        EXPECT_EQ(af.address, ef.address) << "frame " << f;
        ASSERT_EQ(af.text == dlprof::StackFrame::kNoText, ef.text == dlprof::StackFrame::kNoText) << "frame " << f;
        if (ef.text != dlprof::StackFrame::kNoText) {
          EXPECT_EQ(text(actual, af.text), text(expected, ef.text));
        }
      }
    }
    ASSERT_EQ(a.inputs == TraceEvent::kNoInputs, e.inputs == TraceEvent::kNoInputs);
    if (e.inputs != TraceEvent::kNoInputs) {
      const dlprof::OpInputs& ai = actual.op_inputs.at(a.inputs);
      const dlprof::OpInputs& ei = expected.op_inputs.at(e.inputs);
      EXPECT_EQ(text(actual, ai.dims), text(expected, ei.dims));
      EXPECT_EQ(text(actual, ai.types), text(expected, ei.types));
      EXPECT_EQ(text(actual, ai.concrete), text(expected, ei.concrete));
      EXPECT_EQ(text(actual, ai.op), text(expected, ei.op));
      EXPECT_EQ(ai.flops, ei.flops);
      ASSERT_EQ(ai.strides == dlprof::OpInputs::kNoText, ei.strides == dlprof::OpInputs::kNoText);
      if (ei.strides != dlprof::OpInputs::kNoText) {
        EXPECT_EQ(text(actual, ai.strides), text(expected, ei.strides));
      }
    }
  }
  ASSERT_EQ(actual.gpu_events.size(), expected.gpu_events.size());
  for (std::size_t i = 0; i < expected.gpu_events.size(); ++i) {
    SCOPED_TRACE(fmt::format("GPU event {} {}", i, text(expected, expected.gpu_events[i].name)));
    const GpuEvent& a = actual.gpu_events[i];
    const GpuEvent& e = expected.gpu_events[i];
    EXPECT_EQ(text(actual, a.name), text(expected, e.name));
    EXPECT_EQ(std::tie(a.start_ns, a.end_ns, a.external_id, a.device, a.context, a.stream, a.correlation, a.kind),
              std::tie(e.start_ns, e.end_ns, e.external_id, e.device, e.context, e.stream, e.correlation, e.kind));
    EXPECT_EQ(std::vector<std::uint32_t>(a.kernel.grid, a.kernel.grid + 3), std::vector<std::uint32_t>(e.kernel.grid, e.kernel.grid + 3));
    EXPECT_EQ(std::vector<std::uint32_t>(a.kernel.block, a.kernel.block + 3), std::vector<std::uint32_t>(e.kernel.block, e.kernel.block + 3));
    EXPECT_EQ(std::tie(a.kernel.registers_per_thread, a.kernel.static_shared_memory, a.kernel.dynamic_shared_memory,
                       a.kernel.queued_ns, a.kernel.blocks_per_sm, a.kernel.warps_per_sm, a.kernel.est_achieved_occupancy_percent),
              std::tie(e.kernel.registers_per_thread, e.kernel.static_shared_memory, e.kernel.dynamic_shared_memory,
                       e.kernel.queued_ns, e.kernel.blocks_per_sm, e.kernel.warps_per_sm, e.kernel.est_achieved_occupancy_percent));
    EXPECT_EQ(std::tie(a.copy.bytes, a.copy.copy_kind, a.copy.source_kind, a.copy.destination_kind, a.copy.source_device,
                       a.copy.destination_device, a.copy.source_context, a.copy.destination_context),
              std::tie(e.copy.bytes, e.copy.copy_kind, e.copy.source_kind, e.copy.destination_kind, e.copy.source_device,
                       e.copy.destination_device, e.copy.source_context, e.copy.destination_context));
    EXPECT_EQ(std::tie(a.sync.type, a.sync.cuda_event_id), std::tie(e.sync.type, e.sync.cuda_event_id));
  }
  ASSERT_EQ(actual.api_events.size(), expected.api_events.size());
  for (std::size_t i = 0; i < expected.api_events.size(); ++i) {
    const ApiEvent& a = actual.api_events[i];
    const ApiEvent& e = expected.api_events[i];
    EXPECT_EQ(text(actual, a.name), text(expected, e.name)) << i;
    EXPECT_EQ(std::tie(a.start_ns, a.end_ns, a.external_id, a.thread, a.cbid, a.correlation, a.driver),
              std::tie(e.start_ns, e.end_ns, e.external_id, e.thread, e.cbid, e.correlation, e.driver))
        << i;
  }
  ASSERT_EQ(actual.memory_events.size(), expected.memory_events.size());
  for (std::size_t i = 0; i < expected.memory_events.size(); ++i) {
    const dlprof::MemoryEvent& a = actual.memory_events[i];
    const dlprof::MemoryEvent& e = expected.memory_events[i];
    EXPECT_EQ(std::tie(a.time_ns, a.address, a.bytes, a.total_allocated, a.total_reserved, a.device_type, a.device, a.thread),
              std::tie(e.time_ns, e.address, e.bytes, e.total_allocated, e.total_reserved, e.device_type, e.device, e.thread))
        << i;
  }
  ASSERT_EQ(actual.memory_tags.size(), expected.memory_tags.size());
  for (std::size_t i = 0; i < expected.memory_tags.size(); ++i) {
    const dlprof::MemoryTag& a = actual.memory_tags[i];
    const dlprof::MemoryTag& e = expected.memory_tags[i];
    EXPECT_EQ(std::tie(a.time_ns, a.address, a.bytes, a.device_type, a.device, a.category, a.thread),
              std::tie(e.time_ns, e.address, e.bytes, e.device_type, e.device, e.category, e.thread))
        << i;
  }
  ASSERT_EQ(actual.out_of_memory.size(), expected.out_of_memory.size());
  for (std::size_t i = 0; i < expected.out_of_memory.size(); ++i) {
    const dlprof::OutOfMemoryEvent& a = actual.out_of_memory[i];
    const dlprof::OutOfMemoryEvent& e = expected.out_of_memory[i];
    EXPECT_EQ(std::tie(a.time_ns, a.bytes, a.total_allocated, a.total_reserved, a.device_type, a.device, a.thread),
              std::tie(e.time_ns, e.bytes, e.total_allocated, e.total_reserved, e.device_type, e.device, e.thread))
        << i;
  }
  ASSERT_EQ(actual.overhead_events.size(), expected.overhead_events.size());
  for (std::size_t i = 0; i < expected.overhead_events.size(); ++i) {
    EXPECT_EQ(text(actual, actual.overhead_events[i].name), text(expected, expected.overhead_events[i].name));
    EXPECT_EQ(actual.overhead_events[i].start_ns, expected.overhead_events[i].start_ns);
    EXPECT_EQ(actual.overhead_events[i].end_ns, expected.overhead_events[i].end_ns);
  }
  EXPECT_EQ(actual.stacks.size(), expected.stacks.size()) << "a stack shared by events is written and read as one";
  EXPECT_EQ(actual.stackless_events, expected.stackless_events);
  ASSERT_EQ(actual.modules.size(), expected.modules.size());
  for (std::size_t i = 0; i < expected.modules.size(); ++i) {
    const dlprof::LoadedModule& am = actual.modules[i];
    const dlprof::LoadedModule& em = expected.modules[i];
    EXPECT_EQ(std::tie(am.path, am.build_id, am.base, am.start, am.end), std::tie(em.path, em.build_id, em.base, em.start, em.end));
  }
  const dlprof::GpuCollectionStats& a = actual.gpu;
  const dlprof::GpuCollectionStats& e = expected.gpu;
  EXPECT_EQ(std::tie(a.enabled, a.records, a.dropped_records, a.cupti_dropped_records, a.unknown_records, a.late_records,
                     a.clipped_annotations, a.cupti_version, a.driver_version),
            std::tie(e.enabled, e.records, e.dropped_records, e.cupti_dropped_records, e.unknown_records, e.late_records,
                     e.clipped_annotations, e.cupti_version, e.driver_version));
}

TEST(ImportRoundTripTest, SavedTraceReadsBackFieldByField) {
  const Trace expected = every_kind_of_event();
  for (const char* file : {"trace.pt.trace.json", "trace.pt.trace.json.gz"}) {
    SCOPED_TRACE(file);
    TempDir dir;
    const std::string path = (dir.path() / file).string();
    dlprof::save_chrome_trace(expected, path);
    expect_same(expected, dlprof::read_trace(path));
  }
}

TEST(ImportRoundTripTest, ReadTraceSavedAgainIsTheSameTrace) {
  const Trace first = dlprof::parse_trace(
      [] {
        TempDir dir;
        dlprof::save_chrome_trace(every_kind_of_event(), (dir.path() / "a.json").string());
        return dlprof_test::read_file(dir.path() / "a.json");
      }(),
      "a.json");
  TempDir dir;
  dlprof::save_chrome_trace(first, (dir.path() / "b.json").string());
  expect_same(first, dlprof::read_trace((dir.path() / "b.json").string()));
}

TEST(ImportRoundTripTest, HostileNamesReadBackRepairedAndSaveAgainUnchanged) {
  // kHostileName wherever a trace holds text: what is read back is the name as the writer
  // repaired it, and that trace saved again is the same file, byte for byte.
  const std::string& hostile = dlprof_test::kHostileName;
  const std::string repaired = dlprof_test::repaired_hostile_name();
  Trace written = every_kind_of_event();
  for (std::string& name : written.names)
    if (name == "aten::mm" || name == "ampere_sgemm_32x128_nn" || name == "checkpoint") name = hostile;
  written.threads[1].name = hostile;
  written.process_name = hostile;
  written.devices[0].name = hostile;
  written.metadata.emplace_back(hostile, "\"value\"");
  written.distributed.backend = hostile;
  written.gpu.cupti_version = hostile;
  for (const char* file : {"hostile.pt.trace.json", "hostile.pt.trace.json.gz"}) {
    SCOPED_TRACE(file);
    TempDir dir;
    const std::string path = (dir.path() / file).string();
    dlprof::save_chrome_trace(written, path);
    dlprof::ReadOptions strict;
    strict.strict = true;
    const Trace read = dlprof::read_trace(path, strict);
    EXPECT_TRUE(read.read_result.empty());
    EXPECT_EQ(std::count(read.names.begin(), read.names.end(), hostile), 0);
    ASSERT_EQ(read.events.size(), written.events.size());
    EXPECT_EQ(std::count_if(read.events.begin(), read.events.end(),
                            [&](const TraceEvent& event) { return read.name_of(event) == repaired; }),
              3);  // the two aten::mm and the instant
    EXPECT_EQ(std::count_if(read.gpu_events.begin(), read.gpu_events.end(),
                            [&](const GpuEvent& work) { return read.names[work.name] == repaired; }),
              1);
    EXPECT_EQ(read.threads[1].name, repaired);
    EXPECT_EQ(read.process_name, repaired);
    ASSERT_EQ(read.devices.size(), 1u);
    EXPECT_EQ(read.devices[0].name, repaired);
    EXPECT_EQ(read.distributed.backend, repaired);
    EXPECT_EQ(read.gpu.cupti_version, repaired);
    EXPECT_THAT(read.metadata, ::testing::Contains(std::pair<std::string, std::string>(repaired, "\"value\"")));

    const std::string again = (dir.path() / "again.pt.trace.json").string();
    dlprof::save_chrome_trace(read, again);
    const std::string first_text = dlprof_test::read_gzip(path);  // zlib reads a plain file as it is
    std::string second_text = dlprof_test::read_file(again);
    // traceName is the path each was saved to.
    const std::string first_name = fmt::format("\"traceName\": \"{}\"", path);
    const std::string second_name = fmt::format("\"traceName\": \"{}\"", again);
    ASSERT_NE(second_text.find(second_name), std::string::npos);
    second_text.replace(second_text.find(second_name), second_name.size(), first_name);
    EXPECT_EQ(second_text, first_text);
  }
}

// ---------------------------------------------------------------------------------------------
// Every era of torch.profiler's format, written by hand

TEST(ImportEraTest, BareArrayOfEvents) {
  const Trace trace = parse(R"json([
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 100, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 10, "tid": 11, "ts": 106, "dur": 1}
  ])json");
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.events[0].start_ns, 100'000);
  EXPECT_EQ(trace.events[0].end_ns, 105'000);
  EXPECT_EQ(trace.pid, 10);
  ASSERT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads[0].os_tid, 11);
  EXPECT_EQ(trace.distributed.rank, 0);  // no distributedInfo: rank 0, as HTA assumes
}

TEST(ImportEraTest, LegacyCategoriesAndStringStreamTids) {
  // PyTorch 1.8-era Kineto: Operator/Runtime/Kernel/Memcpy/Memset, "stream 7" tids, no args.stream.
  const Trace trace = parse(R"json({"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 77, "tid": "77", "ts": 1623142623460000, "dur": 900},
    {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 77, "tid": "77", "ts": 1623142623460100, "dur": 50,
     "args": {"Input dims": [[1, 3, 224, 224], [64, 3, 7, 7]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": "77", "ts": 1623142623460110, "dur": 9,
     "args": {"correlation": 31, "external id": 5}},
    {"ph": "X", "cat": "Kernel", "name": "implicit_convolve_sgemm", "pid": 0, "tid": "stream 7",
     "ts": 1623142623460200, "dur": 40, "args": {"queued": 0, "device": 0, "context": 1, "correlation": 31,
     "external id": 5, "registers per thread": 64, "shared memory": 4096, "blocks per SM": "inf",
     "warps per SM": 8.5, "grid": [112, 1, 1], "block": [256, 1, 1], "theoretical occupancy %": 25}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
     "ts": 1623142623460300, "dur": 3, "args": {"device": 0, "bytes": 602112, "memory bandwidth (GB/s)": "N/A"}},
    {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 14", "ts": 1623142623460310,
     "dur": 1, "args": {"bytes": 64}}
  ]})json");
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.events[0].kind, EventKind::Step);
  EXPECT_EQ(trace.events[1].kind, EventKind::Op);
  ASSERT_NE(trace.events[1].inputs, TraceEvent::kNoInputs);
  EXPECT_EQ(trace.names[trace.op_inputs[trace.events[1].inputs].dims], "[[1, 3, 224, 224], [64, 3, 7, 7]]");
  ASSERT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads[0].name, "77");  // a string tid names its thread
  ASSERT_EQ(trace.api_events.size(), 1u);
  EXPECT_EQ(trace.api_events[0].correlation, 31u);
  EXPECT_EQ(trace.api_events[0].external_id, 5u);
  ASSERT_EQ(trace.gpu_events.size(), 3u);
  const GpuEvent& kernel = trace.gpu_events[0];
  EXPECT_EQ(kernel.kind, GpuEventKind::Kernel);
  EXPECT_EQ(kernel.stream, 7);  // from "stream 7"
  EXPECT_EQ(kernel.external_id, 5u);
  EXPECT_EQ(kernel.kernel.blocks_per_sm, std::numeric_limits<float>::infinity());
  EXPECT_EQ(kernel.kernel.warps_per_sm, 8.5f);
  EXPECT_EQ(kernel.kernel.grid[0], 112u);
  EXPECT_EQ(kernel.kernel.block[0], 256u);
  EXPECT_EQ(kernel.kernel.static_shared_memory, 4096u);
  EXPECT_EQ(trace.gpu_events[1].kind, GpuEventKind::Memcpy);
  EXPECT_EQ(trace.gpu_events[1].copy.bytes, 602112u);
  EXPECT_EQ(trace.gpu_events[2].kind, GpuEventKind::Memset);
  EXPECT_EQ(trace.gpu_events[2].stream, 14);
}

TEST(ImportEraTest, RelativeMicrosecondsWithBaseTimeAfterTheEvents) {
  // Kineto 2024: ts relative to baseTimeNanoseconds, which older files write after traceEvents.
  const Trace trace = parse(R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 5, "tid": 5, "ts": 4458676416788.066, "dur": 222442.191},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 5, "tid": 5, "ts": 4458676416790.001,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 139870957633536, "Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2097152}},
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 4458676700000.5}
  ], "displayTimeUnit": "ms", "baseTimeNanoseconds": 1711964646000000000})json");
  constexpr std::int64_t kBase = 1'711'964'646'000'000'000;
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].start_ns, kBase + 4'458'676'416'788'066);
  EXPECT_EQ(trace.events[0].end_ns, kBase + 4'458'676'416'788'066 + 222'442'191);
  ASSERT_EQ(trace.memory_events.size(), 1u);
  EXPECT_EQ(trace.memory_events[0].time_ns, kBase + 4'458'676'416'790'001);
  EXPECT_EQ(trace.memory_events[0].address, 139870957633536u);
  EXPECT_EQ(trace.memory_events[0].bytes, 512);
  EXPECT_EQ(trace.memory_events[0].total_reserved, 2097152);
  EXPECT_EQ(trace.memory_events[0].device_type, dlprof::MemoryDeviceType::CUDA);
  EXPECT_EQ(trace.window_start_ns, kBase + 4'458'676'416'788'066);
  EXPECT_EQ(trace.window_end_ns, kBase + 4'458'676'700'000'500);
  EXPECT_EQ(trace.file_time_base_ns, kBase);
}

TEST(ImportEraTest, TimestampsAreExactBeyondDoublePrecision) {
  // 1694039959123456.789 µs has 19 significant digits; a double keeps 15-17.
  const Trace trace = parse(R"json([
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1694039959123456.789, "dur": 0.001},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1694039959123457.7895, "dur": 1.00049},
    {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 1.6940399591234585e15, "dur": 2e-3},
    {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 1694039959123459.0, "dur": 0}
  ])json");
  ASSERT_EQ(trace.events.size(), 4u);
  EXPECT_EQ(trace.events[0].start_ns, 1'694'039'959'123'456'789);
  EXPECT_EQ(trace.events[0].end_ns, 1'694'039'959'123'456'790);
  EXPECT_EQ(trace.events[1].start_ns, 1'694'039'959'123'457'790);  // .7895 rounds half away from zero
  EXPECT_EQ(trace.events[1].duration_ns(), 1000);                  // 1.00049 µs rounds to 1000 ns
  EXPECT_EQ(trace.events[2].start_ns, 1'694'039'959'123'458'500);
  EXPECT_EQ(trace.events[2].duration_ns(), 2);
  EXPECT_EQ(trace.events[3].duration_ns(), 0);
}

TEST(ImportEraTest, NegativeDurationsAreLeftOutOrClampedWhenStrict) {
  constexpr std::string_view kJson = R"json([
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 20, "dur": -4}
  ])json";
  const Trace lenient = parse(kJson);
  ASSERT_EQ(lenient.events.size(), 1u);
  EXPECT_EQ(lenient.read_result.skipped_events, 1u);
  EXPECT_EQ(lenient.read_result.first_skip_reason, "\"dur\" must not be negative: -4");
  EXPECT_EQ(lenient.read_result.first_skip_offset, kJson.find("-4"));
  EXPECT_EQ(lenient.window_end_ns, 11'000);  // a left-out event leaves no time behind
  const Trace strict = parse_strictly(kJson);
  ASSERT_EQ(strict.events.size(), 2u);
  EXPECT_EQ(strict.events[1].duration_ns(), 0);  // clamped, as Kineto clamps
}

TEST(ImportEraTest, GzipRecognisedByMagicBytesWhateverTheName) {
  TempDir dir;
  const std::string json = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 2}]})";
  write_gzip(dir.path() / "trace.json.gz", json);
  write_gzip(dir.path() / "compressed.json", json);
  EXPECT_EQ(dlprof::read_trace((dir.path() / "trace.json.gz").string()).events.size(), 1u);
  EXPECT_EQ(dlprof::read_trace((dir.path() / "compressed.json").string()).events.size(), 1u);
  EXPECT_EQ(dlprof::parse_trace(gzip_bytes(json), "memory").events.size(), 1u);
  // Two gzip members, as `cat a.gz b.gz` makes: one text.
  const std::string half = json.substr(0, json.size() / 2);
  write_text(dir.path() / "two_members.gz", gzip_bytes(half) + gzip_bytes(json.substr(half.size())));
  EXPECT_EQ(dlprof::read_trace((dir.path() / "two_members.gz").string()).events.size(), 1u);
}

TEST(ImportEraTest, OpsInsideBackwardFramesAreBackward) {
  const Trace trace = parse(R"json([
    {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0", "pid": 1, "tid": 2, "ts": 100, "dur": 50},
    {"ph": "X", "cat": "cpu_op", "name": "AddmmBackward0", "pid": 1, "tid": 2, "ts": 101, "dur": 40},
    {"ph": "X", "cat": "user_annotation", "name": "my range", "pid": 1, "tid": 2, "ts": 102, "dur": 30},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 103, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 200, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 3, "ts": 103, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "torch::autograd::AccumulateGrad", "pid": 1, "tid": 2, "ts": 140, "dur": 5}
  ])json");
  std::vector<std::pair<std::string, Category>> categories;
  for (const TraceEvent& event : trace.events) categories.emplace_back(trace.names[event.name], event.category);
  EXPECT_EQ(categories, (std::vector<std::pair<std::string, Category>>{
                            {"autograd::engine::evaluate_function: AddmmBackward0", Category::Backward},
                            {"AddmmBackward0", Category::Backward},
                            {"my range", Category::User},
                            {"aten::mm", Category::Backward},
                            {"torch::autograd::AccumulateGrad", Category::Backward},
                            {"aten::mm", Category::User},
                            {"aten::mm", Category::User},
                        }));
}

TEST(ImportEraTest, CountersInstantsMetadataAndUnknownsIgnored) {
  const Trace trace = parse(R"json({"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "ts": 1, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_name", "pid": 9, "tid": 10, "ts": 1, "args": {"name": "thread 10 (loader)"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "ts": 1, "args": {"name": "stream 7 "}},
    {"ph": "C", "name": "memory", "pid": 9, "tid": 10, "ts": 5, "args": {"used": 1.5, "free": 3, "note": "x"}},
    {"ph": "i", "s": "t", "name": "[OutOfMemory]", "pid": 9, "tid": 10, "ts": 6},
    {"ph": "X", "cat": "mystery", "name": "ignored", "pid": 9, "tid": 10, "ts": "not even a number"},
    {"ph": "B", "name": "ignored too", "pid": 9, "tid": 10, "ts": 7},
    {"ph": "s", "id": 1, "pid": 9, "tid": 10, "ts": 8, "cat": "ac2g", "name": "ac2g"},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 9, "tid": 10, "ts": 9, "dur": 1,
     "args": {"Call stack": ["a.py(1): f", {"deep": [[[]]]}], "Concrete Inputs": ["", "2"], "flops": 12}}
  ], "record_shapes": 1, "Framework": "pytorch-lightning", "with": {"a": [1, {"b": null}], "c": true}})json");
  EXPECT_EQ(trace.process_name, "python");
  ASSERT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads[0].os_tid, 10);
  EXPECT_EQ(trace.threads[0].name, "loader");
  ASSERT_EQ(trace.events.size(), 3u);
  std::map<std::string, double> counters;
  for (const TraceEvent& event : trace.events)
    if (event.kind == EventKind::Counter) counters[trace.names[event.name]] = event.value;
  EXPECT_EQ(counters, (std::map<std::string, double>{{"memory used", 1.5}, {"memory free", 3}}));
  ASSERT_EQ(trace.out_of_memory.size(), 1u) << "torch's [OutOfMemory], without its args: a request of 0 bytes";
  EXPECT_EQ(trace.out_of_memory[0].bytes, 0);
  EXPECT_EQ(trace.out_of_memory[0].device_type, dlprof::MemoryDeviceType::CPU);
  const TraceEvent* add = find_event(trace, "aten::add");
  ASSERT_NE(add, nullptr);
  const dlprof::OpInputs& inputs = trace.op_inputs.at(add->inputs);
  EXPECT_EQ(trace.names[inputs.concrete], R"(["", "2"])");
  EXPECT_EQ(trace.names[inputs.dims], "");
  EXPECT_EQ(inputs.flops, 12u);
  EXPECT_EQ(trace.metadata, (std::vector<std::pair<std::string, std::string>>{
                                {"record_shapes", "1"},
                                {"Framework", "\"pytorch-lightning\""},
                                {"with", R"({"a": [1, {"b": null}], "c": true})"}}));
}

TEST(ImportEraTest, AStepIsProfilerStepHashDigitsForEveryTable) {
  // What the reader makes a step is what the step breakdown counts: "ProfilerStep#-1" is a range
  // in both.
  const Trace trace = parse(R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#-1", "pid": 1, "tid": 1, "ts": 10, "dur": 10},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#", "pid": 1, "tid": 1, "ts": 20, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}
  ]})json");
  ASSERT_NE(find_event(trace, "ProfilerStep#4"), nullptr);
  EXPECT_EQ(find_event(trace, "ProfilerStep#4")->kind, EventKind::Step);
  ASSERT_NE(find_event(trace, "ProfilerStep#-1"), nullptr);
  EXPECT_EQ(find_event(trace, "ProfilerStep#-1")->kind, EventKind::Range);
  EXPECT_EQ(find_event(trace, "ProfilerStep#-1")->category, Category::User);
  EXPECT_EQ(find_event(trace, "ProfilerStep#")->kind, EventKind::Range);
  const auto breakdown = dlprof::analysis::step_breakdown(trace);
  ASSERT_EQ(breakdown.steps.size(), 1u);
  EXPECT_EQ(breakdown.steps[0].name, "ProfilerStep#4");
}

TEST(ImportRoundTripTest, NonFiniteCounterSamplesRoundTrip) {
  Trace written;
  written.window_start_ns = 1'716'423'322'000'000'000;
  written.window_end_ns = written.window_start_ns + 10'000;
  written.pid = 7;
  written.threads = {dlprof::ThreadInfo{7, "main"}};
  const double samples[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(), 0.25};
  for (std::size_t i = 0; i < std::size(samples); ++i) {
    TraceEvent counter;
    counter.kind = EventKind::Counter;
    counter.start_ns = counter.end_ns = written.window_start_ns + 1'000 * static_cast<std::int64_t>(i + 1);
    counter.value = samples[i];
    counter.name = static_cast<std::uint32_t>(written.names.size());
    written.names.push_back(fmt::format("loss{}", i));
    written.events.push_back(counter);
  }
  TempDir dir;
  const std::string path = (dir.path() / "nan.pt.trace.json").string();
  dlprof::save_chrome_trace(written, path);
  dlprof::ReadOptions strict;
  strict.strict = true;
  for (const Trace& read : {dlprof::read_trace(path), dlprof::read_trace(path, strict)}) {
    EXPECT_TRUE(read.read_result.empty());
    ASSERT_EQ(count_events(read, EventKind::Counter), 4u);
    EXPECT_TRUE(std::isnan(find_event(read, "loss0")->value));
    EXPECT_EQ(find_event(read, "loss1")->value, std::numeric_limits<double>::infinity());
    EXPECT_EQ(find_event(read, "loss2")->value, -std::numeric_limits<double>::infinity());
    EXPECT_EQ(find_event(read, "loss3")->value, 0.25);
  }
  // Python's json module writes them bare: read as well.
  const Trace bare = parse(R"json([{"ph": "C", "name": "loss", "pid": 1, "tid": 1, "ts": 1, "args": {"value": NaN}},
    {"ph": "C", "name": "norm", "pid": 1, "tid": 1, "ts": 2, "args": {"value": -Infinity}}])json");
  ASSERT_EQ(count_events(bare, EventKind::Counter), 2u);
  EXPECT_TRUE(std::isnan(find_event(bare, "loss")->value));
  EXPECT_EQ(find_event(bare, "norm")->value, -std::numeric_limits<double>::infinity());
}

// Each thread's CPU-time track: written as shares of the time to the next reading, read back as
// readings whose differences are the written ones, to the nanosecond; a run-queue wait not known
// stays unknown, and the drop count travels.
TEST(ImportRoundTripTest, ThreadCpuTracksReadBackAsTheirReadings) {
  Trace written;
  written.window_start_ns = 1'716'423'322'000'000'000;
  written.window_end_ns = written.window_start_ns + 30'000'000;
  written.pid = 7;
  written.threads = {dlprof::ThreadInfo{7, "main"}, dlprof::ThreadInfo{9, "loader-0"}};
  const std::int64_t t0 = written.window_start_ns;
  written.thread_cpu = {{t0, 5'000'000'123, 40'000, 0},
                        {t0 + 10'000'000, 5'007'000'123, 1'040'000, 0},
                        {t0 + 30'000'000, 5'012'333'333, 1'540'001, 0},
                        {t0 + 1'000, 17, -1, 1},
                        {t0 + 20'001'000, 3'000'017, -1, 1}};
  written.dropped_thread_cpu_readings = 3;
  TempDir dir;
  const std::string path = (dir.path() / "cpu.pt.trace.json").string();
  dlprof::save_chrome_trace(written, path);
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr(R"x("name": "Thread CPU: thread 9 (loader-0)", "pid": 7, "tid": 9)x"));
  EXPECT_THAT(text, HasSubstr(R"x("args": {"running (%)": 70, "waiting for a CPU (%)": 10})x"));
  dlprof::ReadOptions strict;
  strict.strict = true;
  for (const Trace& read : {dlprof::read_trace(path), dlprof::read_trace(path, strict)}) {
    EXPECT_TRUE(read.read_result.empty());
    EXPECT_EQ(read.dropped_thread_cpu_readings, 3u);
    EXPECT_EQ(count_events(read, EventKind::Counter), 0u) << "the tracks are readings, not counters";
    ASSERT_EQ(read.thread_cpu.size(), written.thread_cpu.size());
    for (std::size_t i = 0; i < read.thread_cpu.size(); ++i) {
      const dlprof::ThreadCpuSample& got = read.thread_cpu[i];
      const dlprof::ThreadCpuSample& want = written.thread_cpu[i];
      EXPECT_EQ(got.time_ns, want.time_ns) << i;
      EXPECT_EQ(read.threads[got.thread].os_tid, written.threads[want.thread].os_tid) << i;
      const bool first = i == 0 || written.thread_cpu[i - 1].thread != want.thread;
      if (first) continue;
      const dlprof::ThreadCpuSample& before = written.thread_cpu[i - 1];
      EXPECT_EQ(got.cpu_ns - read.thread_cpu[i - 1].cpu_ns, want.cpu_ns - before.cpu_ns) << i;
      if (want.run_delay_ns < 0)
        EXPECT_EQ(got.run_delay_ns, -1) << i;
      else
        EXPECT_EQ(got.run_delay_ns - read.thread_cpu[i - 1].run_delay_ns, want.run_delay_ns - before.run_delay_ns) << i;
    }
  }
}

// A CPU-time track another writer got wrong: a share that is no number or is negative is noted
// and left out, never fatal, and strict reading refuses it by name.
TEST(ImportLenientTest, ABadThreadCpuShareIsNotedAndLeftOut) {
  const std::string text = R"json({"traceEvents": [
    {"ph": "X", "name": "step", "pid": 1, "tid": 2, "ts": 0, "dur": 30},
    {"ph": "C", "name": "Thread CPU: thread 2 (main)", "pid": 1, "tid": 2, "ts": 0, "args": {"running (%)": 50}},
    {"ph": "C", "name": "Thread CPU: thread 2 (main)", "pid": 1, "tid": 2, "ts": 10, "args": {"running (%)": -5}},
    {"ph": "C", "name": "Thread CPU: thread 2 (main)", "pid": 1, "tid": 2, "ts": 20, "args": {"running (%)": 0}}]})json";
  const Trace trace = parse(text);
  EXPECT_EQ(trace.read_result.ignored_values, 1u);
  EXPECT_THAT(trace.read_result.notes.front(), HasSubstr("\"running (%)\" of a thread's CPU track must be a share"));
  ASSERT_EQ(trace.thread_cpu.size(), 2u);
  EXPECT_EQ(trace.thread_cpu[1].cpu_ns - trace.thread_cpu[0].cpu_ns, 10'000) << "50 % of the 20 µs to the next kept";
  EXPECT_ANY_THROW(parse_strictly(text));
}

// distributedInfo's process groups as PyTorch 2.x writes them (pg_size a number, or text in some
// writers; ranks numbers), and as a writer that gets them wrong: kept in the metadata, noted.
TEST(ImportTest, ProcessGroupsAndNcclVersionAreRead) {
  const Trace trace = parse(R"json({"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 4, "pg_count": 2,
    "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 4, "ranks": [0, 1, 2, 3]},
                  {"pg_name": 1, "pg_desc": "tp", "backend_config": "cuda:nccl", "pg_size": "2", "ranks": [0, "1"]}],
    "nccl_version": "2.21.5"},
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})json");
  ASSERT_EQ(trace.distributed.groups.size(), 2u);
  EXPECT_EQ(trace.distributed.groups[0].name, "0");
  EXPECT_EQ(trace.distributed.groups[0].desc, "default_pg");
  EXPECT_EQ(trace.distributed.groups[0].backend_config, "cuda:nccl");
  EXPECT_EQ(trace.distributed.groups[0].size, 4);
  EXPECT_THAT(trace.distributed.groups[0].ranks, ::testing::ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(trace.distributed.groups[1].name, "1");
  EXPECT_EQ(trace.distributed.groups[1].size, 2);
  EXPECT_THAT(trace.distributed.groups[1].ranks, ::testing::ElementsAre(0, 1));
  EXPECT_EQ(trace.distributed.nccl_version, "2.21.5");
  EXPECT_TRUE(trace.metadata.empty());
  EXPECT_TRUE(trace.read_result.notes.empty());
  EXPECT_EQ(parse(R"({"distributedInfo": {"nccl_version": 22105}, "traceEvents": []})").distributed.nccl_version, "22105");

  const std::string odd = R"json({"distributedInfo": {"rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "ranks": "all"}]},
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})json";
  const Trace lenient = parse(odd);
  EXPECT_TRUE(lenient.distributed.groups.empty());
  EXPECT_THAT(lenient.metadata, ::testing::ElementsAre(std::pair<std::string, std::string>{
                                    "distributedInfo.pg_config", R"([{"pg_name": "0", "ranks": "all"}])"}));
  EXPECT_THAT(lenient.read_result.notes, ::testing::ElementsAre(HasSubstr("\"pg_config\" is not a list of process groups")));
  EXPECT_THAT(read_error([&] { parse_strictly(odd); }).reason(), HasSubstr("\"pg_config\" must be a list of process groups"));
  EXPECT_TRUE(parse(R"({"distributedInfo": {"pg_config": null}, "traceEvents": []})").read_result.notes.empty());
}

TEST(ImportLenientTest, NegativeRankOrWorldSizeIsNotUsed) {
  const std::string json = R"json({"distributedInfo": {"backend": "nccl", "rank": -5, "world_size": 0},
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})json";
  const Trace trace = parse(json);
  EXPECT_EQ(trace.distributed.rank, 0);  // as without distributedInfo (HTA's assumption)
  EXPECT_EQ(trace.distributed.world_size, 1);
  EXPECT_EQ(trace.distributed.backend, "nccl");
  using Entry = std::pair<std::string, std::string>;
  EXPECT_THAT(trace.metadata, ::testing::IsSupersetOf({Entry{"distributedInfo.rank", "-5"}, Entry{"distributedInfo.world_size", "0"}}));
  EXPECT_EQ(trace.read_result.ignored_values, 2u);
  ASSERT_EQ(trace.read_result.notes.size(), 2u);
  EXPECT_THAT(trace.read_result.notes[0], HasSubstr("\"rank\" must be at least 0, not -5"));
  EXPECT_THAT(trace.read_result.notes[1], HasSubstr("\"world_size\" must be at least 1, not 0"));
  EXPECT_THAT(read_error([&] { parse_strictly(json); }).reason(), HasSubstr("\"rank\" must be at least 0, not -5"));
}

// ---------------------------------------------------------------------------------------------
// Input that is not a trace: an error naming the file and the place, never a crash

TEST(ImportErrorTest, MessagesNameTheFileAndThePosition) {
  const TraceReadError error = read_error([] {
    dlprof::parse_trace("{\"traceEvents\": [\n  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": \"soon\"}\n]}", "bad.json");
  });
  EXPECT_EQ(error.source(), "bad.json");
  EXPECT_EQ(error.offset(), 55u);
  EXPECT_EQ(error.line(), 2u);
  EXPECT_EQ(error.column(), 38u);
  EXPECT_STREQ(error.what(),
               "dlprof: cannot read trace 'bad.json' at byte 55 (line 2, column 38): \"ts\" must be a number, not a string");
}

TEST(ImportErrorTest, LineAndColumnCountTheOriginalTextNotTheParsedOne) {
  // In-situ parsing turns the escaped \n into a real one: it must not count as a line.
  const TraceReadError error = read_error([] { parse("[{\"name\": \"a\\nb\\nc\", \"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": []}]"); });
  EXPECT_EQ(error.line(), 1u);
  EXPECT_THAT(error.what(), HasSubstr("\"ts\" must be a scalar, not an array"));
}

TEST(ImportErrorTest, SyntaxErrorsAndWrongTypes) {
  static constexpr char kNulInside[] = "[{\"ph\": \"X\"}]\0 trailing";
  const struct {
    std::string_view json;
    std::string_view reason;
  } kCases[] = {
      {"", "The document is empty."},
      {"   \n", "The document is empty."},
      {"not json", "Invalid value."},
      {"{\"traceEvents\": [", "Invalid value."},
      {"{\"traceEvents\": [{}", "Missing a comma or ']'"},
      {"[{\"ph\": \"X\", \"ts\": 01}]", "Missing a comma or '}'"},  // a number whose digits go on
      {"42", "a trace is a JSON object or array, not a number"},
      {"{\"traceEvents\": {}}", "\"traceEvents\" must be an array, not an object"},
      {"[1]", "a trace event must be an object, not a number"},
      {"[{\"ph\": 1}]", "\"ph\" must be a string, not a number"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"a\", \"dur\": 1}]", "event without \"ts\""},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": 5, \"ts\": 1}]", "\"name\" must be a string, not a number"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1e300}]", "\"ts\" is out of range: 1e300"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": NaN}]", "\"ts\" is not a number: NaN"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"dur\": 9223372036854775807}]", "\"dur\" is out of range"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"args\": {\"External id\": \"7\"}}]",
       "\"External id\" must be a number, not a string"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"args\": {\"External id\": -5}}]", "\"External id\" must not be negative"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"args\": {\"Sequence number\": 1.5}}]",
       "\"Sequence number\" must be an integer, not 1.5"},
      {"[{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"args\": {\"correlation\": 4294967296}}]", "\"correlation\" is out of range"},
      {"[{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"args\": {\"grid\": [1, 2, 3, 4]}}]", "\"grid\" has more than 3 dimensions"},
      {"[{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"args\": {\"grid\": [\"1\"]}}]", "\"grid\" is not a number"},
      {"[{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"args\": {\"grid\": 7}}]", "\"grid\" must be an array, not a number"},
      {"[{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"args\": {\"stream\": [7]}}]", "\"stream\" must be a scalar, not an array"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"args\": 3}]", "\"args\" must be an object, not a number"},
      {"{\"deviceProperties\": [{\"id\": \"zero\"}]}", "\"id\" must be a number, not a string"},
      {"{\"distributedInfo\": {\"rank\": \"0\"}}", "\"rank\" must be a number, not a string"},
      {"{\"distributedInfo\": []}", "\"distributedInfo\" must be an object, not an array"},
      {"{\"baseTimeNanoseconds\": 1e30, \"traceEvents\": []}", "\"baseTimeNanoseconds\" is out of range"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 4611686018427387.904}], \"baseTimeNanoseconds\": 4611686018427387904}",
       "\"baseTimeNanoseconds\" plus a timestamp is beyond 2^62 ns"},
      {"{\"baseTimeNanoseconds\": -1, \"traceEvents\": []}", "\"baseTimeNanoseconds\" must not be negative"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": -0.5}]", "\"ts\" must not be negative: -0.5"},
      {"[{\"ph\": \"M\", \"name\": \"thread_name\", \"ts\": -1}]", "\"ts\" must not be negative"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 4611686018427387, \"dur\": 1}]", "\"ts\" plus \"dur\" is beyond 2^62 ns"},
      {std::string_view(kNulInside, sizeof(kNulInside) - 1), "NUL byte in the JSON text"},
      {"[{\"ph\": \"X\"}] []", "The document root must not be followed by other values."},
  };
  for (const auto& bad : kCases) {
    SCOPED_TRACE(bad.json);
    const TraceReadError error = read_error([&] { parse_strictly(bad.json); });
    EXPECT_THAT(error.reason(), HasSubstr(std::string(bad.reason)));
    EXPECT_THAT(error.what(), HasSubstr("'inline.json' at byte "));
  }
}

TEST(ImportErrorTest, NestingBombsStopAtTheDepthLimit) {
  for (const std::string& bomb : {"{\"metadata\": " + std::string(100'000, '['), "[{\"ph\": \"X\", \"args\": {\"x\": " + std::string(100'000, '['),
                                  [] {
                                    std::string objects = "[{\"ph\": \"X\", \"skipped\": ";
                                    for (int i = 0; i < 100'000; ++i) objects += "{\"a\": ";
                                    return objects;
                                  }()}) {
    const TraceReadError error = read_error([&] { parse(bomb); });
    EXPECT_THAT(error.reason(), HasSubstr("nested deeper than 256 levels"));
  }
}

TEST(ImportErrorTest, EveryPrefixOfATraceLoadsOrFailsCleanly) {
  TempDir dir;
  dlprof::save_chrome_trace(every_kind_of_event(), (dir.path() / "t.json").string());
  const std::string json = dlprof_test::read_file(dir.path() / "t.json");
  // Under a sanitizer every fourth prefix, and each of the last 16: every kind of cut end is met
  // many times over, in a quarter of the time.
  const std::size_t stride = dlprof_test::kSanitized ? 4 : 1;
  const auto next = [&](std::size_t size, std::size_t end) { return end - size <= 16 ? size + 1 : size + stride; };
  std::size_t loaded = 0;
  for (std::size_t size = 0; size <= json.size(); size = next(size, json.size())) {
    try {
      parse(std::string_view(json).substr(0, size));
      ++loaded;
    } catch (const TraceReadError& error) {
      ASSERT_TRUE(error.offset().has_value()) << size;
      ASSERT_LE(*error.offset(), size) << size;
    }
  }
  EXPECT_EQ(loaded, 2u);  // the whole file, and all of it but the final newline
  const std::string compressed = gzip_bytes(json);
  for (std::size_t size = 0; size < compressed.size(); size = next(size, compressed.size())) {
    const TraceReadError error = read_error([&] { parse(std::string_view(compressed).substr(0, size)); });
    if (size >= 2) {
      EXPECT_THAT(error.reason(), ::testing::AnyOf(HasSubstr("gzip"), HasSubstr("Missing"))) << size;
    }
  }
}

TEST(ImportErrorTest, FilesThatCannotBeRead) {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.json").string();
  EXPECT_EQ(read_error([&] { dlprof::read_trace(missing); }).what(),
            fmt::format("dlprof: cannot read trace '{}': No such file or directory", missing));
  EXPECT_EQ(read_error([&] { dlprof::read_trace(dir.path().string()); }).reason(), "is a directory");

  write_text(dir.path() / "empty.json", "");
  EXPECT_THAT(read_error([&] { dlprof::read_trace((dir.path() / "empty.json").string()); }).what(),
              HasSubstr("empty.json' at byte 0 (line 1, column 1): The document is empty."));

  // A corrupt block inside, and a stream cut short.
  std::string compressed = gzip_bytes(std::string(4000, ' ') + "[]");
  compressed[12] = static_cast<char>(compressed[12] ^ 0x55);
  write_text(dir.path() / "corrupt.json.gz", compressed);
  EXPECT_THAT(read_error([&] { dlprof::read_trace((dir.path() / "corrupt.json.gz").string()); }).reason(),
              HasSubstr("corrupt gzip data at compressed byte"));
  write_text(dir.path() / "truncated.json.gz", gzip_bytes("[]").substr(0, 15));
  EXPECT_THAT(read_error([&] { dlprof::read_trace((dir.path() / "truncated.json.gz").string()); }).reason(),
              HasSubstr("truncated gzip data"));
  // A byte of the CRC-32 and of the length in the trailer.
  for (const std::size_t from_end : {8u, 2u}) {
    std::string bad_trailer = gzip_bytes(std::string(4000, ' ') + "[]");
    bad_trailer[bad_trailer.size() - from_end] = static_cast<char>(bad_trailer[bad_trailer.size() - from_end] ^ 1);
    write_text(dir.path() / "bad_trailer.json.gz", bad_trailer);
    EXPECT_THAT(read_error([&] { dlprof::read_trace((dir.path() / "bad_trailer.json.gz").string()); }).reason(),
                HasSubstr(from_end == 8 ? "CRC-32 mismatch" : "length mismatch"));
  }
  write_text(dir.path() / "trailing.json.gz", gzip_bytes("[]") + "garbage");
  EXPECT_THAT(read_error([&] { dlprof::read_trace((dir.path() / "trailing.json.gz").string()); }).reason(),
              HasSubstr("not gzip data after the end of the gzip stream"));
}

TEST(ImportErrorTest, GzipBombsStopAtTheSizeLimit) {
  const std::string bomb = gzip_bytes(std::string(8 << 20, ' '));
  dlprof::ReadOptions options;
  options.max_json_bytes = 1 << 20;
  const TraceReadError error = read_error([&] { dlprof::parse_trace(bomb, "bomb.gz", options); });
  EXPECT_THAT(error.reason(), HasSubstr("decompresses to more than 1048576 bytes"));
  EXPECT_THAT(read_error([&] { dlprof::parse_trace(std::string(2 << 20, ' '), "big.json", options); }).reason(),
              HasSubstr("more than the limit of 1048576"));
}

/// A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:").
long status_kib(std::string_view field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.compare(0, field.size(), field) == 0) return std::stol(line.substr(field.size()));
  return -1;
}

// A gzip trailer that announces far more text than the data holds (here 512 MiB for 1.2 MB) is
// refused, and the reader's memory grows with the text it inflated, not with the lie: the pages
// faulted in ahead of the inflating stop when it does.
TEST(ImportErrorTest, AGzipTrailerThatLiesAboutTheSizeCostsNoMemory) {
  std::string text = "[{\"name\": \"";
  std::uint64_t state = 0x9E3779B97F4A7C15ull;  // text that does not compress, so the lie is one gzip may tell
  while (text.size() < 1'200'000) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    text += "0123456789abcdef"[state >> 60];
  }
  text += "\"}]";
  std::string compressed = gzip_bytes(text);
  ASSERT_GT(compressed.size() * 1032, std::size_t{512} << 20) << "a size deflate could reach";
  const std::uint32_t announced = std::uint32_t{512} << 20;
  for (int i = 0; i < 4; ++i) compressed[compressed.size() - 4 + i] = static_cast<char>(announced >> (8 * i) & 0xff);

  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM starts again from VmRSS
  const long rss_before = status_kib("VmRSS:");
  ASSERT_GT(rss_before, 0) << "no /proc/self/status";
  EXPECT_THAT(read_error([&] { dlprof::parse_trace(compressed, "lying.json.gz"); }).reason(), HasSubstr("length mismatch"));
  const long grown_mib = (status_kib("VmHWM:") - rss_before) / 1024;
  EXPECT_LT(grown_mib, 128) << "peak RSS grew by " << grown_mib << " MiB reading 1.2 MB of text";
}

/// A trace of `rank` of 3 with one op.
std::string trace_of_rank_at_text(int rank) {
  return fmt::format(
      R"({{"distributedInfo": {{"backend": "gloo", "rank": {}, "world_size": 3}}, "traceEvents": [{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 10, "dur": 5}}]}})",
      rank);
}

TEST(ImportSetTest, DirectoriesFilesAndRanks) {
  TempDir dir;
  const auto trace_of_rank = [](int rank) {
    return fmt::format(R"({{"distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": 3}}, "traceEvents": []}})", rank);
  };
  write_text(dir.path() / "b.pt.trace.json", trace_of_rank(2));
  write_gzip(dir.path() / "a.json.gz", trace_of_rank(0));
  write_text(dir.path() / "notes.txt", "not a trace");
  fs::create_directory(dir.path() / "older");
  write_text(dir.path() / "older" / "c.json", trace_of_rank(2));  // not read: no recursion
  write_text(dir.path() / "rank1.json", trace_of_rank(1));
  std::vector<std::string> seen;
  dlprof::ReadOptions options;
  options.progress = [&](const dlprof::ReadProgress& progress) {
    if (progress.stage == dlprof::ReadProgress::Stage::Parsing && progress.bytes_done == progress.bytes_total)
      seen.push_back(fmt::format("{}/{} {}", progress.file_index + 1, progress.file_count, fs::path(progress.source).filename().string()));
  };
  const std::vector<Trace> ranks = dlprof::read_trace_set({dir.path().string()}, options);
  ASSERT_EQ(ranks.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(ranks[rank].distributed.rank, rank);
  EXPECT_EQ(seen, (std::vector<std::string>{"1/3 a.json.gz", "2/3 b.pt.trace.json", "3/3 rank1.json"}));

  // The same rank twice: both files named.
  const TraceReadError twice = read_error([&] {
    dlprof::read_trace_set({dir.path().string(), (dir.path() / "older" / "c.json").string()});
  });
  EXPECT_THAT(twice.what(), HasSubstr("c.json"));
  EXPECT_THAT(twice.what(), HasSubstr("b.pt.trace.json"));
  EXPECT_THAT(twice.reason(), HasSubstr("rank 2"));

  fs::create_directory(dir.path() / "nothing");
  write_text(dir.path() / "nothing" / "readme.md", "");
  EXPECT_EQ(read_error([&] { dlprof::read_trace_set({(dir.path() / "nothing").string()}); }).reason(),
            "no trace files (*.json, *.gz, *.dlprof-crash, *.dlprof-flight) in the directory");
  EXPECT_EQ(read_error([&] { dlprof::read_trace_set({(dir.path() / "absent").string()}); }).reason(),
            "No such file or directory");
}

TEST(ImportSetTest, ADirectorysUnreadableFileIsLeftOutWithANoteUnlessStrict) {
  TempDir dir;
  const std::string whole = trace_of_rank_at_text(3);
  write_text(dir.path() / "rank0.json", trace_of_rank_at_text(0));
  write_text(dir.path() / "rank1.json", trace_of_rank_at_text(1));
  write_text(dir.path() / "rank2.json", whole.substr(0, whole.size() / 2));  // killed while writing
  const std::vector<Trace> ranks = dlprof::read_trace_set({dir.path().string()});
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].distributed.rank, 1);
  ASSERT_FALSE(ranks[0].read_result.notes.empty());
  EXPECT_THAT(ranks[0].read_result.notes.back(), ::testing::AllOf(HasSubstr("left out of the set, unreadable"), HasSubstr("rank2.json")));
  dlprof::ReadOptions strict;
  strict.strict = true;
  EXPECT_THAT(read_error([&] { dlprof::read_trace_set({dir.path().string()}, strict); }).what(), HasSubstr("rank2.json"));
  EXPECT_THAT(read_error([&] { dlprof::read_trace_set({(dir.path() / "rank2.json").string()}); }).what(), HasSubstr("rank2.json"))
      << "a file named is read or refused";
}

/// A trace of `rank` with one op from `start_us` to `end_us`.
std::string trace_of_rank_at(int rank, int world_size, std::int64_t start_us, std::int64_t end_us) {
  return fmt::format(
      R"({{"distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": {}}}, "traceEvents": [{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": {}, "dur": {}}}]}})",
      rank, world_size, start_us, end_us - start_us);
}

TEST(ImportSetTest, SeveralFilesOfARankAreWindowsInTimeOrder) {
  TempDir dir;
  // Names out of time order: the times decide.
  write_text(dir.path() / "w0.3.pt.trace.json", trace_of_rank_at(0, 2, 100, 150));
  write_text(dir.path() / "w0.1.pt.trace.json", trace_of_rank_at(0, 2, 300, 350));
  write_gzip(dir.path() / "w0.2.pt.trace.json.gz", trace_of_rank_at(0, 2, 200, 250));
  write_text(dir.path() / "w1.1.pt.trace.json", trace_of_rank_at(1, 2, 110, 160));
  write_text(dir.path() / "w1.2.pt.trace.json", trace_of_rank_at(1, 2, 210, 260));
  write_text(dir.path() / "w1.3.pt.trace.json", trace_of_rank_at(1, 2, 310, 360));
  const std::vector<std::vector<Trace>> windows = dlprof::read_trace_windows({dir.path().string()});
  ASSERT_EQ(windows.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(k);
    ASSERT_EQ(windows[k].size(), 2u);
    for (std::size_t rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(windows[k][rank].distributed.rank, static_cast<std::int64_t>(rank));
      EXPECT_EQ(windows[k][rank].window_start_ns, static_cast<std::int64_t>((100 * (k + 1) + 10 * rank) * 1000));
      EXPECT_THAT(windows[k][rank].read_result.notes, ::testing::IsEmpty());
    }
  }

  // One window per call of read_trace_set: the latest, saying how many there are.
  const std::vector<Trace> latest = dlprof::read_trace_set({dir.path().string()});
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0].window_start_ns, 300'000);
  EXPECT_EQ(latest[1].window_start_ns, 310'000);
  EXPECT_THAT(latest[0].read_result.notes,
              ::testing::ElementsAre(::testing::AllOf(HasSubstr("window 3 of 3, the latest"), HasSubstr("read_trace_windows()"),
                                                      HasSubstr("--window N"))));
  EXPECT_THAT(latest[1].read_result.notes, ::testing::IsEmpty());

  // One window: read_trace_windows and read_trace_set read the same, without a note.
  const std::string one = (dir.path() / "w0.1.pt.trace.json").string();
  ASSERT_EQ(dlprof::read_trace_windows({one}).size(), 1u);
  EXPECT_THAT(dlprof::read_trace_set({one})[0].read_result.notes, ::testing::IsEmpty());
}

TEST(ImportSetTest, RanksWithFewerWindowsAreMissingFromTheLastWindows) {
  TempDir dir;
  for (int k = 0; k < 3; ++k) write_text(dir.path() / fmt::format("r0.{}.json", k), trace_of_rank_at(0, 3, 100 * (k + 1), 100 * (k + 1) + 50));
  for (int k = 0; k < 2; ++k) write_text(dir.path() / fmt::format("r1.{}.json", k), trace_of_rank_at(1, 3, 100 * (k + 1), 100 * (k + 1) + 50));
  write_text(dir.path() / "r2.0.json", trace_of_rank_at(2, 3, 100, 150));
  write_text(dir.path() / "config.json", R"({"lr": 0.1})");
  const std::vector<std::vector<Trace>> windows = dlprof::read_trace_windows({dir.path().string()});
  ASSERT_EQ(windows.size(), 3u);
  const auto ranks_of = [](const std::vector<Trace>& window) {
    std::vector<std::int64_t> ranks;
    for (const Trace& trace : window) ranks.push_back(trace.distributed.rank);
    return ranks;
  };
  EXPECT_EQ(ranks_of(windows[0]), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(ranks_of(windows[1]), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(ranks_of(windows[2]), (std::vector<std::int64_t>{0}));
  const std::string left_out = fmt::format("'{}' left out of the set: a JSON object without \"traceEvents\", not a trace",
                                           (dir.path() / "config.json").string());
  EXPECT_THAT(windows[0][0].read_result.notes, ::testing::ElementsAre(left_out));
  EXPECT_THAT(windows[1][0].read_result.notes,
              ::testing::ElementsAre("window 2 of 3 has no trace of rank 2 (1 file): each rank's trace files are its "
                                     "windows, in time order",
                                     left_out));
  EXPECT_THAT(windows[2][0].read_result.notes,
              ::testing::ElementsAre("window 3 of 3 has no trace of rank 1 (2 files), rank 2 (1 file): each rank's trace "
                                     "files are its windows, in time order",
                                     left_out));
  const std::vector<Trace> latest = dlprof::read_trace_set({dir.path().string()});
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_THAT(latest[0].read_result.notes, ::testing::Contains(HasSubstr("window 3 of 3, the latest")));
}

TEST(ImportSetTest, FilesOfARankWhoseTimesOverlapAreNotWindows) {
  TempDir dir;
  write_text(dir.path() / "a.json", trace_of_rank_at(0, 1, 100, 200));
  write_text(dir.path() / "b.json", trace_of_rank_at(0, 1, 150, 250));
  for (const auto& read : std::vector<std::function<void()>>{
           [&] { dlprof::read_trace_windows({dir.path().string()}); },
           [&] { dlprof::read_trace_set({dir.path().string()}); }}) {
    const TraceReadError error = read_error(read);
    EXPECT_EQ(error.source(), (dir.path() / "b.json").string());
    EXPECT_EQ(error.reason(), fmt::format("rank 0 is also the rank of '{}', and their times overlap: not two windows of one "
                                          "run (one file per rank and window)",
                                          (dir.path() / "a.json").string()));
  }
  // A window may start where the one before ends.
  write_text(dir.path() / "b.json", trace_of_rank_at(0, 1, 200, 250));
  EXPECT_EQ(dlprof::read_trace_windows({dir.path().string()}).size(), 2u);
  // One file named twice is one window, not two.
  const std::string a = (dir.path() / "a.json").string();
  EXPECT_THAT(read_error([&] { dlprof::read_trace_windows({a, a}); }).reason(), HasSubstr("their times overlap"));
}

TEST(ImportSetTest, JsonFilesThatAreNotTracesAreLeftOutOfADirectory) {
  TempDir dir;
  write_text(dir.path() / "rank0.pt.trace.json",
             R"({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})");
  write_text(dir.path() / "config.json", R"({"lr": 0.1, "epochs": 3})");
  write_gzip(dir.path() / "metrics.json.gz", R"({"loss": [1.0, 0.5]})");
  const std::vector<Trace> ranks = dlprof::read_trace_set({dir.path().string()});
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].distributed.rank, 0);
  EXPECT_EQ(ranks[0].events.size(), 1u);
  EXPECT_THAT(ranks[0].read_result.notes,
              ::testing::ElementsAre(
                  fmt::format("'{}' left out of the set: a JSON object without \"traceEvents\", not a trace",
                              (dir.path() / "config.json").string()),
                  fmt::format("'{}' left out of the set: a JSON object without \"traceEvents\", not a trace",
                              (dir.path() / "metrics.json.gz").string())));

  // Named on its own, such a file reads as an empty trace that says what it is.
  const Trace config = dlprof::read_trace((dir.path() / "config.json").string());
  EXPECT_FALSE(config.read_result.has_trace_events);
  EXPECT_THAT(config.read_result.notes, ::testing::Contains(HasSubstr("without \"traceEvents\"")));
  EXPECT_TRUE(dlprof::read_trace((dir.path() / "rank0.pt.trace.json").string()).read_result.has_trace_events);

  fs::create_directory(dir.path() / "configs");
  write_text(dir.path() / "configs" / "config.json", "{}");
  EXPECT_EQ(read_error([&] { dlprof::read_trace_set({(dir.path() / "configs").string()}); }).reason(),
            "no trace in the directory: 1 JSON file without \"traceEvents\"");
}

TEST(ImportProgressTest, LongLoadsReportAsTheyGo) {
  std::string json = "[";
  for (int i = 0; i < 20'000; ++i)
    json += fmt::format(R"({}{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": {}, "dur": 1}})",
                        i == 0 ? "" : ",", i * 2);
  json += "]";
  std::vector<std::uint64_t> parsed;
  std::uint64_t inflated = 0;
  dlprof::ReadOptions options;
  options.progress = [&](const dlprof::ReadProgress& progress) {
    EXPECT_EQ(progress.source, "many.json.gz");
    if (progress.stage == dlprof::ReadProgress::Stage::Decompressing) inflated = progress.bytes_done;
    else parsed.push_back(progress.bytes_done);
  };
  const Trace trace = dlprof::parse_trace(gzip_bytes(json), "many.json.gz", options);
  EXPECT_EQ(trace.events.size(), 20'000u);
  EXPECT_GT(inflated, 0u);
  ASSERT_GE(parsed.size(), 5u);  // every 4096 events, then the end
  EXPECT_TRUE(std::is_sorted(parsed.begin(), parsed.end()));
  EXPECT_EQ(parsed.back(), json.size());
}

// ---------------------------------------------------------------------------------------------
// Texts of 4 GiB or more: offsets past 2^32, gzip inflated part by part as it is parsed

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#  else
constexpr bool kThreadSanitizer = false;
#  endif
#else
constexpr bool kThreadSanitizer = false;
#endif

void append_le32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(value >> (8 * i) & 0xFF);
}

/// A gzip member holding `text` in stored (uncompressed) deflate blocks: made without compressing.
std::string stored_gzip_member(std::string_view text) {
  std::string member("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  const auto crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
  const auto size = static_cast<std::uint32_t>(text.size());
  do {
    const std::size_t block = std::min<std::size_t>(text.size(), 65535);
    member += static_cast<char>(block == text.size() ? 1 : 0);  // BFINAL on the last, BTYPE 00
    for (const std::size_t half : {block, ~block & 0xFFFF}) {
      member += static_cast<char>(half & 0xFF);
      member += static_cast<char>(half >> 8 & 0xFF);
    }
    member.append(text.substr(0, block));
    text.remove_prefix(block);
  } while (!text.empty());
  append_le32(member, crc);
  append_le32(member, size);
  return member;
}

/// `text` as one gzip member at zlib's level 1, whose runs of one byte inflate three times as fast
/// as those of the higher levels.
std::string gzip_level_1(std::string_view text) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string compressed(deflateBound(&stream, static_cast<uLong>(text.size())), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(compressed.data());
  stream.avail_out = static_cast<uInt>(compressed.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  compressed.resize(stream.total_out);
  deflateEnd(&stream);
  return compressed;
}

TEST(ImportHugeTest, DefaultLimitTakesTextsOfFourGiBAndMore) {
  EXPECT_GE(dlprof::ReadOptions{}.max_json_bytes, std::uint64_t{1} << 32);
}

TEST(ImportHugeTest, LoggedEventsKeepTheirPlaceFarIntoTheText) {
  using namespace dlprof::detail::reader;
  // A part that starts 6 GiB into the text: values are logged from their event's start.
  std::string text = R"([{"ph": "X", "name": "late", "ts": 12.5, "args": {"Input Dims": [[2, 3]], "External id": 9}}])";
  const std::string pristine = text;
  text.append(ByteBuffer::kPadding, '\0');
  constexpr std::size_t kPartOffset = std::size_t{6} << 30;
  TraceBuilder problems;
  TraceHandler handler(problems);
  RawEventLog log;
  log.reset(text.data(), kPartOffset);
  handler.log_events_to(log);
  ASSERT_EQ(run_json_parser(text.data(), 0, handler, SIZE_MAX, kPartOffset).error, rapidjson::kParseErrorNone);
  ASSERT_FALSE(log.overflowed());
  std::vector<RawEvent> events;
  log.replay([&](const RawEvent& event) { events.push_back(event); });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].offset, kPartOffset + 1);
  const auto expect_value = [&](const RawValue* value, std::string_view text_of_value, std::string_view at) {
    ASSERT_NE(value, nullptr);
    EXPECT_EQ(value->text, text_of_value);
    EXPECT_EQ(value->offset, kPartOffset + pristine.find(at));
  };
  expect_value(events[0].field(EventField::Name), "late", "\"late\"");
  expect_value(events[0].field(EventField::Ts), "12.5", "12.5");
  expect_value(events[0].arg(Arg::InputDims), "[[2, 3]]", "[[2, 3]]");
  expect_value(events[0].arg(Arg::ExternalId), "9", "9}");

  // An event of 4 GiB or more cannot be logged: the log says so (the text is then read whole).
  RawEvent huge;
  huge.clear(kPartOffset);
  huge.set(EventField::Ts, RawValue{std::string_view(text.data() + 1, 1), kPartOffset + (std::size_t{5} << 30), JsonType::Number});
  log.reset(text.data(), kPartOffset);
  log.add(huge);
  EXPECT_TRUE(log.overflowed());
}

TEST(ImportHugeTest, GzipOfSeveralMembersIsInflatedAsItIsParsed) {
  std::string json = "{\"traceEvents\": [\n";
  for (int i = 0; i < 5'000; ++i)
    json += fmt::format(R"({}{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": {}, "dur": 1, "args": {{"Input Dims": [[{}]]}}}})",
                        i == 0 ? "" : ",\n", i * 2, i % 7);
  json += "\n], \"baseTimeNanoseconds\": 1700000000000000000}";
  const std::size_t third = json.size() / 3;
  const std::string members =
      gzip_bytes(json.substr(0, third)) + gzip_bytes(json.substr(third, third)) + gzip_bytes(json.substr(2 * third));
  dlprof::ReadOptions whole;
  whole.parse_part_bytes = UINT64_MAX;
  dlprof::ReadOptions parts;
  parts.parse_part_bytes = 4096;
  std::vector<dlprof::ReadProgress> seen;
  parts.progress = [&](const dlprof::ReadProgress& progress) { seen.push_back(progress); };
  expect_same(dlprof::parse_trace(json, "plain.json", whole), dlprof::parse_trace(members, "members.json.gz", parts));
  // Progress in compressed bytes as the parts are read, then the end of the parse.
  ASSERT_GE(seen.size(), 3u);
  for (std::size_t i = 0; i + 1 < seen.size(); ++i) {
    EXPECT_EQ(seen[i].stage, dlprof::ReadProgress::Stage::Decompressing);
    EXPECT_EQ(seen[i].bytes_total, members.size());
    if (i > 0) {
      EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
    }
  }
  EXPECT_EQ(seen.back().stage, dlprof::ReadProgress::Stage::Parsing);
  EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);

  // An error is where a parse of the whole text finds it, line and column included.
  std::string broken = json;
  broken.replace(broken.rfind("\"dur\": 1"), 8, "\"dur\": 1]");
  const TraceReadError plain = read_error([&] { dlprof::parse_trace(broken, "plain.json", whole); });
  const TraceReadError inflated = read_error([&] {
    dlprof::parse_trace(gzip_bytes(broken.substr(0, third)) + gzip_bytes(broken.substr(third)), "members.json.gz", parts);
  });
  EXPECT_EQ(inflated.offset(), plain.offset());
  EXPECT_EQ(inflated.line(), plain.line());
  EXPECT_EQ(inflated.column(), plain.column());
  EXPECT_EQ(inflated.reason(), plain.reason());

  // Beyond the limit: refused, as a text inflated whole is.
  dlprof::ReadOptions small = parts;
  small.max_json_bytes = json.size() / 2;
  EXPECT_THAT(read_error([&] { dlprof::parse_trace(members, "members.json.gz", small); }).reason(),
              fmt::format("the gzip data decompresses to more than {} bytes (ReadOptions::max_json_bytes)", json.size() / 2));
}

TEST(ImportHugeTest, EventsBeyondFourGiBOfGzipTextReadWithTheirValues) {
  if (kThreadSanitizer)
    GTEST_SKIP() << "inflating and parsing 4 GiB takes about 40 s under ThreadSanitizer (AddressSanitizer's build runs it)";
  // Events of 1 MiB, mostly spaces after their name, past the 4 GiB mark of the text: gzip
  // members made once (the spaces) or stored (the rest), so the file is 20 MB.
  constexpr std::size_t kSpaces = std::size_t{1} << 20;
  constexpr int kEvents = 4'160;
  const std::string spaces = gzip_level_1(std::string(kSpaces, ' '));
  const std::string_view start = "{\"traceEvents\": [\n";
  std::string file = stored_gzip_member(start);
  std::uint64_t text_bytes = start.size();
  std::optional<int> unusable;  // the first event past 4 GiB: its dur is text
  std::uint64_t unusable_dur_offset = 0;
  for (int k = 0; k < kEvents; ++k) {
    if (!unusable && text_bytes > (std::uint64_t{1} << 32)) unusable = k;
    const std::string head = fmt::format(R"({{"name": "op{}",)", k);
    const std::string tail = fmt::format(
        R"( "ph": "X", "cat": "cpu_op", "pid": 7, "tid": 8, "ts": {}, "dur": {}, "args": {{"External id": {}, "Input Dims": [[{}, 3]]}}}}{})",
        1'000'000 + 10 * k, unusable == k ? "\"late\"" : "2", k, k, k + 1 < kEvents ? ",\n" : "\n]}");
    if (unusable == k) unusable_dur_offset = text_bytes + head.size() + kSpaces + tail.find("\"late\"");
    file += stored_gzip_member(head) + spaces + stored_gzip_member(tail);
    text_bytes += head.size() + kSpaces + tail.size();
  }
  ASSERT_TRUE(unusable.has_value());
  ASSERT_GT(text_bytes, (std::uint64_t{1} << 32) + 32 * kSpaces);
  TempDir dir;
  write_text(dir.path() / "huge.pt.trace.json.gz", file);

  dlprof::ReadOptions options;
  options.max_json_bytes = std::uint64_t{5} << 30;
  const Trace trace = dlprof::read_trace((dir.path() / "huge.pt.trace.json.gz").string(), options);
  ASSERT_EQ(trace.events.size(), static_cast<std::size_t>(kEvents - 1));
  EXPECT_EQ(trace.read_result.skipped_events, 1u);
  EXPECT_EQ(trace.read_result.first_skip_offset, unusable_dur_offset);
  EXPECT_THAT(trace.read_result.first_skip_reason, HasSubstr("\"dur\""));
  std::map<std::string_view, const TraceEvent*> by_name;
  for (const TraceEvent& event : trace.events) by_name[trace.name_of(event)] = &event;
  for (int k = *unusable - 3; k < kEvents; ++k) {
    SCOPED_TRACE(k);
    const auto found = by_name.find(fmt::format("op{}", k));
    if (k == *unusable) {
      EXPECT_EQ(found, by_name.end());
      continue;
    }
    ASSERT_NE(found, by_name.end());
    const TraceEvent& event = *found->second;
    EXPECT_EQ(event.start_ns, (1'000'000 + 10 * static_cast<std::int64_t>(k)) * 1000);
    EXPECT_EQ(event.duration_ns(), 2'000);
    EXPECT_EQ(event.external_id, static_cast<std::uint64_t>(k));
    ASSERT_NE(event.inputs, TraceEvent::kNoInputs);
    EXPECT_EQ(trace.names[trace.op_inputs[event.inputs].dims], fmt::format("[[{}, 3]]", k));
  }
}

// ---------------------------------------------------------------------------------------------
// Texts parsed in parts on two threads, from memory and from files (import/detail/chunked_parse.hpp)

/// What parsing `json` gives, as a Trace or as the error's offset and reason, parsed on two
/// threads or on one.
struct ParseOutcome {
  std::optional<Trace> trace;
  std::optional<std::size_t> offset;
  std::string reason;
};

/// `split`: in parts of about a byte, a cut after nearly every event.
ParseOutcome parse_outcome(std::string_view json, bool split, bool strict) {
  dlprof::ReadOptions options;
  options.parse_part_bytes = split ? 1 : UINT64_MAX;
  options.strict = strict;
  ParseOutcome outcome;
  try {
    outcome.trace = dlprof::parse_trace(json, "inline.json", options);
  } catch (const TraceReadError& error) {
    outcome.offset = error.offset();
    outcome.reason = error.reason();
  }
  return outcome;
}

void expect_split_reads_the_same(std::string_view json, bool strict = false) {
  const ParseOutcome one_thread = parse_outcome(json, false, strict);
  const ParseOutcome two_threads = parse_outcome(json, true, strict);
  ASSERT_EQ(two_threads.trace.has_value(), one_thread.trace.has_value()) << two_threads.reason << one_thread.reason;
  if (one_thread.trace) {
    expect_same(*one_thread.trace, *two_threads.trace);
  } else {
    EXPECT_EQ(two_threads.offset, one_thread.offset);
    EXPECT_EQ(two_threads.reason, one_thread.reason);
  }
}

/// A copy of `json` that starts `shift` bytes into a padded buffer: the same text against other
/// 16-byte blocks.
class ShiftedText {
 public:
  ShiftedText(std::string_view json, std::size_t shift) : shift_(shift) {
    buffer_.resize(shift + json.size());
    std::memcpy(buffer_.data() + shift, json.data(), json.size());
    buffer_.terminate();
  }
  char* text() noexcept { return buffer_.data() + shift_; }

 private:
  dlprof::detail::reader::ByteBuffer buffer_;
  std::size_t shift_;
};

/// Whether the parse in parts reads `json` itself, cutting at the first place that looks like a
/// cut at or after `from` and every `from` bytes after (rather than giving up, for the reader to
/// parse it on one thread), wherever the text lies against 16-byte blocks (which decides where
/// a cut may be).
bool parts_parse_reads(const std::string& json, std::size_t from) {
  using namespace dlprof::detail::reader;
  for (std::size_t shift = 0; shift < 16; ++shift) {
    ShiftedText shifted(json, shift);
    char* const text = shifted.text();
    TraceBuilder builder;
    TraceHandler handler(builder);
    MemoryParts parts(text, json.size(), std::max<std::size_t>(from, 1));
    try {
      if (!parse_in_parts(parts, json.size(), handler, builder, 4, nullptr)) return false;
    } catch (const ParseFailure&) {
      return false;
    }
  }
  return true;
}

constexpr std::string_view kEventsThenBaseTime = R"json({"schemaVersion": 1,
  "traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 0.500, "dur": 5, "args": {"External id": 1, "Input Dims": [[4, 8], [8, 8]]}},
  {"ph": "f", "id": 1, "pid": 10, "tid": 11, "ts": 1, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 2.250, "dur": 3, "args": {"correlation": 5, "grid": [1, 2, 3]}},
  {"ph": "C", "name": "load", "pid": 10, "tid": 11, "ts": 4, "args": {"value": 3, "other": 2.5}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 10, "tid": 12, "ts": 6.125, "dur": 1, "args": {"Input Dims": [[4, 8]]}}
  ],
  "traceName": "t.json",
  "baseTimeNanoseconds": 1700000000000000000
})json";

TEST(ImportSplitTest, BothThreadsReadTheEventsTheOneThreadReads) {
  const std::string json(kEventsThenBaseTime);
  // Cut after each event but the last in turn: the rest's events, captured args, counters and
  // flows included.
  const std::size_t last_event = json.rfind("\n  {");
  for (std::size_t event = json.find("\n  {"); event < last_event; event = json.find("\n  {", event + 1)) {
    SCOPED_TRACE(event);
    EXPECT_TRUE(parts_parse_reads(json, event));
  }
  expect_split_reads_the_same(json);
  const Trace trace = *parse_outcome(json, true, false).trace;
  ASSERT_EQ(trace.events.size(), 4u);  // two ops and the counter's two series
  EXPECT_EQ(trace.window_start_ns, 1700000000000000500);  // the base time after the events applies to them all
  ASSERT_EQ(trace.gpu_events.size(), 1u);
  EXPECT_EQ(trace.gpu_events[0].kernel.grid[2], 3u);
}

// A text in memory is parsed where it is, each part on either thread: every cut leaves the
// aligned block that holds a part's last "}" (what RapidJSON's SIMD scans read up to) clear of
// the next part, which the other thread rewrites.
TEST(ImportSplitTest, PartsInMemoryAreCutWhereNoScanReadsTheNextPart) {
  std::string json = "{\"traceEvents\": [\n";
  for (int i = 0; i < 300; ++i)
    json += fmt::format("  {{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"op{}\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"dur\": 1}}{}\n",
                        i, 1 + i % 3, i, i + 1 < 300 ? "," : "");
  json += "]}";
  EXPECT_TRUE(parts_parse_reads(json, 64)) << "one part per event or two";
  expect_split_reads_the_same(json);

  using namespace dlprof::detail::reader;
  for (std::size_t shift = 0; shift < 16; ++shift) {
    SCOPED_TRACE(shift);
    ShiftedText shifted(json, shift);
    char* const text = shifted.text();
    MemoryParts parts(text, json.size(), 64);
    std::vector<TextPart> cut{parts.first()};
    while (std::optional<TextPart> part = parts.next()) cut.push_back(*part);
    ASSERT_GT(cut.size(), 30u) << "300 events, a quarter of the places between them cuts";
    for (std::size_t i = 0; i + 1 < cut.size(); ++i) {
      const TextPart& part = cut[i];
      const TextPart& next = cut[i + 1];
      EXPECT_EQ(part.base, text);
      EXPECT_EQ(part.base[part.end - 1], '}');
      EXPECT_EQ(part.base[part.end], '\0');
      EXPECT_EQ(next.base[next.open + 1], '{');
      const auto last_block_end = (reinterpret_cast<std::uintptr_t>(part.base + part.end - 1) | 15u) + 1;
      EXPECT_LE(last_block_end, reinterpret_cast<std::uintptr_t>(next.base + next.open)) << "part " << i;
    }
    EXPECT_TRUE(cut.back().last);
    EXPECT_EQ(cut.back().end, json.size());
  }
}

TEST(ImportSplitTest, BareArraysAndTheEndsOfObjects) {
  const std::string bare = R"json([
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1}
  ]
)json";
  EXPECT_TRUE(parts_parse_reads(bare, 0));
  expect_split_reads_the_same(bare);
  const std::string events_last = R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1}
  ]})json";
  EXPECT_TRUE(parts_parse_reads(events_last, 0));
  expect_split_reads_the_same(events_last);
}

TEST(ImportSplitTest, CutsThatAreNotBetweenEventsAreReadOnOneThread) {
  const struct {
    std::string_view what;
    std::string json;
  } kCases[] = {
      {"in a string", R"json([{"ph": "X", "cat": "cpu_op", "name": "a}, {b", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2, "dur": 1}])json"},
      {"in an arg", R"json([{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"list": [{"x": 1}, {"y": 2}]}},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2, "dur": 1}])json"},
      {"in deviceProperties", R"json({"deviceProperties": [{"id": 0, "name": "A"}, {"id": 1, "name": "B"}], "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2, "dur": 1}]})json"},
      {"without spaces", R"json([{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},{"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2, "dur": 1}])json"},
  };
  for (const auto& cut : kCases) {
    SCOPED_TRACE(cut.what);
    // Without spaces there is no cut at all: the text is one part.
    EXPECT_EQ(parts_parse_reads(cut.json, 0), cut.what == "without spaces");
    expect_split_reads_the_same(cut.json);
  }
}

TEST(ImportSplitTest, ErrorsAreTheOnesOneThreadFinds) {
  const std::string_view kBad[] = {
      // in the rest: syntax, a wrong type the handler finds, one the builder finds
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "ts": 1,, }]})json",
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "ts": []}]})json",
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "name": 5, "ts": 1}]})json",
      // after the array: a trailing comma, a bad base time, two documents, a missing brace
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "ts": 2}], })json",
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "ts": 2}], "baseTimeNanoseconds": -1})json",
      R"json([{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "ts": 2}] [])json",
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}, {"ph": "X", "cat": "cpu_op", "ts": 2}])json",
      // in the head, before the cut
      R"json({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "x"}, {"ph": "X", "cat": "cpu_op", "ts": 2}]})json",
  };
  for (const std::string_view bad : kBad) {
    SCOPED_TRACE(bad);
    const ParseOutcome outcome = parse_outcome(bad, true, true);
    EXPECT_FALSE(outcome.trace.has_value());
    expect_split_reads_the_same(bad, true);
    expect_split_reads_the_same(bad);  // leniently: the same events left out, the same errors
  }
}

TEST(ImportSplitTest, EventsLeftOutOnEitherSideAreCountedOnce) {
  // Unusable events in the head, in the rest (one the handler finds, one the builder finds), and
  // an ignored value in the rest.
  const std::string json = R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "x"},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 3, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": {"n": 1}, "pid": 1, "tid": 1, "ts": 4},
    {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 5, "dur": -1},
    {"ph": "X", "cat": "cpu_op", "name": "e", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": {"External id": [1]}}
  ]})json";
  ASSERT_TRUE(parts_parse_reads(json, json.find("\"c\"")));
  const ParseOutcome split = parse_outcome(json, true, false);
  ASSERT_TRUE(split.trace.has_value()) << split.reason;
  EXPECT_EQ(split.trace->events.size(), 3u);
  EXPECT_EQ(split.trace->read_result.skipped_events, 3u);
  EXPECT_EQ(split.trace->read_result.first_skip_offset, json.find("\"x\""));
  EXPECT_EQ(split.trace->read_result.ignored_values, 1u);
  expect_split_reads_the_same(json);
}

TEST(ImportSplitTest, EveryPrefixFailsAsOnOneThread) {
  TempDir dir;
  dlprof::save_chrome_trace(every_kind_of_event(), (dir.path() / "t.json").string());
  const std::string json = dlprof_test::read_file(dir.path() / "t.json");
  EXPECT_TRUE(parts_parse_reads(json, json.size() / 2));
  // Every third prefix (ninth under a sanitizer), and the whole text: each kind of cut end is met
  // many times over.
  const std::size_t stride = dlprof_test::kSanitized ? 9 : 3;
  for (std::size_t size = 0; size <= json.size(); size = size == json.size() ? size + 1 : std::min(size + stride, json.size())) {
    SCOPED_TRACE(size);
    expect_split_reads_the_same(std::string_view(json).substr(0, size));
    if (HasFailure()) break;
  }
}

TEST_F(ReferenceTraceTest, SplitParseReadsWhatOneThreadReads) {
  for (const char* set : {"hta-1rank-v100-resnet-ns", "hta-1rank-a100-simple-add", "hta-2rank-a100-sampled"}) {
    SCOPED_TRACE(set);
    const std::string path = only_file(set).string();
    dlprof::ReadOptions one_thread;
    one_thread.parse_part_bytes = UINT64_MAX;
    dlprof::ReadOptions two_threads;
    two_threads.parse_part_bytes = 64 << 10;  // hundreds of cuts in the V100 trace, a few in the others
    expect_same(dlprof::read_trace(path, one_thread), dlprof::read_trace(path, two_threads));
    // Kineto's layout is cut where the reader cuts it, not read on one thread after all.
    const std::string compressed = dlprof_test::read_file(path);
    const dlprof::detail::reader::ByteBuffer text = dlprof::detail::reader::gunzip(compressed, UINT64_MAX);
    EXPECT_TRUE(parts_parse_reads(std::string(text.data(), text.size()), text.size() * 2 / 5));
  }
}

TEST_F(ReferenceTraceTest, FilesAreReadPartByPartAsWhole) {
  // The V100 trace decompressed into a file: read in parts of 2 MiB (the default), of 64 KiB, and
  // of 1 byte (a cut after nearly every event, parts out and buffers reused all the time).
  TempDir dir;
  const std::string compressed = dlprof_test::read_file(only_file("hta-1rank-v100-resnet-ns"));
  const dlprof::detail::reader::ByteBuffer text = dlprof::detail::reader::gunzip(compressed, UINT64_MAX);
  const std::string path = (dir.path() / "v100.json").string();
  std::ofstream(path, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
  dlprof::ReadOptions whole;
  whole.parse_part_bytes = UINT64_MAX;
  const Trace expected = dlprof::read_trace(path, whole);
  for (const std::uint64_t part_bytes : {std::uint64_t{2} << 20, std::uint64_t{64} << 10, std::uint64_t{1}}) {
    SCOPED_TRACE(part_bytes);
    dlprof::ReadOptions parts;
    parts.parse_part_bytes = part_bytes;
    std::vector<std::uint64_t> progress;
    parts.progress = [&](const dlprof::ReadProgress& report) { progress.push_back(report.bytes_done); };
    expect_same(expected, dlprof::read_trace(path, parts));
    EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back(), text.size());
  }
}

TEST(ImportPartsTest, FilesWithLongEventsOddLayoutsAndErrorsReadAsWhole) {
  TempDir dir;
  std::string long_name(100'000, 'n');
  const std::string event = R"json({"ph": "X", "cat": "cpu_op", "name": "NAME", "pid": 1, "tid": 1, "ts": TS, "dur": 1})json";
  const auto events = [&](int count, bool with_long) {
    std::string out;
    for (int i = 0; i < count; ++i) {
      std::string one = event;
      one.replace(one.find("NAME"), 4, with_long && i % 50 == 7 ? long_name : "op" + std::to_string(i));
      one.replace(one.find("TS"), 2, std::to_string(10 + i));
      out += (i == 0 ? "\n  " : ",\n  ") + one;
    }
    return out;
  };
  const struct {
    std::string_view what;
    std::string json;
  } kCases[] = {
      {"events longer than a part", "{\"traceEvents\": [" + events(200, true) + "\n]}"},
      {"metadata after the events", "{\"traceEvents\": [" + events(300, false) +
                                        "\n], \"deviceProperties\": [{\"id\": 0, \"name\": \"A\"}, {\"id\": 1, \"name\": \"B\"}], "
                                        "\"baseTimeNanoseconds\": 1700000000000000000}"},
      {"a bare array", "[" + events(300, false) + "\n]\n"},
      {"without spaces", "[" + [&] {
         std::string compact = events(300, false);
         for (std::size_t at = compact.find(",\n  "); at != std::string::npos; at = compact.find(",\n  ", at)) compact.replace(at, 4, ",");
         return compact;
       }() + "]"},
      {"a syntax error late", "{\"traceEvents\": [" + events(300, false) + ",\n  {\"ph\": \"X\",, }\n]}"},
      {"an unusable event late", "{\"traceEvents\": [" + events(300, false) + ",\n  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": [1]}\n]}"},
      {"truncated", "{\"traceEvents\": [" + events(300, false)},
  };
  for (const auto& layout : kCases) {
    SCOPED_TRACE(layout.what);
    const std::string path = (dir.path() / "t.json").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << layout.json;
    for (const bool strict : {false, true}) {
      dlprof::ReadOptions whole;
      whole.parse_part_bytes = UINT64_MAX;
      whole.strict = strict;
      dlprof::ReadOptions parts = whole;
      parts.parse_part_bytes = 4096;
      std::optional<Trace> expected;
      std::string expected_error;
      try {
        expected = dlprof::read_trace(path, whole);
      } catch (const TraceReadError& error) {
        expected_error = error.what();
      }
      try {
        const Trace trace = dlprof::read_trace(path, parts);
        ASSERT_TRUE(expected.has_value()) << "read in parts, refused whole: " << expected_error;
        expect_same(*expected, trace);
      } catch (const TraceReadError& error) {
        EXPECT_EQ(error.what(), expected_error);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The fuzzer's corpus (tests/data/fuzz/trace_reader: seeds and every input that once crashed)

TEST(ImportFuzzCorpusTest, EveryInputLoadsOrFailsCleanly) {
  const fs::path corpus = fs::path(DLPROF_TEST_DATA_DIR) / "fuzz" / "trace_reader";
  ASSERT_TRUE(fs::is_directory(corpus)) << corpus;
  std::size_t inputs = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    ++inputs;
    SCOPED_TRACE(entry.path().filename().string());
    expect_split_reads_the_same(dlprof_test::read_file(entry.path()));  // one thread, then two
  }
  EXPECT_GT(inputs, 0u);
}

// ---------------------------------------------------------------------------------------------
// Numbers: the decimal text, exactly

TEST(ImportCrcTest, FoldedCrcEqualsZlibs) {
  std::vector<unsigned char> bytes(70'000);
  std::uint64_t state = 88172645463325252ull;
  for (unsigned char& byte : bytes) {  // xorshift: any bytes will do
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    byte = static_cast<unsigned char>(state);
  }
  for (std::size_t size : {0u, 1u, 63u, 64u, 127u, 128u, 129u, 1000u, 4096u, 65'537u})
    for (std::size_t offset = 0; offset < 17; ++offset)
      ASSERT_EQ(dlprof::detail::reader::crc32(0x12345678u, bytes.data() + offset, size),
                crc32_z(0x12345678u, bytes.data() + offset, size))
          << size << " at " << offset;
}

TEST(ImportNumberTest, ScaledExactlyAndRoundedOnce) {
  using dlprof::detail::reader::NumberError;
  using dlprof::detail::reader::to_int64;
  const auto ns = [](std::string_view text) {
    std::int64_t value = 0;
    const NumberError error = to_int64(text, 3, std::int64_t{1} << 62, false, &value);
    return error == NumberError::None ? std::optional<std::int64_t>(value) : std::nullopt;
  };
  EXPECT_EQ(ns("0"), 0);
  EXPECT_EQ(ns("-0"), 0);
  EXPECT_EQ(ns("1"), 1000);
  EXPECT_EQ(ns("1.5"), 1500);
  EXPECT_EQ(ns("0.0005"), 1);
  EXPECT_EQ(ns("0.00049999"), 0);
  EXPECT_EQ(ns("-0.0005"), -1);
  EXPECT_EQ(ns("-2.25"), -2250);
  EXPECT_EQ(ns("1E3"), 1'000'000);
  EXPECT_EQ(ns("1.23456e2"), 123'456);
  EXPECT_EQ(ns("12345e-5"), 123);
  EXPECT_EQ(ns("0.0000000001e10"), 1000);
  EXPECT_EQ(ns("4611686018427387.904"), std::int64_t{1} << 62);
  EXPECT_EQ(ns("4611686018427387.905"), std::nullopt);
  EXPECT_EQ(ns("1e99999999999999999999"), std::nullopt);
  EXPECT_EQ(ns("1e-99999999999999999999"), 0);
  EXPECT_EQ(ns("99999999999999999999999"), std::nullopt);
  for (const char* not_a_number : {"", "-", "01", "1.", ".5", "1e", "1e+", "+1", "0x10", "1 ", "NaN", "Infinity"})
    EXPECT_EQ(ns(not_a_number), std::nullopt) << not_a_number;
  std::int64_t value = 0;
  EXPECT_EQ(to_int64("2.5", 0, INT64_MAX, true, &value), NumberError::NotIntegral);
  EXPECT_EQ(to_int64("2.0", 0, INT64_MAX, true, &value), NumberError::None);
  EXPECT_EQ(value, 2);
  EXPECT_EQ(to_int64("-9223372036854775807", 0, INT64_MAX, true, &value), NumberError::None);
  EXPECT_EQ(value, -INT64_MAX);
}


// ---------------------------------------------------------------------------------------------
// Lenient reading: what other writers put where the reader expects something else

TEST(ImportLenientTest, NumericVersionsOfRecentKinetoAreText) {
  // PyTorch 2.5 and later write "cupti_version": 28, "cuda_runtime_version": 12090 and
  // "cuda_driver_version": 13000 as numbers.
  const std::string path = (fs::path(DLPROF_TEST_DATA_DIR) / "kineto" / "h100-torch2.9-numeric-versions.pt.trace.json").string();
  const Trace trace = dlprof::read_trace(path);
  EXPECT_TRUE(trace.read_result.empty());
  EXPECT_EQ(trace.gpu.cupti_version, "28");
  EXPECT_EQ(trace.gpu.driver_version, "13000");
  EXPECT_THAT(trace.metadata, ::testing::Contains(std::pair<std::string, std::string>("cuda_runtime_version", "12090")));
  EXPECT_EQ(trace.distributed.backend, "nccl");
  EXPECT_EQ(trace.distributed.world_size, 2);
  ASSERT_EQ(trace.devices.size(), 1u);
  EXPECT_EQ(trace.devices[0].num_sms, 132);
  EXPECT_EQ(count_events(trace, EventKind::Step), 1u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Kernel), 1u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Memcpy), 1u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Sync), 1u);
  EXPECT_EQ(trace.api_events.size(), 3u);
  EXPECT_EQ(trace.memory_events.size(), 1u);

  dlprof::ReadOptions strict;
  strict.strict = true;
  EXPECT_THAT(read_error([&] { dlprof::read_trace(path, strict); }).reason(),
              HasSubstr("\"cupti_version\" must be a string, not a number"));
}

TEST(ImportLenientTest, UnusableEventsAreLeftOutAndCountedWithTheFirstReason) {
  const std::string json = R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "kept", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "abc", "pid": 1, "tid": 1, "ts": 11, "dur": "abc"},
    {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": ["list"], "pid": 1, "tid": 1, "ts": 12, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "object pid", "pid": {"a": 1}, "tid": 1, "ts": 12, "dur": 1},
    {"ph": "X", "cat": "kernel", "name": "bool tid", "pid": 0, "tid": true, "ts": 12, "dur": 1},
    {"ph": 5, "cat": "cpu_op", "name": "numeric ph", "pid": 1, "tid": 1, "ts": 12, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": 1, "ts": 4611686018427387, "dur": 1},
    7, [1, 2], "text", null,
    {"ph": "X", "cat": "cpu_op", "name": 42, "pid": 1, "tid": 1, "ts": "13", "dur": "1.5"}
  ]})json";
  const Trace trace = parse(json);
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.names[trace.events[0].name], "kept");
  EXPECT_EQ(trace.names[trace.events[1].name], "42");  // a number where text is expected is its text
  EXPECT_EQ(trace.events[1].start_ns, 13'000);         // and a string holding a number is the number
  EXPECT_EQ(trace.events[1].duration_ns(), 1'500);
  const dlprof::ReadResult& read = trace.read_result;
  EXPECT_EQ(read.skipped_events, 11u);
  EXPECT_EQ(read.first_skip_reason, "\"dur\" must be a number, not a string");
  EXPECT_EQ(read.first_skip_offset, json.find("\"abc\"}"));
  EXPECT_EQ(trace.window_start_ns, 10'000);
  EXPECT_EQ(trace.window_end_ns, 15'000);
}

TEST(ImportLenientTest, ATraceWithNoUsableEventFailsWithTheFirstReason) {
  const std::string json = R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": -1},
    {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": []}
  ]})json";
  const TraceReadError error = read_error([&] { parse(json); });
  EXPECT_EQ(error.reason(), "\"dur\" must not be negative: -1");
  EXPECT_EQ(error.offset(), json.find("-1"));
  EXPECT_EQ(error.line(), 2u);
  // Nothing to leave out is not an error: an empty window reads as one.
  EXPECT_TRUE(parse(R"json({"traceEvents": []})json").events.empty());
}

TEST(ImportLenientTest, ArgsOfUnexpectedTypeAreLeftOutOfTheirEvent) {
  const std::string json = R"json({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
     "args": {"correlation": [1], "External id": "abc", "stream": "7", "device": {"d": 0}, "grid": "big",
              "block": [128, 1, 1], "blocks per SM": null, "registers per thread": 32}},
    {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
     "args": {"External id": "12", "Sequence number": "x", "flops": -3}},
    {"ph": "X", "cat": "cpu_op", "name": "no args", "pid": 1, "tid": 1, "ts": 11, "dur": 1, "args": [1]}
  ]})json";
  const Trace trace = parse(json);
  ASSERT_EQ(trace.gpu_events.size(), 1u);
  const GpuEvent& kernel = trace.gpu_events[0];
  EXPECT_EQ(kernel.correlation, 0u);
  EXPECT_EQ(kernel.external_id, 0u);
  EXPECT_EQ(kernel.stream, 7);  // a string holding a number is the number
  EXPECT_EQ(kernel.device, 0u);
  EXPECT_EQ(kernel.kernel.grid[0], 1u);
  EXPECT_EQ(kernel.kernel.block[0], 128u);
  EXPECT_EQ(kernel.kernel.registers_per_thread, 32u);
  const TraceEvent* op = find_event(trace, "op");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->external_id, 12u);
  EXPECT_EQ(op->sequence_number, -1);
  EXPECT_NE(find_event(trace, "no args"), nullptr);
  const dlprof::ReadResult& read = trace.read_result;
  EXPECT_EQ(read.skipped_events, 0u);
  EXPECT_EQ(read.ignored_values, 8u);
  ASSERT_EQ(read.notes.size(), 1u);
  EXPECT_EQ(read.notes[0], fmt::format("8 event values of an unexpected type left out; the first, at byte {}: "
                                       "\"correlation\" must be a scalar, not an array",
                                       json.find("[1]")));
}

TEST(ImportLenientTest, MetadataOfUnexpectedTypeIsKeptAsText) {
  const std::string json = R"json({"schemaVersion": "1", "cupti_version": 12.4, "cuda_driver_version": true,
    "dlprof_dropped_events": "7", "dlprof_clipped_ranges": "many", "dlprof_clock": null,
    "deviceProperties": [{"id": "1", "name": 5, "numSms": {"n": 80}, "totalGlobalMem": "lots", "warpSize": null}, 3],
    "distributedInfo": {"backend": 1, "rank": "3", "world_size": [4]},
    "baseTimeNanoseconds": "1700000000000000000",
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})json";
  const Trace trace = parse(json);
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].start_ns, 1'700'000'000'000'001'000);
  EXPECT_EQ(trace.gpu.cupti_version, "12.4");
  EXPECT_EQ(trace.gpu.driver_version, "true");
  EXPECT_EQ(trace.dropped_events, 7u);
  EXPECT_EQ(trace.clipped_ranges, 0u);
  EXPECT_EQ(trace.clock_source, "");
  ASSERT_EQ(trace.devices.size(), 1u);
  EXPECT_EQ(trace.devices[0].id, 1);
  EXPECT_EQ(trace.devices[0].name, "5");
  EXPECT_EQ(trace.devices[0].num_sms, 0);
  EXPECT_EQ(trace.distributed.backend, "1");
  EXPECT_EQ(trace.distributed.rank, 3);
  EXPECT_EQ(trace.distributed.world_size, 1);
  using Entry = std::pair<std::string, std::string>;
  EXPECT_THAT(trace.metadata, ::testing::IsSupersetOf({Entry{"dlprof_clipped_ranges", "\"many\""},
                                                       Entry{"deviceProperties[0].numSms", "{\"n\": 80}"},
                                                       Entry{"deviceProperties[0].totalGlobalMem", "\"lots\""},
                                                       Entry{"deviceProperties[1]", "3"},
                                                       Entry{"distributedInfo.world_size", "[4]"}}));
  EXPECT_EQ(trace.read_result.ignored_values, 5u);
  ASSERT_EQ(trace.read_result.notes.size(), 5u);
  EXPECT_EQ(trace.read_result.notes[0],
            fmt::format("\"dlprof_clipped_ranges\" must be a number, not a string (at byte {}); kept in the metadata as "
                        "\"dlprof_clipped_ranges\"",
                        json.find("\"many\"")));
}

TEST(ImportLenientTest, StructuresWhereTheReaderNeedsOthersAreKeptAsText) {
  const Trace trace = parse(R"json({"deviceProperties": {"id": 0}, "distributedInfo": "rank 3", "dlprof_clock": ["tsc"],
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})json");
  EXPECT_TRUE(trace.devices.empty());
  EXPECT_EQ(trace.distributed.rank, 0);
  using Entry = std::pair<std::string, std::string>;
  EXPECT_THAT(trace.metadata, ::testing::IsSupersetOf({Entry{"deviceProperties", "{\"id\": 0}"},
                                                       Entry{"distributedInfo", "\"rank 3\""},
                                                       Entry{"dlprof_clock", "[\"tsc\"]"}}));
  EXPECT_EQ(trace.read_result.ignored_values, 3u);
  // What no reading can get past stays an error.
  EXPECT_THAT(read_error([] { parse(R"json({"traceEvents": {"ph": "X"}})json"); }).reason(),
              HasSubstr("\"traceEvents\" must be an array, not an object"));
  EXPECT_THAT(read_error([] { parse(R"json({"traceEvents": 3})json"); }).reason(),
              HasSubstr("\"traceEvents\" must be an array, not a number"));
  EXPECT_THAT(read_error([] { parse("42"); }).reason(), HasSubstr("a trace is a JSON object or array"));
}

TEST(ImportLenientTest, KeysInAnyOrder) {
  const Trace trace = parse(R"json([
    {"args": {"stream": 7, "correlation": 5, "device": 1}, "dur": 2, "ts": 10, "tid": 7, "pid": 1, "name": "k", "cat": "kernel", "ph": "X"},
    {"args": {"value": 3}, "ts": 11, "tid": 1, "pid": 1, "name": "c", "ph": "C"},
    {"args": {"correlation": 5}, "dur": 1, "ts": 9, "tid": 1, "pid": 1, "name": "cudaLaunchKernel", "cat": "cuda_runtime", "ph": "X"}
  ])json");
  EXPECT_TRUE(trace.read_result.empty());
  ASSERT_EQ(trace.gpu_events.size(), 1u);
  EXPECT_EQ(trace.gpu_events[0].stream, 7);
  EXPECT_EQ(trace.gpu_events[0].device, 1u);
  EXPECT_EQ(trace.gpu_events[0].correlation, 5u);
  ASSERT_EQ(trace.api_events.size(), 1u);
  EXPECT_EQ(count_events(trace, EventKind::Counter), 1u);
}

TEST(ImportLenientTest, TheBadInputTableReadsOrFailsAsItMust) {
  // Strictly every one of these fails (ImportErrorTest.SyntaxErrorsAndWrongTypes); leniently only
  // what is not JSON, not a trace, or has no usable event.
  const struct {
    std::string_view json;
    std::string_view reason;  ///< empty: reads
  } kCases[] = {
      {"not json", "Invalid value."},
      {"{\"traceEvents\": {}}", "\"traceEvents\" must be an array, not an object"},
      {"[1]", "a trace event must be an object, not a number"},
      {"[{\"ph\": 1}]", "\"ph\" must be a string, not a number"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1e300}]", "\"ts\" is out of range: 1e300"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": -0.5}]", "\"ts\" must not be negative: -0.5"},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": 5, \"ts\": 1}]", ""},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"args\": {\"External id\": \"7\"}}]", ""},
      {"[{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"args\": {\"grid\": [1, 2, 3, 4]}}]", ""},
      {"[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 1, \"args\": 3}]", ""},
      {"{\"deviceProperties\": [{\"id\": \"zero\"}]}", ""},
      {"{\"distributedInfo\": []}", ""},
      {"{\"baseTimeNanoseconds\": -1, \"traceEvents\": []}", ""},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": 4611686018427387.904}], \"baseTimeNanoseconds\": 4611686018427387904}",
       "\"baseTimeNanoseconds\" plus a timestamp is beyond 2^62 ns"},
  };
  for (const auto& bad : kCases) {
    SCOPED_TRACE(bad.json);
    if (bad.reason.empty()) {
      EXPECT_NO_THROW(parse(bad.json));
      EXPECT_THAT(read_error([&] { parse_strictly(bad.json); }).what(), HasSubstr("'inline.json' at byte "));
    } else {
      EXPECT_THAT(read_error([&] { parse(bad.json); }).reason(), HasSubstr(std::string(bad.reason)));
    }
  }
}

TEST(ImportDeviceTest, EveryDeviceKinetoWritesIsClassifiedAsHtaDoes) {
  const Trace trace = parse(R"json([
    {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "rocm_kernel", "pid": 0, "tid": 1, "ts": 2, "dur": 1, "args": {"correlation": 1, "stream": 1, "device": 0}},
    {"ph": "X", "cat": "xpu_runtime", "name": "zeCommandListAppendLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": {"correlation": 2}},
    {"ph": "X", "cat": "xpu_driver", "name": "zeEventHostSynchronize", "pid": 1, "tid": 1, "ts": 3, "dur": 1},
    {"ph": "X", "cat": "kernel", "name": "xpu_kernel", "pid": 1, "tid": 2, "ts": 4, "dur": 1, "args": {"correlation": 2, "device": 1}},
    {"ph": "X", "cat": "mtia_runtime", "name": "runFunction - job_prep_and_submit_for_execution", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"correlation": 3}},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "mtia_kernel", "pid": 2, "tid": 3, "ts": 6, "dur": 1, "args": {"correlation": 3}},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_copy", "pid": 2, "tid": 3, "ts": 7, "dur": 1},
    {"ph": "X", "cat": "privateuse1_runtime", "name": "npuLaunch", "pid": 1, "tid": 1, "ts": 8, "dur": 1},
    {"ph": "X", "cat": "privateuse1_driver", "name": "npuDrv", "pid": 1, "tid": 1, "ts": 8, "dur": 1},
    {"ph": "X", "cat": "cuda_event", "name": "cudaEventRecord", "pid": 0, "tid": 1, "ts": 9, "dur": 0, "args": {"stream": 1}},
    {"ph": "X", "cat": "mlu_kernel", "name": "unknown_device_kernel", "pid": 3, "tid": 4, "ts": 10, "dur": 2},
    {"ph": "X", "cat": "GCU_MEMCPY", "name": "unknown_device_copy", "pid": 3, "tid": 4, "ts": 12, "dur": 2},
    {"ph": "X", "cat": "npu_op", "name": "unknown_device_work", "pid": 3, "tid": 4, "ts": 14, "dur": 2, "args": {"stream": 4}},
    {"ph": "X", "cat": "npu_op", "name": "unknown_device_work", "pid": 3, "tid": 4, "ts": 16, "dur": 2, "args": {"stream": 4}},
    {"ph": "X", "cat": "host_thing", "name": "not device work", "pid": 1, "tid": 1, "ts": 18, "dur": 2}
  ])json");
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Kernel), 7u);
  EXPECT_EQ(count_gpu(trace, GpuEventKind::Memcpy), 1u);
  ASSERT_EQ(trace.api_events.size(), 6u);
  EXPECT_EQ(std::count_if(trace.api_events.begin(), trace.api_events.end(), [](const dlprof::ApiEvent& call) { return call.driver; }),
            2);
  EXPECT_EQ(trace.window_end_ns, 18'000);  // the unknown host category is not read
  EXPECT_THAT(trace.read_result.notes,
              ::testing::ElementsAre("1 slice of category \"GCU_MEMCPY\", which dlprof does not know, counted as GPU kernels",
                                     "1 slice of category \"mlu_kernel\", which dlprof does not know, counted as GPU kernels",
                                     "2 slices of category \"npu_op\", which dlprof does not know, counted as GPU kernels"));
}

// The stream of device work is its args' (XPU's "sycl queue"); without one, its row only where
// Kineto puts work on its stream's row, and -1 otherwise, as HTA reads it: MTIA's dma_request
// copies sit on a thread's row, which is no stream.
TEST(ImportDeviceTest, DeviceWorkWithoutAStreamInItsArgsIsOnNoStream) {
  const Trace trace = parse(R"json([
    {"ph": "X", "cat": "mtia_ccp_events", "name": "mtia_kernel", "pid": 2, "tid": 5, "ts": 1, "dur": 4,
     "args": {"correlation": 3, "stream": 5, "device": 2}},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 2, "tid": 48213, "ts": 6, "dur": 2,
     "args": {"correlation": 4, "device": 2}},
    {"ph": "X", "cat": "kernel", "name": "xpu_kernel", "pid": 1, "tid": 9, "ts": 10, "dur": 1,
     "args": {"correlation": 2, "device": 1, "sycl queue": 9}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "forward", "pid": 0, "tid": 7, "ts": 1, "dur": 20,
     "args": {"External id": 5}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 14", "ts": 12,
     "dur": 2}
  ])json");
  const auto stream_of = [&](std::string_view name) {
    for (const dlprof::GpuEvent& work : trace.gpu_events)
      if (trace.names[work.name] == name) return work.stream;
    ADD_FAILURE() << name << " not read";
    return std::int64_t{-2};
  };
  EXPECT_EQ(stream_of("mtia_kernel"), 5);
  EXPECT_EQ(stream_of("dma_request"), -1);
  EXPECT_EQ(stream_of("xpu_kernel"), 9);
  EXPECT_EQ(stream_of("forward"), 7);
  EXPECT_EQ(stream_of("Memcpy HtoD (Pageable -> Device)"), 14);
}

// torch.compile's Triton launches are cpu_ops with a stream in their args: kept as ops, and
// listed in Trace::cpu_slices_on_streams on the file's clock.
TEST(ImportTest, CpuOpsNamingAStreamAreListed) {
  const Trace trace = parse(R"json({"baseTimeNanoseconds": 1000000000, "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "triton_poi_fused_add_0", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
     "args": {"External id": 3, "stream": 7, "grid": "[128, 1, 1]"}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"External id": 4}},
    {"ph": "X", "cat": "cpu_op", "name": "triton_red_fused_sum_1", "pid": 1, "tid": 1, "ts": 30, "dur": 2,
     "args": {"stream": 4294967295}}
  ]})json");
  ASSERT_EQ(trace.cpu_slices_on_streams.size(), 1u);
  const dlprof::CpuSliceOnStream& slice = trace.cpu_slices_on_streams[0];
  EXPECT_EQ(trace.names[slice.name], "triton_poi_fused_add_0");
  EXPECT_EQ(slice.stream, 7);
  EXPECT_EQ(slice.start_ns, 1'000'010'000);
  EXPECT_EQ(slice.end_ns, 1'000'015'000);
  ASSERT_NE(find_event(trace, "triton_poi_fused_add_0"), nullptr);
  EXPECT_EQ(find_event(trace, "triton_poi_fused_add_0")->kind, EventKind::Op);
}

TEST_F(ReferenceTraceTest, EverySetReadsAsWrittenStrictlyAndLeniently) {
  dlprof::ReadOptions strict;
  strict.strict = true;
  std::size_t sets = 0;
  for (const fs::directory_entry& set : fs::directory_iterator(kReferenceTraces)) {
    if (!set.is_directory()) continue;
    SCOPED_TRACE(set.path().filename().string());
    ++sets;
    const std::vector<Trace> lenient = dlprof::read_trace_set({set.path().string()});
    const std::vector<Trace> strictly = dlprof::read_trace_set({set.path().string()}, strict);
    ASSERT_EQ(lenient.size(), strictly.size());
    for (std::size_t i = 0; i < lenient.size(); ++i) {
      EXPECT_TRUE(lenient[i].read_result.empty()) << fmt::format("{}", fmt::join(lenient[i].read_result.notes, "\n"));
      EXPECT_FALSE(lenient[i].gpu_events.empty());
      expect_same(strictly[i], lenient[i]);
    }
  }
  EXPECT_EQ(sets, 7u);
}

TEST(ImportCallStackTest, PythonFramesAroundAnOpAreItsStackAndBackwardOpsTakeTheirForwardOps) {
  const Trace trace = parse(R"({"traceEvents": [
    {"ph": "X", "cat": "python_function", "name": "train.py(80): <module>", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "python_function", "name": "model.py(12): forward", "pid": 1, "tid": 1, "ts": 1, "dur": 50},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 10, "args": {"Sequence number": 5}},
    {"ph": "X", "cat": "python_function", "name": "<built-in method relu>", "pid": 1, "tid": 1, "ts": 20, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 21, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 40, "dur": 2, "args": {"Call stack": "x.py(1): f"}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "pid": 1, "tid": 1, "ts": 60, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::abs", "pid": 1, "tid": 1, "ts": 90, "dur": 20},
    {"ph": "X", "cat": "cpu_op", "name": "aten::neg", "pid": 1, "tid": 3, "ts": 5, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "MmBackward0", "pid": 1, "tid": 2, "ts": 200, "dur": 10,
     "args": {"Sequence number": 5, "Fwd thread id": 1}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::t", "pid": 1, "tid": 2, "ts": 201, "dur": 5}
  ]})");
  const auto frames = [&trace](std::string_view op) {
    std::vector<std::string> texts;
    const TraceEvent* event = find_event(trace, op);
    if (event == nullptr || event->stack == TraceEvent::kNoStack) return texts;
    const dlprof::CallStack& stack = trace.stacks.at(event->stack);
    for (std::uint32_t i = 0; i < stack.depth; ++i) texts.push_back(dlprof::frame_text(trace, trace.stack_frames.at(stack.first + i)));
    return texts;
  };
  using ::testing::ElementsAre;
  EXPECT_THAT(frames("aten::mm"), ElementsAre("model.py(12): forward", "train.py(80): <module>")) << "the innermost first";
  EXPECT_THAT(frames("aten::relu"), ElementsAre("<built-in method relu>", "model.py(12): forward", "train.py(80): <module>"));
  EXPECT_THAT(frames("aten::add"), ElementsAre("x.py(1): f")) << "a Call stack arg is kept";
  EXPECT_THAT(frames("aten::sum"), ElementsAre("train.py(80): <module>"));
  EXPECT_THAT(frames("aten::abs"), ElementsAre()) << "a frame that ends inside an op does not hold it";
  EXPECT_THAT(frames("aten::neg"), ElementsAre()) << "another thread's frames";
  EXPECT_THAT(frames("MmBackward0"), ElementsAre("model.py(12): forward", "train.py(80): <module>")) << "its forward op's";
  EXPECT_THAT(frames("aten::t"), ElementsAre("model.py(12): forward", "train.py(80): <module>")) << "its backward op's";
  EXPECT_EQ(find_event(trace, "aten::mm")->stack, find_event(trace, "MmBackward0")->stack);
}

// dlprof's [memory category] instants are read into Trace::memory_tags; one whose category is not
// one of dlprof's is noted and left out.
TEST(ImportTest, MemoryCategoryTagsAreReadAndAnUnknownCategoryIsNoted) {
  const Trace trace = parse(R"({"traceEvents": [
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory category]", "pid": 1, "tid": 2, "ts": 10,
   "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, "memory category": "parameters"}},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory category]", "pid": 1, "tid": 2, "ts": 11,
   "args": {"Device Type": 0, "Device Id": -1, "Addr": 8192, "Bytes": 64, "memory category": "weights"}},
  {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory category]", "pid": 1, "tid": 2, "ts": 12,
   "args": {"Device Type": 0, "Device Id": -1, "Addr": 8192, "Bytes": 64, "memory category": 3}}
]})");
  ASSERT_EQ(trace.memory_tags.size(), 1u);
  EXPECT_EQ(trace.memory_tags[0].category, dlprof::MemoryCategory::Parameter);
  EXPECT_EQ(trace.memory_tags[0].address, 4096u);
  EXPECT_EQ(trace.memory_tags[0].bytes, 512);
  EXPECT_EQ(trace.memory_tags[0].device_type, dlprof::MemoryDeviceType::CUDA);
  EXPECT_EQ(trace.memory_tags[0].device, 0);
  EXPECT_TRUE(trace.events.empty()) << "a tag is no instant of the timeline";
  EXPECT_THAT(trace.read_result.notes,
              testing::Contains(testing::HasSubstr("a [memory category] event without a known \"memory category\"")));
}

TEST(ImportTest, AGraphsWorkKeepsItsGraphAndNodeIdsAndOddOnesAreNoted) {
  const Trace trace = parse(R"json({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1, "dur": 5,
     "args": {"correlation": 3, "graph id": 4, "graph node id": 4294967298}},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 7, "dur": 1,
     "args": {"correlation": 3, "graph id": 4, "graph node id": 9}},
    {"ph": "X", "cat": "kernel", "name": "odd", "pid": 0, "tid": 7, "ts": 9, "dur": 1,
     "args": {"correlation": 4, "graph id": "four"}},
    {"ph": "X", "cat": "kernel", "name": "alone", "pid": 0, "tid": 7, "ts": 12, "dur": 1, "args": {"correlation": 5}}
  ]})json");
  ASSERT_EQ(trace.gpu_events.size(), 4u);
  EXPECT_EQ(trace.gpu_events[0].graph_id, 4u);
  EXPECT_EQ(trace.gpu_events[0].graph_node_id, 4294967298u);
  EXPECT_EQ(trace.gpu_events[1].graph_node_id, 9u);
  EXPECT_EQ(trace.gpu_events[2].graph_id, 0u) << "a value of the wrong type is left out";
  EXPECT_THAT(trace.read_result.notes, ::testing::Contains(::testing::HasSubstr("graph id")));
  EXPECT_EQ(trace.gpu_events[3].graph_id, 0u);
  EXPECT_EQ(trace.gpu_events[3].graph_node_id, 0u);
  // Written again, as Kineto writes them.
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "t");
  EXPECT_THAT(std::string(out.data(), out.size()), ::testing::HasSubstr(R"("graph id": 4, "graph node id": 4294967298)"));
}

TEST(ImportTest, ReplayedWorkKeepsTheScopeThatCapturedItsNodeAndItsStack) {
  const Trace trace = parse(R"json({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1, "dur": 5,
     "args": {"correlation": 3, "graph id": 4, "graph node id": 11, "captured by": "Block::forward",
              "capture call stack": "train.cpp(42): Block::forward;train.cpp(90): main"}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 7, "dur": 5,
     "args": {"correlation": 3, "graph id": 4, "graph node id": 12, "captured by": "Block::forward",
              "capture call stack": "train.cpp(42): Block::forward;train.cpp(90): main"}},
    {"ph": "X", "cat": "kernel", "name": "odd", "pid": 0, "tid": 7, "ts": 13, "dur": 1,
     "args": {"correlation": 3, "graph id": 4, "graph node id": 13, "captured by": {"op": "x"}, "capture call stack": ["x"]}}
  ]})json");
  ASSERT_EQ(trace.gpu_events.size(), 3u);
  const dlprof::GpuEvent& first = trace.gpu_events[0];
  ASSERT_LT(first.captured_by, trace.names.size());
  EXPECT_EQ(trace.names[first.captured_by], "Block::forward");
  ASSERT_LT(first.capture_stack, trace.stacks.size());
  EXPECT_EQ(trace.gpu_events[1].capture_stack, first.capture_stack) << "one text, one stack";
  const dlprof::CallStack& stack = trace.stacks[first.capture_stack];
  ASSERT_EQ(stack.depth, 2u);
  EXPECT_EQ(dlprof::frame_text(trace, trace.stack_frames[stack.first]), "train.cpp(42): Block::forward");
  EXPECT_EQ(trace.gpu_events[2].captured_by, dlprof::GpuEvent::kNotCaptured) << "a value of the wrong type is left out";
  EXPECT_EQ(trace.gpu_events[2].capture_stack, TraceEvent::kNoStack);
  EXPECT_EQ(trace.read_result.ignored_values, 2u);
  EXPECT_THAT(trace.read_result.notes, ::testing::Contains(::testing::HasSubstr("captured by")));
  const dlprof::analysis::KernelAttribution attribution = dlprof::analysis::kernel_attribution(trace);
  ASSERT_EQ(attribution.kernels.size(), 3u);
  EXPECT_EQ(attribution.kernels[0].op, "Block::forward");
  EXPECT_EQ(attribution.kernels[0].line, "train.cpp(42): Block::forward");
  EXPECT_TRUE(attribution.kernels[0].from_capture);
  EXPECT_FALSE(attribution.kernels[2].from_capture);
  // Written again as read.
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "t");
  EXPECT_THAT(std::string(out.data(), out.size()),
              ::testing::HasSubstr(R"("graph node id": 11, "captured by": "Block::forward", "capture call stack": )"
                                   R"("train.cpp(42): Block::forward;train.cpp(90): main")"));
}

TEST(ImportCallStackTest, TorchsCallStacksAreReadAsFramesOfText) {
  const Trace trace = parse(R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5,
     "args": {"Call stack": "model.py(12): forward;train.py(40): step;train.py(80): <module>"}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
     "args": {"Call stack": "model.py(12): forward;train.py(40): step;train.py(80): <module>"}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"Call stack": ""}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "pid": 1, "tid": 1, "ts": 30, "dur": 5, "args": {"Call stack": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::abs", "pid": 1, "tid": 1, "ts": 40, "dur": 5, "args": {"Call stack": "libfoo.so+0x10"}}
  ]})");
  const TraceEvent* mm = find_event(trace, "aten::mm");
  const TraceEvent* add = find_event(trace, "aten::add");
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(add, nullptr);
  ASSERT_NE(mm->stack, TraceEvent::kNoStack);
  EXPECT_EQ(add->stack, mm->stack) << "one text, one stack";
  const dlprof::CallStack& stack = trace.stacks.at(mm->stack);
  ASSERT_EQ(stack.depth, 3u);
  EXPECT_EQ(trace.names.at(trace.stack_frames.at(stack.first).text), "model.py(12): forward") << "the innermost first";
  EXPECT_EQ(trace.names.at(trace.stack_frames.at(stack.first + 2).text), "train.py(80): <module>");
  EXPECT_EQ(trace.stack_frames.at(stack.first).address, 0u);
  EXPECT_EQ(find_event(trace, "aten::relu")->stack, TraceEvent::kNoStack) << "an empty stack is none";
  // A number is read as text, as the reader reads other texts leniently.
  const dlprof::CallStack& number = trace.stacks.at(find_event(trace, "aten::sum")->stack);
  EXPECT_EQ(trace.names.at(trace.stack_frames.at(number.first).text), "7");
  // Without the modules it names, a frame spelled as dlprof's unsymbolised ones keeps its text.
  const dlprof::CallStack& foo = trace.stacks.at(find_event(trace, "aten::abs")->stack);
  EXPECT_EQ(trace.stack_frames.at(foo.first).address, 0u);
  EXPECT_EQ(trace.names.at(trace.stack_frames.at(foo.first).text), "libfoo.so+0x10");
}

TEST(ImportCallStackTest, AModuleListThatIsNotOneIsNotedAndKeptAndFramesKeepTheirText) {
  for (const char* modules : {R"("modules")", R"([{"path": "/lib/libfoo.so", "base": -1, "start": 0, "end": 16}])",
                              R"([{"path": "/lib/libfoo.so", "base": 0, "start": 32, "end": 16}])", R"([{"base": 0, "start": 0, "end": 16}])"}) {
    SCOPED_TRACE(modules);
    const Trace trace = parse(fmt::format(R"({{"dlprof_modules": {}, "traceEvents": [
      {{"ph": "X", "cat": "cpu_op", "name": "aten::abs", "pid": 1, "tid": 1, "ts": 40, "dur": 5, "args": {{"Call stack": "libfoo.so+0x10"}}}}
    ]}})", modules));
    EXPECT_TRUE(trace.modules.empty());
    ASSERT_EQ(trace.metadata.size(), 1u);
    EXPECT_EQ(trace.metadata[0].first, "dlprof_modules");
    EXPECT_THAT(trace.read_result.notes, ::testing::Contains(HasSubstr("\"dlprof_modules\" is not an array of modules")));
    const dlprof::CallStack& stack = trace.stacks.at(find_event(trace, "aten::abs")->stack);
    EXPECT_EQ(trace.names.at(trace.stack_frames.at(stack.first).text), "libfoo.so+0x10");
  }
  const Trace good = parse(R"({"dlprof_modules": [{"path": "/lib/libfoo.so", "build_id": "", "base": 4096, "start": 4096, "end": 8192}],
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::abs", "pid": 1, "tid": 1, "ts": 40, "dur": 5,
                     "args": {"Call stack": "libfoo.so+0x10"}}]})");
  ASSERT_EQ(good.modules.size(), 1u);
  EXPECT_TRUE(good.metadata.empty());
  const dlprof::CallStack& stack = good.stacks.at(find_event(good, "aten::abs")->stack);
  EXPECT_EQ(good.stack_frames.at(stack.first).address, 4096u + 0x10);
  EXPECT_EQ(good.stack_frames.at(stack.first).text, dlprof::StackFrame::kNoText);
}

TEST(ImportRoundTripTest, PythonFramesAndUnknownOccupancyReadBackAsWritten) {
  // A with_stack frame stays a python_function slice; a ROCm kernel, without Kineto's occupancy
  // args, has an unknown occupancy (Kineto's -99), not 0.
  const Trace trace = parse(R"json({"traceEvents": [
    {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 10, "tid": 11, "ts": 100, "dur": 50,
     "args": {"Python id": 3, "Python module id": 0}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 10, "tid": 11, "ts": 110, "dur": 20, "args": {"External id": 7}},
    {"ph": "X", "cat": "kernel", "name": "Cijk_Alik_Bljk_SB_MT64x64x16", "pid": 2, "tid": 1, "ts": 120, "dur": 10,
     "args": {"device": 2, "stream": 1, "correlation": 5, "External id": 7}}
  ]})json");
  const TraceEvent* frame = find_event(trace, "nn.Module: Linear_0");
  ASSERT_NE(frame, nullptr);
  EXPECT_EQ(frame->kind, EventKind::PythonFrame);
  EXPECT_EQ(frame->category, Category::Forward);
  ASSERT_EQ(trace.gpu_events.size(), 1u);
  EXPECT_LT(trace.gpu_events[0].kernel.est_achieved_occupancy_percent, 0);

  TempDir dir;
  const std::string path = (dir.path() / "again.pt.trace.json").string();
  dlprof::save_chrome_trace(trace, path);
  EXPECT_THAT(dlprof_test::read_file(path), HasSubstr(R"("cat": "python_function", "name": "nn.Module: Linear_0")"));
  expect_same(trace, dlprof::read_trace(path));
}

}  // namespace
