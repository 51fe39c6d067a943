// Discovery: who am I, how many are we, and where is the store, from the
// variables a launcher sets.
//
// Sources, in order of precedence (the first whose rank variable is set wins):
//   cohortrun  COHORT_RANK, COHORT_SIZE, COHORT_LOCAL_RANK, COHORT_LOCAL_SIZE,
//              COHORT_STORE_ADDR (host:port), COHORT_JOB_ID, COHORT_SECRET;
//              an elastic job's (--min-np) also COHORT_ELASTIC_SLOT (its
//              COHORT_RANK) and COHORT_ELASTIC_INCARNATION
//   torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//              MASTER_PORT (TORCHELASTIC_RUN_ID as job id)
//   OpenMPI    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//              OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//              SLURM_NTASKS_PER_NODE (or derived), SLURM_JOB_ID, in a task
//              of an srun step (SLURM_STEP_ID set; sbatch's batch script is
//              not one, and runs as a single process)
//   none       a single process: rank 0 of 1, no store needed
// Under torchrun, OpenMPI and Slurm the store address comes from
// COHORT_STORE_ADDR, else MASTER_ADDR/MASTER_PORT, and rank 0 hosts the
// store server (store_in_rank0). Under srun with neither set, it is the
// first node of SLURM_STEP_NODELIST at a port in [20000, 30000) derived from
// SLURM_JOB_ID and SLURM_STEP_ID (task 0 must run on that node, as srun's
// block and cyclic distributions place it). Rank 0 serves the store on
// store_bind: the address itself when it is
// loopback; loopback too when every rank runs on this host (local size ==
// size; the ranks then connect to 127.0.0.1 whatever the address names);
// else every interface. COHORT_SECRET is used when set everywhere; without
// it a store on a non-loopback address is refused (tcp_store.h).
//
// The job id is what every rank of one job agrees on and no other job has:
// COHORT_JOB_ID, else the launcher's (cohortrun's COHORT_JOB_ID,
// TORCHELASTIC_RUN_ID unless "none", PMIX_NAMESPACE or the OpenMPI job id,
// SLURM_JOB_ID.SLURM_STEP_ID), else the store address. Ranks register with
// it in the store (registration.h).
//
// Missing or contradictory values (rank >= size, a non-number, RANK set
// without WORLD_SIZE, COHORT_RANK disagreeing with RANK, ...) throw
// ConfigError naming the variable and its value.
#pragma once

#include <map>
#include <string>

namespace cohort::rendezvous {

enum class LaunchSource { cohortrun, torchrun, openmpi, slurm, single };
const char* launch_source_name(LaunchSource s);

struct LaunchInfo {
  LaunchSource source = LaunchSource::single;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string store_host;  // empty when size == 1 and no store is configured
  int store_port = 0;
  bool store_in_rank0 = false;  // rank 0 must start the TcpStoreServer
  std::string store_bind;       // with store_in_rank0: the address it binds
  std::string job_id = "local";
  std::string secret;
  // An elastic job's process (membership.h): its slot (-1: not elastic) and
  // incarnation. Its rank and size are then the membership's, not these.
  int elastic_slot = -1;
  int elastic_incarnation = 0;
  // Started while the job runs (a replacement, or a rank on a new host): it
  // joins members in progress (COHORT_ELASTIC_JOINING=1).
  bool elastic_joining = false;
  // cohortrun watches this multi-host job's hosts (launcher/host_watch.h):
  // the process beats to the store as elastic ones do (COHORT_HEARTBEAT=1).
  bool heartbeat = false;
};

using Environment = std::map<std::string, std::string>;
// This process's environment variables.
Environment process_environment();

// From this process's environment, or from `env` (tests).
LaunchInfo discover();
LaunchInfo discover(const Environment& env);
// The launcher whose rank variable is set (the precedence above), without
// checking the rest: what started this process, even where discover() needs
// more (mpirun without a store address, which init() bootstraps over MPI).
LaunchSource launched_by();
LaunchSource launched_by(const Environment& env);

}  // namespace cohort::rendezvous
