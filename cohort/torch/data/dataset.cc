#include "cohort/torch/data/dataset.h"

#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort {

TensorDataset::TensorDataset(at::Tensor inputs, at::Tensor targets, Transform transform)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), transform_(std::move(transform)) {
  COHORT_CHECK_AS(ConfigError, inputs_.defined() && inputs_.dim() >= 1)
      << "TensorDataset: the inputs must be a tensor of at least one dimension (rows)";
  COHORT_CHECK_AS(ConfigError, !targets_.defined() || targets_.size(0) == inputs_.size(0))
      << "TensorDataset: " << inputs_.size(0) << " input rows but " << targets_.size(0) << " target rows";
}

Batch TensorDataset::get(const at::Tensor& indices) const {
  at::Tensor input = inputs_.index_select(0, indices);
  if (transform_) input = transform_(input);
  return {input, targets_.defined() ? targets_.index_select(0, indices) : at::Tensor()};
}

}  // namespace cohort
