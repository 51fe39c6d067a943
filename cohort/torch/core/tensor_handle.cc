#include "cohort/torch/core/tensor_handle.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "cohort/common/check.h"

namespace cohort {

struct TensorHandle::State {
  std::string name;
  bool is_deferred = false;
  // Engine-backed ops: waited for by wait(), then finished once.
  std::vector<engine::Handle> pending;
  std::function<at::Tensor()> finish;
  std::vector<at::Tensor> keep_alive;

  std::mutex mutex;
  std::condition_variable cv;  // deferred ops: signalled when finished
  bool finished = false;
  std::optional<at::Tensor> result;
  std::exception_ptr error;
  std::vector<int64_t> received_splits;
};

TensorHandle::TensorHandle(Parts parts) : state_(std::make_shared<State>()) {
  state_->name = std::move(parts.name);
  state_->pending = std::move(parts.pending);
  state_->finish = std::move(parts.finish);
  state_->keep_alive = std::move(parts.keep_alive);
  state_->received_splits = std::move(parts.received_splits);
}

TensorHandle TensorHandle::deferred(std::string name, Deferred run) {
  TensorHandle handle;
  handle.state_ = std::make_shared<State>();
  handle.state_->name = std::move(name);
  handle.state_->is_deferred = true;
  // The worker holds the state, so the op completes (and its buffers stay
  // alive) even when every handle is dropped.
  std::thread([state = handle.state_, run = std::move(run)] {
    std::optional<at::Tensor> result;
    std::exception_ptr error;
    std::vector<int64_t> splits;
    try {
      result = run(splits);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(state->mutex);
    state->result = std::move(result);
    state->error = error;
    state->received_splits = std::move(splits);
    state->finished = true;
    state->cv.notify_all();
  }).detach();
  return handle;
}

const std::string& TensorHandle::name() const {
  COHORT_CHECK(state_) << "empty TensorHandle";
  return state_->name;
}

at::Tensor TensorHandle::wait() {
  COHORT_CHECK(state_) << "wait() on an empty TensorHandle";
  State& s = *state_;
  if (s.is_deferred) {
    std::unique_lock lock(s.mutex);
    s.cv.wait(lock, [&] { return s.finished; });
  } else {
    std::vector<engine::Handle> pending;
    {
      std::lock_guard lock(s.mutex);
      if (!s.finished) pending = s.pending;
    }
    // Waiting happens unlocked so that poll() from another thread does not
    // block behind it.
    std::exception_ptr error;
    try {
      for (const auto& h : pending) h.wait();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(s.mutex);
    if (!s.finished) {
      if (!error) {
        try {
          s.result = s.finish ? s.finish() : at::Tensor();
        } catch (...) {
          error = std::current_exception();
        }
      }
      s.error = error;
      s.finished = true;
      s.pending.clear();
      s.finish = nullptr;
      s.keep_alive.clear();
    }
  }
  std::lock_guard lock(s.mutex);
  if (s.error) std::rethrow_exception(s.error);
  return *s.result;
}

bool TensorHandle::poll() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mutex);
  if (state_->finished || state_->is_deferred) return state_->finished;
  for (const auto& h : state_->pending)
    if (!h.poll()) return false;
  return true;
}

const std::vector<int64_t>& TensorHandle::received_splits() const {
  COHORT_CHECK(state_) << "received_splits() on an empty TensorHandle";
  return state_->received_splits;
}

}  // namespace cohort
