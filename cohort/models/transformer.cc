#include "cohort/models/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort::models {
namespace {

// Seed streams of the model; blocks use kFirstBlock + layer.
enum ModelStream : uint64_t { kTokens = 1, kPositions = 2, kHead = 3, kDropout = 4, kFirstBlock = 1000 };

void check_model_options(const GptOptions& o) {
  COHORT_CHECK_AS(ConfigError, o.vocab_size > 0 && o.max_seq_len > 0 && o.d_model > 0 && o.n_layers >= 0)
      << "GptOptions: vocab_size, max_seq_len and d_model must be positive and n_layers non-negative, got "
      << o.vocab_size << ", " << o.max_seq_len << ", " << o.d_model << " and " << o.n_layers;
}

}  // namespace

TransformerBlockOptions gpt_block_options(const GptOptions& o, int64_t layer) {
  TransformerBlockOptions b;
  b.n_heads = o.n_heads;
  b.mlp_hidden = o.mlp_hidden;
  b.attention_dropout = o.dropout;
  b.residual_dropout = o.dropout;
  b.seed = derive_seed(o.seed, kFirstBlock + uint64_t(layer));
  b.dropout_seed = derive_seed(derive_seed(o.seed, kDropout), uint64_t(layer));
  b.dtype = o.dtype;
  b.engine = o.engine;
  return b;
}

// ---- embedding ----

GptEmbeddingImpl::GptEmbeddingImpl(const GptOptions& o) {
  check_model_options(o);
  tokens = register_module(
      "tokens",
      VocabParallelEmbedding(
          o.vocab_size, o.d_model,
          {.seed = derive_seed(o.seed, kTokens), .init_std = o.init_std, .dtype = o.dtype, .engine = o.engine}));
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(derive_seed(o.seed, kPositions));
  positions = register_parameter(
      "positions", at::empty({o.max_seq_len, o.d_model}, at::kDouble).normal_(0.0, o.init_std, gen).to(o.dtype));
}

at::Tensor GptEmbeddingImpl::forward(const at::Tensor& ids) {
  COHORT_CHECK_AS(ConfigError, ids.dim() == 2 && ids.size(1) <= positions.size(0))
      << "GptEmbedding: ids must be (batch, seq) with seq <= max_seq_len = " << positions.size(0) << ", got "
      << ids.sizes();
  return tokens->forward(ids) + positions.narrow(0, 0, ids.size(1));
}

// ---- head ----

GptHeadImpl::GptHeadImpl(const GptOptions& o) : engine_(TensorParallelGroup::of(o.engine).engine) {
  check_model_options(o);
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model})));
  ln_f->to(o.dtype);
  lm_head = register_module("lm_head", ColumnParallelLinear(o.d_model, o.vocab_size,
                                                            {.bias = false,
                                                             .gather_output = false,
                                                             .seed = derive_seed(o.seed, kHead),
                                                             .dtype = o.dtype,
                                                             .engine = engine_}));
}

at::Tensor GptHeadImpl::forward(const at::Tensor& hidden) { return lm_head->forward(ln_f->forward(hidden)); }

at::Tensor GptHeadImpl::loss(const at::Tensor& logits, const at::Tensor& targets) {
  return parallel_cross_entropy(logits, targets, {.engine = engine_});
}

// ---- model ----

GptModelImpl::GptModelImpl(const GptOptions& options) {
  GptOptions o = options;
  o.engine = TensorParallelGroup::of(o.engine).engine;  // resolve once for every piece
  embedding = register_module("embedding", GptEmbedding(o));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.n_layers; ++i) blocks->push_back(TransformerBlock(o.d_model, gpt_block_options(o, i)));
  head = register_module("head", GptHead(o));
}

TransformerBlock GptModelImpl::block(int64_t layer) {
  return TransformerBlock(blocks->ptr<TransformerBlockImpl>(size_t(layer)));
}

at::Tensor GptModelImpl::forward(const at::Tensor& ids) {
  at::Tensor h = embedding->forward(ids);
  for (size_t i = 0; i < blocks->size(); ++i) h = blocks->at<TransformerBlockImpl>(i).forward(h);
  return head->forward(h);
}

at::Tensor GptModelImpl::loss(const at::Tensor& ids, const at::Tensor& targets) {
  return head->loss(forward(ids), targets);
}

}  // namespace cohort::models
