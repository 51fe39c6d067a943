// check_accuracy: does the topology `cohortrun --check` writes predict the
// allreduce measured on the same emulated links? Not a ctest test (a timing
// comparison): bench/check_topology.sh runs it. Needs root, as the cluster
// tests do.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cluster/emulated_cluster.h"
#include "tests/launcher/cohortrun_process.h"
#include "tools/sim/calibration.h"
#include "tools/sim/collectives.h"
#include "tools/sim/topology.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

// The topology --check measured predicts cohort-bench's allreduce on the
// same links (cohort-sim's cost model for the launch's backend,
// hierarchical), the goal being within 15% from 1 MiB up. A timing
// comparison, so a benchmark, not a CI test: bench/check_topology.sh runs
// it, with COHORT_CHECK_LINK and COHORT_CHECK_DELAY for the links, and it
// prints one line per size.
TEST(CheckAccuracy, ItsTopologyPredictsTheMeasuredAllreduce) {
  SKIP_WITHOUT_CLUSTER();
  const char* link = std::getenv("COHORT_CHECK_LINK");
  const char* delay = std::getenv("COHORT_CHECK_DELAY");
  const std::string link_text = link ? link : "1gbit", delay_text = delay ? delay : "0.1ms";
  EmulatedCluster cluster(2, link_text, delay_text);
  ASSERT_TRUE(cluster.ok()) << cluster.output();
  TempDir dir("check_accuracy");
  const std::string topology = dir / "topology.json";
  const std::string hosts = cluster.hosts()[0] + ":2," + cluster.hosts()[1] + ":2";
  std::vector<std::string> check_args{"--check"};
  for (std::string& f : cluster.launch_flags(hosts)) check_args.push_back(std::move(f));
  check_args.insert(check_args.end(), {"--check-topology", topology});
  CohortrunProcess check(COHORTRUN_PATH, check_args, dir.path());
  const RunResult r = check.wait(150s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> bench_args = cluster.launch_flags(hosts);
  bench_args.insert(bench_args.end(), {COHORT_BENCH_PATH, "allreduce", "--min-bytes", "64K", "--max-bytes", "4M",
                                       "--step-factor", "4", "--csv"});
  CohortrunProcess bench(COHORTRUN_PATH, bench_args, dir.path());
  const RunResult b = bench.wait(300s);
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  dir.write("bench.csv", b.out);
  int ranks = 0;
  const auto samples = sim::read_bench_csv(dir / "bench.csv", "allreduce", ranks);
  ASSERT_EQ(ranks, 4);
  ASSERT_FALSE(samples.empty()) << b.out;
  const sim::Topology t = sim::read_topology_file(topology);
  for (const sim::Sample& s : samples) {
    const double predicted = sim::allreduce_cost(t, sim::Algorithm::hierarchical, s.bytes).seconds;
    std::printf("check-accuracy link=%s delay=%s bytes=%.0f predicted_s=%.6f measured_s=%.6f ratio=%.3f\n",
                link_text.c_str(), delay_text.c_str(), s.bytes, predicted, s.seconds, predicted / s.seconds);
    // The goal holds where bandwidth dominates (gradient buckets); below
    // 1 MiB it does not: predicted / measured ranged from 0.32 to 2.66 at
    // 64 KiB between runs (bench/README.md, "cohortrun --check's
    // topology").
    if (s.bytes >= (1 << 20)) {
      EXPECT_NEAR(predicted / s.seconds, 1.0, 0.15) << s.bytes << " bytes\n" << r.out;
    }
  }
}

}  // namespace
}  // namespace cohort::testing
