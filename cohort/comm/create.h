// Creating communicators: from a store and a rank (create_communicator), or
// for the whole job from the launcher's variables (init_world).
//
// Backends (CommunicatorOptions::backend, COHORT_BACKEND):
//   shm   ranks on one host, through shared memory
//   gloo  ranks on any hosts, over TCP (built with COHORT_WITH_GLOO)
//   mpi   the ranks of an MPI job (built with COHORT_WITH_MPI; mpirun, or
//         srun --mpi=pmix)
//   hierarchical  shm inside each host, gloo across hosts (built with
//         COHORT_WITH_GLOO; see hierarchical/communicator.h)
//   auto  mpi when the job was started by mpirun or srun --mpi=pmix and MPI
//         is built in; else shm when every rank is on this host; else
//         hierarchical.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/store.h"

namespace cohort::comm {

struct CommunicatorOptions {
  std::string backend = "auto";  // auto, shm, gloo or mpi; COHORT_BACKEND by default
  std::chrono::milliseconds timeout{0};  // 0: COHORT_TIMEOUT_S
  std::string job_id = "local";  // names the job's shared-memory segments
  // How the job was started and laid out; init_world fills these from
  // discovery. They steer "auto" and gloo's network interface.
  rendezvous::LaunchSource launch_source = rendezvous::LaunchSource::single;
  bool all_local = true;   // every rank of the communicator is on this host
  std::string store_host;  // the store's host when known: gloo listens on the interface that reaches it
  std::string iface;       // COHORT_IFACE: gloo's interface, overriding the choice above
  // An elastic job's world (cohortrun --min-np): a lost peer is expected,
  // and gloo waits for failure reports only kElasticFailureGrace (a process
  // killed writes none, and every survivor would wait the full grace).
  bool elastic = false;
  // Elastic worlds: polled by the gloo communicator (and the hierarchical
  // one's cross-host part) while it lives, and by the shm communicator while
  // a rank waits; a reason returned means the world lost a member that may
  // never close its connections (a cut link), or that is not in this group
  // at all (a group split from the world), and every collective fails with
  // PeerLostError at once (gloo's abort(), shm's abort record).
  std::function<std::optional<std::string>()> abandoned;
};

inline constexpr std::chrono::milliseconds kElasticFailureGrace{50};

// The options with every unset field taken from the COHORT_* tunables.
CommunicatorOptions options_from_env();

// The backends this build can create, e.g. {"shm", "gloo", "mpi"}.
std::vector<std::string> available_backends();

// The backend "auto" (or an explicit name, checked) resolves to for these
// options: "shm", "gloo" or "mpi". Throws ConfigError for an unknown backend
// or one this build lacks.
std::string resolve_backend(const CommunicatorOptions& options);

// A communicator of `size` ranks that rendezvous through `store` (keys are
// created under the store as given; pass a PrefixStore to isolate groups).
// Collective: every rank calls it with the same store and size. The mpi
// backend ignores the store; its rank and size must be the MPI job's.
std::unique_ptr<Communicator> create_communicator(std::shared_ptr<rendezvous::Store> store, int rank,
                                                  int size, const CommunicatorOptions& options);

// The whole job, as a program started by cohortrun, torchrun, mpirun or srun
// sees it (a single process when started alone). Under mpirun or
// srun --mpi=pmix with MPI built in (backend auto or mpi) the communicator
// is MPI's and needs no store address: when none is configured, rank 0
// serves the job's store and tells the others over MPI. Under srun without
// PMIx, the job goes through the store (rendezvous/discovery.h says where it
// is). Rank 0 then prints one line on stderr (backend, ranks, hosts, store,
// launcher) unless COHORT_BANNER=0; every rank takes part in counting hosts.
// Members are destroyed bottom up: the communicator (which may report a
// failure through the store) before the store, the store before its server.
struct World {
  rendezvous::LaunchInfo info;  // rank and size: this world's (an elastic epoch's)
  std::shared_ptr<void> store_server;  // held when this rank hosts the store
  std::shared_ptr<rendezvous::Store> store;
  std::unique_ptr<Communicator> comm;
  CommunicatorOptions options;         // what comm was made with
  rendezvous::Membership membership;  // elastic jobs: the epoch comm spans (epoch -1 otherwise)
};
World init_world();

// Elastic jobs (cohortrun --min-np): destroys `world.comm` and forms the
// world of the next membership epoch that includes this process, waiting
// for the launcher to publish it (its rank and size in world.info). A
// replacement process announces itself ready in init_world() first. Throws
// rendezvous::MembershipEnded when the launcher ended the job, and
// ElasticLeave when the new epoch leaves this process out.
void reform_world(World& world);

class ElasticLeave : public Error {
 public:
  using Error::Error;
};

}  // namespace cohort::comm
