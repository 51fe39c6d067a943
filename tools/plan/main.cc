// cohort-plan: the machines and the strategy for a training job, from a
// profile of its program, the job's size, a catalogue of machine types and
// an objective; every plan predicted by the simulator (tools/sim). See
// tools/plan/README.md.
//
//   cohort-plan --profile P.json (--catalogue C.json | --topology T.json) --global-batch B
//               (--steps N | --epochs E --examples X) [--objective time|cost] [--budget USD]
//               [--deadline S] [--explain ID] [--json FILE] [--out plan.json] [--plot F.png] ...
//
// Exit status: 0 a plan, 2 bad flags or input files or no plan meets the
// constraints (one line naming why), 1 another failure.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/flags.h"
#include "tools/plan/planner.h"
#include "tools/plan/report.h"

namespace {

using namespace cohort;
using namespace cohort::plan;

constexpr const char* kUsage =
    R"(usage: cohort-plan --profile P.json (--catalogue C.json | --topology T.json) --global-batch B
                   (--steps N | --epochs E --examples X) [options]
  --profile FILE          the program: its one-rank step (a cohort-sim workload), batch and memory
  --catalogue FILE        machine types: cores, memory, network, price per hour, how many are available
  --topology FILE         instead: the hosts `cohortrun --check` measured (the simulator's topology), one type
  --price-per-hour USD    --topology: the price of one of its machines (0)
  --memory-bytes B        --topology: the memory of one of its machines (0: not checked)
  --memory-bytes-per-rank B  --topology: the memory one rank may use (a ulimit -v, an accelerator's; 0: not checked)
  --global-batch B        examples per step over all replicas
  --steps N               optimizer steps; or --epochs E --examples X: ceil(E X / B) steps
  --objective time|cost   shortest time to finish (time) or lowest cost (cost)
  --budget USD            only plans that cost at most this
  --deadline SECONDS      only plans that finish within this
  --machines N            only this many machines; --ranks-per-machine R: only R ranks per machine
  --max-machines N        the most machines tried per type (1024)
  --strategies LIST       only these families: one_device, horovod, ddp, zero, parameter_server, mesh (dp
                          averaged as ddp), mesh_zero (ZeRO-1 over dp); default all
  --tune-top N            plans whose engine knobs are searched (16)
  --rows N                rows of the table (20)
  --explain ID            why plan ID lost (or did not fit), instead of the table
  --json FILE             everything machine-readable (- : stdout)
  --out FILE              the chosen plan, for fit()'s --strategy plan:FILE
  --plot FILE             the time-cost plane with the Pareto front (PNG)
)";

void write_file(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::ofstream out(path);
  out << text;
  out.close();
  COHORT_CHECK_AS(ConfigError, out.good()) << "cannot write '" << path << "'";
}

int run(const std::vector<std::string>& args) {
  std::string profile_path, catalogue_path, topology_path, json_path, out_path, plot_path;
  double price = 0, memory = 0, memory_per_rank = 0, epochs = 0;
  int64_t examples = 0;
  int rows = 20, explain_id = 0;
  Job job;
  SearchOptions opt;
  flags::parse_flags(
      args,
      {{"--profile", [&](auto&, auto& v) { profile_path = v; }},
       {"--catalogue", [&](auto&, auto& v) { catalogue_path = v; }},
       {"--topology", [&](auto&, auto& v) { topology_path = v; }},
       {"--price-per-hour", [&](auto& f, auto& v) { price = flags::parse_number<double>(f, v, 0.0); }},
       {"--memory-bytes", [&](auto& f, auto& v) { memory = flags::parse_number<double>(f, v, 0.0); }},
       {"--memory-bytes-per-rank", [&](auto& f, auto& v) { memory_per_rank = flags::parse_number<double>(f, v, 0.0); }},
       {"--global-batch", [&](auto& f, auto& v) { job.global_batch = flags::parse_number<int64_t>(f, v, int64_t{1}); }},
       {"--steps", [&](auto& f, auto& v) { job.steps = flags::parse_number<int64_t>(f, v, int64_t{1}); }},
       {"--epochs", [&](auto& f, auto& v) { epochs = flags::parse_number<double>(f, v, 0.0); }},
       {"--examples", [&](auto& f, auto& v) { examples = flags::parse_number<int64_t>(f, v, int64_t{1}); }},
       {"--objective",
        [&](auto& f, auto& v) {
          opt.objective = flags::one_of(f, v, {"time", "cost"}) == "cost" ? Objective::cost : Objective::time;
        }},
       {"--budget", [&](auto& f, auto& v) { opt.budget_usd = flags::parse_number<double>(f, v, 0.0); }},
       {"--deadline", [&](auto& f, auto& v) { opt.deadline_s = flags::parse_number<double>(f, v, 0.0); }},
       {"--machines", [&](auto& f, auto& v) { opt.machines = flags::parse_number<int>(f, v, 1); }},
       {"--ranks-per-machine", [&](auto& f, auto& v) { opt.ranks_per_machine = flags::parse_number<int>(f, v, 1); }},
       {"--max-machines", [&](auto& f, auto& v) { opt.max_machines = flags::parse_number<int>(f, v, 1); }},
       {"--strategies",
        [&](auto&, auto& v) {
          std::stringstream ss(v);
          for (std::string item; std::getline(ss, item, ',');) opt.strategies.push_back(item);
        }},
       {"--tune-top", [&](auto& f, auto& v) { opt.tune_top = flags::parse_number<int>(f, v, 0); }},
       {"--rows", [&](auto& f, auto& v) { rows = flags::parse_number<int>(f, v, 0); }},
       {"--explain", [&](auto& f, auto& v) { explain_id = flags::parse_number<int>(f, v, 1); }},
       {"--json", [&](auto&, auto& v) { json_path = v; }},
       {"--out", [&](auto&, auto& v) { out_path = v; }},
       {"--plot", [&](auto&, auto& v) { plot_path = v; }}},
      {});
  COHORT_CHECK_AS(ConfigError, !profile_path.empty()) << "pass --profile FILE (see --help)";
  COHORT_CHECK_AS(ConfigError, catalogue_path.empty() != topology_path.empty())
      << "pass one of --catalogue FILE (machine types) or --topology FILE (measured hosts)";
  COHORT_CHECK_AS(ConfigError, job.global_batch >= 1) << "pass --global-batch B (examples per step over all replicas)";
  COHORT_CHECK_AS(ConfigError, (job.steps > 0) != (epochs > 0 || examples > 0))
      << "pass --steps N, or --epochs E and --examples X (not both)";
  if (job.steps == 0) {
    COHORT_CHECK_AS(ConfigError, epochs > 0 && examples > 0) << "--epochs and --examples go together";
    job.steps = int64_t(std::ceil(epochs * double(examples) / double(job.global_batch)));
  }
  const Profile profile = read_profile_file(profile_path);
  const Catalogue catalogue = topology_path.empty()
                                  ? read_catalogue_file(catalogue_path)
                                  : catalogue_from_topology_file(topology_path, price, memory, memory_per_rank);
  const Result result = search(profile, catalogue, job, opt);
  const ReportContext ctx{profile, catalogue, job, opt, result};
  const Plan& best = result.plans.front();
  if (explain_id > 0) {
    std::fputs(explain(ctx, explain_id).c_str(), stdout);
  } else if (json_path != "-") {
    std::printf("# cohort-plan: %s, global batch %lld, %lld steps; objective %s\n", profile.name.c_str(),
                (long long)job.global_batch, (long long)job.steps,
                opt.objective == Objective::time ? "shortest time" : "lowest cost");
    std::fputs(table(ctx, rows).c_str(), stdout);
    std::printf("# best: plan %d\n%s\n", best.id, launch_command(ctx, best).c_str());
    if (best.config.machines > 1)
      std::printf("# HOSTFILE: %d lines 'HOST slots=%d', machines of type %s\n", best.config.machines,
                  best.config.ranks_per_machine, catalogue.types[best.config.type].name.c_str());
  }
  if (!json_path.empty()) write_file(json_path, result_json(ctx));
  if (!out_path.empty()) write_file(out_path, plan_file_json(ctx, best));
  if (!plot_path.empty()) write_pareto_png(ctx, plot_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  try {
    return run(args);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "cohort-plan: %s\n", flags::one_line_message(e).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-plan: %s\n", e.what());
    return 1;
  }
}
