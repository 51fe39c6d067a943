// Dataset: rows addressable by index, what fit(), evaluate() and predict()
// read (through DatasetStream, dataset_stream.h, for training). fit() asks
// for the rows of each replica's share of a global batch by index, so a
// dataset's whole iterator state is the (seed, epoch, batch) that fit()
// keeps, and resuming mid-epoch reads exactly the rows that remain.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>

#include "cohort/torch/core/strategy.h"

namespace cohort {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The rows `indices` (int64, 1-D, each in [0, size())) as one batch, in
  // that order. Called from the training thread only.
  virtual Batch get(const at::Tensor& indices) const = 0;
};

// Rows of tensors held in memory: input row i and target row i (the target
// may be undefined, for predict). `transform`, when given, maps each batch's
// input rows (e.g. bytes to normalised floats) as they are read.
class TensorDataset : public Dataset {
 public:
  using Transform = std::function<at::Tensor(const at::Tensor& input_rows)>;
  // ConfigError when the targets' dim 0 differs from the inputs'.
  TensorDataset(at::Tensor inputs, at::Tensor targets, Transform transform = {});

  int64_t size() const override { return inputs_.size(0); }
  Batch get(const at::Tensor& indices) const override;

 private:
  at::Tensor inputs_, targets_;
  Transform transform_;
};

}  // namespace cohort
