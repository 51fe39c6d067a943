#include "cohort/torch/model_parallel/parallel_cross_entropy.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"

namespace cohort {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Per-position loss; the reduction is ordinary autograd on top.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target,
                            TensorParallelGroup g) {
    const int64_t local_vocab = logits.size(-1);
    const int64_t start = g.rank * local_vocab;

    // Subtracting the global row max keeps exp() finite; every rank must
    // subtract the same value for the shards' sums to add up.
    at::Tensor max = std::get<0>(logits.max(-1));
    if (g.size > 1) max = allreduce(max, {.op = ReduceOp::max, .engine = g.engine});
    const at::Tensor shifted = logits - max.unsqueeze(-1);

    const at::Tensor foreign = (target < start).logical_or(target >= start + local_vocab);
    const at::Tensor local_target = (target - start).masked_fill(foreign, 0);
    const at::Tensor target_logit =
        shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(foreign, 0.0);
    const at::Tensor exp = shifted.exp();
    // One allreduce for both sums: [target logit, sum of exp] per position.
    at::Tensor sums = at::stack({target_logit, exp.sum(-1)});
    if (g.size > 1) sums = allreduce(sums, {.op = ReduceOp::sum, .engine = g.engine});
    const at::Tensor sum_exp = sums[1];
    const at::Tensor loss = sum_exp.log() - sums[0];

    const at::Tensor softmax = exp / sum_exp.unsqueeze(-1);
    ctx->save_for_backward({softmax, local_target, foreign});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& softmax = saved[0];
    const at::Tensor index = saved[1].unsqueeze(-1);
    // d loss / d logit = softmax - onehot(target), the one-hot only on the
    // rank that owns the target id.
    const at::Tensor owned = saved[2].logical_not().unsqueeze(-1).to(softmax.scalar_type());
    at::Tensor grad = softmax.scatter(-1, index, softmax.gather(-1, index) - owned);
    grad = grad * grads[0].unsqueeze(-1);
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                  const ParallelCrossEntropyOptions& options) {
  const TensorParallelGroup g = TensorParallelGroup::of(options.engine);
  COHORT_CHECK_AS(ConfigError, logits.defined() && logits.dim() >= 1 && at::isFloatingType(logits.scalar_type()))
      << "parallel_cross_entropy: logits must be a floating tensor of at least one dim, got "
      << (logits.defined() ? logits.sizes() : at::IntArrayRef{});
  COHORT_CHECK_AS(ConfigError, target.defined() && target.scalar_type() == at::kLong)
      << "parallel_cross_entropy: target must be int64";
  COHORT_CHECK_AS(ConfigError, target.sizes() == logits.sizes().slice(0, logits.dim() - 1))
      << "parallel_cross_entropy: target shape " << target.sizes() << " must be the logits' shape " << logits.sizes()
      << " without the last dim";
  const int64_t vocab = logits.size(-1) * g.size;
  if (target.numel() > 0) {
    const int64_t lo = target.min().item<int64_t>(), hi = target.max().item<int64_t>();
    COHORT_CHECK_AS(ConfigError, lo >= 0 && hi < vocab)
        << "parallel_cross_entropy: targets must lie in [0, " << vocab << ") (" << logits.size(-1)
        << " logits on each of " << g.size << " ranks), got values in [" << lo << ", " << hi << "]";
  }
  const at::Tensor loss = VocabParallelCrossEntropy::apply(logits, target, g);
  switch (options.reduction) {
    case LossReduction::mean:
      return loss.mean();
    case LossReduction::sum:
      return loss.sum();
    case LossReduction::none:
      return loss;
  }
  return loss;
}

}  // namespace cohort
