// LibTorch's operators recorded by the observer of torch.hpp: names, nesting, forward/backward
// links and when the observer is installed.
#include <dlprof/profiler.hpp>
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

using testing::Contains;
using testing::IsSupersetOf;

static_assert(DLPROF_HAS_TORCH, "this test checks a program linked with dlprof::torch");

/// A matmul, a sum and its backward: the smallest step with numbered ops and autograd nodes.
void tiny_step() {
  torch::manual_seed(0);
  auto a = torch::randn({4, 8}, torch::requires_grad());
  auto b = torch::randn({8, 8});
  auto loss = torch::mm(a, b).sum();
  loss.backward();
}

nlohmann::json write(const dlprof::Trace& trace) {
  fmt::memory_buffer out;
  dlprof::write_chrome_trace(trace, out, "torch.json");
  return nlohmann::json::parse(std::string_view(out.data(), out.size()));
}

std::vector<std::string> op_names(const nlohmann::json& trace) {
  std::vector<std::string> names;
  for (const auto& event : trace["traceEvents"])
    if (event.value("cat", "") == "cpu_op") names.push_back(event["name"]);
  return names;
}

TEST(TorchTest, EveryOpOfAStepIsACpuOpSliceInsideTheRangeAroundIt) {
  dlprof::Profiler profiler;
  profiler.start();
  {
    DLPROF_RANGE("train_step");
    tiny_step();
  }
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  EXPECT_THAT(op_names(trace),
              IsSupersetOf({"aten::randn", "aten::mm", "aten::sum", "aten::ones_like",
                            "autograd::engine::evaluate_function: MmBackward0", "MmBackward0",
                            "autograd::engine::evaluate_function: SumBackward0", "SumBackward0"}));
  double step_start = 0, step_end = 0;
  for (const auto& event : trace["traceEvents"])
    if (event.value("name", "") == "train_step") {
      step_start = event["ts"];
      step_end = step_start + event["dur"].get<double>();
    }
  int forward_mms = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event.value("cat", "") != "cpu_op") continue;
    EXPECT_GT(event["args"]["External id"].get<int>(), 0);
    if (event["name"] == "aten::mm" && event["args"].contains("Sequence number")) {  // the forward one
      ++forward_mms;
      EXPECT_GE(event["ts"].get<double>(), step_start);
      EXPECT_LE(event["ts"].get<double>() + event["dur"].get<double>(), step_end);
    }
  }
  EXPECT_EQ(forward_mms, 1);
}

TEST(TorchTest, BackwardNodesLinkToTheirForwardOpsAndWhatRunsInsideThemIsBackward) {
  dlprof::Profiler profiler;
  profiler.start();
  tiny_step();
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  const nlohmann::json json = write(trace);

  std::map<std::string, std::vector<const dlprof::TraceEvent*>> by_name;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Op) by_name[std::string(trace.name_of(event))].push_back(&event);
  ASSERT_EQ(by_name["MmBackward0"].size(), 1u);
  const dlprof::TraceEvent& mm_backward = *by_name["MmBackward0"][0];
  EXPECT_EQ(mm_backward.category, dlprof::Category::Backward);
  ASSERT_GE(mm_backward.sequence_number, 0);
  // The forward aten::mm carries the node's sequence number; the aten::mm run by the node is backward.
  const dlprof::TraceEvent* forward_mm = nullptr;
  int backward_mms = 0;
  for (const dlprof::TraceEvent* mm : by_name["aten::mm"]) {
    if (mm->category == dlprof::Category::Backward) {
      ++backward_mms;
      EXPECT_GE(mm->start_ns, mm_backward.start_ns);
      EXPECT_LE(mm->end_ns, mm_backward.end_ns);
    } else if (mm->sequence_number == mm_backward.sequence_number) {
      forward_mm = mm;
    }
  }
  EXPECT_EQ(backward_mms, 1);  // a does not need the gradient of b: one mm in MmBackward0
  ASSERT_NE(forward_mm, nullptr);
  EXPECT_EQ(forward_mm->forward_thread_id, mm_backward.forward_thread_id);

  // In the file: one fwdbwd pair per numbered node, from aten::mm to MmBackward0.
  std::map<int, std::vector<nlohmann::json>> flows;
  for (const auto& event : json["traceEvents"])
    if (event.value("cat", "") == "fwdbwd") flows[event["id"].get<int>()].push_back(event);
  bool mm_linked = false;
  for (const auto& [id, pair] : flows) {
    ASSERT_EQ(pair.size(), 2u) << id;
    EXPECT_EQ(pair[0]["ph"], "s");
    EXPECT_EQ(pair[1]["ph"], "f");
    EXPECT_EQ(pair[1]["bp"], "e");
    const std::int64_t forward_ts_ns = forward_mm->start_ns - static_cast<std::int64_t>(json["baseTimeNanoseconds"].get<double>());
    if (std::abs(pair[0]["ts"].get<double>() * 1000 - static_cast<double>(forward_ts_ns)) < 1.5) mm_linked = true;
  }
  EXPECT_TRUE(mm_linked);
  EXPECT_GE(flows.size(), 2u);  // MmBackward0 and SumBackward0 at least
}

TEST(TorchTest, RecordShapesGivesInputDimsAndTypesAsTorchWritesThem) {
  static_assert(dlprof::detail::TorchOpObserver::kCanReadInputs, "this file is built with NDEBUG");
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  profiler.start();
  tiny_step();
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  EXPECT_EQ(trace["record_shapes"], 1);
  int forward_mms = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event.value("name", "") != "aten::mm" || !event["args"].contains("Sequence number")) continue;
    ++forward_mms;
    EXPECT_EQ(event["args"]["Input Dims"], nlohmann::json::parse("[[4, 8], [8, 8]]"));
    EXPECT_EQ(event["args"]["Input Strides"], nlohmann::json::parse("[[8, 1], [8, 1]]"));
    EXPECT_EQ(event["args"]["Input type"], nlohmann::json::parse(R"(["float", "float"])"));
  }
  EXPECT_EQ(forward_mms, 1);
  for (const auto& event : trace["traceEvents"])
    if (event.value("name", "") == "aten::sum" && event["args"].contains("Sequence number")) {
      EXPECT_EQ(event["args"]["Input Dims"], nlohmann::json::parse("[[4, 8], []]"));  // the tensor and its dtype option
      EXPECT_EQ(event["args"]["Input Strides"], nlohmann::json::parse("[[8, 1], []]"));
      EXPECT_EQ(event["args"]["Concrete Inputs"], nlohmann::json::parse(R"(["", ""])"));
    }
}

// A view's strides are its own, not its shape's: an expanded index (stride 0) and a transposed
// matrix are written as torch.profiler writes them, told apart from the same shapes laid out
// densely by the input text cache, and read by the byte count (an expanded input counts once).
TEST(TorchTest, RecordShapesGivesEachInputsStrides) {
  static_assert(dlprof::detail::TorchOpObserver::kCanReadInputs, "this file is built with NDEBUG");
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  const torch::Tensor a = torch::ones({4, 8}), b = torch::ones({6, 8});
  const torch::Tensor dense_b = b.t().contiguous();
  profiler.start();
  torch::mm(a, b.t());
  torch::mm(a, dense_b);
  torch::ones({4, 1}).expand({4, 8}).add(a);
  const torch::Tensor sparse = torch::eye(3).to_sparse();
  torch::neg(sparse);
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  std::vector<nlohmann::json> mm_strides, add_strides, neg_strides;
  for (const auto& event : trace["traceEvents"]) {
    const std::string name = event.value("name", "");
    if (!event.contains("args") || !event["args"].contains("Input Strides")) continue;
    if (name == "aten::mm") mm_strides.push_back(event["args"]["Input Strides"]);
    if (name == "aten::add") add_strides.push_back(event["args"]["Input Strides"]);
    if (name == "aten::neg") neg_strides.push_back(event["args"]["Input Strides"]);
  }
  EXPECT_THAT(mm_strides, testing::ElementsAre(nlohmann::json::parse("[[8, 1], [1, 8]]"),
                                              nlohmann::json::parse("[[8, 1], [6, 1]]")));
  ASSERT_FALSE(add_strides.empty());
  EXPECT_EQ(add_strides.front(), nlohmann::json::parse("[[1, 0], [8, 1], []]"));
  ASSERT_FALSE(neg_strides.empty());
  EXPECT_EQ(neg_strides.front(), nlohmann::json::parse("[[]]")) << "a sparse tensor has no strides";
}

}  // namespace

namespace dlprof_test {
dlprof::detail::OpObserverAccessor debug_file_observer();
std::size_t ops_with_inputs_recorded_from_debug_file();
}  // namespace dlprof_test

namespace {

// tests/torch_debug_tu.cpp is built without NDEBUG, this file with it.
TEST(TorchTest, DebugAndReleaseFilesEachHaveTheirObserverAndTheReleaseOneIsThePrograms) {
  EXPECT_NE(dlprof_test::debug_file_observer(), &dlprof::detail::torch_op_observer);
  EXPECT_EQ(dlprof::detail::g_op_observer.load(), &dlprof::detail::torch_op_observer);
  EXPECT_GT(dlprof_test::ops_with_inputs_recorded_from_debug_file(), 0u);
}

TEST(TorchTest, RecordShapesGivesTheValuesOfScalarAndListInputs) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  const auto images = torch::randn({2, 3, 8, 8});
  const auto weight = torch::randn({8, 3, 3, 3});
  profiler.start();
  // Lists as passed: C++'s default dilation is the one-element list {1} (torch broadcasts it).
  torch::conv2d(images, weight, {}, /*stride=*/{2, 2}, /*padding=*/{1, 1});
  torch::dropout(images, /*p=*/0.25, /*train=*/false);
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  int conv2d = 0, dropout = 0;
  for (const auto& event : trace["traceEvents"]) {
    const nlohmann::json& args = event.value("args", nlohmann::json::object());
    if (event.value("name", "") == "aten::conv2d") {
      ++conv2d;
      EXPECT_EQ(args["Input Dims"], nlohmann::json::parse("[[2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], []]"));
      EXPECT_EQ(args["Input type"],
                nlohmann::json::parse(R"(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])"));
      EXPECT_EQ(args["Concrete Inputs"], nlohmann::json::parse(R"(["", "", "", "[2, 2]", "[1, 1]", "[1]", "1"])"));
    }
    if (event.value("name", "") == "aten::dropout") {
      ++dropout;
      EXPECT_EQ(args["Concrete Inputs"], nlohmann::json::parse(R"(["", "0.25", "False"])"));
      EXPECT_EQ(args["Input type"], nlohmann::json::parse(R"(["float", "Scalar", "Scalar"])"));
    }
  }
  EXPECT_EQ(conv2d, 1);
  EXPECT_EQ(dropout, 1);
}

// Input texts come from a per-thread cache keyed by the raw inputs: repeated calls reuse them,
// and any difference in shape, dtype or value gives new ones.
TEST(TorchTest, RepeatedAndChangedInputsGiveTheirOwnTexts) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  const auto x = torch::randn({2, 3}), wide = torch::randn({2, 5}), as_double = torch::randn({2, 3}, torch::kFloat64);
  profiler.start();
  for (int i = 0; i < 3; ++i) torch::dropout(x, 0.25, false);
  torch::dropout(x, 0.5, false);
  torch::dropout(wide, 0.25, false);
  torch::dropout(as_double, 0.25, false);
  torch::dropout(x, 0.25, false);
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  std::vector<std::string> texts;
  for (const auto& event : trace["traceEvents"])
    if (event.value("name", "") == "aten::dropout")
      texts.push_back(event["args"]["Input Dims"].dump() + " " + event["args"]["Input type"].dump() + " " +
                      event["args"]["Concrete Inputs"].dump());
  const std::string first = R"([[2,3],[],[]] ["float","Scalar","Scalar"] ["","0.25","False"])";
  EXPECT_THAT(texts, testing::ElementsAre(first, first, first, R"([[2,3],[],[]] ["float","Scalar","Scalar"] ["","0.5","False"])",
                                          R"([[2,5],[],[]] ["float","Scalar","Scalar"] ["","0.25","False"])",
                                          R"([[2,3],[],[]] ["double","Scalar","Scalar"] ["","0.25","False"])", first));
}

// List inputs are keyed by their element type and values: lists that differ in one value, in
// their length or in their element type each get their own texts.
TEST(TorchTest, ListInputsThatDifferInAnyValueGiveTheirOwnTexts) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.record_shapes(true));
  const auto x = torch::randn({2, 3, 4, 4});
  profiler.start();
  for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{0}, {1}, {0}, {0, 1}}) torch::sum(x, dims);
  for (const double scale : {2.0, 3.0, 2.0})
    at::upsample_nearest2d(x, c10::nullopt, std::vector<double>{scale, scale});
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  std::vector<std::string> sums, upsamples;
  for (const auto& event : trace["traceEvents"]) {
    const nlohmann::json& args = event.value("args", nlohmann::json::object());
    if (!args.contains("Concrete Inputs")) continue;
    const std::string texts = args["Input type"].dump() + " " + args["Concrete Inputs"].dump();
    if (event.value("name", "") == "aten::sum") sums.push_back(texts);
    if (event.value("name", "") == "aten::upsample_nearest2d") upsamples.push_back(texts);
  }
  const std::string sum_type = R"(["float","ScalarList","Scalar",""] )";
  EXPECT_THAT(sums, testing::ElementsAre(sum_type + R"(["","[0]","False",""])", sum_type + R"(["","[1]","False",""])",
                                         sum_type + R"(["","[0]","False",""])", sum_type + R"(["","[0, 1]","False",""])"));
  // The scale factors (a double list), then the overload it calls with the output size (an int
  // list) and each scale (doubles).
  const std::string by_scale = R"(["float","","ScalarList"] )", by_size = R"(["float","ScalarList","Scalar","Scalar"] )";
  EXPECT_THAT(upsamples, testing::ElementsAre(by_scale + R"(["","","[2, 2]"])", by_size + R"(["","[8, 8]","2","2"])",
                                              by_scale + R"(["","","[3, 3]"])", by_size + R"(["","[12, 12]","3","3"])",
                                              by_scale + R"(["","","[2, 2]"])", by_size + R"(["","[8, 8]","2","2"])"));
}

/// The input text cache of torch.hpp, looked up from a RecordFunction callback of the test's own
/// on every aten::empty, with a format that counts its calls and hands out a new id each time.
struct CacheProbe {
  static inline dlprof::detail::InputTextCache* cache = nullptr;
  static inline dlprof::detail::NameId formats = 0;
  static inline std::vector<dlprof::detail::NameId> ids;  // what each lookup gave

  static std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
    if (std::string_view(fn.name()) != "aten::empty") return nullptr;
    dlprof::detail::NameId dims = 0;
    std::int64_t types_and_concrete = 0;
    cache->texts(fn, dims, types_and_concrete,
                 [](const at::RecordFunction&, dlprof::detail::NameId& id, std::int64_t&) { id = ++formats; });
    ids.push_back(dims);
    return nullptr;
  }

  /// Probes `cache` while it lives, counting formats and ids from none.
  class Installed {
   public:
    explicit Installed(dlprof::detail::InputTextCache& probed) {
      cache = &probed;
      formats = 0;
      ids.clear();
      handle_ = at::addGlobalCallback(
          at::RecordFunctionCallback(&CacheProbe::on_enter).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
    }
    ~Installed() { at::removeCallback(handle_); }
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;

   private:
    at::CallbackHandle handle_;
  };
};

// The cache formats an op's input texts once per distinct inputs: inputs that repeat hit, however
// many other inputs there are (a set-associative table evicted them) and however long their key
// (a conv3d's backward), and each hit gives back the texts of its own inputs. Past kMaxEntries
// distinct inputs it starts over rather than grow without bound.
TEST(TorchTest, InputTextsAreFormattedOncePerDistinctInputs) {
  static_assert(dlprof::detail::TorchOpObserver::kCanReadInputs, "this file is built with NDEBUG");
  dlprof::detail::InputTextCache cache;
  const CacheProbe::Installed probe(cache);
  constexpr std::int64_t kDistinct = 1000;
  const auto sizes = [](std::int64_t from, std::int64_t to) {
    for (std::int64_t size = from; size < to; ++size) at::empty({size});
  };
  sizes(0, kDistinct);
  const std::vector<dlprof::detail::NameId> first = CacheProbe::ids;
  CacheProbe::ids.clear();
  sizes(0, kDistinct);
  EXPECT_EQ(CacheProbe::formats, kDistinct);
  EXPECT_EQ(CacheProbe::ids, first);

  const std::vector<std::int64_t> many_dims(100, 1);  // a key of over 100 words
  at::empty(many_dims);
  at::empty(many_dims);
  EXPECT_EQ(CacheProbe::formats, kDistinct + 1);

  // Up to kMaxEntries, then one more: the cache starts over with it and keeps what comes next.
  const auto max_entries = static_cast<std::int64_t>(dlprof::detail::InputTextCache::kMaxEntries);
  sizes(kDistinct, max_entries - 1);
  EXPECT_EQ(CacheProbe::formats, max_entries);
  sizes(0, 1);  // still in
  EXPECT_EQ(CacheProbe::formats, max_entries);
  sizes(max_entries, max_entries + 1);  // one too many: starts over
  sizes(0, 1);                          // gone, formatted again
  sizes(0, 1);                          // and kept
  EXPECT_EQ(CacheProbe::formats, max_entries + 2);
}

// The cache predicts each lookup from the order of the lookups before it: whatever the order,
// and however it changes, a lookup gets the texts of its own inputs. Each size below is a key;
// the order repeats (predictions hold), then breaks off in the middle, repeats one key, comes
// back to an earlier point and skips ahead.
TEST(TorchTest, InputTextsFollowTheirInputsWhenTheOrderOfLookupsChanges) {
  dlprof::detail::InputTextCache cache;
  const std::vector<std::int64_t> order = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 4, 4, 4, 2, 3, 1, 4, 3, 2, 1, 2, 3, 4};
  {
    const CacheProbe::Installed probe(cache);
    for (const std::int64_t size : order) at::empty({size});
  }

  ASSERT_EQ(CacheProbe::ids.size(), order.size());
  std::map<std::int64_t, dlprof::detail::NameId> id_of_size;
  std::set<dlprof::detail::NameId> distinct_ids;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto [first, inserted] = id_of_size.emplace(order[i], CacheProbe::ids[i]);
    if (inserted) distinct_ids.insert(CacheProbe::ids[i]);
    EXPECT_EQ(CacheProbe::ids[i], first->second) << "lookup " << i << " of size " << order[i];
  }
  EXPECT_EQ(distinct_ids.size(), id_of_size.size());
  EXPECT_EQ(CacheProbe::formats, static_cast<dlprof::detail::NameId>(id_of_size.size()));
}

/// The names recorded for user scopes named `texts` in turn, each written into one buffer (so
/// LibTorch hands every name at the same address), that contain `marker`.
std::vector<std::string> scopes_named_at_one_address(std::initializer_list<const char*> texts, std::string_view marker) {
  char name[96] = {};
  dlprof::Profiler profiler;
  profiler.start();
  for (const char* text : texts) {
    std::snprintf(name, sizeof(name), "%s", text);
    RECORD_USER_SCOPE(name);
  }
  profiler.stop();
  const nlohmann::json trace = write(*profiler.last_trace());
  std::vector<std::string> scopes;
  for (const auto& event : trace["traceEvents"])
    if (event.value("name", "").find(marker) != std::string::npos) scopes.push_back(event["name"]);
  return scopes;
}

TEST(TorchTest, ANameRewrittenAtTheSameAddressIsRecordedUnderItsNewText) {
  // The observer caches names by the address LibTorch hands them at; a name built per call (a
  // user scope's here, autograd's "evaluate_function: ..." in training) can come back at one
  // address with another text.
  EXPECT_THAT(scopes_named_at_one_address({"scope_a", "scope_b", "scope_a", "scope_c"}, "scope_"),
              testing::ElementsAre("scope_a", "scope_b", "scope_a", "scope_c"));
}

TEST(TorchTest, ALongNameRewrittenAtTheSameAddressIsRecordedUnderItsNewText) {
  // A cached name's text is kept in its entry when short; longer ones are compared with the
  // interned copy.
  constexpr const char* kOne = "long_scope_name_longer_than_an_entry_holds_one";
  constexpr const char* kTwo = "long_scope_name_longer_than_an_entry_holds_two";
  EXPECT_THAT(scopes_named_at_one_address({kOne, kTwo, kOne, kOne}, "long_scope_"),
              testing::ElementsAre(kOne, kTwo, kOne, kOne));
}

TEST(TorchTest, NamesOfOneLengthAndEndingAtOneAddressKeepTheirOwnTexts) {
  // Names that miss at their address are looked up by their length and last bytes: names that
  // share both must still be told apart by their whole text.
  EXPECT_THAT(scopes_named_at_one_address(
                  {"first_scope_ending", "other_scope_ending", "first_scope_ending", "other_scope_ending"}, "_scope_ending"),
              testing::ElementsAre("first_scope_ending", "other_scope_ending", "first_scope_ending", "other_scope_ending"));
}

TEST(TorchTest, WithoutRecordShapesOpsCarryNoInputs) {
  dlprof::Profiler profiler;
  profiler.start();
  tiny_step();
  profiler.stop();
  for (const dlprof::TraceEvent& event : profiler.last_trace()->events)
    EXPECT_EQ(event.inputs, dlprof::TraceEvent::kNoInputs);
}

TEST(TorchTest, TheObserverIsInstalledOnlyWhileTheScheduleWarmsUpOrRecords) {
  auto& observer = dlprof::detail::TorchOpObserver::instance();
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/1, /*repeat=*/1)));
  EXPECT_FALSE(observer.installed());
  profiler.start();
  std::vector<bool> installed;
  for (int step = 0; step < 4; ++step) {
    installed.push_back(observer.installed());
    tiny_step();
    profiler.step();
  }
  installed.push_back(observer.installed());
  profiler.stop();
  // Step 0 waits, 1 warms up, 2 records, 3 and later are idle.
  EXPECT_THAT(installed, testing::ElementsAre(false, true, true, false, false));
  EXPECT_FALSE(observer.installed());
  EXPECT_FALSE(at::hasGlobalCallbacks()) << "an idle step runs no dlprof callback";
  const auto trace = profiler.last_trace();
  ASSERT_NE(trace, nullptr);
  std::size_t ops = 0;
  for (const dlprof::TraceEvent& event : trace->events) ops += event.kind == dlprof::EventKind::Op;
  EXPECT_GT(ops, 10u);  // step 2's ops, and none of the warm-up's
}

TEST(TorchTest, WithFlopsOpsCarryTheirFlopsAndTheSummaryCountsEachOpOnce) {
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.with_flops(true));
  const auto input = torch::randn({4, 8});
  const auto weight = torch::randn({16, 8}), bias = torch::randn({16});
  profiler.start();
  torch::mm(input, torch::randn({8, 8}));  // 2·4·8·8 = 512
  torch::linear(input, weight, bias);        // aten::linear around aten::addmm: 2·4·8·16 = 1024
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  const nlohmann::json json = write(trace);
  EXPECT_EQ(json["with_flops"], 1);
  std::map<std::string, std::uint64_t> flops_by_op;
  for (const auto& event : json["traceEvents"])
    if (event.value("cat", "") == "cpu_op" && event["args"].contains("flops"))
      flops_by_op[event["name"]] += event["args"]["flops"].get<std::uint64_t>();
  EXPECT_EQ(flops_by_op["aten::mm"] + flops_by_op["aten::addmm"], 512u + 1024u);
  EXPECT_EQ(flops_by_op["aten::linear"], 1024u);
  const dlprof::KeyAverages averages(trace);
  EXPECT_EQ(averages.total_flops(), 512u + 1024u) << "aten::linear's inner product counted once";
  ASSERT_NE(averages.find("aten::linear"), nullptr);
  EXPECT_EQ(averages.find("aten::linear")->flops, 1024u);
  ASSERT_NE(averages.find("aten::addmm"), nullptr);
  EXPECT_EQ(averages.find("aten::addmm")->flops, 0u) << "part of aten::linear's";
  EXPECT_EQ(averages.find("aten::mm")->flops, 512u);
  EXPECT_THAT(averages.table(), testing::HasSubstr("FLOPs: 1.536K in the window"));
}

// With profile_memory, an annotated optimizer says after each step what its memory holds: its
// parameters, their gradients and its state (SGD's momentum buffers), each tensor's storage once.
TEST(TorchTest, AnAnnotatedOptimizerTagsItsParametersGradientsAndState) {
  torch::nn::Linear layer(4, 3);
  torch::optim::SGD sgd(layer->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto optimizer = dlprof::annotate(sgd);
  const auto train_step = [&] {
    optimizer.zero_grad();
    layer->forward(torch::ones({2, 4})).sum().backward();
    optimizer.step();
  };
  train_step();  // the momentum buffers exist from here on
  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.profile_memory(true));
  profiler.start();
  train_step();
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  std::map<const void*, dlprof::MemoryCategory> tagged;
  for (const dlprof::MemoryTag& tag : trace.memory_tags) {
    tagged[reinterpret_cast<const void*>(tag.address)] = tag.category;
    EXPECT_EQ(tag.device_type, dlprof::MemoryDeviceType::CPU);
    EXPECT_EQ(tag.device, -1);
  }
  const auto category_of = [&](const torch::Tensor& tensor) -> std::optional<dlprof::MemoryCategory> {
    const auto found = tagged.find(tensor.storage().data_ptr().get());
    if (found == tagged.end()) return std::nullopt;
    return found->second;
  };
  EXPECT_EQ(category_of(layer->weight), dlprof::MemoryCategory::Parameter);
  EXPECT_EQ(category_of(layer->bias), dlprof::MemoryCategory::Parameter);
  EXPECT_EQ(category_of(layer->weight.grad()), dlprof::MemoryCategory::Gradient);
  EXPECT_EQ(category_of(layer->bias.grad()), dlprof::MemoryCategory::Gradient);
  std::size_t momentum_buffers = 0;
  for (const auto& [key, state] : sgd.state()) {
    EXPECT_EQ(category_of(static_cast<const torch::optim::SGDParamState&>(*state).momentum_buffer()),
              dlprof::MemoryCategory::OptimizerState);
    ++momentum_buffers;
  }
  EXPECT_EQ(momentum_buffers, 2u);
  EXPECT_EQ(trace.memory_tags.size(), 6u);
  const auto tag_time = trace.memory_tags.front().time_ns;
  for (const dlprof::TraceEvent& event : trace.events)
    if (trace.name_of(event) == "Optimizer.step#SGD.step") {
      EXPECT_GE(tag_time, event.start_ns);
      EXPECT_LE(trace.memory_tags.back().time_ns, event.end_ns) << "tagged inside the step's range";
    }

  // Without profile_memory, nothing is tagged.
  dlprof::Profiler without_memory;
  without_memory.start();
  train_step();
  without_memory.stop();
  EXPECT_TRUE(without_memory.last_trace()->memory_tags.empty());
}

// tag_memory: a tensor's storage, or any address, while a window records; nothing otherwise.
TEST(TorchTest, TagMemoryRecordsATensorsStorageWhileAWindowRecords) {
  const torch::Tensor buffer = torch::zeros({16});
  dlprof::tag_memory(buffer, dlprof::MemoryCategory::Input);  // no window: not recorded
  dlprof::Profiler profiler;
  profiler.start();
  dlprof::tag_memory(buffer.slice(0, 4, 8), dlprof::MemoryCategory::Input);  // a view: its storage
  dlprof::tag_memory(torch::Tensor(), dlprof::MemoryCategory::Input);        // undefined: nothing
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  ASSERT_EQ(trace.memory_tags.size(), 1u);
  EXPECT_EQ(trace.memory_tags[0].address, reinterpret_cast<std::uintptr_t>(buffer.data_ptr()));
  EXPECT_EQ(trace.memory_tags[0].bytes, 64);
  EXPECT_EQ(trace.memory_tags[0].category, dlprof::MemoryCategory::Input);
  const nlohmann::json json = write(trace);
  int written = 0;
  for (const auto& event : json["traceEvents"])
    if (event.value("name", "") == "[memory category]") {
      ++written;
      EXPECT_EQ(event["args"]["memory category"], "inputs");
      EXPECT_EQ(event["args"]["Bytes"], 64);
    }
  EXPECT_EQ(written, 1);
}

TEST(TorchTest, ProfileMemoryRecordsLibTorchAllocationsAndThePeak) {
  dlprof::Profiler profiler(
      dlprof::ProfilerOptions{}.profile_memory(true).schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/1, /*repeat=*/1)));
  constexpr std::int64_t kBytes = 1024 * 1024 * 4;  // 1 Mi floats
  profiler.start();
  torch::empty({1024, 1024});  // warm-up: not recorded
  profiler.step();
  const void* address = nullptr;
  {
    const torch::Tensor recorded = torch::empty({1024, 1024});
    address = recorded.data_ptr();
  }
  profiler.step();
  EXPECT_EQ(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE), nullptr)
      << "the reporter is removed when the schedule goes idle";
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  std::vector<std::int64_t> sizes;
  for (const dlprof::MemoryEvent& event : trace.memory_events)
    if (event.address == reinterpret_cast<std::uintptr_t>(address)) {
      sizes.push_back(event.bytes);
      EXPECT_EQ(event.device_type, dlprof::MemoryDeviceType::CPU);
      EXPECT_EQ(event.device, -1);
      EXPECT_GE(event.total_allocated, event.bytes > 0 ? kBytes : 0);
    }
  EXPECT_THAT(sizes, testing::ElementsAre(kBytes, -kBytes));  // one allocation, one release, the warm-up's absent
  const nlohmann::json json = write(trace);
  EXPECT_EQ(json["profile_memory"], 1);
  int memory_events = 0;
  for (const auto& event : json["traceEvents"])
    if (event.value("name", "") == "[memory]" && event["args"]["Addr"] == reinterpret_cast<std::uintptr_t>(address)) {
      ++memory_events;
      EXPECT_EQ(event["cat"], "cpu_instant_event");
      EXPECT_EQ(event["args"]["Device Type"], 0);
      EXPECT_EQ(event["args"]["Device Id"], -1);
      EXPECT_TRUE(event["args"].contains("Total Allocated"));
      EXPECT_TRUE(event["args"].contains("Total Reserved"));
    }
  EXPECT_EQ(memory_events, 2);
  const dlprof::KeyAverages averages(trace);
  ASSERT_EQ(averages.peak_memory().size(), 1u);
  EXPECT_GE(averages.peak_memory()[0].allocated_bytes, kBytes);
  EXPECT_THAT(averages.table(), testing::HasSubstr("Peak memory:  CPU "));
}

#if DLPROF_HAS_CUPTI
// On a GPU: the kernels LibTorch launches link to the op that launched them, through the External
// id each op pushes to CUPTI.
TEST(TorchCudaTest, KernelsLinkToTheInnermostOpThatLaunchedThem) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device and a LibTorch built with CUDA";
  auto a = torch::randn({256, 512}, torch::device(torch::kCUDA).requires_grad(true));
  auto b = torch::randn({512, 128}, torch::device(torch::kCUDA));
  torch::mm(a, b).sum().backward();  // first launches load modules and pick algorithms
  torch::cuda::synchronize();

  dlprof::Profiler profiler(dlprof::ProfilerOptions{}.activities({dlprof::Activity::CPU, dlprof::Activity::CUDA}));
  profiler.start();
  torch::mm(a, b).sum().backward();
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();

  std::map<std::uint64_t, std::string> op_by_external_id;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Op) op_by_external_id[event.external_id] = std::string(trace.name_of(event));
  std::vector<std::string> launching_ops;
  int kernels = 0;
  for (const dlprof::GpuEvent& event : trace.gpu_events) {
    if (event.kind != dlprof::GpuEventKind::Kernel) continue;
    ++kernels;
    ASSERT_TRUE(op_by_external_id.count(event.external_id)) << trace.names[event.name] << " links to no op";
    launching_ops.push_back(op_by_external_id[event.external_id]);
  }
  EXPECT_GE(kernels, 3);  // the forward mm, the sum, the backward mm (and fills)
  EXPECT_THAT(launching_ops, IsSupersetOf({"aten::mm", "aten::sum"}));
  for (const dlprof::ApiEvent& call : trace.api_events)
    if (trace.names[call.name] == "cudaLaunchKernel") {
      EXPECT_TRUE(op_by_external_id.count(call.external_id));
    }
}
#endif

}  // namespace
