// The networks of synthetic_benchmark (and of bench/pytorch_ddp_synthetic.py,
// which must build the same ones): input 1x28x28, 10 classes.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <string>

namespace cohort::examples::synthetic {

// "mlp", "cnn" or "resnet" (see usage() for the layers).
::torch::nn::Sequential make_model(const std::string& name);

}  // namespace cohort::examples::synthetic
