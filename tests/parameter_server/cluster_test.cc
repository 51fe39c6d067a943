// Parameter servers across the emulated hosts of scripts/cluster.sh: workers
// on two hosts, the servers on a third of their own (BytePS's layout), all
// started by `cohortrun -H ... --launch-template 'ip netns exec {host}'`;
// traffic between hosts goes over tcp:// with CURVE. Skipped without
// CAP_NET_ADMIN (run as root, as CI does).
#include <gtest/gtest.h>


#include "tests/cluster/emulated_cluster.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/parameter_server/ps_job_checks.h"

namespace cohort::ps {
namespace {

using namespace std::chrono_literals;
using cohort::testing::SharedClusterTest;
using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

class PsClusterTest : public SharedClusterTest<3> {
 protected:
  // 3 workers (2 on host 0, 1 on host 1) and 2 servers on host 2.
  RunResult run(std::vector<std::string> args) {
    std::vector<std::string> a = cluster_->launch_flags(host(0) + ":2," + host(1) + ":1," + host(2) + ":2");
    a.insert(a.end(), {"--env", "COHORT_PS_WORKER_TIMEOUT_S=3", "--env", "COHORT_PS_HEARTBEAT_MS=200", PS_RANK_PROGRAM,
                       "servers=2", "result=" + dir_.path() + "/result"});
    a.insert(a.end(), args.begin(), args.end());
    CohortrunProcess p(COHORTRUN_PATH, a, dir_.path(), {});
    return p.wait(120s);
  }

  TempDir dir_;
};

testing::ReferenceResult all_workers(const char* rule, double lr, int64_t steps) {
  return testing::reference_run(testing::Problem{}, {.rule = rule, .lr = lr}, steps,
                                [](int64_t) { return std::vector<int>{0, 1, 2}; });
}

TEST_F(PsClusterTest, SynchronousTrainingAcrossHostsEqualsTheReference) {
  const RunResult r = run({"steps=10", "rule=adam", "lr=0.05"});
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto expected = all_workers("adam", 0.05, 10);
  for (int k = 0; k < 3; ++k)
    testing::expect_matches(testing::read_values(dir_.path() + "/result." + std::to_string(k)), expected,
                            "worker " + std::to_string(k));
}

TEST_F(PsClusterTest, AServerKilledOnItsHostIsReplacedByItsReplica) {
  // cohortrun stops a job when a rank dies, so this job is started rank by
  // rank in the hosts' namespaces: workers 0, 1 on host 0, worker 2 on
  // host 1, servers on host 2; worker 0 kills server 1 at step 4.
  testing::PsJob job(dir_.path());
  testing::JobLayout layout;
  layout.store_host = cluster_->bridge_address();
  for (int h : {0, 0, 1, 2, 2}) {
    layout.prefix.push_back({"ip", "netns", "exec", host(h)});
    layout.host.push_back(host(h));
  }
  const testing::Outcome o = job.launch(
      5, {"servers=2", "steps=10", "rule=sgd", "lr=0.2", "replicas=1", "kill_server=1", "kill_step=4"}, layout);
  for (int r : {0, 1, 2, 3}) testing::expect_exit(o, r, 0);
  testing::expect_killed(o, 4);
  EXPECT_NE(o.output[3].find("took over partition 1 of lost server 1 from its replica"), std::string::npos)
      << o.output[3];
  const auto expected = all_workers("sgd", 0.2, 10);
  for (int k = 0; k < 3; ++k) testing::expect_reference(job, k, expected);
}

}  // namespace
}  // namespace cohort::ps
