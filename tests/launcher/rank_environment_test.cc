#include "cohort/launcher/rank_environment.h"

#include <gtest/gtest.h>

namespace cohort::launcher::rank_environment_test {
namespace {

JobEnvironment job_of(int size) {
  JobEnvironment job;
  job.job_id = "j1";
  job.secret = "s3cr3t";
  job.store_host = "127.0.0.1";
  job.store_port = 4242;
  job.size = size;
  job.threads_per_rank = 3;
  job.torch_master = "127.0.0.1:29511";
  return job;
}

TEST(RankEnvironment, SetsCohortAndTorchrunVariables) {
  const EnvironmentMap base{{"PATH", "/bin"}, {"HOME", "/root"}};
  const EnvironmentMap env = rank_environment(base, job_of(4), 2);
  const EnvironmentMap expected{
      {"PATH", "/bin"},
      {"HOME", "/root"},
      {"COHORT_RANK", "2"},
      {"COHORT_SIZE", "4"},
      {"COHORT_LOCAL_RANK", "2"},
      {"COHORT_LOCAL_SIZE", "4"},
      {"COHORT_STORE_ADDR", "127.0.0.1:4242"},
      {"COHORT_JOB_ID", "j1"},
      {"COHORT_SECRET", "s3cr3t"},
      {"RANK", "2"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "2"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29511"},
      {"OMP_NUM_THREADS", "3"},
      {"OPENBLAS_NUM_THREADS", "3"},
      {"MKL_NUM_THREADS", "3"},
  };
  EXPECT_EQ(env, expected);
}

TEST(RankEnvironment, BackendOnlyWhenGiven) {
  EXPECT_FALSE(rank_environment({}, job_of(1), 0).contains("COHORT_BACKEND"));
  JobEnvironment job = job_of(1);
  job.backend = "shm";
  EXPECT_EQ(rank_environment({}, job, 0).at("COHORT_BACKEND"), "shm");
}

TEST(RankEnvironment, ReplacesStaleLauncherVariables) {
  // A cohortrun started from inside another job must not pass that job's
  // identity on.
  const EnvironmentMap base{{"COHORT_RANK", "7"}, {"RANK", "7"}, {"COHORT_SECRET", "old"},
                            {"COHORT_ELASTIC_SLOT", "7"}, {"COHORT_ELASTIC_INCARNATION", "2"},
                            {"COHORT_ELASTIC_JOINING", "1"}};
  const EnvironmentMap env = rank_environment(base, job_of(2), 1);
  EXPECT_EQ(env.at("COHORT_RANK"), "1");
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("COHORT_SECRET"), "s3cr3t");
  // Nor make this job look elastic (an elastic job's launcher sets them).
  EXPECT_EQ(env.count("COHORT_ELASTIC_SLOT"), 0u);
  EXPECT_EQ(env.count("COHORT_ELASTIC_INCARNATION"), 0u);
  EXPECT_EQ(env.count("COHORT_ELASTIC_JOINING"), 0u);
}

TEST(RankEnvironment, ThreadCountsTheUserSetAreKept) {
  JobEnvironment job = job_of(2);
  job.extra = {{"MKL_NUM_THREADS", "8"}, {"FOO", "bar"}};
  const EnvironmentMap env = rank_environment({{"OMP_NUM_THREADS", "1"}}, job, 0);
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(env.at("MKL_NUM_THREADS"), "8");
  EXPECT_EQ(env.at("OPENBLAS_NUM_THREADS"), "3");
  EXPECT_EQ(env.at("FOO"), "bar");
}

TEST(RankEnvironment, ExtraVariablesApplyLastAndInOrder) {
  JobEnvironment job = job_of(1);
  job.extra = {{"PATH", "/opt/bin"}, {"X", "1"}, {"X", "2"}};
  const EnvironmentMap env = rank_environment({{"PATH", "/bin"}}, job, 0);
  EXPECT_EQ(env.at("PATH"), "/opt/bin");
  EXPECT_EQ(env.at("X"), "2");
}

TEST(RankEnvironment, PlacementSetsLocalRankSizeAndHost) {
  JobEnvironment job = job_of(5);
  const RankPlacement where{.rank = 3, .host = "node2", .host_index = 1, .local_rank = 1, .local_size = 2,
                            .remote = true};
  EnvironmentMap env = rank_environment({}, job, where);
  EXPECT_EQ(env.at("COHORT_RANK"), "3");
  EXPECT_EQ(env.at("COHORT_SIZE"), "5");
  EXPECT_EQ(env.at("COHORT_LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("COHORT_LOCAL_SIZE"), "2");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_FALSE(env.contains("COHORT_HOST"));  // a single-host job does not name hosts
  job.multi_host = true;
  env = rank_environment({}, job, where);
  EXPECT_EQ(env.at("COHORT_HOST"), "node2");
}

TEST(RankEnvironment, Ipv6StoreAddressesAreBracketed) {
  JobEnvironment job = job_of(1);
  job.store_host = "fd00::1";
  job.torch_master = "fd00::1:29511";
  const EnvironmentMap env = rank_environment({}, job, 0);
  EXPECT_EQ(env.at("COHORT_STORE_ADDR"), "[fd00::1]:4242");
  EXPECT_EQ(env.at("MASTER_ADDR"), "fd00::1");  // c10d takes it without brackets
  EXPECT_EQ(env.at("MASTER_PORT"), "29511");
}

// torch.distributed's master is never the store (rank 0's c10d TCPStore
// would find that port taken), an inherited one is not this job's, and the
// user's --env wins.
TEST(RankEnvironment, TorchMasterIsTheJobsOrTheUsers) {
  JobEnvironment job = job_of(2);
  const EnvironmentMap inherited{{"MASTER_ADDR", "outer-job"}, {"MASTER_PORT", "1"}};
  EnvironmentMap env = rank_environment(inherited, job, 1);
  EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "29511");
  job.torch_master.clear();  // rank 0's remote end chooses it
  env = rank_environment(inherited, job, 1);
  EXPECT_FALSE(env.contains("MASTER_ADDR"));
  EXPECT_FALSE(env.contains("MASTER_PORT"));
  job.extra = {{"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}};
  env = rank_environment(inherited, job, 1);
  EXPECT_EQ(env.at("MASTER_ADDR"), "node0");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
}

TEST(RankEnvironment, RemoteRanksGetTheJobAndTheLaunchersTunablesOnly) {
  JobEnvironment job = job_of(4);
  job.multi_host = true;
  job.extra = {{"FOO", "bar"}};
  const EnvironmentMap base{{"PATH", "/launcher/bin"}, {"HOME", "/root"}, {"COHORT_TIMEOUT_S", "5"},
                            {"OMP_NUM_THREADS", "2"}, {"COHORT_RANK", "9"}};
  const RankPlacement where{.rank = 2, .host = "b", .host_index = 1, .local_rank = 0, .local_size = 2,
                            .remote = true};
  const auto list = remote_rank_variables(base, job, where);
  const EnvironmentMap env(list.begin(), list.end());
  EXPECT_FALSE(env.contains("PATH"));
  EXPECT_FALSE(env.contains("HOME"));
  EXPECT_EQ(env.at("COHORT_TIMEOUT_S"), "5");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "2");         // set by the user: passed on
  EXPECT_FALSE(env.contains("MKL_NUM_THREADS"));     // left to the remote host's cores
  EXPECT_EQ(env.at("COHORT_RANK"), "2");             // the launcher's own identity is replaced
  EXPECT_EQ(env.at("COHORT_LOCAL_SIZE"), "2");
  EXPECT_EQ(env.at("COHORT_HOST"), "b");
  EXPECT_EQ(env.at("COHORT_SECRET"), "s3cr3t");
  EXPECT_EQ(env.at("FOO"), "bar");
}

TEST(RankEnvironment, ThreadsPerRankDividesCores) {
  EXPECT_EQ(threads_per_rank(8, 1), 8);
  EXPECT_EQ(threads_per_rank(8, 2), 4);
  EXPECT_EQ(threads_per_rank(8, 3), 2);
  EXPECT_EQ(threads_per_rank(2, 4), 1);
  EXPECT_EQ(threads_per_rank(1, 8), 1);
  EXPECT_EQ(threads_per_rank(4, 0), 4);
}

TEST(RankEnvironment, AvailableCoresIsPositive) {
  EXPECT_GE(available_cores(), 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(available_cores(), CPU_COUNT(&set));
}

TEST(RankEnvironment, EnvpAndCurrentEnvironment) {
  EXPECT_EQ(to_envp({{"A", "1"}, {"B", "x=y"}, {"C", ""}}), (std::vector<std::string>{"A=1", "B=x=y", "C="}));
  ::setenv("COHORT_LAUNCHER_TEST_VAR", "a=b", 1);
  EXPECT_EQ(current_environment().at("COHORT_LAUNCHER_TEST_VAR"), "a=b");
  ::unsetenv("COHORT_LAUNCHER_TEST_VAR");
  EXPECT_FALSE(current_environment().contains("COHORT_LAUNCHER_TEST_VAR"));
}

}  // namespace
}  // namespace cohort::launcher::rank_environment_test
