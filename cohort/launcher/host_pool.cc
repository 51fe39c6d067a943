#include "cohort/launcher/host_pool.h"

#include <algorithm>

#include "cohort/common/check.h"

namespace cohort::launcher {

HostPool::HostPool(HostPoolOptions options) : options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.cooldown.count() > 0 && options_.max_cooldown >= options_.cooldown)
      << "host pool: the cool-down must be positive and at most its maximum";
}

std::map<std::string, int> HostPool::update(const std::vector<HostSlots>& hosts) {
  hosts_ = hosts;
  std::map<std::string, int> excess;
  for (const auto& [name, use] : use_) {
    const auto it = std::find_if(hosts_.begin(), hosts_.end(), [&](const HostSlots& h) { return h.name == name; });
    const int slots = it == hosts_.end() ? 0 : it->slots;
    if (use.ranks > slots) excess[name] = use.ranks - slots;
  }
  return excess;
}

std::optional<std::string> HostPool::free_host(Clock::time_point now) const {
  for (const HostSlots& h : hosts_) {
    const auto it = use_.find(h.name);
    const int ranks = it == use_.end() ? 0 : it->second.ranks;
    if (ranks < h.slots && !cooling(h.name, now)) return h.name;
  }
  return std::nullopt;
}

void HostPool::take(const std::string& host) { ++use_[host].ranks; }

void HostPool::release(const std::string& host) {
  Use& use = use_[host];
  COHORT_CHECK(use.ranks > 0) << "host pool: no rank to release on " << host;
  --use.ranks;
}

std::chrono::milliseconds HostPool::failed(const std::string& host, Clock::time_point now) {
  Use& use = use_[host];
  // base * 2^(failures - 1), capped: the shift stops growing once past the cap.
  std::chrono::milliseconds cooldown = options_.cooldown;
  for (int i = 0; i < use.failures && cooldown < options_.max_cooldown; ++i) cooldown *= 2;
  cooldown = std::min(cooldown, options_.max_cooldown);
  ++use.failures;
  use.cool_until = now + cooldown;
  return cooldown;
}

bool HostPool::cooling(const std::string& host, Clock::time_point now) const {
  const auto it = use_.find(host);
  return it != use_.end() && now < it->second.cool_until;
}

int HostPool::free_slots(Clock::time_point now) const {
  int free = 0;
  for (const HostSlots& h : hosts_) {
    if (cooling(h.name, now)) continue;
    const auto it = use_.find(h.name);
    free += std::max(0, h.slots - (it == use_.end() ? 0 : it->second.ranks));
  }
  return free;
}

}  // namespace cohort::launcher
