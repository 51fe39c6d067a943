#include "python/src/completion_thread.h"

namespace cohort::python {

CompletionThread::CompletionThread() : thread_([this] { run(); }) {}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void CompletionThread::submit(Pending pending, Done done) {
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(pending), std::move(done));
  }
  cv_.notify_one();
}

void CompletionThread::run() {
  for (;;) {
    std::pair<Pending, Done> next;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      next.first.complete();
    } catch (...) {
      error = std::current_exception();
    }
    next.second(error);
  }
}

}  // namespace cohort::python
