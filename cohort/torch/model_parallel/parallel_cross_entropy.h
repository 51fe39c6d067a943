// Cross-entropy over logits split by vocabulary across a tensor-parallel
// group (Megatron's vocab-parallel cross-entropy), for a language-model head
// that is a ColumnParallelLinear without gather_output.
//
//   at::Tensor logits = head->forward(h);              // (..., vocab / size) on each rank
//   at::Tensor loss = parallel_cross_entropy(logits, targets, {.engine = &tp});
//
// The full (..., vocab) logits never exist on any rank: the row max is
// allreduced (max), then the target's shifted logit (taken by the rank that
// owns the target id, zero elsewhere) and the sum of exponentials are
// allreduced together (sum) in one op. Backward is local: softmax minus the
// one-hot target on this rank's shard, times the incoming gradient.
//
// Contracts:
// - Rank r's logits are columns [r * V_local, (r + 1) * V_local) of the full
//   logits, V_local the same on every rank (vocab = size * V_local).
//   Floating dtype; targets int64 of the logits' shape without the last dim,
//   values in [0, vocab) (ConfigError naming the bad range otherwise).
// - The same loss value and gradients (up to rounding) as
//   torch::nn::functional::cross_entropy on the full logits, on every rank.
// - Collective over the group: every rank calls it in the same order as its
//   other tp ops (two ordered allreduces forward, none backward).
#pragma once

#include <ATen/Tensor.h>

#include "cohort/torch/model_parallel/tensor_parallel_region.h"

namespace cohort {

enum class LossReduction { mean, sum, none };

struct ParallelCrossEntropyOptions {
  LossReduction reduction = LossReduction::mean;
  engine::Engine* engine = nullptr;  // the tp group's; null: the thread's current engine
};

at::Tensor parallel_cross_entropy(const at::Tensor& vocab_parallel_logits, const at::Tensor& target,
                                  const ParallelCrossEntropyOptions& options = {});

}  // namespace cohort
