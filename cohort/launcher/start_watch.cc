#include "cohort/launcher/start_watch.h"

#include <vector>

#include "cohort/common/error.h"
#include "cohort/launcher/remote_rank.h"

namespace cohort::launcher {

StartWatch::StartWatch(std::shared_ptr<rendezvous::Store> store, std::map<int, std::string> ranks, Started on_started)
    : store_(std::move(store)), pending_(std::move(ranks)), on_started_(std::move(on_started)) {}

bool StartWatch::started() {
  if (pending_.empty()) return true;
  std::vector<std::string> keys;
  for (const auto& [rank, host] : pending_) keys.push_back(started_key(rank));
  // One round trip while ranks are still coming; the message names them.
  if (!store_->check(keys)) return false;
  if (on_started_)
    for (const auto& [rank, host] : pending_) {
      on_started_(rank, host, store_->get(started_key(rank), std::chrono::seconds(10)));
    }
  pending_.clear();
  return true;
}

bool StartWatch::recorded_start(int rank) {
  const std::string key = started_key(rank);
  return store_->check(std::span<const std::string>(&key, 1));
}

std::string StartWatch::describe_missing() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::string key = started_key(it->first);
    it = store_->check(std::span<const std::string>(&key, 1)) ? pending_.erase(it) : std::next(it);
  }
  std::string names;
  int shown = 0;
  for (const auto& [rank, host] : pending_) {
    if (shown == 8) {
      names += " and " + std::to_string(pending_.size() - 8) + " more";
      break;
    }
    names += (shown ? ", " : "") + ("rank " + std::to_string(rank) + " on " + host);
    ++shown;
  }
  return names + " did not start within the start timeout (--start-timeout): the launch command did not "
                 "reach the host, or cohortrun's remote end could not reach the store";
}

}  // namespace cohort::launcher
