#include "cohort/parameter_server/handle.h"

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"

namespace cohort::ps {

HandleState::HandleState(std::string what, std::shared_ptr<HandleState> parent)
    : what_(std::move(what)), parent_(std::move(parent)) {}

std::shared_ptr<HandleState> HandleState::group(std::string what, int parts) {
  auto state = std::make_shared<HandleState>(std::move(what));
  state->parts_left_ = parts;
  if (parts == 0) state->done_ = true;
  return state;
}

void HandleState::complete() {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
  }
  cv_.notify_all();
  if (parent_) parent_->part_done(nullptr);
}

void HandleState::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
  if (parent_) parent_->part_done(std::move(error));
}

void HandleState::part_done(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (error && !first_part_error_) first_part_error_ = error;
    if (--parts_left_ > 0 || done_) return;
    done_ = true;
    error_ = first_part_error_;
  }
  cv_.notify_all();
}

bool HandleState::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Handle::wait() const {
  const auto timeout = std::chrono::duration<double>(tunables::timeout_s());
  if (!wait_for(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout)))
    COHORT_THROW(TimeoutError) << state_->what() << " did not complete within " << timeout.count()
                               << " s (COHORT_TIMEOUT_S)";
}

bool Handle::wait_for(std::chrono::nanoseconds timeout) const {
  COHORT_CHECK(state_) << "wait on an empty parameter-server handle";
  std::unique_lock lock(state_->mutex_);
  if (!state_->cv_.wait_for(lock, timeout, [&] { return state_->done_; })) return false;
  if (state_->error_) std::rethrow_exception(state_->error_);
  return true;
}

bool Handle::poll() const { return state_ && state_->done(); }

void wait_all(const std::vector<Handle>& handles) {
  std::exception_ptr first;
  for (const auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace cohort::ps
