// f16 / bf16 conversions: exhaustive over every half value, every rounding
// midpoint, special values, and (where the compiler has _Float16) agreement
// with the compiler's own conversions.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cohort/common/reduce.h"
#include "tests/common/half_reference.h"

namespace cohort::half_test {
namespace {

using testing::Bf16Ref;
using testing::F16Ref;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// Checks that `got` is the correctly rounded half of `f` under format Ref;
// for NaN only that it is a NaN of the same sign.
template <typename Ref>
::testing::AssertionResult rounds_correctly(float f, uint16_t got) {
  if (std::isnan(f)) {
    if (Ref::is_nan(got) && ((got & 0x8000) != 0) == std::signbit(f)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "NaN " << std::hex << bits(f) << " became " << got;
  }
  const uint16_t want = Ref::encode(static_cast<double>(f));
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << f << " (0x" << std::hex << bits(f) << ") -> 0x" << got
                                       << ", want 0x" << want;
}

// Every f32 that lies on a rounding decision for format Ref: each midpoint
// between neighbouring half values, and the floats just either side of it.
template <typename Ref>
std::vector<float> rounding_midpoints() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x8000; ++h) {
    const uint16_t lo = static_cast<uint16_t>(h), hi = static_cast<uint16_t>(h + 1);
    if (Ref::is_nan(lo) || Ref::is_nan(hi)) continue;
    const double a = Ref::decode(lo), b = Ref::decode(hi);
    if (std::isinf(a)) continue;
    // The midpoint to infinity is one quantum above the largest finite value.
    const double mid = std::isinf(b) ? a + Ref::quantum(a) / 2 : (a + b) / 2;
    const float m = static_cast<float>(mid);
    if (static_cast<double>(m) != mid) continue;  // not exact in f32 (never for these formats)
    for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  return out;
}

TEST(F16, DecodesEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double want = F16Ref::decode(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      // Quiet, with the payload kept in the top fraction bits.
      EXPECT_EQ(bits(f) & 0x7fe000u, ((h & 0x3ffu) << 13) | 0x400000u) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(F16, RoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = f32_to_f16(f16_to_f32(static_cast<uint16_t>(h)));
    if (F16Ref::is_nan(static_cast<uint16_t>(h)))
      EXPECT_EQ(back, h | 0x200u) << "NaN stays NaN, made quiet: " << std::hex << h;
    else
      ASSERT_EQ(back, h) << std::hex << h;
  }
}

TEST(F16, RoundsEveryMidpointToNearestEven) {
  const std::vector<float> points = rounding_midpoints<F16Ref>();
  EXPECT_GT(points.size(), 150000u);
  for (float f : points) ASSERT_TRUE(rounds_correctly<F16Ref>(f, f32_to_f16(f)));
}

TEST(F16, RoundsSampledFloatsCorrectly) {
  // A stride through all 2^32 patterns: every exponent, both signs, NaNs.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
    const float f = from_bits(static_cast<uint32_t>(u));
    ASSERT_TRUE(rounds_correctly<F16Ref>(f, f32_to_f16(f)));
  }
}

TEST(F16, SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00) << "the midpoint to 2^16 ties to even: infinity";
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(FLT_MAX), 0x7c00);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400) << "smallest normal";
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001) << "smallest subnormal";
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000) << "half of it ties to zero";
  EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002) << "1.5 units ties to 2";
  EXPECT_EQ(f32_to_f16(-0x1p-30f), 0x8000) << "underflow keeps the sign";
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00) << "tie to even (down)";
  EXPECT_EQ(f32_to_f16(1.0f + 0x1.8p-10f), 0x3c02) << "tie to even (up)";
  EXPECT_EQ(f32_to_f16(FLT_MIN / 4), 0x0000) << "f32 subnormal";
  EXPECT_EQ(f32_to_f16(std::nanf("")) & 0x7e00, 0x7e00);
  EXPECT_EQ(f32_to_f16(from_bits(0x7f800001u)), 0x7e00) << "a NaN with a low payload must not become Inf";
  EXPECT_EQ(f32_to_f16(from_bits(0xff812345u)), 0xfe09);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x03ff), 0x1.ff8p-15f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 conversions (F16C or libgcc) as a second opinion.
TEST(F16, AgreesWithCompilerFloat16) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (F16Ref::is_nan(static_cast<uint16_t>(h))) continue;
    const _Float16 x = std::bit_cast<_Float16>(static_cast<uint16_t>(h));
    ASSERT_EQ(f16_to_f32(static_cast<uint16_t>(h)), static_cast<float>(x)) << std::hex << h;
  }
  for (float f : rounding_midpoints<F16Ref>())
    ASSERT_EQ(f32_to_f16(f), std::bit_cast<uint16_t>(static_cast<_Float16>(f))) << std::hexfloat << f;
}
#endif

TEST(Bf16, DecodesEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    EXPECT_EQ(bits(f), h << 16) << "bf16 is the top half of an f32";
    const double want = Bf16Ref::decode(static_cast<uint16_t>(h));
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    else
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
  }
}

TEST(Bf16, RoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h)));
    if (Bf16Ref::is_nan(static_cast<uint16_t>(h)))
      EXPECT_EQ(back, h | 0x40u) << "NaN stays NaN, made quiet: " << std::hex << h;
    else
      ASSERT_EQ(back, h) << std::hex << h;
  }
}

TEST(Bf16, RoundsEveryMidpointToNearestEven) {
  const std::vector<float> points = rounding_midpoints<Bf16Ref>();
  EXPECT_GT(points.size(), 150000u);
  for (float f : points) ASSERT_TRUE(rounds_correctly<Bf16Ref>(f, f32_to_bf16(f)));
}

TEST(Bf16, RoundsSampledFloatsCorrectly) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
    const float f = from_bits(static_cast<uint32_t>(u));
    ASSERT_TRUE(rounds_correctly<Bf16Ref>(f, f32_to_bf16(f)));
  }
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(f32_to_bf16(FLT_MAX), 0x7f80) << "rounds up past the largest bf16";
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7f) << "just below the overflow midpoint";
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80) << "tie to even (down)";
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1.8p-7f), 0x3f82) << "tie to even (up)";
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001u)), 0x0000) << "tiny subnormal";
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000u)), 0x0000) << "subnormal tie to even";
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008001u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f800001u)), 0x7fc0) << "a NaN with a low payload must not become Inf";
  EXPECT_EQ(f32_to_bf16(from_bits(0xffc00000u)), 0xffc0);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7fa34567u)), 0x7fe3);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc0a0), -5.0f);
}

}  // namespace
}  // namespace cohort::half_test
