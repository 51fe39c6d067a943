// A store for a job that mpirun or srun started without one.
//
// The engine and the launcher's conventions want a Store even when the
// communicator is MPI. Without COHORT_STORE_ADDR or MASTER_ADDR/MASTER_PORT,
// rank 0 of the MPI job serves a TcpStore on a free port and broadcasts its
// address and a fresh secret over MPI, so that `mpirun -np 4 prog` needs no
// configuration. When every rank is on this host the store listens on
// 127.0.0.1 only and is reached there; else it listens on every interface
// and is reached at the IPv4 address of COHORT_IFACE, else that of
// primary_interface() (common/network_interface.h), else the host name. The secret
// is COHORT_SECRET when set, else a fresh one (generate_secret()).
#pragma once

#include <memory>
#include <string>

#include "cohort/comm/communicator.h"

namespace cohort::comm::mpi {

struct BootstrappedStore {
  std::string host;
  int port = 0;
  std::string secret;
  std::shared_ptr<void> server;  // held by rank 0
};

// Collective over `world` (rank 0 serves).
BootstrappedStore bootstrap_store(comm::Communicator& world, bool all_local);

}  // namespace cohort::comm::mpi
