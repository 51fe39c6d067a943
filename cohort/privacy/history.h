// What the accountants account for: the DP-SGD steps taken so far, as runs
// of identical steps. One step is one release of the Gaussian mechanism with
// standard deviation noise_multiplier * C on a Poisson sample of the data in
// which each example is present with probability sample_rate (C the clipping
// norm, the sensitivity of the clipped sum).
//
// A history is the whole privacy state of a training run: checkpoints store
// it (encode_history), and a run resumed at another world size appends
// segments with its own sample rate to the one it restored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::privacy {

struct Segment {
  double noise_multiplier = 0;  // sigma >= 0; 0 releases the data as it is
  double sample_rate = 0;       // q in [0, 1]; 0 samples nothing
  int64_t steps = 0;            // >= 0

  bool operator==(const Segment&) const = default;
};

using History = std::vector<Segment>;

// Throws ConfigError naming the field when `segment` is outside the ranges
// above (or NaN).
void validate(const Segment& segment);

// Appends `steps` steps, extending the last segment when its noise
// multiplier and sample rate are the same (as Opacus's accountants do), so a
// history stays as short as the number of distinct settings.
void append_steps(History& history, double noise_multiplier, double sample_rate, int64_t steps = 1);

// Total steps of a history.
int64_t total_steps(const History& history);

// A history as text, one segment per line "sigma q steps" with every digit
// of the doubles (round-trips exactly), and back. decode_history throws
// ConfigError on anything it cannot read back into valid segments.
std::string encode_history(const History& history);
History decode_history(std::string_view text);

}  // namespace cohort::privacy
