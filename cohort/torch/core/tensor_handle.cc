#include "cohort/torch/core/tensor_handle.h"

#include <exception>
#include <mutex>
#include <optional>

#include "cohort/common/check.h"

namespace cohort {

struct TensorHandle::State {
  std::string name;
  // Waited for by wait(), then finished once.
  std::vector<engine::Handle> pending;
  std::function<at::Tensor()> finish;
  std::function<std::vector<int64_t>()> received_splits_of;
  std::vector<at::Tensor> keep_alive;

  std::mutex mutex;
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
  state_->received_splits_of = std::move(parts.received_splits_of);
  // A dropped handle must not free what the engine still reads or writes:
  // each pending op holds the buffers until it is done.
  if (!state_->keep_alive.empty())
    for (const engine::Handle& h : state_->pending) h.on_done([buffers = state_->keep_alive] {});
}

const std::string& TensorHandle::name() const {
  COHORT_CHECK(state_) << "empty TensorHandle";
  return state_->name;
}

at::Tensor TensorHandle::wait() {
  COHORT_CHECK(state_) << "wait() on an empty TensorHandle";
  State& s = *state_;
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
        if (s.received_splits_of) s.received_splits = s.received_splits_of();
      } catch (...) {
        error = std::current_exception();
      }
    }
    s.error = error;
    s.finished = true;
    s.pending.clear();
    s.finish = nullptr;
    s.received_splits_of = nullptr;
    s.keep_alive.clear();
  }
  if (s.error) std::rethrow_exception(s.error);
  return *s.result;
}

bool TensorHandle::poll() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mutex);
  if (state_->finished) return true;
  for (const auto& h : state_->pending)
    if (!h.poll()) return false;
  return true;
}

const std::vector<int64_t>& TensorHandle::received_splits() const {
  COHORT_CHECK(state_) << "received_splits() on an empty TensorHandle";
  return state_->received_splits;
}

}  // namespace cohort
