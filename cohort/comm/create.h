// Creating communicators: from a store and a rank (create_communicator), or
// for the whole job from the launcher's variables (init_world).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/store.h"

namespace cohort::comm {

struct CommunicatorOptions {
  std::string backend = "auto";  // "auto" or "shm"; COHORT_BACKEND by default
  std::chrono::milliseconds timeout{0};  // 0: COHORT_TIMEOUT_S
  std::string job_id = "local";  // names the job's shared-memory segments
};

// The options with every unset field taken from the COHORT_* tunables.
CommunicatorOptions options_from_env();

// A communicator of `size` ranks that rendezvous through `store` (keys are
// created under the store as given; pass a PrefixStore to isolate groups).
// Collective: every rank calls it with the same store and size.
std::unique_ptr<Communicator> create_communicator(std::shared_ptr<rendezvous::Store> store, int rank,
                                                  int size, const CommunicatorOptions& options);

// The whole job, as a program started by cohortrun, torchrun, mpirun or srun
// sees it (a single process when started alone).
struct World {
  rendezvous::LaunchInfo info;
  std::shared_ptr<rendezvous::Store> store;
  std::unique_ptr<Communicator> comm;
  std::shared_ptr<void> store_server;  // held when this rank hosts the store
};
World init_world();

}  // namespace cohort::comm
