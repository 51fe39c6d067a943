#include "cohort/torch/fit/history.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "cohort/common/atomic_file.h"
#include "cohort/common/check.h"

namespace cohort {

void History::add_epoch(int64_t epoch, const Logs& logs) {
  epochs_.push_back(epoch);
  logs_.push_back(logs);
}

std::vector<std::string> History::keys() const {
  std::set<std::string> keys;
  for (const Logs& l : logs_)
    for (const auto& [k, v] : l) keys.insert(k);
  return {keys.begin(), keys.end()};
}

std::vector<double> History::values(const std::string& key) const {
  std::vector<double> out;
  for (const Logs& l : logs_) {
    auto it = l.find(key);
    out.push_back(it == l.end() ? std::nan("") : it->second);
  }
  return out;
}

const Logs& History::last() const {
  COHORT_CHECK_AS(ConfigError, !logs_.empty()) << "History: no epoch has ended";
  return logs_.back();
}

std::string History::csv() const {
  const std::vector<std::string> columns = keys();
  std::string out = "epoch";
  for (const std::string& k : columns) out += "," + k;
  out += "\n";
  for (size_t i = 0; i < logs_.size(); ++i) {
    out += std::to_string(epochs_[i] + 1);
    for (const std::string& k : columns) {
      out += ",";
      auto it = logs_[i].find(k);
      if (it != logs_[i].end() && std::isfinite(it->second)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", it->second);
        out += buf;
      }
    }
    out += "\n";
  }
  return out;
}

// Readers see the old file or the new one; no fsync: fit() rewrites it every
// epoch from state it holds, so one lost to a power cut is written again.
void History::write_csv(const std::string& path) const {
  write_file_atomically(path, csv(), {.durability = Durability::none});
}

void History::save(CallbackState& state) const {
  state["epochs"] = std::vector<double>(epochs_.begin(), epochs_.end());
  for (const std::string& k : keys()) state["log:" + k] = values(k);
}

void History::load(const CallbackState& state) {
  epochs_.clear();
  logs_.clear();
  auto it = state.find("epochs");
  if (it == state.end()) return;
  for (double e : it->second) epochs_.push_back(int64_t(e));
  logs_.resize(epochs_.size());
  for (const auto& [key, values] : state) {
    if (key.rfind("log:", 0) != 0) continue;
    COHORT_CHECK_AS(ConfigError, values.size() == epochs_.size()) << "saved history: '" << key << "' has "
                                                                  << values.size() << " values for "
                                                                  << epochs_.size() << " epochs";
    for (size_t i = 0; i < values.size(); ++i)
      if (!std::isnan(values[i])) logs_[i][key.substr(4)] = values[i];
  }
}

}  // namespace cohort
