#include "cohort/torch/parameter_server/workers_group.h"

#include "cohort/torch/core/runtime.h"

namespace cohort {

std::shared_ptr<comm::Communicator> split_workers(comm::Communicator& world, const ps::Role& role) {
  // A negative color takes part in the split and gets nothing back.
  return world.split(role.server ? -1 : 0, role.index);
}

std::shared_ptr<comm::Communicator> split_world_workers(const std::string& ns, const ps::Role& role) {
  const std::string name = ns + "/world" + (elastic() ? "/" + std::to_string(membership_epoch()) : "");
  const std::unique_ptr<comm::Communicator> copy = create_world_communicator(name);
  return split_workers(*copy, role);
}

}  // namespace cohort
