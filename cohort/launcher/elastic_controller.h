// The membership of an elastic job (cohortrun --min-np): which processes
// form the world, epoch by epoch (rendezvous/membership.h), and the
// replacements of slots whose process failed.
//
// Policy:
//  - epoch 0 is the ranks started, slots 0..np-1;
//  - a member that fails leaves the world: the next epoch is the others,
//    published at once when they are at least min_np (the survivors form
//    it and go on from their last commit); its slot is started again, up to
//    max_restarts times, and the replacement joins the epoch after the one
//    in which it says it is ready (announce_ready), last in rank order;
//  - below min_np, no epoch is published (the survivors wait for one) until
//    replacements bring the world back to min_np; timeout_s of that ends
//    the job, and processes still waiting are told why (end_membership);
//    when members and replacements together cannot reach min_np, or no
//    member is left (the state lived in their memory), the job fails at once;
//  - a replacement joins once the last epoch's world was formed
//    (rendezvous::epoch_formed(): every member read it), or once that epoch
//    lost a member (its survivors wait for the next), so that members never
//    read different epochs while one forms;
//  - a member that exits 0 means training is done: no replacement joins
//    after it, and those waiting are told so; a member that fails after
//    that fails the job.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/rendezvous/membership.h"

namespace cohort::launcher {

struct ElasticOptions {
  int min_np = 1;
  int max_restarts = 3;     // replacements per slot
  double timeout_s = 600;   // below min_np this long ends the job
  // Each slot's host (-H), recorded with the members; empty: one host.
  std::vector<std::string> slot_hosts;
};

class ElasticController {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts replacement `m` (a new process for its slot); throws on failure.
  using Respawn = std::function<void(rendezvous::Member m)>;

  ElasticController(ElasticOptions options, std::shared_ptr<rendezvous::Store> store, int ranks, Respawn respawn);

  // Publishes epoch 0 (every slot, incarnation 0); before any rank starts.
  void publish_initial();

  // Process `m` ended; `failed` when it exited non-zero or by a signal.
  // True when the job goes on without it; false when a failure must stop
  // the job (no member is left and none can be started). `note` says what
  // happened, for the launcher's message.
  bool member_ended(rendezvous::Member m, bool failed, std::string& note);

  // Admits replacements that are ready. A non-empty result ends the job:
  // the world stayed below min_np for timeout_s (said in the result).
  std::string tick(Clock::time_point now);
  static constexpr std::chrono::milliseconds kTickPeriod{20};

 private:
  void publish(std::vector<rendezvous::Member> members);

  ElasticOptions options_;
  std::shared_ptr<rendezvous::Store> store_;
  Respawn respawn_;
  rendezvous::Membership current_;             // the latest published epoch
  std::vector<rendezvous::Member> survivors_;  // members alive (the next epoch's base)
  std::vector<rendezvous::Member> pending_;    // replacements started, not yet members
  std::map<int, int> restarts_;                // per slot
  std::optional<Clock::time_point> below_since_;
  bool finished_ = false;
};

}  // namespace cohort::launcher
