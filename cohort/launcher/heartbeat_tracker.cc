#include "cohort/launcher/heartbeat_tracker.h"

namespace cohort::launcher {

const HeartbeatTracker::Pulse& HeartbeatTracker::read(rendezvous::Store& store, rendezvous::Member m,
                                                      Clock::time_point now, WallClock::time_point wall_now) {
  const int64_t beats = rendezvous::heartbeats(store, m);
  auto [it, fresh] = pulses_.try_emplace(rendezvous::member_text(m), Pulse{beats, now, wall_now});
  if (!fresh && it->second.beats != beats) it->second = Pulse{beats, now, wall_now};
  return it->second;
}

const HeartbeatTracker::Pulse* HeartbeatTracker::find(rendezvous::Member m) const {
  const auto it = pulses_.find(rendezvous::member_text(m));
  return it == pulses_.end() ? nullptr : &it->second;
}

void HeartbeatTracker::forget(rendezvous::Member m) { pulses_.erase(rendezvous::member_text(m)); }

}  // namespace cohort::launcher
