// HostWatch: in a multi-host job of fixed size, tells a host that went away
// (its link is down, it hangs or lost power) from a busy one, by the
// heartbeats its ranks send to the job's store, and ends the job naming the
// host, its ranks and since when it is silent.
//
// Why the launcher and not the ranks: a rank waiting in a collective sees
// only the peer it waits for, often one on a healthy host (the hierarchical
// backend's local leader, a ring neighbour), and waits until
// COHORT_TIMEOUT_S (300 s by default). Every rank beats from a thread of its
// own (rendezvous/heartbeat.h; cohortrun asks for it with COHORT_HEARTBEAT=1
// in multi-host jobs), so a silent rank is one whose process or link is
// gone; when every running rank of a host is silent, the host is.
//
// Policy: a rank is silent once its counter has not moved for
// `silence_s`. A rank that never beat is still starting (or is not a cohort
// program): the start timeout and its exit speak for it. A host is lost when
// every running rank on it that has beaten is silent; a silent rank on a
// host where another rank beat within half the silence is named as a hung
// process. Ranks that ended
// are not watched.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cohort/launcher/heartbeat_tracker.h"
#include "cohort/launcher/supervisor.h"
#include "cohort/rendezvous/store.h"

namespace cohort::launcher {

struct HostWatchOptions {
  double silence_s = 10;                  // COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S
  std::chrono::milliseconds period{500};  // how often the counters are read
};

class HostWatch final : public HealthWatch {
 public:
  using SteadyClock = HeartbeatTracker::Clock;
  using WallClock = HeartbeatTracker::WallClock;

  // `hosts` maps each rank to its host as the user named it (-H, hostfile).
  HostWatch(HostWatchOptions options, std::shared_ptr<rendezvous::Store> store,
            const std::map<int, std::string>& hosts);

  std::string tick(const std::vector<int>& running) override;
  std::chrono::milliseconds period() const override { return options_.period; }

  // tick() at the given times (tests drive the clocks).
  std::string check(const std::vector<int>& running, SteadyClock::time_point now, WallClock::time_point wall_now);

  // Hosts whose running ranks have all been silent for at least `for_s`
  // (fewer than the verdict's seconds), as one sentence; empty when none.
  // After a rank's own failure, it says which host the failure likely
  // follows from.
  std::string silent_hosts(double for_s) const;

 private:
  using Pulse = HeartbeatTracker::Pulse;
  // The pulses of `host`'s running ranks that have beaten.
  std::vector<const Pulse*> beating_pulses(const std::string& host) const;
  // Whether every running rank of `host` that beat is silent for `limit`
  // (false when none beat).
  bool host_silent(const std::string& host, SteadyClock::duration limit) const;
  // Whether a running rank of `host` beat within `within`.
  bool host_beating(const std::string& host, SteadyClock::duration within) const;
  std::string describe_host(const std::string& host) const;

  HostWatchOptions options_;
  std::shared_ptr<rendezvous::Store> store_;
  std::map<std::string, std::vector<int>> ranks_of_;  // by host, fixed for the job
  HeartbeatTracker pulses_;
  std::set<int> running_;  // as of the last check
  SteadyClock::time_point now_;
};

}  // namespace cohort::launcher
