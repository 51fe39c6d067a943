#include "cohort/torch/privacy/tensor_parallel_gradients.h"

#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort::privacy {
namespace {

// [B, in] or [B, T, in] as the Linear kernel takes it: any leading
// dimensions between the sample and the features are positions.
torch::Tensor as_positions(const torch::Tensor& t) {
  return t.dim() <= 3 ? t : t.reshape({t.size(0), -1, t.size(-1)});
}

}  // namespace

LayerGradients column_parallel_linear_gradients(const ColumnParallelLinearImpl& layer, const torch::Tensor& input,
                                                const torch::Tensor& grad_output) {
  const TensorParallelGroup& group = layer.group();
  const ColumnParallelLinearOptions& o = layer.options();
  torch::Tensor local = grad_output;
  if (o.gather_output) {
    // The gathered output is chunk-major, [chunk][rank][part]; this rank
    // produced [chunk][part] of its own rank.
    const int64_t part = layer.out_features() / o.chunks / group.size;
    std::vector<int64_t> split = grad_output.sizes().vec();
    split.pop_back();
    std::vector<int64_t> lead = split;
    split.insert(split.end(), {o.chunks, int64_t(group.size), part});
    lead.push_back(o.chunks * part);
    local = grad_output.reshape(split).select(-2, group.rank).reshape(lead);
  }
  COHORT_CHECK_EQ(local.size(-1), layer.local_out_features()) << "ColumnParallelLinear output gradient";
  LayerGradients shard = linear_gradients(as_positions(input), as_positions(local), o.bias);
  shard.squared_norms = tensor_parallel_sum(shard.squared_norms, group);
  return shard;
}

LayerGradients row_parallel_linear_gradients(const RowParallelLinearImpl& layer, const torch::Tensor& input,
                                             const torch::Tensor& grad_output) {
  const TensorParallelGroup& group = layer.group();
  const RowParallelLinearOptions& o = layer.options();
  const torch::Tensor x = as_positions(o.input_is_parallel ? input : tensor_parallel_slice_last_dim(input, group));
  const torch::Tensor g = as_positions(grad_output);
  LayerGradients weight = linear_gradients(x, g, /*has_bias=*/false);
  const torch::Tensor norms = tensor_parallel_sum(weight.squared_norms, group);
  if (!o.bias) return {norms, weight.scaled_sum};
  // The replicated bias: the same gradient on every rank, counted once.
  const LayerGradients bias = materialised_gradients({g.dim() == 2 ? g : g.sum(1)});  // [B, out]
  return {norms + bias.squared_norms,
          [weight_sum = weight.scaled_sum, bias_sum = bias.scaled_sum](const torch::Tensor& c) {
            std::vector<torch::Tensor> sums = weight_sum(c);
            sums.push_back(bias_sum(c).front());
            return sums;
          }};
}

}  // namespace cohort::privacy
