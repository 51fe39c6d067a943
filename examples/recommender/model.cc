#include "examples/recommender/model.h"

namespace cohort::examples::recommender {

ps::Initializer table_initializer(uint64_t seed) { return ps::Initializer::uniform(-0.05, 0.05, seed); }

RecommenderImpl::RecommenderImpl(const RecommenderModelOptions& o) {
  if (o.on_servers) {
    table = register_module("table", PsEmbedding(PsEmbeddingOptions{.rows = o.rows, .dim = o.dim,
                                                                      .init = table_initializer(o.seed)}));
  } else {
    local_table = register_module("local_table", torch::nn::Embedding(o.rows, o.dim));
    torch::NoGradGuard no_grad;
    table_initializer(o.seed).fill(DType::f32, 0, o.rows, o.dim, local_table->weight.data_ptr());
  }
  torch::manual_seed(static_cast<int64_t>(o.seed));
  fc1 = register_module("fc1", torch::nn::Linear(3 * o.dim, o.hidden));
  fc2 = register_module("fc2", torch::nn::Linear(o.hidden, 1));
}

at::Tensor RecommenderImpl::forward(const at::Tensor& ids) {
  const at::Tensor e = table ? table->forward(ids) : local_table->forward(ids);  // [B, 2, dim]
  const at::Tensor user = e.select(1, 0), item = e.select(1, 1);
  const at::Tensor x = torch::cat({user, item, user * item}, 1);
  return fc2->forward(torch::relu(fc1->forward(x))).squeeze(1);
}

}  // namespace cohort::examples::recommender
