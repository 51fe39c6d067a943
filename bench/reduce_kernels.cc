// Reduction kernels against memcpy of the same bytes.
//
// Every collective's reduce step is one of these calls, so the question is
// whether they run at memory bandwidth. Each benchmark reports two rates:
//   bytes_per_second  bytes of one buffer (the message) per second; the
//                     number to compare with memcpy of the same size;
//   mem_bw            bytes actually moved per second: every source read
//                     plus the destination written (memcpy: 2x the size).
//                     A kernel at memory bandwidth shows about memcpy's mem_bw.
//
//   bench_reduce_kernels --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cohort/common/reduce.h"

namespace {

using cohort::DType;
using cohort::ReduceOp;

constexpr int64_t kMiB = int64_t{1} << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;

// A page-aligned buffer filled with `pattern` (touching every page, so no
// first-touch faults land inside the timed loop). The pattern is a small
// finite value for every dtype, so sums never reach Inf or NaN.
Buffer make_buffer(size_t bytes, uint8_t pattern) {
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (!p) std::abort();
  std::memset(p, pattern, bytes);
  return Buffer(p);
}

void set_rates(benchmark::State& state, int64_t message_bytes, int64_t moved_bytes) {
  state.SetBytesProcessed(state.iterations() * message_bytes);
  state.counters["mem_bw"] = benchmark::Counter(static_cast<double>(state.iterations() * moved_bytes),
                                                benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1024);
}

void BM_memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Buffer src = make_buffer(bytes, 0x3c);
  Buffer dst = make_buffer(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 2 * bytes);
}

// reduce(sum) of `nsrc` sources of range(0) bytes each; in place means dst is
// srcs[0], the pattern of a collective accumulating into its receive buffer.
void BM_reduce_sum(benchmark::State& state, DType dtype, int nsrc, bool in_place) {
  const int64_t bytes = state.range(0);
  const size_t count = static_cast<size_t>(bytes) / cohort::dtype_size(dtype);
  std::vector<Buffer> srcs;
  std::vector<const void*> ptrs;
  for (int k = 0; k < nsrc; ++k) {
    srcs.push_back(make_buffer(bytes, 0x3c));
    ptrs.push_back(srcs.back().get());
  }
  Buffer out = in_place ? nullptr : make_buffer(bytes, 0);
  void* dst = in_place ? srcs[0].get() : out.get();
  for (auto _ : state) {
    cohort::reduce(ReduceOp::sum, dtype, dst, ptrs, count);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  // In place, srcs[0] is read and dst written: the same nsrc + 1 streams.
  set_rates(state, bytes, (nsrc + 1) * bytes);
}

// Rates use CPU time, not wall time: this machine's cores are shared, and a
// run preempted by another process would otherwise report its wait.
// 256 KiB is one shm staging slot (COHORT_SHM_SLOT_BYTES), reduced while in
// cache; 4 MiB sits in L2/L3; 64 MiB streams from memory.
void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(256 * 1024)->Arg(4 * kMiB)->Arg(64 * kMiB)->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_memcpy)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, f32_2src, DType::f32, 2, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, f32_2src_inplace, DType::f32, 2, true)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, f32_4src, DType::f32, 4, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, f32_8src, DType::f32, 8, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, bf16_2src, DType::bf16, 2, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, bf16_4src, DType::bf16, 4, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, f16_2src, DType::f16, 2, false)->Apply(sizes);
BENCHMARK_CAPTURE(BM_reduce_sum, f16_4src, DType::f16, 4, false)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
