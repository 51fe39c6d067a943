// PsEmbedding: an embedding table that lives on the parameter servers.
//
// Nothing of the table is held by the worker: forward(ids) deduplicates the
// batch's ids, pulls those rows (ps::Worker::pull_rows), and returns the
// lookup as a differentiable function of the pulled rows; after backward,
// push_gradients() pushes each touched row's summed gradient
// (ps::Worker::push_rows), where the server's optimizer updates only those
// rows. A table of 10 M x 64 float32 rows (2.5 GB) costs a worker only the
// rows of its batch.
//
// The table is declared (and generated on the servers, by the options'
// Initializer) by ShardedTraining (sharded_training.h), which binds it to
// its worker; an unbound table throws on forward.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "cohort/parameter_server/handle.h"
#include "cohort/parameter_server/layout.h"

namespace cohort::ps {
class Worker;
}

namespace cohort {

struct PsEmbeddingOptions {
  int64_t rows = 0;
  int64_t dim = 0;
  // How the servers fill the table: Normal(0, 0.01) like a recommender's
  // tables, reproducible for any number of servers.
  ps::Initializer init = ps::Initializer::normal(0.0, 0.01, 1);
  bool double_precision = false;  // float64 rows (tests); float32 otherwise
};

class PsEmbeddingImpl : public torch::nn::Module {
 public:
  explicit PsEmbeddingImpl(PsEmbeddingOptions options);

  // ids: int64, any shape; returns ids.sizes() + [dim].
  at::Tensor forward(const at::Tensor& ids);

  // Pushes the gradients of this step's lookups (merged per row) and
  // forgets them. A lookup whose rows got no gradient pushes nothing.
  ps::Handle push_gradients();

  void bind(ps::Worker* worker, uint32_t variable);
  bool bound() const { return worker_ != nullptr; }
  const PsEmbeddingOptions& options() const { return options_; }
  // Rows pulled by lookups since the last push (for byte counts).
  int64_t pending_rows() const;

 private:
  struct Lookup {
    std::vector<int64_t> rows;  // distinct, ascending
    at::Tensor weights;         // rows x dim, a leaf the lookup differentiates
  };
  PsEmbeddingOptions options_;
  ps::Worker* worker_ = nullptr;
  uint32_t variable_ = 0;
  std::vector<Lookup> lookups_;
};

TORCH_MODULE(PsEmbedding);

}  // namespace cohort
