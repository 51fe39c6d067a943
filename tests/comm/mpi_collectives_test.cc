// The mpi communicator in real MPI jobs: `mpirun -np N mpi_rank_program`
// runs the collective checks shared with the gloo tests (2-4 ranks), the
// failure scenarios, and init_world under mpirun; and a rank that dies ends
// the job promptly. Skipped, with the reason, when mpirun is missing.
#include <gtest/gtest.h>

#include "tests/comm/mpi_job.h"

namespace cohort::testing::mpi_collectives_test {
namespace {

using namespace std::chrono_literals;

JobResult run_ranks(int np, const std::string& filter, std::chrono::seconds timeout = 120s) {
  auto argv = mpirun_command(find_program("mpirun"), np);
  argv.push_back(COHORT_MPI_RANK_PROGRAM);
  argv.push_back("--gtest_filter=" + filter);
  argv.push_back("--gtest_color=no");
  return run_job(argv, job_environment(), timeout);
}

class MpiJob : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (find_program("mpirun").empty()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  }
};

TEST_P(MpiJob, EveryCollectiveAgainstTheReference) {
  const JobResult job = run_ranks(GetParam(), "MpiCollectives.*:MpiWorld.*");
  ASSERT_TRUE(job.finished) << "hung:\n" << job.output();
  EXPECT_EQ(job.exit_code, 0) << job.output();
  EXPECT_NE(job.out.find("[  PASSED  ] 13 tests"), std::string::npos) << job.output();
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiJob, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

class MpiFailureJob : public MpiJob {};

TEST_F(MpiFailureJob, MismatchTimeoutAndLossRaiseOnEveryRank) {
  const JobResult job = run_ranks(3, "MpiFailures.*");
  ASSERT_TRUE(job.finished) << "hung:\n" << job.output();
  EXPECT_EQ(job.exit_code, 0) << job.output();
  EXPECT_NE(job.out.find("[  PASSED  ] 4 tests"), std::string::npos) << job.output();
}

TEST_F(MpiFailureJob, RankDeathEndsTheJobPromptly) {
  // OpenMPI's mpirun ends the job when a rank exits before MPI_Finalize; the
  // others must not be left hanging in their collective.
  const JobResult job = run_ranks(3, "MpiDeath.*", 60s);
  ASSERT_TRUE(job.finished) << "hung:\n" << job.output();
  EXPECT_NE(job.exit_code, 0) << job.output();
  EXPECT_LT(job.seconds, 30.0) << job.output();
}

}  // namespace
}  // namespace cohort::testing::mpi_collectives_test
