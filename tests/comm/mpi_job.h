// Test support: run a whole job (mpirun or cohortrun and its ranks) as a
// child process, with its output in files (a full pipe never blocks it), a
// deadline (a hung job fails the test rather than hanging it), and an
// environment without the variables of any launcher this test itself runs
// under.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cohort::testing {

struct JobResult {
  bool finished = false;  // false: killed at the deadline
  int exit_code = -1;
  int signal = 0;
  std::string out;
  std::string err;
  double seconds = 0;
  std::string output() const { return out + err; }
};

// The first executable `name` on PATH, or "".
inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// This process's environment without launcher and cohort variables, plus
// `extra`.
inline std::map<std::string, std::string> job_environment(const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = entry.substr(0, eq);
    bool launcher = false;
    for (const char* prefix : {"COHORT_", "OMPI_", "PMIX_", "PMI_", "SLURM_", "MASTER_"})
      launcher = launcher || key.rfind(prefix, 0) == 0;
    if (!launcher && key != "RANK" && key != "WORLD_SIZE" && key != "LOCAL_RANK" && key != "LOCAL_WORLD_SIZE")
      env.emplace(key, entry.substr(eq + 1));
  }
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs argv[0] with `argv` and `env` until it exits or `timeout` passes.
inline JobResult run_job(const std::vector<std::string>& argv_s, const std::map<std::string, std::string>& env_map,
                         std::chrono::seconds timeout) {
  char dir_pattern[] = "/tmp/cohort_job.XXXXXX";
  const std::string dir = ::mkdtemp(dir_pattern);
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env_map) env_s.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& s : const_cast<std::vector<std::string>&>(argv_s)) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so that a kill at the deadline takes the ranks too
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(126);
  }
  JobResult result;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > timeout) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.finished = result.seconds <= double(timeout.count()) || WIFEXITED(status);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  return result;
}

// mpirun's arguments for `np` ranks on this host: as root (CI), and with
// more ranks than cores.
inline std::vector<std::string> mpirun_command(const std::string& mpirun, int np) {
  return {mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(np)};
}

}  // namespace cohort::testing
