// Counter-based randomness: a 64-bit word that is a pure function of a seed
// and two counters (SplitMix64's finaliser, a bijection whose outputs for
// consecutive inputs pass BigCrush, chained over the three). The privacy code
// keys Poisson sampling by (seed, step, example) and noise by (seed, step,
// rank) with it, so both are reproducible without any stored state.
#pragma once

#include <cstdint>

namespace cohort::privacy {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t counter_hash(uint64_t seed, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

// The top 53 bits of a hash as a uniform double in [0, 1).
inline double unit_interval(uint64_t hash) { return static_cast<double>(hash >> 11) * 0x1.0p-53; }

}  // namespace cohort::privacy
