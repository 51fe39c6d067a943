// The clipped per-sample gradient sum of a whole model over one batch: the
// gradient DP-SGD noises. Runs the forward, takes every sample's gradient
// norm, clips each sample's gradient to the norm C and writes the sum of the
// clipped gradients into the parameters' .grad().
//
// How the per-sample quantities are computed is chosen from the model:
//   kernels       the model is a torch::nn::Sequential (not a subclass):
//                 each layer with trainable parameters keeps its input and
//                 output during the forward, one autograd pass gives the
//                 output gradients, and each layer's kernel turns them into
//                 norms and clipped sums. The kernel is chosen per layer:
//                 per_sample.h's (Linear, Conv1d/2d with zero padding and
//                 groups 1, Embedding without padding_idx/max_norm,
//                 LayerNorm and GroupNorm with affine parameters),
//                 tensor_parallel_gradients.h's (Column/RowParallelLinear),
//                 or, for any other layer or one with frozen parameters, the
//                 layer's own micro-batches (only that layer runs once per
//                 sample, fed the sample's output gradient).
//   micro-batches any other model: one backward pass of the whole model per
//                 sample (slow, always correct). Refused for a model with
//                 tensor-parallel layers, whose shards it would clip apart.
// LibTorch C++ modules have no forward hooks, which is why the kernels need
// a Sequential they can step through; which path a model takes is what
// gradient_path() says.
//
// The loss must be a mean over the rows (the Strategy contract): loss x rows
// is then the sum of the per-sample losses, whose gradient with respect to a
// layer's output holds each sample's output gradient.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>

#include "cohort/torch/core/strategy.h"

namespace cohort::privacy {

enum class Clipping {
  flat,       // ||g_i|| over all parameters <= C
  per_layer,  // each of the L layers' ||g_i,l|| <= C / sqrt(L): ||g_i|| <= C still
};

enum class GradientPath { kernels, micro_batches };

// Which path clipped_gradient_sum() takes for `module`.
GradientPath gradient_path(torch::nn::Module& module);
std::string gradient_path_name(GradientPath path);

struct ClippedSum {
  double loss_sum = 0;         // sum over the rows of the per-row loss
  at::Tensor output;           // the model's outputs, detached
  torch::Tensor sample_norms;  // [rows] float64: each sample's unclipped gradient norm
};

// Sets every trainable parameter's .grad() of `module` to the sum over the
// rows of `batch` (at least one) of the samples' clipped gradients (zeros
// where a parameter gets no gradient). max_grad_norm > 0; infinity clips
// nothing. Per-layer clipping needs the kernel path (ConfigError otherwise).
ClippedSum clipped_gradient_sum(torch::nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                                const Batch& batch, double max_grad_norm, Clipping clipping = Clipping::flat);

}  // namespace cohort::privacy
