// "auto": multi_worker when the program was launched on several ranks, else
// one_device. The world is discovered as cohort::init() discovers it: under
// a launcher (cohortrun, torchrun, mpirun, srun) init() joins the job first,
// so that plain `mpirun -np 2` works without a store address (MPI
// bootstraps one), as multi_worker itself does.
#include "cohort/rendezvous/discovery.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy_registry.h"

namespace cohort {

COHORT_REGISTER_STRATEGY(auto_strategy,
                         {.name = "auto",
                          .description = "multi_worker when launched on several ranks, else one_device",
                          .make = [](const Spec&) -> std::unique_ptr<Strategy> {
                            if (!initialized() && rendezvous::launched_by() != rendezvous::LaunchSource::single) init();
                            return make_strategy(initialized() && size() > 1 ? "multi_worker" : "one_device");
                          }});

}  // namespace cohort
