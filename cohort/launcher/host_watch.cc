#include "cohort/launcher/host_watch.h"

#include <algorithm>
#include <ctime>

#include "cohort/common/check.h"
#include "cohort/common/error.h"
#include "cohort/common/seconds.h"

namespace cohort::launcher {

namespace {

std::string clock_text(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%H:%M:%S UTC", &utc);
  return text;
}

}  // namespace

HostWatch::HostWatch(HostWatchOptions options, std::shared_ptr<rendezvous::Store> store,
                     const std::map<int, std::string>& hosts)
    : options_(options), store_(std::move(store)) {
  COHORT_CHECK_AS(ConfigError, options_.silence_s > 0)
      << "a host watch needs a positive silence, not " << options_.silence_s << " s";
  for (const auto& [rank, host] : hosts) ranks_of_[host].push_back(rank);
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
  running_ = std::set<int>(running.begin(), running.end());
  now_ = now;
  for (const auto& [host, ranks] : ranks_of_)
    for (int rank : ranks)
      if (running_.count(rank)) pulses_.read(*store_, rendezvous::Member{rank, 0}, now, wall_now);
  const auto limit = steady_seconds(options_.silence_s);
  const std::string variable = " (COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=" + seconds_text(options_.silence_s) + ")";
  for (const auto& [host, ranks] : ranks_of_)
    if (host_silent(host, limit))
      return "host " + host + " lost: " + describe_host(host) + variable +
             ": its link or the machine is down; ranks elsewhere are not at fault";
  // A hung process on a host that is otherwise alive: another rank there
  // beat within half the limit. (Within the limit is not enough: the last
  // beats of a host's ranks before its link went down are seen at different
  // reads, so one rank reaches the limit a read before the others.)
  for (const auto& [host, ranks] : ranks_of_) {
    if (!host_beating(host, limit / 2)) continue;
    for (int rank : ranks) {
      const Pulse* pulse = pulses_.find({rank, 0});
      if (!running_.count(rank) || !pulse || !HeartbeatTracker::silent(*pulse, limit, now)) continue;
      return "rank " + std::to_string(rank) + " on " + host + " has sent no heartbeat since " +
             clock_text(pulse->wall_since) + variable + " while the other ranks of " + host +
             " beat: the process hangs (stopped, or out of memory and swapping)";
    }
  }
  return {};
}

std::vector<const HostWatch::Pulse*> HostWatch::beating_pulses(const std::string& host) const {
  std::vector<const Pulse*> pulses;
  for (int rank : ranks_of_.at(host))
    if (const Pulse* pulse = pulses_.find({rank, 0}); running_.count(rank) && pulse && pulse->beats > 0)
      pulses.push_back(pulse);
  return pulses;
}

bool HostWatch::host_beating(const std::string& host, SteadyClock::duration within) const {
  const auto pulses = beating_pulses(host);
  return std::any_of(pulses.begin(), pulses.end(), [&](const Pulse* p) { return now_ - p->since < within; });
}

bool HostWatch::host_silent(const std::string& host, SteadyClock::duration limit) const {
  const auto pulses = beating_pulses(host);
  return !pulses.empty() && std::all_of(pulses.begin(), pulses.end(),
                                        [&](const Pulse* p) { return HeartbeatTracker::silent(*p, limit, now_); });
}

std::string HostWatch::describe_host(const std::string& host) const {
  std::string ranks;
  int count = 0;
  WallClock::time_point since = WallClock::time_point::max();
  for (int rank : ranks_of_.at(host)) {
    if (!running_.count(rank)) continue;
    ranks += (count++ ? ", " : "") + std::to_string(rank);
    if (const Pulse* pulse = pulses_.find({rank, 0})) since = std::min(since, pulse->wall_since);
  }
  return (count == 1 ? "rank " : "ranks ") + ranks + " on it " + (count == 1 ? "has" : "have") +
         " sent no heartbeat since " + clock_text(since);
}

std::string HostWatch::silent_hosts(double for_s) const {
  std::string said;
  for (const auto& [host, ranks] : ranks_of_)
    if (host_silent(host, steady_seconds(for_s)))
      said += (said.empty() ? "" : "; ") + ("host " + host + ": " + describe_host(host));
  return said;
}

}  // namespace cohort::launcher
