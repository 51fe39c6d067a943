// The cursor and the epoch plan: the exactly-once arithmetic without
// threads. For world sizes 1..5, batch sizes and data sets that do not
// divide, sharding by record and by file, in order and with out-of-order
// extras, a run interrupted any number of times and resumed at another world
// size delivers every position exactly once.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "cohort/common/error.h"
#include "cohort/data/epoch_order.h"
#include "cohort/data/epoch_plan.h"
#include "tests/data/temp_dir.h"

namespace cohort::data::cursor_test {
namespace {

using testing::error_of;

struct Data {
  std::vector<uint64_t> file_sizes;
  Sharding sharding;
};

std::vector<uint64_t> starts_of(const Data& d, const Cursor& c) {
  return EpochOrder(d.file_sizes, c.order, c.epoch).file_starts();
}

// Runs `steps` steps of a plan on `world` ranks; rank r delivers its batches
// in order, except that with `skip_first`, rank 0 holds back its first
// undelivered batch (as if it were slow) and takes later ones. Records every
// delivered position in `seen`. Returns the resulting cursor.
Cursor run_steps(const Data& d, const Cursor& from, int world, int64_t batch, int64_t steps, bool skip_first,
                 std::map<uint64_t, int>& seen) {
  const EpochPlan plan(from, starts_of(d, from), world, batch);
  std::vector<RankProgress> progress(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> delivered;
    for (int64_t s = 0; s < std::min(steps, plan.steps()); ++s) delivered.push_back(s);
    if (skip_first && r == 0 && steps < plan.steps() && steps > 0) delivered[0] = steps;  // 0 held back
    for (int64_t b : delivered)
      for (int64_t k = 0; k < plan.batch_items(r, b); ++k)
        ++seen[plan.position(r, uint64_t(b) * uint64_t(batch) + uint64_t(k))];
    RankProgress& p = progress[size_t(r)];
    std::sort(delivered.begin(), delivered.end());
    while (p.in_order < int64_t(delivered.size()) && delivered[size_t(p.in_order)] == p.in_order) ++p.in_order;
    p.extra.assign(delivered.begin() + p.in_order, delivered.end());
  }
  return plan.advance(progress);
}

TEST(EpochPlan, EveryPositionOnceAcrossWorldSizesAndResumes) {
  const std::vector<Data> datas = {
      {{103}, Sharding::by_record},
      {{10, 0, 31, 7, 1, 22, 5}, Sharding::by_file},
      {{1}, Sharding::by_record},
  };
  const std::vector<std::vector<int>> world_sequences = {{1}, {2}, {3}, {4}, {4, 2}, {1, 3, 2}, {3, 5, 1, 4}};
  for (const Data& d : datas)
    for (const auto& worlds : world_sequences)
      for (int64_t batch : {1, 4, 7})
        for (bool skip : {false, true}) {
          const uint64_t n = std::accumulate(d.file_sizes.begin(), d.file_sizes.end(), uint64_t(0));
          Cursor c = epoch_start(n, {.seed = 3, .shuffle = true, .sharding = d.sharding}, 2);
          std::map<uint64_t, int> seen;
          for (size_t i = 0; i < worlds.size(); ++i) {
            const bool last = i + 1 == worlds.size();
            const EpochPlan plan(c, starts_of(d, c), worlds[i], batch);
            // Ranks agree on the step count, and it covers each rank's items.
            for (int r = 0; r < worlds[i]; ++r) {
              int64_t items = 0;
              for (int64_t s = 0; s < plan.steps(); ++s) items += plan.batch_items(r, s);
              EXPECT_EQ(uint64_t(items), plan.count(r));
            }
            const int64_t steps = last ? plan.steps() : plan.steps() / 3 + 1;
            c = run_steps(d, c, worlds[i], batch, steps, skip && !last, seen);
            // A cursor survives its text form.
            EXPECT_EQ(Cursor::parse(c.to_string()), c);
          }
          const std::string where = "n=" + std::to_string(n) + " batch=" + std::to_string(batch) +
                                    " worlds=" + std::to_string(worlds.size()) + " skip=" + std::to_string(skip);
          EXPECT_TRUE(c.epoch_done()) << where << ": " << c.to_string();
          ASSERT_EQ(seen.size(), n) << where;
          for (const auto& [position, times] : seen) ASSERT_EQ(times, 1) << where << ": position " << position;
        }
}

TEST(EpochPlan, UnevenCountsDifferByAtMostOneByRecord) {
  const Cursor c = epoch_start(10, {}, 0);
  const EpochPlan plan(c, {0, 10}, 4, 2);
  EXPECT_EQ(plan.count(0), 3u);
  EXPECT_EQ(plan.count(1), 3u);
  EXPECT_EQ(plan.count(2), 2u);
  EXPECT_EQ(plan.count(3), 2u);
  EXPECT_EQ(plan.steps(), 2);
  EXPECT_EQ(plan.batch_items(0, 1), 1);
  EXPECT_EQ(plan.batch_items(3, 1), 0);  // an empty last batch, not a duplicate
}

TEST(EpochPlan, GlobalBatchesDoNotDependOnTheWorldSize) {
  // By record, batch b of W ranks with batch B together is batch b of one
  // rank with batch W*B.
  const Cursor c = epoch_start(50, {.seed = 1}, 0);
  const EpochPlan one(c, {0, 50}, 1, 12);
  const EpochPlan four(c, {0, 50}, 4, 3);
  ASSERT_EQ(one.steps(), four.steps());
  for (int64_t b = 0; b < one.steps(); ++b) {
    std::set<uint64_t> a, g;
    for (int64_t k = 0; k < one.batch_items(0, b); ++k) a.insert(one.position(0, uint64_t(b * 12 + k)));
    for (int r = 0; r < 4; ++r)
      for (int64_t k = 0; k < four.batch_items(r, b); ++k) g.insert(four.position(r, uint64_t(b * 3 + k)));
    EXPECT_EQ(a, g) << "batch " << b;
  }
}

TEST(Cursor, TextFormAndItsErrors) {
  Cursor c = epoch_start(100, {.seed = 77, .shuffle = false, .sharding = Sharding::by_file}, 4);
  c.consumed = 10;
  c.also_consumed = {{12, 15}, {40, 41}};
  EXPECT_EQ(c.to_string(),
            "cohort-data-cursor v1 size=100 seed=77 shuffle=0 sharding=file epoch=4 consumed=10 also=12-15,40-41");
  EXPECT_EQ(Cursor::parse(c.to_string()), c);
  EXPECT_EQ(c.delivered(), 14u);
  for (const char* bad : {"", "cohort-data-cursor v2 size=1 seed=0 shuffle=1 sharding=record epoch=0 consumed=0 also=",
                          "cohort-data-cursor v1 size=10 seed=0 shuffle=1 sharding=record epoch=0 consumed=11 also=",
                          "cohort-data-cursor v1 size=10 seed=0 shuffle=1 sharding=record epoch=0 consumed=2 also=2-3",
                          "cohort-data-cursor v1 size=10 seed=0 shuffle=2 sharding=record epoch=0 consumed=0 also=",
                          "cohort-data-cursor v1 size=10 seed=x shuffle=1 sharding=record epoch=0 consumed=0 also="})
    EXPECT_NE(error_of<ConfigError>([&] { Cursor::parse(bad); }), "no error") << bad;
}

TEST(Cursor, NormaliseRefusesAPositionDeliveredTwice) {
  uint64_t consumed = 5;
  std::vector<PositionRange> ranges = {{7, 9}, {4, 6}};
  EXPECT_NE(error_of<Error>([&] { normalise(consumed, ranges); }).find("delivered twice"), std::string::npos);
  consumed = 5;
  ranges = {{7, 9}, {5, 7}, {10, 12}};
  normalise(consumed, ranges);
  EXPECT_EQ(consumed, 9u);
  EXPECT_EQ(ranges, (std::vector<PositionRange>{{10, 12}}));
}

}  // namespace
}  // namespace cohort::data::cursor_test
