// The shm communicator tells the truth when ranks disagree, stall or leave:
// errors name the ranks and the operation, and no rank hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cohort/common/error.h"
#include "tests/comm/rank_threads.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

template <typename E>
std::string message_of(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const E& err) {
    return err.what();
  } catch (const std::exception& other) {
    return std::string("wrong kind: ") + other.what();
  }
  return "no error";
}

TEST(ShmFailures, MismatchedCountsRaiseOnEveryRank) {
  auto errors = run_ranks_collect(2, [](int r, comm::Communicator& c) {
    std::vector<float> v(r == 0 ? 10 : 12, 1.0f);
    c.allreduce(view_of(std::span(v)));
  });
  for (int r = 0; r < 2; ++r) {
    const std::string m = message_of<MismatchError>(errors[r]);
    EXPECT_NE(m.find("allreduce(10 f32, sum)"), std::string::npos) << "rank " << r << ": " << m;
    EXPECT_NE(m.find("allreduce(12 f32, sum)"), std::string::npos) << "rank " << r << ": " << m;
  }
}

TEST(ShmFailures, MismatchedCollectivesAndDtypesAreNamed) {
  auto errors = run_ranks_collect(3, [](int r, comm::Communicator& c) {
    std::vector<double> d(5, 1.0);
    std::vector<float> f(5, 1.0f);
    if (r == 2)
      c.broadcast(view_of(std::span(f)), 0);
    else
      c.allreduce(view_of(std::span(d)));
  });
  for (int r = 0; r < 3; ++r) {
    const std::string m = message_of<MismatchError>(errors[r]);
    EXPECT_NE(m.find("broadcast(5 f32, root 0)"), std::string::npos) << "rank " << r << ": " << m;
    EXPECT_NE(m.find("allreduce(5 f64, sum)"), std::string::npos) << "rank " << r << ": " << m;
  }
}

TEST(ShmFailures, MismatchedTagsRaiseOnBothEnds) {
  auto errors = run_ranks_collect(2, [](int r, comm::Communicator& c) {
    std::vector<int32_t> v(4, r);
    if (r == 0) c.send(view_of(std::span(v)), 1, 7);
    else c.recv(view_of(std::span(v)), 0, 8);
    c.barrier();  // rank 0 learns of the mismatch here at the latest
  });
  for (int r = 0; r < 2; ++r) {
    const std::string m = message_of<MismatchError>(errors[r]);
    EXPECT_NE(m.find("expected tag 8"), std::string::npos) << "rank " << r << ": " << m;
    EXPECT_NE(m.find("sent tag 7"), std::string::npos) << "rank " << r << ": " << m;
  }
}

TEST(ShmFailures, AbsentRankTimesOutNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks_collect(
      3,
      [](int r, comm::Communicator& c) {
        std::vector<float> v(100, 1.0f);
        if (r == 1) {
          // Stays in the group but never calls the collective.
          std::this_thread::sleep_for(1500ms);
          return;
        }
        c.allreduce(view_of(std::span(v)));
      },
      [](comm::shm::Options& o) { o.timeout = 500ms; });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  for (int r : {0, 2}) {
    const std::string m = message_of<TimeoutError>(errors[r]);
    EXPECT_NE(m.find("rank 1"), std::string::npos) << "rank " << r << ": " << m;
  }
}

TEST(ShmFailures, RankThatThrowsMakesOthersFailWithItsReason) {
  auto errors = run_ranks_collect(4, [](int r, comm::Communicator& c) {
    std::vector<float> v(1000, 1.0f);
    c.allreduce(view_of(std::span(v)));
    if (r == 3) throw std::runtime_error("out of batches on rank 3");
    c.allreduce(view_of(std::span(v)));
  });
  for (int r : {0, 1, 2}) {
    const std::string m = message_of<PeerLostError>(errors[r]);
    EXPECT_NE(m.find("rank 3"), std::string::npos) << "rank " << r << ": " << m;
  }
}

// A root that finishes its broadcast and then leaves on an exception does not
// take the broadcast away from a receiver that arrives late: the data is
// complete. The receiver's next collective, which needs the root, names it.
TEST(ShmFailures, ACollectiveThatCompletedSurvivesAPeerThatLeftAfterIt) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::atomic<bool> root_gone{false};
  std::exception_ptr receiver_error;
  int64_t received = 0;
  std::thread root([&] {
    try {
      comm::shm::Communicator c(store, 0, 2, test_options());
      int64_t rows = 3;
      c.broadcast(BufferView{&rows, 1, DType::i64}, 0);
      throw std::runtime_error("the root's own error");
    } catch (const std::runtime_error&) {
      root_gone = true;  // its communicator recorded the abort while unwinding
    }
  });
  std::thread receiver([&] {
    try {
      comm::shm::Communicator c(store, 1, 2, test_options());
      while (!root_gone) std::this_thread::sleep_for(1ms);
      c.broadcast(BufferView{&received, 1, DType::i64}, 0);
      c.barrier();
    } catch (...) {
      receiver_error = std::current_exception();
    }
  });
  root.join();
  receiver.join();
  EXPECT_EQ(received, 3);
  const std::string m = message_of<PeerLostError>(receiver_error);
  EXPECT_NE(m.find("rank 0 left the communicator on an exception"), std::string::npos) << m;
}

TEST(ShmFailures, UsableNoMoreAfterAFailure) {
  auto errors = run_ranks_collect(2, [](int r, comm::Communicator& c) {
    std::vector<float> v(r == 0 ? 3 : 4, 1.0f);
    try {
      c.allreduce(view_of(std::span(v)));
    } catch (const MismatchError&) {
    }
    c.barrier();
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(message_of<Error>(errors[r]).find("failed earlier"), std::string::npos);
}

TEST(ShmFailures, BadArgumentsAreErrorsNotCrashes) {
  run_ranks(2, [](int r, comm::Communicator& c) {
    std::vector<float> a(4), b(5);
    EXPECT_THROW(c.allreduce(view_of(std::span(a)), view_of(std::span(b))), Error);
    EXPECT_THROW(c.broadcast(view_of(std::span(a)), 2), Error);
    EXPECT_THROW(c.send(view_of(std::span(a)), r, 0), Error);
    c.barrier();  // still healthy: argument checks happen before any step
  });
}

TEST(ShmFailures, ReusedStoreNamespaceIsAConfigError) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  { comm::shm::Communicator c(store, 0, 1, test_options()); }
  EXPECT_THROW(comm::shm::Communicator(store, 0, 1, test_options()), ConfigError);
}

}  // namespace
}  // namespace cohort::testing
