// The char_lm model: a GPT-style character transformer, and its split into
// pipeline stages whose layers are tensor-parallel.
//
//   h = tokens[ids] + positions[:T]                            (stage 0)
//   per block: h += attn.proj(attention(attn.qkv(ln1(h))))
//              h += mlp.proj(gelu(mlp.fc(ln2(h))))
//   logits = lm_head(ln_f(h)); loss = cross_entropy(logits, targets)  (last stage)
//
// The pieces are cohort::models' GPT assembly (transformer.h): GptEmbedding
// on the first stage, TransformerBlocks (pre-LayerNorm, causal, exact GELU,
// no dropout, so that every mesh computes the same function), GptHead on the
// last stage with its vocabulary-split logits and parallel_cross_entropy.
// Tensor parallelism is Megatron's: token embedding, heads, MLP units and
// the head's vocabulary are split over tp; LayerNorms and positions are
// replicated.
//
// Parameter names are the same in every stage and mesh as in the one-rank
// model ("embedding.tokens.weight", "block2.mlp.fc.bias",
// "head.lm_head.weight", ...): blocks are registered under their global
// index. full_parameters() draws the full (unsplit) weights from a seed,
// name by name with private generators, so a rank draws only what its stage
// holds and any mesh starts from the same model; load_full_parameters()
// (tensor_parallel_module.h) slices them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "cohort/engine/engine.h"
#include "cohort/models/transformer.h"
#include "cohort/models/transformer_block.h"

namespace cohort::examples::char_lm {

struct ModelShape {
  int64_t vocab = 0;  // padded: a multiple of the tp degree
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 4;
  int64_t seq_len = 64;  // the longest context (position embeddings)
};

// Blocks [begin, end) of stage `stage` of `stages`: an even split, the first
// (layers % stages) stages taking one more.
struct BlockRange {
  int64_t begin = 0;
  int64_t end = 0;
};
BlockRange stage_blocks(int64_t layers, int stages, int stage);

using FullParameters = std::map<std::string, at::Tensor>;

struct InitOptions {
  uint64_t seed = 42;
  at::ScalarType dtype = at::kFloat;
  // GPT-2's initialisation (weights N(0, 0.02), output projections scaled
  // by 1/sqrt(2 layers), biases 0, LayerNorm gains 1). `perturb` makes
  // biases and gains random too, so that tests see every term's gradient.
  bool perturb = false;
};

// The full parameters of the one-rank model; with `only_stage` >= 0, only
// those of that stage of `stages` (the same values as in the whole model).
FullParameters full_parameters(const ModelShape& shape, const InitOptions& options, int stages = 1,
                               int only_stage = -1);

struct StageOptions {
  int stage = 0;
  int stages = 1;
  engine::Engine* tp_engine = nullptr;  // the tensor-parallel group's; null: the thread's current engine
  at::ScalarType dtype = at::kFloat;
};

// One pipeline stage of the model on one tensor-parallel rank.
class LmStageImpl : public torch::nn::Module {
 public:
  LmStageImpl(const ModelShape& shape, const StageOptions& options);

  bool first() const { return options_.stage == 0; }
  bool last() const { return options_.stage == options_.stages - 1; }
  // First stage: int64 ids (B, T); other stages: activations (B, T, d).
  // Last stage: this rank's vocabulary slice of the logits (B, T, vocab/tp);
  // other stages: activations (B, T, d).
  at::Tensor forward(const at::Tensor& input);
  // Mean cross-entropy over all (B, T) positions, from the last stage's
  // vocabulary-split logits (collective over the tp group).
  at::Tensor loss(const at::Tensor& local_logits, const at::Tensor& targets);

  const ModelShape& shape() const { return shape_; }
  const StageOptions& options() const { return options_; }

 private:
  ModelShape shape_;
  StageOptions options_;
  BlockRange blocks_;
  cohort::models::GptEmbedding embedding_{nullptr};  // first stage
  std::vector<cohort::models::TransformerBlock> block_list_;
  cohort::models::GptHead head_{nullptr};  // last stage
};

// The module holder (TORCH_MODULE cannot be used inside a namespace that has
// its own `torch`; an explicit constructor also takes braced options).
class LmStage : public torch::nn::ModuleHolder<LmStageImpl> {
 public:
  using Impl = LmStageImpl;
  LmStage(std::nullptr_t) : ModuleHolder(nullptr) {}
  LmStage(const ModelShape& shape, const StageOptions& options)
      : ModuleHolder(std::make_shared<LmStageImpl>(shape, options)) {}
};

// The one-rank model evaluated directly on full parameters with plain
// LibTorch ops (no cohort layer, no communication): the tests' reference.
// ids (B, T) -> logits (B, T, vocab).
at::Tensor dense_logits(const FullParameters& p, const ModelShape& shape, const at::Tensor& ids);
at::Tensor dense_loss(const FullParameters& p, const ModelShape& shape, const at::Tensor& ids,
                      const at::Tensor& targets);

}  // namespace cohort::examples::char_lm
