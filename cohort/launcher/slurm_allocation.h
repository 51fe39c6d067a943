// The hosts of the Slurm allocation cohortrun runs in: with no -H,
// --hostfile or --host-discovery-script, `cohortrun prog` (or `--check`) in
// an sbatch script or a salloc shell places its ranks on the allocation's
// nodes, as OpenMPI's mpirun does, and starts the ranks of other nodes with
// srun instead of ssh (compute nodes of a Slurm cluster often refuse ssh
// from outside a job's own steps).
//
//   nodes:   SLURM_JOB_NODELIST (or SLURM_NODELIST), expanded
//            (cohort/rendezvous/slurm_lists.h);
//   slots:   SLURM_TASKS_PER_NODE, one count per node, so -np defaults to the
//            tasks the allocation was given (sbatch -n, --ntasks-per-node);
//   start:   kSlurmLaunchTemplate for the nodes that are not this machine,
//            unless --launch-template is given.
//
// Inside a step (srun set SLURM_STEP_ID) there is no allocation to place:
// srun has placed that process already.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cohort/launcher/host_list.h"
#include "cohort/rendezvous/discovery.h"

namespace cohort::launcher {

// One rank per step, sharing the job's CPUs and memory on its node with the
// other ranks' steps (--overlap: without it the second step on a node waits
// for the first to end), its output forwarded as it comes.
inline constexpr const char* kSlurmLaunchTemplate =
    "srun --overlap --nodes=1 --ntasks=1 --unbuffered --nodelist={host}";

// Hosts that came from the environment rather than the command line.
struct HostAllocation {
  std::vector<HostSlots> hosts;
  std::string name;             // for messages: "the Slurm allocation of job 1234"
  std::string launch_template;  // for its hosts, unless --launch-template is given
  std::string more_slots;       // what to do when -np is more than its slots
  // Non-empty when the variables are there but malformed: the allocation
  // cannot be used, and a launch that needs it fails with this (naming the
  // variable, its value and what was expected).
  std::string problem;
};

// The allocation this process runs in, or nullopt outside Slurm or inside a
// step. Reads SLURM_JOB_ID, SLURM_JOB_NODELIST (SLURM_NODELIST),
// SLURM_TASKS_PER_NODE and SLURM_STEP_ID (SLURM_STEPID).
std::optional<HostAllocation> slurm_allocation(const rendezvous::Environment& env);

}  // namespace cohort::launcher
