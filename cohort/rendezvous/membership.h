// Membership of an elastic job: which processes form the world, epoch by
// epoch, as the launcher (cohortrun --min-np) publishes it in the job's store.
//
// A member is a slot (the rank it was started as) and an incarnation (0 for
// the first process of the slot, then one more per replacement). An epoch's
// members are listed in rank order: the oldest members first, so that a
// membership change keeps rank 0 on a process that has the job's state.
//
// Keys, in the store's root namespace:
//   elastic/epoch          the latest epoch published (decimal)
//   elastic/members/<e>    epoch e's members, "slot.incarnation" comma-separated,
//                          each followed by "/host" when the job spans hosts
//   elastic/ready/<s>.<i>  set by a replacement once it can join a world
//   elastic/formed/<e>     set by epoch e's rank 0 once its world is formed
//                          (every member has read epoch e)
//   elastic/end            set when no epoch will follow: why (the job
//                          finished, or stayed below --min-np)
//   elastic/alive/<s>.<i>  a process's heartbeat: a counter it adds 1 to
//                          every COHORT_ELASTIC_HEARTBEAT_MS (heartbeat.h)
//   elastic/lost/<e>       set by the launcher when a member of epoch e
//                          failed or went silent (that member): e's world
//                          cannot complete a collective any more
//
// The launcher is the only writer of epochs: it knows which processes live.
// An epoch is published only after its members list, so a reader that sees
// `elastic/epoch` = e can read epoch e's members.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

struct Member {
  int slot = 0;
  int incarnation = 0;
  bool operator==(const Member&) const = default;
};

// "slot.incarnation"; ConfigError on a malformed text.
std::string member_text(Member m);
Member parse_member(const std::string& text);

struct Membership {
  int64_t epoch = -1;           // -1: none
  std::vector<Member> members;  // rank order
  // Where each member runs (its host in cohortrun's host list), in rank
  // order; empty when the job runs on one host.
  std::vector<std::string> hosts;
  int size() const { return static_cast<int>(members.size()); }
  // The rank of `m` in this epoch, -1 when it is not a member.
  int rank_of(Member m) const;
};

// Thrown by wait_for_membership() when the launcher ended the elastic job
// (elastic/end): the message says why.
class MembershipEnded : public Error {
 public:
  using Error::Error;
};

// ---- the launcher's side ----------------------------------------------------

// Writes `m.members` under its epoch, then makes it the latest.
void publish_membership(Store& store, const Membership& m);
// No epoch will follow; processes waiting for one get MembershipEnded(why).
void end_membership(Store& store, const std::string& why);
// Whether replacement `m` said it is ready to join.
bool member_ready(Store& store, Member m);
// Whether epoch `epoch`'s world was formed (announce_formed()).
bool epoch_formed(Store& store, int64_t epoch);
// The heartbeats process `m` sent so far (beat()); 0 before its first.
int64_t heartbeats(Store& store, Member m);
// Member `m` of epoch `epoch` was lost: that world is abandoned
// (lost_member()).
void announce_lost(Store& store, int64_t epoch, Member m);

// ---- a member's side --------------------------------------------------------

// The latest epoch published; -1 when none.
int64_t latest_epoch(Store& store);
// Throws MembershipEnded when the launcher ended the job (end_membership()).
void throw_if_ended(Store& store);
// Epoch `epoch`'s members (it must have been published).
Membership read_membership(Store& store, int64_t epoch);
// A replacement's announcement that it can join (member_ready()).
void announce_ready(Store& store, Member me);
// Epoch `epoch`'s rank 0, once the epoch's world is formed: every member
// has read the epoch, so a later one can be published without members
// reading different epochs (epoch_formed()).
void announce_formed(Store& store, int64_t epoch);
// One heartbeat of process `me` (heartbeats()).
void beat(Store& store, Member me);
// The member of epoch `epoch` the launcher announced lost ("slot.incarnation"),
// or nullopt while none was.
std::optional<std::string> lost_member(Store& store, int64_t epoch);

// The latest epoch after `after` that has `me` as a member, waiting up to
// `timeout` for one. Epochs that leave `me` out are skipped when `me` is
// joining (after < 0: not yet a member of any); otherwise the latest epoch,
// if it leaves `me` out, means `me` was removed: the returned membership
// has it at rank -1. MembershipEnded when the launcher ends the
// job; TimeoutError after `timeout`.
Membership wait_for_membership(Store& store, Member me, int64_t after, Duration timeout);

}  // namespace cohort::rendezvous
