// Failures of the gloo communicator, ranks as threads over real TCP: each
// kind raises its own error on every rank involved, naming the calls and
// ranks, well before a rank would have waited out a long timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "cohort/common/error.h"
#include "cohort/comm/gloo/connection_shutdown.h"
#include "tests/comm/gloo_ranks.h"

namespace cohort::testing::gloo_failures_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void short_timeout(int, comm::gloo::Options& o) {
  o.timeout = 1s;
  o.failure_grace = 1s;
}

template <typename E>
std::string expect_error(const std::exception_ptr& e, const char* who) {
  EXPECT_TRUE(e) << who << " did not fail";
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << who << " raised the wrong kind of error: " << other.what();
  }
  return {};
}

TEST(GlooFailures, TimeoutNamesTheCallAndTheSilentRank) {
  const auto start = Clock::now();
  auto errors = run_gloo_ranks_collect(
      2,
      [](int r, comm::Communicator& c) {
        float v[4] = {1, 2, 3, 4};
        if (r == 1) std::this_thread::sleep_for(3500ms);  // misses rank 0's deadline and grace
        c.allreduce(BufferView{v, 4, DType::f32});
      },
      short_timeout);
  const std::string m0 = expect_error<TimeoutError>(errors[0], "rank 0");
  EXPECT_NE(m0.find("allreduce(4 f32, sum)"), std::string::npos) << m0;
  EXPECT_NE(m0.find("timed out after 1 s on rank 0"), std::string::npos) << m0;
  EXPECT_NE(m0.find("reported no failure"), std::string::npos) << m0;
  // Rank 1 arrives to closed connections and learns why from rank 0's report.
  const std::string m1 = expect_error<TimeoutError>(errors[1], "rank 1");
  EXPECT_NE(m1.find("timed out on rank 0"), std::string::npos) << m1;
  EXPECT_LT(Clock::now() - start, 8s);
}

// A rank that falls silent (a cut link, a hung host) is named by every peer,
// also by one that learns of the failure from a peer's timeout rather than
// its own. In Gloo's ring allgather over 4 ranks with rank 0 silent, ranks 1
// and 3 wait for rank 0 itself, rank 2 only for them: when they time out and
// close their connections, rank 2 must say whom they waited for, not only
// that they timed out (the job's error is whichever account is recorded
// first, and rank 2's is ready before theirs).
TEST(GlooFailures, APeerThatTimedOutIsExplainedWithTheSilentRank) {
  std::promise<void> others_failed;
  std::shared_future<void> others_done = others_failed.get_future().share();
  std::atomic<int> failed{0};
  auto errors = run_gloo_ranks_collect(
      4,
      [&](int r, comm::Communicator& c) {
        float mine[2] = {float(r), float(r)}, all[8] = {};
        if (r == 0) others_done.wait();  // silent until the others have raised
        try {
          c.allgather(BufferView{mine, 2, DType::f32}, BufferView{all, 8, DType::f32});
        } catch (...) {
          if (r != 0 && ++failed == 3) others_failed.set_value();
          throw;
        }
      },
      [](int r, comm::gloo::Options& o) {
        o.timeout = r == 2 ? 60s : 1s;  // rank 2 never times out itself
        o.failure_grace = 1s;
      });
  for (int r : {1, 3}) {
    const std::string m = expect_error<TimeoutError>(errors[r], r == 1 ? "rank 1" : "rank 3");
    EXPECT_NE(m.find("reported no failure (not in this call yet, or hung): 0"), std::string::npos) << m;
  }
  const std::string m2 = expect_error<TimeoutError>(errors[2], "rank 2");
  EXPECT_NE(m2.find(" after 1 s"), std::string::npos) << "a peer's timeout, not its own: " << m2;
  EXPECT_NE(m2.find("reported no failure (not in this call yet, or hung): 0"), std::string::npos) << m2;
  EXPECT_NE(m2.find("rank 2 was in allgather(2 f32)"), std::string::npos) << m2;
}

// A rank lost mid-collective can leave its peers in different collectives:
// rank 1 has all of rank 0's broadcast and goes on to the allreduce, while
// rank 0 still waits to send to the silent rank 2. That is no disagreement:
// both name rank 2, and neither raises MismatchError.
TEST(GlooFailures, PeersLeftInSuccessiveCollectivesByASilentRankTimeOut) {
  std::promise<void> others_failed;
  std::shared_future<void> others_done = others_failed.get_future().share();
  std::atomic<int> failed{0};
  auto errors = run_gloo_ranks_collect(
      3,
      [&](int r, comm::Communicator& c) {
        float v[8] = {};
        if (r == 2) others_done.wait();  // silent until the others have raised
        try {
          c.broadcast(BufferView{v, 8, DType::f32}, 0);
          c.allreduce(BufferView{v, 8, DType::f32});
        } catch (...) {
          if (r != 2 && ++failed == 2) others_failed.set_value();
          throw;
        }
      },
      short_timeout);
  const std::string m0 = expect_error<TimeoutError>(errors[0], "rank 0");
  EXPECT_NE(m0.find("broadcast(8 f32, root 0) (collective #0)"), std::string::npos) << m0;
  EXPECT_NE(m0.find("reported no failure (not in this call yet, or hung): 2"), std::string::npos) << m0;
  const std::string m1 = expect_error<TimeoutError>(errors[1], "rank 1");
  EXPECT_NE(m1.find("allreduce(8 f32, sum) (collective #1)"), std::string::npos) << "went on: " << m1;
  EXPECT_NE(m1.find("reported no failure (not in this call yet, or hung): 2"), std::string::npos) << m1;
}

TEST(GlooFailures, DifferentCountsRaiseMismatchOnBothRanks) {
  auto errors = run_gloo_ranks_collect(
      2,
      [](int r, comm::Communicator& c) {
        std::vector<float> v(r == 0 ? 10 : 12, 1.0f);
        c.allreduce(BufferView{v.data(), v.size(), DType::f32});
      },
      short_timeout);
  for (int r = 0; r < 2; ++r) {
    const std::string m = expect_error<MismatchError>(errors[r], r ? "rank 1" : "rank 0");
    EXPECT_NE(m.find("allreduce(10 f32, sum)"), std::string::npos) << m;
    EXPECT_NE(m.find("allreduce(12 f32, sum)"), std::string::npos) << m;
  }
}

TEST(GlooFailures, DifferentCollectivesRaiseMismatch) {
  auto errors = run_gloo_ranks_collect(
      3,
      [](int r, comm::Communicator& c) {
        float v[8] = {};
        if (r == 2)
          c.broadcast(BufferView{v, 8, DType::f32}, 0);
        else
          c.allreduce(BufferView{v, 8, DType::f32}, {.op = ReduceOp::max});
      },
      short_timeout);
  int mismatches = 0;
  for (auto& e : errors) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const MismatchError& m) {
      ++mismatches;
      EXPECT_NE(std::string(m.what()).find("broadcast(8 f32, root 0)"), std::string::npos) << m.what();
    } catch (const std::exception& other) {
      ADD_FAILURE() << "wrong error: " << other.what();
    }
  }
  EXPECT_EQ(mismatches, 3);
}

TEST(GlooFailures, PointToPointTagMismatchRaisesOnBothSides) {
  for (size_t count : {size_t(3), size_t(100000)}) {  // eager and not
    const auto start = Clock::now();
    auto errors = run_gloo_ranks_collect(2, [count](int r, comm::Communicator& c) {
      std::vector<float> v(count, 1.0f);
      if (r == 0) {
        c.send(BufferView{v.data(), count, DType::f32}, 1, 1);
        c.recv(BufferView{v.data(), count, DType::f32}, 1, 1);  // the receiver fails first
      } else {
        c.recv(BufferView{v.data(), count, DType::f32}, 0, 2);
      }
    });
    const std::string m1 = expect_error<MismatchError>(errors[1], "receiver");
    EXPECT_NE(m1.find("expected tag 2"), std::string::npos) << m1;
    EXPECT_NE(m1.find("sent tag 1"), std::string::npos) << m1;
    const std::string m0 = expect_error<MismatchError>(errors[0], "sender");
    EXPECT_EQ(m0, m1);
    EXPECT_LT(Clock::now() - start, 20s) << "the sender must not wait out its 60 s timeout";
  }
}

TEST(GlooFailures, RankLeavingOnAnExceptionIsNamedAsLost) {
  const auto start = Clock::now();
  auto errors = run_gloo_ranks_collect(3, [](int r, comm::Communicator& c) {
    double v[3] = {1, 2, 3};
    c.allreduce(BufferView{v, 3, DType::f64});
    if (r == 2) throw std::runtime_error("user code failed");
    c.allreduce(BufferView{v, 3, DType::f64});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const PeerLostError& e) {
      EXPECT_EQ(e.rank(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("left the communicator on an exception"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
  EXPECT_LT(Clock::now() - start, 20s) << "peers must learn at once, not at their 60 s timeout";
}

TEST(GlooFailures, BadArgumentsLeaveTheCommunicatorUsable) {
  run_gloo_ranks(2, [](int r, comm::Communicator& c) {
    float a[4] = {1, 1, 1, 1}, b[3] = {};
    EXPECT_THROW(c.allreduce(BufferView{a, 4, DType::f32}, BufferView{b, 3, DType::f32}), Error);
    EXPECT_THROW(c.broadcast(BufferView{a, 4, DType::f32}, 2), Error);
    EXPECT_THROW(c.send(BufferView{a, 4, DType::f32}, r, 0), Error);
    c.allreduce(BufferView{a, 4, DType::f32});
    EXPECT_EQ(a[3], 2.0f);
  });
}

TEST(GlooFailures, UnknownInterfaceIsAConfigErrorNamingIt) {
  auto errors = run_gloo_ranks_collect(
      1, [](int, comm::Communicator&) {}, [](int, comm::gloo::Options& o) { o.iface = "nosuch0"; });
  const std::string m = expect_error<ConfigError>(errors[0], "rank 0");
  EXPECT_NE(m.find("COHORT_IFACE='nosuch0'"), std::string::npos) << m;
  EXPECT_NE(m.find("lo"), std::string::npos) << "lists the interfaces there are: " << m;
}

// An elastic world abandoned (the launcher said a member is lost): rank 2
// is silent as behind a cut link (it never enters the call and its
// connections stay open), and ranks 0 and 1, waiting in an allreduce with a
// 60 s timeout, fail at once when their watcher reads the news, naming it.
// A later call fails without waiting.
TEST(GlooFailures, AnAbandonedWorldFailsItsCollectivesAtOnce) {
  std::atomic<bool> lost{false};
  std::promise<void> survivors_failed;
  std::shared_future<void> survivors_done = survivors_failed.get_future().share();
  std::atomic<int> failed{0};
  std::thread announcer([&] {
    std::this_thread::sleep_for(300ms);
    lost = true;
  });
  const auto start = Clock::now();
  std::vector<Clock::duration> took(3);
  auto errors = run_gloo_ranks_collect(
      3,
      [&](int r, comm::Communicator& c) {
        float v[1 << 12] = {};
        if (r == 2) {
          survivors_done.wait();
          return;  // leaves without a call: its peers were gone first
        }
        try {
          c.allreduce(BufferView{v, 1 << 12, DType::f32});
        } catch (const PeerLostError&) {
          took[size_t(r)] = Clock::now() - start;
          // The communicator is failed, as after any failure.
          EXPECT_THROW(c.barrier(), Error);
          if (++failed == 2) survivors_failed.set_value();
          throw;
        }
      },
      [&](int r, comm::gloo::Options& o) {
        o.abandon_poll = 20ms;
        o.abandoned = [&, r]() -> std::optional<std::string> {
          if (!lost || r == 2) return std::nullopt;  // rank 2 is behind the cut: it never hears of it
          return std::string("member 2.0 of elastic epoch 0 was lost");
        };
      });
  announcer.join();
  for (int r : {0, 1}) {
    const std::string m = expect_error<PeerLostError>(errors[size_t(r)], r == 0 ? "rank 0" : "rank 1");
    EXPECT_NE(m.find("was abandoned: member 2.0 of elastic epoch 0 was lost"), std::string::npos) << m;
    EXPECT_LT(took[size_t(r)], 5s) << "rank " << r << " waited for its timeout";
  }
}

TEST(GlooConnectionShutdown, EndpointsReadBackAndMalformedOnesAreRefused) {
  using comm::gloo::endpoint_from_text;
  using comm::gloo::endpoint_of;
  using comm::gloo::endpoint_text;
  sockaddr_storage v4{}, v6{};
  auto& in = reinterpret_cast<sockaddr_in&>(v4);
  in.sin_family = AF_INET;
  in.sin_port = htons(45678);
  ASSERT_EQ(inet_pton(AF_INET, "10.200.3.4", &in.sin_addr), 1);
  auto& in6 = reinterpret_cast<sockaddr_in6&>(v6);
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(80);
  ASSERT_EQ(inet_pton(AF_INET6, "fe80::1", &in6.sin6_addr), 1);
  EXPECT_EQ(endpoint_text(endpoint_of(v4)), "4:45678:0ac80304");
  EXPECT_EQ(endpoint_from_text("4:45678:0ac80304"), endpoint_of(v4));
  EXPECT_EQ(endpoint_from_text(endpoint_text(endpoint_of(v6))), endpoint_of(v6));
  EXPECT_NE(endpoint_of(v4), endpoint_of(v6));
  for (const char* bad :
       {"", "4:1", "5:80:0ac80304", "4:70000:0ac80304", "4:x:0ac80304", "4:80:0ac803", "4:80:zzzzzzzz"})
    EXPECT_THROW(endpoint_from_text(bad), ConfigError) << bad;
}

}  // namespace
}  // namespace cohort::testing::gloo_failures_test
