// Runs the real cohortrun binary as a subprocess for the end-to-end tests:
// its stdout and stderr go to files (so a test never blocks on a full pipe),
// and waiting has a deadline so a hung launcher fails the test instead of
// hanging it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cohort::launcher::testing {

using Clock = std::chrono::steady_clock;

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

// A fresh directory, removed with everything in it when destroyed.
class TempDir {
 public:
  explicit TempDir(const std::string& label = "cohortrun_test") {
    std::string pattern = "/tmp/" + label + ".XXXXXX";
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }

 private:
  std::string path_;
};

struct RunResult {
  bool finished = false;  // false: still running at the deadline (then killed)
  int exit_code = -1;     // when it exited
  int signal = 0;         // when a signal killed it
  std::string out;
  std::string err;
  double seconds = 0;
};

// The process's environment without the variables a test must control.
inline std::map<std::string, std::string> clean_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "COHORT_BACKEND"})
    env.erase(name);
  return env;
}

class CohortrunProcess {
 public:
  // Starts `binary args...` with `env` (clean_environment() when empty),
  // writing its output under `dir`; with `ignore_sigchld`, it starts with
  // SIGCHLD ignored, as some parent processes leave it.
  CohortrunProcess(const std::string& binary, const std::vector<std::string>& args, const std::string& dir,
                   std::map<std::string, std::string> env = {}, bool ignore_sigchld = false)
      : out_path_(dir + "/cohortrun.out"), err_path_(dir + "/cohortrun.err") {
    if (env.empty()) env = clean_environment();
    std::vector<std::string> argv_s{binary};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> envp_s;
    for (const auto& [k, v] : env) envp_s.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : envp_s) envp.push_back(s.data());
    envp.push_back(nullptr);
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      if (ignore_sigchld) ::signal(SIGCHLD, SIG_IGN);
      ::execve(binary.c_str(), argv.data(), envp.data());
      ::_exit(126);
    }
  }

  ~CohortrunProcess() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
  }

  pid_t pid() const { return pid_; }
  void signal(int signo) { ::kill(pid_, signo); }

  // True when it has not exited yet (does not wait).
  bool running() {
    if (reaped_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = status;
      end_ = Clock::now();
      return false;
    }
    return true;
  }

  // Waits until its stdout holds every one of `lines` (whole lines); false
  // when it ended or a minute passed first.
  bool wait_for_output(const std::vector<std::string>& lines) {
    return wait_until([&] {
      const std::vector<std::string> have = split_lines(read_text(out_path_));
      bool all = true;
      for (const std::string& l : lines) all = all && std::find(have.begin(), have.end(), l) != have.end();
      return all;
    });
  }

  // Waits until its stderr (cohortrun's own messages) contains `text`;
  // false when it ended or a minute passed first.
  bool wait_for_error_text(const std::string& text) {
    return wait_until([&] { return read_text(err_path_).find(text) != std::string::npos; });
  }

  // Waits up to `timeout`; kills it with SIGKILL if it is still running then.
  RunResult wait(std::chrono::duration<double> timeout = std::chrono::seconds(60)) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
    RunResult result;
    while (running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    result.finished = !running();
    if (!result.finished) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
      end_ = Clock::now();
    }
    if (WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) result.signal = WTERMSIG(status_);
    result.out = read_text(out_path_);
    result.err = read_text(err_path_);
    result.seconds = std::chrono::duration<double>(end_ - start_).count();
    return result;
  }

 private:
  template <typename Pred>
  bool wait_until(Pred seen) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      if (seen()) return true;
      if (!running() || Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  Clock::time_point start_, end_;
};

// Whether `pid` is a live process (a zombie counts as gone: it runs nothing
// and only waits for its new parent to reap it).
inline bool process_alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

// Waits until `count` files named prefix<rank> exist in `dir` and returns the
// pids they hold (by rank); empty when they did not appear within `timeout`.
inline std::vector<pid_t> wait_for_pids(const std::string& dir, const std::string& prefix, int count,
                                        std::chrono::seconds timeout = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::vector<pid_t> pids;
    for (int r = 0; r < count; ++r) {
      const std::string text = read_text(dir + "/" + prefix + std::to_string(r));
      if (text.empty()) break;
      pids.push_back(static_cast<pid_t>(std::stol(text)));
    }
    if (static_cast<int>(pids.size()) == count) return pids;
    if (Clock::now() > deadline) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace cohort::launcher::testing
