// The membership of an elastic job (cohortrun --min-np): which processes
// form the world, epoch by epoch (rendezvous/membership.h), the replacements
// of slots whose process failed, and, with host discovery, ranks added on
// hosts that appear and removed from hosts that go.
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
//  - a new member joins (and a removal is published) once the last epoch's
//    world was formed (rendezvous::epoch_formed(): every member read it),
//    or once that epoch lost a member (its survivors wait for the next), so
//    that members never read different epochs while one forms;
//  - a member that exits 0 means training is done: no replacement joins
//    after it, and those waiting are told so; a member that fails after
//    that fails the job.
// With host discovery (a HostPool), also:
//  - a failure blacklists its host for a cool-down (host_pool.h); the
//    replacement goes to a host with a free slot that is not cooling down,
//    waiting for one when there is none;
//  - while the world and the processes starting are fewer than max_np, new
//    slots (numbered from np on) are started on free slots and join like
//    replacements;
//  - a host that discovery no longer lists (or lists with fewer slots than
//    it runs) loses its newest ranks: a replacement not yet admitted is
//    dropped, a member is left out of the next epoch, which it learns at
//    its next commit and leaves without rollback (comm::ElasticLeave). Its
//    exit is expected, whatever its code. Members are not removed below
//    min_np (they stay on the host discovery dropped until others join).
// Lost members and silence:
//  - a member that fails is announced lost (rendezvous::announce_lost) in
//    every recent epoch that has it, before the next epoch is published:
//    its peers abandon their collectives with it at once, even when its
//    connections never close;
//  - with heartbeat_timeout_s, a process that beat (rendezvous/heartbeat.h)
//    and then stayed silent that long is terminated (set_terminate(): the
//    launcher kills it), and its end is a failure like any other (also
//    after training finished, when a failing member fails the job);
//  - with start_timeout_s, a replacement started through the launch
//    template whose program did not start that long after is terminated
//    the same way (an unreachable host).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/launcher/heartbeat_tracker.h"
#include "cohort/launcher/host_pool.h"
#include "cohort/rendezvous/membership.h"

namespace cohort::launcher {

struct ElasticOptions {
  int min_np = 1;
  int max_np = 0;           // with discovery: most ranks; 0: the ranks started
  int max_restarts = 3;     // replacements per slot
  double timeout_s = 600;   // below min_np this long ends the job
  double heartbeat_timeout_s = 0;  // a process silent this long is terminated; 0: not watched
  // A replacement started through the launch template (Respawn returned
  // true) whose remote end has not started its program this long after
  // (remote_rank.h's started_key()) is terminated, and its end is a failure
  // (--start-timeout: an unreachable host, a hanging ssh); 0: not watched.
  double start_timeout_s = 0;
  // Each slot's host (-H, or discovery's), recorded with the members;
  // empty: one host.
  std::vector<std::string> slot_hosts;
  // Host discovery: the hosts it reported at the start, and the
  // blacklist's cool-downs. Without `discovered`, the slots stay where they
  // are and nothing is blacklisted.
  std::optional<std::vector<HostSlots>> discovered;
  HostPoolOptions pool;
};

class ElasticController {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts process `m` of a slot on `host` ("" on one host); throws on
  // failure. Returns true when it went through the launch template (its
  // remote end records the program's start: start_timeout_s applies).
  using Respawn = std::function<bool(rendezvous::Member m, const std::string& host)>;

  // Ends process `m` (a kill); `why` is for the launcher's message.
  using Terminate = std::function<void(rendezvous::Member m, const std::string& why)>;

  ElasticController(ElasticOptions options, std::shared_ptr<rendezvous::Store> store, int ranks, Respawn respawn);
  // How silent processes are ended (heartbeat_timeout_s); none: not watched.
  void set_terminate(Terminate terminate) { terminate_ = std::move(terminate); }

  // Publishes epoch 0 (every slot, incarnation 0); before any rank starts.
  void publish_initial();

  // Process `m` ended; `failed` when it exited non-zero or by a signal.
  // True when the job goes on without it; false when a failure must stop
  // the job (no member is left and none can be started). `note` says what
  // happened, for the launcher's message.
  bool member_ended(rendezvous::Member m, bool failed, std::string& note);

  // Discovery's hosts now (with host discovery only): ranks beyond a host's
  // slots are removed (file comment). Returns what changed, for the
  // launcher's log ("" when nothing did).
  std::string hosts_discovered(const std::vector<HostSlots>& hosts);

  // Starts waiting replacements and new slots (discovery), admits the
  // processes that are ready and publishes removals. A non-empty result
  // ends the job: the world stayed below min_np for timeout_s (said in the
  // result).
  std::string tick(Clock::time_point now);
  static constexpr std::chrono::milliseconds kTickPeriod{20};
  // How often heartbeats and replacements' starts are read (a few store
  // reads per process), rather than every tick.
  static constexpr std::chrono::milliseconds kWatchPeriod{250};
  // How many epochs before the latest a lost member is announced in.
  static constexpr int64_t kLostEpochs = 2;

  // The host slot `slot` runs on ("" on one host).
  std::string host_of(int slot) const;

 private:
  void publish(std::vector<rendezvous::Member> members);
  // Starts `m` on `host` (pending until it joins); false when it failed to.
  bool start(rendezvous::Member m, const std::string& host, std::string& error, Clock::time_point now);
  bool settled() const;
  void announce_lost(rendezvous::Member m);
  void watch_heartbeats(Clock::time_point now);
  void watch_starts(Clock::time_point now);

  ElasticOptions options_;
  std::shared_ptr<rendezvous::Store> store_;
  Respawn respawn_;
  Terminate terminate_;
  HeartbeatTracker pulses_;         // each member's heartbeats as last read, and since when they stand still
  std::set<std::string> silenced_;  // members killed for their silence, by "slot.incarnation"
  Clock::time_point next_watch_{};
  // Replacements started through the launch template whose program has not
  // started yet: since when (start_timeout_s).
  std::map<std::string, std::pair<rendezvous::Member, Clock::time_point>> starting_;
  rendezvous::Membership current_;             // the latest published epoch
  std::deque<rendezvous::Membership> recent_;  // it and the kLostEpochs before it (announce_lost())
  std::vector<rendezvous::Member> survivors_;  // members alive (the next epoch's base)
  std::vector<rendezvous::Member> pending_;    // started, not yet members
  std::vector<rendezvous::Member> waiting_;    // replacements waiting for a free host (discovery)
  std::vector<rendezvous::Member> removed_;    // told to leave (or dropped) by discovery, not ended yet
  std::map<int, std::string> slot_host_;
  std::map<int, int> restarts_;                // per slot
  std::optional<HostPool> pool_;               // host discovery
  int next_slot_ = 0;
  bool lost_since_publish_ = false;  // a member of the latest epoch died since it was published
  bool removal_pending_ = false;     // survivors_ lost removed members the latest epoch still has
  std::optional<Clock::time_point> below_since_;
  bool finished_ = false;
};

}  // namespace cohort::launcher
