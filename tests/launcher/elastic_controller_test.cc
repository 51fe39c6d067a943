// ElasticController (cohortrun --min-np): the epochs it publishes as
// members fail and replacements become ready, restarts per slot, the
// --min-np floor and its timeout, and the end of training; over a real
// MemoryStore, read back as the ranks read it (rendezvous/membership.h).
#include "cohort/launcher/elastic_controller.h"

#include <gtest/gtest.h>

#include <thread>

#include "cohort/rendezvous/memory_store.h"

namespace cohort::launcher {
namespace {

using rendezvous::Member;
using Clock = ElasticController::Clock;

struct Fixture {
  std::shared_ptr<rendezvous::MemoryStore> store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<Member> started;  // replacements the controller asked for
  ElasticController controller;
  Fixture(int ranks, ElasticOptions o)
      : controller(o, store, ranks, [this](Member m) { started.push_back(m); }) {
    controller.publish_initial();
  }
  rendezvous::Membership latest() { return rendezvous::read_membership(*store, rendezvous::latest_epoch(*store)); }
};

std::vector<Member> members(std::initializer_list<std::pair<int, int>> list) {
  std::vector<Member> out;
  for (auto [s, i] : list) out.push_back({s, i});
  return out;
}

TEST(ElasticController, AFailureMakesAnEpochOfTheOthersAndTheReplacementJoinsWhenReady) {
  Fixture f(3, {.min_np = 2, .max_restarts = 1, .timeout_s = 60});
  EXPECT_EQ(f.latest().epoch, 0);
  EXPECT_EQ(f.latest().members, members({{0, 0}, {1, 0}, {2, 0}}));
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({0, 0}, true, note));
  // Rank 0 died: the oldest survivor is the new rank 0.
  EXPECT_EQ(f.latest().epoch, 1);
  EXPECT_EQ(f.latest().members, members({{1, 0}, {2, 0}}));
  EXPECT_EQ(f.latest().rank_of({1, 0}), 0);
  ASSERT_EQ(f.started, members({{0, 1}}));
  EXPECT_NE(note.find("starting slot 0 again (restart 1 of 1)"), std::string::npos) << note;
  // Not ready yet: nothing changes.
  const auto later = Clock::now() + std::chrono::seconds(2);
  EXPECT_EQ(f.controller.tick(later), "");
  EXPECT_EQ(f.latest().epoch, 1);
  rendezvous::announce_ready(*f.store, {0, 1});
  // Ready, but epoch 1's world is not formed yet (its members may still be
  // reading it): it joins once that one is.
  EXPECT_EQ(f.controller.tick(later), "");
  EXPECT_EQ(f.latest().epoch, 1);
  rendezvous::announce_formed(*f.store, 1);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().epoch, 2);
  EXPECT_EQ(f.latest().members, members({{1, 0}, {2, 0}, {0, 1}}));
  // Its restart used, slot 0 is not started again.
  EXPECT_TRUE(f.controller.member_ended({0, 1}, true, note));
  EXPECT_EQ(f.started.size(), 1u);
  EXPECT_NE(note.find("slot 0 used its 1 restart(s)"), std::string::npos) << note;
  EXPECT_EQ(f.latest().members, members({{1, 0}, {2, 0}}));
}

TEST(ElasticController, BelowMinNpNoEpochIsPublishedUntilReplacementsComeBack) {
  Fixture f(2, {.min_np = 2, .max_restarts = 1, .timeout_s = 5});
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_EQ(f.latest().epoch, 0);  // one member left is below the floor
  EXPECT_NE(note.find("below --min-np 2"), std::string::npos) << note;
  const auto t0 = Clock::now();
  EXPECT_EQ(f.controller.tick(t0), "");
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(4)), "");
  // The replacement becomes ready in time: the world is 2 again.
  rendezvous::announce_ready(*f.store, {1, 1});
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::milliseconds(4500)), "");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {1, 1}}));
  // It fails too, with no restart left: the floor cannot be reached again,
  // the job fails at once.
  EXPECT_FALSE(f.controller.member_ended({1, 1}, true, note));
  EXPECT_NE(note.find("below --min-np 2 for good"), std::string::npos) << note;
}

TEST(ElasticController, AReplacementThatNeverComesEndsTheJobAfterTheTimeout) {
  Fixture f(2, {.min_np = 2, .max_restarts = 1, .timeout_s = 5});
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  const auto t0 = Clock::now();
  EXPECT_EQ(f.controller.tick(t0), "");
  const std::string why = f.controller.tick(t0 + std::chrono::seconds(6));
  EXPECT_NE(why.find("below --min-np 2 (1 rank(s) live) for --elastic-timeout 5 s"), std::string::npos) << why;
  // A process waiting for an epoch is told why.
  EXPECT_THROW(rendezvous::wait_for_membership(*f.store, {0, 0}, 0, std::chrono::seconds(1)),
               rendezvous::MembershipEnded);
}

TEST(ElasticController, NoMemberLeftMeansTheStateIsLost) {
  Fixture f(2, {.min_np = 1, .max_restarts = 2, .timeout_s = 60});
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({0, 0}, true, note));
  ASSERT_EQ(f.started.size(), 1u);  // {0, 1} starting
  EXPECT_FALSE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_NE(note.find("no member is left to hold the job's state"), std::string::npos) << note;
}

TEST(ElasticController, TrainingDoneAdmitsNobodyAndAMemberFailingAfterItFailsTheJob) {
  Fixture f(3, {.min_np = 1, .max_restarts = 2, .timeout_s = 60});
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({2, 0}, true, note));
  ASSERT_EQ(f.started.size(), 1u);
  EXPECT_TRUE(f.controller.member_ended({0, 0}, false, note));  // rank 0 finished training
  rendezvous::announce_ready(*f.store, {2, 1});
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {1, 0}}));  // not admitted
  EXPECT_THROW(rendezvous::wait_for_membership(*f.store, {2, 1}, -1, std::chrono::seconds(1)),
               rendezvous::MembershipEnded);
  EXPECT_TRUE(f.controller.member_ended({2, 1}, true, note));  // the replacement told so
  EXPECT_EQ(f.started.size(), 1u);
  // A member of the world failing after training ended is the job's failure.
  EXPECT_FALSE(f.controller.member_ended({1, 0}, true, note));
}

TEST(ElasticController, NobodyLeftAndNothingToStartStopsTheJob) {
  Fixture f(1, {.min_np = 1, .max_restarts = 0, .timeout_s = 60});
  std::string note;
  EXPECT_FALSE(f.controller.member_ended({0, 0}, true, note));
}

TEST(ElasticController, EpochsRecordEachMembersHostAcrossHosts) {
  Fixture f(3, {.min_np = 2, .max_restarts = 1, .timeout_s = 60, .slot_hosts = {"a", "a", "b"}});
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "a", "b"}));
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "b"}));
  rendezvous::announce_ready(*f.store, {1, 1});
  rendezvous::announce_formed(*f.store, 1);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  // The replacement runs where its slot does.
  EXPECT_EQ(f.latest().members, members({{0, 0}, {2, 0}, {1, 1}}));
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "b", "a"}));
}

TEST(Membership, HostsAreAllOrNone) {
  rendezvous::MemoryStore store;
  store.set("elastic/members/0", "0.0@a,1.0");
  store.set("elastic/epoch", "0");
  try {
    rendezvous::read_membership(store, 0);
    ADD_FAILURE() << "a record naming some hosts only was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'0.0@a,1.0' name the hosts of some members only"), std::string::npos)
        << e.what();
  }
}

TEST(Membership, AJoinerSkipsEpochsWithoutItAMemberLeftOutLeaves) {
  rendezvous::MemoryStore store;
  rendezvous::publish_membership(store, {0, members({{0, 0}, {1, 0}})});
  rendezvous::publish_membership(store, {1, members({{0, 0}})});
  // Member 1.0 of epoch 0 is not in epoch 1: it is told so (rank -1).
  EXPECT_EQ(rendezvous::wait_for_membership(store, {1, 0}, 0, std::chrono::seconds(1)).rank_of({1, 0}), -1);
  // A joiner waits past epochs that leave it out.
  EXPECT_THROW(rendezvous::wait_for_membership(store, {1, 1}, -1, std::chrono::milliseconds(100)), TimeoutError);
  // ... however many are published while it waits.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rendezvous::publish_membership(store, {2, members({{0, 0}, {2, 0}})});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rendezvous::publish_membership(store, {3, members({{0, 0}, {2, 0}, {1, 1}})});
  });
  const rendezvous::Membership m = rendezvous::wait_for_membership(store, {1, 1}, -1, std::chrono::seconds(5));
  later.join();
  EXPECT_EQ(m.epoch, 3);
  EXPECT_EQ(m.rank_of({1, 1}), 2);
  EXPECT_EQ(rendezvous::parse_member("12.3"), (Member{12, 3}));
  EXPECT_THROW(rendezvous::parse_member("12"), ConfigError);
  EXPECT_THROW(rendezvous::parse_member("a.1"), ConfigError);
}

}  // namespace
}  // namespace cohort::launcher
