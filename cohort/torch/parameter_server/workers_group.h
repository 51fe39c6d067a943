// The workers' group of a parameter-server job: the processes that train,
// apart from the servers, with their own communicator (the parameter_server
// strategy's collectives and its elastic state run there, not on the world,
// which holds the servers too).
//
// The group is a split of the job's world, and a split is collective over
// the world: every process takes part, servers included, though only the
// workers get a group back. In an elastic job this happens again in every
// membership epoch's world, on the workers (the strategy's rejoin()) and on
// the servers (ServerRole's membership follower, server_role.h) alike.
#pragma once

#include <memory>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/parameter_server/roles.h"

namespace cohort {

// The workers of `world` (collective over it), ranked by worker index;
// null on a server.
std::shared_ptr<comm::Communicator> split_workers(comm::Communicator& world, const ps::Role& role);

// The workers of cohort::init()'s current world, split from a copy of it
// named `ns`/world (and, in an elastic job, the membership epoch, whose
// worlds follow one another). Collective over the world; null on a server.
std::shared_ptr<comm::Communicator> split_world_workers(const std::string& ns, const ps::Role& role);

}  // namespace cohort
