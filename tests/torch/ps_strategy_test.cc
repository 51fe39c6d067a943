// The parameter_server strategy against synchronous data parallelism, with
// real processes under cohortrun (ps_strategy_program): fit() on 2 workers
// and 1 server at staleness=0 ends with the parameters multi_worker (DDP)
// reaches on 2 ranks, float64, with the program's optimizer (the servers
// sum) and with the servers' own SGD and Adam; both workers agree; the
// evaluation after training reads the servers' values. The server rank's
// program serves (is_server(), serve()) and goes on after it, its strategy
// destroyed, to exit 0; with serve_and_exit=true the strategy's constructor
// serves and exits 0 instead (the program's line never comes). Bad specs
// are one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include "cohort/common/error.h"
#include "cohort/torch/strategy/make_strategy.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::testing {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::read_text;
using launcher::testing::RunResult;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/tests/torch/ps_strategy_program";

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/cohort_ps_strategy.XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<double> parameters(const std::string& bytes) {
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  return v;
}

// Runs the program on `ranks` ranks; returns its output (chief's summary line).
std::string run(const TempDir& dir, const std::string& name, int ranks, const std::string& spec,
                const std::string& optimizer, std::vector<std::string> extra = {},
                std::map<std::string, std::string> env = {}) {
  const std::string out_dir = dir.path() + "/" + name;
  std::filesystem::create_directories(out_dir);
  std::vector<std::string> args = {"-np", std::to_string(ranks), kProgram, "--strategy", spec,
                                   "--out", out_dir + "/params", "--optimizer", optimizer};
  args.insert(args.end(), extra.begin(), extra.end());
  if (!env.empty()) env.merge(launcher::testing::clean_environment());
  CohortrunProcess p(kCohortrun, args, out_dir, env);
  const RunResult r = p.wait(std::chrono::seconds(120));
  EXPECT_TRUE(r.finished && r.exit_code == 0) << name << ": exit " << r.exit_code << "\n" << r.out << r.err;
  return r.out + r.err;
}

std::vector<double> params_of(const TempDir& dir, const std::string& name, int process) {
  return parameters(read_text(dir.path() + "/" + name + "/params." + std::to_string(process)));
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, tolerance) << what;
}

struct Case {
  std::string ps_spec, optimizer;
  double tolerance;
};
// ctest names the cases by index; gtest prints the spec.
void PrintTo(const Case& c, std::ostream* os) { *os << c.ps_spec << " (" << c.optimizer << ")"; }

class PsStrategy : public ::testing::TestWithParam<Case> {};

TEST_P(PsStrategy, SynchronousFitEqualsDataParallelism) {
  const Case c = GetParam();
  TempDir dir;
  run(dir, "ddp", 2, "multi_worker:style=ddp", c.optimizer);
  const std::string out = run(dir, "ps", 3, c.ps_spec, c.optimizer);
  EXPECT_NE(out.find("parameter_server:"), std::string::npos) << out;
  const std::vector<double> reference = params_of(dir, "ddp", 0);
  // The data parallel run moved away from the initial values (3 epochs of
  // 8 steps): an equal result is the training's, not the starting point's.
  expect_close(params_of(dir, "ps", 0), reference, c.tolerance, c.ps_spec + ": worker 0");
  expect_close(params_of(dir, "ps", 1), reference, c.tolerance, c.ps_spec + ": worker 1");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/ps/params.2")) << "the server rank ran the program's fit()";
  const bool serve_and_exit = c.ps_spec.find("serve_and_exit=true") != std::string::npos;
  EXPECT_EQ(out.find("server served, status 0, strategy destroyed") != std::string::npos, !serve_and_exit) << out;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, PsStrategy,
    ::testing::Values(Case{"parameter_server:servers=1", "sgd", 1e-12},
                      Case{"parameter_server:servers=1,staleness=0", "adam", 1e-12},
                      Case{"parameter_server:servers=1,optimizer=sgd,lr=0.1,momentum=0.9,shards=2,serve_and_exit=true",
                           "sgd", 1e-12},
                      Case{"parameter_server:servers=1,optimizer=adam,lr=0.01", "adam", 1e-10}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// The server's closing summary line: "... done: steps_applied=N late_dropped=M ...".
int64_t server_counter(const std::string& out, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("parameter server 0 done:.* " + name + "=([0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

// backup_workers=1 through the strategy: worker 1 is late at every step, so
// each synchronous step goes on with worker 0's gradient alone and worker
// 1's arrives after its step was applied (dropped, never applied late).
// Without the option the same job waits for worker 1 and drops nothing.
// The servers' SGD: the summation service refuses backup workers.
TEST(PsStrategyBackupWorkers, StepsGoOnWithoutTheLateWorker) {
  TempDir dir;
  const std::map<std::string, std::string> info = {{"COHORT_LOG_LEVEL", "info"}};
  const std::vector<std::string> slow = {"--slow-ms", "50"};
  const int64_t steps = 3 * ((45 + 5) / 6);  // the program's 3 epochs of global batches of 6 over 45 rows
  const std::string spec = "parameter_server:servers=1,optimizer=sgd,lr=0.1,momentum=0.9";
  const std::string with = run(dir, "backup", 3, spec + ",backup_workers=1", "sgd", slow, info);
  EXPECT_NE(with.find("backup_workers=1"), std::string::npos) << with;
  EXPECT_EQ(server_counter(with, "steps_applied"), steps) << with;
  EXPECT_GE(server_counter(with, "late_dropped"), 1) << with;
  const std::string without = run(dir, "control", 3, spec, "sgd", slow, info);
  EXPECT_EQ(server_counter(without, "steps_applied"), steps) << without;
  EXPECT_EQ(server_counter(without, "late_dropped"), 0) << without;
}

TEST(PsStrategySpec, BadSpecsAreOneLineErrors) {
  // One process: no rank is left to train.
  for (const std::string& spec : {std::string("parameter_server:servers=1"), std::string("parameter_server:server=1"),
                                  std::string("parameter_server:optimizer=rmsprop"),
                                  std::string("parameter_server:staleness=-2")}) {
    try {
      make_strategy(spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_NE(what.find("parameter_server"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace cohort::testing
