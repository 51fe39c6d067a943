// A pre-LayerNorm GPT transformer block split over a tensor-parallel group,
// Megatron style:
//
//   x = x + Dropout(Attention(LN1(x)))
//   x = x + Dropout(MLP(LN2(x)))
//
//   Attention: qkv = ColumnParallelLinear(d, 3d, chunks = 3): each rank gets
//     Q, K and V of its n_heads / size heads; causal softmax attention per
//     head, locally; proj = RowParallelLinear(d, d, input_is_parallel).
//   MLP: fc = ColumnParallelLinear(d, hidden) -> GELU -> proj =
//     RowParallelLinear(hidden, d, input_is_parallel).
//   LayerNorms are replicated (their gradients come out equal on every rank
//   because the region's backward allreduce makes their inputs' gradients
//   equal).
//
// Per block and step: two allreduces forward, two backward.
//
// Contracts:
// - Input (batch, seq, d_model) on every rank of the group, the same tensor;
//   output the same shape, the same on every rank.
// - n_heads must divide d_model and the group size must divide n_heads and
//   hidden (ConfigError naming them otherwise).
// - Parameter names (named_parameters()): ln1.{weight,bias},
//   attn.qkv.{weight,bias}, attn.proj.{weight,bias}, ln2.{weight,bias},
//   mlp.fc.{weight,bias}, mlp.proj.{weight,bias}. The full qkv weight is
//   (3d, d) with rows [Q; K; V], heads contiguous inside each (GPT-2's
//   c_attn layout). load_full_parameters() (tensor_parallel_module.h) takes
//   those full tensors.
// - Initialisation: the four linear layers draw their full weights from
//   seeds derived from options.seed (derive_seed), so the same seed gives
//   the same block at any tp size. LayerNorm: ones and zeros.
// - Dropout (default off) only acts in training mode. Attention-probability
//   dropout is inside the tp region and draws per rank; residual dropout is
//   outside it and draws the same mask on every rank (a generator seeded
//   from dropout_seed alike on all ranks). A single-process run therefore
//   reproduces a tp run only with dropout off.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/model_parallel/tensor_parallel_region.h"

namespace cohort::models {

struct TransformerBlockOptions {
  int64_t n_heads = 1;
  int64_t mlp_hidden = 0;  // 0: 4 * d_model
  bool bias = true;        // of the four linear layers
  double layer_norm_eps = 1e-5;
  bool gelu_tanh = false;  // GELU's tanh approximation instead of the exact erf form
  double attention_dropout = 0.0;
  double residual_dropout = 0.0;
  uint64_t seed = 0;          // weights
  uint64_t dropout_seed = 0;  // dropout masks
  at::ScalarType dtype = at::kFloat;
  engine::Engine* engine = nullptr;  // the tp group's; null: the thread's current engine
};

// A well-mixed seed for stream `stream` of `seed` (SplitMix64), so that
// layers seeded from one base seed do not share random streams.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

class ParallelSelfAttentionImpl : public torch::nn::Module {
 public:
  ParallelSelfAttentionImpl(int64_t d_model, const TransformerBlockOptions& options);
  // x: (batch, seq, d_model), full on every rank. Causal.
  at::Tensor forward(const at::Tensor& x);

  ColumnParallelLinear qkv{nullptr};
  RowParallelLinear proj{nullptr};

 private:
  int64_t d_model_, local_heads_, head_dim_;
  double attention_dropout_, residual_dropout_;
  at::Generator local_generator_, replicated_generator_;
};
// Module holders as TORCH_MODULE declares them, with the constructor spelt
// out so that options can be passed as a braced list.
class ParallelSelfAttention : public torch::nn::ModuleHolder<ParallelSelfAttentionImpl> {
 public:
  using torch::nn::ModuleHolder<ParallelSelfAttentionImpl>::ModuleHolder;
  ParallelSelfAttention(int64_t d_model, const TransformerBlockOptions& options)
      : ModuleHolder(std::make_shared<ParallelSelfAttentionImpl>(d_model, options)) {}
  using Impl = ParallelSelfAttentionImpl;
};

class ParallelMlpImpl : public torch::nn::Module {
 public:
  ParallelMlpImpl(int64_t d_model, const TransformerBlockOptions& options);
  at::Tensor forward(const at::Tensor& x);

  ColumnParallelLinear fc{nullptr};
  RowParallelLinear proj{nullptr};

 private:
  bool gelu_tanh_;
  double residual_dropout_;
  at::Generator replicated_generator_;
};
class ParallelMlp : public torch::nn::ModuleHolder<ParallelMlpImpl> {
 public:
  using torch::nn::ModuleHolder<ParallelMlpImpl>::ModuleHolder;
  ParallelMlp(int64_t d_model, const TransformerBlockOptions& options)
      : ModuleHolder(std::make_shared<ParallelMlpImpl>(d_model, options)) {}
  using Impl = ParallelMlpImpl;
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t d_model, TransformerBlockOptions options = {});
  at::Tensor forward(const at::Tensor& x);

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  ParallelSelfAttention attn{nullptr};
  ParallelMlp mlp{nullptr};
};
class TransformerBlock : public torch::nn::ModuleHolder<TransformerBlockImpl> {
 public:
  using torch::nn::ModuleHolder<TransformerBlockImpl>::ModuleHolder;
  TransformerBlock(int64_t d_model, TransformerBlockOptions options = {})
      : ModuleHolder(std::make_shared<TransformerBlockImpl>(d_model, options)) {}
  using Impl = TransformerBlockImpl;
};

}  // namespace cohort::models
