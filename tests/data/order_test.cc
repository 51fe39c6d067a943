// The pieces an epoch's order is made of: the keyed index permutation (a
// bijection for every size, different per seed and epoch, and spread out),
// Philox4x32-10 against Random123's known-answer vectors, and SampleRng's
// draws (functions of their key alone, in range, unbiased in distribution).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "cohort/data/epoch_order.h"
#include "cohort/data/index_permutation.h"
#include "cohort/data/philox.h"

namespace cohort::data::order_test {
namespace {

TEST(IndexPermutation, IsABijectionForEverySize) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 255, 256, 257, 1000, 4097, 65536}) {
    const IndexPermutation perm(n, 42, 3);
    std::vector<bool> seen(n, false);
    for (uint64_t p = 0; p < n; ++p) {
      const uint64_t x = perm(p);
      ASSERT_LT(x, n) << "n=" << n;
      ASSERT_FALSE(seen[x]) << "n=" << n << ": " << x << " twice";
      seen[x] = true;
    }
  }
}

TEST(IndexPermutation, DependsOnSeedAndEpochOnly) {
  const uint64_t n = 1000;
  auto order = [&](uint64_t seed, int64_t epoch) {
    const IndexPermutation perm(n, seed, epoch);
    std::vector<uint64_t> v(n);
    for (uint64_t p = 0; p < n; ++p) v[p] = perm(p);
    return v;
  };
  EXPECT_EQ(order(1, 0), order(1, 0));
  EXPECT_NE(order(1, 0), order(1, 1));
  EXPECT_NE(order(1, 0), order(2, 0));
  std::vector<uint64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(order(1, 0), identity);
}

TEST(IndexPermutation, SpreadsEachPositionOverTheDomain) {
  // Over 4000 (seed, epoch) keys, where position 0 lands should be about
  // uniform over 10 values: a chi-square statistic with 9 degrees of
  // freedom far above its 99.9% point (27.9) would mean a bias. The keys
  // are fixed, so the outcome is too.
  const uint64_t n = 10;
  std::vector<int> hits(n, 0);
  for (uint64_t seed = 0; seed < 400; ++seed)
    for (int64_t epoch = 0; epoch < 10; ++epoch) ++hits[IndexPermutation(n, seed, epoch)(0)];
  double chi2 = 0;
  for (int h : hits) chi2 += (h - 400.0) * (h - 400.0) / 400.0;
  EXPECT_LT(chi2, 27.9);
}

TEST(EpochOrder, ByFileVisitsWholeFilesInAPermutedOrder) {
  const std::vector<uint64_t> sizes = {3, 0, 5, 2, 4};
  const EpochOrder order(sizes, {.seed = 9, .shuffle = true, .sharding = Sharding::by_file}, 1);
  const auto& starts = order.file_starts();
  ASSERT_EQ(starts.size(), sizes.size() + 1);
  EXPECT_EQ(starts.back(), 14u);
  std::multiset<uint64_t> all;
  for (size_t v = 0; v + 1 < starts.size(); ++v) {
    // Within a visited file the samples are consecutive source indices.
    for (uint64_t p = starts[v]; p + 1 < starts[v + 1]; ++p) EXPECT_EQ(order.sample_at(p + 1), order.sample_at(p) + 1);
    for (uint64_t p = starts[v]; p < starts[v + 1]; ++p) all.insert(order.sample_at(p));
  }
  EXPECT_EQ(all.size(), 14u);
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()).size(), 14u);
}

TEST(Philox, Random123KnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(SampleRng, IsAFunctionOfItsKey) {
  auto draws = [](uint64_t seed, int64_t epoch, uint64_t sample, uint32_t op) {
    SampleRng rng(seed, epoch, sample, op);
    std::vector<uint32_t> v(9);
    for (auto& x : v) x = rng.next_u32();
    return v;
  };
  EXPECT_EQ(draws(1, 2, 3, 0), draws(1, 2, 3, 0));
  for (auto other : {draws(2, 2, 3, 0), draws(1, 3, 3, 0), draws(1, 2, 4, 0), draws(1, 2, 3, 1),
                     draws(1, 2, uint64_t(3) << 32 | 3, 0)})
    EXPECT_NE(draws(1, 2, 3, 0), other);
}

TEST(SampleRng, DrawsAreInRangeAndUnbiased) {
  SampleRng rng(5, 0, 0, 0);
  std::vector<int> hits(6, 0);
  double sum = 0, sum_sq = 0;
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    const uint64_t d = rng.below(6);
    ASSERT_LT(d, 6u);
    ++hits[d];
    const double u = rng.uniform();
    ASSERT_TRUE(u >= 0 && u < 1);
    const int64_t b = rng.between(-2, 2);
    ASSERT_TRUE(b >= -2 && b <= 2);
    const double z = rng.normal();
    sum += z;
    sum_sq += z * z;
  }
  double chi2 = 0;
  for (int h : hits) chi2 += (h - 10000.0) * (h - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 20.5);  // 5 degrees of freedom, 99.9% point
  // Mean 0 and variance 1 within 5 standard errors.
  EXPECT_NEAR(sum / n, 0.0, 5.0 / std::sqrt(n));
  EXPECT_NEAR(sum_sq / n, 1.0, 5.0 * std::sqrt(2.0 / n));
}

}  // namespace
}  // namespace cohort::data::order_test
