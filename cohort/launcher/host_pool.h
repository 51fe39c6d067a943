// The hosts an elastic job with host discovery may place its ranks on: each
// host's slots as discovery last reported them, the slots in use, and the
// blacklist (cohortrun --host-discovery-script).
//
// A failure on a host blacklists it for a cool-down that doubles with each
// failure there (base, 2 base, 4 base, ... up to max): no new rank is placed
// on it until the cool-down ends, then it is tried again (Horovod's
// blacklist with --blacklist-cooldown-range). Ranks already running on it
// keep running.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/launcher/host_list.h"

namespace cohort::launcher {

struct HostPoolOptions {
  std::chrono::milliseconds cooldown{std::chrono::seconds(10)};
  std::chrono::milliseconds max_cooldown{std::chrono::minutes(5)};
};

class HostPool {
 public:
  using Clock = std::chrono::steady_clock;

  explicit HostPool(HostPoolOptions options = {});

  // The hosts discovery reports now (order: where new ranks go first).
  // Returns, per host, how many of its ranks are now too many (a host gone,
  // or fewer slots than ranks on it).
  std::map<std::string, int> update(const std::vector<HostSlots>& hosts);

  // A host with a free slot that is not cooling down, in discovery order;
  // nullopt when none. take() then counts the rank on it.
  std::optional<std::string> free_host(Clock::time_point now) const;
  void take(const std::string& host);
  // A rank on `host` ended or left: its slot is free again.
  void release(const std::string& host);

  // A rank on `host` failed: the host cools down (see the file comment).
  // Returns the cool-down given.
  std::chrono::milliseconds failed(const std::string& host, Clock::time_point now);
  bool cooling(const std::string& host, Clock::time_point now) const;

  // Free slots on hosts not cooling down.
  int free_slots(Clock::time_point now) const;
  const std::vector<HostSlots>& hosts() const { return hosts_; }

 private:
  struct Use {
    int ranks = 0;
    int failures = 0;
    Clock::time_point cool_until{};
  };

  HostPoolOptions options_;
  std::vector<HostSlots> hosts_;  // as last discovered
  std::map<std::string, Use> use_;
};

}  // namespace cohort::launcher
