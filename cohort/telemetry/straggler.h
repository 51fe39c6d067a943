// StragglerDetector: which rank the others wait for, and at what.
//
// In data parallelism every rank's step ends at the same collective, so
// per-rank step times are equal and say nothing; what differs is how each
// step is spent. A rank's own time is what it spends not waiting for its
// peers: compute + input + transfer (rank_sample.h). The straggler is the
// rank whose own time is the largest, when it exceeds the median of the
// other ranks' own time by at least `threshold` (0.2: 20% slower) in every
// observation for `hold_s` seconds in a row. What it is slow at is the part
// of its own time (compute, input or network, the transfer) that exceeds the
// other ranks' median of that part the most.
//
// The detector is fed the latest samples of every rank (rank 0 reads them
// from the store, publisher.h) and a clock, so it is tested with synthetic
// samples; it holds no threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/telemetry/rank_sample.h"

namespace cohort::telemetry {

struct StragglerOptions {
  double threshold = 0.2;  // own time >= (1 + threshold) x the others' median
  double hold_s = 3;       // ... in every observation for this long
};

struct StragglerVerdict {
  bool present = false;  // a straggler is named
  int rank = -1;
  std::string host;
  int64_t pid = 0;
  std::string cause;        // "compute", "input" or "network"
  double slower_by = 0;     // own time / the others' median - 1 (0.45: 45% slower)
  double since_unix_s = 0;  // when it first crossed the threshold in this run of observations
  double unix_time_s = 0;   // when this verdict was made
  // One line for people: "rank 2 (pid 4711 on h1) is 45% slower than the
  // median of the others at compute for 4.0 s".
  std::string message() const;
};

std::string to_json(const StragglerVerdict& v);
StragglerVerdict straggler_verdict_from_json(std::string_view text, std::string_view source = "straggler verdict");

// The rank with the largest own time among `samples` and how much slower it
// is than the median of the others (no hold): nullopt for fewer than 2
// samples with steps. For fit()'s epoch logs and the report.
struct Slowest {
  int rank = -1;
  double slower_by = 0;
  std::string cause;
};
std::optional<Slowest> slowest_rank(const std::vector<RankSample>& samples);

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {});

  // One observation: the latest sample of each rank (any order; samples
  // without steps are ignored) at `now_unix_s`. Returns the verdict, which
  // names a straggler once the same rank has been at least `threshold`
  // slower for `hold_s`.
  StragglerVerdict observe(const std::vector<RankSample>& samples, double now_unix_s);
  // Whether the last observe() named a straggler that the one before did
  // not (rank 0 prints a line then), or cleared one.
  bool changed() const { return changed_; }

 private:
  StragglerOptions options_;
  int candidate_ = -1;
  double candidate_since_ = 0;
  bool named_ = false;
  int named_rank_ = -1;
  bool changed_ = false;
};

}  // namespace cohort::telemetry
