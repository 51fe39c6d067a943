// The environment each rank starts with.
#pragma once

#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cohort/launcher/placement.h"

namespace cohort::launcher {

using EnvironmentMap = std::map<std::string, std::string>;

// What is the same for every rank of a job.
struct JobEnvironment {
  std::string job_id;
  std::string secret;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int size = 1;
  std::string backend;  // empty: COHORT_BACKEND is not set by cohortrun
  std::vector<std::pair<std::string, std::string>> extra;  // --env, applied last
  // For OMP_NUM_THREADS & co. unless already set; 0 leaves them unset (a
  // remote rank's end sets them from its host's cores).
  int threads_per_rank = 1;
  // torch.distributed's MASTER_ADDR and MASTER_PORT as "addr:port"
  // (torch_master.h); empty: not set (rank 0's remote end chooses them).
  std::string torch_master;
  // Set COHORT_HOST (a host list was given: ranks may span hosts).
  bool multi_host = false;
  // Set COHORT_HEARTBEAT=1: every rank beats to the store from a thread of
  // its own, for the launcher's HostWatch (a multi-host job of fixed size).
  bool heartbeat = false;
};

// The environment of the launcher process.
EnvironmentMap current_environment();

// CPUs this process may run on (sched_getaffinity), at least 1.
int available_cores();

// Threads each of `ranks` ranks may use without oversubscribing `cores`:
// max(1, cores / ranks).
int threads_per_rank(int cores, int ranks);

// OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS: the thread counts
// cohortrun sets for ranks unless the user did.
std::span<const char* const> thread_variables();

// OMP_NUM_THREADS as a rank on this machine gets it: `job.extra`'s (--env),
// else `base`'s (exported), else job.threads_per_rank. For --verbose and
// --dry-run, which must say what the ranks really get.
std::string thread_count(const EnvironmentMap& base, const JobEnvironment& job);

// The environment of rank `rank` (local rank `rank`: all ranks run on this
// machine): `base` (the launcher's environment), plus the COHORT_* and
// torchrun variables, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
// MKL_NUM_THREADS when neither `base` nor `job.extra` sets them, then
// `job.extra` in order.
EnvironmentMap rank_environment(const EnvironmentMap& base, const JobEnvironment& job, int rank);

// The same for a rank placed on a host: COHORT_LOCAL_RANK, LOCAL_RANK,
// COHORT_LOCAL_SIZE, LOCAL_WORLD_SIZE from `where`, and with job.multi_host
// COHORT_HOST = where.host (the name communicators group ranks by).
EnvironmentMap rank_environment(const EnvironmentMap& base, const JobEnvironment& job, const RankPlacement& where);

// What a remote rank gets on top of its host's own environment: the job's
// variables for `where` (as above, without thread counts unless the user set
// them) and, from the launcher's environment `base`, the COHORT_* tunables and
// OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS when set there.
std::vector<std::pair<std::string, std::string>> remote_rank_variables(const EnvironmentMap& base,
                                                                       const JobEnvironment& job,
                                                                       const RankPlacement& where);

// "K=V" strings for execve.
std::vector<std::string> to_envp(const EnvironmentMap& env);

}  // namespace cohort::launcher
