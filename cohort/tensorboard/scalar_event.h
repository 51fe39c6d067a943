// ScalarEvent: one scalar of an event file, as a reader finds it.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::tfevents {

struct ScalarEvent {
  std::string tag;       // "epoch_loss", "batch_accuracy", ...
  int64_t step = 0;      // Keras's: the epoch (0-based) for epoch_*, the steps done for batch_*
  double value = 0;      // as stored: float32 (simple_value, DT_FLOAT tensors) or float64 (DT_DOUBLE)
  double wall_time = 0;  // seconds since the Unix epoch
};

}  // namespace cohort::tfevents
