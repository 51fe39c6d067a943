// The same program under every launcher: it takes its world from
// init_world() (cohortrun, mpirun, or variables set by a test) and runs one
// scenario.
//
//   checksum  a fixed sequence of collectives on integer-valued inputs
//             (exact in every dtype, so every backend must produce the same
//             bits); rank 0 prints "backend=<b> size=<n> checksum=<hex>".
//   die       rank 1 exits with status 7 in the middle of a job; the others
//             must raise PeerLostError naming it: rank 0 prints
//             "lost rank=<r>: <message>" and exits 0 (1: no error, 2: another
//             error).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/error.h"
#include "tests/comm/typed_buffer.h"

namespace {

using namespace cohort;

struct Hash {
  uint64_t value = 1469598103934665603ULL;  // FNV-1a
  void add(const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) value = (value ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ULL;
  }
  void add(const testing::TypedBuffer& b) { add(const_cast<testing::TypedBuffer&>(b).view().data, b.size() * dtype_size(b.dtype())); }
};

testing::TypedBuffer filled(DType d, size_t count, int rank, ReduceOp op) {
  testing::TypedBuffer b(d, count);
  for (size_t i = 0; i < count; ++i) b.set(i, testing::pattern(rank, i, d, op));
  return b;
}

int checksum(comm::Communicator& c) {
  const int n = c.size(), r = c.rank();
  Hash mine;
  const std::pair<DType, ReduceOp> reductions[] = {{DType::f32, ReduceOp::sum},  {DType::bf16, ReduceOp::avg},
                                                   {DType::f16, ReduceOp::sum},  {DType::i32, ReduceOp::max},
                                                   {DType::i8, ReduceOp::product}, {DType::f64, ReduceOp::avg}};
  for (const auto& [d, op] : reductions)
    for (size_t count : {size_t(5), size_t(4097), size_t(200003)}) {
      auto b = filled(d, count, r, op);
      c.allreduce(b.view(), {.op = op});
      mine.add(b);
      auto s = filled(d, count * n, r, op);
      auto block = testing::TypedBuffer(d, count);
      c.reduce_scatter(s.view(), block.view(), {.op = op});
      mine.add(block);
    }
  auto g = filled(DType::u8, 777, r, ReduceOp::sum);
  testing::TypedBuffer all(DType::u8, 777 * size_t(n));
  c.allgather(g.view(), all.view());
  mine.add(all);
  auto bc = filled(DType::i64, 1000, r, ReduceOp::sum);
  c.broadcast(bc.view(), n - 1);
  mine.add(bc);
  auto a = filled(DType::f32, 3 * size_t(n), r, ReduceOp::sum);
  testing::TypedBuffer a_out(DType::f32, 3 * size_t(n));
  c.alltoall(a.view(), a_out.view());
  mine.add(a_out);
  // Every rank's hash, in rank order.
  std::vector<uint64_t> hashes(n);
  c.allgather(BufferView{&mine.value, 1, DType::i64}, BufferView{hashes.data(), hashes.size(), DType::i64});
  Hash job;
  job.add(hashes.data(), hashes.size() * sizeof(uint64_t));
  if (r == 0) std::printf("backend=%s size=%d checksum=%016llx\n", c.backend().c_str(), n, (unsigned long long)job.value);
  return 0;
}

int die(comm::Communicator& c) {
  std::vector<float> v(1 << 14, 1.0f);
  c.allreduce(BufferView{v.data(), v.size(), DType::f32});
  c.barrier();
  if (c.rank() == 1) _exit(7);
  try {
    for (int i = 0; i < 100000; ++i) c.allreduce(BufferView{v.data(), v.size(), DType::f32});
  } catch (const PeerLostError& e) {
    if (c.rank() == 0) std::printf("lost rank=%d: %s\n", e.rank(), e.what());
    return 0;
  } catch (const std::exception& e) {
    std::printf("rank %d: unexpected error: %s\n", c.rank(), e.what());
    return 2;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    comm::World world = comm::init_world();
    int status = 2;
    if (scenario == "checksum") status = checksum(*world.comm);
    else if (scenario == "die") status = die(*world.comm);
    else std::fprintf(stderr, "usage: %s checksum|die\n", argv[0]);
    std::fflush(stdout);
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
