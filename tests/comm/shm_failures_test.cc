// The shm communicator tells the truth when ranks disagree, stall or leave:
// errors name the ranks and the operation, and no rank hangs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "cohort/comm/shm/test_hooks.h"
#include "cohort/common/error.h"
#include "tests/comm/rank_threads.h"

namespace cohort::testing::shm_failures_test {
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

// A group split from an elastic world: its members are alive, but the world
// lost a member elsewhere (a parameter server) and some ranks left for the
// next epoch without calling the collective. The waiting ranks give up once
// the world says it is abandoned, well before the timeout, with its reason.
TEST(ShmFailures, AnAbandonedElasticWorldFailsTheWaitingRanks) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<bool> abandoned{false};
  auto errors = run_ranks_collect(
      3,
      [&](int r, comm::Communicator& c) {
        std::vector<float> v(100, 1.0f);
        if (r == 1) {
          std::this_thread::sleep_for(300ms);
          abandoned = true;  // the launcher announces the loss; rank 1 leaves for the next world
          std::this_thread::sleep_for(2s);
          return;
        }
        c.allreduce(view_of(std::span(v)));
      },
      [&](comm::shm::Options& o) {
        o.timeout = 30s;
        o.abandoned = [&]() -> std::optional<std::string> {
          if (!abandoned) return std::nullopt;
          return "member 4.0 of elastic epoch 0 was lost";
        };
      });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  for (int r : {0, 2}) {
    const std::string m = message_of<PeerLostError>(errors[r]);
    EXPECT_NE(m.find("abandoned (member 4.0 of elastic epoch 0 was lost)"), std::string::npos)
        << "rank " << r << ": " << m;
  }
}

// The rank blamed by PeerLostError::rank(), or -2 when `e` is something else.
int blamed_rank(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const PeerLostError& lost) {
    return lost.rank();
  } catch (...) {
  }
  return -2;
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
    EXPECT_NE(m.find("rank 3 left the communicator on an exception"), std::string::npos) << "rank " << r << ": " << m;
    EXPECT_EQ(blamed_rank(errors[r]), 3) << "rank " << r << ": " << m;
  }
}

// Whoever finds the lost rank first records it, and every rank blames it,
// not the healthy rank that found it.
TEST(ShmFailures, ALostRankIsBlamedByEveryRank) {
  auto errors = run_ranks_collect(4, [](int r, comm::Communicator& c) {
    std::vector<float> v(1000, 1.0f);
    c.allreduce(view_of(std::span(v)));
    if (r == 2) return;  // destroys its communicator
    c.allreduce(view_of(std::span(v)));
  });
  for (int r : {0, 1, 3}) {
    const std::string m = message_of<PeerLostError>(errors[r]);
    EXPECT_NE(m.find("rank 2 destroyed its communicator"), std::string::npos) << "rank " << r << ": " << m;
    EXPECT_EQ(blamed_rank(errors[r]), 2) << "rank " << r << ": " << m;
  }
}

// Rank 0 waits for rank 1 in the last barrier. Rank 1 is held back until
// rank 0 has found the barrier incomplete and is about to probe; then it
// completes the barrier and destroys its communicator before rank 0 looks.
// Rank 0's barrier has completed: the departure must not fail it.
namespace leaves_between_reads {
std::atomic<std::thread::id> prober;
std::atomic<bool> released{false}, gone{false};
void hold_prober() {
  if (std::this_thread::get_id() != prober.load() || released.exchange(true)) return;
  while (!gone) std::this_thread::sleep_for(1ms);
}
}  // namespace leaves_between_reads

TEST(ShmFailures, APeerThatLeavesBetweenAWaitersTwoReadsFailsNoOne) {
  using namespace leaves_between_reads;
  auto store = std::make_shared<rendezvous::MemoryStore>();
  auto options = test_options();
  options.spin = 0us;
  options.probe_interval = 5ms;
  comm::shm::test_hooks::before_probe = hold_prober;
  std::exception_ptr error[2];
  std::thread rank1([&] {
    try {
      comm::shm::Communicator c(store, 1, 2, options);
      while (!released) std::this_thread::sleep_for(1ms);
      c.barrier();
    } catch (...) {
      error[1] = std::current_exception();
    }
    gone = true;
  });
  try {
    comm::shm::Communicator c(store, 0, 2, options);
    prober = std::this_thread::get_id();
    c.barrier();
  } catch (...) {
    error[0] = std::current_exception();
  }
  rank1.join();
  comm::shm::test_hooks::before_probe = nullptr;
  EXPECT_TRUE(released) << "rank 0 never probed: the interleaving was not forced";
  for (int r = 0; r < 2; ++r) EXPECT_EQ(message_of<Error>(error[r]), "no error") << "rank " << r;
}

// A lone rank names, in words, the ranks that never joined, and leaves no
// segment: rank 0 creates one only once every rank has joined.
TEST(ShmRendezvous, RanksThatNeverJoinedAreNamedAndNoSegmentIsLeft) {
  auto options = test_options();
  options.timeout = 300ms;
  options.job_id = "lone" + std::to_string(getpid());
  for (const std::vector<int>& started : {std::vector<int>{0}, std::vector<int>{2}, std::vector<int>{0, 2}}) {
    auto store = std::make_shared<rendezvous::MemoryStore>();
    std::vector<std::exception_ptr> errors(4);
    std::vector<std::thread> threads;
    for (int r : started)
      threads.emplace_back([&, r] {
        try {
          comm::shm::Communicator c(store, r, 4, options);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    std::string missing;
    for (int r = 0; r < 4; ++r)
      if (std::find(started.begin(), started.end(), r) == started.end())
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    const std::string expected = (started.size() == 3 ? "rank " : "ranks ") + missing + " of 4 never joined within 0.3 s";
    for (int r : started) {
      const std::string m = message_of<TimeoutError>(errors[r]);
      EXPECT_NE(m.find(expected), std::string::npos) << "rank " << r << ": " << m;
      EXPECT_EQ(m.find("shm/"), std::string::npos) << "an internal store key in a user's error: " << m;
    }
    EXPECT_TRUE(shm_segments_of(options.job_id).empty());
  }
}

// A rank that joined but never mapped the segment (it crashed in between):
// rank 0 names it and unlinks the segment it created.
TEST(ShmRendezvous, ARankThatJoinedButNeverAttachedIsNamedAndTheSegmentUnlinked) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  store->set("shm/joined/1", "1");  // rank 1's announcement, and nothing after it
  auto options = test_options();
  options.timeout = 300ms;
  options.job_id = "noattach" + std::to_string(getpid());
  std::exception_ptr error;
  try {
    comm::shm::Communicator c(store, 0, 2, options);
  } catch (...) {
    error = std::current_exception();
  }
  const std::string m = message_of<TimeoutError>(error);
  EXPECT_NE(m.find("rank 1 of 2 joined but never mapped the shared-memory segment"), std::string::npos) << m;
  EXPECT_TRUE(shm_segments_of(options.job_id).empty());
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
}  // namespace cohort::testing::shm_failures_test
