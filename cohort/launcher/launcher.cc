#include "cohort/launcher/launcher.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "cohort/launcher/job_id.h"
#include "cohort/launcher/rank_environment.h"
#include "cohort/launcher/report.h"
#include "cohort/launcher/shm_cleanup.h"
#include "cohort/launcher/signals.h"
#include "cohort/launcher/spawn.h"
#include "cohort/launcher/supervisor.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::launcher {
namespace {

void print_error(const std::string& text) {
  const std::string line = "cohortrun: error: " + text + "\n";
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

// Each running rank holds two pipe ends in the launcher; a large -np would
// exceed the usual soft limit of 1024 descriptors, so raise it (up to the
// hard limit) when needed.
void raise_descriptor_limit(int ranks) {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t needed = static_cast<rlim_t>(ranks) * 2 + 64;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    limit.rlim_cur = (limit.rlim_max == RLIM_INFINITY) ? needed : std::min(needed, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int run_job(const LaunchOptions& options) {
  SignalEvents signals;
  const std::string job_id = options.job_id.empty() ? generate_job_id() : options.job_id;
  SegmentCleanup cleanup(job_id, options.verbose);

  JobEnvironment job;
  job.job_id = job_id;
  job.secret = rendezvous::generate_secret();
  job.size = options.num_ranks;
  job.backend = options.backend;
  job.extra = options.env;
  job.threads_per_rank = threads_per_rank(available_cores(), options.num_ranks);
  const EnvironmentMap base = current_environment();

  // Ranks search PATH as they will see it, --env included.
  std::string path_variable = base.contains("PATH") ? base.at("PATH") : "";
  for (const auto& [key, value] : options.env)
    if (key == "PATH") path_variable = value;
  std::string program;
  try {
    program = resolve_program(options.command.front(), path_variable);
  } catch (const ExecError& e) {
    print_error(e.what());
    return e.exit_code();
  }

  std::optional<rendezvous::TcpStoreServer> store;
  try {
    store.emplace(rendezvous::TcpStoreServerOptions{.host = job.store_host, .port = options.port, .secret = job.secret});
  } catch (const Error& e) {
    print_error(std::string("cannot start the store: ") + e.what());
    return 1;
  }
  job.store_port = store->port();
  if (options.verbose)
    print("cohortrun: job " + job_id + ": " + std::to_string(options.num_ranks) + " rank(s) of " + program +
          ", store at " + job.store_host + ":" + std::to_string(job.store_port) + ", " +
          std::to_string(job.threads_per_rank) + " thread(s) per rank\n");

  raise_descriptor_limit(options.num_ranks);
  Supervisor supervisor(SupervisorOptions{.grace_s = options.grace_s, .verbose = options.verbose}, signals);
  std::string launch_error;
  int launch_error_code = 0;
  for (int rank = 0; rank < options.num_ranks; ++rank) {
    SpawnRequest request{.path = program,
                         .argv = options.command,
                         .envp = to_envp(rank_environment(base, job, rank))};
    try {
      const SpawnedProcess process = spawn_process(request);
      supervisor.add(rank, process);
      if (options.verbose)
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

  const SupervisionResult result = supervisor.run();
  if (!launch_error.empty()) {
    print_error(launch_error);
    return launch_error_code;
  }
  if (result.reason == StopReason::rank_failed) print(failure_report(result));
  else print(stop_summary(result));
  return exit_code(result);
}

}  // namespace cohort::launcher
