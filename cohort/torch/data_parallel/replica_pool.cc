#include "cohort/torch/data_parallel/replica_pool.h"

#include <utility>

#include "cohort/common/check.h"

namespace cohort {

ReplicaPool::ReplicaPool(int workers, std::function<void()> on_start) : on_start_(std::move(on_start)) {
  COHORT_CHECK_AS(ConfigError, workers >= 1) << "ReplicaPool: workers must be >= 1, got " << workers;
  errors_.resize(size_t(workers));
  threads_.reserve(size_t(workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { work(i); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::run(int count, const std::function<void(int)>& task) {
  COHORT_CHECK_AS(ConfigError, count >= 1 && count <= size())
      << "ReplicaPool::run: count must be in [1, " << size() << "], got " << count;
  {
    std::lock_guard lock(mutex_);
    for (auto& e : errors_) e = nullptr;
    task_ = &task;
    count_ = count;
    pending_ = count;
    ++generation_;
  }
  wake_.notify_all();
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
  for (int i = 0; i < count; ++i)
    if (errors_[size_t(i)]) std::rethrow_exception(errors_[size_t(i)]);
}

int64_t ReplicaPool::tasks_run() const {
  std::lock_guard lock(mutex_);
  return tasks_run_;
}

void ReplicaPool::work(int index) {
  std::exception_ptr start_error;
  if (on_start_) {
    // A failed setup must not kill the process from a worker thread: it is
    // reported by every task this worker is given instead.
    try {
      on_start_();
    } catch (...) {
      start_error = std::current_exception();
    }
  }
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= count_) continue;
    const std::function<void(int)>* task = task_;
    lock.unlock();
    std::exception_ptr error = start_error;
    if (!error) {
      try {
        (*task)(index);
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    errors_[size_t(index)] = error;
    ++tasks_run_;
    if (--pending_ == 0) finished_.notify_one();
  }
}

}  // namespace cohort
