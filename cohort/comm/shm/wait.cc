#include "cohort/comm/shm/wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COHORT_CPU_RELAX() _mm_pause()
#else
#define COHORT_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace cohort::comm::shm {
namespace {

// Iterations of _mm_pause (about 40 ns each on recent x86) before yielding.
constexpr unsigned kPureSpins = 128;

// Shared (not FUTEX_PRIVATE) futexes: the word lives in a MAP_SHARED segment
// that other processes map at other addresses.
long futex(const std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

void publish(Flag& flag, uint32_t value) {
  flag.value.store(value, std::memory_order_seq_cst);
  if (flag.sleepers.load(std::memory_order_seq_cst) != 0)
    futex(&flag.value, FUTEX_WAKE, INT_MAX, nullptr);
}

bool wait_slow(const Flag& flag, uint32_t target, const WaitPolicy& policy, Clock::time_point deadline,
               Probe& probe) {
  auto& value = flag.value;
  if (policy.spin.count() > 0) {
    const auto spin_end = Clock::now() + policy.spin;
    for (unsigned i = 1;; ++i) {
      if (reached(value.load(std::memory_order_acquire), target)) return true;
      // A few microseconds of pure spinning catch a peer running on another
      // core; past that the peer is more likely waiting for our core (another
      // process took its own), so yield it on every round.
      if (i < kPureSpins)
        COHORT_CPU_RELAX();
      else
        sched_yield();
      // Reading the clock costs ~20 ns; do it only now and then.
      if ((i & 15) == 0 && Clock::now() >= spin_end) break;
    }
  }
  // Sleep on the futex in slices so that the probe runs regularly even when
  // no one will ever wake us (a dead peer). The first slice sleeps before the
  // first probe: most waits end within it, and the probe costs a syscall.
  auto& sleepers = const_cast<Flag&>(flag).sleepers;
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return reached(value.load(std::memory_order_acquire), target);
    const auto slice = std::min<Clock::duration>(policy.probe_interval, deadline - now);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = value.load(std::memory_order_seq_cst);
    if (!reached(seen, target)) futex(&value, FUTEX_WAIT, seen, &ts);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (reached(value.load(std::memory_order_acquire), target)) return true;
    probe();
  }
}

}  // namespace cohort::comm::shm
