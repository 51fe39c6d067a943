// The clipped per-sample gradient sum of a whole model over one batch: the
// gradient DP-SGD noises. Runs the forward, takes every sample's gradient
// norm, clips each sample's gradient to the norm C and writes the sum of the
// clipped gradients into the parameters' .grad().
//
// LibTorch C++ modules have no forward hooks, so the layers whose
// per-sample quantities come from kernels must be known: every
// cohort::PerSample in the model (per_sample_module.h, wherever it sits in
// the module tree), and, when the model is a plain torch::nn::Sequential
// (not a subclass), each of its layers with trainable parameters that holds
// no PerSample. Those are the watched layers. During the forward each
// watched layer's input and its output's place in the autograd graph are
// kept, one autograd pass gives the output gradients, and each layer's
// kernel (layer_kernel.h: Linear, Conv1d/2d, Embedding, LayerNorm,
// GroupNorm, Column/RowParallelLinear) turns them into per-sample squared
// norms and clipped sums. A watched layer without a kernel (a custom block,
// reflect padding, an Embedding with padding_idx) or with some parameters
// frozen takes its own micro-batches: only that layer runs again per
// sample, fed the sample's output gradient, for its trainable parameters.
//
// A watched layer run several times in one forward (weight sharing: an
// encoder applied to two inputs, a block applied twice) is exact: for
// Linear, Embedding and the tensor-parallel linears its calls are joined
// along positions (a sample's gradient is a sum over positions); any other
// layer then takes its own micro-batches over all of its calls. PerSamples
// do not nest, and no parameter may be in two watched layers (ConfigError
// naming both). A watched layer's dim 0 must be the batch, its parameters
// are read by nothing but its own calls, and its input is not modified in
// place after it ran (each a ConfigError naming it).
//
// Trainable parameters outside every watched layer (a head left unwrapped,
// a positional embedding registered on the model itself) get exact
// per-sample gradients from micro-batches of the whole model restricted to
// them: one forward per sample, whose backward stops where those
// parameters' gradients are complete; their per-sample norms join the
// kernels' so that clipping sees each sample's whole norm. That costs B
// forward passes a step, which wrapping their layers in cohort::PerSample
// removes (describe_gradient_path() names them). A model with no watched
// layer at all trains by micro-batches of the whole model (slow, always
// correct). Tensor-parallel layers must be watched layers with kernels:
// micro-batches would clip each rank's shard by its own norm (ConfigError).
//
// The kernels compute in the activations' precision (float32 or float64)
// and sum the norms in float64. Per-layer clipping clips each watched layer
// to C / sqrt(L), the parameters outside them counting as one more layer.
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

enum class GradientPath {
  kernels,        // every trainable parameter in a watched layer (kernels or the layer's own micro-batches)
  micro_batches,  // no watched layer: micro-batches of the whole model
  mixed,          // watched layers, and parameters outside them by whole-model micro-batches
};

// Which path clipped_gradient_sum() takes for `module` (ConfigError for what
// it refuses: nested PerSamples, a parameter in two watched layers,
// tensor-parallel layers off the kernels).
GradientPath gradient_path(torch::nn::Module& module);
std::string gradient_path_name(GradientPath path);
// The path per layer, in a line: "kernels: 7 layers; layer micro-batches:
// block3 (no kernel for MyBlockImpl); whole-model micro-batches (a forward
// per sample) for 2 unwrapped parameters: head.weight, head.bias (wrap head
// in cohort::PerSample)".
std::string describe_gradient_path(torch::nn::Module& module);

struct ClippedSum {
  double loss_sum = 0;         // sum over the rows of the per-row loss
  at::Tensor output;           // the model's outputs, detached
  torch::Tensor sample_norms;  // [rows] float64: each sample's unclipped gradient norm
};

// Sets every trainable parameter's .grad() of `module` to the sum over the
// rows of `batch` (at least one) of the samples' clipped gradients (zeros
// where a parameter gets no gradient). max_grad_norm > 0; infinity clips
// nothing. Per-layer clipping needs watched layers (ConfigError otherwise).
// `forward` runs the model (a plain Sequential's layers are stepped through
// instead, as training_model() would run them).
ClippedSum clipped_gradient_sum(torch::nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                                const Batch& batch, double max_grad_norm, Clipping clipping = Clipping::flat);

}  // namespace cohort::privacy
