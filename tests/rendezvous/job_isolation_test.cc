// Jobs of real processes started by hand with torchrun's variables, as a new
// user would: a second job on the same store address must be refused without
// disturbing the first, and a rank stalled on an op its peer never submits
// must be ended by COHORT_TIMEOUT_S.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cohort/rendezvous/tcp_store.h"
#include "test_util.h"

extern char** environ;

namespace cohort::rendezvous::job_isolation_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// One rank: rendezvous_job_program with `variables` on top of this
// process's environment (without any launcher's or cohort's variables), its
// output in files.
class Rank {
 public:
  Rank(const std::string& dir, const std::string& name, const std::map<std::string, std::string>& variables,
       std::vector<std::string> args)
      : out_(dir + "/" + name + ".out"), err_(dir + "/" + name + ".err") {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      const std::string key = entry.substr(0, entry.find('='));
      const bool launcher = key.starts_with("COHORT_") || key == "RANK" || key == "WORLD_SIZE" ||
                            key.starts_with("LOCAL_") || key.starts_with("MASTER_") ||
                            key.starts_with("TORCHELASTIC_") || key.starts_with("OMPI_") ||
                            key.starts_with("PMIX_") || key.starts_with("SLURM_");
      if (!launcher) env.push_back(entry);
    }
    for (const auto& [k, v] : variables) env.push_back(k + "=" + v);
    args.insert(args.begin(), JOB_PROGRAM_PATH);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Rank() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Its exit code, or nullopt (and killed) when it has not ended by `deadline`
  // or died by a signal.
  std::optional<int> wait(Clock::time_point deadline) {
    while (!status_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        break;
      }
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "pid " << pid_ << " did not end in time; its stderr:\n" << err();
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        status_ = status;
        return std::nullopt;
      }
      std::this_thread::sleep_for(10ms);
    }
    if (!WIFEXITED(*status_)) return std::nullopt;
    return WEXITSTATUS(*status_);
  }

  // Waits until its standard output holds `text`.
  bool wait_for_output(const std::string& text, Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      if (out().find(text) != std::string::npos) return true;
      int status = 0;
      if (!status_ && ::waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
      if (status_) return out().find(text) != std::string::npos;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  std::string out() const { return read_text(out_); }
  std::string err() const { return read_text(err_); }

 private:
  std::string out_, err_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A port nothing listens on now.
int free_port() {
  TcpStoreServer probe(TcpStoreServerOptions{.host = "127.0.0.1", .port = 0, .secret = "probe"});
  return probe.port();
}

// torchrun's variables for rank `rank` of 2 on this host, no secret.
std::map<std::string, std::string> torchrun(int rank, int port, std::map<std::string, std::string> extra = {}) {
  std::map<std::string, std::string> v{{"RANK", std::to_string(rank)},
                                       {"WORLD_SIZE", "2"},
                                       {"LOCAL_RANK", std::to_string(rank)},
                                       {"LOCAL_WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"MASTER_PORT", std::to_string(port)},
                                       {"COHORT_TIMEOUT_S", "60"}};
  for (auto& [k, value] : extra) v[k] = value;
  return v;
}

constexpr const char* kSteps = "30";
constexpr const char* kSleepMs = "100";  // the first job runs about 3 s

class JobIsolation : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(JobIsolation, SecondJobOnTheSameStoreAddressIsRefusedAndTheFirstFinishes) {
  const int port = free_port();
  const auto deadline = Clock::now() + 90s;
  Rank a0(dir_.path(), "a0", torchrun(0, port), {kSteps, kSleepMs});
  Rank a1(dir_.path(), "a1", torchrun(1, port), {kSteps, kSleepMs});
  ASSERT_TRUE(a0.wait_for_output("joined", deadline)) << a0.err();
  ASSERT_TRUE(a1.wait_for_output("joined", deadline)) << a1.err();
  // The same job id (both derive it from the store address), the same seats.
  Rank b1(dir_.path(), "b1", torchrun(1, port), {kSteps, kSleepMs});
  Rank b0(dir_.path(), "b0", torchrun(0, port), {kSteps, kSleepMs});
  EXPECT_EQ(b1.wait(deadline), 10) << b1.err();
  EXPECT_NE(b1.err().find("rank 1 of job '127.0.0.1-" + std::to_string(port) + "' is already taken by"),
            std::string::npos)
      << b1.err();
  EXPECT_EQ(b0.wait(deadline), 10) << b0.err();
  EXPECT_NE(b0.err().find("Address already in use"), std::string::npos) << b0.err();
  EXPECT_EQ(a0.wait(deadline), 0) << a0.err();
  EXPECT_EQ(a1.wait(deadline), 0) << a1.err();
  EXPECT_NE(a0.out().find("finished"), std::string::npos);
  // MASTER_ADDR=127.0.0.1: rank 0 served the store on loopback only.
  EXPECT_NE(a0.err().find("store server on 127.0.0.1:" + std::to_string(port)), std::string::npos) << a0.err();
  EXPECT_NE(a1.out().find("finished"), std::string::npos);
}

TEST_F(JobIsolation, RankOfAnotherJobIsRefusedEvenBeforeTheSeatIsTaken) {
  const int port = free_port();
  const auto deadline = Clock::now() + 90s;
  Rank a0(dir_.path(), "a0", torchrun(0, port, {{"TORCHELASTIC_RUN_ID", "jobA"}}), {kSteps, kSleepMs});
  {
    // Until rank 0 has registered job A, nothing is decided.
    TcpStore watcher(TcpStoreOptions{.host = "127.0.0.1", .port = port, .secret = "", .connect_timeout = 30s});
    watcher.wait(std::vector<std::string>{"cohort/job"}, 30s);
  }
  Rank b1(dir_.path(), "b1", torchrun(1, port, {{"TORCHELASTIC_RUN_ID", "jobB"}}), {kSteps, kSleepMs});
  EXPECT_EQ(b1.wait(deadline), 10) << b1.err();
  EXPECT_NE(b1.err().find("belongs to job 'jobA of 2 ranks'"), std::string::npos) << b1.err();
  Rank a1(dir_.path(), "a1", torchrun(1, port, {{"TORCHELASTIC_RUN_ID", "jobA"}}), {kSteps, kSleepMs});
  EXPECT_EQ(a0.wait(deadline), 0) << a0.err();
  EXPECT_EQ(a1.wait(deadline), 0) << a1.err();
}

TEST_F(JobIsolation, StallIsEndedByTheTimeout) {
  // Rank 1 submits an op rank 0 never does: nothing fails in the
  // communicator, only the stall shutdown (COHORT_TIMEOUT_S by default) ends it.
  const int port = free_port();
  const auto deadline = Clock::now() + 90s;
  const std::map<std::string, std::string> timeouts{{"COHORT_TIMEOUT_S", "3"}, {"COHORT_STALL_WARNING_S", "1"}};
  Rank r0(dir_.path(), "r0", torchrun(0, port, timeouts), {"1", "0", "step"});
  Rank r1(dir_.path(), "r1", torchrun(1, port, timeouts), {"1", "0", "other"});
  EXPECT_EQ(r0.wait(deadline), 13) << r0.err();  // TimeoutError
  EXPECT_NE(r0.err().find("stall shutdown after 3 s"), std::string::npos) << r0.err();
  // The warning came first, naming the missing rank.
  EXPECT_NE(r0.err().find("stall: some ranks have waited more than 1 s"), std::string::npos) << r0.err();
  EXPECT_NE(r0.err().find("'step': missing rank 1"), std::string::npos) << r0.err();
  // Rank 1 fails too: with the stall report, or, when rank 0 (which serves
  // the store) has already exited, with the lost store.
  const std::optional<int> code = r1.wait(deadline);
  EXPECT_TRUE(code == 13 || code == 11) << r1.err();
}

}  // namespace
}  // namespace cohort::rendezvous::job_isolation_test
