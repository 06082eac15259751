// The CPU demo's data and model (examples/cpu_training_loop.cpp), shared with bench/flight_bench.cpp
// so that the benchmark runs the demo's own step: an MNIST-shaped synthetic dataset "decoded" and
// augmented by a DataLoader with worker threads, and a 784-256-10 MLP trained with plain C++
// forward, backward and SGD, annotated with dlprof ranges.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <dlprof/annotate.hpp>

#include "random.hpp"

namespace dlprof_examples::cpu_mlp {

using dlprof::Category;
using dlprof_examples::mix64;
using dlprof_examples::Rng;

constexpr int kClasses = 10;
constexpr int kImageSide = 28;                    // what the model sees, as in MNIST
constexpr int kPixels = kImageSide * kImageSide;  // 784 inputs
constexpr int kCanvasSide = 32;                   // rendered size; augmentation crops 28x28 from it
constexpr int kSupersample = 3;                   // rendering points per pixel side: sets the decoding cost
constexpr int kStrokesPerClass = 3;
constexpr int kHiddenUnits = 256;
constexpr std::int64_t kDatasetSize = 60000;  // MNIST's training set
constexpr int kPrefetchFactor = 2;            // batches in flight per worker, torch's default
constexpr float kLearningRate = 0.1f;
constexpr std::uint64_t kDatasetSeed = 20240401;
constexpr std::uint64_t kModelSeed = 7;

// kDatasetSize 28x28 "handwritten" digits, generated on demand: each class is a few thick
// strokes, jittered per sample. Sample i is the same in every run; its augmentation also depends
// on the epoch, as random augmentation does.
class SyntheticDataset {
 public:
  explicit SyntheticDataset(std::uint64_t seed) : seed_(seed) {
    Rng rng(seed);
    for (auto& strokes : prototypes_)
      for (Stroke& s : strokes)
        s = Stroke{rng.uniform(0.2f, 0.8f), rng.uniform(0.2f, 0.8f), rng.uniform(0.2f, 0.8f), rng.uniform(0.2f, 0.8f)};
  }

  // Writes sample `index` as seen in `epoch` to `image` (kPixels floats); returns its label.
  int load(std::int64_t index, std::int64_t epoch, float* image) const {
    Rng sample_rng(mix64(seed_ ^ mix64(static_cast<std::uint64_t>(index))));
    const int label = sample_rng.below(kClasses);
    std::array<float, kCanvasSide * kCanvasSide> canvas;
    decode(label, sample_rng, canvas.data());
    Rng augment_rng(mix64(sample_rng.next() ^ mix64(static_cast<std::uint64_t>(epoch))));
    augment(canvas.data(), augment_rng, image);
    return label;
  }

 private:
  struct Stroke {
    float x0, y0, x1, y1;
  };

  static float squared_distance_to_segment(float px, float py, const Stroke& s) {
    const float dx = s.x1 - s.x0, dy = s.y1 - s.y0;
    const float t = std::clamp(((px - s.x0) * dx + (py - s.y0) * dy) / (dx * dx + dy * dy + 1e-12f), 0.0f, 1.0f);
    const float ex = px - (s.x0 + t * dx), ey = py - (s.y0 + t * dy);
    return ex * ex + ey * ey;
  }

  // Stands in for JPEG decoding, the usual bottleneck of real loaders: rasterises the class's
  // strokes, jittered for this sample, with kSupersample^2 anti-aliasing points per pixel.
  void decode(int label, Rng& rng, float* canvas) const {
    DLPROF_RANGE("decode", Category::DataLoader);
    std::array<Stroke, kStrokesPerClass> strokes = prototypes_[static_cast<std::size_t>(label)];
    for (Stroke& s : strokes)
      for (float* coordinate : {&s.x0, &s.y0, &s.x1, &s.y1}) *coordinate += 0.04f * rng.normal();
    const float width = 0.05f * (1.0f + 0.2f * rng.normal());
    const float falloff = 1.0f / (2.0f * width * width);
    constexpr float kPointSpacing = 1.0f / (kCanvasSide * kSupersample);
    for (int y = 0; y < kCanvasSide; ++y)
      for (int x = 0; x < kCanvasSide; ++x) {
        float coverage = 0;
        for (int sy = 0; sy < kSupersample; ++sy)
          for (int sx = 0; sx < kSupersample; ++sx) {
            const float px = (static_cast<float>(x * kSupersample + sx) + 0.5f) * kPointSpacing;
            const float py = (static_cast<float>(y * kSupersample + sy) + 0.5f) * kPointSpacing;
            float ink = 0;
            for (const Stroke& s : strokes)
              ink = std::max(ink, std::exp(-squared_distance_to_segment(px, py, s) * falloff));
            coverage += ink;
          }
        canvas[y * kCanvasSide + x] = coverage / (kSupersample * kSupersample);
      }
  }

  // torchvision-style augmentation: random 28x28 crop, random contrast, pixel noise, then
  // standardisation to zero mean and unit variance.
  static void augment(const float* canvas, Rng& rng, float* image) {
    DLPROF_RANGE("augment", Category::DataLoader);
    const int left = rng.below(kCanvasSide - kImageSide + 1), top = rng.below(kCanvasSide - kImageSide + 1);
    const float contrast = rng.uniform(0.7f, 1.3f);
    double sum = 0, sum_of_squares = 0;
    for (int y = 0; y < kImageSide; ++y)
      for (int x = 0; x < kImageSide; ++x) {
        const float value = contrast * canvas[(top + y) * kCanvasSide + left + x] + 0.1f * rng.normal();
        image[y * kImageSide + x] = value;
        sum += value;
        sum_of_squares += static_cast<double>(value) * value;
      }
    const double mean = sum / kPixels;
    const auto inverse_std = static_cast<float>(1.0 / std::sqrt(sum_of_squares / kPixels - mean * mean + 1e-6));
    for (int i = 0; i < kPixels; ++i) image[i] = (image[i] - static_cast<float>(mean)) * inverse_std;
  }

  std::uint64_t seed_;
  std::array<std::array<Stroke, kStrokesPerClass>, kClasses> prototypes_;
};

struct Batch {
  std::vector<float> images;  // batch size x kPixels, row-major
  std::vector<int> labels;
};

// A torch-style DataLoader over the dataset in order, epoch after epoch, dropping each epoch's
// last partial batch. With workers, each one claims the next batch index, builds that batch and
// parks it in `ready_`; at most kPrefetchFactor batches per worker are in flight, so workers
// wait rather than run ahead. With no workers, next() builds the batch itself, as torch's
// num_workers=0 does.
class SyntheticLoader {
 public:
  SyntheticLoader(const SyntheticDataset& dataset, int batch_size, int num_workers)
      : dataset_(dataset), batch_size_(batch_size), max_in_flight_(kPrefetchFactor * num_workers) {
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this, i] { run_worker(i); });
  }

  ~SyntheticLoader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  std::int64_t batches_per_epoch() const { return kDatasetSize / batch_size_; }

  // Named as torch names DataLoader iteration, which TensorBoard's Overview counts as DataLoader.
  Batch next() {
    DLPROF_RANGE("enumerate(DataLoader)#SyntheticLoader.__next__", Category::DataLoader);
    if (workers_.empty()) return load_batch(next_to_return_++);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return ready_.count(next_to_return_) != 0; });
    Batch batch = std::move(ready_.extract(next_to_return_++).mapped());
    dlprof::counter("loader.ready_batches", static_cast<double>(ready_.size()));
    lock.unlock();
    changed_.notify_all();  // a prefetch slot is free again
    return batch;
  }

 private:
  void run_worker(int worker_id) {
    dlprof::set_thread_name(fmt::format("loader-{}", worker_id));
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stopping_ || next_to_load_ < next_to_return_ + max_in_flight_; });
      if (stopping_) return;
      const std::int64_t index = next_to_load_++;
      lock.unlock();
      Batch batch = load_batch(index);
      lock.lock();
      ready_.emplace(index, std::move(batch));
      changed_.notify_all();
    }
  }

  Batch load_batch(std::int64_t batch_index) const {
    DLPROF_RANGE("load_batch", Category::DataLoader);
    const std::int64_t epoch = batch_index / batches_per_epoch();
    const std::int64_t first_sample = batch_index % batches_per_epoch() * batch_size_;
    Batch batch{std::vector<float>(static_cast<std::size_t>(batch_size_) * kPixels), std::vector<int>(batch_size_)};
    for (int j = 0; j < batch_size_; ++j)
      batch.labels[j] = dataset_.load(first_sample + j, epoch, &batch.images[static_cast<std::size_t>(j) * kPixels]);
    return batch;
  }

  const SyntheticDataset& dataset_;
  const int batch_size_;
  const std::int64_t max_in_flight_;  // batches claimed by workers and not yet returned by next()
  std::mutex mutex_;                  // guards the members below
  std::condition_variable changed_;
  std::map<std::int64_t, Batch> ready_;  // by batch index: workers may finish out of order
  std::int64_t next_to_load_ = 0;
  std::int64_t next_to_return_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: they start once everything they use exists
};

// A fully connected layer, y = x W + b. W is stored input-major ([inputs][outputs]) so every
// inner loop runs over contiguous outputs (the compiler vectorises it) and each weight row is
// streamed once per batch rather than once per sample.
class Linear {
 public:
  Linear(int inputs, int outputs, Rng& rng)
      : inputs_(inputs), outputs_(outputs), weight_(static_cast<std::size_t>(inputs) * outputs),
        bias_(outputs, 0.0f), grad_weight_(weight_.size(), 0.0f), grad_bias_(outputs, 0.0f) {
    const float bound = std::sqrt(6.0f / static_cast<float>(inputs));  // He initialisation, for ReLU
    for (float& w : weight_) w = rng.uniform(-bound, bound);
  }

  void forward(const float* input, int batch, float* output) const {
    for (int b = 0; b < batch; ++b) std::copy(bias_.begin(), bias_.end(), output + b * outputs_);
    for (int i = 0; i < inputs_; ++i) {
      const float* weight_row = &weight_[static_cast<std::size_t>(i) * outputs_];
      for (int b = 0; b < batch; ++b) {
        const float x = input[b * inputs_ + i];
        float* out = output + b * outputs_;
        for (int o = 0; o < outputs_; ++o) out[o] += x * weight_row[o];
      }
    }
  }

  // Accumulates dL/dW and dL/db (hence zero_grad()); writes dL/dx when `grad_input` is given.
  void backward(const float* input, const float* grad_output, int batch, float* grad_input) {
    for (int b = 0; b < batch; ++b)
      for (int o = 0; o < outputs_; ++o) grad_bias_[o] += grad_output[b * outputs_ + o];
    for (int i = 0; i < inputs_; ++i) {
      float* grad_row = &grad_weight_[static_cast<std::size_t>(i) * outputs_];
      for (int b = 0; b < batch; ++b) {
        const float x = input[b * inputs_ + i];
        const float* grad_out = grad_output + b * outputs_;
        for (int o = 0; o < outputs_; ++o) grad_row[o] += x * grad_out[o];
      }
    }
    if (grad_input == nullptr) return;
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < inputs_; ++i) {
        const float* weight_row = &weight_[static_cast<std::size_t>(i) * outputs_];
        float sum = 0;
        for (int o = 0; o < outputs_; ++o) sum += grad_output[b * outputs_ + o] * weight_row[o];
        grad_input[b * inputs_ + i] = sum;
      }
  }

  void zero_grad() {
    std::fill(grad_weight_.begin(), grad_weight_.end(), 0.0f);
    std::fill(grad_bias_.begin(), grad_bias_.end(), 0.0f);
  }

  void sgd_step(float learning_rate) {
    for (std::size_t i = 0; i < weight_.size(); ++i) weight_[i] -= learning_rate * grad_weight_[i];
    for (std::size_t o = 0; o < bias_.size(); ++o) bias_[o] -= learning_rate * grad_bias_[o];
  }

 private:
  int inputs_, outputs_;
  std::vector<float> weight_, bias_, grad_weight_, grad_bias_;
};

// 784 -> 256 -> ReLU -> 10, softmax cross-entropy. Keeps the activations of the last forward()
// for backward(), as autograd would. Each layer is a range nested in forward/backward.
class Mlp {
 public:
  explicit Mlp(std::uint64_t seed) : Mlp(Rng(seed)) {}

  // Returns the mean cross-entropy loss of the batch.
  float forward(const Batch& batch) {
    DLPROF_RANGE("forward", Category::Forward);
    const int size = static_cast<int>(batch.labels.size());
    hidden_.resize(static_cast<std::size_t>(size) * kHiddenUnits);
    probabilities_.resize(static_cast<std::size_t>(size) * kClasses);
    {
      DLPROF_RANGE("fc1", Category::Forward);
      fc1_.forward(batch.images.data(), size, hidden_.data());
    }
    {
      DLPROF_RANGE("relu", Category::Forward);
      for (float& h : hidden_) h = std::max(h, 0.0f);
    }
    {
      DLPROF_RANGE("fc2", Category::Forward);
      fc2_.forward(hidden_.data(), size, probabilities_.data());
    }
    DLPROF_RANGE("cross_entropy", Category::Forward);  // turns the logits into probabilities in place
    double loss = 0;
    for (int b = 0; b < size; ++b) {  // softmax, shifted by the max logit for stability
      float* p = &probabilities_[static_cast<std::size_t>(b) * kClasses];
      const float max_logit = *std::max_element(p, p + kClasses);
      float sum = 0;
      for (int c = 0; c < kClasses; ++c) sum += (p[c] = std::exp(p[c] - max_logit));
      for (int c = 0; c < kClasses; ++c) p[c] /= sum;
      loss -= std::log(std::max(p[batch.labels[b]], 1e-12f));
    }
    return static_cast<float>(loss / size);
  }

  void backward(const Batch& batch) {
    DLPROF_RANGE("backward", Category::Backward);
    const int size = static_cast<int>(batch.labels.size());
    {
      DLPROF_RANGE("cross_entropy.backward", Category::Backward);
      grad_logits_ = probabilities_;  // d(mean loss)/d(logits) = (softmax - one_hot) / batch size
      for (int b = 0; b < size; ++b) grad_logits_[static_cast<std::size_t>(b) * kClasses + batch.labels[b]] -= 1.0f;
      for (float& g : grad_logits_) g /= static_cast<float>(size);
    }
    grad_hidden_.resize(hidden_.size());
    {
      DLPROF_RANGE("fc2.backward", Category::Backward);
      fc2_.backward(hidden_.data(), grad_logits_.data(), size, grad_hidden_.data());
    }
    {
      DLPROF_RANGE("relu.backward", Category::Backward);
      for (std::size_t i = 0; i < hidden_.size(); ++i)
        if (hidden_[i] <= 0.0f) grad_hidden_[i] = 0.0f;
    }
    DLPROF_RANGE("fc1.backward", Category::Backward);
    fc1_.backward(batch.images.data(), grad_hidden_.data(), size, /*grad_input=*/nullptr);  // inputs need none
  }

  void zero_grad() {
    DLPROF_RANGE("zero_grad", Category::Optimizer);
    fc1_.zero_grad();
    fc2_.zero_grad();
  }

  void sgd_step(float learning_rate) {
    DLPROF_RANGE("optimizer.step", Category::Optimizer);
    fc1_.sgd_step(learning_rate);
    fc2_.sgd_step(learning_rate);
  }

 private:
  explicit Mlp(Rng rng) : fc1_(kPixels, kHiddenUnits, rng), fc2_(kHiddenUnits, kClasses, rng) {}

  Linear fc1_, fc2_;
  std::vector<float> hidden_, probabilities_, grad_logits_, grad_hidden_;
};

}  // namespace dlprof_examples::cpu_mlp
