#include "cohort/launcher/preflight.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>

#include "cohort/common/atomic_file.h"
#include "cohort/common/build_id.h"
#include "cohort/common/json.h"
#include "cohort/launcher/job_id.h"
#include "cohort/launcher/launch_plan.h"
#include "cohort/launcher/output_forwarder.h"
#include "cohort/launcher/placement.h"
#include "cohort/launcher/preflight_protocol.h"
#include "cohort/launcher/preflight_report.h"
#include "cohort/launcher/rank_environment.h"
#include "cohort/launcher/remote_payload.h"
#include "cohort/launcher/spawn.h"
#include "cohort/launcher/store_address.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Remote ends must reach the store this fast in a check (the launch's own
// --start-timeout when shorter): a firewalled store port is then reported
// in seconds, not after a minute of retries.
constexpr double kCheckStartTimeout = 15;

void write_stdout(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

bool executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

// A running probe's launch: its process, pipes and output.
struct Slot {
  SpawnedProcess process;
  std::string pending[2];  // partial lines of stdout, stderr
  OutputTail tail;         // its last lines, for the report (ProbeRank::output)
};

void keep_line(OutputTail& tail, std::string_view line) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  tail.add(line);
}

// Reads what is there from fd (non-blocking); -1 closes it at its end.
void drain(int& fd, std::string& pending, OutputTail& tail) {
  if (fd < 0) return;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      pending.append(buffer, size_t(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
        keep_line(tail, std::string_view(pending).substr(0, nl));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (!pending.empty()) keep_line(tail, pending);
    pending.clear();
    ::close(fd);
    fd = -1;
    return;
  }
}

// The JSON at `key`, which is set; nullopt when it is not JSON.
std::optional<json::Value> get_json(rendezvous::Store& store, const std::string& key) {
  try {
    return json::parse(store.get(key, 5s), key);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The JSON at `key`, or nullopt when it is not set (or not JSON).
std::optional<json::Value> read_json(rendezvous::Store& store, const std::string& key) {
  const std::string k[] = {key};
  return store.check(k) ? get_json(store, key) : std::nullopt;
}

// Reads `field` (at key_of(rank)) of the ranks `wanted` where it is still
// missing: one check of all their keys per poll, as StartWatch::started
// does (while probes are still coming, none is read); a key at a time only
// once one of them has exited, which may never set its own. True when
// every rank wanted has it or has exited.
template <typename Wanted>
bool read_all(rendezvous::Store& store, std::vector<ProbeRank>& ranks, std::string (*key_of)(int),
              std::optional<json::Value> ProbeRank::*field, Wanted wanted) {
  std::vector<ProbeRank*> missing;
  std::vector<std::string> keys;
  bool exited = false;
  for (ProbeRank& r : ranks)
    if (wanted(r) && !(r.*field)) {
      missing.push_back(&r);
      keys.push_back(key_of(r.rank));
      exited = exited || r.exited;
    }
  if (!keys.empty() && store.check(keys))
    for (size_t i = 0; i < missing.size(); ++i) missing[i]->*field = get_json(store, keys[i]);
  else if (exited)
    for (size_t i = 0; i < missing.size(); ++i) missing[i]->*field = read_json(store, keys[i]);
  bool known = true;
  for (const ProbeRank* r : missing) known = known && (r->*field || r->exited);
  return known;
}

}  // namespace

std::string probe_path(const LaunchOptions& options, const std::string& self) {
  if (!options.check_probe.empty()) return options.check_probe;
  if (const size_t slash = self.rfind('/'); slash != std::string::npos) {
    const std::string beside = self.substr(0, slash + 1) + preflight::kProbeProgram;
    if (executable(beside)) return beside;
  }
#ifdef COHORT_PROBE_BUILD_PATH
  if (executable(COHORT_PROBE_BUILD_PATH)) return COHORT_PROBE_BUILD_PATH;
#endif
  return preflight::kProbeProgram;
}

int run_check(const LaunchOptions& options) {
  const auto started = Clock::now();
  // A lost launch command's pipe must not kill the check.
  ::signal(SIGPIPE, SIG_IGN);
  CheckRun run;
  run.num_ranks = options.num_ranks;
  run.backend = options.backend.empty() ? "auto" : options.backend;
  run.launch_template = options.launch_template;
  run.store_host = this_host_name();
  run.store_port_wanted = options.port;
  run.build_id = build_id();
  run.build_description = build_description();
  run.libtorch = libtorch_version();
  const std::string self = self_executable();
  run.probe_path = probe_path(options, self);

  JobLayout layout;
  try {
    layout = job_layout(options);
  } catch (const ConfigError& e) {
    write_stdout(std::string("cohortrun: check: ") + e.what() + "\ncohortrun: check: a launch of " +
                 std::to_string(options.num_ranks) + " ranks would fail: 1 problem\n");
    return 1;
  }
  const std::vector<RankPlacement>& placement = layout.placement;
  const StoreAddress& store_address = layout.store;
  for (const RankPlacement& p : placement)
    if (run.hosts.empty() || run.hosts.back() != p.host) run.hosts.push_back(p.host);
  run.store_address = store_address.advertised;

  // The store, where the launch would put it; a port taken there is a
  // problem of its own, and the check goes on with a free one.
  JobEnvironment job = job_environment(options, options.job_id.empty() ? generate_job_id() : options.job_id, layout);
  job.secret = rendezvous::generate_secret();
  std::optional<rendezvous::TcpStoreServer> server;
  try {
    server.emplace(
        rendezvous::TcpStoreServerOptions{.host = store_address.bind, .port = options.port, .secret = job.secret});
  } catch (const Error& e) {
    if (options.port == 0) {
      write_stdout(std::string("cohortrun: check: cannot start the store on ") + store_address.bind + ": " + e.what() +
                   "\ncohortrun: check: a launch of " + std::to_string(options.num_ranks) +
                   " ranks would fail: 1 problem\n");
      return 1;
    }
    run.store_port_error = e.what();
    server.emplace(rendezvous::TcpStoreServerOptions{.host = store_address.bind, .port = 0, .secret = job.secret});
  }
  job.store_port = server->port();
  run.store_port = job.store_port;
  auto store = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
      .host = store_address.bind, .port = job.store_port, .secret = job.secret, .connect_timeout = 10s});

  // The launch itself, with the probe as the program.
  LaunchOptions probe_options = options;
  probe_options.command = {run.probe_path, preflight::kProbeFlag};
  probe_options.output = OutputMode::pipe;
  probe_options.start_timeout_s = std::min(options.start_timeout_s, kCheckStartTimeout);
  probe_options.min_np = 0;
  run.ranks.resize(placement.size());
  std::vector<Slot> slots(placement.size());
  for (size_t i = 0; i < placement.size(); ++i) run.ranks[i] = {.rank = placement[i].rank, .host = placement[i].host};
  LaunchPlan plan;
  try {
    plan = make_launch_plan(probe_options, job, current_environment(), placement, store_address, self);
  } catch (const Error& e) {
    for (ProbeRank& r : run.ranks) r.spawn_error = e.what();
  }
  for (size_t i = 0; i < plan.ranks.size(); ++i) {
    const RankLaunch& launch = plan.ranks[i];
    try {
      slots[i].process = spawn_process(SpawnRequest{.path = launch.path,
                                                    .argv = launch.argv,
                                                    .envp = launch.envp,
                                                    .output = OutputMode::pipe,
                                                    .stdin_pipe = launch.payload.has_value()});
    } catch (const Error& e) {
      run.ranks[i].spawn_error = e.what();
      run.ranks[i].exited = true;
      continue;
    }
    // A launch command that failed at once (an unknown host) closes its
    // stdin before the payload is in: its exit and output say why.
    try {
      if (launch.payload) send_payload(slots[i].process.stdin_fd, *launch.payload);
    } catch (const Error&) {
    }
  }

  // Drive the phases until every probe ended or the deadline passed.
  const auto deadline = started + std::chrono::duration<double>(kCheckDeadlineSeconds);
  bool roster_set = false, go_set = false;
  for (;;) {
    std::vector<pollfd> fds;
    for (Slot& s : slots)
      for (int fd : {s.process.stdout_fd, s.process.stderr_fd})
        if (fd >= 0) fds.push_back({.fd = fd, .events = POLLIN, .revents = 0});
    if (fds.empty()) std::this_thread::sleep_for(100ms);
    else ::poll(fds.data(), fds.size(), 100);
    bool all_ended = true;
    for (size_t i = 0; i < slots.size(); ++i) {
      Slot& s = slots[i];
      ProbeRank& r = run.ranks[i];
      drain(s.process.stdout_fd, s.pending[0], s.tail);
      drain(s.process.stderr_fd, s.pending[1], s.tail);
      if (!r.exited && s.process.pid > 0) {
        int status = 0;
        if (::waitpid(s.process.pid, &status, WNOHANG) == s.process.pid) {
          r.exited = true;
          r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
      }
      all_ended = all_ended && r.exited && s.process.stdout_fd < 0 && s.process.stderr_fd < 0;
    }
    try {
      if (!roster_set) {
        if (read_all(*store, run.ranks, preflight::facts_key, &ProbeRank::facts,
                     [](const ProbeRank&) { return true; })) {
          std::string roster;
          for (const ProbeRank& r : run.ranks)
            if (r.facts) roster += (roster.empty() ? "" : ",") + std::to_string(r.rank);
          store->set(preflight::kRosterKey, roster);
          roster_set = true;
        }
      }
      if (roster_set && !go_set) {
        const auto leader = [](const ProbeRank& r) { return r.facts && r.facts->at("local_rank").number() == 0; };
        if (read_all(*store, run.ranks, preflight::links_key, &ProbeRank::links, leader)) {
          run.go = collectives_go(run);
          store->set(preflight::kGoKey, run.go);
          go_set = true;
        }
      }
    } catch (const Error&) {
      // The store is ours: it answers; a failure here ends with the deadline.
    }
    if (all_ended) break;
    if (Clock::now() > deadline) {
      for (size_t i = 0; i < slots.size(); ++i)
        if (!run.ranks[i].exited && slots[i].process.pid > 0) {
          ::kill(-slots[i].process.pid, SIGKILL);
          run.ranks[i].timed_out = true;
        }
      for (size_t i = 0; i < slots.size(); ++i)
        if (!run.ranks[i].exited && slots[i].process.pid > 0) {
          int status = 0;
          ::waitpid(slots[i].process.pid, &status, 0);
          run.ranks[i].exited = true;
          run.ranks[i].exit_code = 128 + SIGKILL;
        }
      break;
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    for (int* fd : {&s.process.stdout_fd, &s.process.stderr_fd, &s.process.stdin_fd})
      if (*fd >= 0) ::close(std::exchange(*fd, -1));
    run.ranks[i].output.assign(s.tail.lines().begin(), s.tail.lines().end());
  }

  // What the probes left in the store.
  if (!go_set) run.go = "the probes did not get that far";
  for (ProbeRank& r : run.ranks) {
    try {
      if (!r.facts) r.facts = read_json(*store, preflight::facts_key(r.rank));
      if (!r.links) r.links = read_json(*store, preflight::links_key(r.rank));
      r.collectives = read_json(*store, preflight::collectives_key(r.rank));
      const std::string done[] = {preflight::done_key(r.rank)};
      if (store->check(done)) r.done = store->get(done[0], 5s);
      else if (r.facts) r.done = r.timed_out ? "did not finish before the check's deadline" : "ended before finishing";
    } catch (const Error&) {
    }
  }
  try {
    const std::string key[] = {preflight::kTopologyKey};
    if (run.go == "1" && store->check(key)) run.topology = store->get(key[0], 5s);
    run.fit = read_json(*store, preflight::kFitKey);
  } catch (const Error&) {
  }
  if (!options.check_topology.empty()) {
    if (run.topology.empty()) {
      run.topology_error = "the collectives it is fitted to did not run";
    } else {
      try {
        write_file_atomically(options.check_topology, run.topology + "\n", AtomicFileOptions{});
        run.topology_file = options.check_topology;
      } catch (const std::exception& e) {
        run.topology_error = std::string("cannot write ") + options.check_topology + ": " + e.what();
      }
    }
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const CheckVerdict verdict = judge(run);
  write_stdout(verdict.text);
  return verdict.problems == 0 ? 0 : 1;
}

}  // namespace cohort::launcher
