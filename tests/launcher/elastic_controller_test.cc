// ElasticController (cohortrun --min-np): the epochs it publishes as
// members fail and replacements become ready, restarts per slot, the
// --min-np floor and its timeout, and the end of training; over a real
// MemoryStore, read back as the ranks read it (rendezvous/membership.h).
#include "cohort/launcher/elastic_controller.h"
#include "cohort/launcher/remote_rank.h"
#include "cohort/launcher/host_discovery.h"
#include "cohort/launcher/options.h"
#include "cohort/rendezvous/epoch_store.h"
#include "cohort/rendezvous/heartbeat.h"

#include <gtest/gtest.h>

#include <thread>

#include "cohort/rendezvous/memory_store.h"

namespace cohort::launcher::elastic_controller_test {
namespace {

using rendezvous::Member;
using Clock = ElasticController::Clock;

struct Fixture {
  std::shared_ptr<rendezvous::MemoryStore> store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<Member> started;  // processes the controller asked for
  std::vector<std::string> started_on;
  bool through_template = false;  // what the respawn says of its processes
  ElasticController controller;
  Fixture(int ranks, ElasticOptions o)
      : controller(o, store, ranks, [this](Member m, const std::string& host) {
          started.push_back(m);
          started_on.push_back(host);
          return through_template;
        }) {
    controller.publish_initial();
  }
  // Every process started so far says it is ready, and the latest epoch is
  // formed: the next tick admits them.
  void ready_and_formed() {
    for (const Member& m : started) rendezvous::announce_ready(*store, m);
    rendezvous::announce_formed(*store, rendezvous::latest_epoch(*store));
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
  // An ssh user@ prefix is part of a host's name.
  Fixture f(3, {.min_np = 2, .max_restarts = 1, .timeout_s = 60, .slot_hosts = {"a", "a", "user@b"}});
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "a", "user@b"}));
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "user@b"}));
  rendezvous::announce_ready(*f.store, {1, 1});
  rendezvous::announce_formed(*f.store, 1);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  // The replacement runs where its slot does.
  EXPECT_EQ(f.latest().members, members({{0, 0}, {2, 0}, {1, 1}}));
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "user@b", "a"}));
}

std::vector<HostSlots> hosts(std::initializer_list<std::pair<const char*, int>> list) {
  std::vector<HostSlots> out;
  for (auto [name, slots] : list) out.push_back({name, slots});
  return out;
}

TEST(ElasticController, DiscoveryAddsRanksUpToMaxNpAndAHostThatGoesLeavesWithoutRollback) {
  // Started: 2 ranks on a; discovery offers b:2 too, max_np 3.
  Fixture f(2, {.min_np = 1, .max_np = 3, .max_restarts = 1, .timeout_s = 60, .slot_hosts = {"a", "a"},
                .discovered = hosts({{"a", 2}})});
  EXPECT_EQ(f.controller.hosts_discovered(hosts({{"a", 2}})), "");  // no change
  EXPECT_NE(f.controller.hosts_discovered(hosts({{"a", 2}, {"b", 2}})).find("hosts now a:2,b:2"),
            std::string::npos);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  // One new slot (2), on b: max_np 3 allows no more.
  ASSERT_EQ(f.started, members({{2, 0}}));
  EXPECT_EQ(f.started_on, (std::vector<std::string>{"b"}));
  f.ready_and_formed();
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_EQ(f.latest().hosts, (std::vector<std::string>{"a", "a", "b"}));
  // a shrinks to 1 slot: its newest rank leaves at the members' next
  // commit, once epoch 1 is formed.
  const std::string note = f.controller.hosts_discovered(hosts({{"a", 1}, {"b", 2}}));
  EXPECT_NE(note.find("host a lost slots: 1.0 leave(s) the job"), std::string::npos) << note;
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().epoch, 1);
  rendezvous::announce_formed(*f.store, 1);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {2, 0}}));
  // The world is below max_np: b's free slot takes a new rank.
  ASSERT_EQ(f.started, members({{2, 0}, {3, 0}}));
  EXPECT_EQ(f.started_on.back(), "b");
  // The removed rank's exit is expected: no restart, and the job goes on;
  // its exit 0 is not the end of training.
  std::string said;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, false, said));
  EXPECT_NE(said.find("host a was removed by discovery"), std::string::npos) << said;
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.started.size(), 2u);
  // Every host gone: all ranks leave but the last member, whose process
  // holds the state (2.0: 0.0 goes, and 3.0, not admitted yet).
  const std::string gone = f.controller.hosts_discovered({});
  EXPECT_NE(gone.find("0.0"), std::string::npos) << gone;
  EXPECT_NE(gone.find("3.0"), std::string::npos) << gone;
  EXPECT_EQ(gone.find("2.0"), std::string::npos) << gone;
}

TEST(ElasticController, RemovalsKeepTheFloorCountRanksLeavingOnceAndAnEpochWithADeadLeaverIsPast) {
  Fixture f(3, {.min_np = 2, .max_restarts = 0, .timeout_s = 60, .slot_hosts = {"a", "a", "b"},
                .discovered = hosts({{"a", 2}, {"b", 1}})});
  // a shrinks to 1 slot: 1.0 leaves (not formed yet: no epoch published).
  EXPECT_NE(f.controller.hosts_discovered(hosts({{"a", 1}, {"b", 1}})).find("1.0 leave(s)"),
            std::string::npos);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().epoch, 0);
  // Another change before 1.0 has left: 0.0 is not taken for a second
  // excess on a (1.0 still holds its slot until it exits).
  EXPECT_EQ(f.controller.hosts_discovered(hosts({{"b", 1}, {"a", 1}})).find("leave"),
            std::string::npos);
  // 1.0 dies while epoch 0 (which has it) is not formed: that epoch is
  // past, and the removal is published at once.
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {2, 0}}));
  // b goes too: its member stays, the world being at --min-np 2.
  EXPECT_EQ(f.controller.hosts_discovered(hosts({{"a", 1}})).find("leave"), std::string::npos);
  rendezvous::announce_formed(*f.store, 1);
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {2, 0}}));
}

TEST(ElasticController, AFailingHostIsBlacklistedAndRetriedAfterItsCoolDown) {
  Fixture f(2, {.min_np = 1, .max_np = 2, .max_restarts = 3, .timeout_s = 60, .slot_hosts = {"a", "b"},
                .discovered = hosts({{"a", 1}, {"b", 1}}),
                .pool = {.cooldown = std::chrono::seconds(10), .max_cooldown = std::chrono::seconds(30)}});
  std::string note;
  // b's rank fails: b cools down 10 s, and no other host has a free slot.
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_NE(note.find("host b is blacklisted for 10 s"), std::string::npos) << note;
  EXPECT_NE(note.find("slot 1 waits for a free host that is not blacklisted (restart 1 of 3)"), std::string::npos)
      << note;
  const auto t0 = Clock::now();
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(9)), "");
  EXPECT_TRUE(f.started.empty());
  // After the cool-down, b is tried again.
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(11)), "");
  ASSERT_EQ(f.started, members({{1, 1}}));
  EXPECT_EQ(f.started_on, (std::vector<std::string>{"b"}));
  // It fails again: 20 s this time; a new host c gets the replacement.
  EXPECT_TRUE(f.controller.member_ended({1, 1}, true, note));
  EXPECT_NE(note.find("host b is blacklisted for 20 s"), std::string::npos) << note;
  f.controller.hosts_discovered(hosts({{"a", 1}, {"b", 1}, {"c", 1}}));
  EXPECT_EQ(f.controller.tick(Clock::now()), "");
  ASSERT_EQ(f.started, members({{1, 1}, {1, 2}}));
  EXPECT_EQ(f.started_on.back(), "c");
}

TEST(ElasticController, ASilentProcessIsTerminatedAndItsLossAnnouncedInEveryWorldThatHasIt) {
  Fixture f(3, {.min_np = 2, .max_restarts = 1, .timeout_s = 60, .heartbeat_timeout_s = 2});
  std::vector<std::pair<Member, std::string>> terminated;
  f.controller.set_terminate([&](Member m, const std::string& why) { terminated.emplace_back(m, why); });
  const auto t0 = Clock::now();
  // Slot 2 never beat (still starting): not watched. Slots 0 and 1 beat.
  for (int s : {0, 1}) rendezvous::beat(*f.store, {s, 0});
  EXPECT_EQ(f.controller.tick(t0), "");
  rendezvous::beat(*f.store, {0, 0});
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::milliseconds(1500)), "");
  // 2.5 s: slot 1's beats stood still for more than 2 s; slot 0 beat at
  // 1.5 s and slot 2 never did.
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::milliseconds(2500)), "");
  ASSERT_EQ(terminated.size(), 1u);
  EXPECT_EQ(terminated[0].first, (Member{1, 0}));
  EXPECT_EQ(terminated[0].second, "sent no heartbeat for 2 s (a cut link or a hung host)");
  // Terminated once, however long it takes to end.
  rendezvous::beat(*f.store, {0, 0});
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(5)), "");
  EXPECT_EQ(terminated.size(), 1u);
  // Its end (the kill) is a failure like any other: the others go on, and
  // epoch 0's world, which it was in, is told before epoch 1 exists.
  EXPECT_EQ(rendezvous::lost_member(*f.store, 0), std::nullopt);
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_EQ(rendezvous::lost_member(*f.store, 0), "1.0");
  EXPECT_EQ(f.latest().members, members({{0, 0}, {2, 0}}));
  EXPECT_EQ(rendezvous::lost_member(*f.store, 1), std::nullopt);
  // The replacement joins (epoch 2); then slot 2 fails: epochs 0, 1 and 2
  // had it (members may still be in an earlier epoch's world).
  f.ready_and_formed();
  rendezvous::beat(*f.store, {0, 0});
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(6)), "");
  ASSERT_EQ(f.latest().epoch, 2);
  EXPECT_TRUE(f.controller.member_ended({2, 0}, true, note));
  for (int64_t e : {0, 1, 2}) EXPECT_EQ(rendezvous::lost_member(*f.store, e), "2.0") << "epoch " << e;
  // A replacement that was never a member is no world's loss.
  EXPECT_TRUE(f.controller.member_ended({2, 1}, true, note));
  EXPECT_EQ(rendezvous::lost_member(*f.store, 3), std::nullopt);
}

TEST(ElasticController, AMemberSilentAfterTrainingFinishedIsTerminatedAndFailsTheJob) {
  // Slot 0 ends well (training is over); slot 1, on its way out, stops
  // beating (a cut link in its last collectives): it is still watched,
  // killed after 2 s, and its end fails the job instead of the launcher
  // waiting for it.
  Fixture f(2, {.min_np = 1, .max_restarts = 1, .timeout_s = 60, .heartbeat_timeout_s = 2});
  std::vector<Member> terminated;
  f.controller.set_terminate([&](Member m, const std::string&) { terminated.push_back(m); });
  const auto t0 = Clock::now();
  for (int s : {0, 1}) rendezvous::beat(*f.store, {s, 0});
  EXPECT_EQ(f.controller.tick(t0), "");
  std::string note;
  EXPECT_TRUE(f.controller.member_ended({0, 0}, false, note));
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::milliseconds(1000)), "");
  EXPECT_TRUE(terminated.empty());
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::milliseconds(2500)), "");
  EXPECT_EQ(terminated, (std::vector<Member>{Member{1, 0}}));
  EXPECT_FALSE(f.controller.member_ended({1, 0}, true, note));
  EXPECT_EQ(note, "after the job's training finished");
}

TEST(ElasticController, AReplacementThatNeverStartsThroughTheTemplateIsTerminated) {
  // Slots 0-2 fail; their replacements go through the launch template.
  // Slot 0's remote end records its start (key "cohortrun/started/0.1"),
  // slot 2's could not, but its program beats; slot 1's never starts (an
  // unreachable host): 3 s later it is terminated, once, and its end is a
  // failure like any other (its own replacement).
  Fixture f(4, {.min_np = 1, .max_restarts = 2, .timeout_s = 60, .start_timeout_s = 3});
  f.through_template = true;
  std::vector<std::pair<Member, std::string>> terminated;
  f.controller.set_terminate([&](Member m, const std::string& why) { terminated.emplace_back(m, why); });
  const auto t0 = Clock::now();
  std::string note;
  for (int s : {0, 1, 2}) EXPECT_TRUE(f.controller.member_ended({s, 0}, true, note));
  ASSERT_EQ(f.started, members({{0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(started_key(0, 1), "cohortrun/started/0.1");
  EXPECT_EQ(started_key(0, 0), "cohortrun/started/0");
  f.store->set(started_key(0, 1), "hosta pid 7");
  rendezvous::beat(*f.store, {2, 1});
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(2)), "");
  EXPECT_TRUE(terminated.empty());
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(4)), "");
  ASSERT_EQ(terminated.size(), 1u);
  EXPECT_EQ(terminated[0].first, (Member{1, 1}));
  EXPECT_EQ(terminated[0].second,
            "did not start its program within --start-timeout 3 s (is the host reachable through the launch "
            "template?)");
  EXPECT_EQ(f.controller.tick(t0 + std::chrono::seconds(8)), "");
  EXPECT_EQ(terminated.size(), 1u) << "terminated twice";
  EXPECT_TRUE(f.controller.member_ended({1, 1}, true, note));
  EXPECT_NE(note.find("a process that had not joined yet"), std::string::npos) << note;
  EXPECT_EQ(f.started.back(), (Member{1, 2}));
}

TEST(Heartbeat, BeatsFromItsOwnThreadUntilDestroyed) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  const Member me{4, 1};
  {
    rendezvous::Heartbeat heartbeat(store, me, std::chrono::milliseconds(10));
    // The first beat is at once; later ones come while this thread sleeps.
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (rendezvous::heartbeats(*store, me) < 3 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_GE(rendezvous::heartbeats(*store, me), 3);
  }
  const int64_t last = rendezvous::heartbeats(*store, me);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(rendezvous::heartbeats(*store, me), last) << "it beat after its destruction";
  EXPECT_EQ(rendezvous::heartbeats(*store, {4, 0}), 0) << "another incarnation's counter moved";
}

TEST(HostPool, CoolDownsDoubleUpToTheirMaximum) {
  HostPool pool({.cooldown = std::chrono::seconds(1), .max_cooldown = std::chrono::seconds(5)});
  pool.update(hosts({{"a", 2}}));
  const auto t0 = HostPool::Clock::now();
  std::vector<int64_t> seconds;
  for (int i = 0; i < 5; ++i)
    seconds.push_back(std::chrono::duration_cast<std::chrono::seconds>(pool.failed("a", t0)).count());
  EXPECT_EQ(seconds, (std::vector<int64_t>{1, 2, 4, 5, 5}));
  EXPECT_TRUE(pool.cooling("a", t0 + std::chrono::seconds(4)));
  EXPECT_FALSE(pool.free_host(t0 + std::chrono::seconds(4)).has_value());
  EXPECT_EQ(pool.free_host(t0 + std::chrono::seconds(6)), "a");
  pool.take("a");
  pool.take("a");
  EXPECT_EQ(pool.free_slots(t0 + std::chrono::seconds(6)), 0);
  // Fewer slots than ranks: the excess is reported.
  EXPECT_EQ(pool.update(hosts({{"a", 1}})), (std::map<std::string, int>{{"a", 1}}));
  EXPECT_EQ(pool.update({}), (std::map<std::string, int>{{"a", 2}}));
}

TEST(HostDiscovery, ParsesHostsAndReportsBadOutputAndFailures) {
  EXPECT_EQ(parse_discovered_hosts("a:2\n\n  b\na:1\n", "s"), hosts({{"a", 3}, {"b", 1}}));
  try {
    parse_discovered_hosts("a:2\nb:x\n", "script 's'");
    ADD_FAILURE() << "a bad line was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("script 's' line 2: expected host or host:slots, got 'b:x'"),
              std::string::npos)
        << e.what();
  }
  const Discovery ok = discover_hosts("printf 'h1:2\\nh2:1\\n'", std::chrono::seconds(5));
  ASSERT_TRUE(ok.ok) << ok.error;
  EXPECT_EQ(ok.hosts, hosts({{"h1", 2}, {"h2", 1}}));
  const Discovery failed = discover_hosts("echo a:1; exit 3", std::chrono::seconds(5));
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.error, "host discovery script 'echo a:1; exit 3' exited with code 3");
  const Discovery slow = discover_hosts("sleep 5", std::chrono::milliseconds(200));
  EXPECT_FALSE(slow.ok);
  EXPECT_NE(slow.error.find("printed no end of output within 200 ms"), std::string::npos) << slow.error;
}

TEST(EpochStore, AFormingWorldGivesWayToALaterEpochAndAFormedOneDoesNot) {
  auto job = std::make_shared<rendezvous::MemoryStore>();
  rendezvous::publish_membership(*job, {0, members({{0, 0}, {1, 0}})});
  rendezvous::EpochStore forming(job, 0);
  forming.set("a", "1");
  EXPECT_TRUE(job->check(std::vector<std::string>{"world/e0/a"}));  // the epoch's namespace
  // A member's key that never comes: once epoch 1 is published, the wait
  // gives up (within a slice), long before its timeout.
  std::thread launcher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    rendezvous::publish_membership(*job, {1, members({{0, 0}})});
  });
  const auto t0 = Clock::now();
  EXPECT_THROW(forming.wait(std::vector<std::string>{"b"}, std::chrono::seconds(30)), rendezvous::EpochSuperseded);
  EXPECT_THROW(forming.get("b", std::chrono::seconds(30)), rendezvous::EpochSuperseded);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  launcher.join();
  // Formed (disarmed), a later epoch is no reason to give up: the wait
  // runs to its timeout, and present keys are read as before.
  forming.disarm();
  EXPECT_THROW(forming.wait(std::vector<std::string>{"b"}, std::chrono::milliseconds(200)), TimeoutError);
  EXPECT_EQ(forming.get("a", std::chrono::milliseconds(10)), "1");
  // Armed, with no later epoch: an ordinary timeout naming the key.
  rendezvous::EpochStore current(job, 1);
  EXPECT_THROW(current.wait(std::vector<std::string>{"c"}, std::chrono::milliseconds(250)), TimeoutError);
  // The job ended (its members finished training before a new one's world
  // formed): the new one is told so instead of waiting for them.
  rendezvous::end_membership(*job, "the job's training finished");
  EXPECT_THROW(current.wait(std::vector<std::string>{"c"}, std::chrono::seconds(30)), rendezvous::MembershipEnded);
}

TEST(Membership, HostsAreAllOrNone) {
  rendezvous::MemoryStore store;
  store.set("elastic/members/0", "0.0/a,1.0");
  store.set("elastic/epoch", "0");
  try {
    rendezvous::read_membership(store, 0);
    ADD_FAILURE() << "a record naming some hosts only was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'0.0/a,1.0' name the hosts of some members only"), std::string::npos)
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
}  // namespace cohort::launcher::elastic_controller_test
