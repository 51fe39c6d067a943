#include "cohort/launcher/slurm_allocation.h"

#include <algorithm>

#include "cohort/common/check.h"
#include "cohort/rendezvous/slurm_lists.h"

namespace cohort::launcher {
namespace {

// A variable's value, or nullptr when unset or empty (as discovery reads them).
const std::string* value_of(const rendezvous::Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// The nodes of `nodes_var` with their tasks as slots. Throws ConfigError
// naming the variable, its value and what is wrong.
std::vector<HostSlots> allocated_hosts(const rendezvous::Environment& env, const char* nodes_var) {
  const std::string& list = *value_of(env, nodes_var);
  const auto nodes = rendezvous::expand_slurm_host_list(nodes_var, list);
  COHORT_CHECK_AS(ConfigError, nodes.size() <= static_cast<size_t>(kMaxHosts))
      << nodes_var << " has " << nodes.size() << " nodes, more than " << kMaxHosts << " hosts";
  const std::string* tasks = value_of(env, "SLURM_TASKS_PER_NODE");
  COHORT_CHECK_AS(ConfigError, tasks) << nodes_var << " is set but SLURM_TASKS_PER_NODE is not: give the hosts with -H";
  const auto counts = rendezvous::parse_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", *tasks);
  COHORT_CHECK_AS(ConfigError, counts.size() == nodes.size())
      << "SLURM_TASKS_PER_NODE='" << *tasks << "' counts the tasks of " << counts.size() << " node(s), but "
      << nodes_var << "='" << list << "' has " << nodes.size();
  std::vector<HostSlots> hosts;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string problem = host_name_problem(nodes[i]);
    COHORT_CHECK_AS(ConfigError, problem.empty()) << nodes_var << ": " << problem;
    // A node given no task (salloc -n 1 over 2 nodes) takes no rank.
    if (counts[i] > 0) hosts.push_back({nodes[i], std::min(counts[i], kMaxSlotsPerHost)});
  }
  COHORT_CHECK_AS(ConfigError, !hosts.empty()) << "SLURM_TASKS_PER_NODE='" << *tasks << "' gives no node a task";
  return hosts;
}

}  // namespace

std::optional<HostAllocation> slurm_allocation(const rendezvous::Environment& env) {
  if (value_of(env, "SLURM_STEP_ID") || value_of(env, "SLURM_STEPID")) return std::nullopt;
  const char* nodes_var = value_of(env, "SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                          : value_of(env, "SLURM_NODELIST")   ? "SLURM_NODELIST"
                                                              : nullptr;
  if (!nodes_var) return std::nullopt;

  HostAllocation allocation;
  const std::string* job = value_of(env, "SLURM_JOB_ID");
  allocation.name = job ? "the Slurm allocation of job " + *job : "the Slurm allocation";
  allocation.launch_template = kSlurmLaunchTemplate;
  allocation.more_slots = "ask Slurm for more tasks (-n, --ntasks-per-node) or give the hosts with -H";
  try {
    allocation.hosts = allocated_hosts(env, nodes_var);
  } catch (const ConfigError& e) {
    allocation.problem = e.what();
  }
  return allocation;
}

}  // namespace cohort::launcher
