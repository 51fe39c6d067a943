#include "cohort/torch/data_parallel/sync_batch_norm.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dims a per-channel statistic reduces over: all but dim 1.
std::vector<int64_t> reduced_dims(int64_t dim) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < dim; ++d) dims.push_back(d);
  return dims;
}

// Shape that broadcasts a (C) vector over an (N, C, *) input.
std::vector<int64_t> channel_shape(int64_t dim, int64_t channels) {
  std::vector<int64_t> shape(size_t(dim), 1);
  shape[1] = channels;
  return shape;
}

// y = (x - mean) * invstd * weight + bias with the global mean and invstd
// (constants of the forward: their dependence on x is in the backward's
// formula). The engine travels as an address because saved_data holds
// IValues only. Without affine parameters, weight and bias are 0-element
// tensors: autograd's Function cannot take undefined tensors as inputs.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd, double count,
                            int64_t engine_address) {
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["engine"] = engine_address;
    const auto shape = channel_shape(input.dim(), mean.size(0));
    at::Tensor scale = weight.numel() > 0 ? invstd * weight : invstd;
    at::Tensor y = (input - mean.view(shape)) * scale.view(shape);
    if (bias.numel() > 0) y.add_(bias.view(shape));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    auto* engine = reinterpret_cast<engine::Engine*>(static_cast<intptr_t>(ctx->saved_data["engine"].toInt()));
    const at::Tensor& dy = grad_outputs[0];
    const int64_t channels = mean.size(0);
    const auto shape = channel_shape(input.dim(), channels);
    const auto dims = reduced_dims(input.dim());

    const at::Tensor x_hat = (input - mean.view(shape)) * invstd.view(shape);
    // float64 sums: they are added over ranks and divided by the global count.
    const at::Tensor sum_dy = dy.sum(at::IntArrayRef(dims), false, at::kDouble);
    const at::Tensor sum_dy_xhat = (dy * x_hat).sum(at::IntArrayRef(dims), false, at::kDouble);

    at::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(1)) grad_weight = sum_dy_xhat.to(weight.scalar_type());
    if (ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.scalar_type());
    if (ctx->needs_input_grad(0)) {
      at::Tensor global = at::cat({sum_dy, sum_dy_xhat}).cpu();
      allreduce_(global, {.op = ReduceOp::sum, .engine = engine});
      global = global.div_(count).to(input.options());
      const at::Tensor mean_dy = global.narrow(0, 0, channels).view(shape);
      const at::Tensor mean_dy_xhat = global.narrow(0, channels, channels).view(shape);
      const at::Tensor scale = weight.numel() > 0 ? invstd * weight : invstd;
      grad_input = (dy - mean_dy - x_hat * mean_dy_xhat) * scale.view(shape);
    }
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SyncBatchNormOptions sync_batch_norm_options(const torch::nn::BatchNormOptions& o, engine::Engine* engine) {
  SyncBatchNormOptions s;
  s.num_features = o.num_features();
  s.eps = o.eps();
  s.momentum = o.momentum().has_value() ? std::optional<double>(*o.momentum()) : std::nullopt;
  s.affine = o.affine();
  s.track_running_stats = o.track_running_stats();
  s.engine = engine;
  return s;
}

SyncBatchNormImpl::SyncBatchNormImpl(const SyncBatchNormOptions& options_) : options(options_) {
  COHORT_CHECK_AS(ConfigError, options.num_features > 0)
      << "SyncBatchNorm: num_features must be positive, got " << options.num_features;
  COHORT_CHECK_AS(ConfigError, options.eps > 0) << "SyncBatchNorm: eps must be positive, got " << options.eps;
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features;
  // Undefined tensors are registered when absent, as BatchNorm does, so the
  // two modules have the same named parameters and buffers.
  if (options.affine) {
    weight = register_parameter("weight", torch::empty({c}));
    bias = register_parameter("bias", torch::empty({c}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", torch::zeros({c}));
    running_var = register_buffer("running_var", torch::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::tensor(int64_t{0}, torch::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
  reset_parameters();
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine) return;
  torch::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "cohort::SyncBatchNorm(" << options.num_features << ", eps=" << options.eps << ", momentum=";
  if (options.momentum)
    stream << *options.momentum;
  else
    stream << "None";
  stream << ", affine=" << (options.affine ? "true" : "false")
         << ", track_running_stats=" << (options.track_running_stats ? "true" : "false") << ')';
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  COHORT_CHECK_AS(ConfigError, input.defined()) << "SyncBatchNorm: input is undefined";
  COHORT_CHECK_AS(ConfigError, input.dim() >= 2 && input.dim() <= 5)
      << "SyncBatchNorm: input must be (N, C, *) with 2 to 5 dims, got sizes " << input.sizes();
  COHORT_CHECK_AS(ConfigError, input.size(1) == options.num_features)
      << "SyncBatchNorm: input has " << input.size(1) << " channels (dim 1), num_features is " << options.num_features;
  COHORT_CHECK_AS(ConfigError, at::isFloatingType(input.scalar_type()))
      << "SyncBatchNorm: input must be floating point, got " << input.scalar_type();

  // BatchNorm's momentum rule, including the cumulative average.
  double factor = options.momentum.value_or(0.0);
  if (is_training() && options.track_running_stats && num_batches_tracked.defined()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!options.momentum) factor = 1.0 / num_batches_tracked.item<double>();
  }
  const bool batch_stats = is_training() || !options.track_running_stats;
  const bool cudnn = at::globalContext().userEnabledCuDNN();
  if (!is_training())
    return at::batch_norm(input, weight, bias, running_mean, running_var, batch_stats, factor, options.eps, cudnn);

  const int64_t channels = options.num_features;
  const int64_t local = input.numel() / channels;  // values per channel here
  engine::Engine& engine = resolve_engine(options.engine);
  if (engine.size() == 1) {
    // BatchNorm's own check (an unbiased variance of one value is undefined).
    COHORT_CHECK_AS(ConfigError, local > 1)
        << "SyncBatchNorm: expected more than 1 value per channel when training, got input sizes " << input.sizes();
    return at::batch_norm(input, weight, bias, running_mean, running_var, true, factor, options.eps, cudnn);
  }

  const auto shape = channel_shape(input.dim(), channels);
  const auto dims = reduced_dims(input.dim());

  at::Tensor stats = at::zeros({2 * channels + 1}, at::TensorOptions().dtype(at::kDouble));
  {
    torch::NoGradGuard no_grad;
    if (local > 0) {
      const at::Tensor x = input.detach();
      const at::Tensor sum = x.sum(at::IntArrayRef(dims), false, at::kDouble);
      // Sum of squares about the rank's own mean k (rounded to x's dtype),
      // converted back with sum x^2 = sum (x-k)^2 + k (2 sum x - n k): the
      // float64 terms are all well conditioned, unlike a raw sum of x^2 in
      // float32.
      const at::Tensor k = (sum / double(local)).to(x.scalar_type());
      const at::Tensor d = x - k.view(shape);
      const at::Tensor kd = k.to(at::kDouble);
      const at::Tensor squares =
          (d * d).sum(at::IntArrayRef(dims), false, at::kDouble) + kd * (2 * sum - double(local) * kd);
      stats.narrow(0, 0, channels).copy_(sum.cpu());
      stats.narrow(0, channels, channels).copy_(squares.cpu());
      stats[2 * channels].fill_(double(local));
    }
  }
  allreduce_(stats, {.op = ReduceOp::sum, .engine = &engine});
  const double count = stats[2 * channels].item<double>();
  COHORT_CHECK_AS(ConfigError, count > 1)
      << "SyncBatchNorm: expected more than 1 value per channel over all " << engine.size()
      << " ranks when training, got " << count << " (input sizes on this rank " << input.sizes() << ')';
  const at::Tensor mean = stats.narrow(0, 0, channels) / count;
  const at::Tensor var = (stats.narrow(0, channels, channels) / count - mean * mean).clamp_min(0);

  if (options.track_running_stats && running_mean.defined()) {
    torch::NoGradGuard no_grad;
    const at::Tensor unbiased = var * (count / (count - 1));
    running_mean.mul_(1 - factor).add_(mean.to(running_mean.options()), factor);
    running_var.mul_(1 - factor).add_(unbiased.to(running_var.options()), factor);
  }

  const at::Tensor invstd = (var + options.eps).rsqrt();
  const at::Tensor none = at::empty({0}, input.options());
  return SyncBatchNormFunction::apply(input, weight.defined() ? weight : none, bias.defined() ? bias : none,
                                      mean.to(input.options()), invstd.to(input.options()), count,
                                      static_cast<int64_t>(reinterpret_cast<intptr_t>(&engine)));
}

torch::nn::Sequential convert_sync_batch_norm(const torch::nn::Sequential& sequential, engine::Engine* engine) {
  COHORT_CHECK_AS(ConfigError, !sequential.is_empty()) << "convert_sync_batch_norm: the Sequential is empty";
  torch::nn::Sequential out;
  const auto names = sequential->named_children();
  size_t i = 0;
  for (const auto& any : *sequential) {
    const std::string& name = names[i++].key();
    const std::shared_ptr<torch::nn::Module> child = any.ptr();
    const torch::nn::BatchNormOptions* bn_options = nullptr;
    const torch::nn::Module* bn = nullptr;
    if (auto* b1 = dynamic_cast<torch::nn::BatchNorm1dImpl*>(child.get())) bn_options = &b1->options, bn = b1;
    if (auto* b2 = dynamic_cast<torch::nn::BatchNorm2dImpl*>(child.get())) bn_options = &b2->options, bn = b2;
    if (auto* b3 = dynamic_cast<torch::nn::BatchNorm3dImpl*>(child.get())) bn_options = &b3->options, bn = b3;
    if (bn_options != nullptr) {
      SyncBatchNorm sync(sync_batch_norm_options(*bn_options, engine));
      torch::NoGradGuard no_grad;
      const auto from_params = bn->named_parameters(false);
      for (auto& p : sync->named_parameters(false)) p.value().copy_(from_params[p.key()]);
      const auto from_buffers = bn->named_buffers(false);
      for (auto& b : sync->named_buffers(false)) b.value().copy_(from_buffers[b.key()]);
      sync->train(bn->is_training());
      out->push_back(name, torch::nn::AnyModule(sync));
    } else {
      out->push_back(name, any);
    }
  }
  return out;
}

}  // namespace cohort
