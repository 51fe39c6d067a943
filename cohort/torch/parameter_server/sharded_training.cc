#include "cohort/torch/parameter_server/sharded_training.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"

namespace cohort {

DType ps_dtype(const at::Tensor& t) {
  COHORT_CHECK_AS(ConfigError, t.device().is_cpu() && t.is_contiguous())
      << "parameter-server variables are contiguous CPU tensors";
  if (t.scalar_type() == torch::kDouble) return DType::f64;
  COHORT_CHECK_AS(ConfigError, t.scalar_type() == torch::kFloat)
      << "parameter-server variables are float32 or float64, not " << t.scalar_type();
  return DType::f32;
}

ShardedTraining::ShardedTraining(ps::Worker& worker, torch::nn::Module& module, ShardedTrainingOptions options,
                                 const std::string& load_dir)
    : worker_(worker), options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.dense != DenseMode::hybrid || options_.worker_engine)
      << "hybrid parameter-server training needs the workers' engine";
  std::vector<ps::VariableSpec> specs;
  std::vector<const void*> initial;
  // PsEmbedding submodules hold no parameters; every parameter is dense.
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    if (options_.dense == DenseMode::hybrid) {
      local_.push_back(item.value());
      continue;
    }
    const at::Tensor& p = item.value();
    const int64_t rows = p.dim() == 0 ? 1 : p.size(0);
    specs.push_back({.name = item.key(), .rows = rows, .cols = rows == 0 ? 1 : std::max<int64_t>(1, p.numel() / rows),
                     .dtype = ps_dtype(p)});
    initial.push_back(p.data_ptr());
    dense_.push_back(p);
    dense_names_.push_back(item.key());
  }
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    auto* table = dynamic_cast<PsEmbeddingImpl*>(item.value().get());
    if (!table) continue;
    const auto& o = table->options();
    specs.push_back({.name = item.key().empty() ? "table" : item.key(), .rows = o.rows, .cols = o.dim,
                     .dtype = o.double_precision ? DType::f64 : DType::f32, .sparse = true, .init = o.init});
    initial.push_back(nullptr);
    table->bind(&worker_, static_cast<uint32_t>(specs.size() - 1));
    tables_.push_back(PsEmbedding(std::dynamic_pointer_cast<PsEmbeddingImpl>(item.value())));
  }
  worker_.declare(specs, initial);
  if (!load_dir.empty() && worker_.options().worker == 0) worker_.load(load_dir);
  worker_.start();
  if (!options_.sync_from_chief) {
    pulled_once_ = options_.dense != DenseMode::servers;  // the members' state arrives from ElasticState
  } else if (options_.dense == DenseMode::hybrid ||
             (options_.dense == DenseMode::summation && options_.worker_engine)) {
    // The workers start from worker 0's dense parameters (in summation mode
    // a server holds the last step's mean gradient, not the parameters, once
    // training has begun).
    torch::NoGradGuard no_grad;
    for (auto& p : options_.dense == DenseMode::hybrid ? local_ : dense_)
      broadcast_(p, {.root = 0, .engine = options_.worker_engine});
    pulled_once_ = true;
  }
}

void ShardedTraining::pull() {
  torch::NoGradGuard no_grad;
  std::vector<ps::Handle> handles;
  for (uint32_t v = 0; v < dense_.size(); ++v) handles.push_back(worker_.pull(v, dense_[v].data_ptr()));
  worker_.wait(handles);
}

void ShardedTraining::begin_step() {
  // Summation mode keeps the parameters local once they are in sync.
  if (options_.dense == DenseMode::servers || !pulled_once_) pull();
  pulled_once_ = true;
}

void ShardedTraining::end_step(torch::optim::Optimizer* local) {
  std::vector<ps::Handle> handles;
  std::vector<at::Tensor> zero_grads;  // kept alive while their pushes copy
  for (uint32_t v = 0; v < dense_.size(); ++v) {
    at::Tensor& p = dense_[v];
    if (options_.dense == DenseMode::summation) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      // The mean gradient of the step's workers lands in .grad().
      at::Tensor g = p.grad().contiguous();
      handles.push_back(worker_.push_pull(v, g.data_ptr(), g.data_ptr()));
      zero_grads.push_back(g);
      if (!g.is_same(p.grad())) p.mutable_grad() = g;
    } else if (p.grad().defined()) {
      at::Tensor g = p.grad().contiguous();
      handles.push_back(worker_.push(v, g.data_ptr()));
    }
  }
  for (PsEmbedding& t : tables_) handles.push_back(t->push_gradients());
  if (options_.dense == DenseMode::summation) {
    // push_pull answers after the step, so the commit goes out first.
    handles.push_back(worker_.end_step());
    worker_.wait(handles);
    COHORT_CHECK(local) << "summation mode steps the program's optimizer";
    local->step();
    return;
  }
  if (options_.dense == DenseMode::hybrid) {
    for (auto& p : local_)
      if (p.grad().defined()) allreduce_(p.grad(), {.op = ReduceOp::avg, .engine = options_.worker_engine});
    COHORT_CHECK(local) << "hybrid mode steps the program's optimizer";
    local->step();
  }
  handles.push_back(worker_.end_step());
  worker_.wait(handles);
}

}  // namespace cohort
