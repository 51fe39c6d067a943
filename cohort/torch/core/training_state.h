// Where a training run stands, as checkpoints record it (checkpoint/) and
// strategies that save their own state return it (core/strategy.h).
#pragma once

#include <cstdint>

namespace cohort {

// Resuming at (epoch, batch) continues the run as if it had never stopped:
// the sampler is re-seeded with `seed` for `epoch` and the first `batch`
// batches of that epoch are skipped.
struct TrainingState {
  int64_t epoch = 0;   // the epoch in progress (0-based)
  int64_t batch = 0;   // batches of that epoch already trained
  int64_t step = 0;    // optimizer steps since the start of the run
  uint64_t seed = 0;   // the sampler's seed
  bool operator==(const TrainingState&) const = default;
};

}  // namespace cohort
