// Poisson sampling for DP-SGD: at each step every example of the data set is
// in the batch independently with probability q (what the accountants
// assume), split across ranks without communication.
//
// Whether example j is in step s's batch is a pure function of (seed, s, j):
// a counter-based hash, not a stream. So the global batch of a step is the
// same whatever the number of ranks and however the examples are split, and
// a run resumed at another world size keeps sampling from the same law
// (nothing to store but the step). Each rank takes the sampled examples of
// its shard (j = rank, rank + world, ...): batch sizes vary per step and per
// rank, and a rank may get none; the training loop agrees on the rows of
// each step collectively.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::privacy {

struct PoissonSampling {
  int64_t dataset_size = 0;  // N > 0
  double sample_rate = 0;    // q in (0, 1]
  uint64_t seed = 0;
};

// True when example `index` is in the batch of `step`.
bool poisson_sampled(const PoissonSampling& sampling, int64_t step, int64_t index);

// The sampled examples of `rank`'s shard (index % world_size == rank) at
// `step`, in increasing order. Throws ConfigError for arguments out of range.
std::vector<int64_t> poisson_batch(const PoissonSampling& sampling, int64_t step, int rank, int world_size);

}  // namespace cohort::privacy
