// Test support: a parameter-server job of real ps_rank_program processes
// started without cohortrun (which stops every rank when one dies, and these
// tests kill ranks on purpose). The test hosts the job's TCP store; each
// rank gets the COHORT_* variables cohortrun would set, its output goes to
// <dir>/rank<r>.log, and its final parameters to <dir>/result<run>.<worker>.
// No gtest here: bench/ps_recovery_bench.cc and ps_straggler_bench.cc run
// jobs with it too
// (ps_job_checks.h has the test assertions).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <utility>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cohort/launcher/shm_cleanup.h"
#include "cohort/rendezvous/tcp_store.h"
#include "tests/parameter_server/problem.h"

extern char** environ;

namespace cohort::ps::testing {

// The numbers of a result file (one per line).
inline std::vector<double> read_values(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

struct Outcome {
  std::vector<int> status;          // waitpid statuses, by rank
  std::vector<std::string> output;  // stdout and stderr, by rank
  std::string problems;             // what went wrong launching or waiting (empty: nothing)
};

struct JobLayout {
  std::string store_host = "127.0.0.1";             // where the test's store listens
  std::vector<std::vector<std::string>> prefix;     // per rank: a command run before the program
  std::vector<std::string> host;                    // per rank: COHORT_HOST (empty: none)
};

class PsJob {
 public:
  explicit PsJob(std::filesystem::path dir) : dir_(std::move(dir)) {}

  Outcome launch(int n, std::vector<std::string> args, const JobLayout& layout = {}) {
    using namespace std::chrono_literals;
    const int run = runs_++;
    const std::string job = "pst" + std::to_string(::getpid()) + "x" + std::to_string(run);
    const std::string secret = "secret-" + job;
    rendezvous::TcpStoreServer server({.host = layout.store_host, .port = 0, .secret = secret});
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> env;
      for (char** e = environ; *e; ++e) env.emplace_back(*e);
      for (auto kv : {std::pair<std::string, std::string>{"COHORT_RANK", std::to_string(r)},
                      {"COHORT_SIZE", std::to_string(n)},
                      {"COHORT_LOCAL_RANK", "0"},
                      {"COHORT_LOCAL_SIZE", "1"},
                      {"COHORT_STORE_ADDR", layout.store_host + ":" + std::to_string(server.port())},
                      {"COHORT_JOB_ID", job},
                      {"COHORT_SECRET", secret},
                      {"COHORT_PS_WORKER_TIMEOUT_S", "2"},
                      {"COHORT_PS_HEARTBEAT_MS", "200"},
                      {"COHORT_LOG_LEVEL", "warn"}})
        env.push_back(kv.first + "=" + kv.second);
      if (static_cast<size_t>(r) < layout.host.size() && !layout.host[r].empty())
        env.push_back("COHORT_HOST=" + layout.host[r]);
      std::vector<std::string> argv_s;
      if (static_cast<size_t>(r) < layout.prefix.size()) argv_s = layout.prefix[r];
      argv_s.push_back(PS_RANK_PROGRAM);
      argv_s.insert(argv_s.end(), args.begin(), args.end());
      argv_s.push_back("result=" + (dir_ / ("result" + std::to_string(run))).string());
      std::vector<char*> argv, envp;
      for (auto& s : argv_s) argv.push_back(s.data());
      argv.push_back(nullptr);
      for (auto& s : env) envp.push_back(s.data());
      envp.push_back(nullptr);
      const std::string log = (dir_ / ("rank" + std::to_string(r) + ".log")).string();
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
      pid_t pid = -1;
      const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&actions);
      if (rc != 0) problems_ += "cannot start rank " + std::to_string(r) + ": " + std::strerror(rc) + "\n";
      pids.push_back(pid);
    }
    Outcome out;
    out.problems = std::exchange(problems_, {});
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    for (pid_t pid : pids) {
      int status = -1;
      while (pid > 0 && ::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          out.problems += "rank process " + std::to_string(pid) + " hung\n";
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
      out.status.push_back(status);
    }
    // What a launcher does after a job, however it ended: a server killed
    // on purpose leaves its ipc endpoint /dev/shm/cohort-<job>-ps-*.sock.
    launcher::remove_job_segments(job);
    for (int r = 0; r < n; ++r) {
      std::ifstream in(dir_ / ("rank" + std::to_string(r) + ".log"));
      std::stringstream s;
      s << in.rdbuf();
      out.output.push_back(s.str());
    }
    return out;
  }

  // The last run's final parameters of `worker`.
  std::vector<double> result(int worker) const {
    return read_values(dir_ / ("result" + std::to_string(runs_ - 1) + "." + std::to_string(worker)));
  }

 private:
  std::filesystem::path dir_;
  int runs_ = 0;
  std::string problems_;
};

// A line "timeline <worker> <event> <step> <ns>" of ps_rank_program's
// output (timeline=1).
struct TimelineEvent {
  int worker = 0;
  std::string event;
  int64_t step = 0;
  int64_t ns = 0;
};

inline std::vector<TimelineEvent> timeline_of(const std::string& output) {
  std::vector<TimelineEvent> events;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    std::string tag;
    TimelineEvent e;
    if (l >> tag >> e.worker >> e.event >> e.step >> e.ns && tag == "timeline") events.push_back(e);
  }
  return events;
}

// The first event of `worker` named `event` at `step` (ns; -1: none).
inline int64_t event_ns(const std::vector<TimelineEvent>& events, int worker, const std::string& event,
                        int64_t step) {
  for (const TimelineEvent& e : events)
    if (e.worker == worker && e.event == event && e.step == step) return e.ns;
  return -1;
}

inline std::vector<int> all_of(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace cohort::ps::testing
