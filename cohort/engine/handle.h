// Handle: the caller's side of one engine op. Copyable; every copy refers to
// the same shared state, which outlives the engine.
//
// An op is pending until the engine completes it (success) or fails it (the
// error, rethrown by wait() and wait_for(), names the op and the cause).
// Results that the engine produces rather than writes into the caller's
// buffers live here: an allgather's output (unless the caller supplied an
// allocator) with each rank's element count, and join()'s last rank.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cohort/common/buffer_view.h"

namespace cohort::engine {

// Shared by a Handle and the engine. Only the engine completes or fails it,
// exactly once; the results are written before completion and read after.
class HandleState {
 public:
  explicit HandleState(std::string name) : name_(std::move(name)) {}

  void complete();
  void fail(std::exception_ptr error);
  bool done() const;
  // Runs `callback` once the op is done (either way), on the thread that
  // completes or fails it (the engine's), or now on this thread when it is
  // already done. For chaining a next stage without a thread of its own: the
  // callback must be short and must not wait for another op.
  void on_done(std::function<void()> callback);

  const std::string& name() const { return name_; }
  // When the negotiation found every rank had submitted the op (steady_clock
  // nanoseconds; 0 until then): splits a caller's wait (blocked_time.h).
  void mark_agreed(int64_t steady_ns) { agreed_ns_.store(steady_ns, std::memory_order_relaxed); }

  // Results (written by the engine before complete()).
  std::vector<std::byte> owned_output;  // allgather without an allocator
  BufferView output;                    // allgather: where the result is
  std::vector<size_t> counts;           // allgather: elements from each rank
  int last_joined = -1;                 // join

 private:
  friend class Handle;
  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void()>> callbacks_;
  std::atomic<int64_t> agreed_ns_{0};
};

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  const std::string& name() const { return state_->name(); }

  // See HandleState::on_done.
  void on_done(std::function<void()> callback) const { state_->on_done(std::move(callback)); }
  // The op's error once done, or null.
  std::exception_ptr error() const;

  // Blocks until the op is done; rethrows its error.
  void wait() const;
  // Waits at most `timeout`; true when the op is done (then rethrows its error).
  bool wait_for(std::chrono::nanoseconds timeout) const;
  // True when the op is done (successfully or not); never throws.
  bool poll() const;

  // After a successful wait() of an allgather: the gathered elements (rank 0's
  // first) and how many came from each rank.
  BufferView output() const { return state_->output; }
  std::span<const size_t> counts() const { return state_->counts; }
  // After a successful wait() of a join: the last rank to join.
  int last_joined_rank() const { return state_->last_joined; }

 private:
  std::shared_ptr<HandleState> state_;
};

}  // namespace cohort::engine
