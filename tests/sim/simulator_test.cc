// tools/sim/simulator.h: limits with closed forms (one op with no overlap,
// perfect overlap), the engine's fusion and pacing, DDP bucketing, CPU
// sharing, stragglers, jitter, and determinism.
#include "tools/sim/simulator.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cohort/common/error.h"
#include "cohort/engine/cycle_state.h"
#include "tools/sim/jitter.h"

namespace cohort::sim::simulator_test {
namespace {

constexpr double kA = 1e-5;     // network alpha
constexpr double kB = 1.25e8;   // network bytes/s (1 Gbit/s)

// p hosts of one rank, free copies, an engine that sleeps at once when idle
// and wakes instantly, so that every cost in a step has a closed form.
Topology net(int p) {
  Topology t;
  t.hosts = p;
  t.network = {kA, kB};
  t.ring_small_bytes = 0;
  t.ring_segment_bytes = int64_t(1) << 40;
  return t;
}

Strategy eager() {
  Strategy s;
  s.linger_s = 0;
  s.backend = "ring";
  return s;
}

Workload workload(std::vector<Tensor> tensors, double compute_end) {
  Workload w;
  w.name = "test";
  w.tensors = std::move(tensors);
  w.compute_end_s = compute_end;
  return w;
}

double ring(int p, double n) { return 2.0 * (p - 1) / p * n / kB + 2.0 * (p - 1) * kA; }

// The cycle record allgather (ring, p-1 steps) for `slots` cache slots.
double record_allgather(int p, size_t slots) {
  const double bytes = 8.0 * double(engine::cycle_state_words((slots + 63) / 64));
  return (p - 1) * (kA + bytes / kB);
}

TEST(Simulator, OneOpWithNoOverlapIsComputePlusItsCollective) {
  for (int p : {2, 4, 16}) {
    const double compute = 0.050, n = 4e6;
    // The gradient is ready when backward ends: nothing can overlap.
    const Workload w = workload({{"g", n, compute}}, compute);
    const Prediction pr = simulate(net(p), w, eager());
    const double expected = compute + record_allgather(p, 1) + ring(p, n);
    EXPECT_NEAR(pr.step_s, expected, 1e-9) << p;
    EXPECT_NEAR(pr.exposed_s, expected - compute, 1e-9);
    EXPECT_NEAR(pr.efficiency, compute / expected, 1e-9);
  }
}

TEST(Simulator, PerfectOverlapWhenComputeDominates) {
  // Ten gradients 10 ms apart, each reduced in well under 10 ms: only the
  // last one's reduction shows.
  const int p = 8;
  const double n = 1e5;
  std::vector<Tensor> ts;
  for (int i = 0; i < 10; ++i) ts.push_back({"g" + std::to_string(i), n, 0.010 * (i + 1)});
  const Workload w = workload(ts, 0.100);
  const Prediction pr = simulate(net(p), w, eager());
  const double last = record_allgather(p, 10) + ring(p, n);
  ASSERT_LT(last, 0.010);
  EXPECT_NEAR(pr.step_s, 0.100 + last, 1e-9);
  EXPECT_NEAR(pr.comm_s, 10 * ring(p, n), 1e-9);
  EXPECT_NEAR(pr.collectives, 10, 0);
}

TEST(Simulator, OneRankHasNoCommunicationCost) {
  const Workload w = workload({{"a", 1e6, 0.01}, {"b", 1e6, 0.02}}, 0.03);
  const Prediction pr = simulate(net(1), w, eager());
  EXPECT_NEAR(pr.step_s, 0.03, 1e-12);
  EXPECT_NEAR(pr.efficiency, 1, 1e-12);
}

// One rank on free links with no cycle overhead: every cycle takes no time.
// The last gradient is ready a rounding error before backward ends, a gap
// that later steps' clock cannot hold (the compute's next event is "now"):
// the idle engine must wait for the next submission or the linger's end;
// it used to run empty cycles at that instant without end (ctest's timeout
// ends this test if it comes back).
TEST(Simulator, ZeroLengthIdleCyclesWaitForTheNextSubmission) {
  Topology t;
  t.hosts = 1;
  for (double end : {0.1, 0.3, 1.1}) {
    const Workload w = workload({{"a", 1e6, end / 3}, {"b", 1e6, std::nextafter(end, 0.0)}}, end);
    const Prediction pr = simulate(t, w, Strategy{});  // lingers 1 ms, no cycle time
    EXPECT_NEAR(pr.step_s, end, 1e-12) << end;         // nothing costs: the step is its compute
    EXPECT_NEAR(pr.exposed_s, 0, 1e-12) << end;
  }
}

TEST(Simulator, FusionRunsReadyOpsAsOneCollective) {
  // Four 100 KB gradients ready together: one 400 KB collective when the
  // threshold holds them, four otherwise.
  std::vector<Tensor> ts;
  for (int i = 0; i < 4; ++i) ts.push_back({"g" + std::to_string(i), 1e5, 0.02});
  const Workload w = workload(ts, 0.02);
  Strategy s = eager();
  s.fusion_threshold_bytes = 1 << 20;
  const Prediction fused = simulate(net(4), w, s);
  s.fusion_threshold_bytes = 0;
  const Prediction unfused = simulate(net(4), w, s);
  EXPECT_EQ(fused.collectives, 1);
  EXPECT_EQ(unfused.collectives, 4);
  EXPECT_NEAR(fused.step_s, 0.02 + record_allgather(4, 4) + ring(4, 4e5), 1e-9);
  EXPECT_NEAR(unfused.step_s, 0.02 + record_allgather(4, 4) + 4 * ring(4, 1e5), 1e-9);
}

TEST(Simulator, CycleTimePacesCycles) {
  // An engine that never sleeps cycles back to back (one record allgather
  // each); with a cycle time, a cycle starts no sooner than that after the
  // one before, so a step has at most step / cycle time + 2 of them, and an
  // op waits at most one cycle time for its cycle.
  const Workload w = workload({{"a", 1e3, 0.010}, {"b", 1e3, 0.0101}}, 0.0101);
  Strategy s = eager();
  s.linger_s = 1;
  const Prediction free_running = simulate(net(2), w, s);
  s.cycle_time_s = 0.005;
  const Prediction paced = simulate(net(2), w, s);
  EXPECT_GT(free_running.cycles, 0.010 / record_allgather(2, 2) / 2);
  EXPECT_LE(paced.cycles, paced.step_s / 0.005 + 2);
  const double floor = 0.0101 + record_allgather(2, 2) + ring(2, 1e3);
  EXPECT_GE(paced.step_s, floor - 1e-12);
  EXPECT_LE(paced.step_s, floor + 0.005 + ring(2, 1e3) + record_allgather(2, 2));
}

TEST(Simulator, SleepingEngineWakesAfterTheDoorbell) {
  Topology t = net(2);
  t.wake_s = 3e-4;
  const Workload w = workload({{"g", 1e4, 0.01}}, 0.01);
  const Prediction pr = simulate(t, w, eager());
  EXPECT_NEAR(pr.step_s, 0.01 + 3e-4 + record_allgather(2, 1) + ring(2, 1e4), 1e-9);
}

TEST(Simulator, DdpBucketsFollowCohortsRule) {
  // Reverse-order arrivals: 0.4 MB, 0.4 MB, 0.4 MB fill the first 1 MiB
  // bucket (1.2 MB >= 1 MiB); 30 MB fills a bucket alone; 1 MB and 2 MB share one.
  const std::vector<double> bytes = {4e5, 4e5, 4e5, 3e7, 1e6, 2e6};
  const auto b = assign_buckets(bytes, 1 << 20, 25 << 20);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(b[1], (std::vector<size_t>{3}));
  EXPECT_EQ(b[2], (std::vector<size_t>{4, 5}));
  // A big tensor closes the open bucket first.
  const auto c = assign_buckets({1e5, 3e7, 1e5}, 1 << 20, 25 << 20);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], (std::vector<size_t>{0}));
  EXPECT_EQ(c[1], (std::vector<size_t>{1}));
}

TEST(Simulator, DdpRunsBucketsInOrderUnfused) {
  std::vector<Tensor> ts;
  for (int i = 0; i < 6; ++i) ts.push_back({"p" + std::to_string(i), 4e5, 0.01 * (i + 1)});
  const Workload w = workload(ts, 0.06);
  Strategy s = eager();
  s.mode = Mode::ddp;
  s.first_bucket_bytes = 1 << 20;  // 3 x 0.4 MB close it
  s.bucket_bytes = 1 << 20;
  const Prediction pr = simulate(net(2), w, s);
  EXPECT_EQ(pr.collectives, 2);
  // The second bucket is ready with the last gradient, at the end of compute.
  EXPECT_NEAR(pr.step_s, 0.06 + record_allgather(2, 0) + ring(2, 1.2e6), 1e-9);
}

TEST(Simulator, CompressionHalvesTheWire) {
  const Workload w = workload({{"g", 8e6, 0.01}}, 0.01);
  Strategy s = eager();
  s.compress_fp16 = true;
  const Prediction pr = simulate(net(2), w, s);
  EXPECT_NEAR(pr.step_s, 0.01 + record_allgather(2, 1) + ring(2, 4e6), 1e-9);
}

TEST(Simulator, OversubscribedCoresSlowCompute) {
  Topology t;
  t.ranks_per_host = 4;
  t.cores_per_host = 2;
  const Workload w = workload({{"g", 0, 0.01}}, 0.01);
  const Prediction pr = simulate(t, w, eager());
  EXPECT_NEAR(pr.compute_s, 0.02, 1e-12);
  EXPECT_NEAR(pr.step_s, 0.02, 1e-9);
  EXPECT_NEAR(pr.efficiency, 0.5, 1e-9);
}

TEST(Simulator, BackgroundLoadSharesTheCores) {
  // 4 background threads on 2 cores: the workload, measured on one rank
  // under that load, ran at 2/5 of a core; 4 ranks get 2/8 each.
  Topology t;
  t.cores_per_host = 2;
  t.background_threads = 4;
  const Workload w = workload({{"g", 0, 0.01}}, 0.01);
  EXPECT_NEAR(simulate(t, w, eager()).step_s, 0.01, 1e-12);
  t.ranks_per_host = 4;
  const Prediction pr = simulate(t, w, eager());
  EXPECT_NEAR(pr.compute_s, 0.01 * (2.0 / 5) / (2.0 / 8), 1e-12);
  EXPECT_NEAR(pr.step_s, 0.016, 1e-9);
  // Without cores to share (accelerators), the load changes nothing.
  t.cores_per_host = 0;
  EXPECT_NEAR(simulate(t, w, eager()).step_s, 0.01, 1e-12);
}

TEST(Simulator, CpuBoundCommunicationSharesCoresWithCompute) {
  // Two ranks on two cores, shm costing 10 ms of CPU for the first gradient
  // (ready at 10 ms), compute running on to 40 ms: while both run, each gets
  // half a core. Compute has 30 ms left at t=10 ms, shm 10 ms: shm ends at
  // 30 ms (20 ms at half speed), compute has then done 10 ms of its 30 and
  // ends at 50 ms at full speed; the last gradient (ready at 40 ms of
  // compute) costs nothing.
  Topology t;
  t.ranks_per_host = 2;
  t.cores_per_host = 2;
  t.shm = {0, 1e6};
  const Workload w = workload({{"a", 1e4, 0.010}, {"b", 0, 0.040}}, 0.040);
  Strategy s = eager();
  s.backend = "shm";
  const Prediction pr = simulate(t, w, s);
  // Plus the last cycle's record allgather on shm (one step, half of two
  // records over the bus), which runs after compute.
  const double record = 8.0 * double(engine::cycle_state_words(1));
  EXPECT_NEAR(pr.step_s, 0.050 + 0.5 * 2 * record / 1e6, 1e-9);
}

TEST(Simulator, StragglerSetsThePace) {
  Topology t = net(4);
  t.stragglers = {{2, 1.5}};
  const Workload w = workload({{"g", 1e5, 0.02}}, 0.02);
  const Prediction pr = simulate(t, w, eager());
  EXPECT_NEAR(pr.step_s, 0.03 + record_allgather(4, 1) + ring(4, 1e5), 1e-9);
  // A straggler beyond the job's ranks is no straggler.
  t.stragglers = {{7, 3}};
  EXPECT_NEAR(simulate(t, w, eager()).step_s, 0.02 + record_allgather(4, 1) + ring(4, 1e5), 1e-9);
}

TEST(Simulator, TheSlowestRanksJitterSetsThePace) {
  // Five measured periods; their median is 1.1, and the median of the
  // slowest of R is their 0.5^(1/R) quantile, linear between order
  // statistics: R = 2 at 0.7071 (index 2.828), R = 4 at 0.8409 (3.364).
  const std::vector<double> periods = {1.3, 0.9, 1.1, 1.0, 1.2};
  EXPECT_DOUBLE_EQ(slowest_of(periods, 1), 1.0);
  const double two = (1.1 + (4 * std::sqrt(0.5) - 2) * 0.1) / 1.1;
  const double four = (1.2 + (4 * std::pow(0.5, 0.25) - 3) * 0.1) / 1.1;
  EXPECT_NEAR(slowest_of(periods, 2), two, 1e-12);
  EXPECT_NEAR(slowest_of(periods, 4), four, 1e-12);
  // Far beyond the sample: just short of the largest period measured.
  EXPECT_NEAR(slowest_of(periods, 1000), (1.2 + (4 * std::pow(0.5, 0.001) - 3) * 0.1) / 1.1, 1e-12);
  EXPECT_LT(slowest_of(periods, 1000), 1.3 / 1.1);
  EXPECT_DOUBLE_EQ(slowest_of({}, 8), 1.0);
  EXPECT_DOUBLE_EQ(slowest_of({0.5}, 8), 1.0);

  // Two ranks' step: every compute time stretched by the factor.
  Workload w = workload({{"g", 1e5, 0.02}}, 0.02);
  w.step_periods_s = periods;
  const double comm = record_allgather(2, 1) + ring(2, 1e5);
  EXPECT_NEAR(simulate(net(2), w, eager()).step_s, 0.02 * two + comm, 1e-9);
  // One rank waits for nobody.
  EXPECT_NEAR(simulate(net(1), w, eager()).step_s, 0.02, 1e-9);
  // A straggler further behind than the jitter sets the pace alone.
  Topology t = net(2);
  t.stragglers = {{1, 1.5}};
  EXPECT_NEAR(simulate(t, w, eager()).step_s, 0.03 + comm, 1e-9);
  // Parameter-server workers wait for the slowest of them too.
  Workload u = workload({{"g", 8e6, 0.060}}, 0.060);
  Topology ps;
  ps.ranks_per_host = 3;
  ps.ps = {3e-5, 1e9};
  ps.reduce_bytes_per_s = 4e9;
  const Strategy s{.mode = Mode::parameter_server};
  const double still = simulate(ps, u, s).step_s;
  u.step_periods_s = periods;
  EXPECT_NEAR(simulate(ps, u, s).step_s - still, 0.060 * (two - 1), 1e-9);
}

TEST(Simulator, DeterministicBitForBit) {
  std::vector<Tensor> ts;
  for (int i = 0; i < 50; ++i) ts.push_back({"t" + std::to_string(i), 1e4 * (i % 7 + 1), 0.001 * i + 0.003});
  const Workload w = workload(ts, 0.06);
  Topology t = net(8);
  t.ranks_per_host = 4;
  t.shm = {2e-6, 3e9};
  t.intra = {5e-6, 2e9};
  t.cores_per_host = 4;
  t.wake_s = 1e-4;
  Strategy s;
  s.cycle_time_s = 1e-4;
  const Prediction a = simulate(t, w, s), b = simulate(t, w, s);
  ASSERT_EQ(a.step_times.size(), b.step_times.size());
  for (size_t i = 0; i < a.step_times.size(); ++i) EXPECT_EQ(a.step_times[i], b.step_times[i]);
  EXPECT_EQ(a.cycles, b.cycles);
  EXPECT_EQ(a.nic_utilisation, b.nic_utilisation);
}

TEST(Simulator, EfficiencyFallsAsTheRingGrows) {
  std::vector<Tensor> ts;
  for (int i = 0; i < 20; ++i) ts.push_back({"t" + std::to_string(i), 2e6, 0.005 * (i + 1)});
  const Workload w = workload(ts, 0.1);
  double last = 2;
  for (int p : {2, 8, 32, 128, 512}) {
    const double e = simulate(net(p), w, Strategy{.backend = "ring"}).efficiency;
    EXPECT_LE(e, last + 1e-12) << p;
    last = e;
  }
}

// ---- ZeRO and parameter servers -------------------------------------------

double ring_half(int p, double n) { return (p - 1) * (kA + n / p / kB); }

Strategy zero(int stage) {
  Strategy s = eager();
  s.mode = Mode::zero;
  s.zero_stage = stage;
  return s;
}

TEST(Simulator, ZeroStageOneExposesItsGatherWhenTheForwardStartsWithIt) {
  // One bucket, ready when backward ends, needed as the forward starts:
  // the gather (at the step's start), the compute, the reduce-scatter and
  // this rank's 1/p of the update, one after the other. The two halves
  // move what one allreduce does.
  for (int p : {2, 4, 16}) {
    const double compute = 0.050, n = 4e6, update = 0.008;
    Workload w = workload({{"g", n, compute}}, compute);
    w.forward_s = 0;
    w.update_s = update;
    const Prediction pr = simulate(net(p), w, zero(1));
    const double expected = compute + 2 * record_allgather(p, 0) + ring(p, n) + update / p;
    EXPECT_NEAR(pr.step_s, expected, 1e-9) << p;
    EXPECT_EQ(pr.collectives, 2);
    EXPECT_NEAR(simulate(net(p), w, zero(2)).step_s, expected, 1e-9);  // the same collectives
  }
}

TEST(Simulator, ZeroGathersTheFirstLayersFirstAndTheRestUnderTheForward) {
  // Two buckets: "late" (the first layer: backward's last gradient) and
  // "early". Both gathers start the step, the first layers' first; the
  // forward waits for that one only, since it reaches the other's layer a
  // third of the way in, after its gather is done. The early bucket's
  // reduce-scatter hides under the rest of backward; the late one's shows.
  const int p = 4;
  const double n_early = 2e5, n_late = 4e5, compute = 0.090;
  Workload w = workload({{"early.w", n_early, 0.040}, {"late.w", n_late, compute}}, compute);
  w.forward_s = 0.030;
  Strategy s = zero(2);
  s.bucket_bytes = int64_t(n_late);  // one tensor per bucket
  const Prediction pr = simulate(net(p), w, s);
  const double neg = record_allgather(p, 0);
  ASSERT_LT(neg + ring_half(p, n_late) + ring_half(p, n_early), 0.030 * n_late / (n_late + n_early));
  EXPECT_NEAR(pr.step_s, neg + ring_half(p, n_late) + compute + neg + ring_half(p, n_late), 1e-9);
  EXPECT_EQ(pr.collectives, 4);
  // Without room in the forward (forward_s 0), the second gather shows too.
  w.forward_s = 0;
  EXPECT_NEAR(simulate(net(p), w, s).step_s, pr.step_s + ring_half(p, n_early), 1e-9);
}

TEST(Simulator, ZeroStageThreeGathersEachUnitTwiceAndBackwardWaitsForIt) {
  // Two units of one layer each. Forward: the first unit's gather starts
  // the step, the second's is prefetched under the first's compute. The
  // second (last) unit stays gathered into backward; once its gradient is
  // ready, the first unit's gather goes out again, and backward waits for
  // it, then its reduce-scatter hides under the first unit's backward; the
  // first unit's own reduce-scatter ends the step. 3 x 2 - 1 collectives.
  const int p = 4;
  const double n = 4e5, compute = 0.090;
  Workload w = workload({{"last.weight", n, 0.040}, {"first.weight", n, compute}}, compute);
  w.forward_s = 0.030;
  Strategy s = zero(3);
  s.unit_bytes = 1;  // every layer its own unit
  const Prediction pr = simulate(net(p), w, s);
  const double neg = record_allgather(p, 0), half = ring_half(p, n);
  EXPECT_NEAR(pr.step_s, compute + 2 * (neg + half) + neg + half, 1e-9);
  EXPECT_EQ(pr.collectives, 5);
  // Joined into one unit (as unit_bytes joins small layers): one gather,
  // kept from forward to backward, and one reduce-scatter.
  s.unit_bytes = int64_t(1) << 30;
  const Prediction joined = simulate(net(p), w, s);
  EXPECT_EQ(joined.collectives, 2);
  EXPECT_NEAR(joined.step_s, compute + 2 * neg + ring_half(p, 2 * n) * 2, 1e-9);
}

TEST(Simulator, ParameterServerStepIsComputePushSumPullUpdate) {
  const double n = 8e6, compute = 0.060, update = 0.010;
  Workload w = workload({{"a", n / 2, 0.030}, {"b", n / 2, compute}}, compute);
  w.update_s = update;
  for (int workers : {1, 3}) {
    Topology t;
    t.ranks_per_host = workers + 1;
    t.ps = {3e-5, 1e9};
    t.reduce_bytes_per_s = 4e9;
    Strategy s{.mode = Mode::parameter_server};
    const Prediction program = simulate(t, w, s);
    const double exchange = 3e-5 + workers * n / 1e9;
    EXPECT_NEAR(program.step_s, compute + 2 * exchange + workers * n / 4e9 + update, 1e-9) << workers;
    // The servers' optimizer: the update moves to the (one) server.
    s.ps_servers_update = true;
    EXPECT_NEAR(simulate(t, w, s).step_s, program.step_s, 1e-9);
    EXPECT_NEAR(program.efficiency, (compute + update) / program.step_s, 1e-12);
  }
  Topology t;
  t.ranks_per_host = 2;
  EXPECT_THROW(simulate(t, w, Strategy{.mode = Mode::parameter_server, .ps_servers = 2}), ConfigError);
}

TEST(Simulator, BadStrategiesAreConfigErrors) {
  const Workload w = workload({{"g", 1, 0.01}}, 0.01);
  EXPECT_THROW(simulate(net(2), w, Strategy{.fusion_threshold_bytes = -1}), ConfigError);
  EXPECT_THROW(simulate(net(2), w, Strategy{.backend = "bogus"}), ConfigError);
  EXPECT_THROW(simulate(net(2), w, Strategy{}, SimOptions{.steps = 1, .warmup = 1}), ConfigError);
  EXPECT_THROW(simulate(net(2), Workload{}, Strategy{}), ConfigError);
  EXPECT_THROW(simulate(net(2), w, Strategy{.mode = Mode::zero, .zero_stage = 4}), ConfigError);
  EXPECT_THROW(simulate(net(2), w, Strategy{.mode = Mode::zero, .compress_fp16 = true}), ConfigError);
  EXPECT_THROW(mode_from_name("allreduce"), ConfigError);
  EXPECT_EQ(mode_from_name(mode_name(Mode::parameter_server)), Mode::parameter_server);
}

}  // namespace
}  // namespace cohort::sim::simulator_test
