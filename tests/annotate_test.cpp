// dlprof::wrap and dlprof::annotate: ranges around a callable, each fetch of a data loader and
// each optimizer step, named as torch.profiler names them, without changing what the wrapped
// code receives or returns.
#include <dlprof/annotate.hpp>
#include <dlprof/profiler.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace annotate_only {
void annotate_every_way(int step);
void name_this_thread(const std::string& name);
}  // namespace annotate_only

namespace {

using testing::ElementsAre;

/// Names of the recorded ranges in trace order, and for each the name of its innermost
/// enclosing range ("" at top level).
struct Recorded {
  std::vector<std::string> names;
  std::vector<std::string> parents;
  std::vector<dlprof::Category> categories;
};

Recorded ranges_of(const dlprof::Trace& trace) {
  Recorded recorded;
  std::vector<const dlprof::TraceEvent*> open;
  for (const dlprof::TraceEvent& event : trace.events) {
    if (event.kind != dlprof::EventKind::Range) continue;
    while (!open.empty() && open.back()->end_ns < event.end_ns) open.pop_back();
    recorded.names.emplace_back(trace.name_of(event));
    recorded.parents.emplace_back(open.empty() ? "" : std::string(trace.name_of(*open.back())));
    recorded.categories.push_back(event.category);
    open.push_back(&event);
  }
  return recorded;
}

template <class Body>
Recorded record(Body body) {
  dlprof::Profiler profiler;
  profiler.start();
  body();
  profiler.stop();
  return ranges_of(*profiler.last_trace());
}

/// A loader that fetches in begin() and in ++, as torch::data loaders do, recording each fetch.
class CountingLoader {
 public:
  explicit CountingLoader(int batches) : batches_(batches) {}

  class iterator {
   public:
    using difference_type = std::ptrdiff_t;
    using value_type = int;
    using reference = const int&;
    using pointer = const int*;
    using iterator_category = std::input_iterator_tag;

    iterator(int batch, int batches) : batch_(batch), batches_(batches) {}
    const int& operator*() const { return batch_; }
    iterator& operator++() {
      DLPROF_RANGE("fetch");
      ++batch_;
      return *this;
    }
    bool operator==(const iterator& other) const { return clamp() == other.clamp(); }
    bool operator!=(const iterator& other) const { return !(*this == other); }

   private:
    int clamp() const { return batch_ < batches_ ? batch_ : batches_; }
    int batch_;
    int batches_;
  };

  iterator begin() {
    DLPROF_RANGE("fetch");
    return iterator(0, batches_);
  }
  iterator end() { return iterator(batches_, batches_); }

 private:
  int batches_;
};

TEST(AnnotateTest, EveryFetchOfALoaderIsADataLoaderRangeNamedLikeTorch) {
  CountingLoader loader(3);
  std::vector<int> seen;
  const Recorded recorded = record([&] {
    for (const int batch : dlprof::annotate(loader)) {
      DLPROF_RANGE("train_step");
      seen.push_back(batch);
    }
  });
  EXPECT_THAT(seen, ElementsAre(0, 1, 2));
  const std::string next = "enumerate(DataLoader)#CountingLoader.__next__";
  // begin() and three ++ (the last one finds the end), as Python calls __next__ four times.
  std::size_t fetch_ranges = 0;
  for (std::size_t i = 0; i < recorded.names.size(); ++i) {
    if (recorded.names[i] == "fetch") {
      EXPECT_EQ(recorded.parents[i], next) << "a fetch outside its range";
    }
    if (recorded.names[i] == next) {
      ++fetch_ranges;
      EXPECT_EQ(recorded.parents[i], "");
      EXPECT_EQ(recorded.categories[i], dlprof::Category::DataLoader);
    }
    if (recorded.names[i] == "train_step") {
      EXPECT_EQ(recorded.parents[i], "") << "the loop body is not a fetch";
    }
  }
  EXPECT_EQ(fetch_ranges, 4u);
}

/// torch::data::Iterator compares through a non-const operator==.
class NonConstComparisonLoader {
 public:
  struct iterator {
    using difference_type = std::ptrdiff_t;
    using value_type = int;
    using reference = int;
    using pointer = void;
    using iterator_category = std::input_iterator_tag;
    int operator*() { return position; }
    iterator& operator++() {
      ++position;
      return *this;
    }
    bool operator==(const iterator& other) { return position == other.position; }
    bool operator!=(const iterator& other) { return position != other.position; }
    int position;
  };
  iterator begin() { return iterator{0}; }
  iterator end() { return iterator{2}; }
};

TEST(AnnotateTest, LoadersWhoseIteratorsCompareThroughNonConstMembersWork) {
  NonConstComparisonLoader loader;
  int sum = 0;
  for (const int batch : dlprof::annotate(loader)) sum += batch + 1;
  EXPECT_EQ(sum, 3);
}

TEST(AnnotateTest, AnyIterableCanBeAnnotatedAndNamed) {
  std::vector<std::string> samples = {"a", "b"};
  std::string joined;
  const Recorded recorded = record([&] {
    for (std::string& sample : dlprof::annotate(samples, "ShardReader")) joined += sample;  // references, not copies
  });
  EXPECT_EQ(joined, "ab");
  EXPECT_EQ(recorded.names.front(), "enumerate(DataLoader)#ShardReader.__next__");
  EXPECT_EQ(dlprof::annotate(samples).range_name(), "enumerate(DataLoader)#vector.__next__");
}

namespace optim {
/// Shaped like torch::optim::SGD: step() returns the loss, zero_grad() takes an option.
class SGD {
 public:
  double step(double loss = 0.0) {
    DLPROF_RANGE("update");
    ++steps;
    return loss;
  }
  void zero_grad(bool set_to_none = true) { zeroed_to_none = set_to_none; }
  int steps = 0;
  bool zeroed_to_none = false;
};
}  // namespace optim

TEST(AnnotateTest, OptimizerStepAndZeroGradAreRangesNamedLikeTorch) {
  optim::SGD sgd;
  double returned = 0;
  const Recorded recorded = record([&] {
    auto optimizer = dlprof::annotate(sgd);
    optimizer.zero_grad(false);
    returned = optimizer.step(0.25);
    EXPECT_EQ(optimizer->steps, 1);
  });
  EXPECT_EQ(returned, 0.25);
  EXPECT_FALSE(sgd.zeroed_to_none);
  EXPECT_THAT(recorded.names, ElementsAre("Optimizer.zero_grad#SGD.zero_grad", "Optimizer.step#SGD.step", "update"));
  EXPECT_THAT(recorded.parents, ElementsAre("", "", "Optimizer.step#SGD.step"));
  EXPECT_EQ(recorded.categories[1], dlprof::Category::Optimizer);
}

TEST(AnnotateTest, WrapForwardsArgumentsAndReturnsWhatTheCallableReturns) {
  int counter = 0;
  auto bump = dlprof::wrap("bump", [&](int by) -> int& {
    counter += by;
    return counter;
  });
  auto consume = dlprof::wrap("consume", [](std::unique_ptr<int> owned) { return *owned * 2; },
                              dlprof::Category::Forward);
  int* address = nullptr;
  int doubled = 0;
  const Recorded recorded = record([&] {
    address = &bump(3);  // a reference comes back as the same reference
    doubled = consume(std::make_unique<int>(21));  // move-only arguments are forwarded
  });
  EXPECT_EQ(address, &counter);
  EXPECT_EQ(counter, 3);
  EXPECT_EQ(doubled, 42);
  EXPECT_THAT(recorded.names, ElementsAre("bump", "consume"));
  EXPECT_EQ(recorded.categories[1], dlprof::Category::Forward);
}

TEST(AnnotateTest, AnExceptionLeavesThroughTheRangeWhichStillEnds) {
  auto failing = dlprof::wrap("failing", []() -> int { throw std::runtime_error("bad batch"); });
  const Recorded recorded = record([&] {
    EXPECT_THROW(failing(), std::runtime_error);
    DLPROF_RANGE("after");
  });
  EXPECT_THAT(recorded.names, ElementsAre("failing", "after"));
  EXPECT_THAT(recorded.parents, ElementsAre("", ""));
}

TEST(AnnotateTest, ShortTypeNamesDropNamespacesAndTemplateArguments) {
  EXPECT_EQ(dlprof::detail::short_type_name(typeid(optim::SGD)), "SGD");
  EXPECT_EQ(dlprof::detail::short_type_name(typeid(std::vector<std::vector<int>>)), "vector");
  EXPECT_EQ(dlprof::detail::short_type_name(typeid(int)), "int");
}

TEST(AnnotateTest, AFileThatIncludesOnlyTheAnnotationHeaderRecordsEveryKindOfAnnotation) {
  dlprof::Profiler profiler;
  profiler.start();
  std::thread annotator([] {  // a thread whose ring is attached from that file
    annotate_only::name_this_thread("annotator");
    annotate_only::annotate_every_way(7);
  });
  annotator.join();
  profiler.stop();
  const dlprof::Trace& trace = *profiler.last_trace();
  EXPECT_THAT(ranges_of(trace).names, ElementsAre("literal range", "formatted range 7", "dynamic range 7", "wrapped member",
                                                  "wrapped member", "wrapped member data"));
  EXPECT_THAT(ranges_of(trace).categories,
              ElementsAre(dlprof::Category::Forward, dlprof::Category::User, dlprof::Category::Backward,
                          dlprof::Category::User, dlprof::Category::User, dlprof::Category::User));
  std::vector<std::string> marks;
  std::vector<double> counters;
  for (const dlprof::TraceEvent& event : trace.events) {
    if (event.kind == dlprof::EventKind::Instant) marks.emplace_back(trace.name_of(event));
    if (event.kind == dlprof::EventKind::Counter) counters.push_back(event.value);
  }
  EXPECT_THAT(marks, ElementsAre("a mark"));
  EXPECT_THAT(counters, ElementsAre(3.5));
  ASSERT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads[0].name, "annotator");
}

}  // namespace
