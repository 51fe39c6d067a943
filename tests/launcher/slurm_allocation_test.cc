// cohortrun inside a Slurm allocation: the hosts and -np come from Slurm's
// variables when the command line names no hosts (slurm_allocation.h). The
// real thing, sbatch and srun on a one-node cluster, is tests/slurm.
#include "cohort/launcher/slurm_allocation.h"

#include <gtest/gtest.h>

#include "cohort/launcher/options.h"

namespace cohort::launcher::slurm_allocation_test {
namespace {

// What sbatch -N 3 -n 7 gives its script.
rendezvous::Environment batch_env() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_JOB_NODELIST", "gpu[007-008],cpu3"},
          {"SLURM_TASKS_PER_NODE", "3,2(x2)"},
          {"SLURM_NTASKS", "7"},
          {"SLURM_PROCID", "0"}};
}

std::string usage_error(const std::vector<std::string>& args, const std::optional<HostAllocation>& allocation) {
  try {
    parse_options(args, allocation);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(SlurmAllocation, ReadsTheNodesAndTheirTasks) {
  const auto allocation = slurm_allocation(batch_env());
  ASSERT_TRUE(allocation);
  EXPECT_EQ(allocation->problem, "");
  EXPECT_EQ(allocation->hosts, (std::vector<HostSlots>{{"gpu007", 3}, {"gpu008", 2}, {"cpu3", 2}}));
  EXPECT_EQ(allocation->name, "the Slurm allocation of job 4242");
  EXPECT_EQ(allocation->launch_template, kSlurmLaunchTemplate);
  // Old Slurm names the list SLURM_NODELIST; a node given no task gets no rank.
  auto old = batch_env();
  old.erase("SLURM_JOB_NODELIST");
  old["SLURM_NODELIST"] = "n[1-2]";
  old["SLURM_TASKS_PER_NODE"] = "1,0";
  EXPECT_EQ(slurm_allocation(old)->hosts, (std::vector<HostSlots>{{"n1", 1}}));
}

TEST(SlurmAllocation, NoneOutsideSlurmOrInsideAStep) {
  EXPECT_FALSE(slurm_allocation({}));
  EXPECT_FALSE(slurm_allocation({{"SLURM_JOB_ID", "1"}}));
  for (const char* step : {"SLURM_STEP_ID", "SLURM_STEPID"}) {
    auto env = batch_env();
    env[step] = "0";
    EXPECT_FALSE(slurm_allocation(env)) << step;
  }
}

TEST(SlurmAllocation, MalformedVariablesAreAProblemOnlyWhenTheHostsAreNeeded) {
  auto bad_list = batch_env();
  bad_list["SLURM_JOB_NODELIST"] = "gpu[007-008";
  auto missing = batch_env();
  missing.erase("SLURM_TASKS_PER_NODE");
  auto mismatch = batch_env();
  mismatch["SLURM_TASKS_PER_NODE"] = "3(x2)";
  auto no_task = batch_env();
  no_task["SLURM_TASKS_PER_NODE"] = "0(x3)";
  for (const auto& [env, why] : std::vector<std::pair<rendezvous::Environment, std::string>>{
           {bad_list, "SLURM_JOB_NODELIST='gpu[007-008' is not a Slurm host list"},
           {missing, "SLURM_JOB_NODELIST is set but SLURM_TASKS_PER_NODE is not: give the hosts with -H"},
           {mismatch, "SLURM_TASKS_PER_NODE='3(x2)' counts the tasks of 2 node(s), but SLURM_JOB_NODELIST="},
           {no_task, "SLURM_TASKS_PER_NODE='0(x3)' gives no node a task"},
       }) {
    const auto allocation = slurm_allocation(env);
    ASSERT_TRUE(allocation);
    EXPECT_NE(allocation->problem.find(why), std::string::npos) << allocation->problem;
    const std::string message = usage_error({"./train"}, allocation);
    EXPECT_NE(message.find("cannot place the ranks on the Slurm allocation of job 4242: " + why), std::string::npos)
        << message;
    // Hosts on the command line do not need the allocation.
    EXPECT_EQ(parse_options(std::vector<std::string>{"-H", "a:2", "./train"}, allocation).hosts.size(), 1u);
  }
}

TEST(SlurmAllocation, GivesTheHostsNpAndLaunchTemplateOfALaunchWithoutHosts) {
  const auto allocation = slurm_allocation(batch_env());
  const LaunchOptions all = parse_options(std::vector<std::string>{"./train"}, allocation);
  EXPECT_EQ(all.num_ranks, 7);
  EXPECT_EQ(all.hosts, allocation->hosts);
  EXPECT_EQ(all.hosts_source, "the Slurm allocation of job 4242");
  EXPECT_EQ(all.launch_template, kSlurmLaunchTemplate);

  const LaunchOptions fewer =
      parse_options(std::vector<std::string>{"-np", "4", "--launch-template", "ssh {host}", "./train"}, allocation);
  EXPECT_EQ(fewer.num_ranks, 4);
  EXPECT_EQ(fewer.launch_template, "ssh {host}");

  const LaunchOptions check = parse_options(std::vector<std::string>{"--check"}, allocation);
  EXPECT_TRUE(check.check);
  EXPECT_EQ(check.num_ranks, 7);

  // The command line's hosts win, and take the default template.
  const LaunchOptions given = parse_options(std::vector<std::string>{"-H", "x:2", "./train"}, allocation);
  EXPECT_EQ(given.hosts, (std::vector<HostSlots>{{"x", 2}}));
  EXPECT_EQ(given.hosts_source, "");
  EXPECT_EQ(given.launch_template, kDefaultLaunchTemplate);

  EXPECT_EQ(usage_error({"-np", "8", "./train"}, allocation),
            "-np 8 is more than the 7 slot(s) of the Slurm allocation of job 4242 (gpu007:3,gpu008:2,cpu3:2): ask "
            "Slurm for more tasks (-n, --ntasks-per-node) or give the hosts with -H");
}

}  // namespace
}  // namespace cohort::launcher::slurm_allocation_test
