#include "cohort/launcher/rank_environment.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cohort/launcher/torch_master.h"

extern char** environ;

namespace cohort::launcher {

EnvironmentMap current_environment() {
  EnvironmentMap env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    // The first definition wins, as with getenv().
    env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

int available_cores() {
  // A dynamically sized set: machines may have more CPUs than cpu_set_t holds.
  for (int cpus = 1024; cpus <= (1 << 16); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    const size_t bytes = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(0, bytes, set) == 0) {
      const int count = CPU_COUNT_S(bytes, set);
      CPU_FREE(set);
      return std::max(1, count);
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

int threads_per_rank(int cores, int ranks) { return std::max(1, cores / std::max(1, ranks)); }

namespace {
constexpr const char* kThreadVariables[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"};
}  // namespace

std::span<const char* const> thread_variables() { return kThreadVariables; }

std::string thread_count(const EnvironmentMap& base, const JobEnvironment& job) {
  const EnvironmentMap env = rank_environment(base, job, RankPlacement{});
  const auto it = env.find("OMP_NUM_THREADS");
  return it == env.end() ? std::string("as many as their host's cores") : it->second;
}

EnvironmentMap rank_environment(const EnvironmentMap& base, const JobEnvironment& job, int rank) {
  return rank_environment(base, job,
                          RankPlacement{.rank = rank, .host = {}, .local_rank = rank, .local_size = job.size});
}

EnvironmentMap rank_environment(const EnvironmentMap& base, const JobEnvironment& job, const RankPlacement& where) {
  EnvironmentMap env = base;
  const std::string r = std::to_string(where.rank);
  const std::string n = std::to_string(job.size);
  const std::string local_rank = std::to_string(where.local_rank);
  const std::string local_size = std::to_string(where.local_size);
  const std::string port = std::to_string(job.store_port);
  env["COHORT_RANK"] = r;
  env["COHORT_SIZE"] = n;
  env["COHORT_LOCAL_RANK"] = local_rank;
  env["COHORT_LOCAL_SIZE"] = local_size;
  // Set for an elastic job's processes only (launcher.cc); an inherited
  // copy (a cohortrun started from inside a rank) must not make this job
  // look elastic.
  env.erase("COHORT_ELASTIC_SLOT");
  env.erase("COHORT_ELASTIC_INCARNATION");
  env.erase("COHORT_ELASTIC_JOINING");
  env.erase("COHORT_HEARTBEAT");
  if (job.heartbeat) env["COHORT_HEARTBEAT"] = "1";
  if (job.multi_host) env["COHORT_HOST"] = where.host;
  // An IPv6 address needs brackets before the port.
  const bool v6 = job.store_host.find(':') != std::string::npos;
  env["COHORT_STORE_ADDR"] = (v6 ? "[" + job.store_host + "]" : job.store_host) + ":" + port;
  env["COHORT_JOB_ID"] = job.job_id;
  env["COHORT_SECRET"] = job.secret;
  if (!job.backend.empty()) env["COHORT_BACKEND"] = job.backend;
  env["RANK"] = r;
  env["WORLD_SIZE"] = n;
  env["LOCAL_RANK"] = local_rank;
  env["LOCAL_WORLD_SIZE"] = local_size;
  // torch.distributed's env:// (torch_master.h). Never the store's address:
  // rank 0's c10d TCPStore would find the port taken. An inherited
  // MASTER_* (a cohortrun started from inside a rank) is not this job's;
  // the user's own come from --env, below.
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  if (!job.torch_master.empty()) set_torch_master(env, job.torch_master);

  for (const char* var : kThreadVariables) {
    const bool user_set =
        base.contains(var) ||
        std::any_of(job.extra.begin(), job.extra.end(), [&](const auto& kv) { return kv.first == var; });
    if (!user_set && job.threads_per_rank > 0) env[var] = std::to_string(job.threads_per_rank);
  }
  for (const auto& [key, value] : job.extra) env[key] = value;
  return env;
}

std::vector<std::pair<std::string, std::string>> remote_rank_variables(const EnvironmentMap& base,
                                                                       const JobEnvironment& job,
                                                                       const RankPlacement& where) {
  // The rest of the launcher's environment (PATH, HOME, ...) describes this
  // machine, not the rank's host, and is left to the remote login.
  EnvironmentMap forwarded;
  for (const auto& [key, value] : base) {
    const bool thread_variable =
        // (An init-capture: clang before 16 cannot capture a structured binding.)
        std::any_of(std::begin(kThreadVariables), std::end(kThreadVariables),
                    [&name = key](const char* v) { return name == v; });
    if (key.starts_with("COHORT_") || thread_variable) forwarded.emplace(key, value);
  }
  JobEnvironment remote = job;
  remote.threads_per_rank = 0;
  const EnvironmentMap env = rank_environment(forwarded, remote, where);
  return {env.begin(), env.end()};
}

std::vector<std::string> to_envp(const EnvironmentMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [key, value] : env) out.push_back(key + "=" + value);
  return out;
}

}  // namespace cohort::launcher
