// A small GPT-style language model built from the tensor-parallel layers,
// in three separately constructible pieces so that pipeline stages can each
// build only theirs and still get the weights of the whole model:
//
//   GptEmbedding  token embedding (VocabParallelEmbedding) + learned
//                 positions (replicated): ids (batch, seq) -> (batch, seq, d)
//   blocks        n_layers TransformerBlocks; layer i is
//                 TransformerBlock(d_model, gpt_block_options(options, i))
//   GptHead       final LayerNorm + LM head (ColumnParallelLinear, no bias,
//                 no gather): -> vocab-parallel logits (batch, seq, vocab / tp),
//                 and loss() = parallel_cross_entropy over them
//
//   GptModel model(GptOptions{.vocab_size = 64, .max_seq_len = 32, .d_model = 64,
//                             .n_layers = 2, .n_heads = 4, .engine = &tp});
//   at::Tensor loss = model->loss(ids, targets);   // mean over tokens
//
// Contracts:
// - Weights come from options.seed through fixed derived streams (embedding,
//   positions, each layer, head), so the same options give the same full
//   model at any tp size and whether built as GptModel or piece by piece.
//   Parameter names: embedding.tokens.weight, embedding.positions,
//   blocks.<i>.<block names>, head.ln_f.{weight,bias}, head.lm_head.weight.
// - vocab_size, n_heads and the MLP width must divide by the tp size.
// - Sequences may be shorter than max_seq_len, not longer (ConfigError).
// - Collective over the tp group like the layers it is made of.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "cohort/models/transformer_block.h"
#include "cohort/torch/model_parallel/parallel_cross_entropy.h"
#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/model_parallel/vocab_parallel_embedding.h"

namespace cohort::models {

struct GptOptions {
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  int64_t d_model = 0;
  int64_t n_layers = 1;
  int64_t n_heads = 1;
  int64_t mlp_hidden = 0;  // 0: 4 * d_model
  double dropout = 0.0;    // attention and residual dropout of every block
  double init_std = 0.02;  // token and position embeddings (GPT-2's)
  uint64_t seed = 0;
  at::ScalarType dtype = at::kFloat;
  engine::Engine* engine = nullptr;  // the tp group's; null: the thread's current engine
};

// The options of layer `layer` of the model (its seeds derived from options.seed).
TransformerBlockOptions gpt_block_options(const GptOptions& options, int64_t layer);

class GptEmbeddingImpl : public torch::nn::Module {
 public:
  explicit GptEmbeddingImpl(const GptOptions& options);
  at::Tensor forward(const at::Tensor& ids);  // (batch, seq) int64 -> (batch, seq, d_model)

  VocabParallelEmbedding tokens{nullptr};
  at::Tensor positions;  // (max_seq_len, d_model), replicated
};
// Module holders as TORCH_MODULE declares them, with the constructor spelt
// out so that options can be passed as a braced list.
class GptEmbedding : public torch::nn::ModuleHolder<GptEmbeddingImpl> {
 public:
  using torch::nn::ModuleHolder<GptEmbeddingImpl>::ModuleHolder;
  explicit GptEmbedding(const GptOptions& options) : ModuleHolder(std::make_shared<GptEmbeddingImpl>(options)) {}
  using Impl = GptEmbeddingImpl;
};

class GptHeadImpl : public torch::nn::Module {
 public:
  explicit GptHeadImpl(const GptOptions& options);
  // (batch, seq, d_model) -> this rank's logits (batch, seq, vocab_size / tp).
  at::Tensor forward(const at::Tensor& hidden);
  // Mean cross-entropy of vocab-parallel logits against targets (batch, seq).
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets);

  torch::nn::LayerNorm ln_f{nullptr};
  ColumnParallelLinear lm_head{nullptr};

 private:
  engine::Engine* engine_;
};
class GptHead : public torch::nn::ModuleHolder<GptHeadImpl> {
 public:
  using torch::nn::ModuleHolder<GptHeadImpl>::ModuleHolder;
  explicit GptHead(const GptOptions& options) : ModuleHolder(std::make_shared<GptHeadImpl>(options)) {}
  using Impl = GptHeadImpl;
};

class GptModelImpl : public torch::nn::Module {
 public:
  explicit GptModelImpl(const GptOptions& options);
  at::Tensor forward(const at::Tensor& ids);  // vocab-parallel logits
  at::Tensor loss(const at::Tensor& ids, const at::Tensor& targets);
  TransformerBlock block(int64_t layer);  // blocks[layer]

  GptEmbedding embedding{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  GptHead head{nullptr};
};
class GptModel : public torch::nn::ModuleHolder<GptModelImpl> {
 public:
  using torch::nn::ModuleHolder<GptModelImpl>::ModuleHolder;
  explicit GptModel(const GptOptions& options) : ModuleHolder(std::make_shared<GptModelImpl>(options)) {}
  using Impl = GptModelImpl;
};

}  // namespace cohort::models
