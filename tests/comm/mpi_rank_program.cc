// One rank of the mpi communicator's tests: mpi_test (mpi_collectives_test.cc)
// starts it as `mpirun -np N mpi_rank_program --gtest_filter=...`. Every
// process runs the selected tests on its own rank of one MPI job; the checks
// are collective_checks.h, shared with the gloo tests.
//
// Only rank 0 prints gtest's report. A failed assertion on any rank prints
// the rank and the failure and ends that process at once with status 3, so
// that mpirun ends the whole job instead of leaving the other ranks waiting
// in a collective.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <thread>

#include "cohort/comm/create.h"
#include "cohort/comm/mpi/communicator.h"
#include "cohort/common/error.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/half_average_checks.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

comm::mpi::Communicator* g_world = nullptr;

class EndJobOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit EndJobOnFailure(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
    std::fflush(stderr);
    std::_Exit(3);
  }

 private:
  int rank_;
};

// Medium sizes: every path (eager and not, several MPI algorithms) without
// making a 4-process job on two cores slow.
const checks::Sizes kSizes{{0, 1, 7, 4097}, 100003};

TEST(MpiCollectives, Allreduce) { checks::allreduce(*g_world, kSizes); }
TEST(MpiCollectives, Broadcast) { checks::broadcast(*g_world, kSizes); }
TEST(MpiCollectives, AllgatherAndAllgatherv) { checks::allgather(*g_world, kSizes); }
TEST(MpiCollectives, ReduceScatter) { checks::reduce_scatter(*g_world, kSizes); }
TEST(MpiCollectives, AlltoallAndAlltoallv) { checks::alltoall(*g_world, kSizes); }
TEST(MpiCollectives, GatherAndScatter) { checks::gather_scatter(*g_world, kSizes); }
TEST(MpiCollectives, BarrierOrdersRanks) { checks::barrier(*g_world); }
TEST(MpiCollectives, SendRecv) { checks::send_recv(*g_world, kSizes); }
TEST(MpiCollectives, Split) { checks::split(*g_world); }
TEST(MpiCollectives, HalfAveragesOfLargeValues) { checks::half_average_of_large_values(*g_world); }

TEST(MpiCollectives, WithoutVerification) {
  comm::mpi::Options o = comm::mpi::options_from_env();
  o.verify = false;
  comm::mpi::Communicator c(o);
  checks::allreduce_one(c, DType::bf16, ReduceOp::avg, 4097, true, true);
  checks::alltoall(c, checks::Sizes{{3}, 11});
}

// init_world under mpirun, with no store address configured: the MPI
// communicator, and a store rank 0 serves (for the engine) that every rank
// reaches.
TEST(MpiWorld, InitWorldNeedsNoStoreAddress) {
  ASSERT_EQ(std::getenv("COHORT_STORE_ADDR"), nullptr);
  comm::World world = comm::init_world();
  ASSERT_EQ(world.comm->backend(), "mpi");
  EXPECT_EQ(world.info.source, rendezvous::LaunchSource::openmpi);
  EXPECT_EQ(world.comm->rank(), g_world->rank());
  EXPECT_EQ(world.comm->size(), g_world->size());
  world.store->set("hello/" + std::to_string(world.comm->rank()), "from " + std::to_string(world.comm->rank()));
  const int peer = (world.comm->rank() + 1) % world.comm->size();
  EXPECT_EQ(world.store->get("hello/" + std::to_string(peer), 30s), "from " + std::to_string(peer));
  world.comm->barrier();  // rank 0's server outlives everyone's last get
}

comm::mpi::Options short_timeout() {
  comm::mpi::Options o = comm::mpi::options_from_env();
  o.timeout = 1500ms;
  return o;
}

TEST(MpiFailures, DifferentCountsRaiseMismatchNamingEveryCall) {
  comm::mpi::Communicator c(short_timeout());
  std::vector<float> v(c.rank() == 0 ? 10 : 12, 1.0f);
  try {
    c.allreduce(BufferView{v.data(), v.size(), DType::f32});
    FAIL() << "no error";
  } catch (const MismatchError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ranks 0 called allreduce(10 f32, sum) as collective #0"), std::string::npos) << m;
    EXPECT_NE(m.find("called allreduce(12 f32, sum) as collective #0"), std::string::npos) << m;
  }
  EXPECT_THROW(c.barrier(), Error) << "a failed communicator stays failed";
}

TEST(MpiFailures, PointToPointMismatchRaisesOnBothSides) {
  comm::mpi::Communicator c(short_timeout());
  std::vector<float> v(100000, 1.0f);  // not eager: the sender waits for the receiver
  try {
    if (c.rank() == 0) c.send(BufferView{v.data(), v.size(), DType::f32}, 1, 1);
    if (c.rank() == 1) c.recv(BufferView{v.data(), v.size(), DType::f32}, 0, 2);
    if (c.rank() < 2) FAIL() << "no error";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("expected tag 2"), std::string::npos) << e.what();
  }
}

TEST(MpiFailures, TimeoutOnTheWaitingRankAbortsTheLateOne) {
  comm::mpi::Communicator c(short_timeout());
  double v[2] = {1, 2};
  if (c.rank() == 1) std::this_thread::sleep_for(3s);
  const auto start = std::chrono::steady_clock::now();
  try {
    c.allreduce(BufferView{v, 2, DType::f64});
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 1.5 s"), std::string::npos) << e.what();
    if (c.rank() == 1) {
      EXPECT_NE(std::string(e.what()).find("failed"), std::string::npos) << e.what();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(MpiFailures, RankLeavingOnAnExceptionIsNamedAsLost) {
  auto c = std::make_unique<comm::mpi::Communicator>(short_timeout());
  const int last = c->size() - 1;
  if (c->rank() == last) {
    try {
      auto doomed = std::move(c);
      throw std::runtime_error("user code failed");
    } catch (const std::runtime_error&) {
    }
    return;
  }
  int v = 1;
  try {
    c->allreduce(BufferView{&v, 1, DType::i32});
    FAIL() << "no error";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), last) << e.what();
    EXPECT_NE(std::string(e.what()).find("left the communicator on an exception"), std::string::npos) << e.what();
  }
}

TEST(MpiCollectives, UnequalEagerSizesStillDeliver) {
  // Ranks that disagree on the eager size: rank 0 sends 32 KiB with its
  // header, rank 1 would post a 16 KiB receive; the receiver probes first,
  // so nothing is truncated (MPI would call that an error, and OpenMPI's
  // shared-memory transport writes past the buffer first).
  comm::mpi::Options o = short_timeout();
  o.eager_bytes = g_world->rank() == 0 ? 64 * 1024 : 16 * 1024;
  comm::mpi::Communicator c(o);
  std::vector<float> v(8192);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i + c.rank());
  if (c.rank() == 0) c.send(BufferView{v.data(), v.size(), DType::f32}, 1, 0);
  if (c.rank() == 1) {
    c.recv(BufferView{v.data(), v.size(), DType::f32}, 0, 0);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], float(i)) << i;
  }
  c.barrier();
}

// Not a gtest check: this rank's process dies in the middle of a job
// (mpi_collectives_test.cc checks that mpirun ends the job promptly).
TEST(MpiDeath, RankDiesMidCollective) {
  std::vector<float> v(1 << 16, 1.0f);
  g_world->allreduce(BufferView{v.data(), v.size(), DType::f32});
  if (g_world->rank() == 1) std::_Exit(7);
  for (int i = 0; i < 1000; ++i) g_world->allreduce(BufferView{v.data(), v.size(), DType::f32});
}

}  // namespace
}  // namespace cohort::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = std::make_unique<cohort::comm::mpi::Communicator>();
  cohort::testing::g_world = world.get();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world->rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new cohort::testing::EndJobOnFailure(world->rank()));
  const int status = RUN_ALL_TESTS();
  world.reset();
  return status;
}
