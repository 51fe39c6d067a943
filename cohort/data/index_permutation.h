// IndexPermutation: a pseudorandom permutation of [0, n) keyed by (seed,
// epoch), evaluated one position at a time with no table.
//
// A balanced Feistel network over the smallest even number of bits that
// covers n (a domain of at most 4n), with cycle walking: a position whose
// image falls outside [0, n) is encrypted again until it lands inside, which
// keeps the map a bijection of [0, n). Memory is O(1) for any n, and
// perm(position) costs a few hash rounds per walk step (under 4 steps on
// average), so an epoch's order is reproducible from (seed, epoch) alone:
// this is what lets a pipeline's whole iterator state be a few numbers.
#pragma once

#include <array>
#include <cstdint>

namespace cohort::data {

class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t seed, int64_t epoch);

  uint64_t size() const { return n_; }
  // The element at `position` (< size()) of the permuted order.
  uint64_t operator()(uint64_t position) const;

 private:
  static constexpr int kRounds = 8;
  uint64_t encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
  std::array<uint64_t, kRounds> round_keys_{};
};

}  // namespace cohort::data
