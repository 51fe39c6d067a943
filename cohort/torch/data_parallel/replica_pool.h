// ReplicaPool: a fixed set of persistent worker threads, one per model
// replica, that DataParallel (data_parallel.h) drives in lock step.
//
//   ReplicaPool pool(3, [] { at::set_num_threads(1); });  // threads start once
//   pool.run(3, [&](int i) { step_replica(i); });           // i = 0, 1, 2 in parallel
//
// Contract:
// - Worker i runs every task addressed to index i, so thread-local state set
//   on it (intra-op thread count, grad mode set inside a task) stays with the
//   replica it serves. `on_start` runs once on each worker before any task.
// - run(count, task) runs task(i) on workers 0..count-1 concurrently and
//   returns when all have finished. When tasks throw, all still finish and
//   the exception of the lowest index is rethrown (the others are dropped).
// - run() is not reentrant and not thread-safe: one caller at a time, never
//   from inside a task.
// - The destructor stops and joins the workers (no task may be running).
// Torch-free on purpose: the caller supplies what a worker must set up.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cohort {

class ReplicaPool {
 public:
  // workers >= 1 (ConfigError otherwise).
  explicit ReplicaPool(int workers, std::function<void()> on_start = {});
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return int(threads_.size()); }

  // 1 <= count <= size() (ConfigError otherwise).
  void run(int count, const std::function<void(int index)>& task);

  // Tasks run since construction (all workers together): a counter tests
  // read to check that threads are reused rather than spawned.
  int64_t tasks_run() const;

 private:
  void work(int index);

  std::function<void()> on_start_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;      // workers wait for a new generation
  std::condition_variable finished_;  // the caller waits for pending_ == 0
  uint64_t generation_ = 0;
  int count_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  const std::function<void(int)>* task_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  int64_t tasks_run_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace cohort
