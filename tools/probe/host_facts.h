// What the probe tells cohortrun about its host (tools/probe/README.md lists
// the fields): the build, the interfaces, /dev/shm, the limits, the clock.
#pragma once

#include <string>
#include <vector>

#include "cohort/rendezvous/discovery.h"

namespace cohort::probe {

// The facts JSON of this rank. `listen_port`: the host leader's link
// listener (0 on other ranks); `shm_need`: the bytes the job's shm segment
// takes on this host.
std::string host_facts_json(const rendezvous::LaunchInfo& info, int listen_port, size_t shm_need);

// The name of the interface holding `address`, or "" when none does.
std::string interface_of(const std::string& address);

}  // namespace cohort::probe
