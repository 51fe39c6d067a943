// The hierarchical communicator with ranks as threads: every collective
// against the float64 reference on even, uneven, interleaved, single-host
// and one-rank-per-host layouts; splits; the topology it derives. Runs
// without privileges; tests/cluster/cluster_test.cc runs it across network
// namespaces.
#include <gtest/gtest.h>

#include "cohort/comm/hierarchical/topology.h"
#include "cohort/common/host_key.h"
#include "tests/cluster/collective_checks.h"
#include "tests/cluster/hierarchical_threads.h"
#include "tests/comm/half_average_checks.h"

namespace cohort::testing {
namespace {

using comm::hierarchical::Topology;

Topology topology_of(std::vector<uint64_t> hashes) { return comm::hierarchical::make_topology(hashes); }

TEST(HierarchicalTopology, EvenContiguousHosts) {
  const Topology t = topology_of({5, 5, 9, 9});
  EXPECT_EQ(t.hosts, 2);
  EXPECT_EQ(t.host_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(t.local_rank_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(t.local_size, (std::vector<int>{2, 2}));
  EXPECT_EQ(t.first_rank, (std::vector<int>{0, 2}));
  EXPECT_EQ(t.min_local, 2);
  EXPECT_TRUE(t.uniform);
  EXPECT_TRUE(t.contiguous);
}

TEST(HierarchicalTopology, UnevenAndInterleavedHosts) {
  const Topology u = topology_of({1, 2, 2, 3, 3});
  EXPECT_EQ(u.local_size, (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(u.min_local, 1);
  EXPECT_FALSE(u.uniform);
  EXPECT_TRUE(u.contiguous);
  const Topology i = topology_of({7, 8, 7, 8});
  EXPECT_EQ(i.host_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(i.local_rank_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(i.uniform);
  EXPECT_FALSE(i.contiguous);
}

TEST(HierarchicalHostKey, CohortHostWinsElseHostBootAndNamespace) {
  ::setenv("COHORT_HOST", "node7", 1);
  EXPECT_EQ(net::host_key(), "node7");
  ::unsetenv("COHORT_HOST");
  const std::string key = net::host_key();
  EXPECT_NE(key.find("/net:["), std::string::npos) << key;
  EXPECT_NE(net::host_key_hash("a"), net::host_key_hash("b"));
}

struct Layout {
  const char* name;
  std::vector<int> host_of;
  friend void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }
};

class HierarchicalLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(HierarchicalLayouts, EveryCollectiveMatchesTheReference) {
  const auto& host_of = GetParam().host_of;
  run_hierarchical(host_of, [&](int r, comm::hierarchical::Communicator& c) {
    EXPECT_EQ(c.backend(), "hierarchical");
    EXPECT_EQ(c.cross_backend(), "gloo");
    // Large spans several 16 KiB chunks and leaves a remainder after the slices.
    const std::string error = check_every_collective(c, {.large = 3 * 4096 + 5});
    ASSERT_EQ(error, "") << GetParam().name;
  });
}

TEST_P(HierarchicalLayouts, HalfAveragesOfLargeValuesAreTheMeanRoundedOnce) {
  run_hierarchical(GetParam().host_of,
                   [&](int, comm::hierarchical::Communicator& c) { checks::half_average_of_large_values(c); });
}

TEST_P(HierarchicalLayouts, SplitsAreHierarchicalToo) {
  run_hierarchical(GetParam().host_of, [&](int r, comm::hierarchical::Communicator& c) {
    auto half = c.split(r % 2, -r);  // reversed order inside each half
    ASSERT_NE(half, nullptr);
    EXPECT_EQ(half->backend(), "hierarchical");
    const int members = (c.size() + 1 - r % 2) / 2;
    EXPECT_EQ(half->size(), members);
    ASSERT_EQ(check_allreduce(*half, DType::f32, ReduceOp::sum, 5000, false), "");
    ASSERT_EQ(check_broadcast(*half, DType::f32, 5000, 0), "");
    auto none = c.split(r == 0 ? 0 : -1, 0);
    EXPECT_EQ(none != nullptr, r == 0);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Hosts, HierarchicalLayouts,
    ::testing::Values(Layout{"2 hosts x 2", {0, 0, 1, 1}}, Layout{"3 hosts: 1, 2, 2", {0, 1, 1, 2, 2}},
                      Layout{"3 hosts: 2, 1, 2", {0, 0, 1, 2, 2}}, Layout{"interleaved 2 x 2", {0, 1, 0, 1}},
                      Layout{"one host", {0, 0, 0}}, Layout{"one rank per host", {0, 1, 2}}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

TEST(Hierarchical, TopologyIsTheSameOnEveryRank) {
  run_hierarchical({0, 1, 1, 2, 2}, [&](int r, comm::hierarchical::Communicator& c) {
    const Topology& t = c.topology();
    EXPECT_EQ(t.hosts, 3);
    EXPECT_EQ(t.local_size, (std::vector<int>{1, 2, 2}));
    EXPECT_EQ(t.min_local, 1);
  });
}

TEST(Hierarchical, LargeMessagesWithDefaultChunks) {
  // 9 MiB + 3 floats: several 4 MiB chunks, slices and a remainder.
  run_hierarchical({0, 0, 1, 1}, [&](int r, comm::hierarchical::Communicator& c) {
    const size_t count = (size_t(9) << 20) / 4 + 3;
    ASSERT_EQ(check_allreduce(c, DType::f32, ReduceOp::sum, count, true), "");
    ASSERT_EQ(check_allreduce(c, DType::f32, ReduceOp::avg, count, false), "");
    ASSERT_EQ(check_broadcast(c, DType::f32, count, 3), "");
    ASSERT_EQ(check_allgather(c, DType::f32, count / 4), "");
  }, 4 << 20, 64 << 10);
}

}  // namespace
}  // namespace cohort::testing
