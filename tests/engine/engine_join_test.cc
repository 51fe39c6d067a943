// join(): ranks with fewer steps join early; the others' ops complete as if
// the joined ranks contributed the identity of each op.
#include <gtest/gtest.h>

#include <limits>

#include "tests/engine/engine_ranks.h"

namespace cohort::testing::engine_join_test {
namespace {

using engine::Engine;
using engine::Handle;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(EngineJoin, UnevenStepCountsGiveTheSumsOfTheRanksStillActive) {
  const int n = 4;
  // Rank r runs 2 + r steps; at step s the active ranks are those with r > s - 2.
  std::vector<int> last(n, -1);
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    const int r = info.rank;
    const int steps = 2 + r;
    for (int s = 0; s < steps; ++s) {
      std::vector<double> sum(10, double(r + 1)), avg(10, double(r + 1));
      std::vector<float> mn(3, float(r + 10)), mx(3, float(-r - 10));
      std::vector<int32_t> prod(3, 2);
      Handle h1 = e.allreduce_async("sum", BufferView{sum.data(), sum.size(), DType::f64});
      Handle h2 = e.allreduce_async("avg", BufferView{avg.data(), avg.size(), DType::f64}, {.op = ReduceOp::avg});
      Handle h3 = e.allreduce_async("min", BufferView{mn.data(), 3, DType::f32}, {.op = ReduceOp::min});
      Handle h4 = e.allreduce_async("max", BufferView{mx.data(), 3, DType::f32}, {.op = ReduceOp::max});
      Handle h5 = e.allreduce_async("prod", BufferView{prod.data(), 3, DType::i32}, {.op = ReduceOp::product});
      h1.wait(), h2.wait(), h3.wait(), h4.wait(), h5.wait();
      // Active at step s: ranks q with 2 + q > s, i.e. q >= max(0, s - 1).
      const int lo = std::max(0, s - 1);
      double want = 0;
      int active = 0;
      for (int q = lo; q < n; ++q) want += q + 1, ++active;
      for (double v : sum) ASSERT_EQ(v, want) << "rank " << r << " step " << s;
      for (double v : avg) ASSERT_DOUBLE_EQ(v, want / active) << "rank " << r << " step " << s;
      for (float v : mn) ASSERT_EQ(v, float(lo + 10));
      for (float v : mx) ASSERT_EQ(v, float(-lo - 10));
      for (int32_t v : prod) ASSERT_EQ(v, 1 << active);
    }
    last[size_t(r)] = e.join();
    // After everyone joined, the engine runs normally again.
    std::vector<float> a(2, 1.0f);
    e.allreduce_async("after", BufferView{a.data(), 2, DType::f32}).wait();
    EXPECT_EQ(a[0], float(n));
  });
  for (int v : last) EXPECT_EQ(v, n - 1) << "the rank with the most steps joins last";
}

TEST(EngineJoin, AllgatherGetsNoRowsAndBroadcastFromAJoinedRootFails) {
  std::vector<int> last(3, -1);
  run_engine_ranks(3, [&](EngineRank& info, Engine& e) {
    const int r = info.rank;
    if (r == 2) {
      last[2] = e.join();
      return;
    }
    // Wait until rank 2 is inside join: a cached op then runs with 2 contributors.
    std::vector<float> probe(1, 1.0f);
    ASSERT_TRUE(eventually([&] {
      probe[0] = 1.0f;
      e.allreduce_async("probe", BufferView{probe.data(), 1, DType::f32}).wait();
      return probe[0] == 2.0f;
    }));
    std::vector<int64_t> rows(size_t(2 * (r + 1)), r);
    Handle g = e.allgather_async("g", BufferView{rows.data(), rows.size(), DType::i64}, {.row_elements = 2});
    std::vector<float> b(3, float(r));
    Handle bad = e.broadcast_async("from2", BufferView{b.data(), 3, DType::f32}, 2);
    Handle good = e.broadcast_async("from1", BufferView{b.data(), 3, DType::f32}, 1);
    g.wait();
    EXPECT_EQ(std::vector<size_t>(g.counts().begin(), g.counts().end()), (std::vector<size_t>{2, 4, 0}));
    EXPECT_TRUE(contains(error_of(bad), "root rank 2 is inside join()")) << error_of(bad);
    good.wait();
    EXPECT_EQ(b[0], 1.0f);
    last[size_t(r)] = e.join();
  });
  // Ranks 0 and 1 join after rank 2, in either order (or together: then 1).
  EXPECT_TRUE(last[0] == 0 || last[0] == 1) << last[0];
  EXPECT_EQ(last[1], last[0]);
  EXPECT_EQ(last[2], last[0]);
}

TEST(EngineJoin, SubmittingWhileJoinedIsRefused) {
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(1);
    if (info.rank == 0) {
      Handle j = e.join_async();
      EXPECT_THROW(e.allreduce_async("x", BufferView{a.data(), 1, DType::f32}), Error);
      j.wait();
      EXPECT_EQ(j.last_joined_rank(), 1);
    } else {
      e.allreduce_async("y", BufferView{a.data(), 1, DType::f32}).wait();
      EXPECT_EQ(e.join(), 1);
    }
  });
}

}  // namespace
}  // namespace cohort::testing::engine_join_test
