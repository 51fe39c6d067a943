// Reference half-precision arithmetic for tests, written independently of
// cohort's kernels: values are decoded with ldexp and rounded with
// nearbyint (ties to even) in double, never by bit manipulation of floats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace cohort::testing {

// An IEEE-style binary format with `kMantBits` stored fraction bits and
// `kExpBits` exponent bits: binary16 is <10, 5>, bfloat16 is <7, 8>.
template <int kMantBits, int kExpBits>
struct HalfFormat {
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kEmin = 1 - kBias;
  static constexpr uint16_t kExpMask = static_cast<uint16_t>(((1 << kExpBits) - 1) << kMantBits);
  static constexpr uint16_t kMantMask = static_cast<uint16_t>((1 << kMantBits) - 1);

  static bool is_nan(uint16_t h) { return (h & kExpMask) == kExpMask && (h & kMantMask) != 0; }

  static double decode(uint16_t h) {
    const int exp = (h & kExpMask) >> kMantBits;
    const int mant = h & kMantMask;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exp == (1 << kExpBits) - 1) return mant ? std::nan("") : sign * INFINITY;
    if (exp == 0) return sign * std::ldexp(mant, kEmin - kMantBits);
    return sign * std::ldexp(mant + (1 << kMantBits), exp - kBias - kMantBits);
  }

  // The spacing of representable values around |x| (finite x).
  static double quantum(double x) {
    int e;
    std::frexp(std::fabs(x), &e);  // |x| = f * 2^e, f in [0.5, 1)
    const int unbiased = x == 0 ? kEmin : std::max(e - 1, kEmin);
    return std::ldexp(1.0, unbiased - kMantBits);
  }

  // Round a double to the nearest representable value, ties to even;
  // NaN gives a quiet NaN of the same sign.
  static uint16_t encode(double x) {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (std::isnan(x)) return sign | kExpMask | (1 << (kMantBits - 1));
    const double a = std::fabs(x);
    if (std::isinf(a)) return sign | kExpMask;
    const double q = quantum(a);
    const double r = std::nearbyint(a / q);  // default rounding mode: ties to even
    int e;
    std::frexp(r * q, &e);
    if (r == 0) return sign;
    // r * q in [2^emin, ...) is normal, below it subnormal (r < 2^kMantBits).
    const int unbiased = e - 1;
    if (unbiased < kEmin) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
    if (unbiased + kBias >= (1 << kExpBits) - 1) return sign | kExpMask;  // overflow
    const double mant = std::ldexp(r * q, kMantBits - unbiased) - std::ldexp(1.0, kMantBits);
    return static_cast<uint16_t>(sign | ((unbiased + kBias) << kMantBits) | static_cast<uint16_t>(mant));
  }
};

using F16Ref = HalfFormat<10, 5>;
using Bf16Ref = HalfFormat<7, 8>;

}  // namespace cohort::testing
