#include "cohort/torch/privacy/clipped_gradients.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <optional>
#include <typeinfo>

#include "cohort/common/check.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/privacy/per_sample.h"
#include "cohort/torch/privacy/tensor_parallel_gradients.h"

namespace cohort::privacy {
namespace {

namespace nn = torch::nn;

// The explicit padding of a Conv layer; none for kValid/kSame (they take
// the micro-batch path). The padding option is a variant, whose accessor
// moved from c10:: to std:: in LibTorch 2.
template <size_t D, typename Padding>
std::optional<std::vector<int64_t>> explicit_padding(const Padding& padding) {
#if TORCH_VERSION_MAJOR >= 2
  const auto* array = std::get_if<torch::ExpandingArray<D>>(&padding);
#else
  const auto* array = c10::get_if<torch::ExpandingArray<D>>(&padding);
#endif
  if (array == nullptr) return std::nullopt;
  return std::vector<int64_t>((*array)->begin(), (*array)->end());
}

template <typename Options>
bool zero_padded_plain_conv(const Options& o) {
  return o.groups() == 1 && torch::enumtype::get_enum_name(o.padding_mode()) == "kZeros";
}

// One layer on the kernel path: how to get its per-sample quantities from
// its input and output gradient.
using LayerKernel = std::function<LayerGradients(const torch::Tensor& input, const torch::Tensor& grad_output)>;

template <size_t D, typename ConvImpl>
std::optional<LayerKernel> conv_kernel(const ConvImpl& conv) {
  const auto& o = conv.options;
  const auto padding = explicit_padding<D>(o.padding());
  if (!padding || !zero_padded_plain_conv(o)) return std::nullopt;
  const auto vec = [](const auto& a) { return std::vector<int64_t>(a->begin(), a->end()); };
  return LayerKernel([kernel = vec(o.kernel_size()), stride = vec(o.stride()), padding = *padding,
                      dilation = vec(o.dilation()), bias = o.bias()](const torch::Tensor& x, const torch::Tensor& g) {
    return conv_gradients(x, g, kernel, stride, padding, dilation, bias);
  });
}

// The kernel of a layer with parameters, or none when per_sample.h has no
// kernel for it (as configured).
std::optional<LayerKernel> kernel_of(const nn::Module& layer) {
  if (const auto* column = dynamic_cast<const ColumnParallelLinearImpl*>(&layer)) {
    return LayerKernel([column](const torch::Tensor& x, const torch::Tensor& g) {
      return column_parallel_linear_gradients(*column, x, g);
    });
  }
  if (const auto* row = dynamic_cast<const RowParallelLinearImpl*>(&layer)) {
    return LayerKernel(
        [row](const torch::Tensor& x, const torch::Tensor& g) { return row_parallel_linear_gradients(*row, x, g); });
  }
  if (const auto* linear = dynamic_cast<const nn::LinearImpl*>(&layer)) {
    const bool bias = linear->options.bias();
    return LayerKernel([bias](const torch::Tensor& x, const torch::Tensor& g) {
      // Any leading dimensions between the sample and the features are
      // positions: [B, T, in].
      const int64_t b = x.size(0);
      if (x.dim() == 2) return linear_gradients(x, g, bias);
      return linear_gradients(x.reshape({b, -1, x.size(-1)}), g.reshape({b, -1, g.size(-1)}), bias);
    });
  }
  if (const auto* conv = dynamic_cast<const nn::Conv2dImpl*>(&layer)) return conv_kernel<2>(*conv);
  if (const auto* conv = dynamic_cast<const nn::Conv1dImpl*>(&layer)) return conv_kernel<1>(*conv);
  if (const auto* embedding = dynamic_cast<const nn::EmbeddingImpl*>(&layer)) {
    const auto& o = embedding->options;
    if (o.padding_idx() || o.max_norm()) return std::nullopt;
    return LayerKernel([rows = o.num_embeddings()](const torch::Tensor& x, const torch::Tensor& g) {
      const int64_t b = x.size(0);
      return embedding_gradients(x.reshape({b, -1}), g.reshape({b, -1, g.size(-1)}), rows);
    });
  }
  if (const auto* norm = dynamic_cast<const nn::LayerNormImpl*>(&layer)) {
    const auto& o = norm->options;
    if (!o.elementwise_affine()) return std::nullopt;
    return LayerKernel([dims = int64_t(o.normalized_shape().size()), eps = o.eps()](const torch::Tensor& x,
                                                                                   const torch::Tensor& g) {
      return layer_norm_gradients(x, g, dims, eps);
    });
  }
  if (const auto* norm = dynamic_cast<const nn::GroupNormImpl*>(&layer)) {
    const auto& o = norm->options;
    if (!o.affine()) return std::nullopt;
    return LayerKernel([groups = o.num_groups(), eps = o.eps()](const torch::Tensor& x, const torch::Tensor& g) {
      return group_norm_gradients(x, g, groups, eps);
    });
  }
  return std::nullopt;
}

// A layer without a kernel (or with some parameters frozen): its own
// micro-batches. Sample i's gradient of the layer's parameters is that of
// <layer(x_i), g_i>, with g_i the sample's output gradient from the batched
// backward, so only this layer runs once per sample, not the whole model.
// Materialises [B, parameter] per trainable parameter of the layer.
LayerKernel micro_batch_kernel(nn::AnyModule& layer, std::vector<torch::Tensor> trainable) {
  return [&layer, trainable](const torch::Tensor& x, const torch::Tensor& g) {
    torch::AutoGradMode enable(true);
    std::vector<std::vector<torch::Tensor>> per_parameter(trainable.size());
    for (int64_t i = 0; i < x.size(0); ++i) {
      const torch::Tensor y = layer.forward(x.narrow(0, i, 1));
      const auto grads = torch::autograd::grad({(y * g.narrow(0, i, 1)).sum()}, trainable, {},
                                               /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < trainable.size(); ++k)
        per_parameter[k].push_back(grads[k].defined() ? grads[k] : torch::zeros_like(trainable[k]));
    }
    std::vector<torch::Tensor> stacked;
    for (const auto& samples : per_parameter) stacked.push_back(torch::stack(samples));
    return materialised_gradients(std::move(stacked));
  };
}

struct Leaf {
  nn::AnyModule* module;
  std::optional<LayerKernel> kernel;     // set for the layers with trainable parameters
  std::vector<torch::Tensor> trainable;  // what the kernel's sums are, in order
};

// The layers of a Sequential in forward order, each layer with trainable
// parameters with its kernel (per_sample.h's, the tensor-parallel ones, or
// the layer's own micro-batches); none when the model is not a plain
// torch::nn::Sequential (a subclass may have a forward of its own).
std::optional<std::vector<Leaf>> kernel_plan(nn::Module& module) {
  if (typeid(module) != typeid(nn::SequentialImpl)) return std::nullopt;
  std::vector<Leaf> leaves;
  for (nn::AnyModule& child : dynamic_cast<nn::SequentialImpl&>(module)) {
    const auto parameters = child.ptr()->parameters(/*recurse=*/true);
    std::vector<torch::Tensor> layer_trainable = trainable(parameters);
    if (layer_trainable.empty()) {
      leaves.push_back({&child, std::nullopt, {}});
      continue;
    }
    // A layer's kernel covers all of its parameters; with some frozen, its
    // own micro-batches cover the rest.
    std::optional<LayerKernel> kernel;
    if (layer_trainable.size() == parameters.size()) kernel = kernel_of(*child.ptr());
    if (!kernel) {
      COHORT_CHECK_AS(ConfigError, !splits_over_ranks(*child.ptr()))
          << "private: layer " << child.ptr()->name()
          << " is tensor-parallel but has no per-sample kernel (or has frozen parameters): its per-sample norms "
             "would miss the other ranks' shards";
      kernel = micro_batch_kernel(child, layer_trainable);
    }
    leaves.push_back({&child, std::move(kernel), std::move(layer_trainable)});
  }
  return leaves;
}

ClippedSum by_kernels(const std::vector<Leaf>& leaves, const LossFn& loss, const Batch& batch,
                      double max_grad_norm, Clipping clipping) {
  // The forward, keeping each kernel layer's input and output.
  struct Kept {
    const Leaf* leaf;
    torch::Tensor input, output;
  };
  std::vector<Kept> kept;
  torch::Tensor x = batch.input;
  for (const Leaf& leaf : leaves) {
    torch::Tensor y = leaf.module->forward(x);
    if (leaf.kernel) kept.push_back({&leaf, x.detach(), y});
    x = y;
  }
  const int64_t rows = batch.rows();
  const torch::Tensor mean = loss(x, batch.target);
  ClippedSum result{.loss_sum = mean.item<double>() * double(rows), .output = x.detach()};
  std::vector<torch::Tensor> outputs;
  for (const Kept& k : kept) outputs.push_back(k.output);
  const auto grad_outputs = torch::autograd::grad({mean * double(rows)}, outputs, {}, /*retain_graph=*/false,
                                                  /*create_graph=*/false, /*allow_unused=*/true);

  torch::NoGradGuard no_grad;
  std::vector<LayerGradients> layers;
  torch::Tensor total = torch::zeros({rows}, torch::kFloat64);
  for (size_t i = 0; i < kept.size(); ++i) {
    const torch::Tensor g = grad_outputs[i].defined() ? grad_outputs[i] : torch::zeros_like(kept[i].output);
    layers.push_back((*kept[i].leaf->kernel)(kept[i].input, g));
    total += layers.back().squared_norms.to(torch::kFloat64);
  }
  result.sample_norms = total.sqrt();
  const torch::Tensor flat_factors = clip_factors(total, max_grad_norm);
  // Per layer: C / sqrt(L) each, so that the whole gradient's norm is still
  // at most C (the sensitivity the noise is calibrated to).
  const double layer_norm = max_grad_norm / std::sqrt(double(std::max<size_t>(1, kept.size())));
  for (size_t i = 0; i < kept.size(); ++i) {
    const torch::Tensor factors = clipping == Clipping::flat
                                      ? flat_factors
                                      : clip_factors(layers[i].squared_norms.to(torch::kFloat64), layer_norm);
    const std::vector<torch::Tensor> sums = layers[i].scaled_sum(factors.to(kept[i].output.scalar_type()));
    const std::vector<torch::Tensor>& parameters = kept[i].leaf->trainable;
    COHORT_CHECK_EQ(sums.size(), parameters.size()) << "per-sample kernel of " << kept[i].leaf->module->ptr()->name();
    for (size_t k = 0; k < sums.size(); ++k)
      parameters[k].mutable_grad() = sums[k].to(parameters[k].scalar_type()).reshape(parameters[k].sizes());
  }
  return result;
}

ClippedSum by_micro_batches(nn::Module& module, const ForwardFn& forward, const LossFn& loss, const Batch& batch,
                            double max_grad_norm) {
  const int64_t rows = batch.rows();
  const auto parameters = module.parameters();
  for (const auto& p : parameters)
    if (p.requires_grad()) p.mutable_grad() = torch::zeros_like(p);
  ClippedSum result;
  result.sample_norms = clipped_sum_by_microbatches(
      parameters, rows,
      [&](int64_t i) { return loss(forward(module, batch.input.narrow(0, i, 1)), batch.target.narrow(0, i, 1)); },
      max_grad_norm);
  torch::NoGradGuard no_grad;
  result.output = forward(module, batch.input);
  result.loss_sum = loss(result.output, batch.target).item<double>() * double(rows);
  return result;
}

// Micro-batches of a whole model clip each rank's shard of a
// tensor-parallel layer by its own norm: refused.
void refuse_tensor_parallel_micro_batches(nn::Module& module) {
  for (const auto& child : module.modules(/*include_self=*/true))
    COHORT_CHECK_AS(ConfigError, !splits_over_ranks(*child))
        << "private: the tensor-parallel layer " << child->name() << " is inside a model that is not a "
        << "torch::nn::Sequential (" << module.name() << "): micro-batches of the whole model would clip each rank's "
        << "shard by its own norm; make the model a Sequential so that the tensor-parallel kernels run";
}

}  // namespace

GradientPath gradient_path(nn::Module& module) {
  if (kernel_plan(module)) return GradientPath::kernels;
  refuse_tensor_parallel_micro_batches(module);
  return GradientPath::micro_batches;
}

std::string gradient_path_name(GradientPath path) {
  return path == GradientPath::kernels ? "kernels" : "micro_batches";
}

ClippedSum clipped_gradient_sum(nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                                const Batch& batch, double max_grad_norm, Clipping clipping) {
  COHORT_CHECK_AS(ConfigError, max_grad_norm > 0) << "max grad norm must be positive, got " << max_grad_norm;
  COHORT_CHECK(batch.rows() > 0 && batch.target.defined()) << "clipped_gradient_sum needs rows with targets";
  const auto plan = kernel_plan(module);
  if (plan) return by_kernels(*plan, loss, batch, max_grad_norm, clipping);
  COHORT_CHECK_AS(ConfigError, clipping == Clipping::flat)
      << "per-layer clipping needs per-layer kernels: the model (" << module.name()
      << ") is not a torch::nn::Sequential, whose layers could be stepped through";
  refuse_tensor_parallel_micro_batches(module);
  return by_micro_batches(module, forward, loss, batch, max_grad_norm);
}

}  // namespace cohort::privacy
