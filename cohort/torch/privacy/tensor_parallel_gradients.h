// Per-sample gradients of Megatron's tensor-parallel linear layers
// (model_parallel/parallel_linear.h), for DP-SGD on a model split over a
// tensor-parallel group.
//
// Clipping needs each sample's norm over the WHOLE layer, whose weight is
// split over the group. Each rank computes its shard's per-sample squared
// norms with the Linear kernel (per_sample.h), the group sums them (one
// allreduce of [B] values per layer), so every rank sees the full layer's
// norms and computes the same clipping factors; the clipped sums stay local,
// each rank's shard. A replicated parameter (RowParallelLinear's bias) is
// counted once, not once per rank.
//
//   ColumnParallelLinear: rank r's weight rows see the full input A and the
//     gradient of its own output features (the slice of the gathered output's
//     gradient, in the layer's chunk order, when gather_output).
//   RowParallelLinear: rank r's weight columns see its slice of the input
//     and the full output gradient G; the bias sees G.
//
// Contracts: as the layers' own: every rank of the group calls these in the
// same order, with the same batch size (they are collective when the group
// has more than one rank).
#pragma once

#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/privacy/per_sample.h"

namespace cohort::privacy {

// input [B, in] or [B, T, in]; grad_output of the layer's output as
// forward() returned it (gathered or not).
LayerGradients column_parallel_linear_gradients(const ColumnParallelLinearImpl& layer, const torch::Tensor& input,
                                                const torch::Tensor& grad_output);

// input as forward() took it (this rank's slice when input_is_parallel, else
// the full input); grad_output [B, out] or [B, T, out].
LayerGradients row_parallel_linear_gradients(const RowParallelLinearImpl& layer, const torch::Tensor& input,
                                             const torch::Tensor& grad_output);

}  // namespace cohort::privacy
