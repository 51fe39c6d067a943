// Small image classifiers for 1x28x28 inputs and 10 classes, shared by the
// examples, the benchmarks and the tests (each must build the same network;
// bench/pytorch_ddp_synthetic.py builds synthetic_classifier's in PyTorch).
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <string>

namespace cohort::models {

// The Fashion-MNIST example's networks, deterministic given
// torch::manual_seed (no dropout, no batch norm), so ranks that start
// identical stay identical and 1-rank and n-rank runs compare step for step.
//   mlp: 784 -> 256 -> 128 -> 10 (ReLU)                          ~235k parameters
//   cnn: conv 3x3x16, pool, conv 3x3x32, pool, 1568 -> 128 -> 10  ~206k parameters
//   tanh_cnn: conv 8x8x16 /2, pool, conv 4x4x32 /2, pool, 512 -> 32 -> 10, tanh
//        (the end-to-end DP-SGD network of Tramer & Boneh 2021)      ~26k parameters
// Input: float [B, 1, 28, 28]; output: logits [B, 10]. ConfigError for
// another kind.
torch::nn::Sequential fashion_mnist_classifier(const std::string& kind);

// synthetic_benchmark's heavier networks (Horovod's synthetic benchmark on
// small images):
//   mlp:    784 -> width, then depth - 1 layers width -> width, -> 10
//           (width 4096, depth 2: ~20.0M parameters)
//   cnn:    conv 32, conv 64, pool, conv 128, pool, 6272 -> 256 -> 10
//   resnet: a ResNet of three basic blocks (16, 32, 64 channels, batch norm)
// ConfigError for another name.
torch::nn::Sequential synthetic_classifier(const std::string& name, int64_t width = 4096, int depth = 2);

}  // namespace cohort::models
