// PartitionCounters: what a partition's consistency rules did, counted by
// the partition and summed over a server's partitions by Server::totals().
#pragma once

#include <cstdint>

namespace cohort::ps {

struct PartitionCounters {
  int64_t steps_applied = 0;     // synchronous steps (or commits) applied
  int64_t late_dropped = 0;      // commits that came after their step was applied
  int64_t stale_ignored = 0;     // pushes/commits below the worker's clock (retries, replays)
  int64_t discarded_steps = 0;   // uncommitted steps of dead or departed workers
  int64_t max_staleness = 0;     // the largest (reader clock - slowest clock) served
  int64_t reads = 0;
};

}  // namespace cohort::ps
