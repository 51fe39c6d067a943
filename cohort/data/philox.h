// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011), and SampleRng,
// the random numbers of one sample.
//
// A counter-based generator computes block c of the stream keyed by k as a
// pure function of (k, c). SampleRng's key is (seed, epoch) and its counter
// (sample index, op, block), so the numbers a map draws for a sample depend
// on nothing else: not on the thread that runs it, the worker count, the
// world size, timing, or what other samples drew. Augmentations are then
// reproducible bit for bit, and a resumed run draws what the original would
// have.
#pragma once

#include <array>
#include <cstdint>

namespace cohort::data {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// One block: Philox4x32 with 10 rounds (the variant Random123's known-answer
// vectors specify).
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

class SampleRng {
 public:
  // `op` separates the streams of different maps over the same sample.
  SampleRng(uint64_t seed, int64_t epoch, uint64_t sample_index, uint32_t op);

  uint32_t next_u32();
  uint64_t next_u64();
  // Uniform in [0, 1): 53 random bits (double), 24 (float).
  double uniform();
  float uniform_float();
  // Uniform in [0, n), unbiased (Lemire's multiply-and-reject); n > 0.
  uint64_t below(uint64_t n);
  // Uniform in [lo, hi], inclusive; lo <= hi.
  int64_t between(int64_t lo, int64_t hi);
  bool bernoulli(double p) { return uniform() < p; }
  // Standard normal (Box-Muller, both values of a pair used in turn).
  double normal();

 private:
  void refill();

  PhiloxKey key_;
  PhiloxCounter counter_;
  PhiloxCounter block_{};
  int used_ = 4;
  bool has_spare_normal_ = false;
  double spare_normal_ = 0;
};

}  // namespace cohort::data
