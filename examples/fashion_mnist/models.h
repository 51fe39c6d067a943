// The example's classifiers for 28x28 grey images and 10 classes. Both are
// deterministic given torch::manual_seed (no dropout, no batch norm), so
// ranks that start identical stay identical and 1-rank and n-rank runs are
// comparable step for step.
//   mlp: 784 -> 256 -> 128 -> 10 (ReLU)                          ~235k parameters
//   cnn: conv 3x3x16, pool, conv 3x3x32, pool, 1568 -> 128 -> 10  ~206k parameters
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <string>

namespace cohort::examples {

// "mlp" or "cnn"; ConfigError otherwise. Input: float [B, 1, 28, 28];
// output: logits [B, 10].
::torch::nn::Sequential make_model(const std::string& kind);

}  // namespace cohort::examples
