// The cost of one collective on a Topology, for each algorithm cohort runs
// (cohort/comm): the time it takes and the bytes it puts through the links.
//
// allreduce of n bytes over p ranks:
//   shm           one host. Up to shm_small_bytes one step, else two steps
//                 per shm_slot_bytes chunk (reduce-scatter + allgather):
//                   steps * alpha_shm + 2(p-1)/p * n / B_shm
//                 (B_shm is a bus bandwidth: cohort-bench's busbw).
//   ring          gloo's flat algorithms over every rank, ranks host-major:
//                 above ring_small_bytes a pipelined ring,
//                   2(p-1) * (segments * alpha + (n/p) / B) + (p-1)/p * n / R
//                 where each step's edges run at once, so alpha and B are
//                 those of the slowest edge class present (a host's one
//                 outgoing cross-host edge uses its NIC; the others its
//                 intra-host link), R the reduction rate; up to it, bcube:
//                 2 ceil(log2 p) steps, the same bandwidth term, a host's
//                 ranks sharing its NIC.
//   hierarchical  shm inside hosts, one ring per local rank across hosts on
//                 the NIC (M rings of n/M bytes share it), pipelined in
//                 hierarchical_chunk_bytes chunks:
//                   max(local, cross) + min(local, cross) / chunks;
//                 up to hierarchical_small_bytes: local allreduce, a ring of
//                 local rank 0s, local broadcast, one after the other.
// With one host, ring and hierarchical fall back as cohort does (shm for
// hierarchical); with one rank per host hierarchical is the ring.
//
// The closed form of the issue, 2(p-1)/p * n / B + 2(p-1) * alpha, is the
// ring with one rank per host, one segment and an infinite reduction rate.
#pragma once

#include <string>

#include "tools/sim/topology.h"

namespace cohort::sim {

enum class Algorithm { shm, ring, hierarchical };

// "shm", "ring", "hierarchical", or "auto" (shm on one host, else
// hierarchical, as cohort's COHORT_BACKEND=auto); ConfigError otherwise.
Algorithm resolve_algorithm(const std::string& name, const Topology& t);
const char* algorithm_name(Algorithm a);

struct Cost {
  double seconds = 0;
  double cpu_s = 0;      // the part of `seconds` a rank's thread spends computing or
                         // copying (shm work, reductions), as opposed to waiting on a link
  double nic_bytes = 0;  // through one NIC, per direction (hosts are symmetric)
  double shm_bytes = 0;  // bus bytes of shm work per rank

  Cost& operator+=(const Cost& o) {
    seconds += o.seconds;
    cpu_s += o.cpu_s;
    nic_bytes += o.nic_bytes;
    shm_bytes += o.shm_bytes;
    return *this;
  }
};

Cost allreduce_cost(const Topology& t, Algorithm a, double bytes);
// Every rank contributes `bytes_per_rank`; every rank gets all of them.
Cost allgather_cost(const Topology& t, Algorithm a, double bytes_per_rank);
// Every rank contributes n bytes and gets its 1/p block of the reduction
// (ZeRO's gradients). shm: half of the shm allreduce, at the shm link
// measured for reduce_scatter where there is one (as allgather_cost's
// shm part at allgather's); ring and
// hierarchical: gloo's ring reduce-scatter over every rank (the
// hierarchical communicator hands reduce-scatter to its flat one).
Cost reduce_scatter_cost(const Topology& t, Algorithm a, double n);
// Parameter servers (cohort/parameter_server): the last `servers` ranks
// serve, the others work; every worker sends (push) or receives (pull)
// `bytes`, split evenly over the servers, all at once. The busiest link
// sets the pace: a host's NIC in its busier direction for traffic between
// hosts (workers' pushes leave their hosts, servers' hosts take W/S of the
// model each), the ps link for a process's traffic inside its host;
// plus one alpha and the servers' copy of what they receive.
Cost parameter_server_exchange_cost(const Topology& t, int servers, double bytes);
// Horovod-style coordination: a gather to rank 0 and a broadcast back, each
// a binomial tree (2 ceil(log2 p) messages of `bytes`), over the slowest link.
Cost tree_gather_broadcast_cost(const Topology& t, double bytes);

}  // namespace cohort::sim
