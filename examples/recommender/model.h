// The recommender's network: one embedding table for users and items (items
// after users), and a small dense tower over [user, item, user * item].
// With on_servers the table is a PsEmbedding (rows on the parameter
// servers); otherwise a local torch::nn::Embedding filled with the same
// values, for the allreduce comparison.
#pragma once

#include <torch/torch.h>

#include "cohort/torch/parameter_server/ps_embedding.h"

namespace cohort::examples::recommender {

struct RecommenderModelOptions {
  int64_t rows = 0, dim = 64, hidden = 64;
  bool on_servers = true;
  uint64_t seed = 42;
};

// The table's initial values: uniform in +-0.05, a function of the row only.
ps::Initializer table_initializer(uint64_t seed);

class RecommenderImpl : public torch::nn::Module {
 public:
  explicit RecommenderImpl(const RecommenderModelOptions& options);
  // ids: [B, 2] int64 (user row, item row); returns [B] click logits.
  at::Tensor forward(const at::Tensor& ids);

  PsEmbedding table{nullptr};
  torch::nn::Embedding local_table{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Recommender);

}  // namespace cohort::examples::recommender
