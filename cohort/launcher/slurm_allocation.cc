#include "cohort/launcher/slurm_allocation.h"

#include <algorithm>

#include "cohort/common/error.h"
#include "cohort/rendezvous/slurm_lists.h"

namespace cohort::launcher {
namespace {

// A variable's value, or nullptr when unset or empty (as discovery reads them).
const std::string* value_of(const rendezvous::Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
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
  const std::string* tasks = value_of(env, "SLURM_TASKS_PER_NODE");
  try {
    const auto nodes = rendezvous::expand_slurm_host_list(nodes_var, *value_of(env, nodes_var));
    if (!tasks) {
      allocation.problem = std::string(nodes_var) + " is set but SLURM_TASKS_PER_NODE is not: give the hosts with -H";
      return allocation;
    }
    if (nodes.size() > static_cast<size_t>(kMaxHosts)) {
      allocation.problem = std::string(nodes_var) + " has " + std::to_string(nodes.size()) + " nodes, more than " +
                           std::to_string(kMaxHosts) + " hosts";
      return allocation;
    }
    const auto counts = rendezvous::parse_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", *tasks);
    if (counts.size() != nodes.size()) {
      allocation.problem = "SLURM_TASKS_PER_NODE='" + *tasks + "' counts the tasks of " +
                           std::to_string(counts.size()) + " node(s), but " + nodes_var + "='" +
                           *value_of(env, nodes_var) + "' has " + std::to_string(nodes.size());
      return allocation;
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (std::string problem = host_name_problem(nodes[i]); !problem.empty()) {
        allocation.problem = std::string(nodes_var) + ": " + problem;
        return allocation;
      }
      // A node given no task (salloc -n 1 over 2 nodes) takes no rank.
      if (counts[i] > 0) allocation.hosts.push_back({nodes[i], std::min(counts[i], kMaxSlotsPerHost)});
    }
    if (allocation.hosts.empty()) allocation.problem = "SLURM_TASKS_PER_NODE='" + *tasks + "' gives no node a task";
  } catch (const ConfigError& e) {
    allocation.problem = e.what();
  }
  return allocation;
}

}  // namespace cohort::launcher
