// EpochStore: the store an elastic epoch's world rendezvouses in, which
// gives up when the launcher publishes a later epoch (membership.h).
//
// A member that dies while the others form a new world would otherwise
// hold them in the communicator's rendezvous until it times out
// (COHORT_TIMEOUT_S): its keys never come. While armed (during the
// communicator's creation), waits here run in short slices and, between
// them, look at the job's latest epoch: once it is past this one, they
// throw EpochSuperseded, and the member moves on to the latest epoch; once
// the launcher ended the job (training finished before a new member's
// world could form, or the job stayed below --min-np), MembershipEnded.
// Disarmed (once the world is formed), the store is the epoch's namespace
// and nothing more: a later epoch then means a change the members agree on
// at a commit, not a reason to abandon an operation.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cohort/common/error.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::rendezvous {

// The launcher published an epoch after the one whose world was forming.
class EpochSuperseded : public Error {
 public:
  using Error::Error;
};

class EpochStore : public PrefixStore {
 public:
  // Keys under "world/e<epoch>" of `job_store` (the job's root store, where
  // the membership is).
  EpochStore(std::shared_ptr<Store> job_store, int64_t epoch);

  Bytes get(const std::string& key, Duration timeout) override;
  using Store::get;
  void wait(std::span<const std::string> keys, Duration timeout) override;

  void disarm() { armed_ = false; }

 private:
  void throw_if_superseded();

  std::shared_ptr<Store> job_store_;
  int64_t epoch_;
  std::atomic<bool> armed_{true};
};

}  // namespace cohort::rendezvous
