#include "cohort/launcher/host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "cohort/launcher/exit_status.h"
#include "cohort/launcher/options.h"

namespace cohort::launcher {

std::vector<HostSlots> parse_discovered_hosts(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    line = line.substr(begin, line.find_last_not_of(" \t\r") - begin + 1);
    try {
      const std::vector<HostSlots> entry = parse_host_list(line);
      if (entry.size() != 1) throw UsageError("one host per line");
      hosts.push_back(entry.front());
    } catch (const UsageError& e) {
      throw UsageError(source + " line " + std::to_string(number) + ": expected host or host:slots, got '" + line +
                       "' (" + e.what() + ")");
    }
  }
  // A host printed twice gets the sum of its slots, as in a hostfile.
  std::vector<HostSlots> merged;
  for (const HostSlots& h : hosts) {
    auto it = std::find_if(merged.begin(), merged.end(), [&](const HostSlots& m) { return m.name == h.name; });
    if (it == merged.end()) merged.push_back(h);
    else it->slots += h.slots;
  }
  return merged;
}

Discovery discover_hosts(const std::string& script, std::chrono::milliseconds timeout) {
  const std::string source = "host discovery script '" + script + "'";
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {.error = source + ": cannot make a pipe: " + std::strerror(errno)};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return {.error = source + ": cannot fork: " + std::strerror(errno)};
  }
  if (pid == 0) {
    // The launcher blocks the signals it handles; the script gets none blocked.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // A group of its own, so that a timeout kills what the script started
    // too; and none of the launcher's descriptors.
    ::setpgid(0, 0);
    ::dup2(out[1], STDOUT_FILENO);
    ::close_range(3, ~0U, 0);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, size_t(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return {.error = source + " printed no end of output within " + std::to_string(timeout.count()) + " ms"};
  const ExitStatus exit{status};
  if (!exit.success()) return {.error = source + " " + describe(exit)};
  try {
    return {.ok = true, .hosts = parse_discovered_hosts(text, source)};
  } catch (const UsageError& e) {
    return {.error = e.what()};
  }
}

}  // namespace cohort::launcher
