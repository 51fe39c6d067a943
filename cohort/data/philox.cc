#include "cohort/data/philox.h"

#include <cmath>
#include <numbers>

#include "cohort/common/check.h"
#include "cohort/data/mix.h"

namespace cohort::data {
namespace {

// The Philox4x32 multipliers and Weyl key increments from the paper.
constexpr uint32_t kM0 = 0xd2511f53u, kM1 = 0xcd9e8d57u;
constexpr uint32_t kW0 = 0x9e3779b9u, kW1 = 0xbb67ae85u;

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c[0];
    const uint64_t p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
    k = {k[0] + kW0, k[1] + kW1};
  }
  return c;
}

SampleRng::SampleRng(uint64_t seed, int64_t epoch, uint64_t sample_index, uint32_t op) {
  const uint64_t key = combine(seed, uint64_t(epoch));
  key_ = {uint32_t(key), uint32_t(key >> 32)};
  counter_ = {uint32_t(sample_index), uint32_t(sample_index >> 32), op, 0};
}

void SampleRng::refill() {
  block_ = philox4x32_10(counter_, key_);
  ++counter_[3];  // 2^32 blocks (2^34 numbers) per sample and op
  used_ = 0;
}

uint32_t SampleRng::next_u32() {
  if (used_ == 4) refill();
  return block_[size_t(used_++)];
}

uint64_t SampleRng::next_u64() {
  const uint64_t hi = next_u32();
  return hi << 32 | next_u32();
}

double SampleRng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

float SampleRng::uniform_float() { return float(next_u32() >> 8) * 0x1.0p-24f; }

uint64_t SampleRng::below(uint64_t n) {
  COHORT_CHECK_GT(n, 0u) << "below(0)";
  // Lemire, "Fast random integer generation in an interval" (2019).
  unsigned __int128 m = (unsigned __int128)next_u64() * n;
  uint64_t low = uint64_t(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = (unsigned __int128)next_u64() * n;
      low = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

int64_t SampleRng::between(int64_t lo, int64_t hi) {
  COHORT_CHECK_LE(lo, hi) << "empty interval";
  const uint64_t span = uint64_t(hi) - uint64_t(lo) + 1;
  if (span == 0) return int64_t(next_u64());  // the whole int64 range
  return int64_t(uint64_t(lo) + below(span));
}

double SampleRng::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  // 1 - uniform() is in (0, 1], so the log is finite.
  const double r = std::sqrt(-2.0 * std::log(1.0 - uniform()));
  const double theta = 2.0 * std::numbers::pi * uniform();
  spare_normal_ = r * std::sin(theta);
  has_spare_normal_ = true;
  return r * std::cos(theta);
}

}  // namespace cohort::data
