// The char_lm example end to end, as real processes: four ranks under
// cohortrun on a dp 2 x pp 2 x tp 1 mesh and one rank alone, on a small
// fortune directory written here, print their losses and a sampled line; a
// mesh that does not match the job, or a bad flag, exits with status 2 and
// one clear line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/launcher/cohortrun_process.h"

namespace cohort::testing::char_lm_e2e_test {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/examples/char_lm";

class CharLmE2E : public ::testing::Test {
 protected:
  CharLmE2E() {
    char pattern[] = "/tmp/cohort_char_lm_e2e.XXXXXX";
    dir_ = ::mkdtemp(pattern);
    corpus_ = dir_ + "/fortunes";
    std::filesystem::create_directory(corpus_);
    std::ofstream f(corpus_ + "/tiny");
    for (int i = 0; i < 40; ++i) f << "The quick brown fox " << i << " jumps over the lazy dog.\n\t\t-- a typist\n%\n";
  }
  ~CharLmE2E() override { std::filesystem::remove_all(dir_); }

  // Tiny model and few steps: seconds per run even on a loaded machine.
  std::vector<std::string> tiny_flags() const {
    return {"--corpus",    corpus_, "--d-model",    "16", "--heads",         "2", "--layers", "2",
            "--seq-len",   "16",    "--batch-size", "8",  "--micro-batches", "2", "--steps",  "5",
            "--log-every", "1",     "--threads",    "1",  "--sample-chars",  "30"};
  }

  RunResult run_ranks(int np, const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"-np", std::to_string(np), kProgram};
    args.insert(args.end(), flags.begin(), flags.end());
    CohortrunProcess p(kCohortrun, args, dir_);
    return p.wait(std::chrono::seconds(180));
  }
  RunResult run_alone(const std::vector<std::string>& flags) {
    CohortrunProcess p(kProgram, flags, dir_);
    return p.wait(std::chrono::seconds(180));
  }

  std::string dir_, corpus_;
};

// The losses of lines "step k/N: loss X, ..." in order.
std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  const std::regex re("step [0-9]+/[0-9]+: loss ([0-9.]+), [0-9]+ tokens/s");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

TEST_F(CharLmE2E, TrainsOnFourRanksLikeOnOne) {
  std::vector<std::string> flags = tiny_flags();
  flags.insert(flags.end(), {"--dp", "2", "--pp", "2", "--tp", "1"});
  const RunResult four = run_ranks(4, flags);
  ASSERT_TRUE(four.finished && four.exit_code == 0) << "exit " << four.exit_code << "\n" << four.out << four.err;
  EXPECT_NE(four.out.find("mesh dp 2 x pp 2 x tp 1, 1f1b schedule, 2 micro-batches"), std::string::npos) << four.out;
  EXPECT_NE(four.out.find("trained 5 steps on dp 2 x pp 2 x tp 1"), std::string::npos) << four.out;
  EXPECT_NE(four.out.find("char_lm: sample: "), std::string::npos) << four.out;

  const RunResult one = run_alone(tiny_flags());
  ASSERT_TRUE(one.finished && one.exit_code == 0) << "exit " << one.exit_code << "\n" << one.out << one.err;
  EXPECT_NE(one.out.find("trained 5 steps on dp 1 x pp 1 x tp 1"), std::string::npos) << one.out;

  // Same seed, same global batches, same weights: the same loss curve up to
  // float32 rounding, and it falls.
  const std::vector<double> a = losses(four.out), b = losses(one.out);
  ASSERT_EQ(a.size(), 5u) << four.out;
  ASSERT_EQ(b.size(), 5u) << one.out;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3 * b[i]) << "step " << i + 1;
  EXPECT_LT(a.back(), a.front());
}

TEST_F(CharLmE2E, AMeshThatDoesNotFitTheJobExitsWithTwo) {
  std::vector<std::string> flags = tiny_flags();
  flags.insert(flags.end(), {"--dp", "2", "--pp", "2", "--tp", "2"});
  const RunResult r = run_ranks(4, flags);
  ASSERT_TRUE(r.finished) << r.out << r.err;
  // The ranks exit with 2; cohortrun reports the first failing rank and exits 1.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("exited with code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--dp 2 x --pp 2 x --tp 2 = 8 ranks, but the job has 4"), std::string::npos) << r.err;
}

TEST_F(CharLmE2E, BadFlagsAndAMissingCorpusAreOneLineErrors) {
  RunResult r = run_alone({"--schedule", "zigzag"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--schedule expects one of gpipe, 1f1b, got 'zigzag'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = run_alone({"--corpus", dir_ + "/nowhere"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("fortune directory " + dir_ + "/nowhere not found"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'fortunes' package"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cohort::testing::char_lm_e2e_test
