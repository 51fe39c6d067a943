// Topology and workload files: what they mean, and errors that name the
// offending field and its position.
#include <gtest/gtest.h>

#include <string>

#include "cohort/common/error.h"
#include "cohort/common/json.h"
#include "tools/sim/topology.h"
#include "tools/sim/workload.h"

namespace cohort::sim::inputs_test {
namespace {

std::string topology_error(const std::string& text) {
  try {
    read_topology(json::parse(text, "topo.json"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string workload_error(const std::string& text) {
  try {
    read_workload(json::parse(text, "work.json"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MENTIONS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

TEST(TopologyFile, ReadsEveryField) {
  const Topology t = read_topology(json::parse(R"({
    "hosts": 4, "ranks_per_host": 2,
    "links": {"shm": {"alpha_s": 2e-6, "bytes_per_s": 3.4e9, "by_ranks": [{"ranks": 4, "alpha_s": 1e-5, "bytes_per_s": 2e9}]},
              "intra": {"alpha_s": 1e-5, "bytes_per_s": 2e9}, "ps": {"alpha_s": 4e-5, "bytes_per_s": 1.1e9},
              "network": {"alpha_s": 5e-5, "bytes_per_s": 1.25e8, "cpu_step_s": 1.3e-4, "cpu_s_per_byte": 6e-10}},
    "reduce_bytes_per_s": 6e9, "copy_bytes_per_s": 7e9,
    "algorithms": {"shm_slot_bytes": 65536, "ring_small_bytes": 0},
    "cpu": {"cores_per_host": 2, "one_machine": true, "background_threads": 12.5},
    "engine": {"cycle_overhead_s": 1e-6, "wake_s": 2e-4},
    "stragglers": [{"rank": 3, "compute_factor": 1.25}]})"));
  EXPECT_EQ(t.ranks(), 8);
  EXPECT_EQ(t.shm.bytes_per_s, 3.4e9);
  EXPECT_EQ(t.shm_for(4).alpha_s, 1e-5);
  EXPECT_EQ(t.shm_for(2).alpha_s, 2e-6);
  EXPECT_EQ(t.network.alpha_s, 5e-5);
  EXPECT_EQ(t.network.cpu_step_s, 1.3e-4);
  EXPECT_EQ(t.network.cpu_s_per_byte, 6e-10);
  EXPECT_EQ(t.ps.bytes_per_s, 1.1e9);
  EXPECT_EQ(t.shm_slot_bytes, 65536);
  EXPECT_EQ(t.ring_small_bytes, 0);
  EXPECT_EQ(t.shm_small_bytes, 16 << 10);  // default kept
  EXPECT_TRUE(t.one_machine);
  EXPECT_EQ(t.ranks_per_machine(), 8);
  EXPECT_EQ(t.background_threads, 12.5);
  EXPECT_EQ(t.wake_s, 2e-4);
  ASSERT_EQ(t.stragglers.size(), 1u);
  EXPECT_EQ(t.stragglers[0].compute_factor, 1.25);
  // What topology_json writes reads back the same.
  const Topology u = read_topology(json::parse(topology_json(t)));
  EXPECT_EQ(topology_json(u), topology_json(t));
}

TEST(TopologyFile, ErrorsNameTheField) {
  EXPECT_MENTIONS(topology_error(R"({"links": {"network": {"alpha_s": -1}}})"), "links.network.alpha_s: must not be negative");
  EXPECT_MENTIONS(topology_error(R"({"links": {"network": {"alpha_s": -1}}})"), "topo.json:1:35");
  EXPECT_MENTIONS(topology_error(R"({"links": {"network": {"bytes_per_s": 0}}})"), "links.network.bytes_per_s: must be positive");
  EXPECT_MENTIONS(topology_error(R"({"links": {"network": {"cpu_step_s": -1e-4}}})"),
                  "links.network.cpu_step_s: must not be negative");
  EXPECT_MENTIONS(topology_error(R"({"hosts": 2.5})"), "hosts: must be an integer");
  EXPECT_MENTIONS(topology_error(R"({"hosts": "two"})"), "hosts: expected an integer, got a string");
  EXPECT_MENTIONS(topology_error(R"({"host": 2})"), "host: unknown field");
  EXPECT_MENTIONS(topology_error(R"({"links": {"netwrok": {}}})"), "links.netwrok: unknown field");
  EXPECT_MENTIONS(topology_error(R"({"stragglers": [{"rank": 1}]})"), "stragglers[0]: missing field 'compute_factor'");
  EXPECT_MENTIONS(topology_error(R"({"stragglers": {"rank": 1}})"), "stragglers: expected an array");
  EXPECT_MENTIONS(topology_error(R"({"cpu": {"one_machine": 1}})"), "cpu.one_machine: expected true or false");
  EXPECT_MENTIONS(topology_error(R"({"cpu": {"background_threads": -2}})"), "cpu.background_threads: must not be negative");
  EXPECT_MENTIONS(topology_error(R"({"links": {"shm": {"by_ranks": [{"ranks": 2}, {"ranks": 2}]}}})"), "given twice");
  EXPECT_MENTIONS(topology_error(R"([1])"), "expected an object, got an array");
  EXPECT_MENTIONS(topology_error(R"({"hosts": 2,})"), "topo.json:1:13");
}

TEST(WorkloadFile, LayersBecomeTensorsReadyAsBackwardReachesThem) {
  // Three layers in forward order, backward weights 1, 2, 1 of 40 ms after a
  // 10 ms forward: backward runs layer 2 (ready at 10 + 10), then layer 1
  // (10 + 30), then layer 0 (10 + 40).
  const Workload w = read_workload(json::parse(R"({"name": "m", "forward_s": 0.010, "backward_s": 0.040,
    "update_s": 0.002, "layers": [
      {"name": "l0", "params": [100, 10], "backward_weight": 1},
      {"name": "l1", "params": 200, "backward_weight": 2},
      {"name": "l2", "params": 300}]})"));
  ASSERT_EQ(w.tensors.size(), 4u);
  EXPECT_EQ(w.tensors[0].name, "l2");
  EXPECT_DOUBLE_EQ(w.tensors[0].ready_s, 0.020);
  EXPECT_EQ(w.tensors[0].bytes, 1200);
  EXPECT_EQ(w.tensors[1].name, "l1");
  EXPECT_DOUBLE_EQ(w.tensors[1].ready_s, 0.040);
  EXPECT_EQ(w.tensors[2].name, "l0.0");
  EXPECT_EQ(w.tensors[3].name, "l0.1");
  EXPECT_DOUBLE_EQ(w.tensors[3].ready_s, 0.050);
  EXPECT_DOUBLE_EQ(w.compute_end_s, 0.050);
  EXPECT_DOUBLE_EQ(w.update_s, 0.002);
  EXPECT_EQ(w.total_bytes(), 2440);
  // ZeRO stage 3's units are the layers; the forward pass is as given.
  EXPECT_EQ(w.tensors[2].unit, "l0");
  EXPECT_EQ(w.tensors[3].unit, "l0");
  EXPECT_DOUBLE_EQ(w.forward_or_estimate(), 0.010);
}

TEST(WorkloadFile, TensorsBelongToTheirLayersAndTheForwardIsEstimatedWhenNotRecorded) {
  const Workload w = read_workload(json::parse(R"({"tensors": [
      {"name": "grad/4.weight", "bytes": 8, "ready_s": 0.05}, {"name": "grad/4.bias", "bytes": 4, "ready_s": 0.05},
      {"name": "table", "bytes": 4, "ready_s": 0.07, "unit": "embedding"}, {"name": "x", "bytes": 4, "ready_s": 0.09}],
      "compute_end_s": 0.09})"));
  EXPECT_EQ(w.tensors[0].unit, "grad/4");
  EXPECT_EQ(w.tensors[1].unit, "grad/4");
  EXPECT_EQ(w.tensors[2].unit, "embedding");
  EXPECT_EQ(w.tensors[3].unit, "x");
  EXPECT_EQ(w.forward_s, -1);
  EXPECT_DOUBLE_EQ(w.forward_or_estimate(), 0.03);  // a third of the compute, before the first gradient
  Workload recorded = w;
  recorded.forward_s = 0.02;
  const Workload back = read_workload(json::parse(workload_json(recorded)));
  EXPECT_DOUBLE_EQ(back.forward_or_estimate(), 0.02);
  EXPECT_EQ(back.tensors[2].unit, "embedding");
  EXPECT_EQ(workload_json(back), workload_json(recorded));
}

TEST(WorkloadFile, TensorsRoundTrip) {
  const Workload w = read_workload(json::parse(R"({"name": "t", "ordered": true, "measured_step_s": 0.1,
    "step_periods_s": [0.1, 0.12, 0.09],
    "tensors": [{"name": "b", "bytes": 8, "ready_s": 0.02}, {"name": "a", "bytes": 4, "ready_s": 0.01}]})"));
  ASSERT_EQ(w.tensors.size(), 2u);
  EXPECT_EQ(w.tensors[0].name, "a");  // sorted by readiness
  EXPECT_TRUE(w.ordered);
  EXPECT_DOUBLE_EQ(w.compute_end_s, 0.02);
  EXPECT_EQ(w.step_periods_s, (std::vector<double>{0.1, 0.12, 0.09}));
  const Workload u = read_workload(json::parse(workload_json(w)));
  EXPECT_EQ(workload_json(u), workload_json(w));
}

TEST(WorkloadFile, ErrorsNameTheField) {
  EXPECT_MENTIONS(workload_error(R"({"tensors": [{"name": "a", "bytes": -4, "ready_s": 0}]})"),
                  "tensors[0].bytes: must not be negative");
  EXPECT_MENTIONS(workload_error(R"({"tensors": [{"name": "a", "bytes": 4}]})"), "tensors[0]: missing field 'ready_s'");
  EXPECT_MENTIONS(workload_error(R"({"tensors": []})"), "tensors: expected a non-empty array");
  EXPECT_MENTIONS(workload_error(R"({"step_periods_s": 0.1, "tensors": [{"name": "a", "bytes": 1, "ready_s": 0}]})"),
                  "step_periods_s: expected an array of step periods in seconds");
  EXPECT_MENTIONS(
      workload_error(R"({"step_periods_s": [0.1, 0], "tensors": [{"name": "a", "bytes": 1, "ready_s": 0}]})"),
      "step_periods_s[1]: expected a positive number of seconds");
  EXPECT_MENTIONS(workload_error(R"({"tensors": [{"name": "a", "bytes": 1, "ready_s": 0}, {"name": "a", "bytes": 1, "ready_s": 1}]})"),
                  "'a' appears twice");
  EXPECT_MENTIONS(workload_error(R"({"tensors": [{"name": "a", "bytes": 1, "ready_s": 1}], "compute_end_s": 0.5})"),
                  "compute_end_s: must not be before");
  EXPECT_MENTIONS(workload_error(R"({"name": "x"})"), "exactly one of 'tensors'");
  EXPECT_MENTIONS(workload_error(R"({"forward_s": 1, "backward_s": 1, "layers": [{"name": "l", "params": "big"}]})"),
                  "layers[0].params: expected a number or an array");
  EXPECT_MENTIONS(workload_error(R"({"forward_s": 1, "backward_s": 1, "layers": [{"name": "l", "params": [1, -2]}]})"),
                  "layers[0].params[1]");
  EXPECT_MENTIONS(workload_error(R"({"backward_s": 1, "layers": [{"name": "l", "params": 1}]})"), "missing field 'forward_s'");
  EXPECT_MENTIONS(workload_error(R"({"tensors": [{"name": "a", "bytes": 1, "ready_s": 0}], "treads": 2})"),
                  "treads: unknown field");
  EXPECT_MENTIONS(workload_error(R"({"tensors": [{"name": "a", "bytes": 1, "ready_s": 0.1}], "forward_s": 0.2})"),
                  "forward_s: must be between 0 and the first tensor's ready_s");
}

}  // namespace
}  // namespace cohort::sim::inputs_test
