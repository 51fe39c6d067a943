#include "cohort/launcher/elastic_controller.h"

#include <algorithm>
#include <string>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/seconds.h"
#include "cohort/launcher/host_list.h"
#include "cohort/launcher/remote_rank.h"

namespace cohort::launcher {

using rendezvous::Member;

namespace {

bool contains(const std::vector<Member>& list, Member m) { return std::find(list.begin(), list.end(), m) != list.end(); }

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : "; ") + part;
  return text;
}

}  // namespace

ElasticController::ElasticController(ElasticOptions options, std::shared_ptr<rendezvous::Store> store, int ranks,
                                     Respawn respawn)
    : options_(std::move(options)), store_(std::move(store)), respawn_(std::move(respawn)), next_slot_(ranks) {
  COHORT_CHECK_AS(ConfigError, options_.min_np >= 1 && options_.min_np <= ranks)
      << "--min-np " << options_.min_np << " must be in 1.." << ranks;
  if (options_.max_np == 0) options_.max_np = ranks;
  COHORT_CHECK_AS(ConfigError, options_.max_np >= ranks)
      << "--max-np " << options_.max_np << " is fewer than the " << ranks << " rank(s) started";
  COHORT_CHECK_AS(ConfigError, options_.slot_hosts.empty() || int(options_.slot_hosts.size()) == ranks)
      << options_.slot_hosts.size() << " slot host(s) for " << ranks << " ranks";
  COHORT_CHECK_AS(ConfigError, !options_.discovered || !options_.slot_hosts.empty())
      << "host discovery needs each slot's host";
  for (int s = 0; s < ranks; ++s) {
    survivors_.push_back({s, 0});
    if (!options_.slot_hosts.empty()) slot_host_[s] = options_.slot_hosts[size_t(s)];
  }
  if (options_.discovered) {
    pool_.emplace(options_.pool);
    pool_->update(*options_.discovered);
    for (const auto& [slot, host] : slot_host_) pool_->take(host);
  }
}

std::string ElasticController::host_of(int slot) const {
  const auto it = slot_host_.find(slot);
  return it == slot_host_.end() ? std::string() : it->second;
}

void ElasticController::publish_initial() { publish(survivors_); }

void ElasticController::publish(std::vector<Member> members) {
  current_.epoch += 1;
  current_.members = std::move(members);
  current_.hosts.clear();
  if (!slot_host_.empty())
    for (const Member& m : current_.members) current_.hosts.push_back(host_of(m.slot));
  rendezvous::publish_membership(*store_, current_);
  recent_.push_back(current_);
  if (recent_.size() > size_t(kLostEpochs) + 1) recent_.pop_front();
  lost_since_publish_ = false;
  removal_pending_ = false;
}

bool ElasticController::start(Member m, const std::string& host, std::string& error, Clock::time_point now) {
  if (!host.empty()) slot_host_[m.slot] = host;
  if (pool_) pool_->take(host);
  bool remote = false;
  try {
    remote = respawn_(m, host);
  } catch (const Error& e) {
    if (pool_) pool_->release(host);
    error = e.what();
    return false;
  }
  pending_.push_back(m);
  if (remote && options_.start_timeout_s > 0) starting_[rendezvous::member_text(m)] = {m, now};
  return true;
}

void ElasticController::watch_starts(Clock::time_point now) {
  const auto limit = std::chrono::duration<double>(options_.start_timeout_s);
  for (auto it = starting_.begin(); it != starting_.end();) {
    const auto [m, since] = it->second;
    // Started: its remote end said so, or (that record failed) the program
    // itself beat or said it is ready.
    const std::string key = started_key(m.slot, m.incarnation);
    if (store_->check(std::span<const std::string>(&key, 1)) || rendezvous::heartbeats(*store_, m) > 0 ||
        rendezvous::member_ready(*store_, m)) {
      it = starting_.erase(it);
      continue;
    }
    if (now - since < limit || !terminate_) {
      ++it;
      continue;
    }
    it = starting_.erase(it);  // terminated once
    terminate_(m, "did not start its program within --start-timeout " + seconds_text(options_.start_timeout_s) +
                      " s (is the host reachable through the launch template?)");
  }
}

bool ElasticController::settled() const {
  // Members that read a later epoch while others still form the last one
  // would rendezvous apart. An epoch that lost a member since is past: its
  // survivors wait for the next.
  return lost_since_publish_ || rendezvous::epoch_formed(*store_, current_.epoch);
}

bool ElasticController::member_ended(Member m, bool failed, std::string& note) {
  pulses_.forget(m);
  silenced_.erase(rendezvous::member_text(m));
  starting_.erase(rendezvous::member_text(m));
  const std::string host = host_of(m.slot);
  if (std::erase(removed_, m) > 0) {
    // Told to leave (its host went away): gone as expected, whatever its
    // code. If the latest epoch still has it, that epoch will not form.
    if (contains(current_.members, m)) lost_since_publish_ = true;
    if (pool_) pool_->release(host);
    note = "it left: host " + host + " was removed by discovery";
    return true;
  }
  const bool was_survivor = std::erase(survivors_, m) > 0;
  const bool was_pending = std::erase(pending_, m) > 0;
  if (pool_ && (was_survivor || was_pending)) pool_->release(host);
  if (!failed) {
    // Training is over for the world: nobody joins any more.
    if (!finished_ && was_survivor) {
      finished_ = true;
      rendezvous::end_membership(*store_, "the job's training finished");
    }
    return true;
  }
  if (finished_) {
    // A replacement told that training is over may end as it likes; a
    // member of the world failing after it is the job's failure.
    note = "after the job's training finished";
    return was_pending;
  }
  if (was_survivor && contains(current_.members, m)) lost_since_publish_ = true;
  if (was_survivor) announce_lost(m);
  std::vector<std::string> said;
  if (was_pending) said.push_back("a process that had not joined yet");
  const auto now = Clock::now();
  if (pool_) {
    const auto cooldown = pool_->failed(host, now);
    said.push_back("host " + host + " is blacklisted for " + seconds_text(double(cooldown.count()) / 1000) + " s");
  }
  int& restarts = restarts_[m.slot];
  const std::string slot = "slot " + std::to_string(m.slot);
  if (restarts < options_.max_restarts) {
    const Member next{m.slot, m.incarnation + 1};
    const std::string restart =
        "(restart " + std::to_string(restarts + 1) + " of " + std::to_string(options_.max_restarts) + ")";
    std::optional<std::string> where = host;
    if (pool_) where = pool_->free_host(now);
    std::string error;
    if (!where) {
      ++restarts;
      waiting_.push_back(next);
      said.push_back(slot + " waits for a free host that is not blacklisted " + restart);
    } else if (start(next, *where, error, now)) {
      ++restarts;
      said.push_back("starting " + slot + " again" + (pool_ ? " on " + *where : std::string()) + " " + restart);
    } else {
      said.push_back(slot + " cannot be started again: " + error);
    }
  } else {
    said.push_back(slot + " used its " + std::to_string(options_.max_restarts) + " restart(s)");
  }
  const int reachable = int(survivors_.size() + pending_.size() + waiting_.size());
  bool goes_on = false;
  if (survivors_.empty()) {
    // The state lives in the members' memory: with none left it is lost,
    // and replacements would silently start training over.
    said.push_back("no member is left to hold the job's state");
  } else if (reachable < options_.min_np) {
    // Every slot that can be started again already was.
    said.push_back(std::to_string(reachable) + " rank(s) left or starting, below --min-np " +
                   std::to_string(options_.min_np) + " for good");
  } else {
    goes_on = true;
    if (was_survivor && int(survivors_.size()) >= options_.min_np) {
      publish(survivors_);
      said.push_back("the other " + std::to_string(survivors_.size()) + " rank(s) go on in epoch " +
                     std::to_string(current_.epoch));
    } else if (was_survivor) {
      said.push_back(std::to_string(survivors_.size()) + " rank(s) left, below --min-np " +
                     std::to_string(options_.min_np) + ": waiting for replacements");
    }
  }
  note = joined(said);
  return goes_on;
}

void ElasticController::announce_lost(Member m) {
  // Members move to the latest epoch at their next commit: they may still
  // be in the world of the one before (or of an older one that never
  // formed), so every recent world that has `m` is told.
  for (const rendezvous::Membership& recent : recent_)
    if (recent.rank_of(m) >= 0) rendezvous::announce_lost(*store_, recent.epoch, m);
}

void ElasticController::watch_heartbeats(Clock::time_point now) {
  if (options_.heartbeat_timeout_s <= 0 || !terminate_) return;
  const auto limit = steady_seconds(options_.heartbeat_timeout_s);
  for (const std::vector<Member>* list : {&survivors_, &pending_})
    for (const Member& m : *list) {
      const HeartbeatTracker::Pulse& pulse = pulses_.read(*store_, m, now, HeartbeatTracker::WallClock::now());
      if (!HeartbeatTracker::silent(pulse, limit, now) || !silenced_.insert(rendezvous::member_text(m)).second)
        continue;
      terminate_(
          m, "sent no heartbeat for " + seconds_text(options_.heartbeat_timeout_s) + " s (a cut link or a hung host)");
    }
}

std::string ElasticController::hosts_discovered(const std::vector<HostSlots>& hosts) {
  COHORT_CHECK(pool_) << "hosts_discovered() without host discovery";
  if (hosts == pool_->hosts()) return {};
  std::vector<std::string> said;
  for (auto [host, excess] : pool_->update(hosts)) {
    // Ranks already told to leave still hold their slots until they exit.
    excess -= int(std::count_if(removed_.begin(), removed_.end(), [&](const Member& m) { return host_of(m.slot) == host; }));
    std::vector<std::string> gone;
    // The newest first: processes not admitted yet, then the latest members
    // (replacements waiting for a host are placed later, anywhere).
    // `keep`: members that must stay (the world's floor).
    auto remove_from = [&](std::vector<Member>& list, size_t keep) {
      for (auto it = list.rbegin(); it != list.rend() && excess > 0;) {
        if (host_of(it->slot) != host || list.size() <= keep) {
          ++it;
          continue;
        }
        removed_.push_back(*it);
        gone.push_back(rendezvous::member_text(*it));
        it = std::make_reverse_iterator(list.erase(std::next(it).base()));
        --excess;
      }
    };
    remove_from(pending_, 0);
    const size_t before = survivors_.size();
    remove_from(survivors_, size_t(options_.min_np));
    if (survivors_.size() != before) removal_pending_ = true;
    if (!gone.empty()) {
      std::string list;
      for (const std::string& g : gone) list += (list.empty() ? "" : ", ") + g;
      said.push_back("host " + host + " lost slots: " + list + " leave(s) the job");
    }
  }
  said.insert(said.begin(), "hosts now " + (hosts.empty() ? std::string("none") : format_host_list(hosts)));
  return joined(said);
}

std::string ElasticController::tick(Clock::time_point now) {
  // Also once training finished: a member that hangs on its way out (a
  // cut link during its last collectives) is then the job's failure, said
  // as such, not a launcher waiting for it.
  if (now >= next_watch_) {
    next_watch_ = now + kWatchPeriod;
    watch_heartbeats(now);
    watch_starts(now);
  }
  if (finished_) return {};
  if (pool_) {
    // Replacements that waited for a host, then new slots up to max_np.
    std::string error;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const std::optional<std::string> host = pool_->free_host(now);
      if (!host) break;
      const Member m = *it;
      it = waiting_.erase(it);
      (void)start(m, *host, error, now);
    }
    while (int(survivors_.size() + pending_.size() + waiting_.size()) < options_.max_np) {
      const std::optional<std::string> host = pool_->free_host(now);
      if (!host || !start({next_slot_, 0}, *host, error, now)) break;
      ++next_slot_;
    }
  }
  std::vector<Member> ready;
  for (const Member& p : pending_)
    if (rendezvous::member_ready(*store_, p)) ready.push_back(p);
  const bool admit = !ready.empty() && int(survivors_.size() + ready.size()) >= options_.min_np;
  const bool remove = removal_pending_;
  if ((admit || remove) && settled()) {
    if (admit)
      for (const Member& r : ready) {
        std::erase(pending_, r);
        survivors_.push_back(r);
      }
    publish(survivors_);
  }
  // Below min_np: the survivors wait for an epoch that only replacements
  // can bring.
  if (int(survivors_.size()) >= options_.min_np) {
    below_since_.reset();
    return {};
  }
  if (!below_since_) below_since_ = now;
  if (now - *below_since_ < std::chrono::duration<double>(options_.timeout_s)) return {};
  const std::string why = "the job stayed below --min-np " + std::to_string(options_.min_np) + " (" +
                          std::to_string(survivors_.size()) + " rank(s) live) for --elastic-timeout " +
                          seconds_text(options_.timeout_s) + " s";
  rendezvous::end_membership(*store_, why);
  finished_ = true;
  return why;
}

}  // namespace cohort::launcher
