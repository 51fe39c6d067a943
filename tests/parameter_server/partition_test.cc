// The partition's consistency rules, replica snapshots and reshardable
// checkpoints, driven directly (no sockets).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cohort/common/error.h"
#include "cohort/parameter_server/checkpoint.h"
#include "cohort/parameter_server/partition.h"
#include "cohort/parameter_server/replica.h"
#include "cohort/parameter_server/wire.h"

namespace cohort::ps::partition_test {
namespace {

std::span<const std::byte> as_bytes(const std::vector<double>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(double)};
}

std::vector<double> values(Partition& p, uint64_t key) {
  const Shard& s = p.shard(key);
  std::vector<double> out(s.values.size() / sizeof(double));
  p.read_dense(key, reinterpret_cast<std::byte*>(out.data()));
  return out;
}

struct Fixture {
  VariableSpec spec{.name = "x", .rows = 2, .cols = 2, .dtype = DType::f64};
  ShardInfo info{.variable = 0, .index = 0, .row_begin = 0, .row_end = 2};
  uint64_t key = shard_key(0, 0);
  std::unique_ptr<Partition> p;

  explicit Fixture(PartitionConfig c, bool sparse = false) {
    spec.sparse = sparse;
    p = std::make_unique<Partition>(c);
    p->declare(info, spec, as_bytes({1, 1, 1, 1}));
    for (uint32_t w = 0; w < static_cast<uint32_t>(c.num_workers); ++w) {
      p->hello(w, 100 + w);
      p->join(w, 100 + w, 0);
    }
  }
  void push(uint32_t w, int64_t step, std::vector<double> g) { p->stage_dense(w, step, key, as_bytes(g)); }
};

PartitionConfig sgd(int workers, int64_t staleness = 0, int backup = 0) {
  return {.id = 0, .num_workers = workers, .staleness = staleness, .backup_workers = backup,
          .optimizer = {.rule = UpdateRule::sgd, .lr = 1.0}};
}

// Row ids arrive in ZeroMQ frames, which may start at any byte (inside the
// decoder's buffer, or inline in a small message): reading them as int64_t in
// place was undefined behaviour (UBSan: misaligned load). A frame over a
// buffer at an odd address reads the same ids through a copy.
TEST(Wire, RowIdsOfAMisalignedFrameAreCopiedAndMalformedOnesRefused) {
  const std::vector<int64_t> ids{3, 1LL << 40, -2, 7};
  alignas(8) std::byte storage[64];
  std::byte* odd = storage + 1;
  std::memcpy(odd, ids.data(), ids.size() * sizeof(int64_t));
  Message m;
  m.frames.emplace_back(odd, ids.size() * sizeof(int64_t), [](void*, void*) {}, nullptr);  // no copy: stays odd
  ASSERT_NE(reinterpret_cast<uintptr_t>(m.frames[0].data()) % alignof(int64_t), 0u);
  std::vector<int64_t> scratch;
  const auto read = m.row_ids(0, scratch);
  EXPECT_EQ(std::vector<int64_t>(read.begin(), read.end()), ids);
  EXPECT_EQ(read.data(), scratch.data());

  Message aligned;
  aligned.add(std::span<const int64_t>(ids));
  std::vector<int64_t> unused;
  const auto in_place = aligned.row_ids(0, unused);
  EXPECT_EQ(std::vector<int64_t>(in_place.begin(), in_place.end()), ids);
  EXPECT_TRUE(unused.empty() || in_place.data() == unused.data());

  Message ragged;
  ragged.add(storage, 12);
  try {
    ragged.row_ids(0, scratch);
    FAIL() << "a 12-byte row-id frame was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("12 bytes is not a whole number of int64 ids"), std::string::npos) << e.what();
  }
}

TEST(Partition, SynchronousStepWaitsForEveryWorkerAndAppliesTheMean) {
  Fixture f(sgd(2));
  EXPECT_TRUE(f.p->may_read(0));
  f.push(0, 0, {2, 2, 2, 2});
  f.p->commit(0, 0);
  EXPECT_EQ(f.p->version(), 0);
  EXPECT_FALSE(f.p->may_read(1));
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{1, 1, 1, 1}));
  f.push(1, 0, {4, 0, 4, 0});
  f.p->commit(1, 0);
  EXPECT_EQ(f.p->version(), 1);
  EXPECT_TRUE(f.p->may_read(1));
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{-2, 0, -2, 0}));
}

TEST(Partition, RetriedPushesAndCommitsAreNeverAppliedTwice) {
  Fixture f(sgd(1));
  f.push(0, 0, {1, 1, 1, 1});
  f.push(0, 0, {1, 1, 1, 1});  // a resend replaces, never adds
  f.p->commit(0, 0);
  f.p->commit(0, 0);           // a retried commit
  f.push(0, 0, {5, 5, 5, 5});  // a replay of the applied step
  f.p->commit(0, 0);
  EXPECT_EQ(f.p->version(), 1);
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(f.p->counters().stale_ignored, 3);
}

TEST(Partition, ArrivalOrderDoesNotChangeTheResult) {
  std::vector<double> a, b;
  for (int order = 0; order < 2; ++order) {
    Fixture f(sgd(3));
    const std::vector<std::vector<double>> g = {{0.1, 0.2, 0.3, 0.4}, {1e16, 1, 1, 1}, {-1e16, 3, 3, 3}};
    for (int i = 0; i < 3; ++i) {
      const uint32_t w = order ? 2 - i : i;
      f.push(w, 0, g[w]);
      f.p->commit(w, 0);
    }
    (order ? b : a) = values(*f.p, f.key);
  }
  EXPECT_EQ(a, b);
}

TEST(Partition, DeadWorkersUncommittedStepIsDiscardedAndTheStepCompletesWithTheSurvivors) {
  Fixture f(sgd(3));
  f.push(0, 0, {3, 3, 3, 3});
  f.p->commit(0, 0);
  f.push(1, 0, {1, 1, 1, 1});
  f.p->commit(1, 0);
  f.push(2, 0, {100, 100, 100, 100});  // pushed, never committed
  EXPECT_EQ(f.p->version(), 0);
  f.p->declare_dead(2);
  EXPECT_EQ(f.p->version(), 1);
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{-1, -1, -1, -1}));  // 1 - mean(3, 1)
  EXPECT_EQ(f.p->counters().discarded_steps, 1);
  EXPECT_FALSE(f.p->accepts(2, 102));  // it must come back as a new incarnation
  // The next step needs only the two survivors.
  f.p->commit(0, 1);
  f.p->commit(1, 1);
  EXPECT_EQ(f.p->version(), 2);
  // A replacement joins at the current step and counts again.
  const auto hello = f.p->hello(2, 999);
  EXPECT_EQ(hello.version, 2);
  f.p->join(2, 999, hello.version);
  f.p->commit(0, 2);
  f.p->commit(1, 2);
  EXPECT_EQ(f.p->version(), 2);
  f.p->commit(2, 2);
  EXPECT_EQ(f.p->version(), 3);
}

TEST(Partition, BackupWorkersLetTheStepGoWithoutTheSlowestAndDropItsLateGradient) {
  Fixture f(sgd(3, 0, 1));
  f.push(0, 0, {1, 1, 1, 1});
  f.p->commit(0, 0);
  EXPECT_EQ(f.p->version(), 0);
  f.push(2, 0, {3, 3, 3, 3});
  f.p->commit(2, 0);
  EXPECT_EQ(f.p->version(), 1);
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{-1, -1, -1, -1}));
  f.push(1, 0, {50, 50, 50, 50});
  f.p->commit(1, 0);
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{-1, -1, -1, -1}));
  EXPECT_EQ(f.p->counters().late_dropped, 1);
}

TEST(Partition, BoundedStalenessLetsAWorkerRunAtMostKStepsAhead) {
  Fixture f(sgd(2, 2));
  for (int64_t s = 0; s < 2; ++s) {
    f.push(0, s, {1, 1, 1, 1});
    f.p->commit(0, s);
  }
  // Worker 0 is at clock 2, worker 1 at 0: reading at clock 2 is 2 ahead.
  EXPECT_TRUE(f.p->may_read(2));
  f.p->note_read(2);
  f.p->commit(0, 2);
  EXPECT_FALSE(f.p->may_read(3));
  f.p->commit(1, 0);
  EXPECT_TRUE(f.p->may_read(3));
  f.p->note_read(3);
  EXPECT_EQ(f.p->counters().max_staleness, 2);
  // Each commit applied its own gradient divided by the workers: 1 - 2 * 0.5.
  EXPECT_EQ(values(*f.p, f.key), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(f.p->version(), 4);
}

TEST(Partition, AsyncNeverWaits) {
  Fixture f(sgd(2, kAsync));
  for (int64_t s = 0; s < 10; ++s) f.p->commit(0, s);
  EXPECT_TRUE(f.p->may_read(1000));
}

TEST(Partition, SparseRowsEqualDenseUpdatesRestrictedToThoseRows) {
  for (UpdateRule rule : {UpdateRule::sgd, UpdateRule::adagrad, UpdateRule::adam}) {
    PartitionConfig c{.num_workers = 2, .optimizer = {.rule = rule, .lr = 0.1, .momentum = 0.9}};
    VariableSpec spec{.name = "emb", .rows = 6, .cols = 2, .dtype = DType::f64, .sparse = true};
    const ShardInfo info{.variable = 0, .index = 0, .row_begin = 0, .row_end = 6};
    std::vector<double> init(12);
    for (size_t i = 0; i < init.size(); ++i) init[i] = 0.25 * static_cast<double>(i);
    Partition sparse(c), dense(c);
    sparse.declare(info, spec, as_bytes(init));
    dense.declare(info, spec, as_bytes(init));
    for (Partition* p : {&sparse, &dense})
      for (uint32_t w = 0; w < 2; ++w) p->join(w, 1 + w, 0);
    const std::vector<std::vector<int64_t>> rows = {{1, 4}, {0, 4}};
    for (int64_t step = 0; step < 3; ++step) {
      for (uint32_t w = 0; w < 2; ++w) {
        std::vector<double> g(rows[w].size() * 2), full(12, 0.0);
        for (size_t r = 0; r < rows[w].size(); ++r)
          for (int c2 = 0; c2 < 2; ++c2) full[rows[w][r] * 2 + c2] = g[r * 2 + c2] = 0.5 + w - 0.1 * step + c2;
        sparse.stage_rows(w, step, 0, rows[w], as_bytes(g));
        dense.stage_dense(w, step, 0, as_bytes(full));
        sparse.commit(w, step);
        dense.commit(w, step);
      }
    }
    const auto s = values(sparse, 0), d = values(dense, 0);
    for (int64_t r = 0; r < 6; ++r)
      for (int c2 = 0; c2 < 2; ++c2) {
        const bool touched = r == 0 || r == 1 || r == 4;
        EXPECT_NEAR(s[r * 2 + c2], touched ? d[r * 2 + c2] : init[r * 2 + c2], 1e-15)
            << update_rule_name(rule) << " row " << r;
      }
  }
}

TEST(Partition, SnapshotsKeepAReplicaEqualToThePrimary) {
  PartitionConfig c{.num_workers = 1, .optimizer = {.rule = UpdateRule::adam, .lr = 0.1}, .replicated = true};
  VariableSpec dense_spec{.name = "w", .rows = 3, .cols = 1, .dtype = DType::f64};
  VariableSpec emb_spec{.name = "emb", .rows = 5, .cols = 2, .dtype = DType::f64, .sparse = true};
  Partition primary(c);
  PartitionConfig rc = c;
  rc.replicated = false;
  Partition replica(rc);
  primary.declare({.variable = 0, .index = 0, .row_begin = 0, .row_end = 3}, dense_spec, as_bytes({1, 2, 3}));
  primary.declare({.variable = 1, .index = 0, .row_begin = 0, .row_end = 5}, emb_spec,
                  as_bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  primary.join(0, 7, 0);
  ASSERT_TRUE(primary.snapshot_due());
  Message first = make_snapshot(primary);
  apply_snapshot(replica, first);
  primary.replicated();
  for (int64_t step = 0; step < 3; ++step) {
    primary.stage_dense(0, step, shard_key(0, 0), as_bytes({0.5, -0.5, 1}));
    const std::vector<int64_t> rows = {static_cast<int64_t>(step), 4};
    primary.stage_rows(0, step, shard_key(1, 0), rows, as_bytes({1, 1, -1, -1}));
    primary.commit(0, step);
    // Synchronous and replicated: the step is visible only once replicated.
    EXPECT_EQ(primary.version(), step);
    ASSERT_TRUE(primary.snapshot_due());
    Message snap = make_snapshot(primary);
    // After the first, snapshots of the table carry only the changed rows.
    for (size_t i = 1; i < snap.frames.size(); i += 4)
      if (std::string(snap.text(i + 1)) == "emb") {
        EXPECT_EQ(snap.frames[i + 2].size(), 2 * sizeof(int64_t));
      }
    EXPECT_EQ(apply_snapshot(replica, snap), step + 1);
    primary.replicated();
    EXPECT_EQ(primary.version(), step + 1);
  }
  for (uint64_t key : {shard_key(0, 0), shard_key(1, 0)}) {
    EXPECT_EQ(values(primary, key), values(replica, key));
    EXPECT_EQ(primary.shard(key).slots, replica.shard(key).slots);
    EXPECT_EQ(primary.shard(key).updates, replica.shard(key).updates);
  }
  EXPECT_EQ(replica.version(), 3);
  EXPECT_EQ(replica.clock(0), 3);
}

// An elastic job's rollback: the state after a restore equals that of a
// partition that never went ahead (the same steps applied, the restored-away
// ones not), and the workers not named live are out of the steps.
TEST(Partition, RestoringACommitEqualsNeverHavingGoneAhead) {
  PartitionConfig c{.num_workers = 2, .optimizer = {.rule = UpdateRule::sgd, .lr = 0.5, .momentum = 0.9}};
  Fixture rolled(c), reference(c);
  auto step = [](Fixture& f, int64_t s, std::vector<uint32_t> workers) {
    for (uint32_t w : workers) {
      f.push(w, s, {1.0 + s + w, -2.0 * w, 0.25 * s, 3.0});
      f.p->commit(w, s);
    }
  };
  for (Fixture* f : {&rolled, &reference}) {
    step(*f, 0, {0, 1});
    step(*f, 1, {0, 1});
  }
  rolled.p->keep_commit(2);
  EXPECT_EQ(rolled.p->commit_versions(), (std::vector<int64_t>{2}));
  EXPECT_TRUE(rolled.p->commit_kept(2));  // not replicated: kept here is enough
  // Ahead: two steps, a commit of the first (taken when it is applied), and
  // worker 1's half of a third.
  rolled.p->keep_commit(3);
  EXPECT_EQ(rolled.p->commit_versions(), (std::vector<int64_t>{2}));
  step(rolled, 2, {0, 1});
  EXPECT_EQ(rolled.p->commit_versions(), (std::vector<int64_t>{2, 3}));
  step(rolled, 3, {0, 1});
  rolled.push(1, 4, {9, 9, 9, 9});
  rolled.p->commit(1, 4);
  EXPECT_THROW(rolled.p->keep_commit(3), Error);  // already past it
  ASSERT_NE(values(*rolled.p, rolled.key), values(*reference.p, reference.key));

  // Back to version 2 with worker 0 alone; the reference loses worker 1 there.
  const std::vector<uint32_t> live{0};
  rolled.p->restore_commit(2, live, /*timeline=*/1);
  reference.p->declare_dead(1);
  // Steps of the timeline rolled back (a replay) are refused from now on.
  EXPECT_FALSE(rolled.p->current_timeline(0));
  EXPECT_TRUE(rolled.p->current_timeline(1));
  EXPECT_EQ(rolled.p->version(), 2);
  EXPECT_EQ(rolled.p->clock(0), 2);
  EXPECT_EQ(rolled.p->clock(1), 2);
  EXPECT_FALSE(rolled.p->live(1));
  EXPECT_EQ(rolled.p->commit_versions(), (std::vector<int64_t>{2}));  // 3 was after it
  EXPECT_EQ(values(*rolled.p, rolled.key), values(*reference.p, reference.key));
  EXPECT_EQ(rolled.p->shard(rolled.key).slots, reference.p->shard(reference.key).slots);
  for (Fixture* f : {&rolled, &reference}) {
    step(*f, 2, {0});
    step(*f, 3, {0});
  }
  EXPECT_EQ(rolled.p->version(), 4);
  EXPECT_EQ(values(*rolled.p, rolled.key), values(*reference.p, reference.key));
  EXPECT_EQ(rolled.p->shard(rolled.key).slots, reference.p->shard(reference.key).slots);
  EXPECT_EQ(rolled.p->shard(rolled.key).updates, reference.p->shard(reference.key).updates);

  // A replacement of worker 1 (a new incarnation) goes on after the next restore.
  rolled.p->keep_commit(4);
  rolled.p->hello(1, 555);
  rolled.p->join(1, 555, 4);
  EXPECT_TRUE(rolled.p->accepts(1, 555));
  try {
    rolled.p->restore_commit(1, live, 2);
    FAIL() << "restored a commit it does not hold";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no commit at version 1 (it holds 2, 4)"), std::string::npos)
        << e.what();
  }
  const std::vector<uint32_t> both{0, 1};
  rolled.p->restore_commit(4, both, 2);
  EXPECT_TRUE(rolled.p->live(1));
  EXPECT_EQ(rolled.p->counters().restores, 2);

  Fixture stale(sgd(2, /*staleness=*/1));
  EXPECT_THROW(stale.p->keep_commit(0), ConfigError);
  Fixture backup(sgd(2, 0, /*backup=*/1));
  EXPECT_THROW(backup.p->keep_commit(0), ConfigError);
}

// The replica keeps the primary's commits (a marker on the snapshot, with
// no shard records when it has that state already) and takes its restores,
// so that a promoted replica can restore the commit itself.
TEST(Partition, TheReplicaKeepsThePrimarysCommitsAndFollowsItsRestores) {
  PartitionConfig c{.num_workers = 1, .optimizer = {.rule = UpdateRule::adam, .lr = 0.1}, .replicated = true};
  PartitionConfig rc = c;
  rc.replicated = false;
  VariableSpec dense{.name = "w", .rows = 3, .cols = 1, .dtype = DType::f64};
  VariableSpec table{.name = "emb", .rows = 5, .cols = 2, .dtype = DType::f64, .sparse = true};
  Partition primary(c), replica(rc);
  primary.declare({.variable = 0, .index = 0, .row_begin = 0, .row_end = 3}, dense, as_bytes({1, 2, 3}));
  primary.declare({.variable = 1, .index = 0, .row_begin = 0, .row_end = 5}, table,
                  as_bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  primary.join(0, 7, 0);
  auto replicate = [&]() -> size_t {
    EXPECT_TRUE(primary.snapshot_due());
    Message snap = make_snapshot(primary);
    apply_snapshot(replica, snap);
    primary.replicated();
    return snap.frames.size();
  };
  auto step = [&](int64_t s) {
    primary.stage_dense(0, s, shard_key(0, 0), as_bytes({0.5, -0.5, 1.0 + s}));
    const std::vector<int64_t> rows = {s % 4, 4};
    primary.stage_rows(0, s, shard_key(1, 0), rows, as_bytes({1, 1, -1, -1}));
    primary.commit(0, s);
  };
  replicate();
  step(0);
  replicate();
  step(1);
  replicate();
  primary.keep_commit(2);
  EXPECT_FALSE(primary.commit_kept(2));  // not on the replica yet
  EXPECT_EQ(replicate(), 1u);             // the marker alone: the clocks, no shard records
  EXPECT_TRUE(primary.commit_kept(2));
  EXPECT_EQ(replica.commit_versions(), (std::vector<int64_t>{2}));
  const std::vector<double> committed_w = values(primary, shard_key(0, 0));
  const std::vector<double> committed_emb = values(primary, shard_key(1, 0));

  for (int64_t s = 2; s < 4; ++s) {
    step(s);
    replicate();
  }
  primary.keep_commit(4);
  replicate();
  EXPECT_TRUE(primary.commit_kept(4));
  const std::vector<uint32_t> live{0};
  primary.restore_commit(2, live, /*timeline=*/3);
  EXPECT_FALSE(primary.restore_replicated(2));
  EXPECT_GT(replicate(), 1u);  // the restored state, whole
  EXPECT_TRUE(primary.restore_replicated(2));
  EXPECT_EQ(replica.version(), 2);
  EXPECT_EQ(replica.timeline(), 3);  // a promoted replica refuses the old timeline too
  for (uint64_t key : {shard_key(0, 0), shard_key(1, 0)}) {
    EXPECT_EQ(values(replica, key), values(primary, key));
    EXPECT_EQ(replica.shard(key).slots, primary.shard(key).slots);
    EXPECT_EQ(replica.shard(key).updates, primary.shard(key).updates);
  }
  EXPECT_EQ(values(replica, shard_key(0, 0)), committed_w);
  EXPECT_EQ(values(replica, shard_key(1, 0)), committed_emb);

  EXPECT_EQ(replica.commit_versions(), (std::vector<int64_t>{2}));  // 4 was after the restore

  // The steps redone and committed again: not kept until the replica has
  // this commit 4 (the one it acknowledged before was rolled back).
  for (int64_t s = 2; s < 4; ++s) {
    step(s);
    replicate();
  }
  primary.keep_commit(4);
  EXPECT_FALSE(primary.commit_kept(4));
  replicate();
  EXPECT_TRUE(primary.commit_kept(4));

  // The primary's server dies: the replica, promoted, still holds commit 2
  // and restores it itself.
  EXPECT_EQ(replica.commit_versions(), (std::vector<int64_t>{2, 4}));
  replica.restore_commit(2, live, 4);
  EXPECT_EQ(values(replica, shard_key(0, 0)), committed_w);
  EXPECT_EQ(values(replica, shard_key(1, 0)), committed_emb);

  // A replica lost before it acknowledged a commit: kept here only, and the
  // commit is answered (no worker waits for a replica that is gone).
  step(4);
  replicate();
  primary.keep_commit(5);
  ASSERT_TRUE(primary.snapshot_due());
  Message lost = make_snapshot(primary);
  EXPECT_FALSE(primary.commit_kept(5));
  primary.replica_lost();
  EXPECT_TRUE(primary.commit_kept(5));

  // Its new replica starts with no commits; a restore's snapshot gives it
  // the one restored (the state it carries is that commit's, whole).
  Partition fresh(rc);
  primary.restore_commit(5, live, 5);
  ASSERT_TRUE(primary.snapshot_due());
  Message whole = make_snapshot(primary);
  apply_snapshot(fresh, whole);
  primary.replicated();
  EXPECT_TRUE(primary.restore_replicated(5));
  EXPECT_EQ(fresh.commit_versions(), (std::vector<int64_t>{5}));
  EXPECT_EQ(values(fresh, shard_key(0, 0)), values(primary, shard_key(0, 0)));
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("cohort-ps-ckpt-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Partitions of `layout` with variable v's values = 10 v + row + col / 10
  // and Adagrad state = 2x that, then one step of gradient 1 everywhere.
  std::vector<std::unique_ptr<Partition>> build(const Layout& layout) {
    std::vector<std::unique_ptr<Partition>> parts;
    for (int p = 0; p < layout.partitions(); ++p) {
      parts.push_back(std::make_unique<Partition>(
          PartitionConfig{.id = p, .num_workers = 1, .optimizer = {.rule = UpdateRule::adagrad, .lr = 0.1}}));
      for (const ShardInfo& s : layout.partition_shards(p)) {
        const VariableSpec& spec = layout.variable(s.variable);
        std::vector<double> init;
        for (int64_t r = s.row_begin; r < s.row_end; ++r)
          for (int64_t c = 0; c < spec.cols; ++c) init.push_back(10.0 * s.variable + r + c / 10.0);
        parts.back()->declare(s, spec, as_bytes(init));
      }
      parts.back()->join(0, 1, 0);
    }
    return parts;
  }
  std::filesystem::path dir_;
};

TEST_F(CheckpointTest, SavedWithTwoServersLoadsWithOneAndThree) {
  const std::vector<VariableSpec> vars = {{.name = "a", .rows = 7, .cols = 3, .dtype = DType::f64},
                                          {.name = "b", .rows = 11, .cols = 1, .dtype = DType::f64}};
  PartitionOptions po{.num_shards = 2};
  const Layout two = Layout::build(vars, 2, po);
  auto saved = build(two);
  for (auto& p : saved) {
    for (const auto& [key, s] : p->shards())
      p->stage_dense(0, 0, key, as_bytes(std::vector<double>(s.values.size() / sizeof(double), 1.0)));
    p->commit(0, 0);
  }
  Manifest m{.step = 1, .rule = "adagrad", .entries = {}};
  for (int p = 0; p < 2; ++p)
    for (auto& e : save_partition(*saved[p], dir_, "part-" + std::to_string(p) + ".bin")) m.entries.push_back(e);
  write_manifest(dir_, m);

  // Every row's values and accumulator, keyed by (variable, row).
  auto rows_of = [](std::vector<std::unique_ptr<Partition>>& parts) {
    std::map<std::pair<std::string, int64_t>, std::vector<double>> out;
    for (auto& p : parts)
      for (const auto& [key, s] : p->shards()) {
        const double* v = reinterpret_cast<const double*>(s.values.data());
        const double* a = reinterpret_cast<const double*>(s.slots.at(0).data());
        for (int64_t r = 0; r < s.info.rows(); ++r)
          for (int64_t c = 0; c < s.spec.cols; ++c) {
            auto& row = out[{s.spec.name, s.info.row_begin + r}];
            row.push_back(v[r * s.spec.cols + c]);
            row.push_back(a[r * s.spec.cols + c]);
          }
      }
    return out;
  };
  const auto expected = rows_of(saved);
  for (int servers : {1, 3}) {
    const Layout layout = Layout::build(vars, servers, {.num_shards = servers == 1 ? 1 : 3});
    auto loaded = build(layout);
    const Manifest read = read_manifest(dir_);
    for (auto& p : loaded) {
      load_partition(*p, dir_, read);
      EXPECT_EQ(p->version(), 1);
      for (const auto& [key, s] : p->shards()) EXPECT_EQ(s.updates, 1);
    }
    EXPECT_EQ(rows_of(loaded), expected) << servers << " servers";
  }
}

TEST_F(CheckpointTest, CorruptOrMissingCheckpointsAreConfigErrors) {
  const Layout layout = Layout::build({{.name = "a", .rows = 4, .cols = 2, .dtype = DType::f64}}, 1, {});
  auto parts = build(layout);
  Manifest m{.step = 0, .rule = "adagrad", .entries = save_partition(*parts[0], dir_, "part-0.bin")};
  write_manifest(dir_, m);
  {
    std::fstream f(dir_ / "part-0.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(m.entries[0].offset + 3));
    f.put('\x7f');
  }
  auto fresh = build(layout);
  try {
    load_partition(*fresh[0], dir_, read_manifest(dir_));
    FAIL() << "a corrupt checkpoint loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is corrupt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_manifest((dir_ / "nowhere").string()), ConfigError);
  const Layout other = Layout::build({{.name = "a", .rows = 5, .cols = 2, .dtype = DType::f64}}, 1, {});
  auto wrong = build(other);
  EXPECT_THROW(load_partition(*wrong[0], dir_, read_manifest(dir_)), ConfigError);
}

}  // namespace
}  // namespace cohort::ps::partition_test
