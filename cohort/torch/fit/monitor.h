// A monitored value and its best so far, as EarlyStopping,
// ReduceLROnPlateau and ModelCheckpoint(save_best_only) watch one: the key
// in the epoch's logs, whether smaller or larger is better, and by how much
// it must change to count as an improvement.
#pragma once

#include <string>

#include "cohort/torch/fit/callback.h"

namespace cohort {

class Monitor {
 public:
  enum class Mode { min, max, automatic };  // automatic: max for keys with "acc", else min

  // ConfigError for min_delta < 0.
  Monitor(std::string key, Mode mode, double min_delta);

  const std::string& key() const { return key_; }
  // The monitored value in `logs`; ConfigError naming the key and the keys
  // that are there when it is missing.
  double value(const Logs& logs, const std::string& who) const;
  // True when `value` beats the best by more than min_delta (the first
  // value always does); then it is the new best.
  bool improved(double value);
  // Would `value` improve on `reference`? (No best is updated.)
  bool better(double value, double reference) const;
  double best() const { return best_; }
  bool has_best() const { return has_best_; }
  void set_best(double best) {
    best_ = best;
    has_best_ = true;
  }
  void reset() { has_best_ = false; }

  // Its best as callback state (for BackupAndRestore).
  void save(CallbackState& state, const std::string& prefix) const;
  void load(const CallbackState& state, const std::string& prefix);

 private:
  std::string key_;
  bool maximize_;
  double min_delta_;
  double best_ = 0;
  bool has_best_ = false;
};

}  // namespace cohort
