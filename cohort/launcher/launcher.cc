#include "cohort/launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"
#include "cohort/dashboard/dashboard.h"
#include "cohort/dashboard/report.h"
#include "cohort/launcher/elastic_controller.h"
#include "cohort/launcher/host_discovery.h"
#include "cohort/launcher/host_watch.h"
#include "cohort/launcher/job_id.h"
#include "cohort/launcher/launch_plan.h"
#include "cohort/launcher/placement.h"
#include "cohort/launcher/rank_environment.h"
#include "cohort/launcher/report.h"
#include "cohort/launcher/shm_cleanup.h"
#include "cohort/launcher/signals.h"
#include "cohort/launcher/spawn.h"
#include "cohort/launcher/start_watch.h"
#include "cohort/launcher/store_address.h"
#include "cohort/launcher/supervisor.h"
#include "cohort/launcher/torch_master.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/telemetry/job_record.h"

namespace cohort::launcher {
namespace {

// cohortrun's line for an error.
std::string error_line(const std::string& text) { return "cohortrun: error: " + text + "\n"; }

void print_error(const std::string& text) {
  const std::string line = error_line(text);
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

void print(const std::string& text) {
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
}

// Removes the job's leftover shared memory when the job is over, however it
// ends; declared before the supervisor so that it runs after every rank is
// reaped.
class SegmentCleanup {
 public:
  SegmentCleanup(std::string job_id, bool verbose) : job_id_(std::move(job_id)), verbose_(verbose) {}
  ~SegmentCleanup() {
    const std::vector<std::string> removed = remove_job_segments(job_id_);
    if (verbose_ && !removed.empty())
      print("cohortrun: removed " + std::to_string(removed.size()) + " leftover segment(s) /dev/shm/cohort-" +
            job_id_ + "-*\n");
  }
  SegmentCleanup(const SegmentCleanup&) = delete;
  SegmentCleanup& operator=(const SegmentCleanup&) = delete;

 private:
  std::string job_id_;
  bool verbose_;
};

// Each running rank holds two descriptors in the launcher (its stdout's
// terminal or pipe, its stderr's pipe); a large -np would exceed the usual
// soft limit of 1024 descriptors, so raise it (up to the hard limit) when
// needed.
void raise_descriptor_limit(int ranks) {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t needed = static_cast<rlim_t>(ranks) * 2 + 64;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    limit.rlim_cur = (limit.rlim_max == RLIM_INFINITY) ? needed : std::min(needed, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The supervisor's elastic policy: the controller, keyed by the ranks'
// records, and the host discovery script polled every kDiscoveryPeriod.
class ElasticAdapter final : public ElasticPolicy {
 public:
  ElasticAdapter(ElasticController& controller, std::string discovery_script, dashboard::Dashboard* dashboard)
      : controller_(controller), script_(std::move(discovery_script)), dashboard_(dashboard) {}
  bool rank_ended(const RankRecord& r, std::string& note) override {
    const bool goes_on = controller_.member_ended({r.rank, r.incarnation}, !r.status.success(), note);
    if (dashboard_) {
      const std::string who = "rank " + rendezvous::member_text({r.rank, r.incarnation});
      dashboard_->state().set_rank_ended(r.rank, describe(r.status));
      dashboard_->state().add_event({.unix_time_s = telemetry::unix_now_s(),
                                     .kind = "membership",
                                     .message = who + " " + describe(r.status) + (note.empty() ? "" : ": " + note)});
    }
    return goes_on;
  }
  std::string tick() override {
    const auto now = ElasticController::Clock::now();
    if (!script_.empty() && now >= next_discovery_) {
      const Discovery found = discover_hosts(script_, kDiscoveryTimeout);
      next_discovery_ = ElasticController::Clock::now() + kDiscoveryPeriod;
      if (!found.ok) {
        // Said once per distinct problem; the hosts known stay.
        if (found.error != last_error_) print("cohortrun: warning: " + found.error + "; keeping the hosts known\n");
        last_error_ = found.error;
      } else {
        last_error_.clear();
        if (const std::string note = controller_.hosts_discovered(found.hosts); !note.empty()) {
          print("cohortrun: host discovery: " + note + "\n");
          if (dashboard_)
            dashboard_->state().add_event(
                {.unix_time_s = telemetry::unix_now_s(), .kind = "membership", .message = "host discovery: " + note});
        }
      }
    }
    return controller_.tick(now);
  }
  std::chrono::milliseconds period() const override { return ElasticController::kTickPeriod; }

 private:
  ElasticController& controller_;
  std::string script_;
  dashboard::Dashboard* dashboard_;
  ElasticController::Clock::time_point next_discovery_{};
  std::string last_error_;
};

SpawnRequest spawn_request(const RankLaunch& launch) {
  return {.path = launch.path,
          .argv = launch.argv,
          .envp = launch.envp,
          .output = launch.output,
          .stdin_pipe = launch.payload.has_value()};
}

// A slot's launch with its elastic identity (rank_environment() leaves
// these unset, so they are not there twice): in the rank's environment
// here, or in a remote rank's payload. `joining`: started while the job
// runs.
RankLaunch with_elastic_identity(RankLaunch launch, rendezvous::Member m, bool joining) {
  std::vector<std::pair<std::string, std::string>> vars = {{"COHORT_ELASTIC_SLOT", std::to_string(m.slot)},
                                                           {"COHORT_ELASTIC_INCARNATION", std::to_string(m.incarnation)}};
  if (joining) vars.emplace_back("COHORT_ELASTIC_JOINING", "1");
  for (const auto& [name, value] : vars) {
    if (launch.payload) launch.payload->env.emplace_back(name, value);
    else launch.envp.push_back(name + "=" + value);
  }
  return launch;
}

// The dashboard (--dashboard) or the state behind the report (--report),
// over a client of the job's store; nullptr when neither was asked for.
std::unique_ptr<dashboard::Dashboard> start_dashboard(const LaunchOptions& options, const std::string& store_host,
                                                      int store_port, const std::string& secret) {
  if (options.dashboard.empty() && options.report.empty()) return nullptr;
  auto client = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
      .host = store_host, .port = store_port, .secret = secret, .connect_timeout = std::chrono::seconds(10)});
  dashboard::DashboardOptions dashboard_options{
      .serve = !options.dashboard.empty(), .secret = secret, .state = {.size = options.num_ranks}};
  if (dashboard_options.serve)
    dashboard_options.address = dashboard::parse_server_address(options.dashboard, "--dashboard");
  auto dashboard = std::make_unique<dashboard::Dashboard>(std::move(dashboard_options), std::move(client));
  if (!options.dashboard.empty()) print("cohortrun: dashboard at " + dashboard->url() + "\n");
  return dashboard;
}

// A job whose first failure is a remote rank that ended with 126 or 127
// before its remote end recorded the start (the program, or cohortrun, could
// not be executed on its host) ends with that code, as a rank on this
// machine whose program is missing does: sets `code` and returns the line
// that says so, or "".
std::string remote_exec_failure(const SupervisionResult& result, StartWatch& watch, int& code) {
  if (result.reason != StopReason::rank_failed) return {};
  for (const RankRecord& r : result.ranks) {
    if (r.rank != result.failed_rank || r.host.empty() || !r.status.exited()) continue;
    if ((r.status.code() != 126 && r.status.code() != 127) || watch.recorded_start(r.rank)) return {};
    code = r.status.code();
    return error_line("rank " + std::to_string(r.rank) + " did not start on " + r.host + ": its program or cohortrun " +
                      (code == 127 ? "was not found" : "could not be executed") +
                      " there (its output above says which); every host needs both at the same path as here "
                      "(or pass --remote-cohortrun)");
  }
  return {};
}

// How long a rank may send no heartbeat: COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S,
// 0 for never. The ranks beat every COHORT_ELASTIC_HEARTBEAT_MS (they
// inherit this environment): a timeout that a beat or two can miss would
// kill them all.
double heartbeat_silence_s() {
  const double silence_s = tunables::elastic_heartbeat_timeout_s();
  const double beat_s = double(tunables::elastic_heartbeat_ms()) / 1000;
  COHORT_CHECK_AS(ConfigError, silence_s == 0 || (silence_s > 0 && beat_s > 0 && silence_s >= 2 * beat_s))
      << "COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=" << silence_s
      << " must be 0 (off) or at least twice COHORT_ELASTIC_HEARTBEAT_MS (" << beat_s << " s)";
  return silence_s;
}

// Seconds of a host's silence after which a rank's failure is said to
// likely follow from it (a few missed beats, well short of the verdict).
constexpr double kSilentHostNote_s = 3;

// What cohortrun says about how the job ended (possibly nothing). A rank
// that failed while a host was silent (its COHORT_TIMEOUT_S was shorter
// than the host watch's) most likely failed because of that host: the
// report says so after the rank's own words, which may name a healthy peer.
std::string end_text(const SupervisionResult& result, const std::string& launch_error, const HostWatch* host_watch) {
  if (!launch_error.empty()) return error_line(launch_error);
  if (result.reason == StopReason::rank_failed) {
    std::string report = failure_report(result);
    if (host_watch)
      if (const std::string silent = host_watch->silent_hosts(kSilentHostNote_s); !silent.empty())
        report += "cohortrun: note: " + silent + "; the failure above likely follows from it\n";
    return report;
  }
  if (result.reason == StopReason::start_timeout || result.reason == StopReason::elastic_ended ||
      result.reason == StopReason::host_lost)
    return error_line(result.start_error);
  return stop_summary(result);
}

// The job's end as the dashboard shows it: its phase and `failure` (what
// cohortrun printed; empty when the job succeeded), how each rank ended;
// then the report file and the linger.
void finish_dashboard(dashboard::Dashboard& dashboard, const LaunchOptions& options, const SupervisionResult& result,
                      const std::string& failure, SignalEvents& signals) {
  for (const RankRecord& r : result.ranks) dashboard.state().set_rank_ended(r.rank, describe(r.status));
  dashboard.poll_now();  // the ranks' last samples and epochs
  dashboard.state().set_phase(failure.empty() ? dashboard::JobPhase::finished : dashboard::JobPhase::failed, failure);
  if (!options.report.empty()) {
    try {
      dashboard::write_report(options.report, dashboard.status_json());
      print("cohortrun: report written to " + options.report + "\n");
    } catch (const Error& e) {
      print_error(std::string("cannot write the report: ") + e.what());
    }
  }
  if (options.dashboard_linger_s <= 0 || options.dashboard.empty()) return;
  // SIGINT, SIGTERM or SIGHUP (blocked, read from the signal fd) ends the
  // linger early.
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.dashboard_linger_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    struct pollfd p {
      .fd = signals.fd(), .events = POLLIN, .revents = 0
    };
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    for (int signo; (signo = signals.next()) != 0;)
      if (signo != SIGCHLD) return;
  }
}

}  // namespace

int run_job(const LaunchOptions& options) {
  SignalEvents signals;
  const std::string job_id = options.job_id.empty() ? generate_job_id() : options.job_id;
  SegmentCleanup cleanup(job_id, options.verbose && !options.dry_run);

  const bool multi_host = !options.hosts.empty();
  JobLayout layout;
  try {
    layout = job_layout(options);
  } catch (const ConfigError& e) {
    print_error(e.what());
    return 1;
  }
  const std::vector<RankPlacement>& placement = layout.placement;
  const StoreAddress& store_address = layout.store;
  const bool ranks_here =
      std::any_of(placement.begin(), placement.end(), [](const RankPlacement& p) { return !p.remote; });
  JobEnvironment job = job_environment(options, job_id, layout);
  try {
    // Elastic jobs beat anyway (their controller watches every process).
    job.heartbeat = job.multi_host && !options.elastic() && heartbeat_silence_s() > 0;
  } catch (const ConfigError& e) {
    print_error(e.what());
    return 1;
  }
  const EnvironmentMap base = current_environment();

  LaunchPlan plan;
  try {
    plan = make_launch_plan(options, job, base, placement, store_address, self_executable());
  } catch (const ExecError& e) {
    print_error(e.what());
    return e.exit_code();
  } catch (const Error& e) {
    print_error(e.what());
    return 1;
  }
  if (options.dry_run) {
    const std::string text = describe_plan(plan, options, job, base);
    [[maybe_unused]] ssize_t n = ::write(STDOUT_FILENO, text.data(), text.size());
    return 0;
  }

  // The real values, now that nothing can fail before the store exists.
  job.secret = rendezvous::generate_secret();
  std::optional<rendezvous::TcpStoreServer> store;
  try {
    store.emplace(rendezvous::TcpStoreServerOptions{
        .host = store_address.bind, .port = options.port, .secret = job.secret});
  } catch (const Error& e) {
    print_error(std::string("cannot start the store: ") + e.what());
    return 1;
  }
  job.store_port = store->port();
  std::unique_ptr<dashboard::Dashboard> dashboard;
  try {
    dashboard = start_dashboard(options, store_address.bind, job.store_port, job.secret);
  } catch (const Error& e) {
    print_error(std::string("cannot start the dashboard: ") + e.what());
    return 1;
  }
  // torch.distributed's master (torch_master.h): chosen here when rank 0
  // runs here; else rank 0's remote end chooses it, before this machine's
  // ranks start (below).
  const RankPlacement& rank0 =
      *std::find_if(placement.begin(), placement.end(), [](const RankPlacement& p) { return p.rank == 0; });
  const bool user_master = user_sets_torch_master(job.extra);
  const bool master_from_rank0 = !user_master && rank0.remote;
  if (!user_master && !rank0.remote) {
    try {
      const EnvironmentMap rank0_env = rank_environment(base, job, rank0);  // its COHORT_IFACE
      const auto iface = rank0_env.find("COHORT_IFACE");
      const bool all_here =
          std::none_of(placement.begin(), placement.end(), [](const RankPlacement& p) { return p.remote; });
      job.torch_master =
          choose_torch_master(iface == rank0_env.end() ? std::string() : iface->second, all_here, job.store_host);
    } catch (const Error& e) {
      print_error(e.what());
      return 1;
    }
  }
  plan = make_launch_plan(options, job, base, placement, store_address, self_executable());
  if (options.verbose)
    print("cohortrun: job " + job_id + ": " + std::to_string(options.num_ranks) + " rank(s) of " +
          options.command.front() + (multi_host ? " on " + std::to_string(host_count(placement)) + " host(s)" : "") +
          ", store at " + job.store_host + ":" + std::to_string(job.store_port) + " (" + store_address.reason + ")" +
          (ranks_here ? ", " + thread_count(base, job) + " thread(s) per rank here" : std::string()) + "\n");

  raise_descriptor_limit(options.num_ranks);
  Supervisor supervisor(
      SupervisorOptions{.grace_s = options.grace_s, .signal_grace_s = options.signal_grace_s, .verbose = options.verbose},
      signals);
  std::string launch_error;
  int launch_error_code = 0;
  std::optional<ElasticController> elastic;
  std::optional<ElasticAdapter> elastic_policy;
  // Starts a rank's process (slot m.slot's incarnation in an elastic job)
  // under the supervisor, and passes a remote rank its payload.
  auto start_rank = [&](const RankLaunch& plain, std::optional<rendezvous::Member> m, bool joining) {
    const RankLaunch launch = m ? with_elastic_identity(plain, *m, joining) : plain;
    const SpawnedProcess process = spawn_process(spawn_request(launch));
    supervisor.add(launch.where.rank, process, launch.where.remote ? launch.where.host : std::string(),
                   m ? m->incarnation : 0);
    if (dashboard)
      dashboard->state().set_rank_process(launch.where.rank, launch.where.remote ? launch.where.host : this_host_name(),
                                          process.pid);
    if (launch.payload) send_payload(process.stdin_fd, *launch.payload);
    return process;
  };
  if (options.elastic()) {
    try {
      auto client = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
          .host = store_address.bind, .port = job.store_port, .secret = job.secret,
          .connect_timeout = std::chrono::seconds(10)});
      std::vector<std::string> slot_hosts;
      if (multi_host)
        for (const RankPlacement& p : placement) slot_hosts.push_back(p.host);
      const bool discovery = !options.host_discovery_script.empty();
      const double silence_s = heartbeat_silence_s();
      elastic.emplace(
          ElasticOptions{.min_np = options.min_np,
                         // With discovery and no --max-np: as many as the slots hold.
                         .max_np = options.max_np > 0 ? options.max_np : discovery ? kMaxRanks : 0,
                         .max_restarts = options.max_restarts,
                         .timeout_s = options.elastic_timeout_s,
                         .heartbeat_timeout_s = silence_s,
                         .start_timeout_s = options.start_timeout_s,
                         .slot_hosts = slot_hosts,
                         .discovered = discovery ? std::optional(options.hosts) : std::nullopt},
          std::move(client), options.num_ranks, [&](rendezvous::Member m, const std::string& host) {
            // A slot started where it ran before reuses its launch; one on
            // another host (discovery) gets one made for it there.
            const bool planned = size_t(m.slot) < plan.ranks.size() &&
                                 (host.empty() || plan.ranks[size_t(m.slot)].where.host == host);
            JobEnvironment grown = job;  // a new slot's COHORT_RANK is within its COHORT_SIZE
            grown.size = std::max(job.size, m.slot + 1);
            const RankLaunch launch =
                planned ? plan.ranks[size_t(m.slot)]
                        : make_launch_plan(options, grown, base,
                                           {RankPlacement{.rank = m.slot, .host = host, .remote = !is_this_host(host)}},
                                           store_address, self_executable())
                              .ranks.at(0);
            const SpawnedProcess process = start_rank(launch, m, /*joining=*/true);
            if (options.verbose)
              print("cohortrun: rank " + rendezvous::member_text(m) + (host.empty() ? "" : " on " + host) + ": pid " +
                    std::to_string(process.pid) + "\n");
            return launch.payload.has_value();  // through the launch template
          });
      // A silent process (a cut link, a hung host) is killed: its end is
      // then a failure like any other, and its peers abandon their world.
      elastic->set_terminate([&](rendezvous::Member m, const std::string& why) {
        const std::string host = elastic->host_of(m.slot);
        print("cohortrun: rank " + rendezvous::member_text(m) + (host.empty() ? "" : " on " + host) + " " + why +
              "; killing it\n");
        supervisor.kill(m.slot, m.incarnation);
      });
      elastic->publish_initial();
      elastic_policy.emplace(*elastic, options.host_discovery_script, dashboard.get());
      supervisor.set_elastic(*elastic_policy);
    } catch (const Error& e) {
      print_error(std::string("cannot start the elastic membership: ") + e.what());
      return 1;
    }
  }
  std::map<int, std::string> remote_ranks;
  bool output_noted = false;  // a missing pseudo-terminal is said once, not per rank
  pid_t rank0_pid = -1;
  for (const RankLaunch& launch : plan.ranks) {
    const int rank = launch.where.rank;
    if (master_from_rank0 && job.torch_master.empty() && !launch.where.remote) {
      // This machine's ranks need what rank 0's end chose (it started
      // first: the plan is in rank order).
      try {
        rendezvous::TcpStore client({.host = store_address.bind,
                                     .port = job.store_port,
                                     .secret = job.secret,
                                     .connect_timeout = std::chrono::seconds(10)});
        job.torch_master = await_torch_master(client, options.start_timeout_s,
                                              [&] { return rank0_pid > 0 && process_running(rank0_pid); });
      } catch (const Error& e) {
        launch_error = "rank " + std::to_string(rank) + ": " + e.what();
        launch_error_code = 1;
        supervisor.stop();
        break;
      }
      for (RankLaunch& local : plan.ranks)
        if (!local.where.remote) local.envp = to_envp(rank_environment(base, job, local.where));
    }
    try {
      const SpawnedProcess process =
          start_rank(launch, elastic ? std::optional<rendezvous::Member>({rank, 0}) : std::nullopt, /*joining=*/false);
      if (!process.output_note.empty() && !output_noted) {
        print("cohortrun: warning: rank " + std::to_string(rank) + ": " + process.output_note + "\n");
        output_noted = true;
      }
      if (rank == 0) rank0_pid = process.pid;
      if (launch.payload) remote_ranks.emplace(rank, launch.where.host);
      // A remote rank's pid is said once its remote end reports it (below).
      if (options.verbose && !launch.where.remote)
        print("cohortrun: rank " + std::to_string(rank) + ": pid " + std::to_string(process.pid) + "\n");
    } catch (const Error& e) {
      // The ranks already running are stopped like after a failure.
      const auto* exec_error = dynamic_cast<const ExecError*>(&e);
      launch_error = "rank " + std::to_string(rank) + ": " + e.what();
      launch_error_code = exec_error ? exec_error->exit_code() : 1;
      supervisor.stop();
      break;
    }
  }

  std::optional<StartWatch> start_watch;
  if (!remote_ranks.empty() && launch_error.empty()) {
    try {
      auto client = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
          .host = store_address.bind, .port = job.store_port, .secret = job.secret,
          .connect_timeout = std::chrono::seconds(10)});
      StartWatch::Started said;
      if (options.verbose)
        said = [](int rank, const std::string& host, const std::string& record) {
          // record: "<host> pid <pid>", the program's pid on its host.
          const size_t pid = record.rfind(" pid ");
          print("cohortrun: rank " + std::to_string(rank) + " on " + host + ": pid " +
                (pid == std::string::npos ? record : record.substr(pid + 5)) + "\n");
        };
      start_watch.emplace(std::move(client), std::move(remote_ranks), std::move(said));
      supervisor.watch_start(*start_watch, options.start_timeout_s);
    } catch (const Error& e) {
      launch_error = std::string("cannot watch the remote ranks start: ") + e.what();
      launch_error_code = 1;
      supervisor.stop();
    }
  }

  // A multi-host job of fixed size: a host that goes silent ends the job in
  // seconds, named (an elastic job's controller does the same per process).
  std::optional<HostWatch> host_watch;
  if (job.heartbeat && launch_error.empty()) {
    try {
      std::map<int, std::string> hosts;
      for (const RankPlacement& p : placement) hosts.emplace(p.rank, p.host);
      host_watch.emplace(HostWatchOptions{.silence_s = heartbeat_silence_s()},
                         std::make_shared<rendezvous::TcpStore>(
                             rendezvous::TcpStoreOptions{.host = store_address.bind,
                                                         .port = job.store_port,
                                                         .secret = job.secret,
                                                         .connect_timeout = std::chrono::seconds(10)}),
                         std::move(hosts));
      supervisor.watch_health(*host_watch);
    } catch (const Error& e) {
      launch_error = std::string("cannot watch the hosts' heartbeats: ") + e.what();
      launch_error_code = 1;
      supervisor.stop();
    }
  }

  const SupervisionResult result = supervisor.run();
  // Ranks that ended before the supervisor's first start check still have
  // their pids said (--verbose).
  if (start_watch && options.verbose) start_watch->started();
  std::string end = end_text(result, launch_error, host_watch ? &*host_watch : nullptr);
  int code = launch_error.empty() ? exit_code(result) : launch_error_code;
  if (start_watch && launch_error.empty())
    if (const std::string note = remote_exec_failure(result, *start_watch, code); !note.empty()) end += note;
  print(end);
  if (dashboard) {
    finish_dashboard(*dashboard, options, result, code == 0 ? std::string() : end, signals);
  }
  return code;
}

}  // namespace cohort::launcher
