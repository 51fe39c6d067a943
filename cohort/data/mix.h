// 64-bit mixing for keys and round functions: SplitMix64's finaliser
// (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
// 2014), a bijection of uint64 whose output bits each depend on all input
// bits.
#pragma once

#include <cstdint>

namespace cohort::data {

constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One key from two values, order-sensitive: combine(a, b) != combine(b, a).
constexpr uint64_t combine(uint64_t a, uint64_t b) { return mix64(mix64(a) ^ (b + 0x632be59bd9b4e019ull)); }

}  // namespace cohort::data
