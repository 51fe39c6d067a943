// CompletionThread: finishes a process group's Pendings off the caller's
// thread, in submission order, and reports each one's outcome.
//
// c10d's contract is that a collective returns at once with a Work whose
// future completes when the op is done; DistributedDataParallel chains its
// gradient averaging onto that future and waits only at the end of the
// backward pass. The engine completes handles on its own thread, where no
// tensor copy or user callback may run (engine/handle.h), so one thread per
// group waits for each Pending in turn (torch issues a group's collectives
// in one order on every rank, and the engine runs ordered submissions in
// that order, so waiting in order adds no delay), runs its finish, and
// calls `done` with the error or null. The destructor finishes what was
// submitted first.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "python/src/group_collectives.h"

namespace cohort::python {

class CompletionThread {
 public:
  using Done = std::function<void(std::exception_ptr)>;

  CompletionThread();
  // Finishes what was submitted, then joins.
  ~CompletionThread();
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  void submit(Pending pending, Done done);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<Pending, Done>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cohort::python
