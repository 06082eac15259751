// The demo's model: a small CNN for 28×28 single-channel images (MNIST's shape), written the way
// LibTorch users write models: a custom module holding a Sequential feature extractor and a
// classifier head. Shared by examples/libtorch_training.cpp and bench/torch_bench.cpp.
#pragma once

#include <dlprof/profiler.hpp>
#include <torch/torch.h>

namespace dlprof_examples {

struct MnistCnnImpl : torch::nn::Module {
  MnistCnnImpl()
      : features(register_module(
            "features",
            torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)),
                                  torch::nn::BatchNorm2d(16), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                                  torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1).bias(false)),
                                  torch::nn::BatchNorm2d(32), torch::nn::ReLU(), torch::nn::MaxPool2d(2)))),
        classifier(register_module("classifier", torch::nn::Sequential(torch::nn::Flatten(),
                                                                        torch::nn::Linear(32 * 7 * 7, 128),
                                                                        torch::nn::ReLU(), torch::nn::Linear(128, 10)))) {}

  torch::Tensor forward(torch::Tensor images) {
    DLPROF_MODULE(this);  // the model's own range; annotate_modules() gives the layers theirs
    return classifier->forward(features->forward(images));
  }

  torch::nn::Sequential features;
  torch::nn::Sequential classifier;
};
TORCH_MODULE(MnistCnn);

}  // namespace dlprof_examples
