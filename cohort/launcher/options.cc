#include "cohort/launcher/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <unistd.h>

#include "cohort/common/tunables.h"
#include "cohort/dashboard/server.h"
#include "cohort/launcher/host_discovery.h"
#include "cohort/launcher/job_id.h"
#include "cohort/launcher/launch_checks.h"

namespace cohort::launcher {
namespace {

constexpr const char* kLauncherVariables[] = {
    "COHORT_RANK",
    "COHORT_SIZE",
    "COHORT_LOCAL_RANK",
    "COHORT_LOCAL_SIZE",
    "COHORT_STORE_ADDR",
    "COHORT_JOB_ID",
    "COHORT_SECRET",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "COHORT_HOST",
    "COHORT_ELASTIC_SLOT",
    "COHORT_ELASTIC_INCARNATION",
    "COHORT_ELASTIC_JOINING",
    "COHORT_HEARTBEAT",
};

constexpr const char* kBackends[] = {"auto", "shm", "gloo", "mpi", "hierarchical"};

// Seconds in (0, limit]; false for anything else.
bool parse_seconds(const std::string& text, double limit, double& out) {
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(s) || s <= 0 || s > limit) return false;
  out = s;
  return true;
}

// Parses a whole decimal integer; false for anything else (sign, spaces,
// trailing characters, overflow).
bool parse_decimal(const std::string& text, long long& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

bool is_variable_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  return true;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// The value --env gave `name`, or nullptr.
const std::string* env_given(const LaunchOptions& options, const char* name) {
  for (const auto& [key, value] : options.env)
    if (key == name) return &value;
  return nullptr;
}

// A variable that --env and a flag of cohortrun's both set.
void refuse_conflict(const LaunchOptions& options, const char* variable, const std::string& flag,
                     const std::string& flag_value) {
  if (flag_value.empty()) return;
  if (const std::string* v = env_given(options, variable))
    throw UsageError(std::string("--env ") + variable + "=" + *v + " conflicts with " + flag + " " + flag_value);
}

// A grace period: seconds in [0, 3600]; UsageError naming `flag` otherwise.
double grace_seconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(s) || s < 0 || s > 3600)
    throw UsageError(flag + " needs seconds between 0 and 3600, got " + quoted(text));
  return s;
}

// `path` made absolute against the working directory; UsageError naming
// `flag` when that cannot be read.
std::string absolute_path(const std::string& flag, const std::string& path) {
  if (path[0] == '/') return path;
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) throw UsageError(flag + ": cannot read the working directory");
  return std::string(cwd) + "/" + path;
}

// The message with control characters escaped, so that an argument holding
// a newline cannot split the one-line error.
std::string one_line(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

LaunchOptions parse_arguments(std::span<const std::string> args, const std::optional<HostAllocation>& allocation);

}  // namespace

std::span<const char* const> launcher_variables() { return kLauncherVariables; }

LaunchOptions parse_options(std::span<const std::string> args, const std::optional<HostAllocation>& allocation) {
  try {
    return parse_arguments(args, allocation);
  } catch (const UsageError& e) {
    throw UsageError(one_line(e.what()));
  }
}

namespace {

LaunchOptions parse_arguments(std::span<const std::string> args, const std::optional<HostAllocation>& allocation) {
  LaunchOptions options;
  bool np_given = false;
  bool launch_template_given = false;
  bool max_restarts_given = false, elastic_timeout_given = false;
  std::string hosts_flag;  // the flag that gave the hosts, for conflicts
  std::string hosts_text;  // -H's value
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program

    std::string name = arg;
    std::string inline_value;
    bool has_inline_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
      has_inline_value = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline_value) return inline_value;
      if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
      return args[++i];
    };
    auto no_value = [&] {
      if (has_inline_value) throw UsageError(name + " takes no value, got " + quoted(arg));
    };

    if (name == "-h" || name == "--help") {
      no_value();
      options.help = true;
    } else if (name == "-v" || name == "--verbose") {
      no_value();
      options.verbose = true;
    } else if (name == "-np" || name == "-n" || name == "--np") {
      const std::string text = value();
      long long n = 0;
      if (!parse_decimal(text, n) || n < 1)
        throw UsageError(name + " needs a positive number of ranks, got " + quoted(text));
      if (n > kMaxRanks)
        throw UsageError(name + " " + text + " is more than the " + std::to_string(kMaxRanks) +
                         " ranks cohortrun starts on one machine");
      options.num_ranks = static_cast<int>(n);
      np_given = true;
    } else if (name == "--backend") {
      const std::string text = value();
      if (std::find(std::begin(kBackends), std::end(kBackends), text) == std::end(kBackends))
        throw UsageError("--backend must be auto, shm, gloo, mpi or hierarchical, got " + quoted(text));
      options.backend = text;
    } else if (name == "-H" || name == "--host") {
      const std::string text = value();
      if (!hosts_flag.empty()) throw UsageError(name + " conflicts with " + hosts_flag + " (give the hosts once)");
      options.hosts = parse_host_list(text);
      hosts_flag = name;
      hosts_text = text;
    } else if (name == "--hostfile") {
      const std::string text = value();
      if (!hosts_flag.empty()) throw UsageError(name + " conflicts with " + hosts_flag + " (give the hosts once)");
      options.hosts = read_hostfile(text);
      hosts_flag = name;
    } else if (name == "--launch-template") {
      options.launch_template = value();
      launch_template_given = true;
      LaunchTemplate check(options.launch_template);  // reports a malformed template now
    } else if (name == "--store-addr") {
      // ADDRESS, ADDRESS:PORT, or [IPv6]:PORT (a bare IPv6 address has no
      // port: its colons are its own). The port is --port's.
      const std::string given = value();
      std::string text = given, port_text;
      if (text.starts_with("[")) {
        const size_t close = text.find("]:");
        if (close == std::string::npos)
          throw UsageError("--store-addr takes an IPv6 address with a port as [ADDRESS]:PORT, got " + quoted(text));
        port_text = text.substr(close + 2);
        text = text.substr(1, close - 1);
      } else if (std::count(text.begin(), text.end(), ':') == 1) {
        port_text = text.substr(text.find(':') + 1);
        text = text.substr(0, text.find(':'));
      }
      if (text.empty() || text.find_first_of(" \t/[]") != std::string::npos)
        throw UsageError("--store-addr needs an address of this machine (e.g. 10.0.0.1 or 10.0.0.1:29500), got " +
                         quoted(given));
      if (!port_text.empty() || given.ends_with(":")) {
        long long port = 0;
        if (!parse_decimal(port_text, port) || port < 0 || port > 65535)
          throw UsageError("--store-addr's port must be a TCP port 0..65535, got " + quoted(given));
        options.port = static_cast<int>(port);
      }
      options.store_addr = text;
    } else if (name == "--start-timeout") {
      const std::string text = value();
      if (!parse_seconds(text, 86400, options.start_timeout_s))
        throw UsageError("--start-timeout needs seconds in (0, 86400], got " + quoted(text));
    } else if (name == "--network-interface") {
      const std::string text = value();
      if (text.empty() || text.size() > 15 || text.find_first_of(" \t/=:") != std::string::npos)
        throw UsageError("--network-interface needs an interface name (e.g. eth0), got " + quoted(text));
      options.network_interface = text;
    } else if (name == "--remote-cohortrun" || name == "--check-probe") {
      // Paths on every host, passed to the launch template's remote shell.
      const std::string text = value();
      if (text.empty() || text[0] != '/' || !is_shell_safe(text))
        throw UsageError(name + " needs an absolute path without blanks or shell characters, got " + quoted(text));
      (name == "--check-probe" ? options.check_probe : options.remote_cohortrun) = text;
    } else if (name == "--timeline") {
      const std::string text = value();
      if (text.empty()) throw UsageError("--timeline needs a file path for the Chrome trace, got ''");
      // Absolute: ranks may start in another directory (remote hosts).
      options.timeline = absolute_path(name, text);
    } else if (name == "--dashboard") {
      const std::string text = value();
      try {
        dashboard::parse_server_address(text, "--dashboard");
      } catch (const ConfigError& e) {
        throw UsageError(e.what());
      }
      options.dashboard = text;
    } else if (name == "--dashboard-linger") {
      options.dashboard_linger_s = grace_seconds(name, value());
    } else if (name == "--report") {
      const std::string text = value();
      if (text.empty()) throw UsageError("--report needs a file path for the HTML report, got ''");
      options.report = absolute_path(name, text);
    } else if (name == "--output") {
      const std::string text = value();
      if (text == "pty") options.output = OutputMode::pty;
      else if (text == "pipe") options.output = OutputMode::pipe;
      else throw UsageError("--output must be pty or pipe, got " + quoted(text));
    } else if (name == "--dry-run") {
      no_value();
      options.dry_run = true;
    } else if (name == "--check") {
      no_value();
      options.check = true;
    } else if (name == "--check-topology") {
      const std::string text = value();
      if (text.empty()) throw UsageError("--check-topology needs a file path for the topology, got ''");
      options.check_topology = absolute_path(name, text);
    } else if (name == "--env") {
      const std::string text = value();
      const size_t eq = text.find('=');
      if (eq == std::string::npos)
        throw UsageError(name + " needs KEY=VALUE, got " + quoted(text));
      std::string key = text.substr(0, eq);
      if (!is_variable_name(key))
        throw UsageError(name + " " + quoted(text) + ": " + quoted(key) +
                         " is not a variable name (letters, digits, '_')");
      for (const char* reserved : kLauncherVariables)
        if (key == reserved)
          throw UsageError(name + " " + quoted(text) + ": " + key +
                           " is set by cohortrun for each rank and cannot be overridden");
      options.env.emplace_back(std::move(key), text.substr(eq + 1));
    } else if (name == "--port") {
      const std::string text = value();
      long long port = 0;
      if (!parse_decimal(text, port) || port < 0 || port > 65535)
        throw UsageError("--port needs a TCP port 0..65535 (0 picks a free one), got " + quoted(text));
      options.port = static_cast<int>(port);
    } else if (name == "--job-id") {
      const std::string text = value();
      if (std::string problem = job_id_problem(text); !problem.empty())
        throw UsageError("--job-id: " + problem);
      options.job_id = text;
    } else if (name == "--host-discovery-script") {
      const std::string text = value();
      if (!hosts_flag.empty()) throw UsageError(name + " conflicts with " + hosts_flag + " (give the hosts once)");
      if (text.empty()) throw UsageError(name + " needs a command that prints host:slots lines, got ''");
      options.host_discovery_script = text;
      hosts_flag = name;
    } else if (name == "--max-np") {
      const std::string text = value();
      long long n = 0;
      if (!parse_decimal(text, n) || n < 1 || n > kMaxRanks)
        throw UsageError(name + " needs a positive number up to " + std::to_string(kMaxRanks) + ", got " + quoted(text));
      options.max_np = static_cast<int>(n);
    } else if (name == "--min-np" || name == "--max-restarts") {
      const std::string text = value();
      long long n = 0;
      if (!parse_decimal(text, n) || n < (name == "--min-np" ? 1 : 0) || n > kMaxRanks)
        throw UsageError(name + " needs " + (name == "--min-np" ? "a positive" : "a non-negative") +
                         " number up to " + std::to_string(kMaxRanks) + ", got " + quoted(text));
      (name == "--min-np" ? options.min_np : options.max_restarts) = static_cast<int>(n);
      if (name == "--max-restarts") max_restarts_given = true;
    } else if (name == "--elastic-timeout") {
      const std::string text = value();
      if (!parse_seconds(text, 86400, options.elastic_timeout_s))
        throw UsageError(name + " needs seconds in (0, 86400], got " + quoted(text));
      elastic_timeout_given = true;
    } else if (name == "--grace-s") {
      options.grace_s = grace_seconds(name, value());
    } else if (name == "--signal-grace-s") {
      options.signal_grace_s = grace_seconds(name, value());
    } else {
      throw UsageError("unknown flag " + quoted(arg));
    }
  }
  options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (options.help) return options;
  check_program_is_not_a_host(options, hosts_text);
  if (options.dashboard_linger_s > 0 && options.dashboard.empty())
    throw UsageError("--dashboard-linger needs --dashboard (there is nothing to keep serving)");
  if (!options.host_discovery_script.empty()) {
    if (!options.elastic()) throw UsageError("--host-discovery-script needs --min-np (an elastic job)");
    // The first answer places the ranks started; the launcher polls for more.
    const Discovery found = discover_hosts(options.host_discovery_script, kDiscoveryTimeout);
    if (!found.ok) throw UsageError(found.error);
    if (found.hosts.empty())
      throw UsageError("host discovery script '" + options.host_discovery_script + "' found no host to start on");
    options.hosts = found.hosts;
    if (!np_given) {
      options.num_ranks = std::min(total_slots(options.hosts), options.max_np > 0 ? options.max_np : kMaxRanks);
      np_given = true;  // placed on the hosts below as if given
    }
  } else if (options.max_np > 0) {
    throw UsageError("--max-np needs --host-discovery-script (hosts that can grow)");
  }
  if (hosts_flag.empty() && allocation) {
    if (!allocation->problem.empty())
      throw UsageError("cannot place the ranks on " + allocation->name + ": " + allocation->problem);
    options.hosts = allocation->hosts;
    options.hosts_source = allocation->name;
    options.more_slots = allocation->more_slots;
    if (!launch_template_given) options.launch_template = allocation->launch_template;
  }
  if (options.max_np > 0 && options.max_np < options.num_ranks)
    throw UsageError("--max-np " + std::to_string(options.max_np) + " is fewer than the " +
                     std::to_string(options.num_ranks) + " rank(s) started (-np)");
  if (!options.hosts.empty()) {
    if (!np_given) options.num_ranks = std::min(total_slots(options.hosts), kMaxRanks);
    if (options.num_ranks > total_slots(options.hosts))
      throw UsageError("-np " + std::to_string(options.num_ranks) + " is more than the " +
                       std::to_string(total_slots(options.hosts)) + " slot(s) of " +
                       (options.hosts_source.empty() ? "the hosts " + format_host_list(options.hosts)
                                                     : options.hosts_source + " (" + format_host_list(options.hosts) +
                                                           "): " + options.more_slots));
  } else if (!np_given) {
    throw UsageError("-np N is required (the number of ranks to start)");
  }
  if ((!options.check_topology.empty() || !options.check_probe.empty()) && !options.check)
    throw UsageError("--check-topology and --check-probe need --check");
  if (options.command.empty() && !options.check)
    throw UsageError("no program to run (usage: cohortrun -np N [flags] prog args...)");
  if (options.elastic()) {
    if (options.min_np > options.num_ranks)
      throw UsageError("--min-np " + std::to_string(options.min_np) + " is more than the " +
                       std::to_string(options.num_ranks) + " rank(s) started (-np)");
    // MPI's world is fixed at MPI_Init: an elastic world is formed again
    // through the store (shm, gloo, hierarchical).
    if (options.backend == "mpi")
      throw UsageError("--min-np (elastic) cannot run on --backend mpi: its world cannot change size");
  } else if (max_restarts_given || elastic_timeout_given) {
    throw UsageError("--max-restarts and --elastic-timeout need --min-np (an elastic job)");
  }
  refuse_conflict(options, "COHORT_BACKEND", "--backend", options.backend);
  refuse_conflict(options, "COHORT_TIMELINE", "--timeline", options.timeline);
  refuse_conflict(options, "COHORT_IFACE", "--network-interface", options.network_interface);
  // torch.distributed's master is the user's only whole: half of it would
  // pair with a port or host cohortrun chose for another address.
  const bool addr = env_given(options, "MASTER_ADDR"), port = env_given(options, "MASTER_PORT");
  if (addr != port)
    throw UsageError(std::string("--env ") +
                     (addr ? "MASTER_ADDR needs --env MASTER_PORT" : "MASTER_PORT needs --env MASTER_ADDR") +
                     " too: give torch.distributed's master whole, or neither for cohortrun to choose it");
  check_multi_host_launch(options);
  return options;
}

}  // namespace

std::string usage_text() {
  std::ostringstream os;
  os << "usage: cohortrun -np N [flags] [--] prog [args...]\n"
        "       cohortrun [-np N] -H host1:2,host2:2 | --hostfile F [flags] [--] prog [args...]\n"
        "       cohortrun --check [--check-topology F] [--check-probe P] [the launch's flags]\n"
        "                 [prog [args...]]\n"
        "\n"
        "Starts N ranks of prog on this machine (or on the hosts given), with a TCP\n"
        "store for rendezvous, prefixes their output with [rank], and stops all of them\n"
        "when one fails.\n"
        "\n"
        "flags:\n"
        "  -np, -n, --np N       number of ranks to start (1.."
     << kMaxRanks
     << "; with hosts, default: all\n"
        "                        their slots)\n"
        "  --backend B           communicator backend: auto, shm, gloo, mpi, hierarchical\n"
        "                        (sets COHORT_BACKEND; shm reaches one host's ranks only:\n"
        "                        refused when the ranks span hosts)\n"
        "  --env K=V             set K=V for every rank (repeatable)\n"
        "  --timeline F          write the engines' Chrome trace to F (rank 0 of each engine;\n"
        "                        sets COHORT_TIMELINE; opens in Perfetto or chrome://tracing)\n"
        "  --port P              TCP port of the store (default 0: a free port)\n"
        "  --job-id ID           job id (letters, digits, '_', '.'; default: generated)\n"
        "  --grace-s S           seconds between SIGTERM and SIGKILL when stopping\n"
        "                        ranks after a failure (default 3)\n"
        "  --output pty|pipe     the ranks' stdout: a pseudo-terminal (default; their stdio\n"
        "                        writes each line as it ends, progress bars see a terminal)\n"
        "                        or a pipe (stdio then buffers it in blocks); stderr is a pipe\n"
        "  --signal-grace-s S    seconds ranks get to exit after cohortrun forwards\n"
        "                        SIGINT, SIGTERM or SIGHUP to them, before SIGKILL\n"
        "                        (default 30)\n"
        "  --min-np N            elastic: a rank that fails does not stop the job while N\n"
        "                        ranks live; its slot is started again (--max-restarts) and\n"
        "                        the ranks go on in a new world (cohort's elastic state)\n"
        "  --max-restarts K      elastic: replacements per slot (default 3)\n"
        "  --elastic-timeout S   elastic: fewer than --min-np ranks for S seconds ends the\n"
        "                        job (default 600)\n"
        "  --host-discovery-script S\n"
        "                        elastic: the command S prints the hosts available now,\n"
        "                        one host:slots per line; run at the start (instead of -H)\n"
        "                        and every second: ranks start on new slots (up to\n"
        "                        --max-np) and leave hosts that go; a host where a rank\n"
        "                        fails is blacklisted for 10 s, doubling per failure\n"
        "  --max-np N            elastic with discovery: most ranks (default: as many as\n"
        "                        the discovered slots hold, growing with them)\n"
        "  --dashboard [ADDR:]PORT\n"
        "                        serve the live dashboard (per-rank steps and times,\n"
        "                        metrics, stragglers, the failure) at http://ADDR:PORT/ and\n"
        "                        its JSON at /api/status; ADDR defaults to 127.0.0.1, any\n"
        "                        other address asks for the token in the URL cohortrun\n"
        "                        prints (docs/dashboard.md, docs/security.md); PORT 0: free\n"
        "  --dashboard-linger S  keep serving the dashboard S seconds after the job ended,\n"
        "                        so a browser sees how it ended (default 0)\n"
        "  --report F.html       write the dashboard's final view to F.html when the job\n"
        "                        ends, also when it failed: one self-contained file\n"
        "  -v, --verbose         report the store, the ranks' pids and how each ended\n"
        "  -h, --help            print this help\n"
        "\n"
        "multi-host flags:\n"
        "  -H, --host LIST       hosts and their slots: host1:2,host2:2 (slots default 1),\n"
        "                        one word: commas, no spaces (a program that looks like\n"
        "                        host:slots is refused as this typo); ranks fill them in\n"
        "                        order (host1 gets ranks 0 and 1, ...)\n"
        "  --hostfile F          hosts from a file: one 'host slots=N' per line, '#' comments\n"
        "                        (neither given inside a Slurm allocation, an sbatch script\n"
        "                        or a salloc shell: its nodes, SLURM_JOB_NODELIST, with\n"
        "                        SLURM_TASKS_PER_NODE slots each, the ranks of other nodes\n"
        "                        started with '"
     << kSlurmLaunchTemplate
     << "')\n"
        "  --launch-template T   how to start a rank on a host; {host} is replaced by the\n"
        "                        host (default: '"
     << kDefaultLaunchTemplate
     << "';\n"
        "                        for the network namespaces of scripts/cluster.sh:\n"
        "                        'ip netns exec {host}')\n"
        "  --store-addr A[:P]    this machine's address the hosts reach the store at (default:\n"
        "                        the source address of the route to the hosts); the store\n"
        "                        binds it. Needed when the host names do not resolve here\n"
        "                        or the hosts are reached from different addresses; never\n"
        "                        loopback (127.0.0.1, localhost) when ranks run on other\n"
        "                        hosts: refused. Ranks that cannot reach it fail at once\n"
        "                        when no retry can help (no route to it, nothing listening).\n"
        "                        A:P also sets --port (IPv6: [A]:P); the later of the two\n"
        "                        flags wins\n"
        "  --start-timeout S     seconds remote ranks may take to start (default 60; with\n"
        "                        --min-np also each replacement started remotely)\n"
        "  --network-interface I network interface the ranks communicate on (sets COHORT_IFACE;\n"
        "                        a loopback one such as lo is refused when ranks run on other\n"
        "                        hosts)\n"
        "  --remote-cohortrun P  path of cohortrun on the hosts (default: this one's path)\n"
        "  --dry-run             print which rank would run where, and how; start nothing\n"
        "  --check               check instead of launching (the program, if given, is not\n"
        "                        run): start cohort-probe on every slot exactly as this\n"
        "                        launch would start its ranks, and print per host and pair\n"
        "                        of hosts: reachable, same cohort build, the interface that\n"
        "                        routes every pair (and why others were rejected), store and\n"
        "                        data ports open, /dev/shm and ulimit -n/-l/-v for this job,\n"
        "                        clock skew, a tiny allreduce per backend, each link's\n"
        "                        latency and bandwidth; then one verdict line and a fix per\n"
        "                        problem. Exit status 0 only when the launch would work\n"
        "  --check-topology F    with --check: write the measured links as a cohort-sim\n"
        "                        topology file (tools/sim/README.md)\n"
        "  --check-probe P       with --check: the probe's path on every host, absolute and\n"
        "                        without blanks or shell characters (default:\n"
        "                        cohort-probe beside this cohortrun)\n"
        "\n"
        "A rank on another host is started as '<template> <cohortrun> --remote-rank R';\n"
        "its program, arguments, working directory and variables (the job secret among\n"
        "them) travel on that command's standard input, never on a command line. There,\n"
        "the rank gets its host's login environment plus the COHORT_* variables below,\n"
        "the launcher's COHORT_* tunables and thread counts, and --env; it stops when\n"
        "the launch command ends (ssh's connection closes). Hosts named localhost or\n"
        "like this machine run their ranks directly. With hosts, ranks also get\n"
        "COHORT_HOST (their host's name); COHORT_LOCAL_RANK/SIZE count ranks per host.\n"
        "A job of fixed size on hosts also sets COHORT_HEARTBEAT=1: every rank beats to\n"
        "the store, and a host whose ranks all fall silent for\n"
        "COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S (10 s; 0: off) ends the job, named.\n"
        "\n"
        "Each rank gets COHORT_RANK, COHORT_SIZE, COHORT_LOCAL_RANK, COHORT_LOCAL_SIZE,\n"
        "COHORT_STORE_ADDR (host:port), COHORT_JOB_ID, COHORT_SECRET, torchrun's RANK,\n"
        "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT\n"
        "(torch.distributed's env:// master: rank 0's host and a port free there, not\n"
        "the store; --env MASTER_ADDR=H --env MASTER_PORT=P choose them), and\n"
        "OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = max(1, cores / ranks\n"
        "on the host) unless already set. Ranks read stdin from /dev/null and inherit\n"
        "no file descriptors beyond stdin, stdout and stderr. Each rank runs in its own\n"
        "process group and is killed if cohortrun dies. SIGINT, SIGTERM and SIGHUP are\n"
        "forwarded to every rank; ranks still running --signal-grace-s later, or when\n"
        "a second one arrives, are killed with SIGKILL (and reported). Signals within\n"
        "0.5 s of the first are copies of it (timeout signals cohortrun and then its\n"
        "process group), not a second one: the ranks keep their grace period.\n"
        "Shared-memory segments /dev/shm/cohort-<job id>-* left behind are removed.\n"
        "With --min-np, ranks also get COHORT_ELASTIC_SLOT (their COHORT_RANK) and\n"
        "COHORT_ELASTIC_INCARNATION (0, then one more per replacement of the slot), and\n"
        "those started while the job runs COHORT_ELASTIC_JOINING=1; their rank and size\n"
        "are those of the membership epoch cohortrun publishes in the store.\n"
        "\n"
        "exit status:\n"
        "  0        every rank exited with code 0\n"
        "  1        a rank exited with a non-zero code (the first one is reported),\n"
        "           or cohortrun could not start the job (remote ranks did not start\n"
        "           within --start-timeout)\n"
        "  128+S    a rank was killed by signal S, or cohortrun was stopped by signal S\n"
        "  C        cohortrun was stopped by a signal and every rank then exited with\n"
        "           the same code C > 0 (a preempted fit() exits with 75: launch again)\n"
        "  2        bad command line, or a launch that cannot work (a loopback --store-addr\n"
        "           or interface with other hosts, --backend shm across hosts)\n"
        "  126/127  the program cannot be executed / was not found, here or on a host\n"
        "           (there, before the rank started: its output says why)\n"
        "  with --check: 0 the launch would work, 1 it would fail (the problems are listed)\n"
        "\n"
        "tunables (environment variables read by the ranks):\n"
     << tunables::format_table();
  return os.str();
}

}  // namespace cohort::launcher
