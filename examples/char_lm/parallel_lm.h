// The char_lm model on one rank of a dp x pp x tp mesh: its pipeline stage
// (model.h) with tensor-parallel layers, run by a Pipeline over the mesh's
// pp group, gradients averaged over its dp group.
//
//   ct::Mesh mesh({.dp = 2, .pp = 2, .tp = 1});
//   ParallelLm lm(mesh, shape, {.micro_batches = 4});
//   torch::optim::Adam adam(lm.parameters(), 3e-3);   // this rank's shards
//   for (...) {
//     adam.zero_grad();
//     at::Tensor loss = lm.forward_backward(windows);  // this replica's rows
//     adam.step();
//   }
//
// Contracts:
// - Construction and every call are collective over the mesh (all ranks,
//   same shape and options). The weights are the one-rank model's for
//   options.init (model.h: full_parameters), sliced: every mesh starts from
//   the same model.
// - forward_backward(windows): windows is int64 (rows, seq_len + 1), this
//   replica's rows of the global batch (batches.h), the same on the pp and tp
//   ranks of the replica; inputs are the first seq_len columns, targets the
//   last seq_len. Leaves in every parameter's .grad() the gradient of the
//   GLOBAL batch's mean loss (replica means averaged over dp), and returns
//   this replica's mean loss on every rank. pp = 1 and tp = 1 take the same
//   path (a one-stage pipeline, size-1 tp groups).
// - global_loss(): the mean over dp of a replica loss (collective over dp).
// - logits(ids): forward only, full (1, n, vocab) logits on every rank, the
//   same everywhere (replica 0's), for sampling.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "cohort/torch/model_parallel/mesh.h"
#include "cohort/torch/model_parallel/pipeline.h"
#include "examples/char_lm/model.h"

namespace cohort::examples::char_lm {

struct ParallelLmOptions {
  int micro_batches = 1;
  cohort::Schedule schedule = cohort::Schedule::one_f_one_b;
  InitOptions init;  // seed, dtype, perturb
  // Average the gradients over dp in forward_backward(); false when a ZeRO
  // optimizer (--zero) reduce-scatters them itself.
  bool synchronize_gradients = true;
};

class ParallelLm {
 public:
  ParallelLm(cohort::Mesh& mesh, const ModelShape& shape, const ParallelLmOptions& options);
  ~ParallelLm();

  at::Tensor forward_backward(const at::Tensor& windows);
  double global_loss(const at::Tensor& replica_loss);
  at::Tensor logits(const at::Tensor& ids);

  LmStage& stage() { return stage_; }
  std::vector<at::Tensor> parameters() { return stage_->parameters(); }
  cohort::Pipeline& pipeline() { return *pipeline_; }
  const ModelShape& shape() const { return shape_; }

 private:
  cohort::Mesh& mesh_;
  ModelShape shape_;
  ParallelLmOptions options_;
  LmStage stage_{nullptr};
  std::unique_ptr<cohort::Pipeline> pipeline_;
};

}  // namespace cohort::examples::char_lm
