// HeartbeatTracker: when each watched process's heartbeat counter
// (rendezvous/heartbeat.h) last moved, as the launcher reads it. A process
// is silent once its counter has stood still for a limit; one that never
// beat (a counter of 0) is still starting, or is no cohort program, and is
// never silent. Shared by ElasticController (a silent member is killed) and
// HostWatch (a silent host ends the job).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/store.h"

namespace cohort::launcher {

class HeartbeatTracker {
 public:
  using Clock = std::chrono::steady_clock;
  using WallClock = std::chrono::system_clock;

  struct Pulse {
    int64_t beats = 0;
    Clock::time_point since;           // when `beats` was first read
    WallClock::time_point wall_since;  // the same, for messages
  };

  // Reads m's counter from `store` at `now`; m's pulse.
  const Pulse& read(rendezvous::Store& store, rendezvous::Member m, Clock::time_point now,
                    WallClock::time_point wall_now);
  // m's pulse as last read; nullptr when never read (or forgotten).
  const Pulse* find(rendezvous::Member m) const;
  void forget(rendezvous::Member m);

  // Whether `pulse` has beaten and stood still for `limit` at `now`.
  static bool silent(const Pulse& pulse, Clock::duration limit, Clock::time_point now) {
    return pulse.beats > 0 && now - pulse.since >= limit;
  }

 private:
  std::map<std::string, Pulse> pulses_;  // by member_text
};

}  // namespace cohort::launcher
