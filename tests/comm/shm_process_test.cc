// The shm communicator between real processes: ranks started the way
// cohortrun starts them (launcher variables, TCP store with a secret), a
// rank killed mid-job, and no segment left in /dev/shm afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cohort/rendezvous/tcp_store.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::vector<int> status;  // raw wait status per rank
};

std::vector<std::string> leftover_segments(const std::string& job) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("cohort-" + job, 0) == 0) found.push_back(e.path());
  return found;
}

Outcome launch(int n, const std::string& job, std::vector<std::string> args) {
  cohort::rendezvous::TcpStoreServer server({.host = "127.0.0.1", .port = 0, .secret = "s3cret-" + job});
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
                    {"COHORT_SECRET", "s3cret-" + job}})
      env.push_back(kv.first + "=" + kv.second);
    std::vector<std::string> argv_s{COHORT_RANK_PROGRAM};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid;
    EXPECT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  Outcome out;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (pid_t pid : pids) {
    int status = -1;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "rank process " << pid << " hung";
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    out.status.push_back(status);
  }
  return out;
}

class Processes : public ::testing::TestWithParam<int> {};

TEST_P(Processes, CollectivesAcrossProcesses) {
  const int n = GetParam();
  const std::string job = "ptest" + std::to_string(getpid()) + "n" + std::to_string(n);
  const Outcome o = launch(n, job, {"collectives"});
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(WIFEXITED(o.status[r])) << "rank " << r;
    EXPECT_EQ(WEXITSTATUS(o.status[r]), 0) << "rank " << r;
  }
  EXPECT_TRUE(leftover_segments(job).empty());
}

INSTANTIATE_TEST_SUITE_P(Shm, Processes, ::testing::Values(2, 3, 4, 8));

TEST(ProcessFailures, KilledRankIsNamedByEveryOtherRankWithinFiveSeconds) {
  for (int victim : {0, 2}) {
    const std::string job = "pdie" + std::to_string(getpid()) + "v" + std::to_string(victim);
    const Outcome o = launch(4, job, {"die", std::to_string(victim)});
    for (int r = 0; r < 4; ++r) {
      if (r == victim) {
        ASSERT_TRUE(WIFSIGNALED(o.status[r]));
        EXPECT_EQ(WTERMSIG(o.status[r]), SIGKILL);
      } else {
        ASSERT_TRUE(WIFEXITED(o.status[r])) << "rank " << r;
        EXPECT_EQ(WEXITSTATUS(o.status[r]), 0) << "rank " << r << " did not raise PeerLostError naming "
                                               << victim << " in time";
      }
    }
    EXPECT_TRUE(leftover_segments(job).empty()) << "segment leaked after a crash";
  }
}

}  // namespace
