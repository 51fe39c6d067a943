#include "cohort/torch/fit/monitor.h"

#include <cmath>

#include "cohort/common/check.h"

namespace cohort {

Monitor::Monitor(std::string key, Mode mode, double min_delta)
    : key_(std::move(key)),
      maximize_(mode == Mode::max || (mode == Mode::automatic && key_.find("acc") != std::string::npos)),
      min_delta_(min_delta) {
  COHORT_CHECK_AS(ConfigError, !key_.empty()) << "a monitored key is required";
  COHORT_CHECK_AS(ConfigError, min_delta_ >= 0) << "min_delta must be >= 0, got " << min_delta_;
}

double Monitor::value(const Logs& logs, const std::string& who) const {
  auto it = logs.find(key_);
  if (it != logs.end()) return it->second;
  std::string present;
  for (const auto& [k, v] : logs) present += (present.empty() ? "" : ", ") + k;
  COHORT_THROW(ConfigError) << who << " monitors '" << key_ << "', which the logs do not have (they have: "
                            << present << "; val_ keys need validation_data)";
}

bool Monitor::better(double value, double reference) const {
  if (std::isnan(value)) return false;
  return maximize_ ? value > reference + min_delta_ : value < reference - min_delta_;
}

bool Monitor::improved(double value) {
  if (std::isnan(value)) return false;
  if (has_best_ && !better(value, best_)) return false;
  set_best(value);
  return true;
}

void Monitor::save(CallbackState& state, const std::string& prefix) const {
  if (has_best_) state[prefix + "best"] = {best_};
}

void Monitor::load(const CallbackState& state, const std::string& prefix) {
  auto it = state.find(prefix + "best");
  if (it != state.end() && it->second.size() == 1) set_best(it->second[0]);
}

}  // namespace cohort
