#include "cohort/launcher/remote_rank.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/common/seconds.h"
#include "cohort/launcher/job_id.h"
#include "cohort/launcher/output_forwarder.h"
#include "cohort/launcher/placement.h"
#include "cohort/launcher/rank_environment.h"
#include "cohort/launcher/remote_payload.h"
#include "cohort/launcher/shm_cleanup.h"
#include "cohort/launcher/signals.h"
#include "cohort/launcher/spawn.h"
#include "cohort/launcher/torch_master.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// How long output may still come once the program has ended (its
// descendants may hold its terminal or pipes), as cohortrun's drain_s.
constexpr double kDrainSeconds = 1.0;

class Reporter {
 public:
  void set(int rank, const std::string& host) {
    prefix_ = "cohortrun: rank " + std::to_string(rank) + " on " + host + ": ";
  }
  void operator()(const std::string& text) const {
    const std::string line = prefix_ + text + "\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  }

 private:
  std::string prefix_ = "cohortrun --remote-rank: ";
};

// How the rank ended, for the caller to reproduce.
struct Outcome {
  int exit_code = 0;
  int signal = 0;  // non-zero: die by this signal
};

std::optional<std::string> lookup(const EnvironmentMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

rendezvous::TcpStoreOptions store_options(const EnvironmentMap& env, double timeout_s) {
  const std::optional<std::string> address = lookup(env, "COHORT_STORE_ADDR");
  if (!address) throw ConfigError("the payload has no COHORT_STORE_ADDR");
  const size_t colon = address->rfind(':');
  int port = 0;
  if (colon != std::string::npos) {
    const char* first = address->data() + colon + 1;
    const char* last = address->data() + address->size();
    auto [ptr, ec] = std::from_chars(first, last, port);
    if (ec != std::errc() || ptr != last) port = 0;
  }
  if (colon == std::string::npos || port <= 0 || port > 65535)
    throw ConfigError("COHORT_STORE_ADDR='" + *address + "' is not host:port");
  std::string host = address->substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {.host = host,
          .port = port,
          .secret = lookup(env, "COHORT_SECRET").value_or(""),
          .connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
          .server_listening = true};  // cohortrun serves it before it starts any rank
}

// Relays `relays` until each has ended or `drain_s` passed: what the program
// wrote just before it ended, or what its descendants still write.
void drain_relays(std::span<OutputRelay* const> relays, double drain_s) {
  const auto deadline = Clock::now() + steady_seconds(drain_s);
  for (;;) {
    std::vector<pollfd> fds;
    for (OutputRelay* relay : relays)
      if (relay->fd() >= 0) fds.push_back({relay->fd(), POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) return;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left) + 1) < 0 && errno != EINTR) return;
    for (OutputRelay* relay : relays) relay->pump();
  }
}

Outcome supervise(pid_t child, double grace_s, SignalEvents& signals, std::span<OutputRelay* const> relays) {
  std::optional<Clock::time_point> kill_at;
  bool stdin_open = true;
  std::vector<pollfd> fds;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      drain_relays(relays, kDrainSeconds);
      if (WIFSIGNALED(status)) return {.exit_code = 128 + WTERMSIG(status), .signal = WTERMSIG(status)};
      return {.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1};
    }
    int timeout_ms = -1;
    if (kill_at) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at - Clock::now()).count();
      if (left <= 0) {
        ::kill(-child, SIGKILL);
        kill_at.reset();
        continue;
      }
      timeout_ms = static_cast<int>(left) + 1;
    }
    fds.assign({{signals.fd(), POLLIN, 0}, {stdin_open ? STDIN_FILENO : -1, POLLIN, 0}});
    for (OutputRelay* relay : relays) fds.push_back({relay->fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return {.exit_code = 1};
    for (size_t i = 0; i < relays.size(); ++i)
      if (fds[i + 2].revents) relays[i]->pump();
    if (fds[1].revents) {
      char byte;
      const ssize_t n = ::read(STDIN_FILENO, &byte, 1);
      // Nothing more is ever sent: data or EOF both mean the launcher's end
      // changed, and EOF (or an error) means it is gone.
      if (n <= 0 && !(n < 0 && errno == EINTR)) {
        stdin_open = false;
        ::kill(-child, SIGTERM);
        kill_at = Clock::now() + steady_seconds(grace_s);
      }
    }
    if (fds[0].revents & POLLIN)
      while (const int signo = signals.next())
        if (signo != SIGCHLD) ::kill(-child, signo);
  }
}

Outcome run(std::span<const std::string> args, Reporter& report, SignalEvents& signals) {
  int rank = -1;
  if (args.size() == 2) {
    const std::string& text = args[1];
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (ec != std::errc() || ptr != text.data() + text.size()) rank = -1;
  }
  if (rank < 0) {
    report("usage: cohortrun --remote-rank N (started by cohortrun through its launch template)");
    return {.exit_code = 2};
  }
  RemotePayload payload;
  try {
    payload = read_payload(STDIN_FILENO);
  } catch (const Error& e) {
    report(std::string("cannot read the rank's description from standard input: ") + e.what());
    return {.exit_code = 1};
  }
  // The host as the user named it in -H: every message and the start record
  // say it so.
  const std::string host = payload.host.empty() ? this_host_name() : payload.host;
  report.set(rank, host);
  if (payload.rank != rank) {
    report("the payload is for rank " + std::to_string(payload.rank));
    return {.exit_code = 1};
  }

  EnvironmentMap env = current_environment();
  for (const auto& [key, value] : payload.env) env[key] = value;
  const int threads = threads_per_rank(available_cores(), payload.local_size);
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
    if (!env.contains(var)) env[var] = std::to_string(threads);

  if (!payload.cwd.empty() && ::chdir(payload.cwd.c_str()) != 0)
    report("warning: cannot change to the launcher's directory " + payload.cwd + " (" + std::strerror(errno) +
           "); running in " + (env.contains("HOME") ? env["HOME"] : std::string("the login directory")));

  std::optional<rendezvous::TcpStore> store;
  rendezvous::TcpStoreOptions options;
  try {
    options = store_options(env, payload.start_timeout_s);
    store.emplace(options);
  } catch (const Error& e) {
    report("cannot reach the job's store at " + lookup(env, "COHORT_STORE_ADDR").value_or("?") + " from " + host +
           ": " + e.what());
    return {.exit_code = 1};
  }

  // torch.distributed's master (torch_master.h), before the program starts:
  // chosen here when this is rank 0, else rank 0's end publishes it.
  try {
    if (payload.torch_master == TorchMasterRole::publish) {
      const bool all_local = lookup(env, "COHORT_SIZE") == std::to_string(payload.local_size);
      const std::string master = choose_torch_master(lookup(env, "COHORT_IFACE").value_or(""), all_local, options.host);
      store->set(kTorchMasterKey, master);
      set_torch_master(env, master);
    } else if (payload.torch_master == TorchMasterRole::read) {
      set_torch_master(env, await_torch_master(*store, payload.start_timeout_s));
    }
  } catch (const Error& e) {
    report(std::string("cannot set MASTER_ADDR/MASTER_PORT for torch.distributed: ") + e.what());
    return {.exit_code = 1};
  }

  // With --output pty the program's stdout is a pseudo-terminal here, as for
  // a rank on the launcher's machine, and its output is relayed to ours
  // (ssh's channel) as it comes; with pipe it writes to ours directly.
  SpawnedProcess child;
  try {
    const std::string program = resolve_program(payload.argv.front(), lookup(env, "PATH").value_or(""));
    child = spawn_process(SpawnRequest{
        .path = program,
        .argv = payload.argv,
        .envp = to_envp(env),
        .output = payload.output == OutputMode::pty ? OutputMode::pty : OutputMode::inherit});
  } catch (const ExecError& e) {
    report(std::string(e.what()) + " on " + host);
    return {.exit_code = e.exit_code()};
  } catch (const Error& e) {
    report(e.what());
    return {.exit_code = 1};
  }
  try {
    const std::string started = host + " pid " + std::to_string(child.pid);
    store->set(started_key(rank), started);
    // An elastic replacement also says which process of its slot started
    // (the controller's start timeout; the rank's key above is --start-timeout's
    // for the job's first processes, which a replacement may stand in for).
    const auto text = lookup(env, "COHORT_ELASTIC_INCARNATION");
    if (const int incarnation = text ? std::atoi(text->c_str()) : 0; incarnation > 0)
      store->set(started_key(rank, incarnation), started);
  } catch (const Error& e) {
    report(std::string("cannot record the start in the store: ") + e.what());
  }
  store.reset();

  std::optional<OutputRelay> out, err;
  std::vector<OutputRelay*> relays;
  if (child.stdout_fd >= 0) relays.push_back(&out.emplace(child.stdout_fd, STDOUT_FILENO));
  if (child.stderr_fd >= 0) relays.push_back(&err.emplace(child.stderr_fd, STDERR_FILENO));
  if (!child.output_note.empty()) report("warning: " + child.output_note);
  const Outcome outcome = supervise(child.pid, payload.grace_s, signals, relays);
  if (outcome.exit_code != 0) {
    // What the failed rank started must not outlive it on this host, nor
    // its shared memory (the launcher's own backstop runs on its host only).
    ::kill(-child.pid, SIGKILL);
    if (const auto job = lookup(env, "COHORT_JOB_ID"); job && job_id_problem(*job).empty())
      remove_job_segments(*job);
  }
  return outcome;
}

}  // namespace

std::string started_key(int rank, int incarnation) {
  std::string key = "cohortrun/started/" + std::to_string(rank);
  return incarnation == 0 ? key : key + "." + std::to_string(incarnation);
}

int run_remote_rank(std::span<const std::string> args) {
  Outcome outcome;
  {
    Reporter report;
    SignalEvents signals;
    outcome = run(args, report, signals);
  }
  if (outcome.signal != 0) {
    // Die the way the rank died, so that a launcher on this machine (ip netns
    // exec) sees the signal; ssh reports it as exit code 255 either way.
    struct rlimit no_core {};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(outcome.signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, outcome.signal);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(outcome.signal);
  }
  return outcome.exit_code;
}

}  // namespace cohort::launcher
