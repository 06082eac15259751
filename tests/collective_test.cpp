// Collectives recorded as c10d records them: a record_param_comms op with what the call moved,
// around a "gloo:all_reduce" range, both of category Communication, and the process groups in
// distributedInfo, written as torch.profiler 2.x writes them.
#include <dlprof/collective.hpp>
#include <dlprof/export/chrome_trace.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

using ::testing::ElementsAre;

/// Records one step holding `body` and returns its trace.
template <class Body>
std::shared_ptr<const dlprof::Trace> record_one_step(Body&& body) {
  std::shared_ptr<const dlprof::Trace> kept;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(
      [&](const dlprof::Trace& trace) { kept = std::make_shared<dlprof::Trace>(trace); }));
  profiler.start();
  body();
  profiler.stop();
  return kept;
}

nlohmann::json written(const dlprof::Trace& trace) {
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "collective_test.pt.trace.json");
  return nlohmann::json::parse(std::string_view(out.data(), out.size()));
}

const nlohmann::json* find_event(const nlohmann::json& document, std::string_view name) {
  for (const nlohmann::json& event : document["traceEvents"])
    if (event.value("name", "") == name) return &event;
  return nullptr;
}

TEST(CollectiveTest, ACallIsARecordParamCommsOpAroundItsRangeWithC10dsArgs) {
  const auto trace = record_one_step([] {
    dlprof::Collective call;
    call.name = "allreduce";
    call.in_nelems = call.out_nelems = 1024;
    call.group_size = 4;
    call.rank = 2;
    call.seq = 7;
    dlprof::ScopedCollective recorded(call);
  });
  ASSERT_NE(trace, nullptr);
  ASSERT_EQ(trace->collectives.size(), 1u);
  const dlprof::CollectiveCall& call = trace->collectives[0];
  EXPECT_EQ(call.name, "allreduce");
  EXPECT_EQ(call.backend, "gloo");
  EXPECT_EQ(call.dtype, "Float");
  EXPECT_EQ(call.in_nelems, 1024);
  EXPECT_EQ(call.group_size, 4);
  EXPECT_EQ(call.rank, 2);
  EXPECT_EQ(call.group_ranks, "[0, 1, 2, 3]");
  EXPECT_EQ(call.seq, 7);

  const nlohmann::json document = written(*trace);
  const nlohmann::json* op = find_event(document, "record_param_comms");
  const nlohmann::json* range = find_event(document, "gloo:all_reduce");
  ASSERT_NE(op, nullptr);
  ASSERT_NE(range, nullptr);
  EXPECT_EQ((*op)["cat"], "cpu_op");
  EXPECT_EQ((*range)["cat"], "user_annotation");
  EXPECT_LE((*op)["ts"].get<double>(), (*range)["ts"].get<double>());
  EXPECT_GE((*op)["ts"].get<double>() + (*op)["dur"].get<double>(),
            (*range)["ts"].get<double>() + (*range)["dur"].get<double>());
  const nlohmann::json& args = (*op)["args"];
  EXPECT_EQ(args["Collective name"], "allreduce");
  EXPECT_EQ(args["dtype"], "Float");
  EXPECT_EQ(args["In msg nelems"], 1024);
  EXPECT_EQ(args["Out msg nelems"], 1024);
  EXPECT_EQ(args["In split size"], "[]");
  EXPECT_EQ(args["Group size"], 4);
  EXPECT_EQ(args["Process Group Name"], "0");
  EXPECT_EQ(args["Process Group Description"], "default_pg");
  EXPECT_EQ(args["Process Group Ranks"], "[0, 1, 2, 3]");
  EXPECT_EQ(args["Rank"], 2);
  EXPECT_EQ(args["Seq"], 7);
  EXPECT_FALSE(args.contains("Dst Rank"));
}

TEST(CollectiveTest, PointToPointCallsNameTheirPeerAndNamesCannotShiftTheFields) {
  const auto trace = record_one_step([] {
    dlprof::Collective send{"send", "gloo", "Float", 8, 0, 2, 0};
    send.peer = 1;
    send.group_desc = "a\x1f" "desc";
    { dlprof::ScopedCollective recorded(send); }
    dlprof::Collective recv{"recv", "gloo", "Float", 0, 8, 2, 0};
    recv.peer = 1;
    { dlprof::ScopedCollective recorded(recv); }
  });
  ASSERT_NE(trace, nullptr);
  ASSERT_EQ(trace->collectives.size(), 2u);
  EXPECT_EQ(trace->collectives[0].group_desc, "a desc");
  EXPECT_EQ(trace->collectives[0].peer, 1);
  EXPECT_EQ(trace->collectives[0].group_ranks, "[0, 1]");
  const nlohmann::json document = written(*trace);
  std::vector<nlohmann::json> ops;
  for (const nlohmann::json& event : document["traceEvents"])
    if (event.value("name", "") == "record_param_comms") ops.push_back(event["args"]);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0]["Dst Rank"], 1);
  EXPECT_EQ(ops[1]["Src Rank"], 1);
  EXPECT_NE(find_event(document, "gloo:send"), nullptr);
  EXPECT_NE(find_event(document, "gloo:recv"), nullptr);
}

TEST(CollectiveTest, NothingIsRecordedOutsideAWindow) {
  dlprof::Collective call{"barrier", "gloo", "Float", 0, 0, 2, 0};
  { dlprof::ScopedCollective idle(call); }
  const auto trace = record_one_step([] {});
  ASSERT_NE(trace, nullptr);
  EXPECT_TRUE(trace->collectives.empty());
}

TEST(CollectiveTest, RegisteredProcessGroupsAreInDistributedInfo) {
  dlprof::ProcessGroupInfo group;
  group.name = "0";
  group.size = 2;
  group.ranks = {0, 1};
  dlprof::register_process_group(group);
  group.name = "1";
  group.desc = "undefined";
  group.backend_config = "cuda:nccl";
  group.size = 1;
  group.ranks = {1};
  dlprof::register_process_group(group);
  dlprof::register_nccl_version("2.21.5");
  const auto trace = record_one_step([] {});
  ASSERT_NE(trace, nullptr);
  const nlohmann::json document = written(*trace);
  const nlohmann::json& info = document["distributedInfo"];
  EXPECT_EQ(info["backend"], "gloo");
  EXPECT_EQ(info["pg_count"], 2);
  ASSERT_EQ(info["pg_config"].size(), 2u);
  EXPECT_EQ(info["pg_config"][0]["pg_name"], "0");
  EXPECT_EQ(info["pg_config"][0]["backend_config"], "cpu:gloo");
  EXPECT_EQ(info["pg_config"][0]["pg_size"], 2);
  EXPECT_THAT(info["pg_config"][0]["ranks"].get<std::vector<int>>(), ElementsAre(0, 1));
  EXPECT_EQ(info["pg_config"][1]["backend_config"], "cuda:nccl");
  EXPECT_EQ(info["nccl_version"], "2.21.5");
  // HTA finds the rank with `"rank":\s+(\d+)` on the first line that has it: still one line.
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(*trace, out, "t");
  const std::string text(out.data(), out.size());
  const std::size_t line = text.find("\"distributedInfo\"");
  ASSERT_NE(line, std::string::npos);
  EXPECT_NE(text.substr(line, text.find('\n', line) - line).find("\"nccl_version\""), std::string::npos);
  dlprof::detail::process_group_registry().groups.clear();
  dlprof::detail::process_group_registry().nccl_version.clear();
}

}  // namespace
