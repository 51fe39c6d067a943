#include "tools/plan/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/json_object.h"
#include "cohort/common/plan_file.h"
#include "cohort/plot/figure.h"
#include "tools/plan/format.h"

namespace cohort::plan {

namespace {

// Significant digits of --json's numbers.
constexpr int kJsonDigits = 10;

const std::string& type_name(const ReportContext& r, const Plan& p) { return r.catalogue.types[p.config.type].name; }

const Plan& find_plan(const ReportContext& r, int id) {
  COHORT_CHECK_AS(ConfigError, id >= 1 && size_t(id) <= r.result.plans.size())
      << "--explain " << id << ": no such plan (plans are numbered 1 to " << r.result.plans.size() << ")";
  return r.result.plans[size_t(id) - 1];
}

}  // namespace

std::string table(const ReportContext& r, int rows) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%5s  %-14s %5s %4s %6s  %-52s %10s %10s %10s %10s  %s\n", "plan", "machine", "mach",
                "rpm", "ranks", "strategy", "step_ms", "total", "cost", "mem/rank", "bottleneck");
  os << line;
  int shown = 0, within = 0, over = 0, unfit = 0, folded = 0;
  // Knob variants predicted the same as a row above them (a cycle time
  // that changes nothing, say) are folded into it; --json lists them.
  std::set<std::string> seen;
  for (const Plan& p : r.result.plans) {
    if (!p.fits) {
      ++unfit;
      continue;
    }
    (p.over.empty() ? within : over)++;
    if (shown >= rows) continue;
    PlanConfig knobless = p.config;
    knobless.cycle_time_us = 0;
    knobless.fusion_threshold = 0;
    knobless.bucket_mb = knobless.unit_mb = 0;
    if (!seen.insert(std::to_string(p.config.type) + describe(knobless) + std::to_string(p.config.machines) + "/" +
                     std::to_string(p.config.ranks_per_machine) + "/" + printed("%.10g", p.step_s))
             .second) {
      ++folded;
      continue;
    }
    ++shown;
    std::snprintf(line, sizeof line, "%5d  %-14s %5d %4d %6d  %-52s %10.3f %10s %10s %10s  %s%s\n", p.id,
                  type_name(r, p).c_str(), p.config.machines, p.config.ranks_per_machine, p.config.ranks(),
                  describe(p.config).c_str(), 1e3 * p.step_s, duration_text(p.total_s).c_str(),
                  money_text(p.cost).c_str(), bytes_text(p.memory_per_rank).c_str(), p.bottleneck.c_str(),
                  p.over.empty() ? "" : "  (over a constraint)");
    os << line;
  }
  if (folded)
    os << "# " << folded << " knob variants predicted the same as the row above them folded (--json lists them)\n";
  os << "# " << within << " plans within the constraints, " << over << " over a constraint, " << unfit
     << " do not fit in memory (--explain ID says why); " << r.result.simulations << " simulations in "
     << printed("%.2f", r.result.search_s) << " s\n";
  return os.str();
}

std::string launch_command(const ReportContext& r, const Plan& p) {
  const PlanConfig& c = p.config;
  std::ostringstream os;
  os << "cohortrun -np " << c.ranks();
  if (c.machines > 1) os << " --hostfile HOSTFILE";
  // A plan on cohort's automatic backend (one_device, parameter servers,
  // meshes) leaves COHORT_BACKEND unset, as its plan file's "" says.
  if (!launch_backend(c).empty()) os << " --backend " << launch_backend(c);
  for (const auto& [k, v] : plan_env(c)) os << " --env " << k << "=" << v;
  if (c.family == Family::mesh) {
    os << " " << r.profile.stages.program << " --dp " << c.mesh.dp << " --pp " << c.mesh.pp << " --tp " << c.mesh.tp
       << " --micro-batches " << c.mesh.micro_batches << " --schedule " << sim::pipeline_schedule_name(c.mesh.schedule)
       << " --batch-size " << r.job.global_batch;
    if (c.mesh_zero) os << " --zero " << c.mesh_zero;
  } else {
    os << " " << r.profile.program << " --strategy " << strategy_spec(c);
  }
  return os.str();
}

std::string explain(const ReportContext& r, int id) {
  const Plan& p = find_plan(r, id);
  const Plan& best = r.result.plans.front();
  std::ostringstream os;
  os << "plan " << p.id << ": " << type_name(r, p) << " x " << p.config.machines << ", " << p.config.ranks_per_machine
     << " ranks per machine, " << describe(p.config) << "\n";
  if (!p.fits) {
    os << "  does not fit: " << p.why_not << "\n";
    return os.str();
  }
  os << "  step " << printed("%.3f", 1e3 * p.step_s) << " ms, " << duration_text(p.total_s) << ", "
     << money_text(p.cost) << ", memory " << bytes_text(p.memory_per_rank) << " per rank, bottleneck " << p.bottleneck
     << "\n  step:";
  for (const StepPart& s : p.parts) os << " " << s.name << " " << printed("%.3f", 1e3 * s.seconds) << " ms;";
  os << "\n";
  if (!p.over.empty()) os << "  breaks a constraint: it " << p.over << "\n";
  if (p.id == best.id) {
    os << "  the best plan (" << (r.options.objective == Objective::time ? "shortest time" : "lowest cost") << ")\n";
    return os.str();
  }
  os << "  against the best, plan " << best.id << " (" << describe(best.config) << " on " << best.config.machines
     << " x " << type_name(r, best) << "): " << printed("%.2f", p.total_s / best.total_s) << "x its time ("
     << duration_text(p.total_s) << " vs " << duration_text(best.total_s) << "), "
     << (best.cost > 0 ? printed("%.2f", p.cost / best.cost) + "x its cost" : std::string("cost ") + money_text(p.cost))
     << " (" << money_text(p.cost) << " vs " << money_text(best.cost) << ")\n";
  // Which part of the step: the one that grew the most against the best's
  // part of the same name (absent there: 0).
  std::string worst;
  double grew = -1e300;
  for (const StepPart& s : p.parts) {
    double theirs = 0;
    for (const StepPart& b : best.parts)
      if (b.name == s.name) theirs = b.seconds;
    if (s.seconds - theirs > grew) {
      grew = s.seconds - theirs;
      worst = s.name;
    }
  }
  if (std::abs(p.total_s - best.total_s) <= 1e-3 * best.total_s && std::abs(p.cost - best.cost) <= 1e-3 * best.cost)
    os << "  a tie within 0.1% in time and cost: it ranks below by the smaller difference, or by the enumeration "
          "order\n";
  else if (p.step_s > best.step_s)
    os << "  its step is " << printed("%.3f", 1e3 * (p.step_s - best.step_s)) << " ms longer, mostly " << worst << " (+"
       << printed("%.3f", 1e3 * grew) << " ms)\n";
  else if (!p.over.empty())
    os << "  its step is shorter by " << printed("%.3f", 1e3 * (best.step_s - p.step_s))
       << " ms, but it breaks a constraint\n";
  else
    os << "  its step is shorter by " << printed("%.3f", 1e3 * (best.step_s - p.step_s)) << " ms, but it costs "
       << money_text(p.cost - best.cost) << " more (" << p.config.machines << " machines at "
       << money_text(r.catalogue.types[p.config.type].price_per_hour) << " an hour)\n";
  return os.str();
}

namespace {

// The plan as the file fit() reads describes it, without the command and
// the prediction: the fields --json's plans share with the plan file.
PlanFile plan_launch(const ReportContext& r, const Plan& p) {
  const PlanConfig& c = p.config;
  PlanFile file;
  file.strategy = strategy_spec(c);
  file.np = c.ranks();
  file.machine_type = type_name(r, p);
  file.machines = c.machines;
  file.ranks_per_machine = c.ranks_per_machine;
  file.backend = launch_backend(c);
  file.env = plan_env(c);
  if (c.family == Family::mesh)
    file.mesh = PlanMesh{.dp = c.mesh.dp,
                         .pp = c.mesh.pp,
                         .tp = c.mesh.tp,
                         .micro_batches = c.mesh.micro_batches,
                         .schedule = sim::pipeline_schedule_name(c.mesh.schedule),
                         .zero = c.mesh_zero != 0};
  return file;
}

std::string plan_json(const ReportContext& r, const Plan& p) {
  JsonObject o;
  o.add("id", p.id).add("family", family_name(p.config.family)).add("description", describe(p.config));
  add_plan_fields(o, plan_launch(r, p));
  o.add("fits", p.fits);
  if (!p.fits) o.add("why_not", p.why_not);
  if (!p.over.empty()) o.add("over", p.over);
  o.add("memory_per_rank_bytes", p.memory_per_rank, kJsonDigits);
  if (p.fits) {
    JsonObject parts;
    for (const StepPart& s : p.parts) parts.add(s.name, s.seconds, kJsonDigits);
    o.add("step_s", p.step_s, kJsonDigits)
        .add("total_s", p.total_s, kJsonDigits)
        .add("cost", p.cost, kJsonDigits)
        .add("bottleneck", p.bottleneck)
        .add_raw("parts", parts.str());
  }
  return o.str();
}

}  // namespace

std::string result_json(const ReportContext& r) {
  const Plan& best = r.result.plans.front();
  std::vector<std::string> pareto, plans;
  for (int id : r.result.pareto) pareto.push_back(std::to_string(id));
  for (const Plan& p : r.result.plans) plans.push_back(plan_json(r, p));
  JsonObject doc;
  doc.add("version", 1)
      .add("profile", r.profile.path)
      .add("catalogue", r.catalogue.path)
      .add_raw("job", JsonObject().add("global_batch", r.job.global_batch).add("steps", r.job.steps).str())
      .add("objective", r.options.objective == Objective::time ? "time" : "cost")
      .add("budget_usd", r.options.budget_usd, kJsonDigits)
      .add("deadline_s", r.options.deadline_s, kJsonDigits)
      .add_raw("search", JsonObject()
                             .add("plans", int64_t(r.result.plans.size()))
                             .add("simulations", int64_t(r.result.simulations))
                             .add("seconds", r.result.search_s, kJsonDigits)
                             .str())
      .add("best", best.id)
      .add("command", launch_command(r, best))
      .add_raw("pareto", json_array(pareto))
      .add_raw("plans", json_array(plans, true));
  return doc.str() + "\n";
}

std::string plan_file_json(const ReportContext& r, const Plan& p) {
  PlanFile file = plan_launch(r, p);
  file.command = launch_command(r, p);
  file.predicted_step_s = p.step_s;
  file.predicted_total_s = p.total_s;
  file.predicted_cost = p.cost;
  file.predicted_memory_per_rank_bytes = p.memory_per_rank;
  file.predicted_bottleneck = p.bottleneck;
  return plan_file_text(file);
}

void write_pareto_png(const ReportContext& r, const std::string& path) {
  plot::Figure f;
  f.title = "cohort-plan: " + r.profile.name + ", time to finish against cost";
  plot::Series all{.label = "plans that fit", .line = false};
  plot::Series front{.label = "Pareto front"};
  plot::Series chosen{.label = "chosen", .line = false};
  bool free = false;
  for (const Plan& p : r.result.plans) {
    if (!p.fits) continue;
    all.x.push_back(p.total_s / 3600);
    all.y.push_back(p.cost);
    free = free || p.cost <= 0;
  }
  for (int id : r.result.pareto) {
    const Plan& p = r.result.plans[size_t(id) - 1];
    front.x.push_back(p.total_s / 3600);
    front.y.push_back(p.cost);
  }
  const Plan& best = r.result.plans.front();
  chosen.x.push_back(best.total_s / 3600);
  chosen.y.push_back(best.cost);
  f.x = {.label = "time to finish (hours)", .log = true};
  f.y = {.label = "cost (USD)", .log = !free};
  f.series = {std::move(all), std::move(front), std::move(chosen)};
  plot::write_png(f, path);
}

}  // namespace cohort::plan
