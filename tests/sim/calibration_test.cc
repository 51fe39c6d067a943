// tools/sim/calibration.h: fits recover known parameters from samples the
// model generates; cohort-bench CSV is read as cohort-bench writes it.
#include "tools/sim/calibration.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "cohort/common/error.h"

namespace cohort::sim::calibration_test {
namespace {

TEST(Calibration, RecoversShmParametersFromModelSamples) {
  Topology t;
  t.ranks_per_host = 2;
  Topology truth = t;
  truth.shm = {1.7e-6, 3.3e9};
  std::vector<Sample> samples;
  for (double n = 8; n <= 64e6; n *= 4) samples.push_back({n, allreduce_cost(truth, Algorithm::shm, n).seconds});
  const LinkFit f = fit_link(t, Algorithm::shm, LinkClass::shm, samples);
  EXPECT_NEAR(f.link.alpha_s, 1.7e-6, 1e-12);
  EXPECT_NEAR(f.link.bytes_per_s, 3.3e9, 1e-3 * 3.3e9);
  EXPECT_LT(f.max_relative_error, 1e-9);
}

TEST(Calibration, RecoversTheNetworkUnderTheRingWithOthersFixed) {
  Topology t;
  t.hosts = 4;
  t.reduce_bytes_per_s = 4e9;  // known, not fitted
  Topology truth = t;
  truth.network = {4e-5, 1.19e8};
  std::vector<Sample> samples;
  for (double n = 1e3; n <= 1e8; n *= 3) samples.push_back({n, allreduce_cost(truth, Algorithm::ring, n).seconds});
  const LinkFit f = fit_link(t, Algorithm::ring, LinkClass::network, samples);
  EXPECT_NEAR(f.link.alpha_s, 4e-5, 1e-10);
  EXPECT_NEAR(f.link.bytes_per_s, 1.19e8, 1e-3 * 1.19e8);
}

TEST(Calibration, RecoversTheNetworksCpuCostsFromCpuSamples) {
  // CPU per rank and op that the model gives for known costs (bcube below
  // 1 MiB, the ring above): the fit finds them again, on the fitted link.
  Topology t;
  t.hosts = 2;
  t.network = {1.2e-4, 1.2e8};
  Topology truth = t;
  truth.network.cpu_step_s = 5e-5;  // below every op's time (capped there)
  truth.network.cpu_s_per_byte = 3e-10;
  std::vector<Sample> samples;
  for (double n = 1024; n <= 16e6; n *= 4) samples.push_back({n, allreduce_cost(truth, Algorithm::ring, n).cpu_s});
  const LinkFit f = fit_network_cpu(t, Algorithm::ring, samples);
  EXPECT_NEAR(f.link.cpu_step_s, 5e-5, 1e-11);
  EXPECT_NEAR(f.link.cpu_s_per_byte, 3e-10, 1e-16);
  EXPECT_EQ(f.link.alpha_s, 1.2e-4);  // the link itself as given
  EXPECT_LT(f.max_relative_error, 1e-9);
  // One host: no network CPU to fit.
  Topology one;
  one.ranks_per_host = 2;
  EXPECT_THROW(fit_network_cpu(one, Algorithm::ring, samples), ConfigError);
}

TEST(Calibration, NoisySamplesGiveTheirErrorAndPhysicalValues) {
  Topology t;
  t.ranks_per_host = 2;
  // Times that shrink with size cannot give a bandwidth.
  EXPECT_THROW(fit_link(t, Algorithm::shm, LinkClass::shm, {{100, 2e-3}, {1e6, 1e-3}}), ConfigError);
  EXPECT_THROW(fit_link(t, Algorithm::shm, LinkClass::shm, {{100, 1e-3}}), ConfigError);
  // The network does not matter on one host.
  EXPECT_THROW(fit_link(t, Algorithm::shm, LinkClass::network, {{100, 1e-3}, {1e6, 2e-3}}), ConfigError);
  // A constant latency floor plus noise: alpha stays non-negative.
  const LinkFit f = fit_link(t, Algorithm::shm, LinkClass::shm, {{8, 1e-6}, {1e6, 3.1e-4}, {4e6, 1.2e-3}});
  EXPECT_GE(f.link.alpha_s, 0);
  EXPECT_GT(f.max_relative_error, 0);
}

TEST(Calibration, ReadsCohortBenchCsv) {
  const std::string path = ::testing::TempDir() + "sim_bench.csv";
  {
    std::ofstream out(path);
    out << "collective,ranks,size_bytes,count,type,op,time_us,algbw_gbps,busbw_gbps,wrong,iters\n"
        << "allreduce,2,0,0,f32,sum,0.5,0,0,0,100\n"
        << "allreduce,2,8,2,f32,sum,1.25,0.006,0.006,0,100000\n"
        << "allgather,2,8,2,f32,none,9,0.001,0.001,0,100\n"
        << "[0] allreduce,2,1048576,262144,f32,sum,310.5,3.37,3.37,0,400\n";  // as cohortrun tags it
  }
  int ranks = 0;
  const auto s = read_bench_csv(path, "allreduce", ranks);
  EXPECT_EQ(ranks, 2);
  ASSERT_EQ(s.size(), 2u);  // the size-0 row is skipped
  EXPECT_EQ(s[0].bytes, 8);
  EXPECT_DOUBLE_EQ(s[1].seconds, 310.5e-6);
  {
    std::ofstream out(path);
    out << "collective,ranks,size_bytes\nallreduce,2,8\n";
  }
  try {
    read_bench_csv(path, "allreduce", ranks);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no column 'time_us'"), std::string::npos) << e.what();
  }
  {
    std::ofstream out(path);
    out << "collective,ranks,size_bytes,count,type,op,time_us\nallreduce,2,8,2,f32,sum,fast\n";
  }
  try {
    read_bench_csv(path, "allreduce", ranks);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cohort::sim::calibration_test
