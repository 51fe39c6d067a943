#include "cohort/torch/data/dataset_stream.h"

#include <algorithm>

#include "cohort/torch/data/distributed_sampler.h"

namespace cohort {
namespace {

// The rows of `n` in the order of (seed, epoch): the sampler's permutation,
// identical on every process and every run.
at::Tensor epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  if (!shuffle) return torch::arange(n, torch::kInt64);
  const std::vector<size_t> p = permutation(size_t(n), seed, epoch);
  return torch::tensor(std::vector<int64_t>(p.begin(), p.end()), torch::kInt64);
}

}  // namespace

DatasetStream::DatasetStream(const Dataset& data, bool shuffle, uint64_t seed, const BatchSampler* sampler,
                             const int64_t& training_step)
    : data_(data), shuffle_(shuffle), seed_(seed), sampler_(sampler), training_step_(training_step) {}

int64_t DatasetStream::start_epoch(const InputContext& context, int64_t epoch, int64_t batches_done,
                                   const std::string&) {
  context_ = context;
  batch_ = batches_done;
  sampled_step_ = -1;
  const int64_t n = data_.size();
  if (!sampler_) order_ = epoch_order(n, shuffle_, seed_, epoch);
  const int64_t batch = std::max<int64_t>(1, context_.global_batch_size);
  const int64_t steps = sampler_ ? sampler_->steps_per_epoch(n) : (n + batch - 1) / batch;
  return std::max<int64_t>(0, steps - batches_done);
}

int64_t DatasetStream::global_rows() const {
  const int64_t batch = context_.global_batch_size;
  return std::max<int64_t>(0, std::min(batch, data_.size() - batch_ * batch));
}

int64_t DatasetStream::next_rows() const {
  return sampler_ ? sampled_rows().numel() : context_.rows_of(global_rows()).rows;
}

std::optional<int64_t> DatasetStream::next_global_rows() const {
  if (sampler_) return std::nullopt;
  return global_rows();
}

Batch DatasetStream::next() {
  if (sampler_) {
    const at::Tensor rows = sampled_rows();
    ++batch_;
    return rows.numel() > 0 ? data_.get(rows) : Batch{};
  }
  const RowBlock mine = context_.rows_of(global_rows());
  const int64_t begin = batch_ * context_.global_batch_size;
  ++batch_;
  return mine.rows > 0 ? data_.get(order_.narrow(0, begin + mine.offset, mine.rows)) : Batch{};
}

const at::Tensor& DatasetStream::sampled_rows() const {
  if (sampled_step_ != training_step_) {
    sampled_ = sampler_->process_rows(data_.size(), training_step_);
    sampled_step_ = training_step_;
  }
  return sampled_;
}

}  // namespace cohort
