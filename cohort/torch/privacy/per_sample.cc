#include "cohort/torch/privacy/per_sample.h"

#include <torch/autograd.h>
#include <torch/nn/functional/fold.h>

#include "cohort/common/check.h"

namespace cohort::privacy {
namespace {

// [B, c] or [B, c, 1, ...] factors shaped to broadcast against `like` ([B, ...]).
torch::Tensor per_sample(const torch::Tensor& factors, const torch::Tensor& like) {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[0] = factors.size(0);
  return factors.to(like.dtype()).reshape(shape);
}

// Materialised per-sample gradients [B, ...] of a small parameter.
LayerGradients from_per_sample(std::vector<torch::Tensor> grads) {
  torch::Tensor norms = torch::zeros({grads.front().size(0)}, grads.front().options());
  for (const torch::Tensor& g : grads) norms += g.flatten(1).pow(2).sum(1);
  return {norms, [grads](const torch::Tensor& c) {
            std::vector<torch::Tensor> sums;
            for (const torch::Tensor& g : grads) sums.push_back((per_sample(c, g) * g).sum(0));
            return sums;
          }};
}

}  // namespace

LayerGradients linear_gradients(const torch::Tensor& input, const torch::Tensor& grad_output, bool has_bias) {
  COHORT_CHECK(input.dim() == grad_output.dim() && (input.dim() == 2 || input.dim() == 3))
      << "linear per-sample gradients take [B, in] or [B, T, in] inputs, got " << input.sizes() << " and "
      << grad_output.sizes();
  const torch::Tensor a = input.dim() == 2 ? input.unsqueeze(1) : input;
  const torch::Tensor g = grad_output.dim() == 2 ? grad_output.unsqueeze(1) : grad_output;
  const int64_t t = a.size(1), in = a.size(2), out = g.size(2);
  torch::Tensor norms;
  if (t * t <= in * out) {
    // Ghost norm: ||G^T A||_F^2 = <A A^T, G G^T>, two [T, T] Gram matrices.
    norms = (torch::bmm(a, a.transpose(1, 2)) * torch::bmm(g, g.transpose(1, 2))).sum({1, 2});
  } else {
    norms = torch::bmm(g.transpose(1, 2), a).pow(2).sum({1, 2});
  }
  const torch::Tensor bias_per_sample = g.sum(1);  // [B, out]
  if (has_bias) norms = norms + bias_per_sample.pow(2).sum(1);
  return {norms, [a, g, bias_per_sample, has_bias, in, out](const torch::Tensor& c) {
            const torch::Tensor scaled = per_sample(c, g) * g;
            std::vector<torch::Tensor> sums{torch::mm(scaled.reshape({-1, out}).t(), a.reshape({-1, in}))};
            if (has_bias) sums.push_back((per_sample(c, bias_per_sample) * bias_per_sample).sum(0));
            return sums;
          }};
}

LayerGradients conv_gradients(const torch::Tensor& input, const torch::Tensor& grad_output,
                              std::vector<int64_t> kernel, std::vector<int64_t> stride,
                              std::vector<int64_t> padding, std::vector<int64_t> dilation, bool has_bias) {
  COHORT_CHECK(input.dim() == 3 || input.dim() == 4) << "Conv1d or Conv2d inputs, got " << input.sizes();
  torch::Tensor x = input;
  if (input.dim() == 3) {  // Conv1d as a Conv2d of height 1
    x = input.unsqueeze(2);
    kernel.insert(kernel.begin(), 1);
    stride.insert(stride.begin(), 1);
    padding.insert(padding.begin(), 0);
    dilation.insert(dilation.begin(), 1);
  }
  namespace F = torch::nn::functional;
  // [B, C * kernel, L]: each output position's receptive field.
  const torch::Tensor patches =
      F::unfold(x, F::UnfoldFuncOptions(kernel).stride(stride).padding(padding).dilation(dilation));
  const int64_t out_channels = grad_output.size(1);
  LayerGradients linear = linear_gradients(patches.transpose(1, 2), grad_output.flatten(2).transpose(1, 2), has_bias);
  std::vector<int64_t> weight_shape{out_channels, input.size(1)};
  for (size_t k = input.dim() == 3 ? 1 : 0; k < kernel.size(); ++k) weight_shape.push_back(kernel[k]);
  return {linear.squared_norms, [scaled_sum = linear.scaled_sum, weight_shape](const torch::Tensor& c) {
            std::vector<torch::Tensor> sums = scaled_sum(c);
            sums[0] = sums[0].reshape(weight_shape);
            return sums;
          }};
}

LayerGradients embedding_gradients(const torch::Tensor& indices, const torch::Tensor& grad_output,
                                   int64_t num_embeddings) {
  const torch::Tensor idx = indices.dim() == 1 ? indices.unsqueeze(1) : indices;
  const torch::Tensor g = grad_output.dim() == 2 ? grad_output.unsqueeze(1) : grad_output;
  // Rows t and s of one sample land on the same embedding row when their
  // indices are equal: only those pairs add to the sample's squared norm.
  const torch::Tensor same = (idx.unsqueeze(2) == idx.unsqueeze(1)).to(g.dtype());
  const torch::Tensor norms = (same * torch::bmm(g, g.transpose(1, 2))).sum({1, 2});
  return {norms, [idx, g, num_embeddings](const torch::Tensor& c) {
            const int64_t d = g.size(2);
            torch::Tensor sum = torch::zeros({num_embeddings, d}, g.options());
            sum.index_add_(0, idx.reshape(-1), (per_sample(c, g) * g).reshape({-1, d}));
            return std::vector<torch::Tensor>{sum};
          }};
}

LayerGradients layer_norm_gradients(const torch::Tensor& input, const torch::Tensor& grad_output,
                                    int64_t normalized_dims, double eps) {
  std::vector<int64_t> norm_dims, sum_dims;
  for (int64_t d = input.dim() - normalized_dims; d < input.dim(); ++d) norm_dims.push_back(d);
  for (int64_t d = 1; d < input.dim() - normalized_dims; ++d) sum_dims.push_back(d);
  const torch::Tensor mean = input.mean(norm_dims, true);
  const torch::Tensor var = (input - mean).pow(2).mean(norm_dims, true);
  const torch::Tensor normalized = (input - mean) / torch::sqrt(var + eps);
  torch::Tensor weight = grad_output * normalized, bias = grad_output;
  if (!sum_dims.empty()) {
    weight = weight.sum(sum_dims);
    bias = bias.sum(sum_dims);
  }
  return from_per_sample({weight, bias});
}

LayerGradients group_norm_gradients(const torch::Tensor& input, const torch::Tensor& grad_output,
                                    int64_t num_groups, double eps) {
  const int64_t b = input.size(0), channels = input.size(1);
  COHORT_CHECK_EQ(channels % num_groups, 0) << "GroupNorm channels must divide into groups";
  const torch::Tensor grouped = input.reshape({b, num_groups, -1});
  const torch::Tensor mean = grouped.mean(2, true);
  const torch::Tensor var = (grouped - mean).pow(2).mean(2, true);
  const torch::Tensor normalized = ((grouped - mean) / torch::sqrt(var + eps)).reshape(input.sizes());
  const torch::Tensor weight = (grad_output * normalized).reshape({b, channels, -1}).sum(2);
  const torch::Tensor bias = grad_output.reshape({b, channels, -1}).sum(2);
  return from_per_sample({weight, bias});
}

torch::Tensor clip_factors(const torch::Tensor& squared_norms, double max_grad_norm) {
  COHORT_CHECK_AS(ConfigError, max_grad_norm > 0) << "max grad norm must be positive, got " << max_grad_norm;
  // Opacus's 1e-6 keeps a zero gradient's factor finite.
  return (max_grad_norm / (squared_norms.clamp_min(0).sqrt() + 1e-6)).clamp_max(1.0);
}

torch::Tensor clipped_sum_by_microbatches(const std::vector<torch::Tensor>& parameters, int64_t batch,
                                          const std::function<torch::Tensor(int64_t)>& sample_loss,
                                          double max_grad_norm) {
  std::vector<torch::Tensor> trainable;
  for (const torch::Tensor& p : parameters)
    if (p.requires_grad()) trainable.push_back(p);
  COHORT_CHECK(!trainable.empty()) << "no trainable parameters";
  torch::Tensor norms = torch::zeros({batch}, torch::kFloat64);
  for (int64_t i = 0; i < batch; ++i) {
    const torch::Tensor loss = sample_loss(i);
    const auto grads = torch::autograd::grad({loss}, trainable, {}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    double squared = 0;
    for (const torch::Tensor& g : grads)
      if (g.defined()) squared += g.to(torch::kFloat64).pow(2).sum().item<double>();
    norms[i] = std::sqrt(squared);
    const double factor = std::min(1.0, max_grad_norm / (std::sqrt(squared) + 1e-6));
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < trainable.size(); ++k) {
      if (!grads[k].defined()) continue;
      torch::Tensor& accumulated = trainable[k].mutable_grad();
      if (!accumulated.defined()) accumulated = torch::zeros_like(trainable[k]);
      accumulated.add_(grads[k], factor);
    }
  }
  return norms;
}

void check_private_compatible(const torch::nn::Module& model) {
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string type = item.value()->name();
    if (type.find("BatchNorm") == std::string::npos) continue;
    COHORT_THROW(ConfigError) << "module '" << (item.key().empty() ? "<root>" : item.key()) << "' (" << type
                              << ") mixes the samples of a batch, so per-sample gradients do not exist for it: "
                                 "replace it with GroupNorm (torch::nn::GroupNorm) for private training";
  }
}

}  // namespace cohort::privacy
