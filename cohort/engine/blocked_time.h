// BlockedTime: how long this thread has been blocked in Handle::wait() and
// wait_for() on ops of any engine, split at the moment the engine's
// negotiation found that every rank had submitted the op:
//   peer_wait_ns  blocked before that moment: waiting for the slowest peer
//                 to submit (the op could not start anywhere)
//   transfer_ns   blocked after it: the collective moving and reducing bytes
// Cumulative per thread since it started; callers take differences (fit()
// does per step, cohort/telemetry). A wait on an op that is already done
// adds nothing; an op that fails before it is agreed counts as peer wait.
#pragma once

#include <cstdint>

namespace cohort::engine {

struct BlockedTime {
  uint64_t peer_wait_ns = 0;
  uint64_t transfer_ns = 0;
};

// This thread's totals.
BlockedTime this_thread_blocked_time();

namespace detail {
// Handle's waits report here: blocked over [start_ns, end_ns] of
// steady_clock; `agreed_ns` is when the op was agreed (0: not yet).
void add_blocked_time(int64_t start_ns, int64_t end_ns, int64_t agreed_ns);
int64_t steady_now_ns();
}  // namespace detail

}  // namespace cohort::engine
