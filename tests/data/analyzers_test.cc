// The full-pass analyzers merged across 1-4 ranks (threads with shm
// communicators) against float64 single-pass references: mean and variance
// (with an offset that breaks naive sums of squares), min/max, the exact
// vocabulary and its tie order, quantiles within the sketch's stated bound;
// and the transform artifact: what it computes, and that a loaded copy
// computes the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "cohort/data/mean_variance.h"
#include "cohort/data/min_max.h"
#include "cohort/data/quantile_sketch.h"
#include "cohort/data/transform.h"
#include "cohort/data/vocabulary.h"
#include "tests/comm/rank_threads.h"
#include "tests/engine/engine_ranks.h"
#include "tests/data/temp_dir.h"

namespace cohort::data::analyzers_test {
namespace {

using testing::error_of;

// Values with a large common offset: a sum of squares loses the variance.
std::vector<double> values(size_t n) {
  std::mt19937_64 gen(17);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> v(n);
  for (auto& x : v) x = 1e9 + normal(gen);
  return v;
}

// Two-pass float64 reference on the values less a constant near them (the
// subtraction is exact there), so the reference itself loses nothing to the
// offset.
std::pair<double, double> reference_mean_variance(const std::vector<double>& v) {
  const double offset = v[0];
  double mean = 0;
  for (double x : v) mean += x - offset;
  mean /= double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - offset - mean) * (x - offset - mean);
  return {offset + mean, ss / double(v.size())};
}

// Rank r of w takes the values at r, r + w, ... (uneven counts).
template <typename Fn>
void for_share(size_t n, int rank, int world, Fn&& fn) {
  for (size_t i = size_t(rank); i < n; i += size_t(world)) fn(i);
}

TEST(Analyzers, MeanVarianceAndMinMaxMatchTheFloat64Reference) {
  const auto v = values(10007);
  const auto [mean, variance] = reference_mean_variance(v);
  const double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  for (int world = 1; world <= 4; ++world) {
    std::vector<MeanVariance> mv(static_cast<size_t>(world));
    std::vector<MinMax> mm(static_cast<size_t>(world));
    ::cohort::testing::run_ranks(world, [&](int r, comm::Communicator& comm) {
      for_share(v.size(), r, world, [&](size_t i) {
        mv[size_t(r)].add(v[i]);
        mm[size_t(r)].add(v[i]);
      });
      mv[size_t(r)].merge_across(allgather_over(comm));
      mm[size_t(r)].merge_across(allgather_over(comm));
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(mv[size_t(r)].count(), double(v.size()));
      EXPECT_NEAR(mv[size_t(r)].mean(), mean, 4e-16 * mean) << world << " ranks";
      EXPECT_NEAR(mv[size_t(r)].variance(), variance, 1e-12 * variance) << world << " ranks";
      // Every rank holds the same bits.
      EXPECT_EQ(mv[size_t(r)].serialize(), mv[0].serialize());
      EXPECT_EQ(mm[size_t(r)].min(), lo);
      EXPECT_EQ(mm[size_t(r)].max(), hi);
    }
  }
}

TEST(Analyzers, MergeOverAnEngineEqualsMergeOverACommunicator) {
  const auto v = values(3001);
  std::vector<MeanVariance> by_engine(3), by_comm(3);
  std::vector<Vocabulary> vocab(3);
  ::cohort::testing::run_engine_ranks(3, [&](::cohort::testing::EngineRank& rank, engine::Engine& engine) {
    const int r = rank.rank;
    for_share(v.size(), r, 3, [&](size_t i) {
      by_engine[size_t(r)].add(v[i]);
      vocab[size_t(r)].add(std::to_string(i % 7));
    });
    by_engine[size_t(r)].merge_across(allgather_over(engine, "analyzers/mean_variance"));
    vocab[size_t(r)].merge_across(allgather_over(engine, "analyzers/vocabulary"));
  });
  ::cohort::testing::run_ranks(3, [&](int r, comm::Communicator& comm) {
    for_share(v.size(), r, 3, [&](size_t i) { by_comm[size_t(r)].add(v[i]); });
    by_comm[size_t(r)].merge_across(allgather_over(comm));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(by_engine[size_t(r)].serialize(), by_comm[0].serialize());
    EXPECT_EQ(vocab[size_t(r)].total(), v.size());
    EXPECT_EQ(vocab[size_t(r)].count("3"), 429u);  // i % 7 == 3 for i < 3001
  }
}

TEST(Analyzers, PerElementColumnsFromBatches) {
  // Batches [B, 3] of u8: column c's statistics are those of element c.
  std::vector<std::vector<double>> columns(3);
  MeanVariance mv(3);
  MinMax mm(3);
  for (int b = 0; b < 5; ++b) {
    std::vector<uint8_t> rows;
    for (int i = 0; i < 7; ++i)
      for (int c = 0; c < 3; ++c) {
        const uint8_t x = uint8_t((b * 7 + i) * (c + 3) % 251);
        rows.push_back(x);
        columns[size_t(c)].push_back(x);
      }
    const Feature f = Feature::of(rows, {7, 3});
    mv.add(f);
    mm.add(f);
  }
  for (size_t c = 0; c < 3; ++c) {
    const auto [mean, variance] = reference_mean_variance(columns[c]);
    EXPECT_NEAR(mv.mean(c), mean, 1e-12 * mean);
    EXPECT_NEAR(mv.variance(c), variance, 1e-10 * variance);
    EXPECT_EQ(mm.min(c), *std::min_element(columns[c].begin(), columns[c].end()));
    EXPECT_EQ(mm.max(c), *std::max_element(columns[c].begin(), columns[c].end()));
  }
  EXPECT_NE(error_of<ConfigError>([&] { MeanVariance(4).add(Feature::of(std::vector<float>{1, 2, 3})); })
                .find("does not split into rows of 4"),
            std::string::npos);
}

TEST(Analyzers, VocabularyCountsExactlyWithAStableTieOrder) {
  std::vector<std::string> tokens;
  std::mt19937 gen(5);
  for (int i = 0; i < 5000; ++i) tokens.push_back("w" + std::to_string(std::min<int>(gen() % 97, gen() % 97)));
  tokens.insert(tokens.end(), {"tie-b", "tie-a", "tie-b", "tie-a"});
  std::map<std::string, uint64_t> reference;
  for (const auto& t : tokens) ++reference[t];
  for (int world = 1; world <= 4; ++world) {
    std::vector<Vocabulary> vocab(static_cast<size_t>(world));
    ::cohort::testing::run_ranks(world, [&](int r, comm::Communicator& comm) {
      std::vector<std::string> mine;
      for_share(tokens.size(), r, world, [&](size_t i) { mine.push_back(tokens[i]); });
      vocab[size_t(r)].add(Feature::bytes(mine));
      vocab[size_t(r)].merge_across(allgather_over(comm));
    });
    for (int r = 0; r < world; ++r) {
      const Vocabulary& v = vocab[size_t(r)];
      EXPECT_EQ(v.total(), tokens.size());
      EXPECT_EQ(v.distinct(), reference.size());
      for (const auto& [t, c] : reference) ASSERT_EQ(v.count(t), c) << t;
      const auto top = v.top();
      for (size_t i = 1; i < top.size(); ++i)
        ASSERT_TRUE(top[i - 1].second > top[i].second ||
                    (top[i - 1].second == top[i].second && top[i - 1].first < top[i].first));
      EXPECT_EQ(v.top(5), std::vector(top.begin(), top.begin() + 5));
      EXPECT_EQ(v.top(), vocab[0].top());
    }
  }
}

TEST(Analyzers, QuantilesAreWithinTheStatedBound) {
  // Heavy ties (a rounded normal) and a long tail.
  std::mt19937_64 gen(9);
  std::normal_distribution<double> normal(0, 10);
  std::exponential_distribution<double> tail(0.01);
  std::vector<double> v(200003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 ? std::round(normal(gen)) : tail(gen);
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  const double n = double(v.size());
  for (int world : {1, 3, 4}) {
    std::vector<QuantileSketch> sketch(static_cast<size_t>(world), QuantileSketch(256));
    ::cohort::testing::run_ranks(world, [&](int r, comm::Communicator& comm) {
      for_share(v.size(), r, world, [&](size_t i) { sketch[size_t(r)].add(v[i]); });
      sketch[size_t(r)].merge_across(allgather_over(comm));
    });
    const QuantileSketch& s = sketch[0];
    EXPECT_EQ(s.count(), v.size());
    const double bound = double(s.rank_error_bound());
    // The a-priori bound, (n/k)(log2(n/k) + 1), with each rank's stream
    // and the merge counted: world + 1 such terms at most.
    const double k = 256;
    EXPECT_LE(bound, (world + 1) * (n / k) * (std::log2(n / k) + 1)) << world;
    EXPECT_GT(bound, 0);
    for (double q = 0; q <= 1.0; q += 0.01) {
      const double x = s.quantile(q);
      const double at_most = double(std::upper_bound(sorted.begin(), sorted.end(), x) - sorted.begin());
      const double below = double(std::lower_bound(sorted.begin(), sorted.end(), x) - sorted.begin());
      // x's true rank reaches q n - bound, and fewer than q n + bound values lie below it.
      EXPECT_GE(at_most, q * n - bound) << "q=" << q << " world=" << world;
      EXPECT_LT(below, q * n + bound + 1) << "q=" << q << " world=" << world;
    }
    for (double x : {-20.0, 0.0, 3.0, 150.0}) {
      const double truth = double(std::upper_bound(sorted.begin(), sorted.end(), x) - sorted.begin());
      EXPECT_LE(std::abs(double(s.rank(x)) - truth), bound) << x;
    }
    EXPECT_EQ(QuantileSketch::deserialize(s.serialize()).serialize(), s.serialize());
    EXPECT_EQ(sketch.back().serialize(), s.serialize());
  }
  QuantileSketch s(4);
  EXPECT_NE(error_of<ConfigError>([&] { s.add(std::nan("")); }).find("NaN"), std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] { QuantileSketch(3); }).find("even"), std::string::npos);
}

TEST(Transform, ComputesWhatItSaysAndALoadedCopyTheSameBits) {
  MeanVariance mv;
  for (double x : {10.0, 20.0, 30.0, 40.0}) mv.add(x);  // mean 25, sd sqrt(125)
  MinMax mm;
  mm.add(0);
  mm.add(200);
  Transform t;
  t.decode_raw("image", "pixels", DType::u8, {2, 2})
      .z_score("pixels", "z", mv)
      .scale_min_max("pixels", "unit", mm)
      .bucketize("pixels", "bucket", {15.0, 25.0, 35.0})
      .vocabulary("word", "word_id", {"the", "cat"})
      .reshape("z", {1, 2, 2});
  Sample raw;
  raw.features.set("image", Feature::bytes({std::string("\x0a\x14\x1e\x28", 4)}));  // 10 20 30 40
  raw.features.set("word", Feature::bytes({"cat", "dog", "the"}));
  Sample a = raw;
  t.apply(a);
  const auto z = a["z"].values<float>();
  EXPECT_EQ(a["z"].shape(), (std::vector<int64_t>{1, 2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(z[size_t(i)], float((10.0 * (i + 1) - 25.0) / std::sqrt(125.0)));
  EXPECT_EQ(a["unit"].values<float>()[3], float(40.0 / 200.0));
  EXPECT_EQ(std::vector<int64_t>(a["bucket"].values<int64_t>().begin(), a["bucket"].values<int64_t>().end()),
            (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(std::vector<int64_t>(a["word_id"].values<int64_t>().begin(), a["word_id"].values<int64_t>().end()),
            (std::vector<int64_t>{1, 2, 0}));

  testing::TempDir dir;
  t.save(dir.file("t.bin"));
  const Transform loaded = Transform::load(dir.file("t.bin"));
  EXPECT_EQ(loaded.describe(), t.describe());
  Sample b = raw;
  loaded.apply(b);
  EXPECT_EQ(b.features, a.features);

  // Errors name the step, the path.
  Sample missing;
  missing.features.set("other", Feature::scalar<int64_t>(1));
  EXPECT_NE(error_of<ConfigError>([&] { t.apply(missing); }).find("transform step 0 (decode_raw): sample has no feature \"image\""),
            std::string::npos);
  testing::spit(dir.file("junk.bin"), {1, 2, 3, 4});
  EXPECT_NE(error_of<ConfigError>([&] { Transform::load(dir.file("junk.bin")); }).find("is not a cohort transform"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] { Transform::load(dir.file("none.bin")); }).find("cannot open"), std::string::npos);
}

TEST(Transform, ScalarReshapeAndSlicesKeepTheStepsAndConstants) {
  MeanVariance mv;
  for (double x : {2.0, 4.0}) mv.add(x);  // mean 3, sd 1
  Transform t;
  t.decode_raw("image", "image", DType::u8, {2}).reshape("label", {}).z_score("image", "image", mv);
  Sample raw;
  raw.features.set("image", Feature::bytes({std::string("\x02\x05", 2)}));
  raw.features.set("label", Feature::of(std::vector<int64_t>{7}));  // int64 list of one, as an Example holds it
  Sample whole = raw;
  t.apply(whole);
  EXPECT_EQ(whole["label"].shape(), std::vector<int64_t>{});
  EXPECT_EQ(whole["label"].values<int64_t>()[0], 7);
  EXPECT_EQ(whole["image"].values<float>()[1], float((5.0 - 3.0) / 1.0));
  // Saved and loaded, a scalar reshape is still a reshape.
  testing::TempDir dir;
  t.save(dir.file("t.bin"));
  EXPECT_EQ(Transform::load(dir.file("t.bin")).describe(), t.describe());
  // The two slices, one after the other, do what the whole does.
  EXPECT_EQ(t.slice(0, 2).steps(), 2u);
  Sample parts = raw;
  t.slice(0, 2).apply(parts);
  EXPECT_EQ(parts["image"].dtype(), DType::u8);
  t.slice(2, 3).apply(parts);
  EXPECT_EQ(parts.features, whole.features);
  EXPECT_NE(error_of<ConfigError>([&] { t.slice(2, 4); }).find("slice(2, 4) of a transform of 3 steps"),
            std::string::npos);
}

}  // namespace
}  // namespace cohort::data::analyzers_test
