#include "cohort/torch/parameter_server/ps_embedding.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/parameter_server/sparse.h"
#include "cohort/parameter_server/worker.h"

namespace cohort {

PsEmbeddingImpl::PsEmbeddingImpl(PsEmbeddingOptions options) : options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.rows > 0 && options_.dim > 0)
      << "PsEmbedding needs rows > 0 and dim > 0 (got " << options_.rows << " x " << options_.dim << ")";
}

at::Tensor PsEmbeddingImpl::forward(const at::Tensor& ids) {
  COHORT_CHECK_AS(ConfigError, worker_) << "PsEmbedding used before the parameter_server strategy bound it to "
                                        << "the servers (prepare the strategy first)";
  COHORT_CHECK_AS(ConfigError, ids.scalar_type() == torch::kLong && ids.device().is_cpu())
      << "PsEmbedding takes int64 ids on the CPU";
  const at::Tensor flat = ids.contiguous().view({-1});
  const ps::SparseBatch batch = ps::deduplicate({flat.data_ptr<int64_t>(), static_cast<size_t>(flat.numel())});
  COHORT_CHECK_AS(ConfigError, batch.rows.empty() || (batch.rows.front() >= 0 && batch.rows.back() < options_.rows))
      << "PsEmbedding ids must be in [0, " << options_.rows << ")";
  const auto dtype = options_.double_precision ? torch::kDouble : torch::kFloat;
  at::Tensor weights = torch::empty({static_cast<int64_t>(batch.rows.size()), options_.dim}, dtype);
  // Through the worker: in an elastic job it gives up with the world.
  worker_->wait({worker_->pull_rows(variable_, batch.rows, weights.data_ptr())});
  const at::Tensor inverse = torch::from_blob(const_cast<int64_t*>(batch.inverse.data()),
                                              {static_cast<int64_t>(batch.inverse.size())}, torch::kLong)
                                 .clone();
  std::vector<int64_t> shape = ids.sizes().vec();
  shape.push_back(options_.dim);
  if (is_training() && torch::GradMode::is_enabled()) {
    weights.requires_grad_(true);
    lookups_.push_back({batch.rows, weights});
  }
  return weights.index_select(0, inverse).view(shape);
}

ps::Handle PsEmbeddingImpl::push_gradients() {
  std::vector<int64_t> rows;
  std::vector<at::Tensor> grads;
  for (Lookup& l : lookups_) {
    if (!l.weights.grad().defined()) continue;
    rows.insert(rows.end(), l.rows.begin(), l.rows.end());
    grads.push_back(l.weights.grad());
  }
  lookups_.clear();
  if (rows.empty()) return ps::Handle(ps::HandleState::group("no rows to push", 0));
  at::Tensor grad = torch::cat(grads).contiguous();
  if (grads.size() > 1) {
    // Several lookups of one table in a step: one push, one row each.
    const ps::SparseBatch merged = ps::deduplicate(rows);
    const at::Tensor index = torch::from_blob(const_cast<int64_t*>(merged.inverse.data()),
                                              {static_cast<int64_t>(merged.inverse.size())}, torch::kLong);
    grad = torch::zeros({static_cast<int64_t>(merged.rows.size()), options_.dim}, grad.options())
               .index_add_(0, index, grad);
    rows = merged.rows;
  }
  return worker_->push_rows(variable_, rows, grad.data_ptr());
}

void PsEmbeddingImpl::bind(ps::Worker* worker, uint32_t variable) {
  worker_ = worker;
  variable_ = variable;
}

int64_t PsEmbeddingImpl::pending_rows() const {
  int64_t n = 0;
  for (const Lookup& l : lookups_) n += static_cast<int64_t>(l.rows.size());
  return n;
}

}  // namespace cohort
