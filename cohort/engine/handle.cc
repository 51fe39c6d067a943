#include "cohort/engine/handle.h"

#include "cohort/common/check.h"
#include "cohort/engine/blocked_time.h"

namespace cohort::engine {

void HandleState::complete() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& callback : callbacks) callback();
}

void HandleState::fail(std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    error_ = std::move(error);
    done_ = true;
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& callback : callbacks) callback();
}

void HandleState::on_done(std::function<void()> callback) {
  {
    std::lock_guard lock(mutex_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

bool HandleState::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Handle::wait() const {
  COHORT_CHECK(state_) << "wait() on an empty Handle";
  std::unique_lock lock(state_->mutex_);
  if (!state_->done_) {
    const int64_t start = detail::steady_now_ns();
    state_->cv_.wait(lock, [&] { return state_->done_; });
    detail::add_blocked_time(start, detail::steady_now_ns(), state_->agreed_ns_.load(std::memory_order_relaxed));
  }
  if (state_->error_) std::rethrow_exception(state_->error_);
}

bool Handle::wait_for(std::chrono::nanoseconds timeout) const {
  COHORT_CHECK(state_) << "wait_for() on an empty Handle";
  std::unique_lock lock(state_->mutex_);
  if (!state_->done_) {
    const int64_t start = detail::steady_now_ns();
    const bool done = state_->cv_.wait_for(lock, timeout, [&] { return state_->done_; });
    detail::add_blocked_time(start, detail::steady_now_ns(), state_->agreed_ns_.load(std::memory_order_relaxed));
    if (!done) return false;
  }
  if (state_->error_) std::rethrow_exception(state_->error_);
  return true;
}

std::exception_ptr Handle::error() const {
  COHORT_CHECK(state_) << "error() on an empty Handle";
  std::lock_guard lock(state_->mutex_);
  return state_->error_;
}

bool Handle::poll() const {
  return state_ && state_->done();
}

}  // namespace cohort::engine
