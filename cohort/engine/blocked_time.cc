#include "cohort/engine/blocked_time.h"

#include <algorithm>
#include <chrono>

namespace cohort::engine {
namespace {

thread_local BlockedTime blocked;

}  // namespace

BlockedTime this_thread_blocked_time() { return blocked; }

namespace detail {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void add_blocked_time(int64_t start_ns, int64_t end_ns, int64_t agreed_ns) {
  if (end_ns <= start_ns) return;
  // Agreed before the wait began: all of it moved bytes; never agreed (a
  // failure): all of it waited for peers.
  const int64_t split = agreed_ns > 0 ? std::clamp(agreed_ns, start_ns, end_ns) : end_ns;
  blocked.peer_wait_ns += static_cast<uint64_t>(split - start_ns);
  blocked.transfer_ns += static_cast<uint64_t>(end_ns - split);
}

}  // namespace detail
}  // namespace cohort::engine
