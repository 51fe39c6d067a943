// Every collective of the shm communicator, ranks as threads, checked
// against float64 references computed independently of the communicator
// (collective_checks.h, shared with the gloo and mpi tests), plus what only
// shm has: a segment of fixed size, and 64-bit offsets.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>

#include "tests/comm/collective_checks.h"
#include "tests/comm/half_average_checks.h"
#include "tests/comm/rank_threads.h"

namespace cohort::testing::shm_collectives_test {
namespace {

// Sizes from the issue: 0, 1, odd, just over a page, and a few MiB (larger
// than the staging slots, so chunking and pipelining run).
const checks::Sizes kSizes{{0, 1, 7, 4097}, (size_t(3) << 20) / sizeof(float) + 3};

class WorldSize : public ::testing::TestWithParam<int> {};

TEST_P(WorldSize, AllreduceEveryDtypeOpAndSize) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::allreduce(c, kSizes); });
}
TEST_P(WorldSize, Broadcast) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::broadcast(c, kSizes); });
}
TEST_P(WorldSize, AllgatherAndAllgatherv) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::allgather(c, kSizes); });
}
TEST_P(WorldSize, ReduceScatterEveryDtypeAndOp) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::reduce_scatter(c, kSizes); });
}
TEST_P(WorldSize, AlltoallAndAlltoallv) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::alltoall(c, kSizes); });
}
TEST_P(WorldSize, GatherAndScatter) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::gather_scatter(c, kSizes); });
}
TEST_P(WorldSize, BarrierOrdersRanks) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::barrier(c); });
}
TEST_P(WorldSize, SendRecvRingWithTagsAndLargeMessages) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::send_recv(c, kSizes); });
}
TEST_P(WorldSize, SplitIntoOrderedSubgroups) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::split(c); });
}
TEST_P(WorldSize, HalfAveragesOfLargeValuesAreTheMeanRoundedOnce) {
  run_ranks(GetParam(), [](int, comm::Communicator& c) { checks::half_average_of_large_values(c); });
}

INSTANTIATE_TEST_SUITE_P(Shm, WorldSize, ::testing::Range(1, 9),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(ShmSegment, DoesNotGrowWithTheMessage) {
  // 64 MiB through a segment of about a MiB, with a small slot so that many
  // chunks pipeline; the segment size is fixed at creation.
  run_ranks(2, [&](int r, comm::Communicator& c) {
    auto& shm = dynamic_cast<comm::shm::Communicator&>(c);
    const size_t before = shm.segment_bytes();
    const size_t count = size_t(16) << 20;
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = float(i % 1000) + r;
    c.allreduce(view_of(std::span(v)));
    for (size_t i = 0; i < count; i += 9973) ASSERT_EQ(v[i], 2 * float(i % 1000) + 1);
    ASSERT_EQ(shm.segment_bytes(), before);
    ASSERT_LT(before, count * sizeof(float) / 16);
  }, [](comm::shm::Options& o) { o.slot_bytes = 64 * 1024; });
}

TEST(ShmSegment, AllreduceBeyondFourGigaElementsOfBytes) {
  // More than 2^32 bytes in one call, in place, at 2 ranks: 64-bit offsets
  // everywhere. u8 sums of (i & 63) + r stay below 256. The pattern repeats
  // every 64 bytes, so it is written and checked 64 bytes at a time (a loop
  // over single bytes took most of this test's half a minute).
  const size_t count = (size_t(1) << 32) + 4099, whole_blocks = count / 64;
  run_ranks(2, [&](int r, comm::Communicator& c) {
    std::array<uint8_t, 64> mine, sum;
    for (size_t i = 0; i < 64; ++i) {
      mine[i] = uint8_t(i + r);
      sum[i] = uint8_t(2 * i + 1);
    }
    std::unique_ptr<uint8_t[]> v(new uint8_t[count]);  // not zeroed: every byte is written next
    for (size_t b = 0; b < whole_blocks; ++b) std::memcpy(&v[b * 64], mine.data(), 64);
    std::memcpy(&v[whole_blocks * 64], mine.data(), count % 64);
    c.allreduce(view_of(std::span(v.get(), count)));
    size_t wrong_blocks = 0;
    for (size_t b = 0; b < whole_blocks; ++b) wrong_blocks += std::memcmp(&v[b * 64], sum.data(), 64) != 0;
    wrong_blocks += std::memcmp(&v[whole_blocks * 64], sum.data(), count % 64) != 0;
    ASSERT_EQ(wrong_blocks, 0u);
  });
}

}  // namespace
}  // namespace cohort::testing::shm_collectives_test
