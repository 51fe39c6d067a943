#include "cohort/torch/model_parallel/parallel_linear.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "cohort/common/check.h"

namespace cohort {

FullLinearInit full_linear_init(int64_t in_features, int64_t out_features, bool bias, uint64_t seed,
                                at::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  // torch::nn::Linear's default (kaiming_uniform with a = sqrt(5)) is
  // uniform(-1/sqrt(in), 1/sqrt(in)) for the weight, and the same for the
  // bias. Drawn in float64 so that the values do not depend on `dtype`
  // beyond its rounding.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double bound = in_features > 0 ? 1.0 / std::sqrt(double(in_features)) : 0.0;
  FullLinearInit init;
  init.weight = at::empty({out_features, in_features}, at::kDouble).uniform_(-bound, bound, gen).to(dtype);
  if (bias) init.bias = at::empty({out_features}, at::kDouble).uniform_(-bound, bound, gen).to(dtype);
  return init;
}

namespace {
void check_full(const at::Tensor& weight, const at::Tensor& bias, bool has_bias, int64_t in, int64_t out,
                const char* layer) {
  COHORT_CHECK_AS(ConfigError, weight.defined() && weight.dim() == 2 && weight.size(0) == out && weight.size(1) == in)
      << layer << "::load_full: weight must be (" << out << ", " << in << "), got "
      << (weight.defined() ? weight.sizes() : at::IntArrayRef{});
  COHORT_CHECK_AS(ConfigError, bias.defined() == has_bias)
      << layer << "::load_full: the layer " << (has_bias ? "has" : "has no") << " bias but one was "
      << (bias.defined() ? "given" : "not given");
  if (has_bias) {
    COHORT_CHECK_AS(ConfigError, bias.dim() == 1 && bias.size(0) == out)
        << layer << "::load_full: bias must be (" << out << "), got " << bias.sizes();
  }
}
}  // namespace

// ---- ColumnParallelLinear ----

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in_features, int64_t out_features,
                                                   ColumnParallelLinearOptions options)
    : in_(in_features), out_(out_features), options_(options), group_(TensorParallelGroup::of(options.engine)) {
  COHORT_CHECK_AS(ConfigError, in_features > 0 && out_features > 0)
      << "ColumnParallelLinear: in_features and out_features must be positive, got " << in_features << " and "
      << out_features;
  COHORT_CHECK_AS(ConfigError, options.chunks >= 1 && out_features % options.chunks == 0)
      << "ColumnParallelLinear: out_features = " << out_features << " does not divide into chunks = " << options.chunks;
  divide_evenly(
      out_features / options.chunks, group_.size,
      options.chunks == 1 ? "ColumnParallelLinear out_features" : "ColumnParallelLinear out_features / chunks");
  const FullLinearInit init = full_linear_init(in_features, out_features, options.bias, options.seed, options.dtype);
  weight =
      register_parameter("weight", shard_of(init.weight, shard_spec("weight"), group_, "ColumnParallelLinear weight"));
  if (options.bias)
    bias = register_parameter("bias", shard_of(init.bias, shard_spec("bias"), group_, "ColumnParallelLinear bias"));
}

ShardSpec ColumnParallelLinearImpl::shard_spec(const std::string&) const {
  return ShardSpec{.dim = 0, .chunks = options_.chunks};
}

void ColumnParallelLinearImpl::load_full(const at::Tensor& w, const at::Tensor& b) {
  check_full(w, b, options_.bias, in_, out_, "ColumnParallelLinear");
  torch::NoGradGuard no_grad;
  weight.copy_(shard_of(w, shard_spec("weight"), group_, "ColumnParallelLinear weight"));
  if (options_.bias) bias.copy_(shard_of(b, shard_spec("bias"), group_, "ColumnParallelLinear bias"));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& input) {
  COHORT_CHECK_AS(ConfigError, input.dim() >= 1 && input.size(-1) == in_)
      << "ColumnParallelLinear: input must be (..., " << in_ << "), got " << input.sizes();
  const at::Tensor x = copy_to_tensor_parallel_region(input, group_);
  at::Tensor y = at::linear(x, weight, bias);
  if (!options_.gather_output) return y;
  y = gather_from_tensor_parallel_region(y, group_);
  if (options_.chunks > 1 && group_.size > 1) {
    // Gathered rank-major ([rank][chunk][part]); the full layer is chunk-major.
    const int64_t part = out_ / options_.chunks / group_.size;
    std::vector<int64_t> split = y.sizes().vec();
    split.pop_back();
    const std::vector<int64_t> lead = split;
    split.insert(split.end(), {int64_t(group_.size), options_.chunks, part});
    std::vector<int64_t> full = lead;
    full.push_back(out_);
    y = y.reshape(split).transpose(-3, -2).reshape(full);
  }
  return y;
}

// ---- RowParallelLinear ----

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in_features, int64_t out_features,
                                             RowParallelLinearOptions options)
    : in_(in_features), out_(out_features), options_(options), group_(TensorParallelGroup::of(options.engine)) {
  COHORT_CHECK_AS(ConfigError, in_features > 0 && out_features > 0)
      << "RowParallelLinear: in_features and out_features must be positive, got " << in_features << " and "
      << out_features;
  divide_evenly(in_features, group_.size, "RowParallelLinear in_features");
  const FullLinearInit init = full_linear_init(in_features, out_features, options.bias, options.seed, options.dtype);
  weight =
      register_parameter("weight", shard_of(init.weight, shard_spec("weight"), group_, "RowParallelLinear weight"));
  if (options.bias) bias = register_parameter("bias", init.bias);
}

ShardSpec RowParallelLinearImpl::shard_spec(const std::string& parameter) const {
  if (parameter == "bias") return ShardSpec{};  // added once, after the reduction
  return ShardSpec{.dim = 1, .chunks = 1};
}

void RowParallelLinearImpl::load_full(const at::Tensor& w, const at::Tensor& b) {
  check_full(w, b, options_.bias, in_, out_, "RowParallelLinear");
  torch::NoGradGuard no_grad;
  weight.copy_(shard_of(w, shard_spec("weight"), group_, "RowParallelLinear weight"));
  if (options_.bias) bias.copy_(b);
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& input) {
  const int64_t want = options_.input_is_parallel ? local_in_features() : in_;
  COHORT_CHECK_AS(ConfigError, input.dim() >= 1 && input.size(-1) == want)
      << "RowParallelLinear: input must be (..., " << want << ")"
      << (options_.input_is_parallel ? " (this rank's slice of in_features)" : "") << ", got " << input.sizes();
  const at::Tensor x = options_.input_is_parallel ? input : scatter_to_tensor_parallel_region(input, group_);
  at::Tensor y = reduce_from_tensor_parallel_region(at::linear(x, weight), group_);
  if (options_.bias) y = y + bias;
  return y;
}

}  // namespace cohort
