// Module ranges of torch_modules.hpp: annotate_modules names every module of a model by its path
// and makes each Sequential element's call a range; DLPROF_MODULE(this) gives a custom module's
// forward its range. The model computes, trains and serialises exactly as before.
#include <dlprof/profiler.hpp>
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "../examples/mnist_cnn.hpp"

// Allocations of the calling thread while counting: an annotated call must allocate nothing
// LibTorch's own call does not.
namespace {
thread_local bool t_counting = false;
thread_local std::size_t t_allocations = 0;
}  // namespace

// libstdc++'s operator delete frees with std::free, and new[] and the nothrow forms call this one.
// Not inlined: g++ 12 at -O3 would see malloc's pointer reach operator delete and warn of a
// mismatch (-Wmismatched-new-delete) that is not one.
[[gnu::noinline]] void* operator new(std::size_t size) {
  if (t_counting) ++t_allocations;
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}

namespace {

using testing::ElementsAre;
using testing::ElementsAreArray;
using testing::IsEmpty;

static_assert(DLPROF_HAS_TORCH, "this test checks a program linked with dlprof::torch");

/// The example's CNN with the range of its own forward: the root of the ranges.
struct ProfiledCnnImpl : dlprof_examples::MnistCnnImpl {
  torch::Tensor forward(torch::Tensor images) {
    DLPROF_MODULE(this);
    return MnistCnnImpl::forward(images);
  }
};
TORCH_MODULE(ProfiledCnn);

/// A forward of two arguments, and one with a default argument, for Sequential.
struct AddImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor a, torch::Tensor b) { return a + b; }
};
TORCH_MODULE(Add);

struct ShiftImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x, double shift = 1.5) { return x + shift; }

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(1.5)})
};
TORCH_MODULE(Shift);

/// A custom element that also opens its own range.
struct ScaleImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) {
    DLPROF_MODULE(this);
    return x * 2;
  }
};
TORCH_MODULE(Scale);

/// One recorded range and the ranges around it.
struct Range {
  std::string name;
  std::int64_t start_ns;
  std::int64_t end_ns;
  dlprof::Category category;
  bool contains(const Range& inner) const { return start_ns <= inner.start_ns && inner.end_ns <= end_ns; }
};

struct Recorded {
  std::vector<Range> ranges;  // in start order
  std::vector<Range> ops;

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const Range& range : ranges) out.push_back(range.name);
    return out;
  }
  const Range& range(const std::string& name) const {
    for (const Range& range : ranges)
      if (range.name == name) return range;
    ADD_FAILURE() << "no range " << name;
    return ranges.at(0);
  }
  /// The innermost range around `inner` other than itself ("" at top level).
  std::string parent_of(const Range& inner) const {
    const Range* parent = nullptr;
    for (const Range& range : ranges)
      if (&range != &inner && range.contains(inner) && (parent == nullptr || parent->contains(range))) parent = &range;
    return parent != nullptr ? parent->name : "";
  }
};

Recorded recorded(const dlprof::Trace& trace) {
  Recorded out;
  for (const dlprof::TraceEvent& event : trace.events) {
    Range range{std::string(trace.name_of(event)), event.start_ns, event.end_ns, event.category};
    if (event.kind == dlprof::EventKind::Range) out.ranges.push_back(range);
    if (event.kind == dlprof::EventKind::Op) out.ops.push_back(range);
  }
  std::stable_sort(out.ranges.begin(), out.ranges.end(),
                   [](const Range& a, const Range& b) { return a.start_ns < b.start_ns; });
  return out;
}

template <class Body>
Recorded record(Body body) {
  dlprof::Profiler profiler;
  profiler.start();
  body();
  profiler.stop();
  return recorded(*profiler.last_trace());
}

const std::vector<std::string> kCnnElementRanges = {
    "nn.Module: Conv2d_features.0",      "nn.Module: BatchNorm2d_features.1", "nn.Module: ReLU_features.2",
    "nn.Module: MaxPool2d_features.3",   "nn.Module: Conv2d_features.4",      "nn.Module: BatchNorm2d_features.5",
    "nn.Module: ReLU_features.6",        "nn.Module: MaxPool2d_features.7",   "nn.Module: Flatten_classifier.0",
    "nn.Module: Linear_classifier.1",    "nn.Module: ReLU_classifier.2",      "nn.Module: Linear_classifier.3"};

/// The example's model opens its own range (DLPROF_MODULE(this) in its forward), then its layers'.
std::vector<std::string> cnn_ranges() {
  std::vector<std::string> names = {"nn.Module: MnistCnn"};
  names.insert(names.end(), kCnnElementRanges.begin(), kCnnElementRanges.end());
  return names;
}

torch::Tensor images() {
  torch::manual_seed(1);
  return torch::randn({4, 1, 28, 28});
}

TEST(TorchModuleTest, EverySequentialElementOfTheExampleCnnIsARangeNamedByItsPath) {
  torch::manual_seed(0);
  dlprof_examples::MnistCnn model;
  const dlprof::ModuleAnnotation annotation = dlprof::annotate_modules(model);
  EXPECT_EQ(annotation.named, 15u);  // the root, 2 Sequentials, 12 layers
  EXPECT_EQ(annotation.wrapped, 12u);
  EXPECT_THAT(annotation.unwrapped, IsEmpty());

  const torch::Tensor x = images();
  const Recorded trace = record([&] { model->forward(x); });
  EXPECT_THAT(trace.names(), ElementsAreArray(cnn_ranges()));
  for (const Range& range : trace.ranges) EXPECT_EQ(range.category, dlprof::Category::Forward) << range.name;
}

TEST(TorchModuleTest, ModuleRangesNestInTheirParentsAndAroundTheirOps) {
  torch::manual_seed(0);
  ProfiledCnn model;
  dlprof::annotate_modules(model);
  const torch::Tensor x = images();
  const Recorded trace = record([&] { model->forward(x); });

  std::vector<std::string> expected = {"nn.Module: ProfiledCnn"};
  expected.insert(expected.end(), kCnnElementRanges.begin(), kCnnElementRanges.end());
  EXPECT_THAT(trace.names(), ElementsAreArray(expected));
  for (const std::string& element : kCnnElementRanges)
    EXPECT_EQ(trace.parent_of(trace.range(element)), "nn.Module: ProfiledCnn") << element;
  EXPECT_EQ(trace.parent_of(trace.range("nn.Module: ProfiledCnn")), "");

  // Each layer's first op inside the layer's range (Linear runs addmm in LibTorch 1.13 and 2.x).
  const std::map<std::string, std::string> op_of = {{"aten::conv2d", "nn.Module: Conv2d_features.0"},
                                                    {"aten::batch_norm", "nn.Module: BatchNorm2d_features.1"},
                                                    {"aten::max_pool2d", "nn.Module: MaxPool2d_features.3"},
                                                    {"aten::addmm", "nn.Module: Linear_classifier.1"}};
  for (const auto& [op_name, range_name] : op_of) {
    const Range* first = nullptr;
    for (const Range& op : trace.ops)
      if (op.name == op_name && first == nullptr) first = &op;
    ASSERT_NE(first, nullptr) << op_name;
    EXPECT_TRUE(trace.range(range_name).contains(*first)) << op_name << " outside " << range_name;
  }
}

TEST(TorchModuleTest, AnnotatedModelComputesTrainsAndSerialisesAsBefore) {
  torch::manual_seed(0);
  dlprof_examples::MnistCnn plain;
  torch::manual_seed(0);
  dlprof_examples::MnistCnn annotated;

  std::vector<std::string> names_before;
  for (const auto& item : annotated->named_parameters()) names_before.push_back(item.key());
  std::vector<std::string> buffers_before;
  for (const auto& item : annotated->named_buffers()) buffers_before.push_back(item.key());
  const std::vector<torch::Tensor> parameters_before = annotated->parameters();
  torch::optim::SGD optimizer(annotated->parameters(), torch::optim::SGDOptions(0.1));

  dlprof::annotate_modules(annotated);

  std::vector<std::string> names_after;
  for (const auto& item : annotated->named_parameters()) names_after.push_back(item.key());
  std::vector<std::string> buffers_after;
  for (const auto& item : annotated->named_buffers()) buffers_after.push_back(item.key());
  EXPECT_EQ(names_after, names_before);
  EXPECT_THAT(names_after, testing::Contains("features.0.weight"));
  EXPECT_EQ(buffers_after, buffers_before);
  const std::vector<torch::Tensor> parameters_after = annotated->parameters();
  ASSERT_EQ(parameters_after.size(), parameters_before.size());
  for (std::size_t i = 0; i < parameters_after.size(); ++i)
    EXPECT_TRUE(parameters_after[i].is_same(parameters_before[i]));

  // Same outputs, in training and in evaluation, and the optimizer still trains the same tensors.
  const torch::Tensor x = images();
  for (int step = 0; step < 2; ++step) {
    torch::optim::SGD plain_optimizer(plain->parameters(), torch::optim::SGDOptions(0.1));
    const torch::Tensor plain_out = plain->forward(x);
    const torch::Tensor annotated_out = annotated->forward(x);
    EXPECT_TRUE(torch::equal(plain_out, annotated_out));
    plain_optimizer.zero_grad();
    optimizer.zero_grad();
    plain_out.sum().backward();
    annotated_out.sum().backward();
    plain_optimizer.step();
    optimizer.step();
  }
  plain->eval();
  annotated->eval();
  EXPECT_TRUE(torch::equal(plain->forward(x), annotated->forward(x)));

  // The elements are the same modules, reachable by type as before.
  EXPECT_EQ(annotated->features->at<torch::nn::Conv2dImpl>(0).weight.sizes(), (std::vector<int64_t>{16, 1, 3, 3}));
  EXPECT_NE(annotated->classifier->ptr<torch::nn::LinearImpl>(3), nullptr);
  EXPECT_EQ(annotated->features[0].get(), annotated->features->named_children()["0"].get());

  // A clone of an annotated Sequential has the same parameter names and values, computes the
  // same, and is not annotated.
  const auto clone = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(annotated->features->clone());
  ASSERT_NE(clone, nullptr);
  std::vector<std::string> clone_names, feature_names;
  for (const auto& item : clone->named_parameters()) clone_names.push_back(item.key());
  for (const auto& item : annotated->features->named_parameters()) feature_names.push_back(item.key());
  EXPECT_EQ(clone_names, feature_names);
  EXPECT_TRUE(torch::equal(clone->forward(x), annotated->features->forward(x)));
  EXPECT_THAT(record([&] { clone->forward(x); }).names(), IsEmpty());
}

TEST(TorchModuleTest, AnnotatingTwiceWrapsOnce) {
  torch::manual_seed(0);
  dlprof_examples::MnistCnn model;
  dlprof::annotate_modules(model);
  const dlprof::ModuleAnnotation again = dlprof::annotate_modules(model);
  EXPECT_EQ(again.wrapped, 12u);
  const torch::Tensor x = images();
  EXPECT_THAT(record([&] { model->forward(x); }).names(), ElementsAreArray(cnn_ranges()));
}

TEST(TorchModuleTest, ElementsWithSeveralOrDefaultArgumentsOfNamedTypesAreWrapped) {
  torch::nn::Sequential sequential{Add(), Shift(), Scale(), torch::nn::ReLU()};
  const torch::Tensor a = torch::full({2, 2}, 1.0);
  const torch::Tensor b = torch::full({2, 2}, -4.0);
  const torch::Tensor expected = sequential->forward(a, b);  // relu(((1 - 4) + 1.5) * 2) = 0

  const dlprof::ModuleAnnotation annotation = dlprof::annotate_modules<AddImpl, ShiftImpl, ScaleImpl>(sequential);
  EXPECT_EQ(annotation.wrapped, 4u);
  EXPECT_THAT(annotation.unwrapped, IsEmpty());
  torch::Tensor out;
  const Recorded trace = record([&] { out = sequential->forward(a, b); });
  EXPECT_TRUE(torch::equal(out, expected));
  // Scale's own DLPROF_MODULE(this) finds its range open: one range, not two.
  EXPECT_THAT(trace.names(), ElementsAre("nn.Module: Add_0", "nn.Module: Shift_1", "nn.Module: Scale_2",
                                         "nn.Module: ReLU_3"));
  // Defaults still come from the module, and wrong calls still fail as LibTorch reports them.
  EXPECT_TRUE(torch::equal(sequential->ptr<ShiftImpl>(1)->forward(a), a + 1.5));
  EXPECT_THROW(sequential->forward(a), c10::Error);
}

TEST(TorchModuleTest, ElementsOfUnnamedTypesAreReportedAndStillNamedForDlprofModule) {
  torch::nn::Sequential sequential{torch::nn::Linear(2, 2), Scale(), Shift()};
  const dlprof::ModuleAnnotation annotation = dlprof::annotate_modules(sequential);
  EXPECT_EQ(annotation.wrapped, 1u);
  EXPECT_THAT(annotation.unwrapped, ElementsAre("1 (Scale)", "2 (Shift)"));
  const torch::Tensor x = torch::ones({1, 2});
  const Recorded trace = record([&] { sequential->forward(x); });
  // Scale names itself with DLPROF_MODULE(this); Shift has no range.
  EXPECT_THAT(trace.names(), ElementsAre("nn.Module: Linear_0", "nn.Module: Scale_1"));
}

TEST(TorchModuleTest, ModuleListElementsAreNamedButOnlyTheirOwnDlprofModuleOpensARange) {
  struct BlocksImpl : torch::nn::Module {
    BlocksImpl() : blocks(register_module("blocks", torch::nn::ModuleList(Scale(), Scale(), torch::nn::ReLU()))) {}
    torch::Tensor forward(torch::Tensor x) {
      for (const auto& block : *blocks) {
        if (auto* scale = block->as<ScaleImpl>()) x = scale->forward(x);
        if (auto* relu = block->as<torch::nn::ReLUImpl>()) x = relu->forward(x);
      }
      return x;
    }
    torch::nn::ModuleList blocks;
  };
  auto model = std::make_shared<BlocksImpl>();
  const dlprof::ModuleAnnotation annotation = dlprof::annotate_modules(model);
  EXPECT_EQ(annotation.named, 5u);
  EXPECT_EQ(annotation.wrapped, 0u);
  const Recorded trace = record([&] { model->forward(torch::ones({2})); });
  EXPECT_THAT(trace.names(), ElementsAre("nn.Module: Scale_blocks.0", "nn.Module: Scale_blocks.1"));
}

TEST(TorchModuleTest, DlprofModuleNamesAModuleNeverAnnotatedAfterItsType) {
  auto scale = std::make_shared<ScaleImpl>();
  auto model = std::make_shared<ProfiledCnnImpl>();
  model->eval();
  const torch::Tensor x = images();
  const Recorded trace = record([&] {
    scale->forward(torch::ones({2}));
    model->forward(x);
  });
  EXPECT_THAT(trace.names(), ElementsAre("nn.Module: Scale", "nn.Module: ProfiledCnn"));
}

TEST(TorchModuleTest, DlprofModuleTakesAHolderForAMembersCall) {
  torch::manual_seed(0);
  dlprof_examples::MnistCnn model;
  dlprof::annotate_modules(model);
  const torch::Tensor x = images();
  const Recorded trace = record([&] {
    DLPROF_MODULE(model->features);
    model->features->forward(x);
  });
  ASSERT_FALSE(trace.ranges.empty());
  EXPECT_EQ(trace.ranges[0].name, "nn.Module: Sequential_features");
  EXPECT_EQ(trace.parent_of(trace.range("nn.Module: Conv2d_features.0")), "nn.Module: Sequential_features");
}

TEST(TorchModuleTest, WhileNotRecordingAnAnnotatedCallRecordsNothingAndAllocatesNothingMore) {
  torch::manual_seed(0);
  ProfiledCnn plain;
  torch::manual_seed(0);
  ProfiledCnn annotated;
  dlprof::annotate_modules(annotated);
  const torch::Tensor x = images();
  // The fewest of a few calls each, after a few to warm (LibTorch's first calls set things up).
  const auto allocations = [&](ProfiledCnn& model) {
    std::size_t fewest = SIZE_MAX;
    for (int call = 0; call < 6; ++call) {
      t_allocations = 0;
      t_counting = true;
      model->forward(x);
      t_counting = false;
      if (call >= 3) fewest = std::min(fewest, t_allocations);
    }
    return fewest;
  };
  allocations(plain);
  allocations(annotated);
  const std::size_t plain_allocations = allocations(plain);
  EXPECT_GT(plain_allocations, 0u);  // the counter counts LibTorch's own
  EXPECT_EQ(allocations(annotated), plain_allocations);

  // Waiting and warming up record nothing; the active step records one call.
  dlprof::Profiler profiler(
      dlprof::ProfilerOptions{}.schedule(dlprof::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/1)));
  profiler.start();
  for (int step = 0; step < 3; ++step) {
    annotated->forward(x);
    profiler.step();
  }
  profiler.stop();
  const Recorded trace = recorded(*profiler.last_trace());
  std::size_t conv_ranges = 0, roots = 0;
  for (const Range& range : trace.ranges) {
    conv_ranges += range.name == "nn.Module: Conv2d_features.0";
    roots += range.name == "nn.Module: ProfiledCnn";
  }
  EXPECT_EQ(conv_ranges, 1u);
  EXPECT_EQ(roots, 1u);
}

TEST(TorchModuleTest, TypeNamesAreWhatTorchProfilerShows) {
  using dlprof::detail::module_type_name;
  EXPECT_EQ(module_type_name("torch::nn::Conv2dImpl"), "Conv2d");
  EXPECT_EQ(module_type_name("dlprof_examples::MnistCnnImpl"), "MnistCnn");
  EXPECT_EQ(module_type_name("(anonymous namespace)::BlockImpl<3, ns::X>"), "Block<3, ns::X>");
  EXPECT_EQ(module_type_name("Encoder"), "Encoder");
  EXPECT_EQ(module_type_name("Impl"), "Impl");
}

}  // namespace
