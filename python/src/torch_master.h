// torch.distributed's env:// rendezvous under cohortrun.
//
// init_process_group() without an init_method reads MASTER_ADDR,
// MASTER_PORT, RANK and WORLD_SIZE. cohortrun sets them all, but its
// MASTER_* name its own store (cohort's, not a c10d TCPStore). `import cohort`
// in a rank of cohortrun replaces the master: rank 0's host, on a port rank
// 0 finds free there, published to the other ranks through cohortrun's
// store (key "torch/master"). As torchrun's agent does, the port is probed and
// released, and rank 0's TCPStore binds it moments later.
#pragma once

#include <optional>
#include <string>

namespace cohort::python {

struct TorchMaster {
  std::string addr;
  int port = 0;
};

// The master for this rank of a cohortrun job, or nullopt when this process
// was not started by cohortrun or belongs to an elastic job (whose ranks
// change between epochs, which torch.distributed's groups cannot follow).
// Rank 0 publishes; the others wait for it (COHORT_TIMEOUT_S).
std::optional<TorchMaster> torch_master_under_cohortrun();

}  // namespace cohort::python
