#include "cohort/privacy/poisson_sampling.h"

#include "cohort/common/check.h"

namespace cohort::privacy {
namespace {

// SplitMix64's finaliser: a bijection of 64-bit words whose outputs for
// consecutive inputs pass BigCrush; chained over the three counters.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

bool poisson_sampled(const PoissonSampling& s, int64_t step, int64_t index) {
  const uint64_t h = mix(mix(mix(s.seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  // The top 53 bits as a uniform double in [0, 1).
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return u < s.sample_rate;
}

std::vector<int64_t> poisson_batch(const PoissonSampling& s, int64_t step, int rank, int world_size) {
  COHORT_CHECK_AS(ConfigError, s.dataset_size > 0) << "dataset size must be positive, got " << s.dataset_size;
  COHORT_CHECK_AS(ConfigError, s.sample_rate > 0 && s.sample_rate <= 1)
      << "sample rate must be in (0, 1], got " << s.sample_rate;
  COHORT_CHECK_AS(ConfigError, world_size > 0 && rank >= 0 && rank < world_size)
      << "rank " << rank << " of " << world_size;
  COHORT_CHECK_AS(ConfigError, step >= 0) << "step must be non-negative, got " << step;
  std::vector<int64_t> batch;
  for (int64_t j = rank; j < s.dataset_size; j += world_size)
    if (poisson_sampled(s, step, j)) batch.push_back(j);
  return batch;
}

}  // namespace cohort::privacy
