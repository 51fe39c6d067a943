// The pipeline's autotuner: how many worker threads build batches and how
// many batches may be built ahead of the consumer, chosen from measured
// rates, every decision kept for inspection.
//
// Measured (moving averages over recent batches):
//   build    seconds a worker takes to build one batch
//   consume  seconds the consumer spends between two next() calls, not
//            counting its waits inside next() (its own work per batch)
//   wait     seconds the consumer waited inside next() per batch
// Decision:
//   workers  enough to build one batch per `consume`: ceil(build/consume);
//            one more while the consumer still waits, one fewer when it
//            never waits and fewer would keep up; within [1, max_workers].
//   depth    2 * workers (a batch in the queue for each being built), at
//            least the out-of-order window + 1, at most what the memory
//            bound holds (max_depth), at least 1.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::data {

struct AutotuneInputs {
  double build_s = 0;
  double consume_s = 0;
  double wait_s = 0;
  int workers = 1;
  int depth = 2;
  int max_workers = 1;
  int max_depth = 2;
  int window = 0;
  bool tune_workers = true;
  bool tune_depth = true;
};

struct AutotuneDecision {
  int64_t at_batch = 0;  // batches delivered when it was made
  double build_ms = 0, consume_ms = 0, wait_ms = 0;
  int workers = 1;
  int depth = 2;
  std::string reason;
  AutotuneInputs inputs;  // what it was decided from: autotune(inputs) gives it again
};

AutotuneDecision autotune(const AutotuneInputs& in);

}  // namespace cohort::data
