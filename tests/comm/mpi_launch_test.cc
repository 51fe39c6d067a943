// mpirun and cohortrun start the same program (mpi_launch_program) to the
// same results: a job of collectives on integer-valued inputs must produce
// the same bits on the mpi backend (mpirun, no store configured), the gloo
// backend and the shm backend (cohortrun). Parts whose launcher is missing
// are skipped with the reason.
#include <gtest/gtest.h>

#include <regex>

#include "tests/comm/mpi_job.h"

namespace cohort::testing::mpi_launch_test {
namespace {

using namespace std::chrono_literals;

struct Line {
  std::string backend;
  std::string checksum;
};

Line parse(const JobResult& job) {
  std::smatch m;
  static const std::regex pattern("backend=(\\w+) size=3 checksum=([0-9a-f]{16})");
  if (!std::regex_search(job.out, m, pattern)) return {};
  return {m[1], m[2]};
}

TEST(MpiLaunch, MpirunAndCohortrunGiveTheSameBits) {
  std::vector<std::pair<std::string, Line>> runs;
  if (const std::string mpirun = find_program("mpirun"); !mpirun.empty()) {
    auto argv = mpirun_command(mpirun, 3);
    argv.insert(argv.end(), {COHORT_LAUNCH_PROGRAM, "checksum"});
    const JobResult job = run_job(argv, job_environment(), 120s);
    ASSERT_EQ(job.exit_code, 0) << job.output();
    runs.emplace_back("mpirun", parse(job));
    EXPECT_EQ(runs.back().second.backend, "mpi") << job.output();
  }
#ifdef COHORT_CHECKSUM_COHORTRUN
  for (const std::string backend : {"gloo", "shm"}) {
    const JobResult job = run_job({COHORT_CHECKSUM_COHORTRUN, "-np", "3", COHORT_LAUNCH_PROGRAM, "checksum"},
                                  job_environment({{"COHORT_BACKEND", backend}}), 120s);
    ASSERT_EQ(job.exit_code, 0) << job.output();
    runs.emplace_back("cohortrun with " + backend, parse(job));
    EXPECT_EQ(runs.back().second.backend, backend) << job.output();
  }
#endif
  if (runs.size() < 2) GTEST_SKIP() << "needs mpirun (openmpi-bin) and cohortrun to compare launchers";
  for (const auto& [how, line] : runs) {
    EXPECT_FALSE(line.checksum.empty()) << how << " printed no checksum";
    EXPECT_EQ(line.checksum, runs.front().second.checksum) << how << " vs " << runs.front().first;
  }
}

#ifdef COHORT_CHECKSUM_COHORTRUN
TEST(MpiLaunch, MpiBackendOutsideMpirunIsAConfigError) {
  const JobResult job = run_job({COHORT_CHECKSUM_COHORTRUN, "-np", "2", COHORT_LAUNCH_PROGRAM, "checksum"},
                                job_environment({{"COHORT_BACKEND", "mpi"}}), 60s);
  EXPECT_NE(job.exit_code, 0) << job.output();
  EXPECT_NE(job.output().find("COHORT_BACKEND=mpi needs a job started by mpirun or by srun --mpi=pmix"), std::string::npos)
      << job.output();
}
#endif

}  // namespace
}  // namespace cohort::testing::mpi_launch_test
