// A plan file: the job that cohort-plan chose (tools/plan), as the training
// program and tools read it back. `cohort-plan --out plan.json` writes it;
// `--strategy plan:plan.json` (make_strategy, cohort/torch/core) runs the
// plan's strategy, so that the chosen command and the program agree.
//
//   {"version": 1,
//    "strategy": "zero:stage=3,bucket_mb=25",   // a spec make_strategy() accepts
//    "np": 16,                                  // ranks
//    "machine_type": "c6i.8xlarge", "machines": 4, "ranks_per_machine": 4,
//    "backend": "hierarchical",                 // COHORT_BACKEND, "" (or "auto") for auto
//    "env": {"COHORT_FUSION_THRESHOLD": "67108864"},  // tunables
//    "mesh": {"dp": 2, "pp": 2, "tp": 1, "micro_batches": 8,  // a mesh plan only
//             "schedule": "1f1b", "zero": false},
//    "command": "cohortrun -np 16 ...",         // the launch, as printed
//    "predicted": {"step_s": 0.41, "total_s": 8200, "cost": 37.5,
//                  "memory_per_rank_bytes": 3.1e9, "bottleneck": "network"}}
//
// Only "version" and "strategy" are required; unknown members are errors
// (a typo would silently change the plan). Errors are one line naming the
// file, the field's line and column and what was expected.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/common/json_object.h"

namespace cohort {

// A mesh plan's axes (dp x pp x tp, model_parallel/mesh.h): its program
// builds the mesh from flags (the plan's command gives them, char_lm's
// --dp --pp --tp --micro-batches --schedule [--zero]), and its "strategy" is
// the dp axis's.
struct PlanMesh {
  int dp = 1, pp = 1, tp = 1;
  int micro_batches = 1;
  std::string schedule;  // gpipe, 1f1b
  bool zero = false;     // ZeRO-1 over dp
  bool operator==(const PlanMesh&) const = default;
};

struct PlanFile {
  int version = 1;
  std::string strategy;
  int np = 0;  // 0: not stated
  std::string machine_type;
  int machines = 0;
  int ranks_per_machine = 0;
  // "": cohort's automatic choice (COHORT_BACKEND unset).
  std::string backend;
  std::vector<std::pair<std::string, std::string>> env;  // in file order
  std::optional<PlanMesh> mesh;
  std::string command;
  double predicted_step_s = 0;
  double predicted_total_s = 0;
  double predicted_cost = 0;
  double predicted_memory_per_rank_bytes = 0;
  std::string predicted_bottleneck;  // compute, network, memory bandwidth, server, ...
};

// Reads `path`; ConfigError when it cannot be read or is not a plan.
PlanFile read_plan_file(const std::string& path);

// The file's text (what read_plan_file reads back equal).
std::string plan_file_text(const PlanFile& plan);

// The plan's launch in the file's form (strategy, np, machine_type,
// machines, ranks_per_machine, backend, env, mesh; the counts when stated)
// added to `object`: plan_file_text's, and any other listing of plans
// (cohort-plan --json), so that both write one plan the same way.
JsonObject& add_plan_fields(JsonObject& object, const PlanFile& plan);

// What differs between the plan and this process's launch, one sentence
// each: a tunable the plan sets that the environment does not hold with the
// plan's value, a world size (`launched_ranks`, 0 when unknown) other than
// the plan's np, a COHORT_BACKEND other than the plan's.
std::vector<std::string> plan_differences(const PlanFile& plan, int launched_ranks);

}  // namespace cohort
