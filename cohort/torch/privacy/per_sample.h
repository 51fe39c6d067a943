// Per-sample gradients for DP-SGD, from what a layer's backward already
// holds: its input activations A and the gradient G of its output. For each
// supported layer, the squared norm of every sample's parameter gradient and
// the sum of the samples' gradients each scaled by its own factor (the
// clipped sum), without the [batch, parameter] tensor where it can be
// avoided:
//
//   Linear (inputs [B, in] or [B, T, in]): sample i's weight gradient is
//     G_i^T A_i, its squared norm sum_{t,s} (A_it . A_is)(G_it . G_is): two
//     [T, T] Gram matrices instead of [out, in] ("ghost clipping", Li et al.
//     2021, "Large Language Models Can Be Strong Differentially Private
//     Learners"); for T = 1 simply ||A_i||^2 ||G_i||^2 (Goodfellow 2015).
//     The scaled sum is one matmul, (c G)^T A. When T^2 exceeds in * out the
//     gradient is materialised instead, whichever is cheaper.
//   Conv1d/Conv2d: the per-sample weight gradients are one grouped
//     convolution backward (the batch folded into the channels, a group per
//     sample), which on a CPU beats unfolding the input into patches; the
//     scaled sum is those gradients weighted by c (one [P, B] x [B]
//     product) while they take at most 16 MiB, else the layer's ordinary
//     weight gradient of c G.
//   Embedding: sample i's gradient adds G_it to row idx_it; its squared norm
//     is sum over equal indices t, s of G_it . G_is.
//   LayerNorm, GroupNorm: the affine parameters' per-sample gradients are a
//     few numbers per channel; materialised (GroupNorm's as one batched dot
//     product of G with the centred input per sample and channel).
//
// Everything in float64 or float32 as given; the tests check each against a
// loop of one-sample backward passes in float64.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace cohort::privacy {

// The per-sample gradient quantities of one layer.
struct LayerGradients {
  // [B]: the squared norm of each sample's gradient of this layer's
  // parameters (weight and bias together).
  torch::Tensor squared_norms;
  // Given per-sample factors c [B], the layer's gradients sum_i c_i g_i, in
  // the order of its parameters (weight, then bias when present).
  std::function<std::vector<torch::Tensor>(const torch::Tensor& factors)> scaled_sum;
};

// input [B, in] or [B, T, in]; grad_output [B, out] or [B, T, out].
LayerGradients linear_gradients(const torch::Tensor& input, const torch::Tensor& grad_output, bool has_bias);

// The per-sample weight gradients of a convolution kept from its norms to
// its clipped sum, at most (every layer's at once: all norms come first).
inline constexpr int64_t kKeptConvGradientBytes = int64_t(16) << 20;

// input [B, C, L] / [B, C, H, W], grad_output [B, out, L'] / [B, out, H', W'];
// kernel, stride, padding and dilation per spatial dimension; groups 1.
// Per-sample weight gradients of more than `kept_bytes` are recomputed for
// the clipped sum as one weight gradient.
LayerGradients conv_gradients(const torch::Tensor& input, const torch::Tensor& grad_output, std::vector<int64_t> kernel,
                              std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                              bool has_bias, int64_t kept_bytes = kKeptConvGradientBytes);

// indices [B, T] (int64), grad_output [B, T, D]; num_embeddings rows.
LayerGradients embedding_gradients(const torch::Tensor& indices, const torch::Tensor& grad_output,
                                   int64_t num_embeddings);

// input and grad_output [B, ..., normalized...]; the normalisation over the
// last normalized_dims dimensions, elementwise affine (weight and bias).
LayerGradients layer_norm_gradients(const torch::Tensor& input, const torch::Tensor& grad_output,
                                    int64_t normalized_dims, double eps);

// input and grad_output [B, C, ...]; affine weight and bias of C channels.
LayerGradients group_norm_gradients(const torch::Tensor& input, const torch::Tensor& grad_output,
                                    int64_t num_groups, double eps);

// From materialised per-sample gradients, one [B, ...] tensor per parameter
// (for small parameters and the per-layer micro-batch fallback).
LayerGradients materialised_gradients(std::vector<torch::Tensor> per_sample_gradients);

// The factors of flat clipping: min(1, C / ||g_i||) from squared norms.
torch::Tensor clip_factors(const torch::Tensor& squared_norms, double max_grad_norm);

// The generic fallback, for any module: micro-batches of one. For each
// sample i in [0, batch), `sample_loss(i)` runs the forward of sample i and
// returns its loss; its gradients are clipped to max_grad_norm (flat, over
// `parameters`) and added into each parameter's .grad(). Returns the
// samples' unclipped norms. B backward passes: the slow, always-correct way.
torch::Tensor clipped_sum_by_microbatches(const std::vector<torch::Tensor>& parameters, int64_t batch,
                                          const std::function<torch::Tensor(int64_t)>& sample_loss,
                                          double max_grad_norm);

// Throws ConfigError naming the first submodule that mixes samples in its
// forward (BatchNorm1d/2d/3d, SyncBatchNorm, InstanceNorm with running
// statistics): per-sample gradients do not exist for it, and GroupNorm is the
// replacement.
void check_private_compatible(const torch::nn::Module& model);

}  // namespace cohort::privacy
