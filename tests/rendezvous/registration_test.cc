// register_rank(): the job's identity and the rank seats, over a MemoryStore.
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/registration.h"

namespace cohort::rendezvous::registration_test {
namespace {

LaunchInfo job(const std::string& id, int rank, int size) {
  LaunchInfo info;
  info.job_id = id;
  info.rank = rank;
  info.size = size;
  return info;
}

void expect_refused(MemoryStore& store, const LaunchInfo& info, std::initializer_list<const char*> phrases) {
  try {
    register_rank(store, info, "store at test:1");
    FAIL() << "rank " << info.rank << " of job " << info.job_id << " was let in";
  } catch (const ConfigError& e) {
    for (const char* phrase : phrases)
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << "'" << phrase << "' not in: " << e.what();
  }
}

TEST(RegistrationTest, EveryRankOfOneJobTakesItsSeat) {
  MemoryStore store;
  for (int r = 0; r < 4; ++r) register_rank(store, job("jobA", r, 4), "store at test:1");
  EXPECT_EQ(store.get("cohort/job"), "jobA of 4 ranks");
  EXPECT_EQ(store.get("cohort/seat/2"), seat_claim());
  // The same process may register again (a second init_world).
  register_rank(store, job("jobA", 2, 4), "store at test:1");
}

TEST(RegistrationTest, AnotherJobIsRefused) {
  MemoryStore store;
  register_rank(store, job("jobA", 0, 4), "store at test:1");
  expect_refused(store, job("jobB", 1, 4), {"job 'jobB'", "belongs to job 'jobA of 4 ranks'", "store at test:1"});
  // Same id, another size: not the same job either.
  expect_refused(store, job("jobA", 1, 2), {"belongs to job 'jobA of 4 ranks'"});
  // Neither took a seat.
  EXPECT_FALSE(store.check(std::vector<std::string>{"cohort/seat/1"}));
}

TEST(RegistrationTest, ASeatHeldByAnotherProcessIsRefused) {
  MemoryStore store;
  register_rank(store, job("jobA", 0, 2), "store at test:1");
  store.set("cohort/seat/1", "node7 pid 4242 (0123456789abcdef)");
  expect_refused(store, job("jobA", 1, 2), {"rank 1 of job 'jobA'", "already taken by node7 pid 4242",
                                            "store at test:1", "MASTER_PORT"});
  EXPECT_EQ(store.get("cohort/seat/1"), "node7 pid 4242 (0123456789abcdef)");
}

TEST(RegistrationTest, TheClaimNamesThisHostAndProcess) {
  const std::string claim = seat_claim();
  EXPECT_NE(claim.find(" pid " + std::to_string(::getpid()) + " ("), std::string::npos) << claim;
  EXPECT_EQ(claim, seat_claim());
}

}  // namespace
}  // namespace cohort::rendezvous::registration_test
