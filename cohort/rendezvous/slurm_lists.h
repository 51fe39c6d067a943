// Slurm's compressed lists, as its variables hold them: host lists
// (SLURM_JOB_NODELIST="node[07-09,12],gpu1") and tasks-per-node lists
// (SLURM_TASKS_PER_NODE="2(x3),1"). Read by discovery (a task of srun) and by
// cohortrun (a launch inside an allocation, cohort/launcher/slurm_allocation.h).
#pragma once

#include <string>
#include <vector>

namespace cohort::rendezvous {

// Most hosts or task counts one list may expand to.
inline constexpr size_t kMaxSlurmListEntries = 1 << 20;

// Expands a host list, in Slurm's order: "node[07-09,12],gpu1" -> node07,
// node08, node09, node12, gpu1 (zero padding kept); several range sets in a
// name multiply, "rack[1-2]-n[3-4]" -> rack1-n3, rack1-n4, rack2-n3,
// rack2-n4. Throws ConfigError naming `variable`, its value and what is
// wrong for an unclosed or empty range set, a range that runs backwards, an
// empty name, or more than kMaxSlurmListEntries hosts.
std::vector<std::string> expand_slurm_host_list(const std::string& variable, const std::string& text);

// Expands a tasks-per-node list: "2(x3),1" -> 2, 2, 2, 1. Throws ConfigError
// naming `variable` and its value when it is not such a list.
std::vector<int> parse_slurm_tasks_per_node(const std::string& variable, const std::string& text);

}  // namespace cohort::rendezvous
