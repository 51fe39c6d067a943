#include "cohort/rendezvous/discovery.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/rendezvous/slurm_lists.h"
#include "cohort/rendezvous/tcp_store.h"

extern char** environ;

namespace cohort::rendezvous {
namespace {

// Read-only view of the variables, where an empty value counts as unset
// (the way `VAR= prog` is usually meant).
class Env {
 public:
  explicit Env(const Environment& env) : env_(env) {}

  std::optional<std::string> get(const std::string& name) const {
    auto it = env_.find(name);
    if (it == env_.end() || it->second.empty()) return std::nullopt;
    return it->second;
  }
  bool has(const std::string& name) const { return get(name).has_value(); }

  // A non-negative int; nullopt when unset.
  std::optional<int> count(const std::string& name) const {
    auto text = get(name);
    if (!text) return std::nullopt;
    int value = 0;
    const char* first = text->data();
    const char* last = first + text->size();
    auto [end, ec] = std::from_chars(first, last, value);
    COHORT_CHECK_AS(ConfigError, ec == std::errc() && end == last && value >= 0 && (*text)[0] != '-')
        << name << "='" << *text << "' is not a non-negative integer";
    return value;
  }

  // A count that must be set when `because` is.
  int required(const std::string& name, const std::string& because) const {
    auto v = count(name);
    COHORT_CHECK_AS(ConfigError, v.has_value())
        << because << "='" << *get(because) << "' is set but " << name << " is not";
    return *v;
  }

 private:
  const Environment& env_;
};

struct Address {
  std::string host;
  int port = 0;
};

// `whole` is the variable's full value, for the message.
int parse_port(const std::string& variable, const std::string& text, const std::string& whole) {
  int port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  COHORT_CHECK_AS(ConfigError, ec == std::errc() && end == text.data() + text.size() && port >= 1 &&
                                   port <= 65535 && !text.empty() && text[0] != '-')
      << variable << "='" << whole << "' does not end in a TCP port (1..65535)";
  return port;
}

// "host:port", "1.2.3.4:port" or "[v6::addr]:port".
Address parse_address(const std::string& variable, const std::string& text) {
  Address a;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    COHORT_CHECK_AS(ConfigError, close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':')
        << variable << "='" << text << "' is not [ipv6]:port";
    a.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    COHORT_CHECK_AS(ConfigError, colon != std::string::npos && text.find(':') == colon)
        << variable << "='" << text << "' is not host:port (write an IPv6 address as [addr]:port)";
    a.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  COHORT_CHECK_AS(ConfigError, !a.host.empty()) << variable << "='" << text << "' has no host";
  a.port = parse_port(variable, port, text);
  return a;
}

bool job_id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Ports rank 0 serves the store on under srun when none is configured:
// [20000, 30000), below Linux's ephemeral range.
constexpr int kSlurmFirstPort = 20000;
constexpr uint32_t kSlurmPorts = 10000;

// Job ids name shared-memory segments and files: keep them to a safe alphabet.
constexpr size_t kMaxJobId = 64;

std::string sanitize_job_id(const std::string& raw) {
  std::string out;
  for (char c : raw) out += job_id_char(c) ? c : '_';
  if (out.size() > kMaxJobId) out.resize(kMaxJobId);
  return out;
}

// The three counts a source gives, checked against each other.
void check_identity(const LaunchInfo& info, const char* rank_var, const char* size_var,
                    const char* local_rank_var, const char* local_size_var) {
  COHORT_CHECK_AS(ConfigError, info.size >= 1) << size_var << "='" << info.size << "' must be at least 1";
  COHORT_CHECK_AS(ConfigError, info.rank < info.size)
      << rank_var << "='" << info.rank << "' is not below " << size_var << "='" << info.size << "'";
  COHORT_CHECK_AS(ConfigError, info.local_size >= 1)
      << local_size_var << "='" << info.local_size << "' must be at least 1";
  COHORT_CHECK_AS(ConfigError, info.local_rank < info.local_size)
      << local_rank_var << "='" << info.local_rank << "' is not below " << local_size_var << "='"
      << info.local_size << "'";
  COHORT_CHECK_AS(ConfigError, info.local_size <= info.size)
      << local_size_var << "='" << info.local_size << "' exceeds " << size_var << "='" << info.size << "'";
}

// Local rank and size from a source that may leave both out (then this rank
// is taken to be alone on its host, which never wrongly assumes shared
// memory with another rank); one without the other is an error.
void local_pair(const Env& env, LaunchInfo& info, const char* local_rank_var, const char* local_size_var) {
  const auto lr = env.count(local_rank_var);
  const auto ls = env.count(local_size_var);
  if (!lr && !ls) return;
  COHORT_CHECK_AS(ConfigError, lr.has_value())
      << local_size_var << "='" << *ls << "' is set but " << local_rank_var << " is not";
  COHORT_CHECK_AS(ConfigError, ls.has_value())
      << local_rank_var << "='" << *lr << "' is set but " << local_size_var << " is not";
  info.local_rank = *lr;
  info.local_size = *ls;
}

void serve_store_in_rank0(LaunchInfo& info);

// The store under torchrun, OpenMPI and Slurm: COHORT_STORE_ADDR, else
// MASTER_ADDR and MASTER_PORT; rank 0 serves it.
void store_from_env(const Env& env, LaunchInfo& info, const char* rank_var) {
  if (auto addr = env.get("COHORT_STORE_ADDR")) {
    const Address a = parse_address("COHORT_STORE_ADDR", *addr);
    info.store_host = a.host;
    info.store_port = a.port;
  } else if (env.has("MASTER_ADDR") || env.has("MASTER_PORT")) {
    COHORT_CHECK_AS(ConfigError, env.has("MASTER_ADDR"))
        << "MASTER_PORT='" << *env.get("MASTER_PORT") << "' is set but MASTER_ADDR is not";
    COHORT_CHECK_AS(ConfigError, env.has("MASTER_PORT"))
        << "MASTER_ADDR='" << *env.get("MASTER_ADDR") << "' is set but MASTER_PORT is not";
    info.store_host = *env.get("MASTER_ADDR");
    info.store_port = parse_port("MASTER_PORT", *env.get("MASTER_PORT"), *env.get("MASTER_PORT"));
  } else {
    COHORT_CHECK_AS(ConfigError, info.size == 1)
        << launch_source_name(info.source) << " started " << rank_var << "='" << info.rank
        << "' of " << info.size << " ranks but no store address is set: set COHORT_STORE_ADDR=host:port "
        << "(or MASTER_ADDR and MASTER_PORT) to an address every rank reaches; rank 0 serves it";
  }
  if (info.store_host.empty()) return;
  serve_store_in_rank0(info);
}

// Rank 0 serves the store at info.store_host. Nobody beyond this host needs
// a store that every rank reaches locally: serve it on loopback, where other
// hosts cannot even try to join.
void serve_store_in_rank0(LaunchInfo& info) {
  info.store_in_rank0 = true;
  if (is_loopback_host(info.store_host)) {
    info.store_bind = info.store_host;
  } else if (info.local_size == info.size) {
    info.store_host = "127.0.0.1";
    info.store_bind = "127.0.0.1";
  } else {
    info.store_bind = "0.0.0.0";
  }
}

void discover_cohortrun(const Env& env, LaunchInfo& info) {
  info.source = LaunchSource::cohortrun;
  info.rank = *env.count("COHORT_RANK");
  info.size = env.required("COHORT_SIZE", "COHORT_RANK");
  info.local_rank = env.required("COHORT_LOCAL_RANK", "COHORT_RANK");
  info.local_size = env.required("COHORT_LOCAL_SIZE", "COHORT_RANK");
  check_identity(info, "COHORT_RANK", "COHORT_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_SIZE");
  // cohortrun also sets torchrun's variables; a difference means the
  // environment was edited or inherited from another launcher.
  const std::pair<const char*, const char*> pairs[] = {{"COHORT_RANK", "RANK"},
                                                       {"COHORT_SIZE", "WORLD_SIZE"},
                                                       {"COHORT_LOCAL_RANK", "LOCAL_RANK"},
                                                       {"COHORT_LOCAL_SIZE", "LOCAL_WORLD_SIZE"}};
  for (const auto& [ours, theirs] : pairs) {
    if (!env.has(theirs)) continue;
    const auto mine = env.count(ours);
    const auto other = env.count(theirs);
    COHORT_CHECK_AS(ConfigError, mine == other)
        << ours << "='" << *mine << "' disagrees with " << theirs << "='" << *other
        << "' (the environment mixes two launches)";
  }
  if (auto addr = env.get("COHORT_STORE_ADDR")) {
    const Address a = parse_address("COHORT_STORE_ADDR", *addr);
    info.store_host = a.host;
    info.store_port = a.port;
  } else {
    COHORT_CHECK_AS(ConfigError, info.size == 1)
        << "COHORT_RANK='" << info.rank << "' of COHORT_SIZE='" << info.size
        << "' is set but COHORT_STORE_ADDR is not";
  }
  info.store_in_rank0 = false;  // cohortrun serves it
  info.heartbeat = env.count("COHORT_HEARTBEAT").value_or(0) != 0;
  if (auto slot = env.count("COHORT_ELASTIC_SLOT")) {
    COHORT_CHECK_AS(ConfigError, *slot == info.rank)
        << "COHORT_ELASTIC_SLOT='" << *slot << "' disagrees with COHORT_RANK='" << info.rank << "'";
    info.elastic_slot = *slot;
    info.elastic_incarnation = env.count("COHORT_ELASTIC_INCARNATION").value_or(0);
    info.elastic_joining = env.count("COHORT_ELASTIC_JOINING").value_or(0) != 0;
  }
}

void discover_torchrun(const Env& env, LaunchInfo& info) {
  info.source = LaunchSource::torchrun;
  info.rank = *env.count("RANK");
  info.size = env.required("WORLD_SIZE", "RANK");
  local_pair(env, info, "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  check_identity(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  store_from_env(env, info, "RANK");
  if (auto run = env.get("TORCHELASTIC_RUN_ID"); run && *run != "none") info.job_id = sanitize_job_id(*run);
}

void discover_openmpi(const Env& env, LaunchInfo& info) {
  info.source = LaunchSource::openmpi;
  info.rank = *env.count("OMPI_COMM_WORLD_RANK");
  info.size = env.required("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK");
  local_pair(env, info, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  check_identity(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE");
  store_from_env(env, info, "OMPI_COMM_WORLD_RANK");
  if (auto ns = env.get("PMIX_NAMESPACE"))
    info.job_id = sanitize_job_id(*ns);
  else if (auto id = env.get("OMPI_MCA_ess_base_jobid"))
    info.job_id = sanitize_job_id("ompi-" + *id);
}

// The store under srun when no address is configured: rank 0 serves it on
// the first node of the step (where srun's block and cyclic distributions put
// task 0) at a port derived from the job and step ids, so that every task
// computes the same address and concurrent steps on a node differ.
void store_from_slurm(const Env& env, LaunchInfo& info) {
  if (env.has("COHORT_STORE_ADDR") || env.has("MASTER_ADDR") || env.has("MASTER_PORT") || info.size == 1) return;
  const char* list_var = env.has("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST"
                         : env.has("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                         : nullptr;
  if (!list_var) return;  // store_from_env says what to set
  std::string host;
  try {
    host = expand_slurm_host_list(list_var, *env.get(list_var)).front();
  } catch (const ConfigError& e) {
    COHORT_THROW(ConfigError) << e.what() << "; set COHORT_STORE_ADDR=host:port";
  }
  if (info.rank == 0) {
    const auto node = env.count("SLURM_NODEID");
    COHORT_CHECK_AS(ConfigError, !node || *node == 0)
        << "task 0 runs on node " << *node << " of " << list_var << "='" << *env.get(list_var)
        << "', not on its first node " << host << ", where the other tasks look for the store; set "
        << "COHORT_STORE_ADDR=<task 0's host>:<port> (or use srun's default block distribution)";
  }
  const std::string id = env.get("SLURM_JOB_ID").value_or("") + "." + env.get("SLURM_STEP_ID").value_or("");
  uint32_t hash = 2166136261u;  // FNV-1a
  for (const char c : id) hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
  info.store_host = host;
  info.store_port = kSlurmFirstPort + static_cast<int>(hash % kSlurmPorts);
}

// srun sets a step id for every task it starts; the batch script of sbatch
// (or a shell of salloc) has Slurm's job variables, SLURM_PROCID=0 among
// them, but is not one of the job's tasks.
bool in_slurm_step(const Env& env) { return env.has("SLURM_STEP_ID") || env.has("SLURM_STEPID"); }

void discover_slurm(const Env& env, LaunchInfo& info) {
  info.source = LaunchSource::slurm;
  info.rank = *env.count("SLURM_PROCID");
  const auto ntasks = env.count("SLURM_NTASKS");
  const auto nprocs = env.count("SLURM_NPROCS");
  COHORT_CHECK_AS(ConfigError, ntasks || nprocs) << "SLURM_PROCID='" << info.rank
                                                 << "' is set but SLURM_NTASKS is not";
  if (ntasks && nprocs) {
    COHORT_CHECK_AS(ConfigError, *ntasks == *nprocs)
        << "SLURM_NTASKS='" << *ntasks << "' disagrees with SLURM_NPROCS='" << *nprocs << "'";
  }
  info.size = ntasks ? *ntasks : *nprocs;

  // Tasks on this node: SLURM_NTASKS_PER_NODE when the user asked for it,
  // else this node's entry in the step's (or job's) tasks-per-node list. The
  // list is the actual layout, so it may be below the requested count (a
  // last node that is not full) but never above it.
  std::optional<int> derived;
  const char* list_var = env.has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                         : env.has("SLURM_TASKS_PER_NODE")    ? "SLURM_TASKS_PER_NODE"
                                                              : nullptr;
  if (list_var) {
    const std::vector<int> counts = parse_slurm_tasks_per_node(list_var, *env.get(list_var));
    const bool uniform = std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; });
    if (auto node = env.count("SLURM_NODEID")) {
      COHORT_CHECK_AS(ConfigError, static_cast<size_t>(*node) < counts.size())
          << "SLURM_NODEID='" << *node << "' is beyond the " << counts.size() << " nodes of " << list_var
          << "='" << *env.get(list_var) << "'";
      derived = counts[*node];
    } else if (uniform) {
      derived = counts[0];
    }
  }
  const auto per_node = env.count("SLURM_NTASKS_PER_NODE");
  if (per_node && derived) {
    COHORT_CHECK_AS(ConfigError, *derived <= *per_node)
        << list_var << "='" << *env.get(list_var) << "' puts " << *derived
        << " tasks on this node, more than SLURM_NTASKS_PER_NODE='" << *per_node << "'";
  }
  const std::optional<int> local_size = derived ? derived : per_node;
  const auto local_rank = env.count("SLURM_LOCALID");
  if (local_size) {
    COHORT_CHECK_AS(ConfigError, local_rank.has_value())
        << "SLURM_PROCID='" << info.rank << "' is set but SLURM_LOCALID is not";
    info.local_rank = *local_rank;
    info.local_size = *local_size;
  } else {
    COHORT_CHECK_AS(ConfigError, !local_rank.has_value())
        << "SLURM_LOCALID='" << *local_rank << "' is set but the tasks on this node are unknown: set "
        << "SLURM_NTASKS_PER_NODE, or SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID";
  }
  check_identity(info, "SLURM_PROCID", ntasks ? "SLURM_NTASKS" : "SLURM_NPROCS", "SLURM_LOCALID",
                 derived ? list_var : "SLURM_NTASKS_PER_NODE");
  store_from_slurm(env, info);
  if (info.store_host.empty()) store_from_env(env, info, "SLURM_PROCID");
  else serve_store_in_rank0(info);
  if (auto job = env.get("SLURM_JOB_ID")) {
    std::string id = "slurm-" + *job;
    if (auto step = env.get("SLURM_STEP_ID")) id += "." + *step;
    info.job_id = sanitize_job_id(id);
  }
}

}  // namespace

const char* launch_source_name(LaunchSource s) {
  switch (s) {
    case LaunchSource::cohortrun: return "cohortrun";
    case LaunchSource::torchrun: return "torchrun";
    case LaunchSource::openmpi: return "OpenMPI";
    case LaunchSource::slurm: return "Slurm";
    case LaunchSource::single: return "single process";
  }
  return "unknown";
}

LaunchSource launched_by(const Environment& environment) {
  const Env env(environment);
  if (env.has("COHORT_RANK")) return LaunchSource::cohortrun;
  if (env.has("RANK")) return LaunchSource::torchrun;
  if (env.has("OMPI_COMM_WORLD_RANK")) return LaunchSource::openmpi;
  if (env.has("SLURM_PROCID") && in_slurm_step(env)) return LaunchSource::slurm;
  return LaunchSource::single;
}

LaunchInfo discover(const Environment& environment) {
  const Env env(environment);
  LaunchInfo info;

  // Leftovers of a launch whose rank variable is gone are contradictions,
  // not something to guess around.
  if (!env.has("COHORT_RANK")) {
    for (const char* v : {"COHORT_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_SIZE"}) {
      COHORT_CHECK_AS(ConfigError, !env.has(v))
          << v << "='" << *env.get(v) << "' is set but COHORT_RANK is not";
    }
  }
  if (!env.has("COHORT_RANK") && !env.has("RANK")) {
    COHORT_CHECK_AS(ConfigError, !env.has("WORLD_SIZE"))
        << "WORLD_SIZE='" << *env.get("WORLD_SIZE") << "' is set but RANK is not";
  }

  switch (launched_by(environment)) {
    case LaunchSource::cohortrun: discover_cohortrun(env, info); break;
    case LaunchSource::torchrun: discover_torchrun(env, info); break;
    case LaunchSource::openmpi: discover_openmpi(env, info); break;
    case LaunchSource::slurm: discover_slurm(env, info); break;
    case LaunchSource::single: break;
  }

  if (auto id = env.get("COHORT_JOB_ID")) {
    COHORT_CHECK_AS(ConfigError, id->size() <= kMaxJobId && std::all_of(id->begin(), id->end(), job_id_char))
        << "COHORT_JOB_ID='" << *id << "' must be at most " << kMaxJobId
        << " characters from A-Z a-z 0-9 . _ -";
    info.job_id = *id;
  } else if (info.job_id == "local" && !info.store_host.empty()) {
    // No launcher-given id: the store address is unique per running job.
    info.job_id = sanitize_job_id(info.store_host + "-" + std::to_string(info.store_port));
  }
  if (auto secret = env.get("COHORT_SECRET")) info.secret = *secret;
  return info;
}

Environment process_environment() {
  Environment env;
  for (char** p = environ; p && *p; ++p) {
    const std::string entry = *p;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

LaunchInfo discover() { return discover(process_environment()); }

LaunchSource launched_by() { return launched_by(process_environment()); }

}  // namespace cohort::rendezvous
