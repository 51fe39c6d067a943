// Parameter-server jobs as real processes (ps_rank_program): a worker killed
// mid-step, a server killed and restored from its replica or from a
// checkpoint, and checkpoints reloaded with a different number of servers.
// The final parameters are compared with the single-process reference of
// exactly the steps and workers that the rules say count.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cohort/rendezvous/tcp_store.h"
#include "tests/parameter_server/problem.h"

extern char** environ;

namespace cohort::ps {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Outcome {
  std::vector<int> status;
  std::vector<std::string> output;
};

class ProcessJob : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cohort-ps-proc-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome launch(int n, std::vector<std::string> args) {
    const int run = runs_++;
    const std::string job = "pst" + std::to_string(::getpid()) + "x" + std::to_string(run);
    const std::string secret = "secret-" + job;
    rendezvous::TcpStoreServer server({.host = "127.0.0.1", .port = 0, .secret = secret});
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> env;
      for (char** e = environ; *e; ++e) env.emplace_back(*e);
      for (auto kv : {std::pair<std::string, std::string>{"COHORT_RANK", std::to_string(r)},
                      {"COHORT_SIZE", std::to_string(n)},
                      {"COHORT_LOCAL_RANK", std::to_string(r)},
                      {"COHORT_LOCAL_SIZE", std::to_string(n)},
                      {"COHORT_STORE_ADDR", "127.0.0.1:" + std::to_string(server.port())},
                      {"COHORT_JOB_ID", job},
                      {"COHORT_SECRET", secret},
                      {"COHORT_PS_WORKER_TIMEOUT_S", "2"},
                      {"COHORT_PS_HEARTBEAT_MS", "200"},
                      {"COHORT_LOG_LEVEL", "warn"}})
        env.push_back(kv.first + "=" + kv.second);
      std::vector<std::string> argv_s{PS_RANK_PROGRAM};
      argv_s.insert(argv_s.end(), args.begin(), args.end());
      argv_s.push_back("result=" + (dir_ / ("result" + std::to_string(run))).string());
      std::vector<char*> argv, envp;
      for (auto& s : argv_s) argv.push_back(s.data());
      argv.push_back(nullptr);
      for (auto& s : env) envp.push_back(s.data());
      envp.push_back(nullptr);
      const std::string log = (dir_ / ("rank" + std::to_string(r) + ".log")).string();
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
      pid_t pid;
      EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()), 0);
      posix_spawn_file_actions_destroy(&actions);
      pids.push_back(pid);
    }
    Outcome out;
    const auto deadline = std::chrono::steady_clock::now() + 90s;
    for (pid_t pid : pids) {
      int status = -1;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          ADD_FAILURE() << "rank process " << pid << " hung";
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
      out.status.push_back(status);
    }
    for (int r = 0; r < n; ++r) {
      std::ifstream in(dir_ / ("rank" + std::to_string(r) + ".log"));
      std::stringstream s;
      s << in.rdbuf();
      out.output.push_back(s.str());
    }
    return out;
  }

  std::vector<double> result(int worker) {
    std::ifstream in(dir_ / ("result" + std::to_string(runs_ - 1) + "." + std::to_string(worker)));
    std::vector<double> v;
    for (double x; in >> x;) v.push_back(x);
    return v;
  }

  static void expect_exit(const Outcome& o, int rank, int code) {
    ASSERT_TRUE(WIFEXITED(o.status[rank])) << "rank " << rank << ":\n" << o.output[rank];
    EXPECT_EQ(WEXITSTATUS(o.status[rank]), code) << "rank " << rank << ":\n" << o.output[rank];
  }
  static void expect_killed(const Outcome& o, int rank) {
    ASSERT_TRUE(WIFSIGNALED(o.status[rank])) << "rank " << rank << ":\n" << o.output[rank];
    EXPECT_EQ(WTERMSIG(o.status[rank]), SIGKILL);
  }

  void expect_reference(int worker, const testing::ReferenceResult& r) {
    const std::vector<double> got = result(worker);
    ASSERT_EQ(got.size(), r.w.size() + r.emb.size()) << "worker " << worker;
    double worst = 0;
    for (size_t i = 0; i < r.w.size(); ++i) worst = std::max(worst, std::abs(got[i] - r.w[i]));
    for (size_t i = 0; i < r.emb.size(); ++i) worst = std::max(worst, std::abs(got[r.w.size() + i] - r.emb[i]));
    EXPECT_LE(worst, 1e-12) << "worker " << worker;
  }

  fs::path dir_;
  int runs_ = 0;
};

std::vector<int> all_of(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST_F(ProcessJob, WorkerKilledMidStepIsDiscardedAndTheOthersFinish) {
  // 3 workers, 1 server; worker 2 dies after pushing step 5, before its commit.
  const Outcome o = launch(4, {"servers=1", "steps=12", "rule=sgd", "lr=0.2", "die_worker=2", "die_step=5"});
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
  const Outcome o = launch(5, {"servers=2", "replicas=1", "steps=12", "rule=adam", "lr=0.05", "kill_server=1",
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
  const Outcome first = launch(4, {"servers=2", "steps=6", "rule=adam", "lr=0.05", "save=" + ckpt});
  for (int r = 0; r < 4; ++r) expect_exit(first, r, 0);
  const testing::Problem p;
  const auto expected = testing::reference_run(p, {.rule = "adam", .lr = 0.05}, 12, [](int64_t) { return all_of(2); });
  for (int servers : {1, 3}) {
    const Outcome o = launch(2 + servers, {"servers=" + std::to_string(servers), "shards=" + std::to_string(servers),
                                           "steps=12", "rule=adam", "lr=0.05", "load=" + ckpt});
    for (int r = 0; r < 2 + servers; ++r) expect_exit(o, r, 0);
    expect_reference(0, expected);
    expect_reference(1, expected);
  }
}

TEST_F(ProcessJob, ServerKilledWithoutReplicaIsRestoredFromTheCheckpointAndTheLossIsStated) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const Outcome first = launch(4, {"servers=2", "steps=6", "rule=sgd", "save=" + ckpt});
  for (int r = 0; r < 4; ++r) expect_exit(first, r, 0);
  const Outcome o = launch(4, {"servers=2", "steps=12", "rule=sgd", "load=" + ckpt, "checkpoint_dir=" + ckpt,
                               "kill_server=1", "kill_step=9"});
  for (int r : {0, 1, 2}) expect_exit(o, r, 0);
  expect_killed(o, 3);
  // Partition 1 restarts from step 6; the workers had seen step 9.
  EXPECT_NE(o.output[2].find("from the checkpoint " + ckpt + " at version 6; the workers had seen version 9: 3 "
                             "update(s) since then are lost"),
            std::string::npos)
      << o.output[2];
}

TEST_F(ProcessJob, BadSpecsAreOneLineErrors) {
  const Outcome o = launch(2, {"servers=2"});
  for (int r = 0; r < 2; ++r) {
    expect_exit(o, r, 1);
    EXPECT_NE(o.output[r].find("servers=2 needs 1 <= servers < ranks (2 ranks)"), std::string::npos) << o.output[r];
  }
}

}  // namespace
}  // namespace cohort::ps
