// The environment each rank starts with.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

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
  int threads_per_rank = 1;  // for OMP_NUM_THREADS & co. unless already set
};

// The environment of the launcher process.
EnvironmentMap current_environment();

// CPUs this process may run on (sched_getaffinity), at least 1.
int available_cores();

// Threads each of `ranks` ranks may use without oversubscribing `cores`:
// max(1, cores / ranks).
int threads_per_rank(int cores, int ranks);

// The environment of rank `rank` (local rank `rank`: all ranks run on this
// machine): `base` (the launcher's environment), plus the COHORT_* and
// torchrun variables, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
// MKL_NUM_THREADS when neither `base` nor `job.extra` sets them, then
// `job.extra` in order.
EnvironmentMap rank_environment(const EnvironmentMap& base, const JobEnvironment& job, int rank);

// "K=V" strings for execve.
std::vector<std::string> to_envp(const EnvironmentMap& env);

}  // namespace cohort::launcher
