// Handle: the caller's side of one asynchronous parameter-server call
// (ps-lite's timestamp, made an object). Copyable; copies share the state.
//
// A call is pending until its reply has been processed (values copied into
// the caller's buffer, for a pull) or it failed; wait() rethrows the failure.
// The caller's buffers must stay valid until the handle is done.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cohort::ps {

class HandleState {
 public:
  explicit HandleState(std::string what) : what_(std::move(what)) {}
  // A part of `parent`: the parent completes when all `parts` of it have
  // completed, and fails with the first part's failure.
  HandleState(std::string what, std::shared_ptr<HandleState> parent);
  static std::shared_ptr<HandleState> group(std::string what, int parts);

  void complete();
  void fail(std::exception_ptr error);
  bool done() const;
  const std::string& what() const { return what_; }

 private:
  friend class Handle;
  void part_done(std::exception_ptr error);
  std::string what_;
  std::shared_ptr<HandleState> parent_;
  int parts_left_ = 0;     // a group's parts not done yet
  std::exception_ptr first_part_error_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // "pull of 'fc1.weight' shard 0 from partition 1", for messages.
  const std::string& what() const { return state_->what(); }

  // Blocks until done; rethrows the call's error. The overload without a
  // timeout waits COHORT_TIMEOUT_S and then throws TimeoutError naming it.
  void wait() const;
  // Waits at most `timeout`; true when done (then rethrows its error).
  bool wait_for(std::chrono::nanoseconds timeout) const;
  // True when done, successfully or not; never throws.
  bool poll() const;

 private:
  std::shared_ptr<HandleState> state_;
};

// Waits for every handle (all of them, even after one failed), then
// rethrows the first failure.
void wait_all(const std::vector<Handle>& handles);

}  // namespace cohort::ps
