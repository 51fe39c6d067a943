// Test support: every collective of a Communicator checked against float64
// references computed independently of any communicator (the patterns of
// tests/comm/typed_buffer.h). Each check returns "" when the results are
// right, else a description of the first wrong element, so that the same
// checks serve ranks as threads (gtest) and ranks as processes (exit code).
#pragma once

#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/comm/communicator.h"
#include "tests/comm/typed_buffer.h"

namespace cohort::testing {

inline std::string what_of(const char* op, DType d, size_t count, const std::string& extra = {}) {
  std::ostringstream os;
  os << op << " " << dtype_name(d) << " count " << count << (extra.empty() ? "" : " ") << extra;
  return os.str();
}

inline std::string wrong(const std::string& what, int rank, size_t i, double got, double want) {
  std::ostringstream os;
  os << what << " on rank " << rank << ": element " << i << " is " << got << ", want " << want;
  return os.str();
}

inline std::string check_allreduce(comm::Communicator& c, DType d, ReduceOp op, size_t count, bool in_place) {
  const int n = c.size(), r = c.rank();
  TypedBuffer send(d, count), recv(d, count);
  for (size_t i = 0; i < count; ++i) send.set(i, pattern(r, i, d, op));
  if (in_place) c.allreduce(send.view(), {.op = op});
  else c.allreduce(send.view(), recv.view(), {.op = op});
  const TypedBuffer& out = in_place ? send : recv;
  const std::string what = what_of("allreduce", d, count, std::string(reduce_op_name(op)) + (in_place ? " in place" : ""));
  for (size_t i = 0; i < count; ++i) {
    const double want = reference(n, i, d, op);
    if (std::abs(out.get(i) - want) > tolerance(d, want)) return wrong(what, r, i, out.get(i), want);
  }
  return {};
}

// Every rank must hold the same bits after an allreduce (DDP relies on it).
inline std::string check_allreduce_identical(comm::Communicator& c, size_t count) {
  const int n = c.size(), r = c.rank();
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = 0.1f * float((i * 13 + size_t(r) * 7) % 29) + 1e-3f * float(r);
  c.allreduce(view_of(std::span(v)), {.op = ReduceOp::avg});
  std::vector<float> all(count * size_t(n));
  c.allgather(view_of(std::span(v)), view_of(std::span(all)));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i)
      if (std::memcmp(&all[size_t(p) * count + i], &v[i], sizeof(float)) != 0)
        return "allreduce avg f32 count " + std::to_string(count) + ": rank " + std::to_string(p) +
               " holds other bits than rank " + std::to_string(r) + " at element " + std::to_string(i);
  return {};
}

inline std::string check_broadcast(comm::Communicator& c, DType d, size_t count, int root) {
  const int r = c.rank();
  TypedBuffer b(d, count);
  for (size_t i = 0; i < count; ++i) b.set(i, r == root ? pattern(root, i, d, ReduceOp::sum) : 99);
  c.broadcast(b.view(), root);
  const std::string what = what_of("broadcast", d, count, "root " + std::to_string(root));
  for (size_t i = 0; i < count; ++i)
    if (b.get(i) != pattern(root, i, d, ReduceOp::sum)) return wrong(what, r, i, b.get(i), pattern(root, i, d, ReduceOp::sum));
  return {};
}

inline std::string check_allgather(comm::Communicator& c, DType d, size_t count) {
  const int n = c.size(), r = c.rank();
  TypedBuffer send(d, count), recv(d, count * size_t(n));
  for (size_t i = 0; i < count; ++i) send.set(i, pattern(r, i, d, ReduceOp::sum));
  c.allgather(send.view(), recv.view());
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) {
      const double want = pattern(p, i, d, ReduceOp::sum);
      if (recv.get(size_t(p) * count + i) != want)
        return wrong(what_of("allgather", d, count, "block " + std::to_string(p)), r, i, recv.get(size_t(p) * count + i), want);
    }
  return {};
}

inline std::string check_allgatherv(comm::Communicator& c, size_t base) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> counts(n);
  for (int p = 0; p < n; ++p) counts[p] = base + size_t(p) * 3;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  TypedBuffer send(DType::i32, counts[r]), recv(DType::i32, total);
  for (size_t i = 0; i < counts[r]; ++i) send.set(i, pattern(r, i, DType::i32, ReduceOp::sum));
  c.allgatherv(send.view(), recv.view(), counts);
  size_t at = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < counts[p]; ++i, ++at)
      if (recv.get(at) != pattern(p, i, DType::i32, ReduceOp::sum))
        return wrong(what_of("allgatherv", DType::i32, total), r, at, recv.get(at), pattern(p, i, DType::i32, ReduceOp::sum));
  return {};
}

inline std::string check_reduce_scatter(comm::Communicator& c, DType d, ReduceOp op, size_t block) {
  const int n = c.size(), r = c.rank();
  TypedBuffer send(d, block * size_t(n)), recv(d, block);
  for (size_t i = 0; i < send.size(); ++i) send.set(i, pattern(r, i, d, op));
  c.reduce_scatter(send.view(), recv.view(), {.op = op});
  for (size_t j = 0; j < block; ++j) {
    const double want = reference(n, size_t(r) * block + j, d, op);
    if (std::abs(recv.get(j) - want) > tolerance(d, want))
      return wrong(what_of("reduce_scatter", d, block, std::string(reduce_op_name(op))), r, j, recv.get(j), want);
  }
  return {};
}

inline double alltoall_value(int from, int to, size_t j) { return double((from * 7 + to * 3 + int(j)) % 50); }

inline std::string check_alltoall(comm::Communicator& c, size_t block) {
  const int n = c.size(), r = c.rank();
  TypedBuffer send(DType::f32, block * size_t(n)), recv(DType::f32, block * size_t(n));
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < block; ++j) send.set(size_t(q) * block + j, alltoall_value(r, q, j));
  c.alltoall(send.view(), recv.view());
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < block; ++j)
      if (recv.get(size_t(q) * block + j) != alltoall_value(q, r, j))
        return wrong(what_of("alltoall", DType::f32, block), r, size_t(q) * block + j, recv.get(size_t(q) * block + j),
                     alltoall_value(q, r, j));
  return {};
}

inline std::string check_alltoallv(comm::Communicator& c) {
  const int n = c.size(), r = c.rank();
  auto count = [](int a, int b) { return size_t((a + b) % 3 + 1); };  // rank a sends count(a, b) to b
  std::vector<size_t> sc(n), rc(n);
  for (int q = 0; q < n; ++q) {
    sc[q] = count(r, q);
    rc[q] = count(q, r);
  }
  TypedBuffer send(DType::i64, std::accumulate(sc.begin(), sc.end(), size_t(0)));
  TypedBuffer recv(DType::i64, std::accumulate(rc.begin(), rc.end(), size_t(0)));
  size_t at = 0;
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < sc[q]; ++j) send.set(at++, alltoall_value(r, q, j));
  c.alltoallv(send.view(), sc, recv.view(), rc);
  at = 0;
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < rc[q]; ++j, ++at)
      if (recv.get(at) != alltoall_value(q, r, j))
        return wrong(what_of("alltoallv", DType::i64, recv.size()), r, at, recv.get(at), alltoall_value(q, r, j));
  return {};
}

inline std::string check_gather_scatter(comm::Communicator& c, size_t count, int root) {
  const int n = c.size(), r = c.rank();
  TypedBuffer send(DType::f64, count), all(DType::f64, count * size_t(n));
  for (size_t i = 0; i < count; ++i) send.set(i, pattern(r, i, DType::f64, ReduceOp::sum));
  c.gather(send.view(), all.view(), root);
  if (r == root)
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        if (all.get(size_t(p) * count + i) != pattern(p, i, DType::f64, ReduceOp::sum))
          return wrong(what_of("gather", DType::f64, count, "root " + std::to_string(root)), r, size_t(p) * count + i,
                       all.get(size_t(p) * count + i), pattern(p, i, DType::f64, ReduceOp::sum));
  TypedBuffer source(DType::f64, count * size_t(n)), mine(DType::f64, count);
  for (size_t i = 0; i < source.size(); ++i) source.set(i, r == root ? double(i % 97) : -1);
  c.scatter(source.view(), mine.view(), root);
  for (size_t i = 0; i < count; ++i)
    if (mine.get(i) != double((size_t(r) * count + i) % 97))
      return wrong(what_of("scatter", DType::f64, count, "root " + std::to_string(root)), r, i, mine.get(i),
                   double((size_t(r) * count + i) % 97));
  return {};
}

inline std::string check_send_recv(comm::Communicator& c, size_t count) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return {};
  TypedBuffer out(DType::i32, count), in(DType::i32, count);
  for (size_t i = 0; i < count; ++i) out.set(i, double(r * 1000 + int(i % 1000)));
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Even ranks send first, odd ranks receive first: no cycle of senders.
  if (r % 2 == 0) {
    c.send(out.view(), next, 7);
    c.recv(in.view(), prev, 7);
  } else {
    c.recv(in.view(), prev, 7);
    c.send(out.view(), next, 7);
  }
  for (size_t i = 0; i < count; ++i)
    if (in.get(i) != double(prev * 1000 + int(i % 1000)))
      return wrong(what_of("send/recv", DType::i32, count), r, i, in.get(i), double(prev * 1000 + int(i % 1000)));
  return {};
}

struct SweepOptions {
  std::vector<size_t> counts{0, 1, 7, 4097};  // plus `large`
  size_t large = 0;                           // 0: none
  bool every_dtype_and_op = true;             // else f32 sum/avg/max, f64 sum, i32 sum, bf16 sum
};

// Every collective, first failure first; "" when all are right.
inline std::string check_every_collective(comm::Communicator& c, const SweepOptions& o) {
  std::vector<size_t> counts = o.counts;
  if (o.large) counts.push_back(o.large);
  std::vector<std::pair<DType, ReduceOp>> cases;
  if (o.every_dtype_and_op) {
    for (DType d : kAllDTypes)
      for (ReduceOp op : kAllReduceOps) cases.emplace_back(d, op);
  } else {
    cases = {{DType::f32, ReduceOp::sum}, {DType::f32, ReduceOp::avg}, {DType::f32, ReduceOp::max},
             {DType::f64, ReduceOp::sum}, {DType::i32, ReduceOp::sum}, {DType::bf16, ReduceOp::sum}};
  }
  std::string e;
  for (const auto& [d, op] : cases)
    for (size_t count : counts) {
      const bool in_place = (int(d) + int(op) + int(count)) % 2 == 0;
      if (!(e = check_allreduce(c, d, op, count, in_place)).empty()) return e;
    }
  for (size_t count : counts)
    if (!(e = check_allreduce_identical(c, count)).empty()) return e;
  for (int root = 0; root < c.size(); ++root)
    for (size_t count : counts)
      if (!(e = check_broadcast(c, count > 5000 ? DType::f32 : DType::u8, count, root)).empty()) return e;
  for (DType d : {DType::f32, DType::bf16, DType::i64})
    for (size_t count : counts)
      if (!(e = check_allgather(c, d, count)).empty()) return e;
  if (!(e = check_allgatherv(c, 5)).empty()) return e;
  if (!(e = check_reduce_scatter(c, DType::f32, ReduceOp::sum, 1000)).empty()) return e;
  if (!(e = check_reduce_scatter(c, DType::i32, ReduceOp::max, 3)).empty()) return e;
  if (!(e = check_alltoall(c, 257)).empty()) return e;
  if (!(e = check_alltoallv(c)).empty()) return e;
  if (!(e = check_gather_scatter(c, 33, c.size() - 1)).empty()) return e;
  if (!(e = check_send_recv(c, 3000)).empty()) return e;
  c.barrier();
  return {};
}

}  // namespace cohort::testing
