// GroupWorld: the communicator and engine of one torch.distributed process
// group, formed from the store that torch.distributed hands a backend.
//
// torch.distributed creates the store (env://, tcp://, file://, a TCPStore
// from torchrun) and passes it to the backend with the group's rank and
// size. cohort's engine sleeps in long Store::wait calls on one thread while
// others ring it on the same store (engine/doorbell.h); c10d's TCPStore runs
// one call at a time per client, so the group uses c10d's store only to
// bootstrap a store of cohort's own:
//   1. every rank posts its host ("cohort/host/<rank>"): the ranks are all
//      on this host, or not (the backend's "auto" choice and the store's
//      bind address follow);
//   2. rank 0 serves a cohort TcpStore (loopback when all ranks are local,
//      else every interface, with a secret drawn for the group) and posts
//      its address, the secret and a job id for the shared-memory segments;
//   3. every rank connects to it and builds the communicator
//      (comm::create_communicator: COHORT_BACKEND, COHORT_IFACE and the
//      other COHORT_* tunables apply) and an engine over it.
// The secret travels through torch's store, which is as trusted as the job:
// whoever can write to it can already impersonate any rank of torch's own
// backends.
//
// Collective over the group's ranks. Destruction is collective too (the
// engine's shutdown); rank 0's store server goes last.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/engine/engine.h"
#include "cohort/rendezvous/store.h"

namespace c10d {
class Store;
}

namespace cohort::python {

class GroupWorld {
 public:
  // `bootstrap` is the store torch.distributed passed to the backend (a
  // PrefixStore of the group's); `timeout` is the group's (init_process_group's
  // timeout=), used for the rendezvous and as the communicator's timeout.
  GroupWorld(::c10d::Store& bootstrap, int rank, int size, std::chrono::milliseconds timeout);
  GroupWorld(const GroupWorld&) = delete;
  GroupWorld& operator=(const GroupWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  engine::Engine& engine() { return *engine_; }
  const std::string& backend() const { return backend_; }

 private:
  int rank_, size_;
  std::string backend_;                       // the communicator's, resolved
  std::shared_ptr<void> server_;              // rank 0: the store server
  std::shared_ptr<rendezvous::Store> store_;  // cohort's store for the group
  std::unique_ptr<engine::Engine> engine_;    // owns the communicator
};

}  // namespace cohort::python
