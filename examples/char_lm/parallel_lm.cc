#include "examples/char_lm/parallel_lm.h"

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/model_parallel/gradient_sync.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/model_parallel/tensor_parallel_region.h"

namespace cohort::examples::char_lm {
using cohort::MeshAxis;

ParallelLm::ParallelLm(cohort::Mesh& mesh, const ModelShape& shape, const ParallelLmOptions& options)
    : mesh_(mesh), shape_(shape), options_(options) {
  const int pp = mesh.size(MeshAxis::pp), stage = mesh.rank(MeshAxis::pp);
  stage_ = LmStage(
      shape, {.stage = stage, .stages = pp, .tp_engine = &mesh.engine(MeshAxis::tp), .dtype = options.init.dtype});
  // Only this stage's weights are drawn; each tp layer keeps its slice.
  cohort::load_full_parameters(*stage_, full_parameters(shape, options.init, pp, stage));
  pipeline_ = std::make_unique<cohort::Pipeline>(
      stage_, mesh.comm(MeshAxis::pp),
      cohort::PipelineOptions{.micro_batches = options.micro_batches, .schedule = options.schedule});
}

ParallelLm::~ParallelLm() = default;

at::Tensor ParallelLm::forward_backward(const at::Tensor& windows) {
  COHORT_CHECK_AS(ConfigError, windows.dim() == 2 && windows.size(1) >= 2 && windows.scalar_type() == at::kLong)
      << "char_lm: windows must be int64 (rows, seq_len + 1), got " << windows.sizes() << " " << windows.scalar_type();
  const int64_t t = windows.size(1) - 1;
  const at::Tensor inputs = windows.narrow(1, 0, t).contiguous();
  const at::Tensor targets = windows.narrow(1, 1, t).contiguous();
  LmStage stage = stage_;
  const at::Tensor loss = pipeline_->train_step(
      inputs, targets,
      [stage](const at::Tensor& logits, const at::Tensor& y) mutable { return stage->loss(logits, y); });
  // Each replica's gradient is of its rows' mean loss; their average over
  // dp is the global batch's (equal rows per replica).
  if (options_.synchronize_gradients) cohort::synchronize_gradients(stage_->parameters(), mesh_.engine(MeshAxis::dp));
  return loss;
}

double ParallelLm::global_loss(const at::Tensor& replica_loss) {
  const at::Tensor mean = cohort::allreduce(replica_loss.detach().reshape({1}).to(at::kDouble),
                                        {.op = ReduceOp::avg, .engine = &mesh_.engine(MeshAxis::dp)});
  return mean.item<double>();
}

at::Tensor ParallelLm::logits(const at::Tensor& ids) {
  torch::NoGradGuard no_grad;
  // The last stage's vocabulary slice, broadcast over pp by the pipeline...
  const at::Tensor local = pipeline_->forward(ids);
  // ...joined over tp...
  const at::Tensor full =
      cohort::tensor_parallel_gather_last_dim(local, cohort::TensorParallelGroup::of(&mesh_.engine(MeshAxis::tp)));
  // ...and replica 0's everywhere: replicas hold the same weights, but
  // sampling must not depend on their agreeing to the last bit.
  return cohort::broadcast(full, {.root = 0, .engine = &mesh_.engine(MeshAxis::dp)});
}

}  // namespace cohort::examples::char_lm
