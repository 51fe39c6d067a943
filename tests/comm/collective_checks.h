// Collective checks shared by the backends' tests: every operation of the
// Communicator contract against float64 references computed independently
// of the communicator (typed_buffer.h), written once and run by any harness
// that hands each rank its communicator (ranks as threads, or processes
// under mpirun). Nothing here shares memory between ranks: agreement across
// ranks is checked through the communicator itself (allgather of results,
// clock readings), so the same code runs in threads and in processes.
//
// Every check is collective: all ranks call it with the same sizes. gtest
// assertions report the failing rank; a rank that returns early makes its
// peers fail too (the harness must cope, as every backend raises an error).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/communicator.h"
#include "tests/comm/typed_buffer.h"

namespace cohort::testing::checks {

// Element counts for the sweeps: `small` run for every dtype and op; `large`
// (beyond a backend's eager, chunk and algorithm thresholds) for a few.
struct Sizes {
  std::vector<size_t> small = {0, 1, 7, 4097};
  size_t large = 300007;
};

inline std::string describe(DType d, ReduceOp op, size_t count, bool in_place) {
  return std::string(dtype_name(d)) + " " + std::string(reduce_op_name(op)) + " count " + std::to_string(count) +
         (in_place ? " in place" : " out of place");
}

inline double code(int from, int to, size_t i) { return double((from * 8 + to) % 61) + double(i % 13) * 61; }

// Every rank must hold the same bits (DDP relies on it): compares this
// rank's buffer with everyone's through an allgather.
inline void expect_same_bits_everywhere(comm::Communicator& c, BufferView v, const std::string& what) {
  const size_t bytes = v.bytes();
  std::vector<uint8_t> all(bytes * size_t(c.size()));
  c.allgather(BufferView{v.data, bytes, DType::u8}, BufferView{all.data(), all.size(), DType::u8});
  for (int p = 1; p < c.size(); ++p)
    EXPECT_EQ(std::memcmp(all.data(), all.data() + bytes * size_t(p), bytes), 0)
        << what << ": rank " << p << " holds other bits than rank 0";
}

inline void allreduce_one(comm::Communicator& c, DType d, ReduceOp op, size_t count, bool in_place,
                          bool same_bits = false) {
  const int n = c.size(), r = c.rank();
  TypedBuffer send(d, count), recv(d, count);
  for (size_t i = 0; i < count; ++i) send.set(i, pattern(r, i, d, op));
  if (in_place)
    c.allreduce(send.view(), {.op = op});
  else
    c.allreduce(send.view(), recv.view(), {.op = op});
  TypedBuffer& out = in_place ? send : recv;
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want = reference(n, i, d, op);
    if (std::abs(out.get(i) - want) > tolerance(d, want) && wrong++ == 0) first = i;
  }
  ASSERT_EQ(wrong, 0u) << describe(d, op, count, in_place) << " on rank " << r << ": first at " << first << " got "
                       << out.get(first) << " want " << reference(n, first, d, op);
  if (same_bits) expect_same_bits_everywhere(c, out.view(), describe(d, op, count, in_place));
}

inline void allreduce(comm::Communicator& c, const Sizes& sizes) {
  for (DType d : kAllDTypes)
    for (ReduceOp op : kAllReduceOps)
      for (size_t count : sizes.small) {
        allreduce_one(c, d, op, count, (int(d) + int(op) + int(count)) % 2 == 0,
                      count == 4097 && op == ReduceOp::avg);
        if (::testing::Test::HasFatalFailure()) return;
      }
  // Large messages: every reduction path, a few dtypes.
  const std::pair<DType, ReduceOp> large[] = {{DType::f32, ReduceOp::sum}, {DType::f32, ReduceOp::avg},
                                              {DType::bf16, ReduceOp::sum}, {DType::f16, ReduceOp::max},
                                              {DType::i64, ReduceOp::product}, {DType::u8, ReduceOp::min}};
  for (const auto& [d, op] : large) {
    allreduce_one(c, d, op, sizes.large, d == DType::bf16, op == ReduceOp::avg);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

inline void broadcast(comm::Communicator& c, const Sizes& sizes) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> counts = sizes.small;
  counts.push_back(sizes.large);
  for (DType d : kAllDTypes)
    for (size_t count : counts) {
      if (d != DType::f32 && d != DType::u8 && count == sizes.large) continue;  // bytes are bytes
      for (int root = 0; root < n; ++root) {
        TypedBuffer b(d, count);
        for (size_t i = 0; i < count; ++i) b.set(i, r == root ? pattern(root, i, d, ReduceOp::sum) : 99);
        c.broadcast(b.view(), root);
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(b.get(i), pattern(root, i, d, ReduceOp::sum)) << dtype_name(d) << " root " << root << " i " << i;
      }
    }
}

inline void allgather(comm::Communicator& c, const Sizes& sizes) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> counts = sizes.small;
  counts.push_back(sizes.large);
  for (DType d : {DType::f32, DType::bf16, DType::i64, DType::u8})
    for (size_t count : counts) {
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
  // Uneven counts, including empty ranks and one large.
  std::vector<size_t> counts_v(n);
  for (int p = 0; p < n; ++p) counts_v[p] = p % 3 == 1 ? 0 : (p == 2 ? sizes.large : 5 + p);
  const size_t total = std::accumulate(counts_v.begin(), counts_v.end(), size_t(0));
  TypedBuffer send(DType::f32, counts_v[r]), recv(DType::f32, total);
  for (size_t i = 0; i < counts_v[r]; ++i) send.set(i, pattern(r, i, DType::f32, ReduceOp::sum));
  c.allgatherv(send.view(), recv.view(), counts_v);
  size_t off = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < counts_v[p]; ++i, ++off)
      ASSERT_EQ(recv.get(off), pattern(p, i, DType::f32, ReduceOp::sum)) << "allgatherv from " << p;
}

inline void reduce_scatter(comm::Communicator& c, const Sizes& sizes) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> blocks = sizes.small;
  blocks.push_back(sizes.large);
  for (DType d : kAllDTypes)
    for (ReduceOp op : kAllReduceOps)
      for (size_t block : blocks) {
        if (block == sizes.large && !((op == ReduceOp::sum && d == DType::f32) || (op == ReduceOp::max && d == DType::bf16)))
          continue;
        TypedBuffer send(d, block * n), recv(d, block);
        for (size_t i = 0; i < block * n; ++i) send.set(i, pattern(r, i, d, op));
        c.reduce_scatter(send.view(), recv.view(), {.op = op});
        for (size_t i = 0; i < block; ++i) {
          const double want = reference(n, r * block + i, d, op);
          ASSERT_NEAR(recv.get(i), want, tolerance(d, want)) << describe(d, op, block, false) << " i " << i;
        }
      }
  // In place: recv is the start of send.
  for (size_t block : {size_t(7), sizes.large}) {
    TypedBuffer buf(DType::f32, block * n);
    for (size_t i = 0; i < block * n; ++i) buf.set(i, pattern(r, i, DType::f32, ReduceOp::sum));
    c.reduce_scatter(buf.view(), buf.view().slice(0, block), {.op = ReduceOp::sum});
    for (size_t i = 0; i < block; ++i)
      ASSERT_EQ(buf.get(i), reference(n, r * block + i, DType::f32, ReduceOp::sum)) << "in place, block " << block;
  }
}

inline void alltoall(comm::Communicator& c, const Sizes& sizes) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> blocks = sizes.small;
  blocks.push_back(sizes.large);
  for (size_t block : blocks) {
    TypedBuffer send(DType::f32, block * n), recv(DType::f32, block * n);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < block; ++i) send.set(p * block + i, code(r, p, i));
    c.alltoall(send.view(), recv.view());
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < block; ++i) ASSERT_EQ(recv.get(p * block + i), code(p, r, i)) << "from " << p;
  }
  // Rank a sends (a + 2b) % 5 elements to rank b, one pair far larger.
  auto len = [&](int a, int b) -> size_t { return a == 0 && b == n - 1 ? sizes.large : size_t((a + 2 * b) % 5); };
  std::vector<size_t> sc(n), rc(n);
  for (int p = 0; p < n; ++p) sc[p] = len(r, p), rc[p] = len(p, r);
  TypedBuffer send(DType::i32, std::accumulate(sc.begin(), sc.end(), size_t(0)));
  TypedBuffer recv(DType::i32, std::accumulate(rc.begin(), rc.end(), size_t(0)));
  for (size_t p = 0, off = 0; p < size_t(n); ++p)
    for (size_t i = 0; i < sc[p]; ++i) send.set(off++, code(r, int(p), i));
  c.alltoallv(send.view(), sc, recv.view(), rc);
  for (size_t p = 0, off = 0; p < size_t(n); ++p)
    for (size_t i = 0; i < rc[p]; ++i) ASSERT_EQ(recv.get(off++), code(int(p), r, i)) << "alltoallv from " << p;
}

inline void gather_scatter(comm::Communicator& c, const Sizes& sizes) {
  const int n = c.size(), r = c.rank();
  for (size_t count : {size_t(0), size_t(1), size_t(4097), sizes.large})
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
}

// No rank leaves a barrier before the last one entered it: ranks enter at
// staggered times and compare clock readings (steady_clock is one clock for
// every process of a host).
inline void barrier(comm::Communicator& c) {
  using namespace std::chrono;
  const int n = c.size(), r = c.rank();
  for (int round = 0; round < 4; ++round) {
    std::this_thread::sleep_for(milliseconds(((r + round) % n) * 3));
    int64_t times[2];
    times[0] = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
    c.barrier();
    times[1] = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
    std::vector<int64_t> all(2 * size_t(n));
    c.allgather(BufferView{times, 2, DType::i64}, BufferView{all.data(), all.size(), DType::i64});
    int64_t last_entry = 0, first_exit = INT64_MAX;
    for (int p = 0; p < n; ++p) last_entry = std::max(last_entry, all[2 * p]), first_exit = std::min(first_exit, all[2 * p + 1]);
    ASSERT_LE(last_entry, first_exit) << "round " << round << ": a rank left the barrier before the last arrived";
  }
}

inline void send_recv(comm::Communicator& c, const Sizes& sizes) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (size_t count : {size_t(0), size_t(1), size_t(4097), sizes.large}) {
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
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(in.get(i), code(prev, int(tag), i)) << "count " << count;
    }
  }
  // Small messages are buffered: every rank sends two before receiving any,
  // in both directions at once, and they arrive in order.
  std::vector<int32_t> got(4);
  for (int k = 0; k < 2; ++k) {
    int32_t v[2] = {r * 10 + k, k};
    c.send(BufferView{v, 2, DType::i32}, next, 40 + k);
  }
  for (int k = 0; k < 2; ++k) {
    c.recv(BufferView{got.data() + 2 * k, 2, DType::i32}, prev, 40 + k);
    ASSERT_EQ(got[2 * k], prev * 10 + k);
  }
  c.barrier();
}

inline void split(comm::Communicator& c) {
  const int n = c.size(), r = c.rank();
  // Two colours; keys reverse the order inside each.
  auto sub = c.split(r % 2, -r);
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;
  for (int p = 0; p < n; ++p)
    if (p % 2 == r % 2) members.push_back(p);
  std::reverse(members.begin(), members.end());
  ASSERT_EQ(sub->size(), int(members.size()));
  ASSERT_EQ(members[sub->rank()], r);
  ASSERT_EQ(sub->backend(), c.backend());
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
}

}  // namespace cohort::testing::checks
