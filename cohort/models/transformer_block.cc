#include "cohort/models/transformer_block.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "cohort/common/check.h"

namespace cohort::models {

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

// Seed streams of one block; fixed so that checkpoints and comparisons
// across versions keep meaning the same weights.
enum SeedStream : uint64_t {
  kQkv = 1,
  kAttnProj = 2,
  kFc = 3,
  kMlpProj = 4,
  kReplicatedDropout = 5,
  kLocalDropout = 100
};

// Inverted dropout with an explicit generator (at::dropout draws from the
// global one, which rank threads would share and which would not give equal
// masks across a tp group).
at::Tensor dropout(const at::Tensor& x, double p, bool training, at::Generator& gen) {
  if (!training || p == 0.0) return x;
  const at::Tensor keep = at::empty_like(x).bernoulli_(1.0 - p, gen);
  return x * keep / (1.0 - p);
}

void check_options(int64_t d_model, const TransformerBlockOptions& o, const TensorParallelGroup& g) {
  COHORT_CHECK_AS(ConfigError, d_model > 0 && o.n_heads > 0)
      << "TransformerBlock: d_model and n_heads must be positive, got " << d_model << " and " << o.n_heads;
  COHORT_CHECK_AS(ConfigError, d_model % o.n_heads == 0)
      << "TransformerBlock: d_model = " << d_model << " does not divide into n_heads = " << o.n_heads;
  COHORT_CHECK_AS(ConfigError, o.n_heads % g.size == 0)
      << "TransformerBlock: n_heads = " << o.n_heads << " does not divide by the tensor-parallel size " << g.size
      << " (each rank takes whole heads)";
  COHORT_CHECK_AS(ConfigError, o.attention_dropout >= 0 && o.attention_dropout < 1 && o.residual_dropout >= 0 &&
                                   o.residual_dropout < 1)
      << "TransformerBlock: dropout probabilities must lie in [0, 1), got attention " << o.attention_dropout
      << " and residual " << o.residual_dropout;
}

}  // namespace

// ---- attention ----

ParallelSelfAttentionImpl::ParallelSelfAttentionImpl(int64_t d_model, const TransformerBlockOptions& o)
    : d_model_(d_model), attention_dropout_(o.attention_dropout), residual_dropout_(o.residual_dropout) {
  const TensorParallelGroup g = TensorParallelGroup::of(o.engine);
  check_options(d_model, o, g);
  local_heads_ = o.n_heads / g.size;
  head_dim_ = d_model / o.n_heads;
  qkv = register_module("qkv", ColumnParallelLinear(d_model, 3 * d_model,
                                                    {.bias = o.bias,
                                                     .gather_output = false,
                                                     .chunks = 3,
                                                     .seed = derive_seed(o.seed, kQkv),
                                                     .dtype = o.dtype,
                                                     .engine = g.engine}));
  proj = register_module("proj", RowParallelLinear(d_model, d_model,
                                                   {.bias = o.bias,
                                                    .input_is_parallel = true,
                                                    .seed = derive_seed(o.seed, kAttnProj),
                                                    .dtype = o.dtype,
                                                    .engine = g.engine}));
  local_generator_ = at::detail::createCPUGenerator(derive_seed(o.dropout_seed, kLocalDropout + uint64_t(g.rank)));
  replicated_generator_ = at::detail::createCPUGenerator(derive_seed(o.dropout_seed, kReplicatedDropout));
}

at::Tensor ParallelSelfAttentionImpl::forward(const at::Tensor& x) {
  COHORT_CHECK_AS(ConfigError, x.dim() == 3 && x.size(2) == d_model_)
      << "ParallelSelfAttention: input must be (batch, seq, " << d_model_ << "), got " << x.sizes();
  const int64_t batch = x.size(0), seq = x.size(1);
  // This rank's [Q | K | V] for its heads: (batch, seq, 3 * local_heads * head_dim).
  const std::vector<at::Tensor> qkv_parts = qkv->forward(x).chunk(3, -1);
  auto heads = [&](const at::Tensor& t) {  // -> (batch, local_heads, seq, head_dim)
    return t.reshape({batch, seq, local_heads_, head_dim_}).transpose(1, 2);
  };
  const at::Tensor q = heads(qkv_parts[0]), k = heads(qkv_parts[1]), v = heads(qkv_parts[2]);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(head_dim_));
  const at::Tensor future = at::ones({seq, seq}, at::TensorOptions().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1);
  probs = dropout(probs, attention_dropout_, is_training(), local_generator_);
  const at::Tensor context = at::matmul(probs, v).transpose(1, 2).reshape({batch, seq, local_heads_ * head_dim_});
  return dropout(proj->forward(context), residual_dropout_, is_training(), replicated_generator_);
}

// ---- MLP ----

ParallelMlpImpl::ParallelMlpImpl(int64_t d_model, const TransformerBlockOptions& o)
    : gelu_tanh_(o.gelu_tanh), residual_dropout_(o.residual_dropout) {
  const TensorParallelGroup g = TensorParallelGroup::of(o.engine);
  const int64_t hidden = o.mlp_hidden > 0 ? o.mlp_hidden : 4 * d_model;
  fc = register_module("fc", ColumnParallelLinear(d_model, hidden,
                                                  {.bias = o.bias,
                                                   .gather_output = false,
                                                   .seed = derive_seed(o.seed, kFc),
                                                   .dtype = o.dtype,
                                                   .engine = g.engine}));
  proj = register_module("proj", RowParallelLinear(hidden, d_model,
                                                   {.bias = o.bias,
                                                    .input_is_parallel = true,
                                                    .seed = derive_seed(o.seed, kMlpProj),
                                                    .dtype = o.dtype,
                                                    .engine = g.engine}));
  // A stream other than the attention's residual dropout.
  replicated_generator_ = at::detail::createCPUGenerator(derive_seed(o.dropout_seed, kReplicatedDropout + 1000));
}

at::Tensor ParallelMlpImpl::forward(const at::Tensor& x) {
  const at::Tensor h = at::gelu(fc->forward(x), gelu_tanh_ ? "tanh" : "none");
  return dropout(proj->forward(h), residual_dropout_, is_training(), replicated_generator_);
}

// ---- block ----

TransformerBlockImpl::TransformerBlockImpl(int64_t d_model, TransformerBlockOptions options) {
  if (options.engine == nullptr) options.engine = TensorParallelGroup::of(nullptr).engine;
  check_options(d_model, options, TensorParallelGroup::of(options.engine));
  ln1 = register_module("ln1",
                        torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model}).eps(options.layer_norm_eps)));
  attn = register_module("attn", ParallelSelfAttention(d_model, options));
  ln2 = register_module("ln2",
                        torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model}).eps(options.layer_norm_eps)));
  mlp = register_module("mlp", ParallelMlp(d_model, options));
  ln1->to(options.dtype);
  ln2->to(options.dtype);
}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x) {
  at::Tensor h = x + attn->forward(ln1->forward(x));
  return h + mlp->forward(ln2->forward(h));
}

}  // namespace cohort::models
