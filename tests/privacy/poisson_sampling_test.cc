// Poisson sampling: the law the accountants assume (each example in with
// probability q, independently), and a global batch that does not depend on
// how many ranks share it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cohort/common/error.h"
#include "cohort/privacy/poisson_sampling.h"

namespace cohort::privacy::poisson_sampling_test {
namespace {

TEST(PoissonSampling, GlobalBatchIsTheSameAtEveryWorldSize) {
  const PoissonSampling s{.dataset_size = 5000, .sample_rate = 0.03, .seed = 7};
  for (int64_t step : {0, 1, 17, 123456}) {
    const std::vector<int64_t> alone = poisson_batch(s, step, 0, 1);
    for (int world : {2, 3, 4, 7}) {
      std::vector<int64_t> together;
      for (int rank = 0; rank < world; ++rank) {
        const auto part = poisson_batch(s, step, rank, world);
        for (int64_t j : part) EXPECT_EQ(j % world, rank);
        together.insert(together.end(), part.begin(), part.end());
      }
      std::sort(together.begin(), together.end());
      EXPECT_EQ(together, alone) << "step " << step << " world " << world;
    }
  }
}

// Sizes: the sum over 400 steps of Binomial(10000, 0.01) has mean 40000 and
// standard deviation 199; 6 deviations is a false-failure rate of 2e-9
// (and the seed is fixed, so the outcome is too).
TEST(PoissonSampling, BatchSizesFollowTheBinomialLaw) {
  const PoissonSampling s{.dataset_size = 10000, .sample_rate = 0.01, .seed = 11};
  int64_t total = 0, both = 0;
  for (int64_t step = 0; step < 400; ++step) total += static_cast<int64_t>(poisson_batch(s, step, 0, 1).size());
  EXPECT_NEAR(total, 40000, 6 * std::sqrt(4e6 * 0.01 * 0.99));
  // Pairs of steps are independent: in both of steps 2k and 2k+1 with q^2.
  const PoissonSampling wide{.dataset_size = 200000, .sample_rate = 0.1, .seed = 3};
  for (int64_t j = 0; j < wide.dataset_size; ++j) both += poisson_sampled(wide, 0, j) && poisson_sampled(wide, 1, j);
  EXPECT_NEAR(both, 2000, 6 * std::sqrt(2e5 * 0.01 * 0.99));
}

TEST(PoissonSampling, SeedsGiveDifferentBatchesAndRanksCanBeEmpty) {
  const PoissonSampling a{.dataset_size = 1000, .sample_rate = 0.1, .seed = 1}, b{1000, 0.1, 2};
  EXPECT_NE(poisson_batch(a, 0, 0, 1), poisson_batch(b, 0, 0, 1));
  const PoissonSampling tiny{.dataset_size = 12, .sample_rate = 0.05, .seed = 5};
  bool some_empty = false;
  for (int64_t step = 0; step < 50 && !some_empty; ++step) some_empty = poisson_batch(tiny, step, 1, 4).empty();
  EXPECT_TRUE(some_empty);
  EXPECT_EQ(poisson_batch({.dataset_size = 9, .sample_rate = 1.0, .seed = 0}, 3, 0, 1).size(), 9u);
}

TEST(PoissonSampling, BadArguments) {
  EXPECT_THROW(poisson_batch({.dataset_size = 0, .sample_rate = 0.1}, 0, 0, 1), ConfigError);
  EXPECT_THROW(poisson_batch({.dataset_size = 10, .sample_rate = 0}, 0, 0, 1), ConfigError);
  EXPECT_THROW(poisson_batch({.dataset_size = 10, .sample_rate = 0.1}, 0, 2, 2), ConfigError);
  EXPECT_THROW(poisson_batch({.dataset_size = 10, .sample_rate = 0.1}, -1, 0, 1), ConfigError);
}

}  // namespace
}  // namespace cohort::privacy::poisson_sampling_test
