// An embedding table split by vocabulary over a tensor-parallel group
// (Megatron's VocabParallelEmbedding): rank r owns the contiguous rows
// [r * vocab / size, (r + 1) * vocab / size). Each rank looks up the ids it
// owns, gives zeros for the others, and the partial results are summed over
// the group (one allreduce forward, none backward), so every rank gets the
// full (..., dim) embeddings.
//
// Contracts:
// - vocab_size must divide by the group size (ConfigError otherwise: pad the
//   vocabulary, as Megatron does). Ids are int64 in [0, vocab_size); ids out
//   of range on every rank are a ConfigError (checked on this rank's input).
// - Initialisation is normal(0, init_std) (torch::nn::Embedding's is std 1) drawn
//   for the FULL table from options.seed with a private generator; each rank
//   keeps its rows, so the model is the same at any tp size.
// - Every rank of the group must call forward with the same ids, in the same
//   order as its other tp ops.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>

#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/model_parallel/tensor_parallel_region.h"

namespace cohort {

struct VocabParallelEmbeddingOptions {
  uint64_t seed = 0;
  double init_std = 1.0;  // torch::nn::Embedding's; GPT-2 uses 0.02
  at::ScalarType dtype = at::kFloat;
  engine::Engine* engine = nullptr;  // the tp group's; null: the thread's current engine
};

class VocabParallelEmbeddingImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t embedding_dim, VocabParallelEmbeddingOptions options = {});

  // ids: int64 of any shape; returns (ids.shape..., embedding_dim).
  at::Tensor forward(const at::Tensor& ids);
  // The full (vocab_size, embedding_dim) table.
  void load_full(const at::Tensor& weight);

  ShardSpec shard_spec(const std::string& parameter) const override;
  const TensorParallelGroup& group() const override { return group_; }

  at::Tensor weight;  // (vocab_size / size, embedding_dim)
  int64_t vocab_size() const { return vocab_; }
  int64_t vocab_start() const { return start_; }  // first id this rank owns
  int64_t vocab_end() const { return start_ + vocab_ / group_.size; }

 private:
  int64_t vocab_, dim_, start_;
  VocabParallelEmbeddingOptions options_;
  TensorParallelGroup group_;
};
// Module holders as TORCH_MODULE declares them, with the constructor spelt
// out so that options can be passed as a braced list.
class VocabParallelEmbedding : public torch::nn::ModuleHolder<VocabParallelEmbeddingImpl> {
 public:
  using torch::nn::ModuleHolder<VocabParallelEmbeddingImpl>::ModuleHolder;
  VocabParallelEmbedding(int64_t vocab_size, int64_t embedding_dim, VocabParallelEmbeddingOptions options = {})
      : ModuleHolder(std::make_shared<VocabParallelEmbeddingImpl>(vocab_size, embedding_dim, options)) {}
  using Impl = VocabParallelEmbeddingImpl;
};

}  // namespace cohort
