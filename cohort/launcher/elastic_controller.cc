#include "cohort/launcher/elastic_controller.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cohort/common/check.h"

namespace cohort::launcher {

using rendezvous::Member;

ElasticController::ElasticController(ElasticOptions options, std::shared_ptr<rendezvous::Store> store, int ranks,
                                     Respawn respawn)
    : options_(options), store_(std::move(store)), respawn_(std::move(respawn)) {
  COHORT_CHECK_AS(ConfigError, options_.min_np >= 1 && options_.min_np <= ranks)
      << "--min-np " << options_.min_np << " must be in 1.." << ranks;
  COHORT_CHECK_AS(ConfigError, options_.slot_hosts.empty() || int(options_.slot_hosts.size()) == ranks)
      << options_.slot_hosts.size() << " slot host(s) for " << ranks << " ranks";
  for (int s = 0; s < ranks; ++s) survivors_.push_back({s, 0});
}

void ElasticController::publish_initial() { publish(survivors_); }

void ElasticController::publish(std::vector<Member> members) {
  current_.epoch += 1;
  current_.members = std::move(members);
  current_.hosts.clear();
  if (!options_.slot_hosts.empty())
    for (const Member& m : current_.members) current_.hosts.push_back(options_.slot_hosts.at(size_t(m.slot)));
  rendezvous::publish_membership(*store_, current_);
}

bool ElasticController::member_ended(Member m, bool failed, std::string& note) {
  const bool was_survivor = std::erase(survivors_, m) > 0;
  const bool was_pending = std::erase(pending_, m) > 0;
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
  std::vector<std::string> said;  // joined into `note`
  if (was_pending) said.push_back("a replacement that had not joined yet");
  int& restarts = restarts_[m.slot];
  const std::string slot = "slot " + std::to_string(m.slot);
  if (restarts < options_.max_restarts) {
    const Member next{m.slot, m.incarnation + 1};
    try {
      respawn_(next);
      pending_.push_back(next);
      said.push_back("starting " + slot + " again (restart " + std::to_string(++restarts) + " of " +
                     std::to_string(options_.max_restarts) + ")");
    } catch (const Error& e) {
      said.push_back(slot + " cannot be started again: " + e.what());
    }
  } else {
    said.push_back(slot + " used its " + std::to_string(options_.max_restarts) + " restart(s)");
  }
  const int reachable = int(survivors_.size() + pending_.size());
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
  note.clear();
  for (const std::string& part : said) note += (note.empty() ? "" : "; ") + part;
  return goes_on;
}

std::string ElasticController::tick(Clock::time_point now) {
  if (finished_) return {};
  std::vector<Member> ready;
  for (const Member& p : pending_)
    if (rendezvous::member_ready(*store_, p)) ready.push_back(p);
  // Replacements join only once the last epoch was formed: members that
  // read a later epoch while others still form the last one would
  // rendezvous apart. An epoch that lost a member since is past: its
  // survivors wait for the next.
  auto settled = [&] {
    for (const Member& m : current_.members)
      if (std::find(survivors_.begin(), survivors_.end(), m) == survivors_.end()) return true;
    return rendezvous::epoch_formed(*store_, current_.epoch);
  };
  if (!ready.empty() && int(survivors_.size() + ready.size()) >= options_.min_np && settled()) {
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
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", options_.timeout_s);
  const std::string why = "the job stayed below --min-np " + std::to_string(options_.min_np) + " (" +
                          std::to_string(survivors_.size()) + " rank(s) live) for --elastic-timeout " + seconds + " s";
  rendezvous::end_membership(*store_, why);
  finished_ = true;
  return why;
}

}  // namespace cohort::launcher
