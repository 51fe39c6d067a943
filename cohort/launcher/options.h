// cohortrun's command line: the options it understands and their parser.
//
//   cohortrun -np N [--backend B] [--env K=V]... [--port P]
//             [--job-id ID] [--grace-s S] [--signal-grace-s S]
//             [--output pty|pipe] [--verbose]
//             [--dashboard [ADDR:]PORT [--dashboard-linger S]] [--report F.html]
//             [--] prog args...
//   cohortrun [-np N] -H host1:2,host2:2 | --hostfile F
//             [--launch-template T] [--store-addr A[:P]] [--start-timeout S]
//             [--network-interface I] [--remote-cohortrun PATH] [--dry-run]
//             [--check [--check-topology F] [--check-probe PATH]]
//             [other flags] [--] prog args...
//
// Flags come before the program; the first argument that is not a flag (or
// everything after "--") is the program, and every argument after it belongs
// to the program, even when it looks like a flag. Values are given as
// "--flag value" or "--flag=value".
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/launcher/host_list.h"
#include "cohort/launcher/launch_template.h"
#include "cohort/launcher/slurm_allocation.h"
#include "cohort/launcher/spawn.h"

namespace cohort::launcher {

// A command line cohortrun cannot act on. what() is one line without a
// "cohortrun: error:" prefix, e.g. "-np needs a positive integer, got 'x'".
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

struct LaunchOptions {
  int num_ranks = 0;              // -np; at least 1 (default with hosts: their slots)
  std::string backend;            // --backend; empty: leave COHORT_BACKEND alone
  std::string timeline;           // --timeline, made absolute: COHORT_TIMELINE for every rank
  std::vector<std::pair<std::string, std::string>> env;  // --env K=V, in order
  int port = 0;                   // --port; 0 picks a free port
  std::string job_id;             // --job-id; empty: generate one
  double grace_s = 3.0;           // --grace-s: SIGTERM to SIGKILL when stopping ranks
  double signal_grace_s = 30.0;   // --signal-grace-s: a forwarded signal to SIGKILL
  bool verbose = false;           // --verbose / -v
  OutputMode output = OutputMode::pty;  // --output pty|pipe: ranks' stdout (spawn.h)
  bool help = false;              // --help / -h: print usage and exit 0
  std::vector<std::string> command;  // the program and its arguments

  // Multi-host (empty hosts: every rank on this machine).
  std::vector<HostSlots> hosts;   // -H / --host, or --hostfile (read while parsing)
  std::string hosts_source;       // empty: the command line; else e.g. "the Slurm allocation of job 12"
  std::string more_slots;         // with hosts_source: what to do when -np is more than its slots
  std::string launch_template = kDefaultLaunchTemplate;  // --launch-template
  std::string store_addr;         // --store-addr; empty: chosen (store_address.h)
  double start_timeout_s = 60;    // --start-timeout: remote ranks must start by then
  std::string network_interface;  // --network-interface: COHORT_IFACE for every rank
  std::string remote_cohortrun;   // --remote-cohortrun; empty: this cohortrun's path
  bool dry_run = false;           // --dry-run: print what would run where, start nothing

  // --check: probe the hosts this launch would use instead of launching
  // (preflight.h); the program, when given, is not run.
  bool check = false;
  std::string check_topology;  // --check-topology FILE, made absolute: the measured topology
  std::string check_probe;     // --check-probe PATH; empty: cohort-probe beside cohortrun

  // The live dashboard and the post-run report (cohort/dashboard).
  std::string dashboard;          // --dashboard [ADDR:]PORT; empty: none
  double dashboard_linger_s = 0;  // --dashboard-linger: serve this long after the job ended
  std::string report;             // --report FILE.html, made absolute; empty: none

  // Elastic (min_np > 0): a rank that fails does not stop the job while at
  // least min_np ranks live; its slot is started again up to max_restarts
  // times, and the ranks form a new world at each change (elastic_controller.h).
  int min_np = 0;                 // --min-np; 0: not elastic (fail fast)
  int max_restarts = 3;           // --max-restarts: replacements per slot
  double elastic_timeout_s = 600; // --elastic-timeout: below --min-np this long ends the job
  // --host-discovery-script: polled every second for the hosts (host_discovery.h);
  // `hosts` holds its first answer, read while parsing. --max-np: most ranks
  // (0: as many as the discovered slots hold, growing with them).
  std::string host_discovery_script;
  int max_np = 0;

  bool elastic() const { return min_np > 0; }
};

// Most ranks cohortrun starts on one machine.
inline constexpr int kMaxRanks = 4096;

// Variables cohortrun sets itself for every rank; --env may not set them.
std::span<const char* const> launcher_variables();

// Parses the arguments after argv[0]. `allocation` (slurm_allocation.h)
// gives the hosts, and -np's default, when the command line names none; its
// launch template is used unless --launch-template is given. When its
// `problem` is set and the hosts are needed, that is the UsageError.
//
// Throws UsageError for an unknown flag, a missing or malformed value (-np
// missing without hosts, 0, negative or not a number, or more than the
// hosts' slots; a --env without '='; an unknown backend; a port outside
// 0..65535; a job id that is not a safe file-name word; a malformed -H,
// hostfile line or launch template; both -H and --hostfile), a launcher
// variable in --env, --env of a variable a flag also sets, only one of
// MASTER_ADDR and MASTER_PORT in --env, a missing program (unless --help or
// --check was given), or --check-topology/--check-probe without --check.
LaunchOptions parse_options(std::span<const std::string> args,
                            const std::optional<HostAllocation>& allocation = std::nullopt);

// The --help text: usage, flags, what ranks receive, exit codes, and the
// COHORT_* tunables table.
std::string usage_text();

}  // namespace cohort::launcher
