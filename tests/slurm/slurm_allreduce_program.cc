// A cohort collective program for tests/slurm: started by srun, it takes its
// rank, size and store from Slurm's variables through init_world() and checks
// them against SLURM_PROCID and SLURM_NTASKS; started by cohortrun inside an
// allocation (whose variables it inherits, task 0's among them), its rank is
// cohortrun's. Either way it checks an allreduce against its closed form. Rank 0 prints
// "slurm allreduce ok: backend=<b> size=<n> source=<launcher>"; a failure
// prints what went wrong and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/error.h"

namespace {

int slurm_variable(const char* name) {
  const char* value = std::getenv(name);
  COHORT_CHECK(value != nullptr) << name << " is not set: run this under srun";
  return std::atoi(value);
}

void run() {
  const auto world = cohort::comm::init_world();
  const int rank = world.comm->rank();
  const int size = world.comm->size();
  if (world.info.source == cohort::rendezvous::LaunchSource::slurm) {
    COHORT_CHECK_EQ(rank, slurm_variable("SLURM_PROCID")) << "rank differs from Slurm's task id";
    COHORT_CHECK_EQ(size, slurm_variable("SLURM_NTASKS")) << "size differs from Slurm's task count";
  }
  COHORT_CHECK_EQ(world.info.rank, rank) << "discovery and the communicator disagree";

  // Rank r contributes (r + 1) * (i % 1000 + 1): the sum over ranks is
  // (i % 1000 + 1) * n (n + 1) / 2, exact in double.
  std::vector<double> values(100003);
  for (size_t i = 0; i < values.size(); ++i) values[i] = (rank + 1) * double(i % 1000 + 1);
  world.comm->allreduce(cohort::view_of(std::span(values)));
  const double ranks_sum = size * (size + 1) / 2.0;
  for (size_t i = 0; i < values.size(); ++i)
    COHORT_CHECK_EQ(values[i], double(i % 1000 + 1) * ranks_sum) << "allreduce element " << i;

  std::vector<int32_t> highest{rank};
  world.comm->allreduce(cohort::view_of(std::span(highest)), {.op = cohort::ReduceOp::max});
  COHORT_CHECK_EQ(highest[0], size - 1) << "max allreduce";
  world.comm->barrier();
  if (rank == 0)
    std::printf("slurm allreduce ok: backend=%s size=%d source=%s\n", world.comm->backend().c_str(), size,
                cohort::rendezvous::launch_source_name(world.info.source));
}

}  // namespace

int main() {
  try {
    run();
    return 0;
  } catch (const cohort::Error& e) {
    const char* task = std::getenv("SLURM_PROCID");
    std::fprintf(stderr, "slurm_allreduce_program (task %s): %s\n", task ? task : "?", e.what());
    return 1;
  }
}
