// Which per-sample kernel a layer takes (per_sample.h's, or the
// tensor-parallel ones of tensor_parallel_gradients.h), as configured: the
// choice clipped_gradient_sum makes for every layer it watches (a
// cohort::PerSample's module, a Sequential's layer).
//
//   Linear                          linear_gradients; [B, ..., in] inputs,
//                                   the middle dimensions as positions
//   Conv1d, Conv2d                  conv_gradients, with explicit zero
//                                   padding and groups 1
//   Embedding                       embedding_gradients, without
//                                   padding_idx or max_norm
//   LayerNorm, GroupNorm            with affine parameters
//   Column/RowParallelLinear        their tensor-parallel kernels
//
// Anything else has no kernel (the reason says why, for the gradient path's
// description) and takes its own micro-batches.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/torch/privacy/per_sample.h"

namespace cohort::privacy {

// One run of a layer in a forward: its input and the gradient of its output.
struct LayerCall {
  torch::Tensor input;
  torch::Tensor grad_output;
};

struct LayerKernel {
  std::function<LayerGradients(const torch::Tensor& input, const torch::Tensor& grad_output)> gradients;
  // For layers whose per-sample gradient is a sum over positions (Linear,
  // Embedding and the tensor-parallel linears): several calls of the layer
  // in one forward are one call on their positions concatenated, which is
  // exact. Empty for the others.
  std::function<LayerCall(const std::vector<LayerCall>& calls)> join;
};

// The kernel of `layer`, whose parameters must all be trainable; none when
// there is none for it, with `why` (not null) saying so in a few words
// ("no kernel for MyBlockImpl", "Conv2d with reflect padding").
std::optional<LayerKernel> kernel_of(const torch::nn::Module& layer, std::string* why);

}  // namespace cohort::privacy
