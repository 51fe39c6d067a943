// Per-rank step accounting and straggler detection with real processes:
// three ranks under cohortrun (straggler_program.cc), one slowed by a fixed
// sleep in its compute or in its input; rank 0 must name that rank and what
// it is slow at, and nobody when no rank is slow. The detection time (the
// test's clock from the slow rank's "slowdown begins" to rank 0's line) is
// printed, not asserted: these machines are shared and noisy.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include "cohort/common/json.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::testing::straggler_test {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::read_text;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/tests/torch/straggler_program";

struct Accounting {
  double step_ms = 0, compute_ms = 0, peer_wait_ms = 0, transfer_ms = 0, input_ms = 0, other_ms = 0;
};

// The last epoch's accounting line of each rank.
std::map<int, Accounting> last_accounting(const std::string& out) {
  std::map<int, Accounting> ranks;
  const std::regex line(
      R"(accounting rank (\d+) steps \d+ step_ms ([\d.]+) compute_ms ([\d.]+) peer_wait_ms ([\d.]+) transfer_ms ([\d.]+) input_ms ([\d.]+) other_ms ([\d.]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    const std::smatch& m = *it;
    ranks[std::stoi(m[1])] = {std::stod(m[2]), std::stod(m[3]), std::stod(m[4]),
                              std::stod(m[5]), std::stod(m[6]), std::stod(m[7])};
  }
  return ranks;
}

struct JobRun {
  RunResult result;
  double detection_s = -1;  // from "slowdown begins" to the straggler line; -1: not both seen
};

JobRun run_job(const std::vector<std::string>& flags) {
  TempDir dir("straggler_test");
  std::vector<std::string> args = {"-np", "3", kProgram};
  args.insert(args.end(), flags.begin(), flags.end());
  auto env = launcher::testing::clean_environment();
  env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1";
  CohortrunProcess p(kCohortrun, args, dir.path(), env);
  // Follow both files as they grow, for the detection time.
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> began, named;
  const auto deadline = Clock::now() + std::chrono::seconds(100);
  while (p.running() && Clock::now() < deadline) {
    if (!began && read_text(dir / "cohortrun.out").find("slowdown begins") != std::string::npos) began = Clock::now();
    if (!named && read_text(dir / "cohortrun.err").find("straggler: rank") != std::string::npos) named = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  JobRun run{.result = p.wait(std::chrono::seconds(10))};
  if (began && named) run.detection_s = std::chrono::duration<double>(*named - *began).count();
  return run;
}

void expect_accounting_adds_up(const std::string& out) {
  const std::map<int, Accounting> ranks = last_accounting(out);
  ASSERT_EQ(ranks.size(), 3u) << out;
  for (const auto& [rank, a] : ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    // Every rank's model sleeps 10 ms in its forward: its compute.
    EXPECT_GE(a.compute_ms, 10.0);
    // compute + peer wait + transfer + input is the step but for fit()'s
    // own bookkeeping and callbacks: a few percent at most.
    const double parts = a.compute_ms + a.peer_wait_ms + a.transfer_ms + a.input_ms;
    EXPECT_LE(a.step_ms - parts, 0.05 * a.step_ms) << "step " << a.step_ms << " ms, parts " << parts << " ms";
    EXPECT_NEAR(parts + a.other_ms, a.step_ms, 1e-3 * a.step_ms);
  }
}

// Rank 0's line names `rank` and what it is slow at, and no other rank.
void expect_named_alone(const std::string& err, int rank, const std::string& cause) {
  EXPECT_TRUE(std::regex_search(
      err, std::regex("cohort: straggler: rank " + std::to_string(rank) +
                      R"( \(pid \d+ on [^)]+\) is \d+% slower than the median of the others at )" + cause)))
      << err;
  for (int other = 0; other < 3; ++other) {
    if (other != rank) {
      EXPECT_EQ(err.find("straggler: rank " + std::to_string(other)), std::string::npos) << err;
    }
  }
}

TEST(Straggler, ASlowComputeIsNamedWithItsRankAndCause) {
  const JobRun run = run_job({"--slow-rank", "1", "--slow", "compute", "--slow-ms", "10"});
  ASSERT_TRUE(run.result.finished && run.result.exit_code == 0) << run.result.out << run.result.err;
  expect_named_alone(run.result.err, 1, "compute");
  // The epoch logs carry it too, once the slowdown runs through an epoch.
  EXPECT_NE(run.result.out.find("epoch 2 slowest_rank 1 share"), std::string::npos) << run.result.out;
  const std::map<int, Accounting> ranks = last_accounting(run.result.out);
  ASSERT_EQ(ranks.size(), 3u);
  // The slow rank computes 20 ms a step; the others wait for it.
  EXPECT_GE(ranks.at(1).compute_ms, 20.0);
  EXPECT_GT(ranks.at(0).peer_wait_ms, ranks.at(1).peer_wait_ms);
  EXPECT_GT(ranks.at(2).peer_wait_ms, ranks.at(1).peer_wait_ms);
  expect_accounting_adds_up(run.result.out);
  std::printf("compute straggler named %.2f s after its slowdown began\n", run.detection_s);
}

TEST(Straggler, ASlowInputIsNamedAsInput) {
  const JobRun run = run_job({"--slow-rank", "2", "--slow", "input", "--slow-ms", "10"});
  ASSERT_TRUE(run.result.finished && run.result.exit_code == 0) << run.result.out << run.result.err;
  expect_named_alone(run.result.err, 2, "input");
  const std::map<int, Accounting> ranks = last_accounting(run.result.out);
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_GE(ranks.at(2).input_ms, 10.0);
  expect_accounting_adds_up(run.result.out);
  std::printf("input straggler named %.2f s after its slowdown began\n", run.detection_s);
}

TEST(Straggler, NoSlowRankNoLine) {
  // 20 ms of compute a step: a rank that the machine's other load delays
  // by a few ms stays well under the 20% threshold.
  const JobRun run = run_job({"--steps", "150", "--base-ms", "20"});
  ASSERT_TRUE(run.result.finished && run.result.exit_code == 0) << run.result.out << run.result.err;
  EXPECT_EQ(run.result.err.find("straggler:"), std::string::npos) << run.result.err;
  expect_accounting_adds_up(run.result.out);
}

// A TCP port nothing listens on now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Outside cohortrun (here torchrun's variables, set by hand as torchrun
// would), COHORT_DASHBOARD makes rank 0 serve the dashboard over the store
// it hosts: /api/status shows both ranks stepping.
TEST(Straggler, RankZeroServesTheDashboardUnderTorchrun) {
  TempDir dir("dashboard_torchrun");
  const int store_port = free_port(), dashboard_port = free_port();
  std::vector<std::unique_ptr<CohortrunProcess>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto env = launcher::testing::clean_environment();
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1";
    env["RANK"] = env["LOCAL_RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = env["LOCAL_WORLD_SIZE"] = "2";
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(store_port);
    env["COHORT_DASHBOARD"] = "127.0.0.1:" + std::to_string(dashboard_port);
    const std::string rank_dir = dir / ("rank" + std::to_string(r));
    std::filesystem::create_directories(rank_dir);
    ranks.push_back(
        std::make_unique<CohortrunProcess>(kProgram, std::vector<std::string>{"--steps", "300"}, rank_dir, env));
  }
  httplib::Client client("127.0.0.1", dashboard_port);
  bool both_stepping = false;
  std::string last;
  for (int i = 0; i < 600 && !both_stepping && ranks[0]->running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto response = client.Get("/api/status");
    if (!response || response->status != 200) continue;
    last = response->body;
    const json::Value status = json::parse(last, "/api/status");
    int stepping = 0;
    for (const json::Value& rank : status.at("ranks").items())
      if (!rank.at("sample").is_null() && rank.at("sample").at("step").number() > 0) ++stepping;
    both_stepping = status.at("state").string() == "running" && stepping == 2 && !status.at("job").is_null();
  }
  EXPECT_TRUE(both_stepping) << last;
  for (auto& rank : ranks) {
    const RunResult r = rank->wait(std::chrono::seconds(60));
    EXPECT_TRUE(r.finished && r.exit_code == 0) << r.out << r.err;
  }
  EXPECT_NE(read_text(dir / "rank0/cohortrun.err")
                .find("cohort: dashboard at http://127.0.0.1:" + std::to_string(dashboard_port)),
            std::string::npos)
      << read_text(dir / "rank0/cohortrun.err");
  EXPECT_EQ(read_text(dir / "rank1/cohortrun.err").find("dashboard at"), std::string::npos) << "only rank 0 serves";
}

}  // namespace
}  // namespace cohort::testing::straggler_test
