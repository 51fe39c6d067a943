// Doorbell: how an idle engine sleeps without burning a core and wakes on
// new work on any rank, with no fixed-period polling.
//
// The ranks decide together (from the cycle records, so identically) to
// sleep after a cycle; the k-th such sleep is epoch k. Every rank's engine
// thread then blocks in Store::wait on the key "bell/<k>". Whoever has work
// rings: Store::set("bell/<k>"), one store call, which wakes every rank, and
// they run cycles until they next decide to sleep (epoch k+1).
//
// No lost wake-up: a submitter first makes its work visible to the engine
// thread (the submission queue, under the engine's mutex) and then calls
// ring_if_sleeping(); the engine thread first marks itself sleeping
// (begin_sleep) and then looks at the queue. Both steps are ordered by
// mutexes, so either the engine sees the work and rings itself, or the
// submitter sees the engine asleep and rings. A ring is done under the
// doorbell's mutex, so once end_sleep() returns no ring of that epoch is in
// flight, and the key can be removed after the next cycle (every rank has
// left the epoch once that collective completes). A work ring stores "",
// a failure ring "failed".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cohort/rendezvous/store.h"

namespace cohort::engine {

class Doorbell {
 public:
  // Keys are "<prefix>bell/<epoch>" in `store`.
  Doorbell(std::shared_ptr<rendezvous::Store> store, std::string prefix);

  // Any thread, after making work visible to the engine thread: wakes the
  // group when this rank's engine sleeps and nobody rang this epoch yet.
  // Returns whether this call rang.
  bool ring_if_sleeping();

  // Engine thread: marks the engine asleep in `epoch`, then rings at once if
  // `has_work()` (checked after the mark; see the file comment).
  void begin_sleep(uint64_t epoch, const std::function<bool()>& has_work);
  // Engine thread: waits for the ring of the current epoch.
  enum class Ring { none, work, failure };  // none: `timeout` passed first
  Ring wait(rendezvous::Duration timeout);
  void end_sleep();

  // A failing engine wakes ranks that may sleep in `epoch` with a ring that
  // says so: they stop without entering a cycle the failed rank will never join.
  void ring_failure(uint64_t epoch);

  // Removes an epoch's key (once every rank has left it).
  void forget(uint64_t epoch);

  std::string key(uint64_t epoch) const { return prefix_ + "bell/" + std::to_string(epoch); }

 private:
  std::shared_ptr<rendezvous::Store> store_;
  std::string prefix_;
  std::mutex mutex_;
  bool sleeping_ = false;
  bool rung_ = false;
  uint64_t epoch_ = 0;
};

}  // namespace cohort::engine
