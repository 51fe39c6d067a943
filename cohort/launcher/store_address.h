// Where the job's store listens and the address ranks are told to reach it
// at (COHORT_STORE_ADDR, MASTER_ADDR).
#pragma once

#include <string>
#include <vector>

#include "cohort/launcher/placement.h"

namespace cohort::launcher {

struct StoreAddress {
  std::string bind;        // the address the server binds
  std::string advertised;  // the address ranks connect to
  std::string reason;      // how it was chosen, for --verbose and --dry-run
};

// `flag` is --store-addr (empty when not given):
//  - given: bind and advertise it (an address of this machine that every
//    host can reach, e.g. the bridge of an emulated cluster);
//  - else, every rank on this machine: 127.0.0.1;
//  - else, the address this machine's routing table uses towards the remote
//    hosts (each name resolved, then the source address of a route to it),
//    which must be the same for all of them.
// Throws ConfigError when a remote host's name does not resolve or the
// hosts are reached from different addresses, saying to pass --store-addr.
StoreAddress choose_store_address(const std::vector<RankPlacement>& placement, const std::string& flag);

// The source address this machine would use to reach `host` (a name or an
// address; a "user@" prefix is ignored). Throws ConfigError naming the
// problem.
std::string local_address_towards(const std::string& host);

}  // namespace cohort::launcher
