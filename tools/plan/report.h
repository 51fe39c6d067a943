// What cohort-plan prints and writes of a search's Result: the ranked
// table, --explain, the launch command, --json, the plan file (--out) and
// the Pareto front's plot (--plot). Formats in tools/plan/README.md.
#pragma once

#include <string>

#include "tools/plan/planner.h"

namespace cohort::plan {

struct ReportContext {
  const Profile& profile;
  const Catalogue& catalogue;
  const Job& job;
  const SearchOptions& options;
  const Result& result;
};

// The ranked table: the first `rows` plans that fit, then how many did not.
std::string table(const ReportContext& r, int rows);

// The exact command line that runs plan `p` (hosts as HOSTFILE or
// placeholders when the machines have no names yet).
std::string launch_command(const ReportContext& r, const Plan& p);

// Why plan `id` lost to the best (or did not fit); ConfigError for an
// unknown id.
std::string explain(const ReportContext& r, int id);

// Everything, machine-readable.
std::string result_json(const ReportContext& r);

// The chosen plan as the file fit() reads with --strategy plan:FILE.
std::string plan_file_json(const ReportContext& r, const Plan& p);

// The time-cost plane: every plan that fits, the front, the chosen plan.
void write_pareto_png(const ReportContext& r, const std::string& path);

}  // namespace cohort::plan
