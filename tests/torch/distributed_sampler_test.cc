// DistributedSampler: coverage across ranks, padding and dropping, per-epoch
// reshuffles, determinism, and the equivalence of n ranks' batches with one
// rank's n-times-larger batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "cohort/common/error.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::distributed_sampler_test {
namespace {

using cohort::DistributedSampler;
using cohort::DistributedSamplerOptions;

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
  const auto p = cohort::permutation(10, 42, 0);
  EXPECT_EQ(p, cohort::permutation(10, 42, 0));
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

// A dataset whose example i is i, so a loader's batches show which indices
// the sampler gave it.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset, size_t> {
  explicit IndexDataset(size_t n) : n(n) {}
  size_t get(size_t index) override { return index; }
  torch::optional<size_t> size() const override { return n; }
  size_t n;
};

TEST(DistributedSampler, TorchDataLoaderReadsEachRanksShardEpochAfterEpoch) {
  const size_t n = 103, batch = 8;
  for (const int ranks : {1, 3, 4}) {
    std::vector<std::vector<std::vector<size_t>>> seen(static_cast<size_t>(ranks));  // [rank][epoch] -> indices
    run_torch_ranks(ranks, [&](int rank, int size) {
      // Rank and size come from the thread's engine.
      DistributedSampler sampler({.dataset_size = n, .seed = 11});
      EXPECT_EQ(sampler.options().rank, rank);
      EXPECT_EQ(sampler.options().num_replicas, size);
      auto loader = torch::data::make_data_loader(IndexDataset(n), sampler,
                                                  torch::data::DataLoaderOptions(batch).workers(0));
      for (int epoch = 0; epoch < 3; ++epoch) {
        std::vector<size_t> got;
        for (const std::vector<size_t>& b : *loader) {
          EXPECT_LE(b.size(), batch);
          got.insert(got.end(), b.begin(), b.end());
        }
        seen[size_t(rank)].push_back(got);
      }
    });
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::multiset<size_t> all;
      for (int r = 0; r < ranks; ++r) {
        DistributedSampler reference({.dataset_size = n, .num_replicas = ranks, .rank = r, .seed = 11});
        reference.set_epoch(epoch);
        EXPECT_EQ(seen[size_t(r)][size_t(epoch)], reference.indices()) << "rank " << r << " epoch " << epoch;
        all.insert(seen[size_t(r)][size_t(epoch)].begin(), seen[size_t(r)][size_t(epoch)].end());
      }
      for (size_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << "index " << i << " epoch " << epoch;
    }
  }
}

TEST(DistributedSampler, IndexTensorSelectsTheShard) {
  DistributedSampler sampler({.dataset_size = 50, .num_replicas = 4, .rank = 1, .seed = 3});
  sampler.set_epoch(2);
  const at::Tensor rows = torch::arange(50, torch::kInt64) * 10;
  const at::Tensor picked = rows.index_select(0, sampler.index_tensor());
  const std::vector<size_t> expected = sampler.indices();
  ASSERT_EQ(size_t(picked.numel()), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(picked[int64_t(i)].item<int64_t>(), int64_t(expected[i]) * 10);
}

TEST(DistributedSampler, SavedMidEpochResumesAtTheSameIndex) {
  DistributedSampler a({.dataset_size = 40, .num_replicas = 2, .rank = 1, .seed = 9});
  a.set_epoch(5);
  a.reset();
  std::vector<size_t> first;
  for (int i = 0; i < 2; ++i) {
    const auto b = a.next(3);
    first.insert(first.end(), b->begin(), b->end());
  }
  torch::serialize::OutputArchive out;
  a.save(out);
  std::stringstream bytes;
  out.save_to(bytes);

  DistributedSampler b({.dataset_size = 40, .num_replicas = 2, .rank = 1, .seed = 9});
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  b.load(in);
  EXPECT_EQ(b.epoch(), 5);
  std::vector<size_t> rest;
  while (auto batch = b.next(3)) rest.insert(rest.end(), batch->begin(), batch->end());
  first.insert(first.end(), rest.begin(), rest.end());
  a.set_epoch(5);
  EXPECT_EQ(first, a.indices()) << "the resumed sampler continues where the saved one stopped";
}

TEST(DistributedSampler, WithoutAnEngineTheDefaultsAreAnError) {
  EXPECT_THROW(DistributedSampler({.dataset_size = 4}), ConfigError);
}

}  // namespace
}  // namespace cohort::testing::distributed_sampler_test
