// The engine's ops end to end, ranks as threads: results against float64
// references, submissions out of order and from several threads, fusion,
// the response cache (asserted on counters), every kind, ordered ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <random>

#include "cohort/common/check.h"
#include "cohort/engine/blocked_time.h"
#include "tests/comm/typed_buffer.h"
#include "tests/engine/engine_ranks.h"

namespace cohort::testing::engine_ops_test {
namespace {

using engine::Engine;
using engine::Handle;

struct OpCase {
  std::string name;
  DType dtype;
  ReduceOp op;
  size_t count;
};

// A mixed list of allreduces (sizes 0 to ~40k elements, every dtype and op).
std::vector<OpCase> mixed_cases(size_t n) {
  std::vector<OpCase> cases;
  const size_t sizes[] = {0, 1, 7, 64, 333, 1024, 4097, 9000, 40000};
  for (size_t i = 0; i < n; ++i) {
    const DType d = kAllDTypes[i % std::size(kAllDTypes)];
    const ReduceOp op = kAllReduceOps[(i / 3) % std::size(kAllReduceOps)];
    cases.push_back({"t" + std::to_string(i) + "/" + std::string(dtype_name(d)), d, op, sizes[(i * 7) % std::size(sizes)]});
  }
  return cases;
}

void check_result(const TypedBuffer& out, const OpCase& c, int n, int rank) {
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < c.count; ++i) {
    const double want = reference(n, i, c.dtype, c.op);
    if (std::abs(out.get(i) - want) > tolerance(c.dtype, want) && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0u) << c.name << " " << reduce_op_name(c.op) << " count " << c.count << " on rank " << rank
                       << ": first at " << first << " got " << (c.count ? out.get(first) : 0) << " want "
                       << (c.count ? reference(n, first, c.dtype, c.op) : 0);
}

class EngineWorld : public ::testing::TestWithParam<int> {};

// A thread's time blocked in wait() splits at the moment every rank had
// submitted the op: rank 0 waits while rank 1 sleeps before submitting, so
// at least the time from rank 0's wait to rank 1's submission is peer wait
// (causality, not a timing threshold); the two parts add up to the wait.
TEST(EngineBlockedTime, AWaitSplitsAtTheLastRanksSubmission) {
  std::atomic<int64_t> submitted_ns{0};
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    float x = 1;
    e.barrier_async("start").wait();
    const engine::BlockedTime before = engine::this_thread_blocked_time();
    if (info.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      submitted_ns = engine::detail::steady_now_ns();
      e.allreduce_async("late", BufferView{&x, 1, DType::f32}).wait();
      return;
    }
    Handle h = e.allreduce_async("late", BufferView{&x, 1, DType::f32});
    const int64_t wait_start = engine::detail::steady_now_ns();
    h.wait();
    const int64_t wait_end = engine::detail::steady_now_ns();
    const engine::BlockedTime after = engine::this_thread_blocked_time();
    const uint64_t peer = after.peer_wait_ns - before.peer_wait_ns;
    const uint64_t transfer = after.transfer_ns - before.transfer_ns;
    EXPECT_GE(int64_t(peer), submitted_ns.load() - wait_start);
    EXPECT_LE(int64_t(peer + transfer), wait_end - wait_start);
    EXPECT_EQ(x, 2.0f);
  });
  // A wait on an op already done blocks nothing and adds nothing.
  run_engine_ranks(2, [&](EngineRank&, Engine& e) {
    float x = 1;
    Handle h = e.allreduce_async("done", BufferView{&x, 1, DType::f32});
    while (!h.poll()) std::this_thread::yield();
    const engine::BlockedTime before = engine::this_thread_blocked_time();
    h.wait();
    const engine::BlockedTime after = engine::this_thread_blocked_time();
    EXPECT_EQ(after.peer_wait_ns, before.peer_wait_ns);
    EXPECT_EQ(after.transfer_ns, before.transfer_ns);
  });
}

TEST_P(EngineWorld, OutOfOrderSubmissionFromSeveralThreads) {
  const int n = GetParam();
  const auto cases = mixed_cases(48);
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    for (int step = 0; step < 3; ++step) {
      // Each rank submits in its own order, from three threads.
      std::vector<size_t> order(cases.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(unsigned(info.rank * 100 + step)));
      std::vector<TypedBuffer> in, out;
      for (const auto& c : cases) {
        in.emplace_back(c.dtype, c.count);
        out.emplace_back(c.dtype, c.count);
        for (size_t i = 0; i < c.count; ++i) in.back().set(i, pattern(info.rank, i, c.dtype, c.op));
      }
      std::vector<Handle> handles(cases.size());
      std::vector<std::thread> submitters;
      for (int t = 0; t < 3; ++t)
        submitters.emplace_back([&, t] {
          for (size_t k = size_t(t); k < order.size(); k += 3) {
            const size_t i = order[k];
            // Half in place, half out of place.
            if (i % 2)
              handles[i] = e.allreduce_async(cases[i].name, in[i].view(), out[i].view(), {.op = cases[i].op});
            else
              handles[i] = e.allreduce_async(cases[i].name, in[i].view(), {.op = cases[i].op});
          }
        });
      for (auto& t : submitters) t.join();
      for (size_t i = 0; i < cases.size(); ++i) {
        handles[i].wait();
        check_result(i % 2 ? out[i] : in[i], cases[i], n, info.rank);
      }
    }
    const auto s = e.stats();
    EXPECT_EQ(s.ops_completed, 3 * cases.size());
    EXPECT_EQ(s.ops_failed, 0u);
  });
}

TEST_P(EngineWorld, FusionWithMixedSizesAndDtypesIncludingLargerThanTheThreshold) {
  const int n = GetParam();
  auto options = engine_test_options();
  options.fusion_threshold_bytes = 64 * 1024;
  std::vector<OpCase> cases;
  for (size_t i = 0; i < 120; ++i) {
    constexpr DType kTypes[] = {DType::f32, DType::f64, DType::bf16, DType::i32};
    const DType d = kTypes[i % 4];
    const ReduceOp op = i % 5 == 0 ? ReduceOp::max : ReduceOp::sum;
    // Mostly small; every 10th larger than the 64 KiB threshold.
    const size_t count = i % 10 == 9 ? (80 * 1024) / dtype_size(d) + i : 1 + (i * 37) % 3000;
    cases.push_back({"f" + std::to_string(i), d, op, count});
  }
  std::atomic<int> rank0_submitted{-1};
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    for (int step = 0; step < 2; ++step) {
      std::vector<TypedBuffer> in, out;
      std::vector<Handle> handles;
      for (const auto& c : cases) {
        in.emplace_back(c.dtype, c.count);
        out.emplace_back(c.dtype, c.count);
        for (size_t i = 0; i < c.count; ++i) in.back().set(i, pattern(info.rank, i, c.dtype, c.op));
      }
      // Rank 0 submits everything first, so that the others' submissions
      // make many ops ready in the same cycles.
      if (info.rank != 0) {
        ASSERT_TRUE(eventually([&] { return rank0_submitted.load() >= step; }));
      }
      for (size_t i = 0; i < cases.size(); ++i)
        handles.push_back(e.allreduce_async(cases[i].name, in[i].view(), out[i].view(), {.op = cases[i].op}));
      if (info.rank == 0) rank0_submitted = step;
      for (size_t i = 0; i < cases.size(); ++i) {
        handles[i].wait();
        check_result(out[i], cases[i], n, info.rank);
      }
    }
    const auto s = e.stats();
    if (n > 1) {
      EXPECT_GT(s.fused_ops, 0u) << "small ops were never fused";
      EXPECT_GT(s.fusion_groups, 0u);
      EXPECT_LT(s.fusion_groups, s.fused_ops) << "a fusion group holds several ops";
    }
  }, options);
}

TEST_P(EngineWorld, CacheHitPathAfterTheFirstStep) {
  const int n = GetParam();
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    std::vector<float> bufs(20 * 16);
    auto step = [&] {
      std::vector<Handle> hs;
      for (int i = 0; i < 20; ++i)
        hs.push_back(e.allreduce_async("c" + std::to_string(i), BufferView{bufs.data() + 16 * i, 16, DType::f32}));
      for (auto& h : hs) h.wait();
    };
    std::fill(bufs.begin(), bufs.end(), 1.0f);
    step();
    const auto first = e.stats();
    EXPECT_EQ(first.cache_misses, 20u);
    EXPECT_EQ(first.cache_hits, 0u);
    EXPECT_GT(first.negotiations, 0u);
    for (int s = 0; s < 3; ++s) step();
    const auto later = e.stats();
    EXPECT_EQ(later.cache_misses, 20u) << "no name reported again";
    EXPECT_EQ(later.cache_hits, 60u);
    EXPECT_EQ(later.negotiations, first.negotiations) << "no payload exchanged once cached";
    for (float v : bufs) EXPECT_EQ(v, std::pow(float(n), 4.0f));
  });
}

TEST_P(EngineWorld, EveryKind) {
  const int n = GetParam();
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    const int r = info.rank;
    for (int step = 0; step < 2; ++step) {
      // Allgather with a different number of rows per rank (rows of 3).
      std::vector<int32_t> mine(size_t(3 * (r + 1)));
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = r * 1000 + int(i);
      Handle ag = e.allgather_async("ag", BufferView{mine.data(), mine.size(), DType::i32},
                                    {.row_elements = 3, .shape = {int64_t(r + 1), 3}});
      // The same into caller memory.
      std::vector<int32_t> into;
      Handle ag2 = e.allgather_async("ag2", BufferView{mine.data(), mine.size(), DType::i32},
                                     {.allocate = [&](size_t total, std::span<const size_t>) {
                                       into.resize(total);
                                       return BufferView{into.data(), total, DType::i32};
                                     }});
      // Broadcast from every root.
      std::vector<std::vector<double>> bc(static_cast<size_t>(n));
      std::vector<Handle> bh;
      for (int root = 0; root < n; ++root) {
        bc[size_t(root)].assign(5, r == root ? root + 0.5 : -1.0);
        bh.push_back(e.broadcast_async("bc" + std::to_string(root),
                                       BufferView{bc[size_t(root)].data(), 5, DType::f64}, root));
      }
      // Reduce-scatter: block b of rank r's input is r + b.
      const size_t block = 4;
      std::vector<float> rs_in(block * size_t(n)), rs_out(block);
      for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = float(r + int(i / block));
      Handle rs = e.reduce_scatter_async("rs", BufferView{rs_in.data(), rs_in.size(), DType::f32},
                                         BufferView{rs_out.data(), block, DType::f32});
      // Alltoall: rank r sends r*100 + p to rank p.
      std::vector<int64_t> a_in(2 * size_t(n)), a_out(2 * size_t(n));
      for (size_t i = 0; i < a_in.size(); ++i) a_in[i] = r * 100 + int64_t(i / 2);
      Handle at = e.alltoall_async("a2a", BufferView{a_in.data(), a_in.size(), DType::i64},
                                   BufferView{a_out.data(), a_out.size(), DType::i64});
      Handle bar = e.barrier_async();

      ag.wait();
      ASSERT_EQ(ag.counts().size(), size_t(n));
      size_t off = 0;
      const auto* got = static_cast<const int32_t*>(ag.output().data);
      for (int p = 0; p < n; ++p) {
        ASSERT_EQ(ag.counts()[size_t(p)], size_t(3 * (p + 1)));
        for (size_t i = 0; i < size_t(3 * (p + 1)); ++i) EXPECT_EQ(got[off + i], p * 1000 + int(i));
        off += size_t(3 * (p + 1));
      }
      ag2.wait();
      EXPECT_EQ(ag2.output().data, into.data());
      EXPECT_EQ(into.size(), off);
      EXPECT_TRUE(std::equal(into.begin(), into.end(), got));
      for (int root = 0; root < n; ++root) {
        bh[size_t(root)].wait();
        for (double v : bc[size_t(root)]) EXPECT_EQ(v, root + 0.5);
      }
      rs.wait();
      // Block r of the sum: sum over ranks q of (q + r).
      for (float v : rs_out) EXPECT_EQ(v, float(n * (n - 1) / 2 + n * r));
      at.wait();
      for (int p = 0; p < n; ++p)
        for (size_t k = 0; k < 2; ++k) EXPECT_EQ(a_out[size_t(p) * 2 + k], p * 100 + r);
      bar.wait();
    }
  });
}

TEST_P(EngineWorld, ScalesAndAverage) {
  const int n = GetParam();
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(100, float(info.rank + 1)), out(100);
    auto h = e.allreduce_async("scaled", BufferView{a.data(), a.size(), DType::f32},
                               BufferView{out.data(), out.size(), DType::f32},
                               {.op = ReduceOp::sum, .prescale = 2.0, .postscale = 0.25});
    std::vector<double> avg(7, double(info.rank));
    auto h2 = e.allreduce_async("avg", BufferView{avg.data(), avg.size(), DType::f64}, {.op = ReduceOp::avg});
    // A large one (bypasses fusion) with scales.
    std::vector<float> big(600000, 1.0f);
    auto h3 = e.allreduce_async("big", BufferView{big.data(), big.size(), DType::f32},
                                {.op = ReduceOp::avg, .postscale = 3.0});
    h.wait();
    h2.wait();
    h3.wait();
    EXPECT_FLOAT_EQ(out[0], 0.25f * 2.0f * float(n * (n + 1) / 2));
    EXPECT_EQ(a[0], float(info.rank + 1)) << "out of place leaves the input alone, prescale included";
    for (double v : avg) EXPECT_DOUBLE_EQ(v, double(n - 1) / 2.0);
    EXPECT_EQ(big[0], 3.0f);
    EXPECT_EQ(big.back(), 3.0f);
  });
}

TEST_P(EngineWorld, OrderedSubmissions) {
  const int n = GetParam();
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    // More ops than the ordered window, several kinds, two steps.
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<float>> bufs;
      std::vector<Handle> hs;
      for (int i = 0; i < 11; ++i) bufs.emplace_back(size_t(100 + i), float(info.rank + i));
      for (int i = 0; i < 11; ++i)
        hs.push_back(e.submit_ordered_allreduce(BufferView{bufs[size_t(i)].data(), bufs[size_t(i)].size(), DType::f32},
                                                BufferView{bufs[size_t(i)].data(), bufs[size_t(i)].size(), DType::f32}));
      std::vector<int> root_buf(3, info.rank);
      hs.push_back(e.submit_ordered_broadcast(BufferView{root_buf.data(), 3, DType::i32}, n - 1));
      std::vector<double> mine(size_t(info.rank), 1.0);
      Handle g = e.submit_ordered_allgather(BufferView{mine.data(), mine.size(), DType::f64});
      for (auto& h : hs) h.wait();
      g.wait();
      for (int i = 0; i < 11; ++i)
        for (float v : bufs[size_t(i)]) ASSERT_EQ(v, float(n * (n - 1) / 2 + n * i));
      for (int v : root_buf) EXPECT_EQ(v, n - 1);
      EXPECT_EQ(g.output().count, size_t(n * (n - 1) / 2));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, EngineWorld, ::testing::Values(1, 2, 3, 4));

// HandleState::on_done chains a second stage from the engine thread the
// moment the first completes: ranks wait for the second stages in opposite
// orders, which only works when no stage waits for its caller. Each stage
// doubles the previous sum, checked against the closed form; a callback
// registered on a finished op runs at once.
TEST_P(EngineWorld, OnDoneChainsTheNextStageOnTheEngineThread) {
  const int n = GetParam();
  run_engine_ranks(n, [&](EngineRank& info, Engine& e) {
    struct Chain {
      std::vector<double> first = std::vector<double>(4), second = std::vector<double>(4);
      std::shared_ptr<engine::HandleState> done;
    };
    std::vector<std::shared_ptr<Chain>> chains;
    for (int c = 0; c < 2; ++c) {
      auto chain = std::make_shared<Chain>();
      chain->done = std::make_shared<engine::HandleState>("chain");
      std::fill(chain->first.begin(), chain->first.end(), double(info.rank + 1 + c));
      const std::string name = "chain" + std::to_string(c);
      Handle first = e.allreduce_async(name + "/1", BufferView{chain->first.data(), 4, DType::f64});
      first.on_done([&e, first, chain, name] {
        if (first.error()) return chain->done->fail(first.error());
        for (size_t i = 0; i < 4; ++i) chain->second[i] = 2 * chain->first[i];
        Handle second = e.allreduce_async(name + "/2", BufferView{chain->second.data(), 4, DType::f64});
        second.on_done([second, chain] {
          if (second.error()) return chain->done->fail(second.error());
          chain->done->complete();
        });
      });
      chains.push_back(chain);
    }
    std::vector<int> order = {0, 1};
    if (info.rank % 2) std::reverse(order.begin(), order.end());
    for (int c : order) {
      Handle(chains[size_t(c)]->done).wait();
      // sum over ranks of 2 * sum over ranks of (r + 1 + c)
      const double want = 2.0 * n * (n * (n + 1) / 2.0 + n * c);
      for (double v : chains[size_t(c)]->second) COHORT_CHECK_EQ(v, want) << "chain " << c;
    }
    bool ran_now = false;
    Handle done(chains[0]->done);
    done.on_done([&] { ran_now = true; });
    COHORT_CHECK(ran_now) << "a callback on a finished op did not run at once";
  });
}

TEST(Engine, ArgumentErrorsThrowAtSubmission) {
  run_engine_ranks(2, [&](EngineRank& info, Engine& e) {
    std::vector<float> a(8), b(4);
    std::vector<int32_t> ints(8);
    BufferView va{a.data(), a.size(), DType::f32};
    EXPECT_THROW(e.allreduce_async("", va), Error);
    EXPECT_THROW(e.allreduce_async("x", va, BufferView{b.data(), b.size(), DType::f32}), Error);
    EXPECT_THROW(e.allreduce_async("x", BufferView{ints.data(), 8, DType::i32}, {.prescale = 2}), Error);
    EXPECT_THROW(e.allreduce_async("x", va, {.shape = {3, 3}}), Error);
    EXPECT_THROW(e.broadcast_async("x", va, 2), Error);
    EXPECT_THROW(e.reduce_scatter_async("x", va, BufferView{b.data(), 3, DType::f32}), Error);
    EXPECT_THROW(e.alltoall_async("x", va, va), Error);
    EXPECT_THROW(e.allgather_async("x", va, {.row_elements = 3}), Error);
    // A name may not be in flight twice on a rank.
    Handle h = e.allreduce_async("dup", va);
    try {
      e.allreduce_async("dup", va);
      ADD_FAILURE() << "second 'dup' accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("already in flight"), std::string::npos) << err.what();
    }
    h.wait();
    // Once completed, the name can be used again at once.
    e.allreduce_async("dup", va).wait();
  });
}

}  // namespace
}  // namespace cohort::testing::engine_ops_test
