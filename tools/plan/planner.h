// The planner: every (machine type, machine count, ranks per machine,
// strategy, engine knobs) a job could run on, each predicted by the
// simulator (tools/sim: simulate() for data parallelism, ZeRO and parameter
// servers, predict_mesh() for the dp x pp x tp mesh), checked against
// memory, ranked by the objective under the budget and deadline.
//
// The search (deterministic: the same inputs give the same ranking):
//   1. every machine type, count (powers of two and the count available, up
//      to max_machines), ranks per machine (powers of two up to its cores or
//      accelerators, and that number) and strategy family with default
//      knobs: multi_worker horovod and ddp, zero stages 1-3 (each on gloo's
//      ring and on hierarchical across hosts, shm inside one), parameter
//      servers (1, 2, 4, ... servers up to half the ranks), and for a
//      profile with stages every dp x pp x tp mesh (tp inside a machine,
//      dividing the heads; pp dividing the layers; micro-batches of 1, 2, 4,
//      ... examples; ddp or ZeRO-1 over dp); a plan that does not fit in
//      memory is not simulated;
//   2. the best `tune_top` plans of step 1 (by the objective, within the
//      constraints) again over the engine's knobs: fusion threshold and
//      cycle time (the autotuner's grid, cohort/engine/autotune.h), DDP's
//      and ZeRO's bucket, ZeRO-3's unit;
//   3. ranked: plans within the budget and deadline by the objective (time:
//      total seconds, then cost; cost: cost, then seconds), then plans over
//      a constraint, then plans that do not fit; ties keep the enumeration
//      order (catalogue order, machines, ranks per machine, family, knobs).
// Time to finish = steps x predicted step; cost = machines x price per hour
// x time to finish / 3600 (per-second billing).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tools/plan/catalogue.h"
#include "tools/plan/profile.h"
#include "tools/sim/mesh.h"

namespace cohort::plan {

inline constexpr double kUnlimited = std::numeric_limits<double>::infinity();

struct Job {
  int64_t global_batch = 0;  // examples per step over every replica
  int64_t steps = 0;
};

enum class Objective { time, cost };

struct SearchOptions {
  Objective objective = Objective::time;
  double budget_usd = kUnlimited;
  double deadline_s = kUnlimited;
  int max_machines = 1024;
  int machines = 0;           // > 0: only this machine count
  int ranks_per_machine = 0;  // > 0: only this many ranks per machine
  // Strategy families to try (empty: all): one_device, horovod, ddp, zero,
  // parameter_server, mesh (dp averaged as ddp), mesh_zero (ZeRO-1 over dp).
  std::vector<std::string> strategies;
  int tune_top = 16;  // plans of step 1 tuned in step 2
  int sim_steps = 6;  // simulated steps per prediction (the first is warm-up)
};

enum class Family { one_device, horovod, ddp, zero, parameter_server, mesh };
const char* family_name(Family f);

struct PlanConfig {
  size_t type = 0;
  int machines = 1;
  int ranks_per_machine = 1;
  Family family = Family::one_device;
  std::string backend = "shm";  // the simulator's algorithm: shm, ring (gloo), hierarchical; auto for ps and mesh
  int zero_stage = 0;
  int bucket_mb = 25;  // ddp, zero 1-2
  int unit_mb = 1;     // zero 3
  int servers = 0;     // parameter_server
  int64_t fusion_threshold = 256 << 10;
  int64_t cycle_time_us = 0;
  sim::MeshShape mesh;  // family mesh
  int mesh_zero = 0;    // mesh: 0 (ddp) or 1 (ZeRO-1) over dp
  int ranks() const { return machines * ranks_per_machine; }
};

// One named part of a predicted step (for --explain and the bottleneck):
// what it is, and which resource it is the plan's bottleneck on when it is
// the largest part (compute, network, memory bandwidth, server, pipeline
// bubble, intra-host link; Plan::bottleneck).
struct StepPart {
  std::string name;
  double seconds = 0;
  std::string bottleneck;
};

struct Plan {
  int id = 0;  // 1-based position in the ranking
  PlanConfig config;
  bool fits = true;            // in memory (and the batch covers every replica)
  std::string why_not;         // when it does not fit
  std::string over;            // the constraint it breaks, empty within them
  double memory_per_rank = 0;  // bytes, the largest rank's
  double step_s = 0, total_s = 0, cost = 0;
  std::vector<StepPart> parts;  // the step's parts, largest first
  std::string bottleneck;       // compute, network, memory bandwidth, server, pipeline bubble, intra-host link
  size_t order = 0;             // enumeration order (ties)
};

struct Result {
  std::vector<Plan> plans;  // ranked; plans[0] is the best when best is true
  std::vector<int> pareto;  // ids on the time-cost front (plans that fit), fastest first
  size_t simulations = 0;
  double search_s = 0;
};

// ConfigError when no plan fits or meets the constraints, naming the
// binding constraint ("no plan fits the budget of $5: the cheapest plan
// that fits costs $7.31 (...)").
Result search(const Profile& profile, const Catalogue& catalogue, const Job& job, const SearchOptions& options);

// The strategy spec make_strategy() accepts for the plan's (mesh: the dp
// axis's), the launch backend (cohortrun's --backend name; "" for cohort's
// automatic choice: one_device, parameter servers, meshes, launched without
// --backend), the engine's tunables.
std::string strategy_spec(const PlanConfig& c);
std::string launch_backend(const PlanConfig& c);
std::vector<std::pair<std::string, std::string>> plan_env(const PlanConfig& c);
// A short human description: "zero:stage=3 hierarchical fusion 256K".
std::string describe(const PlanConfig& c);

// Memory per rank, bytes (the largest rank of the plan), by the formulas of
// tools/plan/README.md. `examples` is a replica's examples per step.
double memory_per_rank(const Profile& p, const PlanConfig& c, double examples);

// A parameter-server plan's two kinds of rank, bytes: a worker holds the
// whole model, its gradients, the optimizer's state and the activations; a
// server of S its 1/S shard of the model and of the gradients' sum.
struct ServerMemory {
  double worker = 0;
  double server_model = 0;  // P + G, before the split over the servers
  double server(int servers) const { return server_model / servers; }
};
ServerMemory parameter_server_memory(const Profile& p, double examples);

}  // namespace cohort::plan
