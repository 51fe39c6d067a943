// The gloo communicator between real processes started the way cohortrun
// starts them (launcher variables, a TCP store with a secret, init_world
// with COHORT_BACKEND=gloo): a rank that dies mid-job is named in the
// PeerLostError of the others, within a second or two rather than at the
// timeout. The ranks are started directly, not by cohortrun, which would
// stop the survivors before they report.
#include <gtest/gtest.h>

#include <chrono>

#include "cohort/rendezvous/tcp_store.h"
#include "tests/comm/mpi_job.h"

namespace cohort::testing::gloo_process_test {
namespace {

using namespace std::chrono_literals;

TEST(GlooProcesses, ADeadRankIsNamedByTheSurvivors) {
  constexpr int n = 3;
  rendezvous::TcpStoreServer server({.host = "127.0.0.1", .port = 0, .secret = "gloo-process-test"});
  std::vector<pid_t> pids;
  std::vector<std::string> outputs(n);
  char dir_pattern[] = "/tmp/gloo_process_test.XXXXXX";
  const std::string dir = ::mkdtemp(dir_pattern);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    auto env = job_environment({{"COHORT_RANK", std::to_string(r)},
                                {"COHORT_SIZE", std::to_string(n)},
                                {"COHORT_LOCAL_RANK", std::to_string(r)},
                                {"COHORT_LOCAL_SIZE", std::to_string(n)},
                                {"COHORT_STORE_ADDR", "127.0.0.1:" + std::to_string(server.port())},
                                {"COHORT_SECRET", "gloo-process-test"},
                                {"COHORT_BACKEND", "gloo"},
                                {"COHORT_TIMEOUT_S", "60"}});
    std::vector<std::string> env_s;
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    const std::string out = dir + "/" + std::to_string(r);
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> envp;
      for (auto& s : env_s) envp.push_back(s.data());
      envp.push_back(nullptr);
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      char* argv[] = {const_cast<char*>(COHORT_LAUNCH_PROGRAM), const_cast<char*>("die"), nullptr};
      ::execve(argv[0], argv, envp.data());
      ::_exit(126);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - start > 60s) {
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], &status, 0);
        ADD_FAILURE() << "rank " << r << " hung";
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    if (WIFEXITED(status)) codes[r] = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) codes[r] = 128 + WTERMSIG(status);
    outputs[r] = read_file(dir + "/" + std::to_string(r));
    ::unlink((dir + "/" + std::to_string(r)).c_str());
  }
  ::rmdir(dir.c_str());
  EXPECT_EQ(codes[1], 7) << outputs[1];
  EXPECT_EQ(codes[0], 0) << outputs[0];
  EXPECT_EQ(codes[2], 0) << outputs[2] << " (128 + n: killed by signal n)";
  EXPECT_NE(outputs[0].find("lost rank=1: rank 1 died or became unreachable"), std::string::npos) << outputs[0];
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "survivors must not wait out the 60 s timeout";
}

}  // namespace
}  // namespace cohort::testing::gloo_process_test
