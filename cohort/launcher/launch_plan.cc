#include "cohort/launcher/launch_plan.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "cohort/common/error.h"
#include "cohort/launcher/launch_template.h"
#include "cohort/launcher/remote_rank.h"
#include "cohort/launcher/spawn.h"

namespace cohort::launcher {
namespace {

std::string path_of(const EnvironmentMap& env) {
  auto it = env.find("PATH");
  return it == env.end() ? std::string() : it->second;
}

std::string current_directory() {
  char buffer[PATH_MAX];
  return ::getcwd(buffer, sizeof buffer) ? std::string(buffer) : std::string();
}

// Variables whose values differ between ranks (printed per rank).
const std::set<std::string> kPerRank = {"COHORT_RANK", "COHORT_LOCAL_RANK", "COHORT_LOCAL_SIZE", "COHORT_HOST",
                                        "RANK",        "LOCAL_RANK",        "LOCAL_WORLD_SIZE"};

// Who tells a remote rank torch.distributed's master (torch_master.h).
TorchMasterRole torch_master_role_for(const JobEnvironment& job, int rank) {
  if (!job.torch_master.empty() || user_sets_torch_master(job.extra)) return TorchMasterRole::given;
  return rank == 0 ? TorchMasterRole::publish : TorchMasterRole::read;
}

}  // namespace

std::string self_executable() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

JobLayout job_layout(const LaunchOptions& options) {
  JobLayout layout;
  layout.placement = options.hosts.empty() ? place_locally(options.num_ranks, this_host_name())
                                           : place_ranks(options.hosts, options.num_ranks);
  layout.store = choose_store_address(layout.placement, options.store_addr);
  return layout;
}

JobEnvironment job_environment(const LaunchOptions& options, const std::string& job_id, const JobLayout& layout) {
  const int ranks_here = static_cast<int>(std::count_if(layout.placement.begin(), layout.placement.end(),
                                                        [](const RankPlacement& p) { return !p.remote; }));
  JobEnvironment job;
  job.job_id = job_id;
  job.size = options.num_ranks;
  job.backend = options.backend;
  job.store_host = layout.store.advertised;
  job.store_port = options.port;
  job.multi_host = !options.hosts.empty();
  if (!options.network_interface.empty()) job.extra.emplace_back("COHORT_IFACE", options.network_interface);
  if (!options.timeline.empty()) job.extra.emplace_back("COHORT_TIMELINE", options.timeline);
  job.extra.insert(job.extra.end(), options.env.begin(), options.env.end());
  job.threads_per_rank = threads_per_rank(available_cores(), std::max(1, ranks_here));
  return job;
}

LaunchPlan make_launch_plan(const LaunchOptions& options, const JobEnvironment& job, const EnvironmentMap& base,
                            const std::vector<RankPlacement>& placement, const StoreAddress& store,
                            const std::string& self) {
  LaunchPlan plan;
  plan.store = store;
  plan.cwd = current_directory();

  bool any_local = false, any_remote = false;
  for (const RankPlacement& p : placement) (p.remote ? any_remote : any_local) = true;

  if (any_local) {
    // Ranks search PATH as they will see it, --env included.
    std::string path_variable = path_of(base);
    for (const auto& [key, value] : job.extra)
      if (key == "PATH") path_variable = value;
    plan.program = resolve_program(options.command.front(), path_variable);
  }

  std::optional<LaunchTemplate> launch_template;
  std::string template_program;
  std::string remote_self = options.remote_cohortrun.empty() ? self : options.remote_cohortrun;
  if (any_remote) {
    launch_template.emplace(options.launch_template);
    template_program = resolve_program(launch_template->words().front(), path_of(base));
    if (!is_shell_safe(remote_self))
      throw ConfigError("cohortrun's path '" + remote_self +
                        "' has characters a remote shell would interpret; install it elsewhere or pass "
                        "--remote-cohortrun PATH");
  }

  const std::vector<std::string> base_envp = to_envp(base);
  for (const RankPlacement& where : placement) {
    RankLaunch launch;
    launch.where = where;
    if (!where.remote) {
      launch.path = plan.program;
      launch.argv = options.command;
      launch.envp = to_envp(rank_environment(base, job, where));
      launch.output = options.output;
    } else {
      launch.argv = launch_template->expand(where.host, {remote_self, kRemoteRankFlag, std::to_string(where.rank)});
      launch.path = template_program;
      launch.envp = base_envp;
      launch.payload = RemotePayload{.rank = where.rank,
                                     .local_size = where.local_size,
                                     .host = where.host,
                                     .grace_s = options.grace_s,
                                     .start_timeout_s = options.start_timeout_s,
                                     .cwd = plan.cwd,
                                     .output = options.output,
                                     .torch_master = torch_master_role_for(job, where.rank),
                                     .argv = options.command,
                                     .env = remote_rank_variables(base, job, where)};
    }
    plan.ranks.push_back(std::move(launch));
  }
  return plan;
}

std::string describe_plan(const LaunchPlan& plan, const LaunchOptions& options, const JobEnvironment& job,
                          const EnvironmentMap& base) {
  std::ostringstream os;
  const std::string port = job.store_port ? std::to_string(job.store_port) : "<free port>";
  os << "cohortrun: dry run, nothing is started\n";
  os << "job " << (options.job_id.empty() ? "<generated at start>" : options.job_id) << ": " << plan.ranks.size()
     << " rank(s)";
  if (!options.hosts.empty())
    os << " on " << host_count([&] {
      std::vector<RankPlacement> p;
      for (const RankLaunch& r : plan.ranks) p.push_back(r.where);
      return p;
    }()) << " host(s) of " << format_host_list(options.hosts);
  if (!options.hosts_source.empty()) os << " (" << options.hosts_source << ")";
  os << "\n";
  os << "program: " << shell_join(options.command) << "\n";
  os << "working directory: " << plan.cwd << "\n";
  os << "store: " << plan.store.advertised << ":" << port << " (" << plan.store.reason << "), bound to "
     << plan.store.bind << "\n";

  for (const RankLaunch& r : plan.ranks) {
    const RankPlacement& w = r.where;
    os << "rank " << w.rank << " on " << w.host << (w.remote ? "" : " (this machine)") << ", local rank "
       << w.local_rank << " of " << w.local_size << ": ";
    if (w.remote) {
      os << shell_join(r.argv) << "  <- program, arguments and variables on stdin";
    } else {
      std::vector<std::string> shown = r.argv;
      shown.front() = r.path;
      os << shell_join(shown);
    }
    // The variables that differ between ranks.
    const EnvironmentMap env = rank_environment({}, job, w);
    std::string per_rank;
    for (const auto& [key, value] : env)
      if (kPerRank.contains(key)) per_rank += " " + key + "=" + value;
    os << "\n   " << per_rank << "\n";
  }

  // Of the launcher's environment only the thread counts: an exported
  // OMP_NUM_THREADS is what the ranks get.
  EnvironmentMap threads;
  for (const char* var : thread_variables())
    if (const auto it = base.find(var); it != base.end()) threads.insert(*it);
  const EnvironmentMap common = rank_environment(threads, job, plan.ranks.front().where);
  os << "every rank also gets:";
  for (const auto& [key, value] : common) {
    if (kPerRank.contains(key)) continue;
    if (key == "COHORT_SECRET") {
      os << " COHORT_SECRET=<generated at start>";
      continue;
    }
    // The port may be a placeholder, printed as is.
    if (key == "COHORT_STORE_ADDR") os << " COHORT_STORE_ADDR=" << value.substr(0, value.rfind(':') + 1) << port;
    else os << " " << key << "=" << shell_join({value});
  }
  // Chosen when the job starts (torch_master.h).
  if (torch_master_role_for(job, 0) != TorchMasterRole::given)
    os << " MASTER_ADDR=<rank 0's host> MASTER_PORT=<a free port there>";
  os << "\n";
  bool any_remote = false;
  for (const RankLaunch& r : plan.ranks) any_remote = any_remote || r.where.remote;
  if (any_remote)
    os << "remote ranks: thread counts (OMP_NUM_THREADS, ...) follow their host's cores unless set here, and "
          "the launcher's COHORT_* tunables are passed on\n";
  return os.str();
}

}  // namespace cohort::launcher
