// PartitionCounters: what a partition's consistency rules did, counted by
// the partition and merged over a server's partitions by Server::totals().
#pragma once

#include <algorithm>
#include <cstdint>

namespace cohort::ps {

struct PartitionCounters {
  int64_t steps_applied = 0;     // synchronous steps (or commits) applied
  int64_t late_dropped = 0;      // commits that came after their step was applied
  int64_t stale_ignored = 0;     // pushes/commits below the worker's clock (retries, replays)
  int64_t discarded_steps = 0;   // uncommitted steps of dead or departed workers
  int64_t max_staleness = 0;     // the largest (reader clock - slowest clock) served
  int64_t reads = 0;
  int64_t restores = 0;          // rollbacks to a commit (elastic jobs)
};

// Adds `more` into `total`: counts add up, max_staleness is the larger.
inline void merge(PartitionCounters& total, const PartitionCounters& more) {
  total.steps_applied += more.steps_applied;
  total.late_dropped += more.late_dropped;
  total.stale_ignored += more.stale_ignored;
  total.discarded_steps += more.discarded_steps;
  total.max_staleness = std::max(total.max_staleness, more.max_staleness);
  total.reads += more.reads;
  total.restores += more.restores;
}

}  // namespace cohort::ps
