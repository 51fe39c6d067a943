// ReduceLROnPlateau: multiplies the learning rate by `factor` when a
// monitored metric has not improved for `patience` epochs, then counts down
// `cooldown` epochs before watching again; never below min_lr (Keras's
// rules, exactly). Every rank
// applies the chief's rate (fit() agrees on it at epoch end).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/monitor.h"

namespace cohort {

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  Monitor::Mode mode = Monitor::Mode::automatic;
  double factor = 0.1;  // in (0, 1)
  int64_t patience = 10;
  double min_delta = 1e-4;
  int64_t cooldown = 0;
  double min_lr = 0;
};

std::shared_ptr<Callback> reduce_lr_on_plateau(ReduceLROnPlateauOptions options = {});

}  // namespace cohort
