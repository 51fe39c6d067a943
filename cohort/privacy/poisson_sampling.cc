#include "cohort/privacy/poisson_sampling.h"

#include "cohort/common/check.h"
#include "cohort/privacy/counter_hash.h"

namespace cohort::privacy {

bool poisson_sampled(const PoissonSampling& s, int64_t step, int64_t index) {
  return unit_interval(counter_hash(s.seed, static_cast<uint64_t>(step), static_cast<uint64_t>(index))) <
         s.sample_rate;
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
