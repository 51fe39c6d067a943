#include "cohort/engine/handle.h"

#include "cohort/common/check.h"

namespace cohort::engine {

void HandleState::complete() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
}

void HandleState::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

bool HandleState::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Handle::wait() const {
  COHORT_CHECK(state_) << "wait() on an empty Handle";
  std::unique_lock lock(state_->mutex_);
  state_->cv_.wait(lock, [&] { return state_->done_; });
  if (state_->error_) std::rethrow_exception(state_->error_);
}

bool Handle::wait_for(std::chrono::nanoseconds timeout) const {
  COHORT_CHECK(state_) << "wait_for() on an empty Handle";
  std::unique_lock lock(state_->mutex_);
  if (!state_->cv_.wait_for(lock, timeout, [&] { return state_->done_; })) return false;
  if (state_->error_) std::rethrow_exception(state_->error_);
  return true;
}

bool Handle::poll() const {
  return state_ && state_->done();
}

}  // namespace cohort::engine
