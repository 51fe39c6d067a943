// cohort-plan's search on synthetic inputs whose answer is known from the
// model's shape, its errors, and the simulator's mesh model against the
// closed form of a pipeline's bubble.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/common/json.h"
#include "cohort/common/plan_file.h"
#include "tools/plan/planner.h"
#include "tools/plan/report.h"
#include "tools/sim/mesh.h"

namespace cohort::plan {
namespace {

#define EXPECT_MENTIONS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

// One machine's links (bandwidths in bytes/s): a fast shm bus, point to
// point inside the host; the network comes from each machine type.
constexpr const char* kLinks = R"({"links": {"shm": {"alpha_s": 2e-6, "bytes_per_s": 5e9},
  "intra": {"alpha_s": 5e-6, "bytes_per_s": 4e9}, "ps": {"alpha_s": 2e-5, "bytes_per_s": 2e9}},
  "reduce_bytes_per_s": 8e9, "copy_bytes_per_s": 8e9})";

std::string machine(const std::string& name, int cores, double memory, double net, double price, int available,
                    double speedup = 1) {
  char b[512];
  std::snprintf(b, sizeof b,
                R"({"name": "%s", "cores": %d, "memory_bytes": %g, "network_bytes_per_s": %g, "network_latency_s": 5e-5,
                    "price_per_hour": %g, "available": %d, "compute_speedup": %g})",
                name.c_str(), cores, memory, net, price, available, speedup);
  return b;
}

Catalogue catalogue(const std::string& types) {
  return read_catalogue(
      json::parse(std::string("{\"topology\": ") + kLinks + ", \"machine_types\": [" + types + "]}", "cat.json"),
      "cat.json");
}

// A model of `tensors` equal gradients of `bytes` each, its backward taking
// `compute_s` at `batch` examples (gradients ready evenly over it after a
// third of forward), memory as given.
Profile profile(int tensors, double bytes, double compute_s, double batch, double params, double optimizer,
                double activation, const std::string& stages = "") {
  std::string w = R"({"name": "synthetic", "update_s": 0, "tensors": [)";
  for (int i = 0; i < tensors; ++i) {
    char b[160];
    std::snprintf(b, sizeof b, R"(%s{"name": "grad/%d.weight", "bytes": %g, "ready_s": %g})", i ? ", " : "",
                  tensors - i, bytes, compute_s * (1.0 / 3 + (2.0 / 3) * (i + 1) / tensors));
    w += b;
  }
  w += "]}";
  char m[256];
  std::snprintf(m, sizeof m, R"({"parameter_bytes": %g, "optimizer_bytes": %g, "activation_bytes_per_example": %g})",
                params, optimizer, activation);
  const std::string doc = std::string(R"({"name": "synthetic", "workload": )") + w + R"(, "batch_per_rank": )" +
                          std::to_string(batch) + R"(, "memory": )" + m +
                          (stages.empty() ? "" : ", \"stages\": " + stages) + "}";
  return read_profile(json::parse(doc, "profile.json"), "profile.json");
}

Result plan(const Profile& p, const Catalogue& c, Job job, SearchOptions o = {}) { return search(p, c, job, o); }

// The ConfigError `run` throws ("" when none).
template <typename Run>
std::string error_of(Run run) {
  try {
    run();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string search_error(const Profile& p, const Catalogue& c, Job job, SearchOptions o) {
  return error_of([&] { search(p, c, job, o); });
}

// Compute-bound: a second of backward per 32 examples, 4 KiB of gradients.
// Every rank divides the batch; communication is negligible: the most ranks.
TEST(Planner, ComputeBoundModelTakesTheMostRanks) {
  const Profile p = profile(4, 1024, 1.0, 32, 4096, 8192, 1e4);
  const Catalogue c = catalogue(machine("cpu4", 4, 64e9, 1.25e9, 1.0, 16));
  const Result r = plan(p, c, {.global_batch = 1024, .steps = 100});
  const Plan& best = r.plans.front();
  EXPECT_EQ(best.config.ranks(), 64) << describe(best.config);
  EXPECT_EQ(best.bottleneck, "compute");
  // Its step is the compute of 1024 / 64 = 16 examples (0.5 s per 16) and
  // little more.
  EXPECT_NEAR(best.step_s, 0.5, 0.05);
}

// Communication-bound: 256 MiB of gradients, 10 ms of compute per step of
// 64 examples, a 100 MB/s network: spreading over machines costs more than
// it saves: one machine.
TEST(Planner, CommunicationBoundModelStaysOnOneMachine) {
  const Profile p = profile(16, 16 << 20, 0.010, 64, 256 << 20, 512 << 20, 1e4);
  const Catalogue c = catalogue(machine("cpu4", 4, 64e9, 1e8, 1.0, 16));
  const Result r = plan(p, c, {.global_batch = 64, .steps = 100});
  const Plan& best = r.plans.front();
  EXPECT_EQ(best.config.machines, 1) << describe(best.config);
  // Every plan across machines is slower: 256 MiB through a 100 MB/s NIC
  // takes seconds, the whole step on one rank 10 ms.
  for (const Plan& q : r.plans) {
    if (q.fits && q.config.machines > 1) {
      EXPECT_GT(q.step_s, 0.1) << describe(q.config);
    }
  }
  EXPECT_LT(best.step_s, 0.1);
}

// The same on machines with several ranks each and a network that must be
// used (one core each): the hierarchical allreduce moves one copy across
// the NIC per machine instead of gloo's ring through it.
TEST(Planner, CommunicationBoundAcrossMachinesGoesHierarchical) {
  const Profile p = profile(16, 4 << 20, 0.4, 64, 64 << 20, 128 << 20, 1e4);
  const Catalogue c = catalogue(machine("cpu4", 4, 64e9, 1.25e8, 1.0, 4));
  SearchOptions o;
  o.machines = 4;
  o.ranks_per_machine = 4;
  const Result r = plan(p, c, {.global_batch = 256, .steps = 100}, o);
  const Plan& best = r.plans.front();
  ASSERT_NE(best.config.family, Family::parameter_server) << describe(best.config);
  EXPECT_EQ(best.config.backend, "hierarchical") << describe(best.config);
}

// Memory-bound: 30 GB of parameters, as many of gradients, 60 of Adam's
// state, 32 GB machines, 8 of them: whole parameters on every rank (ddp,
// horovod, zero 1-2) never fit; only ZeRO-3 (everything split) does.
TEST(Planner, MemoryBoundModelTakesZero3) {
  // 20 GB of parameters and 6 times that of optimizer state (mixed
  // precision's 2 + 12 bytes): only ZeRO-3 fits 32 GB machines.
  const double P = 20e9;
  const Profile p = profile(20, P / 20, 2.0, 8, P, 6 * P, 1e6);
  const Catalogue c = catalogue(machine("big", 8, 32e9, 1.25e9, 2.0, 8));
  const Result r = plan(p, c, {.global_batch = 64, .steps = 10});
  const Plan& best = r.plans.front();
  EXPECT_EQ(best.config.family, Family::zero);
  EXPECT_EQ(best.config.zero_stage, 3);
  for (const Plan& q : r.plans) {
    if (q.config.family == Family::horovod || q.config.family == Family::ddp ||
        (q.config.family == Family::zero && q.config.zero_stage < 3)) {
      EXPECT_FALSE(q.fits) << describe(q.config);
      EXPECT_MENTIONS(q.why_not, "needs");
    }
  }
  // ZeRO-3's memory: (P + G + O) / N + 3 units (the largest layer) +
  // activations, or the whole model and its shard while prepare() shards it.
  const double N = best.config.ranks();
  const double expected = std::max(8 * P / N + 3 * (P / 20) + 1e6 * 64 / N, P + P / N);
  EXPECT_NEAR(best.memory_per_rank, expected, 1e-6 * expected);
}

// The same model declaring stages: a mesh also fits (a pipeline splits the
// model's memory over its stages).
TEST(Planner, MemoryBoundModelWithStagesTakesAMeshOrZero3) {
  const double P = 30e9;
  const Profile p = profile(20, P / 20, 2.0, 8, P, 2 * P, 1e6,
                            R"({"layers": 20, "boundary_bytes_per_example": 1e5, "tp_bytes_per_example": 1e5})");
  const Catalogue c = catalogue(machine("big", 8, 32e9, 1.25e9, 2.0, 8));
  const Result r = plan(p, c, {.global_batch = 64, .steps = 10});
  const Plan& best = r.plans.front();
  EXPECT_TRUE(best.config.family == Family::mesh || (best.config.family == Family::zero && best.config.zero_stage == 3))
      << describe(best.config);
  bool mesh_fits = false;
  for (const Plan& q : r.plans) mesh_fits = mesh_fits || (q.fits && q.config.family == Family::mesh);
  EXPECT_TRUE(mesh_fits);
  // Meshes only, without ZeRO over dp: a mesh whose stages and tp shards
  // hold the 4 P bytes of model and state in 32 GB machines.
  SearchOptions o;
  o.strategies = {"mesh"};
  const Result m = plan(p, c, {.global_batch = 64, .steps = 10}, o);
  const Plan& mesh = m.plans.front();
  ASSERT_EQ(mesh.config.family, Family::mesh);
  EXPECT_EQ(mesh.config.mesh_zero, 0);
  EXPECT_GE(double(mesh.config.mesh.pp) * mesh.config.mesh.tp * 32e9 / mesh.config.ranks_per_machine, 4 * P);
  for (const Plan& q : m.plans) EXPECT_EQ(q.config.family, Family::mesh);
}

// Two types: "fast" computes twice as fast at ten times the price. Without
// a budget the fastest plan is on fast machines; with a budget below the
// cheapest fast plan, on slow ones.
TEST(Planner, BudgetPicksTheCheaperType) {
  const Profile p = profile(4, 1024, 1.0, 32, 4096, 8192, 1e4);
  const Catalogue c =
      catalogue(machine("slow", 4, 64e9, 1.25e9, 1.0, 8) + ", " + machine("fast", 4, 64e9, 1.25e9, 10.0, 8, 2.0));
  const Job job{.global_batch = 256, .steps = 1000};
  const Result free = plan(p, c, job);
  EXPECT_EQ(c.types[free.plans.front().config.type].name, "fast");
  double cheapest_fast = kUnlimited, cheapest_slow = kUnlimited;
  for (const Plan& q : free.plans) {
    if (!q.fits) continue;
    double& m = c.types[q.config.type].name == "fast" ? cheapest_fast : cheapest_slow;
    m = std::min(m, q.cost);
  }
  ASSERT_LT(cheapest_slow, cheapest_fast);
  SearchOptions o;
  o.budget_usd = 0.5 * (cheapest_slow + cheapest_fast);
  const Result capped = plan(p, c, job, o);
  EXPECT_EQ(c.types[capped.plans.front().config.type].name, "slow");
  EXPECT_LE(capped.plans.front().cost, o.budget_usd);
  // The cost objective takes the cheapest plan of all.
  SearchOptions by_cost;
  by_cost.objective = Objective::cost;
  EXPECT_DOUBLE_EQ(plan(p, c, job, by_cost).plans.front().cost, cheapest_slow);
}

TEST(Planner, InfeasibleConstraintsNameTheBindingOne) {
  const Profile p = profile(4, 1024, 1.0, 32, 4096, 8192, 1e4);
  const Catalogue c = catalogue(machine("cpu4", 4, 64e9, 1.25e9, 1.0, 8));
  const Job job{.global_batch = 256, .steps = 1000};
  const Result free = plan(p, c, job);
  double cheapest = kUnlimited, fastest = kUnlimited;
  for (const Plan& q : free.plans)
    if (q.fits) {
      cheapest = std::min(cheapest, q.cost);
      fastest = std::min(fastest, q.total_s);
    }
  SearchOptions o;
  o.budget_usd = cheapest / 2;
  std::string e = search_error(p, c, job, o);
  EXPECT_MENTIONS(e, "no plan fits the budget of $");
  EXPECT_MENTIONS(e, "the cheapest plan that fits in memory costs");
  o = {};
  o.deadline_s = fastest / 2;
  e = search_error(p, c, job, o);
  EXPECT_MENTIONS(e, "no plan meets the deadline of");
  EXPECT_MENTIONS(e, "the fastest plan that fits in memory takes");
  // Each alone can be met, both not: the budget of the cheapest plan and
  // the deadline of the fastest.
  o.deadline_s = fastest * 1.0001;
  o.budget_usd = cheapest * 1.0001;
  // The fastest plan is not the cheapest here, or no case is tested.
  ASSERT_GT(free.plans.front().cost, o.budget_usd) << describe(free.plans.front().config);
  e = search_error(p, c, job, o);
  EXPECT_MENTIONS(e, "no plan meets both the budget");
  // Memory: 80 GB of model on 16 GB machines.
  const Profile huge = profile(4, 1e9, 1.0, 32, 80e9, 160e9, 1e4);
  const Catalogue small = catalogue(machine("small", 2, 16e9, 1.25e9, 1.0, 2));
  e = search_error(huge, small, job, {});
  EXPECT_MENTIONS(e, "no plan fits in memory");
}

TEST(Planner, SameInputsGiveTheSamePlan) {
  const Profile p = profile(8, 1 << 20, 0.05, 32, 8 << 20, 16 << 20, 1e5);
  const Catalogue c = catalogue(machine("a", 4, 64e9, 1.25e9, 1.0, 8) + ", " + machine("b", 8, 64e9, 1e9, 1.5, 4));
  const Job job{.global_batch = 256, .steps = 500};
  const Result x = plan(p, c, job), y = plan(p, c, job);
  const SearchOptions o;
  const ReportContext rx{p, c, job, o, x}, ry{p, c, job, o, y};
  EXPECT_EQ(plan_file_json(rx, x.plans.front()), plan_file_json(ry, y.plans.front()));
  ASSERT_EQ(x.plans.size(), y.plans.size());
  for (size_t i = 0; i < x.plans.size(); ++i) {
    EXPECT_EQ(describe(x.plans[i].config), describe(y.plans[i].config));
    EXPECT_EQ(x.plans[i].step_s, y.plans[i].step_s);
  }
  // Each plan that fits was simulated once, and the count said is that: a
  // knob variant equal to a plan already evaluated (each tuned plan's own
  // knobs) is not simulated again.
  size_t fitting = 0;
  for (const Plan& q : x.plans) fitting += q.fits ? 1 : 0;
  ASSERT_GT(fitting, size_t(0));
  EXPECT_EQ(x.simulations, fitting);
  EXPECT_MENTIONS(table(rx, 5), "; " + std::to_string(fitting) + " simulations in ");
}

std::string catalogue_error(const std::string& text) {
  return error_of([&] { read_catalogue(json::parse(text, "cat.json"), "cat.json"); });
}

std::string profile_error(const std::string& text) {
  return error_of([&] { read_profile(json::parse(text, "prof.json"), "prof.json"); });
}

void expect_one_line(const std::string& e, const std::string& file, const std::string& field) {
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_MENTIONS(e, file + ":");
  EXPECT_MENTIONS(e, field);
}

TEST(PlanInputs, MalformedCatalogueIsOneLineNamingFileAndField) {
  const std::string head = std::string("{\"topology\": ") + kLinks + ", \"machine_types\": [";
  const std::string ok =
      R"({"name": "a", "cores": 4, "memory_bytes": 1e9, "network_bytes_per_s": 1e9, "price_per_hour": 1, "available": 2)";
  EXPECT_EQ(catalogue_error(head + ok + "}]}"), "");
  expect_one_line(
      catalogue_error(
          head + R"({"name": "a", "cores": 4, "memory_bytes": 1e9, "network_bytes_per_s": 1e9, "available": 2}]})"),
      "cat.json", "missing field 'price_per_hour'");
  std::string e = catalogue_error(
      head +
      R"({"name": "a", "cores": "4", "memory_bytes": 1e9, "network_bytes_per_s": 1e9, "price_per_hour": 1, "available": 2}]})");
  expect_one_line(e, "cat.json", "machine_types[0].cores");
  EXPECT_MENTIONS(e, "expected an integer");
  const std::string negative =
      R"({"name": "b", "cores": 4, "memory_bytes": 1e9, "network_bytes_per_s": -1, "price_per_hour": 1, "available": 2})";
  e = catalogue_error(head + ok + "}, " + negative + "]}");
  expect_one_line(e, "cat.json", "machine_types[1].network_bytes_per_s: must be positive");
  e = catalogue_error(head + ok + R"(, "price": 3}]})");
  expect_one_line(e, "cat.json", "machine_types[0].price: unknown field");
  e = catalogue_error(head + ok + R"(, "compute_speedup": 2, "flop_per_s": 1e12}]})");
  expect_one_line(e, "cat.json", "not both");
  e = catalogue_error(R"({"machine_types": {}})");
  expect_one_line(e, "cat.json", "machine_types: expected a non-empty array");
  e = catalogue_error(R"({"machine_types": [)" + ok + "}]}");
  expect_one_line(e, "cat.json", "missing field 'topology'");
  e = catalogue_error(R"({"machine_types": [)" + ok + R"(, "topology": "no_such_links.json"}]})");
  expect_one_line(e, "cat.json", "machine_types[0].topology: cannot read 'no_such_links.json'");
}

TEST(PlanInputs, MalformedProfileIsOneLineNamingFileAndField) {
  const std::string w = R"("workload": {"tensors": [{"name": "g", "bytes": 4, "ready_s": 0.1}]})";
  const std::string mem =
      R"("memory": {"parameter_bytes": 4, "optimizer_bytes": 8, "activation_bytes_per_example": 1})";
  EXPECT_EQ(profile_error("{" + w + R"(, "batch_per_rank": 8, )" + mem + "}"), "");
  expect_one_line(profile_error("{" + w + ", " + mem + "}"), "prof.json", "missing field 'batch_per_rank'");
  expect_one_line(profile_error(R"({"workload": "no_such_workload.json", "batch_per_rank": 8, )" + mem + "}"),
                  "prof.json", "workload: cannot read 'no_such_workload.json'");
  expect_one_line(profile_error("{" + w + R"(, "batch_per_rank": -8, )" + mem + "}"), "prof.json",
                  "batch_per_rank: must be positive");
  expect_one_line(profile_error(R"({"workload": 3, "batch_per_rank": 8, )" + mem + "}"), "prof.json",
                  "workload: expected a workload object or the path");
  expect_one_line(profile_error("{" + w + R"(, "batch_per_rank": 8, "memory": {"parameter_bytes": 4}})"), "prof.json",
                  "memory: missing field 'activation_bytes_per_example'");
  expect_one_line(
      profile_error(
          "{" + w +
          R"(, "batch_per_rank": 8, "memory": {"activation_bytes_per_example": 1, "optimizer_bytes": 1, "optimizer_bytes_per_parameter_byte": 2}})"),
      "prof.json", "memory.optimizer_bytes_per_parameter_byte");
  expect_one_line(
      profile_error("{" + w + R"(, "batch_per_rank": 8, )" + mem +
                    R"(, "stages": {"layers": 0, "boundary_bytes_per_example": 1, "tp_bytes_per_example": 1}})"),
      "prof.json", "stages.layers: must be an integer in [1");
  expect_one_line(profile_error("{" + w + R"(, "batch_per_rank": 8, )" + mem + R"(, "stages": {"layers": 4}})"),
                  "prof.json", "stages: missing field 'boundary_bytes_per_example'");
}

// A step measured at two batches: the compute that does not grow with the
// batch (a wide layer's weights at a small batch) is kept fixed, the rest
// scales; one rank of one machine then predicts the closed form.
TEST(PlanInputs, ASecondBatchSeparatesTheFixedCompute) {
  const auto step_of = [](const std::string& compute_at) {
    const std::string doc =
        R"({"workload": {"update_s": 0, "tensors": [{"name": "g", "bytes": 4, "ready_s": 1.0}]}, "batch_per_rank": 32,
            "memory": {"activation_bytes_per_example": 1})" +
        compute_at + "}";
    const Profile p = read_profile(json::parse(doc, "prof.json"), "prof.json");
    return plan(p, catalogue(machine("one", 1, 64e9, 1e9, 1.0, 1)), {.global_batch = 64, .steps = 10}).plans.front();
  };
  // In proportion: 64 examples take twice the 32's second.
  EXPECT_NEAR(step_of("").step_s, 2.0, 0.02);
  // 1.3 s at 128: 0.9 s fixed and 3.125 ms per example, so 64 take 1.1 s.
  const Plan two = step_of(
      R"(, "compute_at": {"batch_per_rank": 128, "workload": {"tensors": [{"name": "g", "bytes": 4, "ready_s": 1.3}]}})");
  EXPECT_EQ(describe(two.config), "one_device");
  EXPECT_NEAR(two.step_s, 1.1, 0.011);
  expect_one_line(profile_error(
                      R"({"workload": {"tensors": [{"name": "g", "bytes": 4, "ready_s": 1}]}, "batch_per_rank": 8,
                          "memory": {"activation_bytes_per_example": 1},
                          "compute_at": {"batch_per_rank": 8, "workload": {"tensors": [{"name": "g", "bytes": 4, "ready_s": 1}]}}})"),
                  "prof.json", "compute_at.batch_per_rank: must differ from batch_per_rank");
}

// A family's own step (its hooks, buckets or sharded optimizer measured
// beside the model, as a workload or a measured period) sets that family's
// compute: where horovod and ddp would tie on the program's step, ddp's
// slower step of its own loses, by its own compute (1 s at 32 examples
// against 1.5 s); a bad family is one line naming it.
TEST(PlanInputs, AFamilysOwnStepSetsItsCompute) {
  const auto workload = [](double ready_s) {
    return R"({"update_s": 0, "tensors": [{"name": "g", "bytes": 4, "ready_s": )" + std::to_string(ready_s) + "}]}";
  };
  const auto best_of = [&](const std::string& families) {
    const std::string doc = R"({"workload": )" + workload(1.0) +
                            R"(, "batch_per_rank": 32, "memory": {"activation_bytes_per_example": 1})" + families + "}";
    const Profile p = read_profile(json::parse(doc, "prof.json"), "prof.json");
    SearchOptions o;
    o.machines = 1;
    o.ranks_per_machine = 2;
    o.strategies = {"horovod", "ddp"};
    const Result r = plan(p, catalogue(machine("two", 2, 64e9, 1e9, 1.0, 1)), {.global_batch = 64, .steps = 10}, o);
    std::map<std::string, double> step;  // the fastest plan of each family
    for (const Plan& q : r.plans)
      if (!step.contains(family_name(q.config.family))) step[family_name(q.config.family)] = q.step_s;
    return std::make_pair(family_name(r.plans.front().config.family), step);
  };
  const auto [tied, tied_steps] = best_of("");
  EXPECT_NEAR(tied_steps.at("horovod"), 1.0, 0.02);
  EXPECT_NEAR(tied_steps.at("ddp"), 1.0, 0.02);
  const auto [best, steps] = best_of(R"(, "families": {"ddp": {"workload": )" + workload(1.5) + "}}");
  EXPECT_EQ(std::string(best), "horovod");
  EXPECT_NEAR(steps.at("horovod"), 1.0, 0.02);
  EXPECT_NEAR(steps.at("ddp"), 1.5, 0.03);
  // Its own batch, and its step as a measured period (the program's
  // workload scaled to it): 1.5 s at 64 examples is 0.75 s at 32, faster
  // than horovod's.
  const auto [other, other_steps] = best_of(R"(, "families": {"ddp": {"batch_per_rank": 64, "step_s": 1.5}})");
  EXPECT_EQ(std::string(other), "ddp");
  EXPECT_NEAR(other_steps.at("ddp"), 0.75, 0.02);
  // Two measured periods: 1.2 s at 32 and 1.8 s at 128 leave 1.0 s fixed.
  const auto [two, two_steps] =
      best_of(R"(, "families": {"ddp": {"step_s": 1.2, "compute_at": {"batch_per_rank": 128, "step_s": 1.8}}})");
  EXPECT_EQ(std::string(two), "horovod");
  EXPECT_NEAR(two_steps.at("ddp"), 1.2, 0.025);

  const std::string rest = R"(, "batch_per_rank": 8, "memory": {"activation_bytes_per_example": 1})";
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "families": {"dpp": {}}})"), "prof.json",
                  "families.dpp: unknown strategy family");
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "families": {"ddp": {}}})"), "prof.json",
                  "families.ddp.workload: missing: give workload or step_s");
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "families": {"ddp": {"step_s": 1, )" +
                                R"("workload": )" + workload(1) + "}}}"),
                  "prof.json", "families.ddp.step_s: give workload or step_s, not both");
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "families": {"ddp": {"step_s": 0}}})"),
                  "prof.json", "families.ddp.step_s: must be positive");
  // step_s belongs to a family: the program's own step is a workload.
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "step_s": 1})"), "prof.json", "step_s");
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "families": {"zero": {"workload": )" +
                                workload(1) + R"(, "batch": 4}}})"),
                  "prof.json", "families.zero.batch");
  expect_one_line(profile_error(R"({"workload": )" + workload(1) + rest + R"(, "families": [1]})"), "prof.json",
                  "families: expected an object");
}

TEST(PlanInputs, RanksSharingAMachineTakeTheSharedStep) {
  const auto workload = [](const std::string& extra) {
    return R"({"update_s": 0, "tensors": [{"name": "g", "bytes": 4, "ready_s": 1.0}])" + extra + "}";
  };
  // The best step of 1, 2 and 4 ranks on one 4-core machine, 64 examples
  // in all: 2.0, 1.0 and 0.5 s of compute alone.
  const auto steps = [&](const std::string& shared) {
    const std::string doc = R"({"workload": )" + workload("") +
                            R"(, "batch_per_rank": 32, "memory": {"activation_bytes_per_example": 1})" + shared + "}";
    const Profile p = read_profile(json::parse(doc, "prof.json"), "prof.json");
    SearchOptions o;
    o.machines = 1;
    o.strategies = {"horovod", "one_device"};
    const Result r = plan(p, catalogue(machine("four", 4, 64e9, 1e9, 1.0, 1)), {.global_batch = 64, .steps = 10}, o);
    std::map<int, double> step;
    for (const Plan& q : r.plans)
      if (!step.contains(q.config.ranks_per_machine)) step[q.config.ranks_per_machine] = q.step_s;
    return step;
  };
  const auto alone = steps("");
  EXPECT_NEAR(alone.at(1), 2.0, 0.02);
  EXPECT_NEAR(alone.at(2), 1.0, 0.02);
  EXPECT_NEAR(alone.at(4), 0.5, 0.02);
  // Two copies at once took 1.3 s a step: 1.3 times the compute for 2
  // ranks, and for 4 (the most measured).
  const auto two = steps(R"(, "shared": {"ranks": 2, "step_s": 1.3})");
  EXPECT_NEAR(two.at(1), 2.0, 0.02);
  EXPECT_NEAR(two.at(2), 1.3, 0.02);
  EXPECT_NEAR(two.at(4), 0.65, 0.02);
  // Measured with 4 copies: 2 ranks lose a third as much.
  const auto four = steps(R"(, "shared": {"ranks": 4, "step_s": 1.3})");
  EXPECT_NEAR(four.at(2), 1.1, 0.02);
  EXPECT_NEAR(four.at(4), 0.65, 0.02);
  // Measured faster than alone: noise, no faster.
  EXPECT_NEAR(steps(R"(, "shared": {"ranks": 2, "step_s": 0.8})").at(2), 1.0, 0.02);
  // The shared run's jitter: its periods' median 1.1 and 0.7071 quantile
  // 1.1828 (tools/sim/jitter.h), waited for by ranks that share a machine.
  const auto jitter = steps(R"(, "shared": {"ranks": 2, "workload": )" +
                            workload(R"(, "step_periods_s": [1.3, 0.9, 1.1, 1.0, 1.2])") + "}");
  EXPECT_NEAR(jitter.at(1), 2.0, 0.02);
  EXPECT_NEAR(jitter.at(2), (1.1 + (4 * std::sqrt(0.5) - 2) * 0.1) / 1.1, 0.02);

  const std::string head =
      R"({"workload": )" + workload("") + R"(, "batch_per_rank": 8, "memory": {"activation_bytes_per_example": 1})";
  expect_one_line(profile_error(head + R"(, "shared": {"step_s": 1}})"), "prof.json", "shared: missing field 'ranks'");
  expect_one_line(profile_error(head + R"(, "shared": {"ranks": 1, "step_s": 1}})"), "prof.json", "shared.ranks");
  expect_one_line(profile_error(head + R"(, "shared": {"ranks": 2}})"), "prof.json",
                  "shared.workload: missing: give workload or step_s");
}

// The mesh model against its closed form: slot = compute / (m pp) + two
// transfers of a micro-batch's boundary activations, pipeline = (m + pp - 1)
// slots, bubble = (pp - 1) / (m + pp - 1) of it (GPipe's, Huang et al. 2019).
TEST(MeshModel, PipelineMatchesTheClosedForm) {
  sim::Topology t;
  t.hosts = 1;
  t.ranks_per_host = 4;
  t.intra = {.alpha_s = 1e-5, .bytes_per_s = 1e9};
  sim::Workload w;
  w.tensors = {{.name = "g", .bytes = 4e6, .ready_s = 1}};
  w.compute_end_s = 1;
  for (int m : {1, 4, 16}) {
    const sim::MeshModel model{.layers = 8, .compute_s = 2.0, .boundary_bytes = 8e6, .tp_bytes = 0};
    const sim::MeshShape shape{.dp = 1, .pp = 4, .tp = 1, .micro_batches = m};
    const sim::MeshPrediction p = sim::predict_mesh(t, w, model, shape, sim::Strategy{.mode = sim::Mode::ddp});
    const double slot = 2.0 / (m * 4) + 2 * (1e-5 + 8e6 / m / 1e9);
    EXPECT_NEAR(p.slot_s, slot, 1e-12);
    EXPECT_NEAR(p.pipeline_s, (m + 3) * slot, 1e-12);
    EXPECT_NEAR(p.bubble_s / p.pipeline_s, 3.0 / (m + 3), 1e-12);
    EXPECT_NEAR(p.step_s, p.pipeline_s, 1e-12);  // one replica: no dp sync, no update
  }
  // Tensor parallelism: a ring of tp ranks over `intra` per allreduce,
  // 2 (tp - 1) steps of n / tp bytes each, 4 allreduces per layer.
  const sim::MeshModel model{.layers = 8, .compute_s = 2.0, .boundary_bytes = 0, .tp_bytes = 4e6};
  const sim::MeshShape shape{.dp = 1, .pp = 1, .tp = 4, .micro_batches = 1};
  t.reduce_bytes_per_s = sim::kInfinity;
  const sim::MeshPrediction p = sim::predict_mesh(t, w, model, shape, sim::Strategy{.mode = sim::Mode::ddp});
  const double ring = 2 * 3 * (1e-5 + 1e6 / 1e9);
  EXPECT_NEAR(p.tp_s, 8 * 4 * ring, 1e-9);
  EXPECT_NEAR(p.compute_s, 2.0 / 4, 1e-12);
}

TEST(PlanReport, WritesThePngAndJsonThatParses) {
  const Profile p = profile(8, 1 << 20, 0.05, 32, 8 << 20, 16 << 20, 1e5);
  const Catalogue c = catalogue(machine("a", 4, 64e9, 1.25e9, 1.0, 8) + ", " + machine("b", 8, 64e9, 1e9, 1.5, 4));
  const Job job{.global_batch = 256, .steps = 500};
  const SearchOptions o;
  const Result r = plan(p, c, job, o);
  const ReportContext ctx{p, c, job, o, r};
  const std::string png = ::testing::TempDir() + "/plan_pareto.png";
  std::remove(png.c_str());
  write_pareto_png(ctx, png);
  std::ifstream in(png, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  const json::Value doc = json::parse(result_json(ctx), "result.json");
  EXPECT_EQ(doc.at("plans").items().size(), r.plans.size());
  EXPECT_EQ(doc.at("best").number(), 1);
  EXPECT_NEAR(doc.at("plans").items()[0].at("step_s").number(), r.plans.front().step_s, 1e-9 * r.plans.front().step_s);
  // The front: fastest first, each cheaper than every faster plan.
  double last_cost = kUnlimited;
  for (const json::Value& id : doc.at("pareto").items()) {
    const Plan& q = r.plans[size_t(id.number()) - 1];
    EXPECT_LT(q.cost, last_cost);
    last_cost = q.cost;
  }
  const json::Value file = json::parse(plan_file_json(ctx, r.plans.front()), "plan.json");
  EXPECT_EQ(file.at("version").number(), 1);
  EXPECT_EQ(file.at("np").number(), r.plans.front().config.ranks());
  EXPECT_EQ(file.at("strategy").string(), strategy_spec(r.plans.front().config));
  EXPECT_MENTIONS(file.at("command").string(), "cohortrun -np ");
  // What fit()'s --strategy plan:FILE reads (common/plan_file.h) is the same plan.
  const std::string path = ::testing::TempDir() + "/cohort_plan_test_plan.json";
  std::ofstream(path) << plan_file_json(ctx, r.plans.front());
  const PlanFile read = read_plan_file(path);
  EXPECT_EQ(read.strategy, strategy_spec(r.plans.front().config));
  EXPECT_EQ(read.np, r.plans.front().config.ranks());
  EXPECT_EQ(read.env, plan_env(r.plans.front().config));
  EXPECT_EQ(read.command, file.at("command").string());
  // --explain of the last plan names why it lost.
  const std::string why = explain(ctx, int(r.plans.size()));
  EXPECT_TRUE(why.find("does not fit") != std::string::npos || why.find("against the best") != std::string::npos)
      << why;
}

// The environment a plan's command gives its ranks, as cohortrun sets it:
// COHORT_BACKEND only with --backend, and each --env NAME=VALUE. Returns
// the names it set (COHORT_BACKEND unset first).
std::vector<std::string> set_launch_environment(const std::string& command) {
  ::unsetenv("COHORT_BACKEND");
  std::vector<std::string> set;
  std::istringstream words(command);
  for (std::string w; words >> w;) {
    if (w == "--backend" && words >> w) {
      ::setenv("COHORT_BACKEND", w.c_str(), 1);
      set.push_back("COHORT_BACKEND");
    } else if (w == "--env" && words >> w) {
      const size_t eq = w.find('=');
      set.push_back(w.substr(0, eq));
      ::setenv(set.back().c_str(), w.substr(eq + 1).c_str(), 1);
    }
  }
  return set;
}

// A plan launched by its own command finds nothing different from its plan
// file (fit() warns of each difference): the backend cohort chooses itself
// is "" in the file, not a COHORT_BACKEND the command never sets.
TEST(PlanReport, APlanLaunchedByItsOwnCommandMatchesItsFile) {
  const Profile p = profile(4, 1 << 20, 0.1, 32, 4 << 20, 8 << 20, 1e4);
  const Job job{.global_batch = 64, .steps = 100};
  struct Case {
    Catalogue catalogue;
    std::vector<std::string> strategies;
    Family family;
    bool backend_flag;
  };
  const std::vector<Case> cases = {
      {catalogue(machine("one", 1, 64e9, 1e9, 1.0, 1)), {}, Family::one_device, false},
      {catalogue(machine("cpu2", 2, 64e9, 1e9, 1.0, 2)), {"horovod"}, Family::horovod, true},
      {catalogue(machine("cpu2", 2, 64e9, 1e9, 1.0, 2)), {"parameter_server"}, Family::parameter_server, false},
  };
  for (const Case& k : cases) {
    SearchOptions o;
    o.strategies = k.strategies;
    const Result r = plan(p, k.catalogue, job, o);
    const Plan& best = r.plans.front();
    ASSERT_EQ(best.config.family, k.family) << describe(best.config);
    const ReportContext ctx{p, k.catalogue, job, o, r};
    const std::string path = ::testing::TempDir() + "/cohort_plan_test_launch.json";
    std::ofstream(path) << plan_file_json(ctx, best);
    const PlanFile file = read_plan_file(path);
    EXPECT_EQ(file.command.find(" --backend ") != std::string::npos, k.backend_flag) << file.command;
    EXPECT_EQ(launch_backend(best.config).empty(), !k.backend_flag) << launch_backend(best.config);  // written so
    EXPECT_EQ(file.backend.empty(), !k.backend_flag) << file.backend;
    const std::vector<std::string> set = set_launch_environment(file.command);
    std::string said;
    for (const std::string& d : plan_differences(file, file.np)) said += d + "; ";
    EXPECT_EQ(said, "") << file.command;
    for (const std::string& name : set) ::unsetenv(name.c_str());
  }
}

}  // namespace
}  // namespace cohort::plan
