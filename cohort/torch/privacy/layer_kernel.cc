#include "cohort/torch/privacy/layer_kernel.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <cctype>

#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/privacy/tensor_parallel_gradients.h"

namespace cohort::privacy {
namespace {

namespace nn = torch::nn;

// The explicit padding of a Conv layer; none for kValid/kSame. The padding
// option is a variant, whose accessor moved from c10:: to std:: in
// LibTorch 2.
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

// "reflect" of LibTorch's kReflect.
std::string enum_word(std::string name) {
  if (name.size() > 1 && name[0] == 'k') name = name.substr(1);
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// Every call's tensors as [B, positions, last] (indices: [B, positions]),
// concatenated along the positions.
LayerCall join_positions(const std::vector<LayerCall>& calls, bool indices) {
  std::vector<torch::Tensor> inputs, grads;
  for (const LayerCall& call : calls) {
    const int64_t b = call.input.size(0);
    inputs.push_back(indices ? call.input.reshape({b, -1}) : call.input.reshape({b, -1, call.input.size(-1)}));
    grads.push_back(call.grad_output.reshape({b, -1, call.grad_output.size(-1)}));
  }
  return {torch::cat(inputs, 1), torch::cat(grads, 1)};
}

LayerCall join_features(const std::vector<LayerCall>& calls) { return join_positions(calls, false); }
LayerCall join_indices(const std::vector<LayerCall>& calls) { return join_positions(calls, true); }

template <size_t D, typename ConvImpl>
std::optional<LayerKernel> conv_kernel(const ConvImpl& conv, const char* type, std::string* why) {
  const auto& o = conv.options;
  const auto padding = explicit_padding<D>(o.padding());
  const std::string mode = enum_word(torch::enumtype::get_enum_name(o.padding_mode()));
  if (!padding) *why = std::string(type) + " with 'same' or 'valid' padding";
  else if (o.groups() != 1) *why = std::string(type) + " with groups " + std::to_string(o.groups());
  else if (mode != "zeros") *why = std::string(type) + " with " + mode + " padding";
  if (!padding || o.groups() != 1 || mode != "zeros") return std::nullopt;
  const auto vec = [](const auto& a) { return std::vector<int64_t>(a->begin(), a->end()); };
  return LayerKernel{[kernel = vec(o.kernel_size()), stride = vec(o.stride()), padding = *padding,
                      dilation = vec(o.dilation()), bias = o.bias()](const torch::Tensor& x, const torch::Tensor& g) {
                       return conv_gradients(x, g, kernel, stride, padding, dilation, bias);
                     },
                     {}};
}

}  // namespace

std::optional<LayerKernel> kernel_of(const nn::Module& layer, std::string* why) {
  if (const auto* column = dynamic_cast<const ColumnParallelLinearImpl*>(&layer)) {
    return LayerKernel{[column](const torch::Tensor& x, const torch::Tensor& g) {
                         return column_parallel_linear_gradients(*column, x, g);
                       },
                       &join_features};
  }
  if (const auto* row = dynamic_cast<const RowParallelLinearImpl*>(&layer)) {
    return LayerKernel{
        [row](const torch::Tensor& x, const torch::Tensor& g) { return row_parallel_linear_gradients(*row, x, g); },
        &join_features};
  }
  if (const auto* linear = dynamic_cast<const nn::LinearImpl*>(&layer)) {
    const bool bias = linear->options.bias();
    return LayerKernel{[bias](const torch::Tensor& x, const torch::Tensor& g) {
                         // Any leading dimensions between the sample and the
                         // features are positions: [B, T, in].
                         const int64_t b = x.size(0);
                         if (x.dim() == 2) return linear_gradients(x, g, bias);
                         return linear_gradients(x.reshape({b, -1, x.size(-1)}), g.reshape({b, -1, g.size(-1)}), bias);
                       },
                       &join_features};
  }
  if (const auto* conv = dynamic_cast<const nn::Conv2dImpl*>(&layer)) return conv_kernel<2>(*conv, "Conv2d", why);
  if (const auto* conv = dynamic_cast<const nn::Conv1dImpl*>(&layer)) return conv_kernel<1>(*conv, "Conv1d", why);
  if (const auto* embedding = dynamic_cast<const nn::EmbeddingImpl*>(&layer)) {
    const auto& o = embedding->options;
    if (o.padding_idx() || o.max_norm()) {
      *why = o.padding_idx() ? "Embedding with padding_idx" : "Embedding with max_norm";
      return std::nullopt;
    }
    return LayerKernel{[rows = o.num_embeddings()](const torch::Tensor& x, const torch::Tensor& g) {
                         const int64_t b = x.size(0);
                         return embedding_gradients(x.reshape({b, -1}), g.reshape({b, -1, g.size(-1)}), rows);
                       },
                       &join_indices};
  }
  if (const auto* norm = dynamic_cast<const nn::LayerNormImpl*>(&layer)) {
    const auto& o = norm->options;
    if (!o.elementwise_affine()) {
      *why = "LayerNorm without affine parameters";
      return std::nullopt;
    }
    return LayerKernel{
        [dims = int64_t(o.normalized_shape().size()), eps = o.eps()](const torch::Tensor& x, const torch::Tensor& g) {
          return layer_norm_gradients(x, g, dims, eps);
        },
        {}};
  }
  if (const auto* norm = dynamic_cast<const nn::GroupNormImpl*>(&layer)) {
    const auto& o = norm->options;
    if (!o.affine()) {
      *why = "GroupNorm without affine parameters";
      return std::nullopt;
    }
    return LayerKernel{[groups = o.num_groups(), eps = o.eps()](const torch::Tensor& x, const torch::Tensor& g) {
                         return group_norm_gradients(x, g, groups, eps);
                       },
                       {}};
  }
  *why = "no kernel for " + layer.name();
  return std::nullopt;
}

}  // namespace cohort::privacy
