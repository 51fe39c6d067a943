// Roles: which ranks of a job serve and which train.
//
// In a job of N ranks with S servers, ranks N-S .. N-1 are servers 0..S-1
// and ranks 0 .. N-S-1 are workers 0..N-S-1, so rank 0 (which writes
// metrics and checkpoints everywhere else in cohort) is worker 0, the chief.
// The rule depends on rank and size only, so it is the same under cohortrun,
// mpirun, srun or torchrun; to put servers on hosts of their own (BytePS's
// spare CPU machines), list those hosts last in the hostfile:
//   cohortrun --hostfile hosts prog --strategy parameter_server:servers=2
//   hosts:  gpu1 slots=4 / gpu2 slots=4 / cpu1 slots=1 / cpu2 slots=1
#pragma once

namespace cohort::ps {

struct Role {
  bool server = false;
  int index = 0;  // server index or worker index
  int num_servers = 1;
  int num_workers = 1;
};

// ConfigError when servers is not in [1, size).
Role assign_role(int rank, int size, int servers);

}  // namespace cohort::ps
