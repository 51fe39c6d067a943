// Parameter-server jobs as real processes (ps_rank_program): a worker killed
// mid-step, a server killed and restored from its replica or from a
// checkpoint, and checkpoints reloaded with a different number of servers.
// The final parameters are compared with the single-process reference of
// exactly the steps and workers that the rules say count (for a restore from
// a checkpoint: with the restored partition's rows taken back to it).
#include <gtest/gtest.h>

#include "cohort/parameter_server/layout.h"
#include "tests/parameter_server/ps_job_checks.h"
#include "tests/parameter_server/train_loop.h"

namespace cohort::ps::process_test {
namespace {

namespace fs = std::filesystem;
using testing::all_of;
using testing::PsJob;

class ProcessJob : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cohort-ps-proc-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job_ = std::make_unique<PsJob>(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  testing::Outcome launch(int n, std::vector<std::string> args) { return job_->launch(n, std::move(args)); }
  void expect_reference(int worker, const testing::ReferenceResult& r) { testing::expect_reference(*job_, worker, r); }
  static void expect_exit(const testing::Outcome& o, int rank, int code) { testing::expect_exit(o, rank, code); }
  static void expect_killed(const testing::Outcome& o, int rank) { testing::expect_killed(o, rank); }

  fs::path dir_;
  std::unique_ptr<PsJob> job_;
};

TEST_F(ProcessJob, WorkerKilledMidStepIsDiscardedAndTheOthersFinish) {
  // 3 workers, 1 server; worker 2 dies after pushing step 5, before its commit.
  const testing::Outcome o = launch(4, {"servers=1", "steps=12", "rule=sgd", "lr=0.2", "die_worker=2", "die_step=5"});
  expect_exit(o, 0, 0);
  expect_exit(o, 1, 0);
  expect_killed(o, 2);
  expect_exit(o, 3, 0);
  EXPECT_NE(o.output[3].find("worker 2 was silent"), std::string::npos) << o.output[3];
  const testing::Problem p;
  const auto expected = testing::reference_run(p, {.rule = "sgd", .lr = 0.2}, 12, [](int64_t s) {
    return s < 5 ? all_of(3) : std::vector<int>{0, 1};
  });
  expect_reference(0, expected);
  expect_reference(1, expected);
}

TEST_F(ProcessJob, ServerKilledIsRestoredFromItsReplicaWithNothingLost) {
  // 3 workers, 2 servers with replicas; server 1 is killed at step 4.
  const testing::Outcome o = launch(5, {"servers=2", "replicas=1", "steps=12", "rule=adam", "lr=0.05", "kill_server=1",
                               "kill_step=4"});
  for (int r : {0, 1, 2, 3}) expect_exit(o, r, 0);
  expect_killed(o, 4);
  EXPECT_NE(o.output[3].find("took over partition 1 of lost server 1 from its replica"), std::string::npos)
      << o.output[3];
  EXPECT_NE(o.output[3].find("0 update(s) since then are lost"), std::string::npos) << o.output[3];
  const testing::Problem p;
  const auto expected = testing::reference_run(p, {.rule = "adam", .lr = 0.05}, 12, [](int64_t) { return all_of(3); });
  for (int k = 0; k < 3; ++k) expect_reference(k, expected);
}

TEST_F(ProcessJob, CheckpointSavedWithTwoServersContinuesWithOneAndThree) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const testing::Outcome first = launch(4, {"servers=2", "steps=6", "rule=adam", "lr=0.05", "save=" + ckpt});
  for (int r = 0; r < 4; ++r) expect_exit(first, r, 0);
  const testing::Problem p;
  const auto expected = testing::reference_run(p, {.rule = "adam", .lr = 0.05}, 12, [](int64_t) { return all_of(2); });
  for (int servers : {1, 3}) {
    const testing::Outcome o = launch(2 + servers, {"servers=" + std::to_string(servers), "shards=" + std::to_string(servers),
                                           "steps=12", "rule=adam", "lr=0.05", "load=" + ckpt});
    for (int r = 0; r < 2 + servers; ++r) expect_exit(o, r, 0);
    expect_reference(0, expected);
    expect_reference(1, expected);
  }
}

TEST_F(ProcessJob, ServerKilledWithoutReplicaIsRestoredFromTheCheckpointAndTheLossIsStated) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const testing::Outcome first = launch(4, {"servers=2", "steps=6", "rule=sgd", "save=" + ckpt});
  for (int r = 0; r < 4; ++r) expect_exit(first, r, 0);
  const testing::Outcome o = launch(4, {"servers=2", "steps=12", "rule=sgd", "load=" + ckpt, "checkpoint_dir=" + ckpt,
                               "kill_server=1", "kill_step=9"});
  for (int r : {0, 1, 2}) expect_exit(o, r, 0);
  expect_killed(o, 3);
  // Partition 1 restarts from step 6; the workers had seen step 9.
  EXPECT_NE(o.output[2].find("from the checkpoint " + ckpt + " at version 6; the workers had seen version 9: 3 "
                             "update(s) since then are lost"),
            std::string::npos)
      << o.output[2];

  // The values: partition 1's rows go back to their values after step 6
  // (the checkpoint) and take step 9's update from there, whose gradients
  // the workers computed before the loss (ps_rank_program kills once every
  // worker has pulled step 9); partition 0 loses nothing.
  const testing::Problem p;
  const Layout layout = Layout::build(testing::problem_variables(p), 2, {.num_shards = 2});
  const std::vector<ShardInfo> lost = layout.partition_shards(1);
  ASSERT_FALSE(lost.empty());
  testing::ReferenceResult at_checkpoint;
  const auto expected = testing::reference_run(
      p, {.rule = "sgd"}, 12, [](int64_t) { return all_of(2); },
      [&](int64_t s, testing::ReferenceResult& r) {
        if (s == 6) at_checkpoint = r;
        if (s != 9) return;
        for (const ShardInfo& shard : lost) {
          const VariableSpec& v = layout.variable(shard.variable);
          std::vector<double>& now = v.name == "w" ? r.w : r.emb;
          const std::vector<double>& then = v.name == "w" ? at_checkpoint.w : at_checkpoint.emb;
          std::copy(then.begin() + shard.row_begin * v.cols, then.begin() + shard.row_end * v.cols,
                    now.begin() + shard.row_begin * v.cols);
        }
      });
  expect_reference(0, expected);
  expect_reference(1, expected);
  // The lost updates matter: a restore that lost none would not match.
  const auto uninterrupted = testing::reference_run(p, {.rule = "sgd"}, 12, [](int64_t) { return all_of(2); });
  EXPECT_GT(testing::worst_difference(testing::flat(expected), uninterrupted), 1e-6);
}

TEST_F(ProcessJob, BadSpecsAreOneLineErrors) {
  const testing::Outcome o = launch(2, {"servers=2"});
  for (int r = 0; r < 2; ++r) {
    expect_exit(o, r, 1);
    EXPECT_NE(o.output[r].find("servers=2 needs 1 <= servers < ranks (2 ranks)"), std::string::npos) << o.output[r];
  }
}

}  // namespace
}  // namespace cohort::ps::process_test
