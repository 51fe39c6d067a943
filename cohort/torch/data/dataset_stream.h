// DatasetStream: an indexable Dataset as a BatchStream (batch_stream.h),
// the adapter fit() trains through. The rows of each global batch come in
// the order of (seed, epoch) (DistributedSampler's permutation, identical on
// every process and every run; or in order without shuffle), and this
// process reads its block of each by index. Its position is fit()'s (epoch,
// batch), so it has no state of its own, and every process can tell every
// step's global rows alone (next_global_rows()): fit() then overlaps its
// vote with the steps.
//
// A strategy's BatchSampler (a private strategy's Poisson sampling)
// chooses each step's rows instead, from the training step's number (read
// through `training_step`, fit()'s position): such steps vary in size and
// may be empty everywhere, so their rows are voted on.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "cohort/torch/core/strategy.h"
#include "cohort/torch/data/batch_stream.h"
#include "cohort/torch/data/dataset.h"

namespace cohort {

class DatasetStream final : public BatchStream {
 public:
  // `data` and `training_step` outlive the stream; `sampler` may be null.
  DatasetStream(const Dataset& data, bool shuffle, uint64_t seed, const BatchSampler* sampler,
                const int64_t& training_step);

  int64_t size() const override { return data_.size(); }
  int64_t start_epoch(const InputContext& context, int64_t epoch, int64_t batches_done,
                      const std::string& resume) override;
  int64_t next_rows() const override;
  std::optional<int64_t> next_global_rows() const override;
  Batch next() override;
  std::string state() const override { return {}; }
  // Whether a BatchSampler chooses the rows.
  bool sampled() const { return sampler_ != nullptr; }

 private:
  int64_t global_rows() const;
  // This process's rows of the current training step, drawn once per step.
  const at::Tensor& sampled_rows() const;

  const Dataset& data_;
  bool shuffle_;
  uint64_t seed_;
  const BatchSampler* sampler_;
  const int64_t& training_step_;
  InputContext context_;
  int64_t batch_ = 0;
  at::Tensor order_;
  mutable int64_t sampled_step_ = -1;
  mutable at::Tensor sampled_;
};

}  // namespace cohort
