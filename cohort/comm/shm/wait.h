// Counters in shared memory that one rank advances and others wait on:
// a short spin, then a futex sleep, with periodic probes (peer liveness,
// abort) and a deadline. Works between processes and between threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace cohort::comm::shm {

// One 32-bit counter and the number of ranks sleeping on it. The counter only
// grows (modulo 2^32); `reached` compares with wraparound.
struct Flag {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

inline bool reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

// Stores `value` (release) and wakes the sleepers, if any. The seq_cst pair
// (store here, increment of `sleepers` in the waiter) makes a lost wake-up
// impossible: either the waiter sees the new value or we see the sleeper.
void publish(Flag& flag, uint32_t value);

struct WaitPolicy {
  std::chrono::nanoseconds spin{0};             // busy-wait before sleeping
  std::chrono::milliseconds probe_interval{100};  // sleep slice between probes
};

using Clock = std::chrono::steady_clock;

// A probe runs while waiting, once per probe interval; it throws to abandon
// the wait (a peer died, the group aborted).
class Probe {
 public:
  virtual void operator()() = 0;

 protected:
  ~Probe() = default;
};

// The slow path of wait_until: spin, then sleep in probe-interval slices.
bool wait_slow(const Flag& flag, uint32_t target, const WaitPolicy& policy, Clock::time_point deadline,
               Probe& probe);

// Waits until `flag` reaches `target` (acquire). Returns false when the
// deadline passes first; exceptions from `probe` propagate.
inline bool wait_until(const Flag& flag, uint32_t target, const WaitPolicy& policy,
                       Clock::time_point deadline, Probe& probe) {
  if (reached(flag.value.load(std::memory_order_acquire), target)) [[likely]]
    return true;
  return wait_slow(flag, target, policy, deadline, probe);
}

}  // namespace cohort::comm::shm
