// Placement: which host each rank runs on, and its local rank there.
//
// Ranks fill the hosts in list order: the first host's slots take ranks
// 0..slots-1, the next host continues, and so on (OpenMPI's --map-by slot).
// A job of fewer ranks than slots leaves the last slots empty; hosts that get
// no rank take no part.
#pragma once

#include <string>
#include <vector>

#include "cohort/launcher/host_list.h"

namespace cohort::launcher {

struct RankPlacement {
  int rank = 0;
  std::string host;     // as given in -H or the hostfile
  int host_index = 0;   // among the hosts that got ranks, in list order
  int local_rank = 0;   // among the ranks on this host
  int local_size = 1;   // ranks on this host
  bool remote = false;  // started through the launch template
  bool operator==(const RankPlacement&) const = default;
};

// Places `num_ranks` ranks on `hosts`. Throws UsageError when they do not
// fit ("-np 5 is more than the 4 slots of a:2,b:2"). A host is remote unless
// is_this_host() says otherwise.
std::vector<RankPlacement> place_ranks(const std::vector<HostSlots>& hosts, int num_ranks);

// Every rank on this machine (no host list): local rank = rank.
std::vector<RankPlacement> place_locally(int num_ranks, const std::string& host_name);

// True for "localhost", "127.0.0.1", "::1" and this machine's host name
// (short or as gethostname() gives it): ranks there are started directly,
// without the launch template.
bool is_this_host(const std::string& host);

// This machine's host name (gethostname).
std::string this_host_name();

// Number of distinct hosts in a placement.
int host_count(const std::vector<RankPlacement>& placement);

}  // namespace cohort::launcher
