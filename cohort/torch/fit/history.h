// History: what fit() returns, the logs of every epoch (Keras's History),
// with an export for a run's record as CSV.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cohort/torch/fit/callback.h"

namespace cohort {

class History {
 public:
  // Appends epoch `epoch`'s logs.
  void add_epoch(int64_t epoch, const Logs& logs);

  const std::vector<int64_t>& epochs() const { return epochs_; }
  // Every logged key's value per epoch (NaN where an epoch lacks the key,
  // e.g. validation that runs every k-th epoch).
  std::vector<double> values(const std::string& key) const;
  std::vector<std::string> keys() const;
  bool empty() const { return epochs_.empty(); }
  const Logs& last() const;  // the last epoch's logs; ConfigError when empty

  // True when fit() stopped for a preemption (see model.h).
  bool preempted() const { return preempted_; }
  void set_preempted(bool preempted) { preempted_ = preempted; }
  // Why training ended before its last epoch, when a callback stopped it
  // (Model::stop_training(reason): EarlyStopping's, TerminateOnNaN's);
  // empty when it ran to the end or was preempted.
  const std::string& stop_reason() const { return stop_reason_; }
  void set_stop_reason(std::string reason) { stop_reason_ = std::move(reason); }

  // "epoch,<key>,<key>,..." then a row per epoch (epochs 1-based); empty
  // cells for missing values. Written atomically (ConfigError when it
  // cannot be).
  std::string csv() const;
  void write_csv(const std::string& path) const;

  // For BackupAndRestore: the history as a callback state and back.
  void save(CallbackState& state) const;
  void load(const CallbackState& state);

 private:
  std::vector<int64_t> epochs_;
  std::vector<Logs> logs_;
  bool preempted_ = false;
  std::string stop_reason_;
};

}  // namespace cohort
