#include "cohort/torch/model_parallel/vocab_parallel_embedding.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort {

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t embedding_dim,
                                                       VocabParallelEmbeddingOptions options)
    : vocab_(vocab_size),
      dim_(embedding_dim),
      start_(0),
      options_(options),
      group_(TensorParallelGroup::of(options.engine)) {
  COHORT_CHECK_AS(ConfigError, vocab_size > 0 && embedding_dim > 0)
      << "VocabParallelEmbedding: vocab_size and embedding_dim must be positive, got " << vocab_size << " and "
      << embedding_dim;
  const int64_t part = divide_evenly(vocab_size, group_.size, "VocabParallelEmbedding vocab_size");
  start_ = group_.rank * part;
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  const at::Tensor full =
      at::empty({vocab_size, embedding_dim}, at::kDouble).normal_(0.0, options.init_std, gen).to(options.dtype);
  weight = register_parameter("weight", shard_of(full, shard_spec("weight"), group_, "VocabParallelEmbedding weight"));
}

ShardSpec VocabParallelEmbeddingImpl::shard_spec(const std::string&) const { return ShardSpec{.dim = 0, .chunks = 1}; }

void VocabParallelEmbeddingImpl::load_full(const at::Tensor& w) {
  COHORT_CHECK_AS(ConfigError, w.defined() && w.dim() == 2 && w.size(0) == vocab_ && w.size(1) == dim_)
      << "VocabParallelEmbedding::load_full: weight must be (" << vocab_ << ", " << dim_ << "), got "
      << (w.defined() ? w.sizes() : at::IntArrayRef{});
  torch::NoGradGuard no_grad;
  weight.copy_(shard_of(w, shard_spec("weight"), group_, "VocabParallelEmbedding weight"));
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  COHORT_CHECK_AS(ConfigError, ids.scalar_type() == at::kLong)
      << "VocabParallelEmbedding: ids must be int64, got " << ids.scalar_type();
  if (ids.numel() > 0) {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    COHORT_CHECK_AS(ConfigError, lo >= 0 && hi < vocab_)
        << "VocabParallelEmbedding: ids must lie in [0, " << vocab_ << "), got values in [" << lo << ", " << hi << "]";
  }
  const at::Tensor foreign = (ids < start_).logical_or(ids >= vocab_end());
  // Foreign ids look up row 0 (any valid row) and are zeroed after, so that
  // their gradient is zero too; the owning rank supplies their embedding.
  const at::Tensor local_ids = (ids - start_).masked_fill(foreign, 0);
  const at::Tensor partial = at::embedding(weight, local_ids).masked_fill(foreign.unsqueeze(-1), 0.0);
  return reduce_from_tensor_parallel_region(partial, group_);
}

}  // namespace cohort
