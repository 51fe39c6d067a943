#include "cohort/data/index_permutation.h"

#include <bit>

#include "cohort/common/check.h"
#include "cohort/data/mix.h"

namespace cohort::data {

IndexPermutation::IndexPermutation(uint64_t n, uint64_t seed, int64_t epoch) : n_(n) {
  if (n_ <= 1) return;
  // Bits to cover n - 1, rounded up to an even count of at least 2.
  int bits = std::bit_width(n_ - 1);
  bits += bits & 1;
  half_bits_ = std::max(bits / 2, 1);
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
  const uint64_t key = combine(seed, uint64_t(epoch));
  for (int r = 0; r < kRounds; ++r) round_keys_[size_t(r)] = combine(key, uint64_t(r));
}

uint64_t IndexPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t k : round_keys_) {
    const uint64_t next = left ^ (mix64(right ^ k) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t position) const {
  COHORT_CHECK_LT(position, n_) << "position outside the permutation";
  if (n_ <= 1) return position;
  // Cycle walking: the orbit of `position` under encrypt() returns to
  // [0, n) before it cycles, because encrypt is a bijection of the domain.
  uint64_t x = encrypt(position);
  while (x >= n_) x = encrypt(x);
  return x;
}

}  // namespace cohort::data
