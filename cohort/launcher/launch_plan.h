// The launch plan: for every rank, the process cohortrun starts on this
// machine to run it, and what that process is given. The real launch and
// --dry-run print the same plan.
//
// A rank on this machine is its program itself, with the rank's environment.
// A rank on another host is the launch template's command for its host
// followed by `<remote cohortrun> --remote-rank R`, with the launcher's own
// environment (what ssh needs), and a RemotePayload for its standard input.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cohort/launcher/options.h"
#include "cohort/launcher/placement.h"
#include "cohort/launcher/rank_environment.h"
#include "cohort/launcher/remote_payload.h"
#include "cohort/launcher/store_address.h"

namespace cohort::launcher {

struct RankLaunch {
  RankPlacement where;
  std::string path;               // resolved argv[0], run on this machine
  std::vector<std::string> argv;  // argv[0] as given
  std::vector<std::string> envp;  // "K=V"
  // Local ranks: --output. Remote ranks: a pipe (the launch command's
  // output); their program's stdout is set up on their host (payload.output).
  OutputMode output = OutputMode::pipe;
  std::optional<RemotePayload> payload;  // remote ranks: written to stdin
};

struct LaunchPlan {
  std::vector<RankLaunch> ranks;
  StoreAddress store;
  std::string program;  // local ranks' resolved program (empty when none is local)
  std::string cwd;
};

// Where a job's ranks run and where its store listens: the placement (-H,
// --hostfile, or every rank on this machine) and the store's address
// (store_address.h). Throws ConfigError when either cannot be chosen.
struct JobLayout {
  std::vector<RankPlacement> placement;
  StoreAddress store;
};
JobLayout job_layout(const LaunchOptions& options);

// What every rank of the job is told (rank_environment.h), from the options
// and the layout: the store port is options.port until the store runs, the
// secret is left for the caller to set.
JobEnvironment job_environment(const LaunchOptions& options, const std::string& job_id, const JobLayout& layout);

// Builds the plan. `job` holds the job's values (store port and secret may
// still be placeholders for a dry run); `base` is the launcher's environment;
// `self` this cohortrun's path (the default remote cohortrun). Throws
// ExecError when a program cannot be found here (a local rank's program, the
// launch template's command), ConfigError when the remote cohortrun's path
// cannot be passed to a remote shell as is.
LaunchPlan make_launch_plan(const LaunchOptions& options, const JobEnvironment& job, const EnvironmentMap& base,
                            const std::vector<RankPlacement>& placement, const StoreAddress& store,
                            const std::string& self);

// The --dry-run text: the job, the store, one line per rank saying where it
// runs and the command that starts it, the program, and the variables ranks
// get (the secret shown as a placeholder; the thread counts as `base`, the
// launcher's environment, makes them).
std::string describe_plan(const LaunchPlan& plan, const LaunchOptions& options, const JobEnvironment& job,
                          const EnvironmentMap& base);

// This process's executable (/proc/self/exe), or empty when unknown.
std::string self_executable();

}  // namespace cohort::launcher
