// Discovery of rank, size, local rank, local size and the store address from
// each launcher's variables, and a ConfigError naming the variable for every
// missing, malformed or contradictory value.
#include <cstdlib>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/rendezvous/discovery.h"

namespace cohort::rendezvous::discovery_test {
namespace {

// Expects discover(env) to throw ConfigError whose message names every one
// of `needles` (the variable, and its value).
void expect_config_error(const Environment& env, std::initializer_list<std::string> needles) {
  try {
    const LaunchInfo info = discover(env);
    ADD_FAILURE() << "no error; got rank " << info.rank << " of " << info.size << " from "
                  << launch_source_name(info.source);
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

Environment cohortrun_env() {
  return {{"COHORT_RANK", "2"},       {"COHORT_SIZE", "4"},
          {"COHORT_LOCAL_RANK", "0"}, {"COHORT_LOCAL_SIZE", "2"},
          {"COHORT_STORE_ADDR", "node0:29400"}, {"COHORT_JOB_ID", "job-17"},
          {"COHORT_SECRET", "abc123"},
          // cohortrun sets torchrun's variables too, consistently.
          {"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}};
}

TEST(DiscoveryTest, NothingSetIsASingleProcess) {
  const LaunchInfo info = discover(Environment{{"HOME", "/root"}, {"MASTER_ADDR", "x"}});
  EXPECT_EQ(info.source, LaunchSource::single);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  EXPECT_TRUE(info.store_host.empty());
  EXPECT_FALSE(info.store_in_rank0);
  EXPECT_EQ(info.job_id, "local");
}

TEST(DiscoveryTest, Cohortrun) {
  const LaunchInfo info = discover(cohortrun_env());
  EXPECT_EQ(info.source, LaunchSource::cohortrun);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 2);
  EXPECT_EQ(info.store_host, "node0");
  EXPECT_EQ(info.store_port, 29400);  // COHORT_STORE_ADDR, not MASTER_PORT
  EXPECT_FALSE(info.store_in_rank0);
  EXPECT_EQ(info.job_id, "job-17");
  EXPECT_EQ(info.secret, "abc123");
  EXPECT_STREQ(launch_source_name(info.source), "cohortrun");
}

TEST(DiscoveryTest, CohortrunIpv6StoreAddress) {
  Environment env = cohortrun_env();
  env["COHORT_STORE_ADDR"] = "[fe80::1]:4000";
  const LaunchInfo info = discover(env);
  EXPECT_EQ(info.store_host, "fe80::1");
  EXPECT_EQ(info.store_port, 4000);
}

TEST(DiscoveryTest, CohortrunContradictions) {
  Environment env = cohortrun_env();
  env["RANK"] = "3";
  expect_config_error(env, {"COHORT_RANK='2'", "RANK='3'"});

  env = cohortrun_env();
  env["WORLD_SIZE"] = "8";
  expect_config_error(env, {"COHORT_SIZE='4'", "WORLD_SIZE='8'"});

  env = cohortrun_env();
  env["LOCAL_WORLD_SIZE"] = "4";
  expect_config_error(env, {"COHORT_LOCAL_SIZE", "LOCAL_WORLD_SIZE='4'"});

  env = cohortrun_env();
  env["COHORT_RANK"] = "4";
  expect_config_error(env, {"COHORT_RANK='4'", "COHORT_SIZE='4'"});

  env = cohortrun_env();
  env["COHORT_LOCAL_RANK"] = "2";
  expect_config_error(env, {"COHORT_LOCAL_RANK='2'", "COHORT_LOCAL_SIZE='2'"});

  env = cohortrun_env();
  env["COHORT_LOCAL_SIZE"] = "5";
  env.erase("LOCAL_WORLD_SIZE");
  expect_config_error(env, {"COHORT_LOCAL_SIZE='5'", "COHORT_SIZE='4'"});

  env = cohortrun_env();
  env["COHORT_SIZE"] = "0";
  env["COHORT_RANK"] = "0";
  env.erase("RANK");
  env.erase("WORLD_SIZE");
  expect_config_error(env, {"COHORT_SIZE='0'"});
}

TEST(DiscoveryTest, CohortrunMissingOrMalformed) {
  Environment env = cohortrun_env();
  env.erase("COHORT_SIZE");
  expect_config_error(env, {"COHORT_SIZE", "COHORT_RANK='2'"});

  env = cohortrun_env();
  env.erase("COHORT_LOCAL_RANK");
  expect_config_error(env, {"COHORT_LOCAL_RANK"});

  env = cohortrun_env();
  env.erase("COHORT_STORE_ADDR");
  expect_config_error(env, {"COHORT_STORE_ADDR"});

  env = cohortrun_env();
  env["COHORT_RANK"] = "two";
  expect_config_error(env, {"COHORT_RANK='two'"});

  env = cohortrun_env();
  env["COHORT_RANK"] = "-1";
  expect_config_error(env, {"COHORT_RANK='-1'"});

  env = cohortrun_env();
  env["COHORT_SIZE"] = "4x";
  expect_config_error(env, {"COHORT_SIZE='4x'"});

  env = cohortrun_env();
  env["COHORT_SIZE"] = "99999999999999";
  expect_config_error(env, {"COHORT_SIZE='99999999999999'"});

  for (const char* bad : {"node0", "node0:", ":29400", "node0:0", "node0:65536", "node0:http", "fe80::1:4000",
                          "[fe80::1]4000"}) {
    env = cohortrun_env();
    env["COHORT_STORE_ADDR"] = bad;
    expect_config_error(env, {std::string("COHORT_STORE_ADDR='") + bad + "'"});
  }

  env = cohortrun_env();
  env["COHORT_JOB_ID"] = "../../etc";
  expect_config_error(env, {"COHORT_JOB_ID='../../etc'"});
}

TEST(DiscoveryTest, CohortrunSingleRankNeedsNoStore) {
  const LaunchInfo info = discover(Environment{
      {"COHORT_RANK", "0"}, {"COHORT_SIZE", "1"}, {"COHORT_LOCAL_RANK", "0"}, {"COHORT_LOCAL_SIZE", "1"}});
  EXPECT_EQ(info.source, LaunchSource::cohortrun);
  EXPECT_EQ(info.size, 1);
  EXPECT_TRUE(info.store_host.empty());
}

TEST(DiscoveryTest, LeftoverCohortVariablesWithoutARank) {
  expect_config_error(Environment{{"COHORT_SIZE", "4"}}, {"COHORT_SIZE='4'", "COHORT_RANK"});
  expect_config_error(Environment{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                  {"MASTER_PORT", "1"}, {"COHORT_LOCAL_RANK", "0"}},
                      {"COHORT_LOCAL_RANK='0'"});
  expect_config_error(Environment{{"WORLD_SIZE", "4"}}, {"WORLD_SIZE='4'", "RANK"});
}

Environment torchrun_env() {
  return {{"RANK", "5"},        {"WORLD_SIZE", "8"},       {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "run42"}};
}

TEST(DiscoveryTest, Torchrun) {
  const LaunchInfo info = discover(torchrun_env());
  EXPECT_EQ(info.source, LaunchSource::torchrun);
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.store_host, "10.0.0.1");
  EXPECT_EQ(info.store_port, 29500);
  EXPECT_TRUE(info.store_in_rank0);
  EXPECT_EQ(info.job_id, "run42");
  EXPECT_TRUE(info.secret.empty());
}

TEST(DiscoveryTest, TorchrunStoreAddressOverrideAndSecret) {
  Environment env = torchrun_env();
  env["COHORT_STORE_ADDR"] = "storehost:7000";
  env["COHORT_SECRET"] = "s";
  env["COHORT_JOB_ID"] = "explicit";
  const LaunchInfo info = discover(env);
  EXPECT_EQ(info.store_host, "storehost");
  EXPECT_EQ(info.store_port, 7000);
  EXPECT_TRUE(info.store_in_rank0);
  EXPECT_EQ(info.secret, "s");
  EXPECT_EQ(info.job_id, "explicit");
}

TEST(DiscoveryTest, TorchrunMinimalEnvInit) {
  // The classic env:// set: no local variables, no run id.
  const LaunchInfo info = discover(
      Environment{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  // A job id unique to the running job, from its store address.
  EXPECT_EQ(info.job_id, "127.0.0.1-1234");
  // A loopback store is served on loopback only.
  EXPECT_EQ(info.store_bind, "127.0.0.1");
}

TEST(DiscoveryTest, Rank0ServesTheStoreOnLoopbackWhenNobodyElseNeedsIt) {
  // Every rank on this host: loopback, whatever MASTER_ADDR names.
  Environment env{{"RANK", "0"},        {"WORLD_SIZE", "4"},          {"LOCAL_RANK", "0"},
                  {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}};
  LaunchInfo info = discover(env);
  EXPECT_TRUE(info.store_in_rank0);
  EXPECT_EQ(info.store_bind, "127.0.0.1");
  EXPECT_EQ(info.store_host, "127.0.0.1");
  EXPECT_EQ(info.store_port, 29500);
  // A loopback name is kept as given.
  env["MASTER_ADDR"] = "localhost";
  info = discover(env);
  EXPECT_EQ(info.store_bind, "localhost");
  EXPECT_EQ(info.store_host, "localhost");
  // Ranks on other hosts must reach it: every interface, at the given address.
  info = discover(torchrun_env());
  EXPECT_EQ(info.store_bind, "0.0.0.0");
  EXPECT_EQ(info.store_host, "10.0.0.1");
  // cohortrun serves the store itself.
  EXPECT_TRUE(discover(Environment{{"COHORT_RANK", "0"}, {"COHORT_SIZE", "2"}, {"COHORT_LOCAL_RANK", "0"},
                                   {"COHORT_LOCAL_SIZE", "2"}, {"COHORT_STORE_ADDR", "127.0.0.1:5000"}})
                  .store_bind.empty());
}

TEST(DiscoveryTest, TorchrunContradictionsAndGaps) {
  Environment env = torchrun_env();
  env.erase("WORLD_SIZE");
  expect_config_error(env, {"WORLD_SIZE", "RANK='5'"});

  env = torchrun_env();
  env["RANK"] = "8";
  expect_config_error(env, {"RANK='8'", "WORLD_SIZE='8'"});

  env = torchrun_env();
  env.erase("LOCAL_WORLD_SIZE");
  expect_config_error(env, {"LOCAL_RANK='1'", "LOCAL_WORLD_SIZE"});

  env = torchrun_env();
  env.erase("LOCAL_RANK");
  expect_config_error(env, {"LOCAL_WORLD_SIZE='4'", "LOCAL_RANK"});

  env = torchrun_env();
  env["LOCAL_RANK"] = "4";
  expect_config_error(env, {"LOCAL_RANK='4'", "LOCAL_WORLD_SIZE='4'"});

  env = torchrun_env();
  env.erase("MASTER_PORT");
  expect_config_error(env, {"MASTER_ADDR='10.0.0.1'", "MASTER_PORT"});

  env = torchrun_env();
  env.erase("MASTER_ADDR");
  expect_config_error(env, {"MASTER_PORT='29500'", "MASTER_ADDR"});

  env = torchrun_env();
  env["MASTER_PORT"] = "99999";
  expect_config_error(env, {"MASTER_PORT='99999'"});

  env = torchrun_env();
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  expect_config_error(env, {"COHORT_STORE_ADDR", "MASTER_ADDR"});

  env = torchrun_env();
  env["WORLD_SIZE"] = "eight";
  expect_config_error(env, {"WORLD_SIZE='eight'"});
}

Environment openmpi_env() {
  return {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "6"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
          {"COHORT_STORE_ADDR", "head:5000"},  {"PMIX_NAMESPACE", "prterun-head-123@1"}};
}

TEST(DiscoveryTest, OpenMpi) {
  const LaunchInfo info = discover(openmpi_env());
  EXPECT_EQ(info.source, LaunchSource::openmpi);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.size, 6);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 3);
  EXPECT_EQ(info.store_host, "head");
  EXPECT_EQ(info.store_port, 5000);
  EXPECT_TRUE(info.store_in_rank0);
  EXPECT_EQ(info.job_id, "prterun-head-123_1");  // sanitised for segment names
}

TEST(DiscoveryTest, OpenMpiInsideSlurmUsesOpenMpi) {
  // mpirun inside an allocation: Slurm's variables describe the batch step.
  Environment env = openmpi_env();
  env["SLURM_PROCID"] = "0";
  env["SLURM_NTASKS"] = "1";
  EXPECT_EQ(discover(env).source, LaunchSource::openmpi);
  EXPECT_EQ(discover(env).rank, 3);
}

TEST(DiscoveryTest, OpenMpiContradictionsAndGaps) {
  Environment env = openmpi_env();
  env.erase("OMPI_COMM_WORLD_SIZE");
  expect_config_error(env, {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK='3'"});

  env = openmpi_env();
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "7";
  expect_config_error(env, {"OMPI_COMM_WORLD_LOCAL_SIZE='7'", "OMPI_COMM_WORLD_SIZE='6'"});

  env = openmpi_env();
  env.erase("COHORT_STORE_ADDR");
  expect_config_error(env, {"COHORT_STORE_ADDR", "OMPI_COMM_WORLD_RANK='3'"});

  env = openmpi_env();
  env["OMPI_COMM_WORLD_RANK"] = "3.0";
  expect_config_error(env, {"OMPI_COMM_WORLD_RANK='3.0'"});
}

Environment slurm_env() {
  return {{"SLURM_PROCID", "5"},  {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},  {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"},
          {"SLURM_JOB_ID", "9001"}, {"SLURM_STEP_ID", "0"},
          {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"}};
}

TEST(DiscoveryTest, Slurm) {
  const LaunchInfo info = discover(slurm_env());
  EXPECT_EQ(info.source, LaunchSource::slurm);
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.size, 7);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 3);
  EXPECT_EQ(info.store_host, "node01");
  EXPECT_EQ(info.store_port, 29500);
  EXPECT_TRUE(info.store_in_rank0);
  EXPECT_EQ(info.job_id, "slurm-9001.0");
}

TEST(DiscoveryTest, SlurmLastNodeAndPerNodeVariable) {
  Environment env = slurm_env();
  env["SLURM_NODEID"] = "2";
  env["SLURM_PROCID"] = "6";
  env["SLURM_LOCALID"] = "0";
  EXPECT_EQ(discover(env).local_size, 1);
  // A requested count above the actual layout of a partly filled node is fine.
  env["SLURM_NTASKS_PER_NODE"] = "3";
  EXPECT_EQ(discover(env).local_size, 1);

  // Only SLURM_NTASKS_PER_NODE.
  env = slurm_env();
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env.erase("SLURM_NODEID");
  env["SLURM_NTASKS_PER_NODE"] = "3";
  EXPECT_EQ(discover(env).local_size, 3);

  // A uniform list needs no node id.
  env = slurm_env();
  env.erase("SLURM_NODEID");
  env["SLURM_NTASKS"] = "8";
  env["SLURM_TASKS_PER_NODE"] = "4(x2)";
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  EXPECT_EQ(discover(env).local_size, 4);

  // SLURM_NPROCS instead of SLURM_NTASKS.
  env = slurm_env();
  env.erase("SLURM_NTASKS");
  env["SLURM_NPROCS"] = "7";
  EXPECT_EQ(discover(env).size, 7);
}

TEST(DiscoveryTest, SlurmContradictionsAndGaps) {
  Environment env = slurm_env();
  env["SLURM_NPROCS"] = "8";
  expect_config_error(env, {"SLURM_NTASKS='7'", "SLURM_NPROCS='8'"});

  env = slurm_env();
  env.erase("SLURM_NTASKS");
  expect_config_error(env, {"SLURM_PROCID='5'", "SLURM_NTASKS"});

  env = slurm_env();
  env["SLURM_NTASKS_PER_NODE"] = "2";
  expect_config_error(env, {"SLURM_STEP_TASKS_PER_NODE='3(x2),1'", "SLURM_NTASKS_PER_NODE='2'"});

  env = slurm_env();
  env["SLURM_STEP_TASKS_PER_NODE"] = "3(x2";
  expect_config_error(env, {"SLURM_STEP_TASKS_PER_NODE='3(x2'"});

  env = slurm_env();
  env["SLURM_STEP_TASKS_PER_NODE"] = "3,,1";
  expect_config_error(env, {"SLURM_STEP_TASKS_PER_NODE='3,,1'"});

  env = slurm_env();
  env["SLURM_NODEID"] = "3";
  expect_config_error(env, {"SLURM_NODEID='3'"});

  env = slurm_env();
  env["SLURM_LOCALID"] = "3";
  expect_config_error(env, {"SLURM_LOCALID='3'"});

  env = slurm_env();
  env["SLURM_PROCID"] = "7";
  expect_config_error(env, {"SLURM_PROCID='7'", "SLURM_NTASKS='7'"});

  env = slurm_env();
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env.erase("SLURM_NODEID");
  expect_config_error(env, {"SLURM_LOCALID='1'", "SLURM_NTASKS_PER_NODE"});

  env = slurm_env();
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  expect_config_error(env, {"COHORT_STORE_ADDR", "SLURM_PROCID='5'"});
}

// What srun sets when nothing else gives a store address (the variables of
// a task of `srun -N 3 -n 7`).
Environment srun_env(int rank, int node, int local_rank) {
  Environment env = slurm_env();
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  env["SLURM_PROCID"] = std::to_string(rank);
  env["SLURM_NODEID"] = std::to_string(node);
  env["SLURM_LOCALID"] = std::to_string(local_rank);
  env["SLURM_STEP_NODELIST"] = "gpu[007-008],cpu3";
  env["SLURM_JOB_NODELIST"] = "gpu[007-008],cpu[3-4]";
  return env;
}

TEST(DiscoveryTest, SrunAloneServesTheStoreOnTheStepsFirstNode) {
  const LaunchInfo zero = discover(srun_env(0, 0, 0));
  EXPECT_EQ(zero.store_host, "gpu007");
  EXPECT_TRUE(zero.store_in_rank0);
  EXPECT_GE(zero.store_port, 20000);
  EXPECT_LT(zero.store_port, 30000);
  EXPECT_EQ(zero.job_id, "slurm-9001.0");
  // Every task computes the same address.
  for (const auto& [rank, node, local] : {std::tuple{3, 1, 0}, std::tuple{6, 2, 0}}) {
    const LaunchInfo other = discover(srun_env(rank, node, local));
    EXPECT_EQ(other.store_host, "gpu007");
    EXPECT_EQ(other.store_port, zero.store_port);
  }
  // Another step of the job, or another job, gets another port.
  Environment next_step = srun_env(0, 0, 0);
  next_step["SLURM_STEP_ID"] = "1";
  EXPECT_NE(discover(next_step).store_port, zero.store_port);
  Environment next_job = srun_env(0, 0, 0);
  next_job["SLURM_JOB_ID"] = "9002";
  EXPECT_NE(discover(next_job).store_port, zero.store_port);
  // Without a step list, the job's.
  Environment job_list = srun_env(0, 0, 0);
  job_list.erase("SLURM_STEP_NODELIST");
  job_list["SLURM_JOB_NODELIST"] = "rack[2-3]-n[08-09]";
  EXPECT_EQ(discover(job_list).store_host, "rack2-n08");
  // A configured address wins.
  Environment configured = srun_env(0, 0, 0);
  configured["COHORT_STORE_ADDR"] = "head:1234";
  EXPECT_EQ(discover(configured).store_host, "head");
  EXPECT_EQ(discover(configured).store_port, 1234);
}

// The step's first node serves the store on every interface when tasks run
// elsewhere too, and on loopback when every task is on that node (as `srun
// -n 4` on one machine): an unauthenticated store is refused off loopback.
TEST(DiscoveryTest, SrunStoreOnOneNodeIsServedOnLoopback) {
  EXPECT_EQ(discover(srun_env(0, 0, 0)).store_bind, "0.0.0.0");
  Environment one_node = srun_env(0, 0, 0);
  one_node["SLURM_NTASKS"] = "4";
  one_node["SLURM_STEP_TASKS_PER_NODE"] = "4";
  one_node["SLURM_STEP_NODELIST"] = "vm";
  const LaunchInfo info = discover(one_node);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.store_bind, "127.0.0.1");
  EXPECT_EQ(info.store_host, "127.0.0.1");
  EXPECT_TRUE(info.store_in_rank0);
}

TEST(DiscoveryTest, SrunTaskZeroOffTheFirstNodeNeedsAnAddress) {
  // Tasks placed by hand (--distribution=arbitrary) may put task 0 elsewhere.
  expect_config_error(srun_env(0, 1, 0), {"task 0 runs on node 1", "gpu007", "COHORT_STORE_ADDR"});
  Environment bad = srun_env(2, 0, 2);
  bad["SLURM_STEP_NODELIST"] = "[";
  expect_config_error(bad, {"SLURM_STEP_NODELIST='['", "COHORT_STORE_ADDR"});
}

TEST(DiscoveryTest, SbatchsBatchScriptIsASingleProcess) {
  // The batch script has SLURM_PROCID=0 and the job's task count, but no
  // step: without srun it is one process, not rank 0 of a job.
  const Environment batch{{"SLURM_PROCID", "0"},   {"SLURM_NTASKS", "2"},  {"SLURM_LOCALID", "0"},
                          {"SLURM_NODEID", "0"},   {"SLURM_JOB_ID", "3"},  {"SLURM_TASKS_PER_NODE", "2"},
                          {"SLURM_JOB_NODELIST", "vm"}};
  const LaunchInfo info = discover(batch);
  EXPECT_EQ(info.source, LaunchSource::single);
  EXPECT_EQ(info.size, 1);
  EXPECT_TRUE(info.store_host.empty());
}

TEST(DiscoveryTest, PrecedenceCohortrunThenTorchrunThenMpiThenSlurm) {
  Environment env = slurm_env();
  for (const auto& [k, v] : openmpi_env()) env[k] = v;
  EXPECT_EQ(discover(env).source, LaunchSource::openmpi);
  for (const auto& [k, v] : torchrun_env()) env[k] = v;
  EXPECT_EQ(discover(env).source, LaunchSource::torchrun);
  for (const auto& [k, v] : cohortrun_env()) env[k] = v;
  EXPECT_EQ(discover(env).source, LaunchSource::cohortrun);
}

TEST(DiscoveryTest, EmptyValuesCountAsUnset) {
  const LaunchInfo info = discover(Environment{{"RANK", ""}, {"COHORT_RANK", ""}, {"COHORT_SECRET", ""}});
  EXPECT_EQ(info.source, LaunchSource::single);
}

TEST(DiscoveryTest, ReadsTheProcessEnvironment) {
  ::setenv("COHORT_RANK", "1", 1);
  ::setenv("COHORT_SIZE", "3", 1);
  ::setenv("COHORT_LOCAL_RANK", "1", 1);
  ::setenv("COHORT_LOCAL_SIZE", "3", 1);
  ::setenv("COHORT_STORE_ADDR", "127.0.0.1:4242", 1);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("LOCAL_RANK");
  ::unsetenv("LOCAL_WORLD_SIZE");
  const LaunchInfo info = discover();
  for (const char* v : {"COHORT_RANK", "COHORT_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_SIZE", "COHORT_STORE_ADDR"})
    ::unsetenv(v);
  EXPECT_EQ(info.source, LaunchSource::cohortrun);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 3);
  EXPECT_EQ(info.store_port, 4242);
}

}  // namespace
}  // namespace cohort::rendezvous::discovery_test
