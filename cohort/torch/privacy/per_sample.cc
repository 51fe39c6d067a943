#include "cohort/torch/privacy/per_sample.h"

#include <torch/autograd.h>
#include <ATen/ATen.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/module_state.h"

namespace cohort::privacy {
namespace {

// [B, c] or [B, c, 1, ...] factors shaped to broadcast against `like` ([B, ...]).
torch::Tensor per_sample(const torch::Tensor& factors, const torch::Tensor& like) {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[0] = factors.size(0);
  return factors.to(like.dtype()).reshape(shape);
}

// [B]: the squared norm of each row of `t` [B, ...], in one reduction
// (no squared copy of a large per-sample tensor).
torch::Tensor row_squared_norms(const torch::Tensor& t) {
  return at::linalg_vector_norm(t.reshape({t.size(0), -1}), 2, {1}).square();
}

struct ConvGeometry {
  std::vector<int64_t> kernel, stride, padding, dilation;  // two spatial dimensions each
};

// The weight gradient [groups * out, C, kh, kw] of a 2-d convolution from
// its output gradient `grad` [N, groups * out, H', W'] and input `in` [N,
// groups * C, H, W], by the backward LibTorch runs in training (oneDNN or its
// own kernels). convolution_backward reads only the weight's shape when the
// input gradient is not asked for, so an uninitialised tensor stands in.
torch::Tensor conv_weight_gradient(const torch::Tensor& grad, const torch::Tensor& in, const ConvGeometry& geometry,
                                   int64_t groups) {
  const std::vector<int64_t> shape{grad.size(1), in.size(1) / groups, geometry.kernel[0], geometry.kernel[1]};
  return std::get<1>(at::convolution_backward(grad, in, torch::empty(shape, in.options()), c10::nullopt,
                                              geometry.stride, geometry.padding, geometry.dilation,
                                              /*transposed=*/false, /*output_padding=*/{0, 0}, groups,
                                              {false, true, false}));
}

}  // namespace

LayerGradients materialised_gradients(std::vector<torch::Tensor> grads) {
  torch::Tensor norms = torch::zeros({grads.front().size(0)}, grads.front().options());
  for (const torch::Tensor& g : grads) norms += row_squared_norms(g);
  return {norms, [grads](const torch::Tensor& c) {
            std::vector<torch::Tensor> sums;
            for (const torch::Tensor& g : grads) sums.push_back((per_sample(c, g) * g).sum(0));
            return sums;
          }};
}

LayerGradients linear_gradients(const torch::Tensor& input, const torch::Tensor& grad_output, bool has_bias) {
  COHORT_CHECK(input.dim() == grad_output.dim() && (input.dim() == 2 || input.dim() == 3))
      << "linear per-sample gradients take [B, in] or [B, T, in] inputs, got " << input.sizes() << " and "
      << grad_output.sizes();
  const torch::Tensor a = input.dim() == 2 ? input.unsqueeze(1) : input;
  const torch::Tensor g = grad_output.dim() == 2 ? grad_output.unsqueeze(1) : grad_output;
  const int64_t t = a.size(1), in = a.size(2), out = g.size(2);
  torch::Tensor norms;
  if (t == 1) {
    // One position: the gradient is an outer product, whose squared norm is
    // the product of the two vectors' (Goodfellow 2015); no Gram matrices.
    norms = row_squared_norms(a) * row_squared_norms(g);
  } else if (t * t <= in * out) {
    // Ghost norm: ||G^T A||_F^2 = <A A^T, G G^T>, two [T, T] Gram matrices.
    norms = (torch::bmm(a, a.transpose(1, 2)) * torch::bmm(g, g.transpose(1, 2))).sum({1, 2});
  } else {
    norms = row_squared_norms(torch::bmm(g.transpose(1, 2), a));
  }
  const torch::Tensor bias_per_sample = g.sum(1);  // [B, out]
  if (has_bias) norms = norms + row_squared_norms(bias_per_sample);
  return {norms, [a, g, bias_per_sample, has_bias, in, out](const torch::Tensor& c) {
            const torch::Tensor scaled = per_sample(c, g) * g;
            std::vector<torch::Tensor> sums{torch::mm(scaled.reshape({-1, out}).t(), a.reshape({-1, in}))};
            if (has_bias) sums.push_back((per_sample(c, bias_per_sample) * bias_per_sample).sum(0));
            return sums;
          }};
}

LayerGradients conv_gradients(const torch::Tensor& input, const torch::Tensor& grad_output, std::vector<int64_t> kernel,
                              std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                              bool has_bias, int64_t kept_bytes) {
  COHORT_CHECK(input.dim() == 3 || input.dim() == 4) << "Conv1d or Conv2d inputs, got " << input.sizes();
  COHORT_CHECK(grad_output.dim() == input.dim() && grad_output.size(0) == input.size(0))
      << "conv per-sample gradients: input " << input.sizes() << " and output gradient " << grad_output.sizes();
  std::vector<int64_t> weight_shape{grad_output.size(1), input.size(1)};
  weight_shape.insert(weight_shape.end(), kernel.begin(), kernel.end());
  torch::Tensor x = input, g = grad_output;
  if (input.dim() == 3) {  // Conv1d as a Conv2d of height 1
    x = input.unsqueeze(2);
    g = grad_output.unsqueeze(2);
    kernel.insert(kernel.begin(), 1);
    stride.insert(stride.begin(), 1);
    padding.insert(padding.begin(), 0);
    dilation.insert(dilation.begin(), 1);
  }
  const ConvGeometry geometry{kernel, stride, padding, dilation};
  x = x.contiguous();
  g = g.contiguous();
  const int64_t b = x.size(0);
  // Per-sample weight gradients as one grouped convolution: the batch
  // folded into the channels, one group per sample. One call, no unfolded
  // patches: a few plain weight gradients' time.
  const torch::Tensor per_sample_weights = conv_weight_gradient(
      g.reshape({1, -1, g.size(2), g.size(3)}), x.reshape({1, -1, x.size(2), x.size(3)}), geometry, b);
  const torch::Tensor flat_weights = per_sample_weights.reshape({b, -1});
  torch::Tensor norms = row_squared_norms(flat_weights);
  const torch::Tensor bias_per_sample = g.sum({2, 3});  // [B, out]
  if (has_bias) norms = norms + row_squared_norms(bias_per_sample);
  // sum_i c_i dW_i: from the per-sample gradients when they are small
  // enough to keep until the factors are known (one [P, B] x [B] product
  // instead of a convolution backward), else as the weight gradient of the
  // output gradient scaled per sample (the backward plain training runs).
  const bool keep = flat_weights.numel() * int64_t(flat_weights.element_size()) <= kept_bytes;
  const torch::Tensor kept = keep ? flat_weights : torch::Tensor();
  return {norms, [x, g, geometry, bias_per_sample, has_bias, weight_shape, kept](const torch::Tensor& c) {
            std::vector<torch::Tensor> sums{
                kept.defined() ? torch::mv(kept.t(), c.to(kept.dtype())).reshape(weight_shape)
                               : conv_weight_gradient(per_sample(c, g) * g, x, geometry, 1).reshape(weight_shape)};
            if (has_bias) sums.push_back((per_sample(c, bias_per_sample) * bias_per_sample).sum(0));
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
  return materialised_gradients({weight, bias});
}

LayerGradients group_norm_gradients(const torch::Tensor& input, const torch::Tensor& grad_output,
                                    int64_t num_groups, double eps) {
  const int64_t b = input.size(0), channels = input.size(1);
  COHORT_CHECK_EQ(channels % num_groups, 0) << "GroupNorm channels must divide into groups";
  // Sample i's weight gradient of channel c is sum_s g (x - mu) rstd over
  // the channel's positions s, mu and rstd its group's: rstd times one dot
  // product of g with the centred input per (sample, channel), a batched
  // [1, S] x [S, 1] product. One temporary (the centred input, which the
  // variance needs anyway) instead of a normalised copy and the products:
  // the kernel costs about a plain GroupNorm's forward and backward.
  const torch::Tensor grouped = input.reshape({b, num_groups, -1});
  const torch::Tensor centred = grouped - grouped.mean(2, true);
  const double per_group = double(centred.size(2));
  const torch::Tensor rstd = (at::linalg_vector_norm(centred, 2, {2}, true).square() / per_group + eps).rsqrt();
  const torch::Tensor g = grad_output.reshape({b * channels, 1, -1});
  const torch::Tensor dots = torch::bmm(g, centred.reshape({b * channels, -1, 1})).reshape({b, num_groups, -1});
  const torch::Tensor weight = (dots * rstd).reshape({b, channels});
  const torch::Tensor bias = grad_output.reshape({b, channels, -1}).sum(2);
  return materialised_gradients({weight, bias});
}

torch::Tensor clip_factors(const torch::Tensor& squared_norms, double max_grad_norm) {
  COHORT_CHECK_AS(ConfigError, max_grad_norm > 0) << "max grad norm must be positive, got " << max_grad_norm;
  // Opacus's 1e-6 keeps a zero gradient's factor finite.
  return (max_grad_norm / (squared_norms.clamp_min(0).sqrt() + 1e-6)).clamp_max(1.0);
}

torch::Tensor clipped_sum_by_microbatches(const std::vector<torch::Tensor>& parameters, int64_t batch,
                                          const std::function<torch::Tensor(int64_t)>& sample_loss,
                                          double max_grad_norm) {
  const std::vector<torch::Tensor> trainable_params = cohort::trainable(parameters);
  COHORT_CHECK(!trainable_params.empty()) << "no trainable parameters";
  torch::Tensor norms = torch::zeros({batch}, torch::kFloat64);
  for (int64_t i = 0; i < batch; ++i) {
    const torch::Tensor loss = sample_loss(i);
    const auto grads = torch::autograd::grad({loss}, trainable_params, {}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    double squared = 0;
    for (const torch::Tensor& g : grads)
      if (g.defined()) squared += g.to(torch::kFloat64).pow(2).sum().item<double>();
    norms[i] = std::sqrt(squared);
    const double factor = std::min(1.0, max_grad_norm / (std::sqrt(squared) + 1e-6));
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < trainable_params.size(); ++k) {
      if (!grads[k].defined()) continue;
      torch::Tensor& accumulated = trainable_params[k].mutable_grad();
      if (!accumulated.defined()) accumulated = torch::zeros_like(trainable_params[k]);
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
