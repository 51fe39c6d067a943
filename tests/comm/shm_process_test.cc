// The shm communicator between real processes: ranks started the way
// cohortrun starts them (launcher variables, TCP store with a secret), ranks
// killed or stopped mid-job, peers that leave, a rank whose peers never start,
// and no segment left in /dev/shm afterwards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cohort/rendezvous/tcp_store.h"
#include "tests/comm/rank_threads.h"

extern char** environ;

namespace cohort::testing::shm_process_test {
namespace {

using namespace std::chrono_literals;
using cohort::testing::shm_segments_of;

struct LaunchOptions {
  std::vector<int> ranks;        // the ranks to start; empty: all
  std::vector<std::string> env;  // extra KEY=VALUE for every rank
  int stopped = -1;              // a rank that stops itself: killed once the others have ended
};

struct Outcome {
  std::vector<int> status;          // raw wait status per rank, -1 when not started
  std::vector<std::string> output;  // its stdout and stderr
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits for `pid` until `deadline`; SIGKILLs it past the deadline when
// `kill_late` (and reports a hang), else returns -1 without reaping.
int wait_for(pid_t pid, std::chrono::steady_clock::time_point deadline, bool kill_late) {
  int status = -1;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      if (!kill_late) return -1;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "rank process " << pid << " hung";
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  return status;
}

Outcome launch(int n, const std::string& job, std::vector<std::string> args, LaunchOptions opt = {}) {
  if (opt.ranks.empty())
    for (int r = 0; r < n; ++r) opt.ranks.push_back(r);
  cohort::rendezvous::TcpStoreServer server({.host = "127.0.0.1", .port = 0, .secret = "s3cret-" + job});
  const std::string dir = ::testing::TempDir() + "/" + job;
  std::filesystem::create_directories(dir);
  std::vector<pid_t> pids(n, -1);
  for (int r : opt.ranks) {
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
    env.insert(env.end(), opt.env.begin(), opt.env.end());
    std::vector<std::string> argv_s{COHORT_RANK_PROGRAM};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    const std::string log = dir + "/rank" + std::to_string(r) + ".log";
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    EXPECT_EQ(posix_spawn(&pids[r], argv[0], &files, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&files);
  }
  Outcome out{std::vector<int>(n, -1), std::vector<std::string>(n)};
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (int r : opt.ranks)
    if (r != opt.stopped) out.status[r] = wait_for(pids[r], deadline, true);
  if (opt.stopped >= 0) {
    // It must still be there, stopped: the others raised without it.
    EXPECT_EQ(wait_for(pids[opt.stopped], std::chrono::steady_clock::now(), false), -1)
        << "rank " << opt.stopped << " ended by itself";
    kill(pids[opt.stopped], SIGKILL);
    waitpid(pids[opt.stopped], &out.status[opt.stopped], 0);
  }
  for (int r : opt.ranks) out.output[r] = read_file(dir + "/rank" + std::to_string(r) + ".log");
  std::filesystem::remove_all(dir);
  return out;
}

void expect_exited_zero(const Outcome& o, int r) {
  ASSERT_TRUE(WIFEXITED(o.status[r])) << "rank " << r << ":\n" << o.output[r];
  EXPECT_EQ(WEXITSTATUS(o.status[r]), 0) << "rank " << r << ":\n" << o.output[r];
}

std::string job_name(const std::string& what) { return what + std::to_string(getpid()); }

class Processes : public ::testing::TestWithParam<int> {};

TEST_P(Processes, CollectivesAcrossProcesses) {
  const int n = GetParam();
  const std::string job = job_name("ptest") + "n" + std::to_string(n);
  const Outcome o = launch(n, job, {"collectives"});
  for (int r = 0; r < n; ++r) expect_exited_zero(o, r);
  EXPECT_TRUE(shm_segments_of(job).empty());
}

INSTANTIATE_TEST_SUITE_P(Shm, Processes, ::testing::Values(2, 3, 4, 8));

// Every survivor names the dead rank: rank() and message, whichever of them
// found the death first.
TEST(ProcessFailures, KilledRankIsNamedByEveryOtherRank) {
  for (int victim : {0, 2}) {
    const std::string job = job_name("pdie") + "v" + std::to_string(victim);
    const Outcome o = launch(4, job, {"die", std::to_string(victim)});
    for (int r = 0; r < 4; ++r) {
      if (r == victim) {
        ASSERT_TRUE(WIFSIGNALED(o.status[r]));
        EXPECT_EQ(WTERMSIG(o.status[r]), SIGKILL);
      } else {
        expect_exited_zero(o, r);
      }
    }
    EXPECT_TRUE(shm_segments_of(job).empty()) << "segment leaked after a crash";
  }
}

// A rank whose part of the last collective is done and that exits is no
// failure for a rank still finishing that collective.
TEST(ProcessFailures, APeerThatExitsAfterItsLastStepFailsNoOne) {
  const std::string job = job_name("pleave");
  const Outcome o = launch(3, job, {"leave-early"}, {.env = {"COHORT_PEER_CHECK_MS=20"}});
  for (int r = 0; r < 3; ++r) expect_exited_zero(o, r);
  EXPECT_TRUE(shm_segments_of(job).empty());
}

// A rank killed after claiming the abort record, before writing it: the
// others name it instead of waiting for the record forever.
TEST(ProcessFailures, ARankKilledWhileRecordingAFailureIsNamed) {
  const std::string job = job_name("precord");
  const Outcome o = launch(3, job, {"die-recording", "1", "kill"});
  ASSERT_TRUE(WIFSIGNALED(o.status[1])) << o.output[1];
  EXPECT_EQ(WTERMSIG(o.status[1]), SIGKILL);
  for (int r : {0, 2}) expect_exited_zero(o, r);
  EXPECT_TRUE(shm_segments_of(job).empty());
}

// The same with a claimer that stops instead: alive, but it will never
// write; the others name it after a bounded wait.
TEST(ProcessFailures, ARankStoppedWhileRecordingAFailureIsNamed) {
  const std::string job = job_name("pstop");
  const Outcome o = launch(3, job, {"die-recording", "1", "stop"}, {.stopped = 1});
  for (int r : {0, 2}) expect_exited_zero(o, r);
  EXPECT_TRUE(shm_segments_of(job).empty());
}

// Rank 0 started alone: it names the ranks that never joined, and although
// nothing catches the error (the program ends by std::terminate, without
// unwinding), no segment is left in /dev/shm.
TEST(ProcessFailures, ALoneRankNamesTheMissingRanksAndLeavesNoSegment) {
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  const std::string job = job_name("plone");
  const Outcome o = launch(4, job, {"lone"}, {.ranks = {0}, .env = {"COHORT_TIMEOUT_S=1"}});
  ASSERT_TRUE(WIFSIGNALED(o.status[0])) << o.output[0];
  EXPECT_EQ(WTERMSIG(o.status[0]), SIGABRT);
  EXPECT_NE(o.output[0].find("ranks 1, 2, 3 of 4 never joined within 1 s"), std::string::npos) << o.output[0];
  EXPECT_TRUE(shm_segments_of(job).empty()) << "a lone rank left its segment";
}

}  // namespace
}  // namespace cohort::testing::shm_process_test
