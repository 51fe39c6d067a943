#include "cohort/launcher/host_watch.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>

#include "cohort/common/check.h"
#include "cohort/common/error.h"
#include "cohort/rendezvous/membership.h"

namespace cohort::launcher {

namespace {

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

std::string clock_text(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%H:%M:%S UTC", &utc);
  return text;
}

bool runs(const std::vector<int>& running, int rank) {
  return std::find(running.begin(), running.end(), rank) != running.end();
}

}  // namespace

HostWatch::HostWatch(HostWatchOptions options, std::shared_ptr<rendezvous::Store> store,
                     std::map<int, std::string> hosts)
    : options_(options), store_(std::move(store)), hosts_(std::move(hosts)) {
  COHORT_CHECK_AS(ConfigError, options_.silence_s > 0)
      << "a host watch needs a positive silence, not " << options_.silence_s << " s";
}

std::string HostWatch::tick(const std::vector<int>& running) {
  try {
    return check(running, SteadyClock::now(), WallClock::now());
  } catch (const Error&) {
    // The store is this process's own server: a failed read is the job
    // ending under it, not a host's silence.
    return {};
  }
}

std::string HostWatch::check(const std::vector<int>& running, SteadyClock::time_point now,
                             WallClock::time_point wall_now) {
  for (int rank : running) {
    if (!hosts_.count(rank)) continue;
    const int64_t beats = rendezvous::heartbeats(*store_, rendezvous::Member{rank, 0});
    auto [it, fresh] = pulses_.try_emplace(rank, Pulse{beats, now, wall_now});
    if (!fresh && it->second.beats != beats) it->second = Pulse{beats, now, wall_now};
  }
  last_running_ = running;
  last_now_ = now;
  const auto limit =
      std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(options_.silence_s));
  std::set<std::string> hosts;
  for (const auto& [rank, host] : hosts_) hosts.insert(host);
  for (const std::string& host : hosts)
    if (host_silent(host, running, limit, now))
      return "host " + host + " lost: " + describe_host(host, running) +
             " (COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=" + seconds_text(options_.silence_s) +
             "): its link or the machine is down; ranks elsewhere are not at fault";
  // A hung process on a host that is otherwise alive: another rank there
  // beat within half the limit. (Within the limit is not enough: the last
  // beats of a host's ranks before its link went down are seen at different
  // reads, so one rank reaches the limit a read before the others.)
  for (const auto& [rank, host] : hosts_) {
    const auto it = pulses_.find(rank);
    if (!runs(running, rank) || it == pulses_.end() || it->second.beats == 0 || now - it->second.since < limit ||
        !host_beating(host, running, limit / 2, now))
      continue;
    return "rank " + std::to_string(rank) + " on " + host + " has sent no heartbeat since " +
           clock_text(it->second.wall_since) +
           " (COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=" + seconds_text(options_.silence_s) + ") while the other ranks of " +
           host + " beat: the process hangs (stopped, or out of memory and swapping)";
  }
  return {};
}

bool HostWatch::host_beating(const std::string& host, const std::vector<int>& running, SteadyClock::duration within,
                             SteadyClock::time_point now) const {
  for (const auto& [rank, where] : hosts_) {
    if (where != host || !runs(running, rank)) continue;
    const auto it = pulses_.find(rank);
    if (it != pulses_.end() && it->second.beats > 0 && now - it->second.since < within) return true;
  }
  return false;
}

bool HostWatch::host_silent(const std::string& host, const std::vector<int>& running, SteadyClock::duration limit,
                            SteadyClock::time_point now) const {
  bool any = false;
  for (const auto& [rank, where] : hosts_) {
    if (where != host || !runs(running, rank)) continue;
    const auto it = pulses_.find(rank);
    if (it == pulses_.end() || it->second.beats == 0) continue;
    if (now - it->second.since < limit) return false;
    any = true;
  }
  return any;
}

std::string HostWatch::describe_host(const std::string& host, const std::vector<int>& running) const {
  std::string ranks;
  int count = 0;
  WallClock::time_point since = WallClock::time_point::max();
  for (const auto& [rank, where] : hosts_) {
    if (where != host || !runs(running, rank)) continue;
    ranks += (count++ ? ", " : "") + std::to_string(rank);
    if (const auto it = pulses_.find(rank); it != pulses_.end()) since = std::min(since, it->second.wall_since);
  }
  return (count == 1 ? "rank " : "ranks ") + ranks + " on it " + (count == 1 ? "has" : "have") +
         " sent no heartbeat since " + clock_text(since);
}

std::string HostWatch::silent_hosts(double for_s) const {
  const auto limit = std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(for_s));
  std::set<std::string> hosts;
  for (const auto& [rank, host] : hosts_) hosts.insert(host);
  std::string said;
  for (const std::string& host : hosts)
    if (host_silent(host, last_running_, limit, last_now_))
      said += (said.empty() ? "" : "; ") + ("host " + host + ": " + describe_host(host, last_running_));
  return said;
}

}  // namespace cohort::launcher
