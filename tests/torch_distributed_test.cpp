// ProfiledProcessGroup over real c10d Gloo groups: two ranks as two threads of this process,
// meeting through an in-process HashStore. Their collectives are recorded with what they moved,
// and align_clocks() recovers an offset put into one rank's clock.
#include <dlprof/profiler.hpp>
#include <dlprof/torch_distributed.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

/// Runs `body(group)` on `ranks` threads, each a rank of one Gloo group.
void on_ranks(int ranks, const std::function<void(dlprof::ProfiledProcessGroup<c10d::ProcessGroupGloo>&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      auto options = c10d::ProcessGroupGloo::Options::create();
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      dlprof::ProfiledProcessGroup group(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, ranks, options));
      body(group);
    });
  for (std::thread& thread : threads) thread.join();
}

TEST(ProfiledProcessGroupTest, AlignClocksRecoversAnOffsetPutIntoOneRanksClock) {
  constexpr std::int64_t kSkewNs = 5'000'000'000;  // rank 1's clock is 5 s ahead
  std::map<int, dlprof::ClockOffset> offsets;
  std::mutex mutex;
  on_ranks(2, [&](dlprof::ProfiledProcessGroup<c10d::ProcessGroupGloo>& group) {
    const int rank = group.rank();
    const auto clock = [rank] {
      return dlprof::detail::clock_ns(CLOCK_REALTIME) + (rank == 1 ? kSkewNs : 0);
    };
    const dlprof::ClockOffset offset = group.align_clocks(/*round_trips=*/16, /*reference=*/0, clock);
    const std::lock_guard<std::mutex> lock(mutex);
    offsets[rank] = offset;
  });
  ASSERT_EQ(offsets.size(), 2u);
  EXPECT_EQ(offsets[0].offset_ns, 0);
  EXPECT_EQ(offsets[0].uncertainty_ns, 0);
  const dlprof::ClockOffset& skewed = offsets[1];
  EXPECT_EQ(skewed.reference_rank, 0);
  EXPECT_EQ(skewed.round_trips, 16);
  EXPECT_GT(skewed.uncertainty_ns, 0);
  EXPECT_LT(skewed.uncertainty_ns, 50'000'000) << "a round trip over loopback takes well under 100 ms";
  EXPECT_LE(std::llabs(skewed.offset_ns + kSkewNs), skewed.uncertainty_ns)
      << "offset " << skewed.offset_ns << " ns, uncertainty " << skewed.uncertainty_ns << " ns";
  // The last estimate is what the traces written from now on carry.
  EXPECT_TRUE(dlprof::distributed_info_of_this_process().clock_offset.has_value());
}

TEST(ProfiledProcessGroupTest, EveryKindOfCallIsRecordedWithWhatItMoved) {
  std::shared_ptr<const dlprof::Trace> trace;
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.on_trace_ready(
      [&](const dlprof::Trace& t) { trace = std::make_shared<dlprof::Trace>(t); }));
  profiler.start();
  on_ranks(2, [](dlprof::ProfiledProcessGroup<c10d::ProcessGroupGloo>& group) {
    std::vector<at::Tensor> gradients{torch::ones({6})};
    group.allreduce(gradients);
    EXPECT_TRUE(torch::equal(gradients[0], torch::full({6}, 2.0f)));
    std::vector<at::Tensor> weights{torch::arange(4, torch::kFloat64)};
    group.broadcast(weights);
    std::vector<at::Tensor> mine{torch::ones({3})};
    std::vector<std::vector<at::Tensor>> all{{torch::zeros({3}), torch::zeros({3})}};
    group.allgather(all, mine);
    group.barrier();
    std::vector<at::Tensor> message{torch::zeros({5})};
    if (group.rank() == 0) group.send(message, 1);
    else group.recv(message, 0);
  });
  profiler.stop();
  ASSERT_NE(trace, nullptr);
  std::map<std::string, std::vector<dlprof::CollectiveCall>> by_name;
  for (const dlprof::CollectiveCall& call : trace->collectives) by_name[call.name].push_back(call);
  ASSERT_EQ(by_name["allreduce"].size(), 2u);
  for (const auto& call : by_name["allreduce"]) {
    EXPECT_EQ(call.in_nelems, 6);
    EXPECT_EQ(call.out_nelems, 6);
    EXPECT_EQ(call.dtype, "Float");
    EXPECT_EQ(call.backend, "gloo");
    EXPECT_EQ(call.group_size, 2);
    EXPECT_EQ(call.group_ranks, "[0, 1]");
  }
  EXPECT_NE(by_name["allreduce"][0].rank, by_name["allreduce"][1].rank);
  EXPECT_EQ(by_name["allreduce"][0].seq, by_name["allreduce"][1].seq) << "one call of the group: one Seq on every rank";
  ASSERT_EQ(by_name["broadcast"].size(), 2u);
  EXPECT_EQ(by_name["broadcast"][0].dtype, "Double");
  ASSERT_EQ(by_name["allgather"].size(), 2u);
  EXPECT_EQ(by_name["allgather"][0].in_nelems, 3);
  EXPECT_EQ(by_name["allgather"][0].out_nelems, 6);
  EXPECT_EQ(by_name["barrier"].size(), 2u);
  ASSERT_EQ(by_name["send"].size(), 1u);
  EXPECT_EQ(by_name["send"][0].peer, 1);
  EXPECT_EQ(by_name["send"][0].in_nelems, 5);
  ASSERT_EQ(by_name["recv"].size(), 1u);
  EXPECT_EQ(by_name["recv"][0].peer, 0);
  EXPECT_EQ(by_name["recv"][0].out_nelems, 5);
  // c10d records its own "gloo:all_reduce" op for each call, as torch.profiler shows it; the
  // wrapper adds no range of that name, which TensorBoard would count as a second call.
  std::size_t ops = 0, ranges = 0;
  for (const dlprof::TraceEvent& event : trace->events)
    if (trace->name_of(event) == "gloo:all_reduce") ++(event.kind == dlprof::EventKind::Range ? ranges : ops);
  EXPECT_EQ(ranges, 0u);
  EXPECT_EQ(ops, 2u);
  const auto registered = dlprof::distributed_info_of_this_process();
  ASSERT_FALSE(registered.groups.empty());
  EXPECT_EQ(registered.groups[0].backend_config, "cpu:gloo");
  EXPECT_EQ(registered.backend, "gloo");
}

}  // namespace
