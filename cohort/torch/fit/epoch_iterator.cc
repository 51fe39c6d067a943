#include "cohort/torch/fit/epoch_iterator.h"

#include "cohort/common/check.h"

namespace cohort {

EpochIterator::EpochIterator(BatchStream& stream, int64_t first, int64_t last, bool sampled, StepVote& vote,
                             std::function<StepVote::Requests()> requests)
    : stream_(stream), step_(first), last_(last), sampled_(sampled), vote_(vote), requests_(std::move(requests)) {
  vote_.start(step_, requests_());
}

std::optional<EpochIterator::Step> EpochIterator::next() {
  if (end_ != End::running) return std::nullopt;
  if (step_ >= last_) {
    end_ = End::data;
    return std::nullopt;
  }
  const int64_t my_rows = stream_.next_rows();
  const std::optional<int64_t> known = stream_.next_global_rows();
  int64_t global_rows = known.value_or(0);
  if (const std::optional<StepVote::Decision> d = vote_.before_step(step_, my_rows, requests_())) {
    if (d->preempt) end_ = End::preempt;
    else if (d->stop) end_ = End::stop;
    if (!known) global_rows = d->global_rows;
  }
  if (end_ == End::running && global_rows == 0 && !sampled_) end_ = End::data;
  if (end_ != End::running) return std::nullopt;
  Step step{.index = step_++, .batch = stream_.next(), .global_rows = global_rows};
  COHORT_CHECK_AS(MismatchError, step.batch.rows() == my_rows)
      << "fit: the training input said its next batch has " << my_rows << " rows here, then gave " << step.batch.rows();
  return step;
}

}  // namespace cohort
