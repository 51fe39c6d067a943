// EarlyStopping: stops training when a monitored metric has not improved for
// `patience` epochs. The decision is agreed across ranks (fit() stops every
// rank at the same epoch when any rank's callback asks), so a rank whose
// local view differs can never leave the others waiting.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/monitor.h"

namespace cohort {

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  Monitor::Mode mode = Monitor::Mode::automatic;
  double min_delta = 0;
  int64_t patience = 0;                 // stop after this many epochs without improvement (as Keras)
  std::optional<double> baseline;      // stop unless the metric beats this within `patience` epochs
  bool restore_best_weights = false;   // at the end, the model and optimizer of the best epoch
  int64_t start_from_epoch = 0;        // epochs to wait before monitoring
};

std::shared_ptr<Callback> early_stopping(EarlyStoppingOptions options = {});

}  // namespace cohort
