// tools/sim/collectives.h against the closed forms of each algorithm.
#include "tools/sim/collectives.h"

#include "cohort/common/error.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cohort::sim::collectives_test {
namespace {

// p hosts of one rank each, a network of latency a and bandwidth b, nothing
// else costing anything, large segments (one alpha per ring step).
Topology ring_topology(int p, double a, double b) {
  Topology t;
  t.hosts = p;
  t.ranks_per_host = 1;
  t.network = {a, b};
  t.ring_small_bytes = 0;
  t.ring_segment_bytes = int64_t(1) << 40;
  return t;
}

TEST(Collectives, RingMatchesTheClosedForm) {
  for (int p : {2, 3, 8, 64, 512})
    for (double n : {1e3, 1e6, 1.7e8}) {
      const double a = 7e-6, b = 3.125e9;
      const double expected = 2.0 * (p - 1) / p * n / b + 2.0 * (p - 1) * a;
      const Cost c = allreduce_cost(ring_topology(p, a, b), Algorithm::ring, n);
      EXPECT_NEAR(c.seconds, expected, 1e-12 * expected) << "p=" << p << " n=" << n;
      // Each NIC sends 2(p-1)/p of the message.
      EXPECT_NEAR(c.nic_bytes, 2.0 * (p - 1) / p * n, 1e-6 * n);
    }
}

TEST(Collectives, NetworkStepsChargeTheirCpu) {
  // 2 hosts, 8 MiB (a ring: 1 MiB segments, so 2 x 4 steps of 1 MiB), a
  // CPU cost per crossing step and per byte: the allreduce's CPU is
  // 8 (c + 1 MiB x d); on one host the network costs no CPU.
  Topology t = ring_topology(2, 1e-5, 1e8);
  t.ring_segment_bytes = 1 << 20;
  t.network.cpu_step_s = 1e-4;
  t.network.cpu_s_per_byte = 1e-9;
  const double n = 8 << 20;
  const Cost c = allreduce_cost(t, Algorithm::ring, n);
  EXPECT_NEAR(c.cpu_s, 8 * (1e-4 + (1 << 20) * 1e-9), 1e-15);
  // A reduce-scatter is the first half; an allgather of the halves' blocks
  // steps once a peer.
  EXPECT_NEAR(reduce_scatter_cost(t, Algorithm::ring, n).cpu_s, 4 * (1e-4 + (1 << 20) * 1e-9), 1e-15);
  EXPECT_NEAR(allgather_cost(t, Algorithm::ring, n / 2).cpu_s, 1e-4 + n / 2 * 1e-9, 1e-15);
  // Never more CPU than the op takes.
  t.network.cpu_s_per_byte = 1;
  const Cost capped = allreduce_cost(t, Algorithm::ring, n);
  EXPECT_EQ(capped.cpu_s, capped.seconds);
  Topology one = t;
  one.hosts = 1;
  one.ranks_per_host = 2;
  one.intra = {1e-6, 1e9};
  EXPECT_EQ(allreduce_cost(one, Algorithm::ring, n).cpu_s, 0);
}

TEST(Collectives, ReduceScatterAndAllgatherMakeTheAllreduce) {
  // ZeRO's two halves: the ring reduce-scatter of n and the allgather of
  // its n/p blocks cost what the ring allreduce costs; shm's halves too.
  for (int p : {2, 4, 16}) {
    const double n = 64e6;
    Topology t = ring_topology(p, 7e-6, 3.125e9);
    t.reduce_bytes_per_s = 5e9;
    const Cost rs = reduce_scatter_cost(t, Algorithm::ring, n), ag = allgather_cost(t, Algorithm::ring, n / p);
    const Cost all = allreduce_cost(t, Algorithm::ring, n);
    EXPECT_NEAR(rs.seconds + ag.seconds, all.seconds, 1e-12 * all.seconds) << p;
    EXPECT_NEAR(rs.nic_bytes + ag.nic_bytes, all.nic_bytes, 1e-6 * n);
    EXPECT_NEAR(rs.seconds, (p - 1) * (7e-6 + n / p / 3.125e9) + (p - 1.0) / p * n / 5e9, 1e-12 * rs.seconds);
    Topology one;
    one.ranks_per_host = p;
    one.shm = {2e-6, 4e9};
    const Cost shm = allreduce_cost(one, Algorithm::shm, n);
    EXPECT_NEAR(reduce_scatter_cost(one, Algorithm::shm, n).seconds + allgather_cost(one, Algorithm::shm, n / p).seconds,
                shm.seconds, 1e-12 * shm.seconds);
  }
}

TEST(Collectives, ParameterServerExchangeIsPacedByTheBusiestLink) {
  // W workers and one server on one host: the server's ps link carries W
  // parts; across hosts (one process each) the server's NIC does.
  const double n = 8e6;
  for (int workers : {1, 2, 4}) {
    Topology one;
    one.ranks_per_host = workers + 1;
    one.ps = {3e-5, 1e9};
    one.copy_bytes_per_s = 5e9;
    const Cost c = parameter_server_exchange_cost(one, 1, n);
    EXPECT_NEAR(c.seconds, 3e-5 + workers * n / 1e9 + workers * n / 5e9, 1e-12) << workers;
    Topology hosts = ring_topology(workers + 1, 5e-5, 1.25e8);
    const Cost h = parameter_server_exchange_cost(hosts, 1, n);
    EXPECT_NEAR(h.seconds, 5e-5 + workers * n / 1.25e8, 1e-12) << workers;
    EXPECT_NEAR(h.nic_bytes, workers * n, 1e-6);
  }
  // Two servers on two hosts of four workers each... the workers' NICs: each
  // host sends its 4 workers' halves meant for the other host's server.
  Topology two = ring_topology(2, 0, 1e8);
  two.ranks_per_host = 5;  // ranks 0-7 work, 8 and 9 serve, both on host 1
  const Cost c = parameter_server_exchange_cost(two, 2, n);
  // Host 1 takes the 5 workers of host 0's whole pushes: 5 n.
  EXPECT_NEAR(c.nic_bytes, 5 * n, 1e-6);
  EXPECT_THROW(parameter_server_exchange_cost(two, 10, n), ConfigError);
  EXPECT_THROW(parameter_server_exchange_cost(two, 0, n), ConfigError);
}

TEST(Collectives, RingSegmentsAndReductionAddTheirTerms) {
  Topology t = ring_topology(4, 1e-5, 1e9);
  t.ring_segment_bytes = 1 << 20;
  t.reduce_bytes_per_s = 5e9;
  const double n = 64.0 * (1 << 20);  // 16 MiB per rank's chunk: 16 segments
  const double expected = 2.0 * 3 * (16 * 1e-5 + n / 4 / 1e9) + 3.0 / 4 * n / 5e9;
  EXPECT_NEAR(allreduce_cost(t, Algorithm::ring, n).seconds, expected, 1e-12 * expected);
}

TEST(Collectives, BcubeBelowTheSwitch) {
  Topology t = ring_topology(8, 2e-5, 1e9);
  t.ring_small_bytes = 1 << 20;
  const double n = 4096;
  const double expected = 2 * 3 * 2e-5 + 2.0 * 7 / 8 * n / 1e9;
  EXPECT_NEAR(allreduce_cost(t, Algorithm::ring, n).seconds, expected, 1e-15);
}

TEST(Collectives, ShmStepsAndBusBandwidth) {
  Topology t;
  t.ranks_per_host = 4;
  t.shm = {2e-6, 4e9};
  t.shm_slot_bytes = 1 << 18;
  t.shm_small_bytes = 1 << 14;
  // Small: one step.
  EXPECT_NEAR(allreduce_cost(t, Algorithm::shm, 1000).seconds, 2e-6 + 1.5 * 1000 / 4e9, 1e-15);
  // Large: two steps per slot-sized chunk.
  const double n = 10.0 * (1 << 18);
  EXPECT_NEAR(allreduce_cost(t, Algorithm::shm, n).seconds, 20 * 2e-6 + 1.5 * n / 4e9, 1e-15);
  // One rank: nothing to do.
  t.ranks_per_host = 1;
  EXPECT_EQ(allreduce_cost(t, Algorithm::shm, n).seconds, 0);
}

TEST(Collectives, ShmByRanksOverridesTheBaseLink) {
  Topology t;
  t.ranks_per_host = 4;
  t.shm = {1e-6, 4e9};
  t.shm_by_ranks = {{4, Collective::allreduce, {3e-5, 1e9}}, {4, Collective::reduce_scatter, {5e-5, 5e8}}};
  EXPECT_NEAR(allreduce_cost(t, Algorithm::shm, 100).seconds, 3e-5 + 1.5 * 100 / 1e9, 1e-15);
  // A collective measured on its own uses its own link; another falls back
  // to the allreduce's at those ranks.
  EXPECT_NEAR(reduce_scatter_cost(t, Algorithm::shm, 100).seconds, 5e-5 + 0.75 * 100 / 5e8, 1e-15);
  EXPECT_NEAR(allgather_cost(t, Algorithm::shm, 25).seconds, 3e-5 + 0.75 * 100 / 1e9, 1e-15);
  t.ranks_per_host = 2;
  EXPECT_NEAR(allreduce_cost(t, Algorithm::shm, 100).seconds, 1e-6 + 1.0 * 100 / 4e9, 1e-15);
}

TEST(Collectives, HierarchicalFallsBackAsCohortDoes) {
  Topology t = ring_topology(4, 1e-5, 1e9);
  t.shm = {1e-6, 5e9};
  const double n = 1e8;
  // One rank per host: the flat ring.
  EXPECT_EQ(allreduce_cost(t, Algorithm::hierarchical, n).seconds, allreduce_cost(t, Algorithm::ring, n).seconds);
  // One host: shm.
  Topology one = t;
  one.hosts = 1;
  one.ranks_per_host = 4;
  EXPECT_EQ(allreduce_cost(one, Algorithm::hierarchical, n).seconds, allreduce_cost(one, Algorithm::shm, n).seconds);
}

TEST(Collectives, HierarchicalMovesOneMessagePerNicTheFlatRingMore) {
  // 2 hosts x 2 ranks, network-bound: the flat ring puts 2(p-1)/p = 1.5
  // messages through each NIC, hierarchical 2(H-1)/H = 1 (bench/README.md's
  // multihost bound of 1.5).
  Topology t;
  t.hosts = 2;
  t.ranks_per_host = 2;
  t.network = {0, 1.25e8};
  t.intra = {0, 5e9};
  t.shm = {0, 5e9};
  t.ring_small_bytes = 0;
  t.hierarchical_small_bytes = 0;
  const double n = 64.0 * (1 << 20);
  const Cost flat = allreduce_cost(t, Algorithm::ring, n);
  const Cost hier = allreduce_cost(t, Algorithm::hierarchical, n);
  EXPECT_NEAR(flat.nic_bytes, 1.5 * n, 1e-6 * n);
  EXPECT_NEAR(hier.nic_bytes, 1.0 * n, 1e-6 * n);
  // The network term dominates both: the ratio approaches the traffic ratio.
  EXPECT_NEAR(flat.seconds / hier.seconds, 1.5, 0.05);
}

TEST(Collectives, AutoResolvesAsCohort) {
  Topology t;
  EXPECT_EQ(resolve_algorithm("auto", t), Algorithm::shm);
  t.hosts = 3;
  EXPECT_EQ(resolve_algorithm("auto", t), Algorithm::hierarchical);
  EXPECT_THROW(resolve_algorithm("shm", t), ConfigError);
  EXPECT_THROW(resolve_algorithm("nccl", t), ConfigError);
}

}  // namespace
}  // namespace cohort::sim::collectives_test
