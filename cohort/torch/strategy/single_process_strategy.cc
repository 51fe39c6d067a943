#include "cohort/torch/strategy/single_process_strategy.h"

#include "cohort/common/check.h"
#include "cohort/rendezvous/discovery.h"

namespace cohort {

SingleProcessStrategy::SingleProcessStrategy(const std::string& name, int replicas, bool independent_ranks)
    : replicas_(replicas) {
  if (independent_ranks) return;
  const rendezvous::LaunchInfo job = rendezvous::discover();
  COHORT_CHECK_AS(ConfigError, job.size == 1)
      << "strategy '" << name << "' trains in one process, but this is rank " << job.rank << " of " << job.size << " ("
      << rendezvous::launch_source_name(job.source)
      << "): use --strategy multi_worker across processes, or start one process";
}

}  // namespace cohort
