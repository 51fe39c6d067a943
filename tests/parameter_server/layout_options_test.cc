// Layout (sharding along dimension 0, placement balanced in bytes) and the
// parsing of `parameter_server:` spec keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cohort/common/error.h"
#include "cohort/parameter_server/layout.h"
#include "cohort/parameter_server/options.h"
#include "cohort/parameter_server/roles.h"

namespace cohort::ps::layout_options_test {
namespace {

TEST(Layout, DivShardingGivesTheFirstShardsTheExtraRows) {
  const auto r = split_rows(13, 5);
  std::vector<int64_t> sizes;
  for (auto [b, e] : r) sizes.push_back(e - b);
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 2, 2}));
  EXPECT_EQ(r.front().first, 0);
  EXPECT_EQ(r.back().second, 13);
}

TEST(Layout, ShardCountFollowsMinBytesOrFixedCount) {
  PartitionOptions o;
  o.min_shard_bytes = 1000;
  // 100 rows of 40 bytes = 4000 bytes: 4 shards of >= 1000 bytes, capped by
  // the number of partitions (3) unless max_shards says otherwise.
  EXPECT_EQ(shard_count(100, 40, o, 3), 3);
  o.max_shards = 8;
  EXPECT_EQ(shard_count(100, 40, o, 3), 4);
  EXPECT_EQ(shard_count(100, 4, o, 3), 1);  // 400 bytes: not split
  o.num_shards = 7;
  EXPECT_EQ(shard_count(100, 4, o, 3), 7);
  EXPECT_EQ(shard_count(5, 4, o, 3), 5);  // never more shards than rows
  EXPECT_EQ(shard_count(0, 4, o, 3), 1);
}

TEST(Layout, PlacementBalancesBytesAcrossPartitions) {
  std::vector<VariableSpec> vars = {
      {.name = "emb", .rows = 1000, .cols = 16},  {.name = "fc1", .rows = 256, .cols = 128},
      {.name = "fc2", .rows = 128, .cols = 64},   {.name = "b1", .rows = 128},
      {.name = "small", .rows = 3, .cols = 3, .dtype = DType::f64},
  };
  PartitionOptions o;
  o.min_shard_bytes = 4096;
  o.max_shards = 8;
  const Layout l = Layout::build(vars, 3, o);
  int64_t total = 0, most = 0, least = INT64_MAX;
  for (int p = 0; p < 3; ++p) {
    const int64_t b = l.partition_bytes(p);
    total += b;
    most = std::max(most, b);
    least = std::min(least, b);
  }
  int64_t expected_total = 0;
  for (const auto& v : vars) expected_total += v.bytes();
  EXPECT_EQ(total, expected_total);
  // Largest-first placement: the heaviest partition is within the largest
  // shard of the lightest.
  int64_t largest_shard = 0;
  for (uint32_t v = 0; v < vars.size(); ++v)
    for (const auto& s : l.shards(v)) largest_shard = std::max(largest_shard, s.rows() * vars[v].row_bytes());
  EXPECT_LE(most - least, largest_shard);
  // Shards tile their variable.
  for (uint32_t v = 0; v < vars.size(); ++v) {
    int64_t next = 0;
    for (const auto& s : l.shards(v)) {
      EXPECT_EQ(s.row_begin, next);
      next = s.row_end;
      for (int64_t r = s.row_begin; r < s.row_end; ++r) EXPECT_EQ(l.shard_of_row(v, r).index, s.index);
    }
    EXPECT_EQ(next, vars[v].rows);
  }
  // The same inputs give the same layout on every worker.
  const Layout again = Layout::build(vars, 3, o);
  for (uint32_t v = 0; v < vars.size(); ++v)
    for (size_t i = 0; i < l.shards(v).size(); ++i) EXPECT_EQ(l.shards(v)[i].partition, again.shards(v)[i].partition);
}

TEST(Layout, RejectsBadVariables) {
  EXPECT_THROW(Layout::build({{.name = "a", .rows = 2}, {.name = "a", .rows = 3}}, 1, {}), ConfigError);
  EXPECT_THROW(Layout::build({{.name = "", .rows = 2}}, 1, {}), ConfigError);
  EXPECT_THROW(Layout::build({{.name = "i", .rows = 2, .dtype = DType::i32}}, 1, {}), ConfigError);
  EXPECT_THROW(Layout::build({{.name = "c", .rows = 2, .cols = 0}}, 1, {}), ConfigError);
  EXPECT_THROW(Layout::build({}, 0, {}), ConfigError);
}

std::string error_of(const std::map<std::string, std::string>& keys, int size) {
  try {
    parse_job_options(keys, size);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Options, ParsesEveryKey) {
  const JobOptions o = parse_job_options({{"servers", "2"},
                                          {"staleness", "4"},
                                          {"optimizer", "adam"},
                                          {"lr", "0.5"},
                                          {"beta1", "0.8"},
                                          {"shards", "3"},
                                          {"replicas", "1"},
                                          {"replicate_every", "5"},
                                          {"checkpoint_dir", "/tmp/x"},
                                          {"hybrid", "1"}},
                                         5);
  EXPECT_EQ(o.servers, 2);
  EXPECT_EQ(o.staleness, 4);
  EXPECT_EQ(o.optimizer.rule, UpdateRule::adam);
  EXPECT_DOUBLE_EQ(o.optimizer.lr, 0.5);
  EXPECT_DOUBLE_EQ(o.optimizer.beta1, 0.8);
  EXPECT_EQ(o.partition.num_shards, 3);
  EXPECT_EQ(o.replicas, 1);
  EXPECT_EQ(o.replicate_every, 5);
  EXPECT_EQ(o.checkpoint_dir, "/tmp/x");
  EXPECT_TRUE(o.hybrid);
  EXPECT_EQ(parse_job_options({{"staleness", "async"}}, 2).staleness, kAsync);
  EXPECT_EQ(parse_job_options({}, 2).servers, 1);
}

TEST(Options, BadSpecsGiveOneLineErrors) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"servers", "2"}}, "servers=2 needs 1 <= servers < ranks (2 ranks)"},
      {{{"servers", "0"}}, "servers=0"},
      {{{"colour", "red"}}, "unknown key 'colour'"},
      {{{"staleness", "-3"}}, "staleness='-3'"},
      {{{"staleness", "soon"}}, "staleness='soon' is not an integer"},
      {{{"lr", "fast"}}, "lr='fast' is not a number"},
      {{{"optimizer", "lion"}}, "optimizer='lion' is not one of sgd, adam, adagrad, sum"},
      {{{"backup_workers", "1"}}, "backup_workers=1 needs 0 <= backup_workers < workers (1)"},
      {{{"replicas", "1"}}, "replicas=1 needs at least 2 servers"},
      {{{"hybrid", "maybe"}}, "hybrid='maybe' is not a boolean"},
  };
  for (const auto& [keys, expected] : cases) {
    const std::string e = error_of(keys, 2);
    EXPECT_NE(e.find(expected), std::string::npos) << "got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(error_of({{"backup_workers", "1"}, {"staleness", "2"}}, 4).find("synchronous training only"),
            std::string::npos);
  // The summation service: only in lock-step (found by the strategy's
  // backup_workers test, where the late worker's replica drifted).
  for (const auto& lagging : std::vector<std::map<std::string, std::string>>{
           {{"optimizer", "sum"}, {"backup_workers", "1"}},
           {{"optimizer", "sum"}, {"staleness", "4"}},
           {{"optimizer", "sum"}, {"staleness", "async"}}})
    EXPECT_NE(error_of(lagging, 4).find("optimizer=sum (the strategy's optimizer=program) needs staleness=0"),
              std::string::npos);
}

TEST(Roles, LastRanksServe) {
  const Role w0 = assign_role(0, 5, 2), w2 = assign_role(2, 5, 2), s0 = assign_role(3, 5, 2), s1 = assign_role(4, 5, 2);
  EXPECT_FALSE(w0.server);
  EXPECT_EQ(w0.index, 0);
  EXPECT_FALSE(w2.server);
  EXPECT_EQ(w2.index, 2);
  EXPECT_TRUE(s0.server);
  EXPECT_EQ(s0.index, 0);
  EXPECT_TRUE(s1.server);
  EXPECT_EQ(s1.index, 1);
  EXPECT_EQ(w0.num_workers, 3);
  EXPECT_THROW(assign_role(0, 2, 2), ConfigError);
}

}  // namespace
}  // namespace cohort::ps::layout_options_test

namespace cohort::ps::layout_options_test {
namespace {

TEST(Initializer, ValuesDependOnlyOnTheGlobalPositionAndRoundTripAsText) {
  for (Initializer init : {Initializer::uniform(-0.5, 0.25, 7), Initializer::normal(1.0, 2.0, 9)}) {
    const Initializer again = Initializer::decode(init.encode());
    EXPECT_EQ(again.kind, init.kind);
    EXPECT_EQ(again.a, init.a);
    EXPECT_EQ(again.b, init.b);
    EXPECT_EQ(again.seed, init.seed);
    std::vector<double> whole(10 * 3), parts(10 * 3);
    init.fill(DType::f64, 0, 10, 3, whole.data());
    init.fill(DType::f64, 0, 4, 3, parts.data());
    init.fill(DType::f64, 4, 10, 3, parts.data() + 12);
    EXPECT_EQ(whole, parts);
  }
  EXPECT_THROW(Initializer::decode("laplace:0:1:3"), Error);
}

TEST(Initializer, UniformAndNormalHaveTheirMoments) {
  const int64_t n = 200000;
  std::vector<double> u(n), g(n);
  Initializer::uniform(-1, 3, 1).fill(DType::f64, 0, n, 1, u.data());
  Initializer::normal(2, 0.5, 1).fill(DType::f64, 0, n, 1, g.data());
  double su = 0, sg = 0, sg2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(u[i] >= -1 && u[i] < 3);
    su += u[i];
    sg += g[i];
    sg2 += g[i] * g[i];
  }
  // Standard errors: uniform mean 4/sqrt(12 n) ~ 0.0026, normal mean 0.0011.
  EXPECT_NEAR(su / n, 1.0, 0.015);
  EXPECT_NEAR(sg / n, 2.0, 0.006);
  EXPECT_NEAR(std::sqrt(sg2 / n - (sg / n) * (sg / n)), 0.5, 0.006);
  std::vector<float> f(5);
  Initializer::uniform(-1, 3, 1).fill(DType::f32, 0, 5, 1, f.data());
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(f[i], static_cast<float>(u[i]));
}

}  // namespace
}  // namespace cohort::ps::layout_options_test
