// FailureReport: a failing rank's account of its failure, kept in the
// communicator's store so that its peers can explain theirs.
//
// Gloo tells a rank only what it saw itself: a timeout, or a connection that
// closed. Which rank died, which one timed out and closed its connections,
// and whether two ranks simply called different collectives is known only by
// putting the ranks' accounts side by side. Every failing rank publishes one
// record ("failure/<rank>") before closing its connections, and then reads
// the records of the ranks involved, waiting at most `grace` in all for
// those not yet written (a rank that died never writes one).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "cohort/rendezvous/store.h"

namespace cohort::comm::gloo {

struct FailureRecord {
  enum class Kind { timeout, lost, mismatch, left };
  Kind kind = Kind::lost;
  // The collective the rank was in: its sequence number and description
  // (empty `call` when it was not in a collective).
  uint64_t sequence = 0;
  std::string call;
  int culprit = -1;     // the world rank it blames, when it knows one
  std::string message;  // its error message
};

class FailureReport {
 public:
  FailureReport(std::shared_ptr<rendezvous::Store> store, int rank, std::chrono::milliseconds grace);

  // Writes this rank's record (the first call only). Never throws: a store
  // that is gone only costs the peers their explanation.
  void publish(const FailureRecord& mine) noexcept;
  bool published() const { return published_; }

  // The records of `ranks` (communicator ranks), waiting until the grace
  // runs out for the missing ones; absent ranks wrote none in time.
  std::map<int, FailureRecord> collect(std::span<const int> ranks) noexcept;

 private:
  static std::string key(int rank) { return "failure/" + std::to_string(rank); }

  std::shared_ptr<rendezvous::Store> store_;
  int rank_;
  std::chrono::milliseconds grace_;
  bool published_ = false;
};

}  // namespace cohort::comm::gloo
