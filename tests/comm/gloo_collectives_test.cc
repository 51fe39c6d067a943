// Every collective of the gloo communicator, ranks as threads with real TCP
// connections on loopback, checked against float64 references
// (collective_checks.h, shared with the mpi tests).
#include <gtest/gtest.h>

#include "tests/comm/collective_checks.h"
#include "tests/comm/half_average_checks.h"
#include "tests/comm/gloo_ranks.h"

namespace cohort::testing::gloo_collectives_test {
namespace {

class GlooWorld : public ::testing::TestWithParam<int> {};

// `large` (300007 elements) exceeds the eager size and spans several ring
// segments; `small` exercises the eager path. Allreduce takes bcube up to
// 64 KiB here and the ring above, so that both run at every size n.
const checks::Sizes kSizes{};
void small_bcube(int, comm::gloo::Options& o) { o.bcube_max_bytes = 64 * 1024; }

TEST_P(GlooWorld, Allreduce) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::allreduce(c, kSizes); }, small_bcube);
}
TEST_P(GlooWorld, Broadcast) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::broadcast(c, kSizes); });
}
TEST_P(GlooWorld, AllgatherAndAllgatherv) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::allgather(c, kSizes); });
}
TEST_P(GlooWorld, ReduceScatter) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::reduce_scatter(c, kSizes); });
}
TEST_P(GlooWorld, AlltoallAndAlltoallv) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::alltoall(c, kSizes); });
}
TEST_P(GlooWorld, GatherAndScatter) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::gather_scatter(c, kSizes); });
}
TEST_P(GlooWorld, BarrierOrdersRanks) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::barrier(c); });
}
TEST_P(GlooWorld, SendRecv) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::send_recv(c, kSizes); });
}
TEST_P(GlooWorld, Split) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::split(c); });
}
TEST_P(GlooWorld, HalfAveragesOfLargeValuesAreTheMeanRoundedOnce) {
  run_gloo_ranks(GetParam(), [](int, comm::Communicator& c) { checks::half_average_of_large_values(c); },
                 small_bcube);
}

// 1 (no peers) to 8: powers of two, and sizes bcube must factorise
// unevenly (6 = 2 x 3) or not at all (3, 5, 7).
INSTANTIATE_TEST_SUITE_P(Gloo, GlooWorld, ::testing::Range(1, 9),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(GlooAlgorithms, RingAndBcubeGiveTheSameBitsOnEveryRank) {
  // The same reduction through both algorithms (threshold moved) gives the
  // reference, and every rank the same bits.
  for (size_t threshold : {size_t(0), size_t(1) << 30})
    run_gloo_ranks(
        3,
        [](int, comm::Communicator& c) {
          for (size_t count : {size_t(1), size_t(5), size_t(4097), size_t(100003)}) {
            checks::allreduce_one(c, DType::f32, ReduceOp::avg, count, false, true);
            checks::allreduce_one(c, DType::bf16, ReduceOp::sum, count, true, true);
          }
        },
        [threshold](int, comm::gloo::Options& o) { o.bcube_max_bytes = threshold; });
}

TEST(GlooReduceScatter, ChunkedRingWithTinyChunks) {
  // Many chunks per block, odd sizes: the ring's double buffering and the
  // in-place case across chunk boundaries.
  run_gloo_ranks(
      4, [](int, comm::Communicator& c) {
        checks::Sizes sizes{{1, 7, 33}, 1001};
        checks::reduce_scatter(c, sizes);
      },
      [](int, comm::gloo::Options& o) { o.chunk_bytes = 64; });
}

TEST(GlooPointToPoint, UnequalEagerSizesAgreeOnTheSmallest) {
  // Rank 0 would send 32 KiB with its header, rank 1 would post 16 KiB for
  // it: the ranks settle on the smallest size when they connect.
  run_gloo_ranks(
      2,
      [](int r, comm::Communicator& c) {
        std::vector<float> v(8192);
        for (size_t i = 0; i < v.size(); ++i) v[i] = float(i + r);
        if (r == 0) c.send(BufferView{v.data(), v.size(), DType::f32}, 1, 0);
        if (r == 1) {
          c.recv(BufferView{v.data(), v.size(), DType::f32}, 0, 0);
          for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], float(i)) << i;
        }
      },
      [](int r, comm::gloo::Options& o) { o.eager_bytes = r == 0 ? 64 * 1024 : 16 * 1024; });
}

TEST(GlooDevice, ListensOnTheRequestedInterface) {
  run_gloo_ranks(2, [](int, comm::Communicator& c) {
    EXPECT_EQ(dynamic_cast<comm::gloo::Communicator&>(c).device_address(), "[127.0.0.1]");
    EXPECT_EQ(c.backend(), "gloo");
  });
}

}  // namespace
}  // namespace cohort::testing::gloo_collectives_test
