#include "cohort/common/plan_file.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/json.h"
#include "cohort/common/json_object.h"

namespace cohort {
namespace {

int whole_number(const json::Value& v, const char* field, int least) {
  const double x = v.number();
  COHORT_CHECK_AS(ConfigError, std::floor(x) == x && x >= least && x <= 1e9)
      << v.where() << ": plan field '" << field << "' must be a whole number of at least " << least << ", got " << x;
  return int(x);
}

const std::string& text_of(const json::Value& v) { return v.string(); }

}  // namespace

PlanFile read_plan_file(const std::string& path) {
  const json::Value doc = json::parse_file(path);
  COHORT_CHECK_AS(ConfigError, doc.is_object())
      << doc.where() << ": a plan file is a JSON object (cohort-plan --out writes one), got "
      << json::a_kind_name(doc.kind());
  PlanFile plan;
  bool has_version = false, has_strategy = false;
  for (const auto& [key, v] : doc.members()) {
    if (key == "version") {
      plan.version = whole_number(v, "version", 1);
      COHORT_CHECK_AS(ConfigError, plan.version == 1)
          << v.where() << ": plan version " << plan.version << " is newer than this cohort reads (1)";
      has_version = true;
    } else if (key == "strategy") {
      plan.strategy = text_of(v);
      COHORT_CHECK_AS(ConfigError, !plan.strategy.empty() && !plan.strategy.starts_with("plan:"))
          << v.where() << ": plan field 'strategy' must be a strategy spec such as \"zero:stage=3\", got \""
          << plan.strategy << "\"";
      has_strategy = true;
    } else if (key == "np") {
      plan.np = whole_number(v, "np", 1);
    } else if (key == "machine_type") {
      plan.machine_type = text_of(v);
    } else if (key == "machines") {
      plan.machines = whole_number(v, "machines", 1);
    } else if (key == "ranks_per_machine") {
      plan.ranks_per_machine = whole_number(v, "ranks_per_machine", 1);
    } else if (key == "backend") {
      // "auto" (what cohort-plan wrote before "") is cohort's own choice,
      // as COHORT_BACKEND unset: nothing for plan_differences to compare.
      plan.backend = text_of(v);
      if (plan.backend == "auto") plan.backend.clear();
    } else if (key == "env") {
      COHORT_CHECK_AS(ConfigError, v.is_object())
          << v.where() << ": plan field 'env' must be an object of COHORT_* variables, got "
          << json::a_kind_name(v.kind());
      for (const auto& [name, value] : v.members()) {
        COHORT_CHECK_AS(ConfigError, name.starts_with("COHORT_"))
            << value.where() << ": plan field 'env' sets '" << name << "', which is not a COHORT_* variable";
        plan.env.emplace_back(name, text_of(value));
      }
    } else if (key == "mesh") {
      COHORT_CHECK_AS(ConfigError, v.is_object())
          << v.where() << ": plan field 'mesh' must be an object, got " << json::a_kind_name(v.kind());
      PlanMesh mesh;
      for (const auto& [name, value] : v.members()) {
        if (name == "dp") mesh.dp = whole_number(value, "mesh.dp", 1);
        else if (name == "pp") mesh.pp = whole_number(value, "mesh.pp", 1);
        else if (name == "tp") mesh.tp = whole_number(value, "mesh.tp", 1);
        else if (name == "micro_batches") mesh.micro_batches = whole_number(value, "mesh.micro_batches", 1);
        else if (name == "schedule") mesh.schedule = text_of(value);
        else if (name == "zero") mesh.zero = value.boolean();
        else
          COHORT_THROW(ConfigError) << value.where() << ": unknown plan field 'mesh." << name
                                    << "' (expected dp, pp, tp, micro_batches, schedule, zero)";
      }
      plan.mesh = mesh;
    } else if (key == "command") {
      plan.command = text_of(v);
    } else if (key == "predicted") {
      COHORT_CHECK_AS(ConfigError, v.is_object())
          << v.where() << ": plan field 'predicted' must be an object, got " << json::a_kind_name(v.kind());
      for (const auto& [name, value] : v.members()) {
        if (name == "step_s") plan.predicted_step_s = value.number();
        else if (name == "total_s") plan.predicted_total_s = value.number();
        else if (name == "cost") plan.predicted_cost = value.number();
        else if (name == "memory_per_rank_bytes") plan.predicted_memory_per_rank_bytes = value.number();
        else if (name == "bottleneck") plan.predicted_bottleneck = text_of(value);
        else
          COHORT_THROW(ConfigError) << value.where() << ": unknown plan field 'predicted." << name
                                    << "' (expected step_s, total_s, cost, memory_per_rank_bytes, bottleneck)";
      }
    } else {
      COHORT_THROW(ConfigError) << v.where() << ": unknown plan field '" << key
                                << "' (expected version, strategy, np, machine_type, machines, ranks_per_machine, "
                                   "backend, env, mesh, command, predicted)";
    }
  }
  COHORT_CHECK_AS(ConfigError, has_version && has_strategy)
      << doc.where() << ": a plan file needs 'version' and 'strategy' (cohort-plan --out writes them)";
  return plan;
}

JsonObject& add_plan_fields(JsonObject& doc, const PlanFile& plan) {
  JsonObject env;
  for (const auto& [name, value] : plan.env) env.add(name, value);
  doc.add("strategy", plan.strategy);
  if (plan.np > 0) doc.add("np", plan.np);
  if (!plan.machine_type.empty()) doc.add("machine_type", plan.machine_type);
  if (plan.machines > 0) doc.add("machines", plan.machines);
  if (plan.ranks_per_machine > 0) doc.add("ranks_per_machine", plan.ranks_per_machine);
  doc.add("backend", plan.backend).add_raw("env", env.str());
  if (plan.mesh) {
    const PlanMesh& m = *plan.mesh;
    doc.add_raw("mesh", JsonObject()
                            .add("dp", m.dp)
                            .add("pp", m.pp)
                            .add("tp", m.tp)
                            .add("micro_batches", m.micro_batches)
                            .add("schedule", m.schedule)
                            .add("zero", m.zero)
                            .str());
  }
  return doc;
}

std::string plan_file_text(const PlanFile& plan) {
  JsonObject predicted;
  predicted.add("step_s", plan.predicted_step_s, 17)
      .add("total_s", plan.predicted_total_s, 17)
      .add("cost", plan.predicted_cost, 17)
      .add("memory_per_rank_bytes", plan.predicted_memory_per_rank_bytes, 17)
      .add("bottleneck", plan.predicted_bottleneck);
  JsonObject doc;
  doc.add("version", plan.version);
  add_plan_fields(doc, plan);
  doc.add("command", plan.command).add_raw("predicted", predicted.str());
  return doc.str() + "\n";
}

std::vector<std::string> plan_differences(const PlanFile& plan, int launched_ranks) {
  std::vector<std::string> said;
  for (const auto& [name, value] : plan.env) {
    const char* here = std::getenv(name.c_str());
    if (!here || value != here)
      said.push_back("the plan sets " + name + "=" + value + ", this process has " +
                     (here ? name + "=" + here : name + " unset"));
  }
  if (plan.np > 0 && launched_ranks > 0 && plan.np != launched_ranks)
    said.push_back("the plan is for " + std::to_string(plan.np) + " ranks, this job has " +
                   std::to_string(launched_ranks));
  if (!plan.backend.empty()) {
    const char* here = std::getenv("COHORT_BACKEND");
    if (!here || plan.backend != here)
      said.push_back("the plan uses COHORT_BACKEND=" + plan.backend + ", this process has " +
                     (here ? std::string("COHORT_BACKEND=") + here : std::string("COHORT_BACKEND unset")));
  }
  return said;
}

}  // namespace cohort
