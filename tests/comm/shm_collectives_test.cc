// Every collective of the shm communicator, ranks as threads, checked
// against float64 references computed independently of the communicator.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/comm/rank_threads.h"
#include "tests/comm/typed_buffer.h"

namespace cohort::testing {
namespace {

// Sizes from the issue: 0, 1, odd, just over a page, and a few MiB (larger
// than the staging slots, so chunking and pipelining run).
std::vector<size_t> counts_for(DType dtype) {
  return {0, 1, 7, 4097, (size_t(3) << 20) / dtype_size(dtype) + 3};
}

class WorldSize : public ::testing::TestWithParam<int> {};

std::string describe(DType d, ReduceOp op, size_t count, bool in_place) {
  return std::string(dtype_name(d)) + " " + std::string(reduce_op_name(op)) + " count " +
         std::to_string(count) + (in_place ? " in place" : " out of place");
}

TEST_P(WorldSize, AllreduceEveryDtypeOpAndSize) {
  const int n = GetParam();
  std::vector<std::vector<std::byte>> results(n);
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (DType d : kAllDTypes)
      for (ReduceOp op : kAllReduceOps)
        for (size_t count : counts_for(d)) {
          const bool in_place = (int(d) + int(op)) % 2 == 0;
          TypedBuffer send(d, count), recv(d, count);
          for (size_t i = 0; i < count; ++i) send.set(i, pattern(r, i, d, op));
          if (in_place)
            c.allreduce(send.view(), {.op = op});
          TypedBuffer& out = in_place ? send : recv;
          if (!in_place) c.allreduce(send.view(), recv.view(), {.op = op});
          size_t wrong = 0, first = 0;
          for (size_t i = 0; i < count; ++i) {
            const double want = reference(n, i, d, op);
            if (std::abs(out.get(i) - want) > tolerance(d, want) && wrong++ == 0) first = i;
          }
          ASSERT_EQ(wrong, 0u) << describe(d, op, count, in_place) << " on rank " << r << ": first at " << first
                               << " got " << out.get(first) << " want " << reference(n, first, d, op);
          // Every rank must hold the same bits (DDP relies on it).
          if (count == 4097 && op == ReduceOp::avg) {
            const std::byte* p = static_cast<const std::byte*>(out.view().data);
            results[r].assign(p, p + out.view().bytes());
            c.barrier();
            ASSERT_EQ(results[r], results[0]) << describe(d, op, count, in_place) << " rank " << r;
            c.barrier();
          }
        }
  });
}

TEST_P(WorldSize, Broadcast) {
  const int n = GetParam();
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (DType d : kAllDTypes)
      for (size_t count : counts_for(d)) {
        if (d != DType::f32 && d != DType::u8 && count > 5000) continue;  // bytes are bytes
        for (int root = 0; root < n; ++root) {
          TypedBuffer b(d, count);
          for (size_t i = 0; i < count; ++i) b.set(i, r == root ? pattern(root, i, d, ReduceOp::sum) : 99);
          c.broadcast(b.view(), root);
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(b.get(i), pattern(root, i, d, ReduceOp::sum)) << dtype_name(d) << " root " << root << " i " << i;
        }
      }
  });
}

TEST_P(WorldSize, AllgatherAndAllgatherv) {
  const int n = GetParam();
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (DType d : {DType::f32, DType::bf16, DType::i64, DType::u8})
      for (size_t count : counts_for(d)) {
        TypedBuffer send(d, count), recv(d, count * n);
        for (size_t i = 0; i < count; ++i) send.set(i, pattern(r, i, d, ReduceOp::sum));
        c.allgather(send.view(), recv.view());
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(recv.get(p * count + i), pattern(p, i, d, ReduceOp::sum)) << dtype_name(d) << " from " << p;
        // In place: send is this rank's block of recv.
        TypedBuffer all(d, count * n);
        for (size_t i = 0; i < count; ++i) all.set(r * count + i, pattern(r, i, d, ReduceOp::sum));
        c.allgather(all.view().slice(r * count, count), all.view());
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(all.get(p * count + i), pattern(p, i, d, ReduceOp::sum));
      }
    // Uneven counts, including empty ranks and one larger than a slot.
    std::vector<size_t> counts(n);
    for (int p = 0; p < n; ++p) counts[p] = p % 3 == 1 ? 0 : (p == 2 ? 300001 : 5 + p);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
    TypedBuffer send(DType::f32, counts[r]), recv(DType::f32, total);
    for (size_t i = 0; i < counts[r]; ++i) send.set(i, pattern(r, i, DType::f32, ReduceOp::sum));
    c.allgatherv(send.view(), recv.view(), counts);
    size_t off = 0;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < counts[p]; ++i, ++off) ASSERT_EQ(recv.get(off), pattern(p, i, DType::f32, ReduceOp::sum));
  });
}

TEST_P(WorldSize, ReduceScatterEveryDtypeAndOp) {
  const int n = GetParam();
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (DType d : kAllDTypes)
      for (ReduceOp op : kAllReduceOps)
        for (size_t block : {size_t(0), size_t(1), size_t(7), size_t(4097), size_t(300007)}) {
          if (block > 5000 && op != ReduceOp::sum && op != ReduceOp::max) continue;
          TypedBuffer send(d, block * n), recv(d, block);
          for (size_t i = 0; i < block * n; ++i) send.set(i, pattern(r, i, d, op));
          c.reduce_scatter(send.view(), recv.view(), {.op = op});
          for (size_t i = 0; i < block; ++i) {
            const double want = reference(n, r * block + i, d, op);
            ASSERT_NEAR(recv.get(i), want, tolerance(d, want)) << describe(d, op, block, false) << " i " << i;
          }
        }
  });
}

double code(int from, int to, size_t i) { return double((from * 8 + to) % 61) + double(i % 13) * 61; }

TEST_P(WorldSize, AlltoallAndAlltoallv) {
  const int n = GetParam();
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (size_t block : {size_t(0), size_t(1), size_t(7), size_t(4097), size_t(200003)}) {
      TypedBuffer send(DType::f32, block * n), recv(DType::f32, block * n);
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < block; ++i) send.set(p * block + i, code(r, p, i));
      c.alltoall(send.view(), recv.view());
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < block; ++i) ASSERT_EQ(recv.get(p * block + i), code(p, r, i)) << "from " << p;
    }
    // Rank a sends (a + 2b) % 5 elements to rank b, one pair far larger.
    auto len = [&](int a, int b) -> size_t { return a == 0 && b == n - 1 ? 150001 : size_t((a + 2 * b) % 5); };
    std::vector<size_t> sc(n), rc(n);
    for (int p = 0; p < n; ++p) sc[p] = len(r, p), rc[p] = len(p, r);
    TypedBuffer send(DType::i32, std::accumulate(sc.begin(), sc.end(), size_t(0)));
    TypedBuffer recv(DType::i32, std::accumulate(rc.begin(), rc.end(), size_t(0)));
    for (size_t p = 0, off = 0; p < size_t(n); ++p)
      for (size_t i = 0; i < sc[p]; ++i) send.set(off++, code(r, int(p), i));
    c.alltoallv(send.view(), sc, recv.view(), rc);
    for (size_t p = 0, off = 0; p < size_t(n); ++p)
      for (size_t i = 0; i < rc[p]; ++i) ASSERT_EQ(recv.get(off++), code(int(p), r, i)) << "from " << p;
  });
}

TEST_P(WorldSize, GatherAndScatter) {
  const int n = GetParam();
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (size_t count : {size_t(0), size_t(1), size_t(4097), size_t(200003)})
      for (int root = 0; root < n; ++root) {
        TypedBuffer send(DType::f64, count), recv(DType::f64, r == root ? count * n : 0);
        for (size_t i = 0; i < count; ++i) send.set(i, code(r, root, i));
        c.gather(send.view(), recv.view(), root);
        if (r == root) {
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv.get(p * count + i), code(p, root, i));
        }

        TypedBuffer blocks(DType::f64, r == root ? count * n : 0), mine(DType::f64, count);
        if (r == root) {
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) blocks.set(p * count + i, code(root, p, i));
        }
        c.scatter(blocks.view(), mine.view(), root);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(mine.get(i), code(root, r, i)) << "root " << root;
      }
  });
}

TEST_P(WorldSize, BarrierOrdersWrites) {
  const int n = GetParam();
  std::vector<std::atomic<int>> arrived(20);
  run_ranks(n, [&](int r, comm::Communicator& c) {
    for (int round = 0; round < 20; ++round) {
      arrived[round].fetch_add(1);
      c.barrier();
      ASSERT_EQ(arrived[round].load(), n) << "round " << round;
    }
  });
}

TEST_P(WorldSize, SendRecvRingWithTagsAndLargeMessages) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "point to point needs two ranks";
  run_ranks(n, [&](int r, comm::Communicator& c) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (size_t count : {size_t(0), size_t(1), size_t(4097), size_t(1) << 20}) {
      for (uint32_t tag = 0; tag < 3; ++tag) {
        TypedBuffer out(DType::f32, count), in(DType::f32, count);
        for (size_t i = 0; i < count; ++i) out.set(i, code(r, int(tag), i));
        // Odd ranks receive first so that large (blocking) sends cannot deadlock.
        if (r % 2 == 0) {
          c.send(out.view(), next, tag);
          c.recv(in.view(), prev, tag);
        } else {
          c.recv(in.view(), prev, tag);
          c.send(out.view(), next, tag);
        }
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(in.get(i), code(prev, int(tag), i));
      }
    }
  });
}

TEST_P(WorldSize, SplitIntoOrderedSubgroups) {
  const int n = GetParam();
  run_ranks(n, [&](int r, comm::Communicator& c) {
    // Two colours; keys reverse the order inside each.
    auto sub = c.split(r % 2, -r);
    ASSERT_NE(sub, nullptr);
    std::vector<int> members;
    for (int p = 0; p < n; ++p)
      if (p % 2 == r % 2) members.push_back(p);
    std::reverse(members.begin(), members.end());
    ASSERT_EQ(sub->size(), int(members.size()));
    ASSERT_EQ(members[sub->rank()], r);
    int64_t mine = r, sum = 0;
    sub->allreduce(BufferView{&mine, 1, DType::i64}, BufferView{&sum, 1, DType::i64});
    ASSERT_EQ(sum, std::accumulate(members.begin(), members.end(), int64_t(0)));
    // Sub-groups are independent: the parent still works, and a negative
    // colour opts out.
    auto none = c.split(r == 0 ? -1 : 0, 0);
    ASSERT_EQ(none == nullptr, r == 0);
    if (none) {
      int64_t one = 1, count = 0;
      none->allreduce(BufferView{&one, 1, DType::i64}, BufferView{&count, 1, DType::i64});
      ASSERT_EQ(count, n - 1);
    }
    c.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, WorldSize, ::testing::Range(1, 9),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(ShmSegment, DoesNotGrowWithTheMessage) {
  // 64 MiB through a segment of about a MiB, with a small slot so that many
  // chunks pipeline; the segment size is fixed at creation.
  run_ranks(2, [&](int r, comm::Communicator& c) {
    auto& shm = dynamic_cast<comm::shm::Communicator&>(c);
    const size_t before = shm.segment_bytes();
    const size_t count = size_t(16) << 20;
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = float(i % 1000) + r;
    c.allreduce(view_of(std::span(v)));
    for (size_t i = 0; i < count; i += 9973) ASSERT_EQ(v[i], 2 * float(i % 1000) + 1);
    ASSERT_EQ(shm.segment_bytes(), before);
    ASSERT_LT(before, count * sizeof(float) / 16);
  }, [](comm::shm::Options& o) { o.slot_bytes = 64 * 1024; });
}

TEST(ShmSegment, AllreduceBeyondFourGigaElementsOfBytes) {
  // More than 2^32 bytes in one call, in place, at 2 ranks: 64-bit offsets
  // everywhere. u8 sums of (i & 63) + r stay below 256.
  const size_t count = (size_t(1) << 32) + 4099;
  run_ranks(2, [&](int r, comm::Communicator& c) {
    std::vector<uint8_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = uint8_t((i & 63) + r);
    c.allreduce(view_of(std::span(v)));
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += v[i] != uint8_t(2 * (i & 63) + 1);
    ASSERT_EQ(wrong, 0u);
  });
}

}  // namespace
}  // namespace cohort::testing
