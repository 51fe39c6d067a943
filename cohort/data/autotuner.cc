#include "cohort/data/autotuner.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace cohort::data {

AutotuneDecision autotune(const AutotuneInputs& in) {
  AutotuneDecision d;
  d.inputs = in;
  d.build_ms = in.build_s * 1e3;
  d.consume_ms = in.consume_s * 1e3;
  d.wait_ms = in.wait_s * 1e3;
  d.workers = in.workers;
  std::ostringstream why;
  if (in.tune_workers) {
    // A consumer that does nothing between calls could use any number; the
    // floor keeps the division finite.
    const double consume = std::max(in.consume_s, 1e-6);
    const int needed = int(std::ceil(in.build_s / consume - 1e-9));
    // "Waiting" means more than 5% of the consumer's own time per batch.
    const bool starved = in.wait_s > 0.05 * in.consume_s;
    int workers = in.workers;
    if (starved) {
      workers = std::max(workers + 1, needed);
      why << "consumer waited " << d.wait_ms << " ms per batch";
    } else if (needed < workers) {
      workers = std::max(workers - 1, needed);
      why << "workers ahead of the consumer (" << needed << " would keep up)";
    } else {
      why << "balanced";
    }
    d.workers = std::clamp(workers, 1, std::max(in.max_workers, 1));
    if (d.workers != workers) why << ", capped at " << d.workers << " workers";
  } else {
    why << "workers fixed";
  }
  d.depth = in.depth;
  if (in.tune_depth) d.depth = std::max(2 * d.workers, in.window + 1);
  const int capped = std::clamp(d.depth, 1, std::max(in.max_depth, 1));
  if (capped < d.depth) why << "; depth " << d.depth << " capped at " << capped << " by the memory bound";
  d.depth = capped;
  d.reason = why.str();
  return d;
}

}  // namespace cohort::data
