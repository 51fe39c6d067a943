// Topology: how the ranks of a communicator sit on hosts, computed from one
// host key hash per rank (every rank computes the same from the same input).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cohort::comm::hierarchical {

struct Topology {
  int hosts = 0;
  std::vector<int> host_of;        // per rank: host index, by first appearance in rank order
  std::vector<int> local_rank_of;  // per rank: its index among its host's ranks (rank order)
  std::vector<int> local_size;     // per host: number of ranks
  std::vector<int> first_rank;     // per host: its lowest rank
  int min_local = 0;               // the smallest local size: the number of slices
  bool uniform = false;            // every host has the same number of ranks
  // Each host's ranks are consecutive, hosts in order: rank = first_rank[h] + local rank.
  bool contiguous = false;
};

Topology make_topology(std::span<const uint64_t> host_hashes);

}  // namespace cohort::comm::hierarchical
