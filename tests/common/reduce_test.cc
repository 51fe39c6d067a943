// Reduction kernels against an independent reference: every dtype x op x
// source count 1..8 x sizes 0, 1, 7, 4097 and ~1M, in place and not, with
// misaligned buffers and guard bytes after the destination. The reference
// folds in float64 (exact integers modulo 2^64 for integer types) and rounds
// halves with the ldexp/nearbyint encoder of half_reference.h.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/common/reduce.h"
#include "tests/common/half_reference.h"

namespace cohort::reduce_test {

// Readable parameters in test listings ("f32", "sum" rather than bytes);
// found by argument-dependent lookup, so in cohort itself.
void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
void PrintTo(ReduceOp op, std::ostream* os) { *os << reduce_op_name(op); }

namespace {

using testing::Bf16Ref;
using testing::F16Ref;

constexpr size_t kMaxSources = 8;
constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuard = 0xa5;

// A buffer whose data starts `offset` bytes into its storage (to exercise
// unaligned starts) and is followed by guard bytes that must stay intact.
class TestBuffer {
 public:
  TestBuffer(DType dtype, size_t count, size_t offset)
      : dtype_(dtype), count_(count), offset_(offset),
        storage_(offset + count * dtype_size(dtype) + kGuardBytes, std::byte{kGuard}) {}
  void* data() { return storage_.data() + offset_; }
  const void* data() const { return storage_.data() + offset_; }
  size_t bytes() const { return count_ * dtype_size(dtype_); }
  bool guard_intact() const {
    for (size_t i = offset_ + bytes(); i < storage_.size(); ++i)
      if (storage_[i] != std::byte{kGuard}) return false;
    for (size_t i = 0; i < offset_; ++i)
      if (storage_[i] != std::byte{kGuard}) return false;
    return true;
  }
  template <typename T>
  T get(size_t i) const {
    T v;
    std::memcpy(&v, static_cast<const std::byte*>(data()) + i * sizeof(T), sizeof(T));
    return v;
  }
  template <typename T>
  void set(size_t i, T v) {
    std::memcpy(static_cast<std::byte*>(data()) + i * sizeof(T), &v, sizeof(T));
  }

 private:
  DType dtype_;
  size_t count_;
  size_t offset_;
  std::vector<std::byte> storage_;
};

double eps_of(DType t) { return t == DType::f64 ? 0x1p-52 : 0x1p-23; }

// Decodes element i of a floating buffer to double (halves by the reference).
double decode(DType t, const TestBuffer& b, size_t i) {
  switch (t) {
    case DType::f32: return b.get<float>(i);
    case DType::f64: return b.get<double>(i);
    case DType::f16: return F16Ref::decode(b.get<uint16_t>(i));
    case DType::bf16: return Bf16Ref::decode(b.get<uint16_t>(i));
    default: break;
  }
  ADD_FAILURE() << "not a floating dtype";
  return 0;
}

// Integer element i as int64 (its value) and as uint64 (for modular sums).
int64_t int_value(DType t, const TestBuffer& b, size_t i) {
  switch (t) {
    case DType::i8: return b.get<int8_t>(i);
    case DType::u8: return b.get<uint8_t>(i);
    case DType::i32: return b.get<int32_t>(i);
    case DType::i64: return b.get<int64_t>(i);
    default: break;
  }
  ADD_FAILURE() << "not an integer dtype";
  return 0;
}

// Random contents for one source. Floating values are chosen so that the
// result is checkable: halves on a grid where the f32 sum of 8 is exact, so
// the only rounding is the final one; products of magnitudes in [0.5, 2)
// so they neither overflow nor underflow. Integers use every bit pattern so
// that sums and products wrap.
void fill(DType t, ReduceOp op, std::mt19937_64& rng, TestBuffer& b, size_t count) {
  std::uniform_real_distribution<double> wide(-4.0, 4.0);
  std::uniform_real_distribution<double> near_one(0.5, 2.0);
  std::bernoulli_distribution negative(0.5);
  const bool product = op == ReduceOp::product;
  for (size_t i = 0; i < count; ++i) {
    const double sign = negative(rng) ? -1.0 : 1.0;
    switch (t) {
      case DType::f32: b.set<float>(i, static_cast<float>(product ? sign * near_one(rng) : wide(rng))); break;
      case DType::f64: b.set<double>(i, product ? sign * near_one(rng) : wide(rng)); break;
      case DType::f16:
      case DType::bf16: {
        double v;
        if (product) {
          v = sign * static_cast<double>(64 + rng() % 192) / 128;  // 8 significant bits
        } else if (t == DType::f16) {
          v = (static_cast<double>(rng() % 4095) - 2047) / 1024;  // 11 significant bits
        } else {
          v = (static_cast<double>(rng() % 511) - 255) / 64;  // 8 significant bits
        }
        b.set<uint16_t>(i, t == DType::f16 ? F16Ref::encode(v) : Bf16Ref::encode(v));
        break;
      }
      case DType::i8: b.set<int8_t>(i, static_cast<int8_t>(rng())); break;
      case DType::u8: b.set<uint8_t>(i, static_cast<uint8_t>(rng())); break;
      case DType::i32: b.set<int32_t>(i, static_cast<int32_t>(rng())); break;
      case DType::i64: b.set<int64_t>(i, static_cast<int64_t>(rng())); break;
    }
  }
}

// The running left fold of sources 0..k, in float64 or modulo 2^64.
class Reference {
 public:
  Reference(DType t, ReduceOp op, size_t count) : t_(t), op_(op), f_(count), abs_(count), u_(count), s_(count) {}

  void fold(const TestBuffer& src, bool first) {
    for (size_t i = 0; i < f_.size(); ++i) {
      if (is_floating(t_)) {
        const double x = decode(t_, src, i);
        abs_[i] = first ? std::fabs(x) : abs_[i] + std::fabs(x);
        if (first) {
          f_[i] = x;
          continue;
        }
        switch (op_) {
          case ReduceOp::sum:
          case ReduceOp::avg: f_[i] += x; break;
          case ReduceOp::product: f_[i] *= x; break;
          case ReduceOp::min: f_[i] = std::fmin(f_[i], x); break;
          case ReduceOp::max: f_[i] = std::fmax(f_[i], x); break;
        }
      } else {
        const int64_t x = int_value(t_, src, i);
        if (first) {
          u_[i] = static_cast<uint64_t>(x);
          s_[i] = x;
          continue;
        }
        switch (op_) {
          case ReduceOp::sum:
          case ReduceOp::avg: u_[i] += static_cast<uint64_t>(x); break;
          case ReduceOp::product: u_[i] *= static_cast<uint64_t>(x); break;
          case ReduceOp::min: s_[i] = std::min(s_[i], x); break;
          case ReduceOp::max: s_[i] = std::max(s_[i], x); break;
        }
      }
    }
  }

  // Empty when element i of `got` is right for a fold of `nsrc` sources
  // (for avg: the fold's sum divided by nsrc).
  std::string check(const TestBuffer& got, size_t i, size_t nsrc) const {
    const bool average = op_ == ReduceOp::avg;
    if (!is_floating(t_)) {
      // Integer results are exact: the truncation of the mod-2^64 value for
      // sum/product (modular arithmetic commutes with truncation); an average
      // divides that wrapped sum, truncating toward zero.
      const bool ordered = op_ == ReduceOp::min || op_ == ReduceOp::max;
      const uint64_t want_bits = ordered ? static_cast<uint64_t>(s_[i]) : u_[i];
      const uint64_t mask = dtype_size(t_) == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * dtype_size(t_))) - 1;
      const uint64_t got_bits = static_cast<uint64_t>(int_value(t_, got, i)) & mask;
      if (average) {
        const int64_t want = wrapped(want_bits & mask) / static_cast<int64_t>(nsrc);
        if (int_value(t_, got, i) == want) return {};
        return "got " + std::to_string(int_value(t_, got, i)) + ", want " + std::to_string(want);
      }
      if (got_bits == (want_bits & mask)) return {};
      return "got " + std::to_string(int_value(t_, got, i)) + ", want bits " + std::to_string(want_bits & mask);
    }
    const double g = decode(t_, got, i);
    const double want = average ? f_[i] / static_cast<double>(nsrc) : f_[i];
    const bool exact_op = op_ == ReduceOp::min || op_ == ReduceOp::max;
    bool ok;
    if (t_ == DType::f16 || t_ == DType::bf16) {
      const uint16_t got_bits = got.get<uint16_t>(i);
      if (exact_op || op_ == ReduceOp::sum || op_ == ReduceOp::avg) {
        // The f32 accumulation is exact on the test grid, so rounding once
        // gives exactly the correctly rounded sum (or mean); rounding per
        // step, or before dividing, would not.
        ok = got_bits == (t_ == DType::f16 ? F16Ref::encode(want) : Bf16Ref::encode(want));
      } else {
        const double half_ulp = (t_ == DType::f16 ? F16Ref::quantum(g) : Bf16Ref::quantum(g)) / 2;
        ok = std::fabs(g - want) <= half_ulp + static_cast<double>(nsrc) * 0x1p-24 * std::fabs(want);
      }
    } else if (exact_op) {
      ok = g == want;
    } else if (op_ == ReduceOp::product) {
      ok = std::fabs(g - want) <= static_cast<double>(nsrc) * eps_of(t_) * std::fabs(want);
    } else {
      // The sum's error, divided with it, and the division's own rounding.
      const double sum_error = static_cast<double>(nsrc) * eps_of(t_) * abs_[i];
      ok = std::fabs(g - want) <=
           (average ? sum_error / static_cast<double>(nsrc) + eps_of(t_) * std::fabs(want) : sum_error);
    }
    if (ok) return {};
    char buf[160];
    std::snprintf(buf, sizeof buf, "got %.17g, want %.17g", g, want);
    return buf;
  }

 private:
  // A sum modulo 2^(8 * size) as the value of the type (two's complement
  // for the signed ones).
  int64_t wrapped(uint64_t bits) const {
    const size_t bits_wide = 8 * dtype_size(t_);
    if (t_ == DType::u8 || bits_wide == 64) return static_cast<int64_t>(bits);
    const uint64_t sign = uint64_t{1} << (bits_wide - 1);
    return static_cast<int64_t>((bits ^ sign) - sign);
  }

  DType t_;
  ReduceOp op_;
  std::vector<double> f_, abs_;
  std::vector<uint64_t> u_;
  std::vector<int64_t> s_;
};

std::string case_name(const ::testing::TestParamInfo<std::tuple<DType, ReduceOp>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" +
         std::string(reduce_op_name(std::get<1>(info.param)));
}

class ReduceKernelTest : public ::testing::TestWithParam<std::tuple<DType, ReduceOp>> {};

TEST_P(ReduceKernelTest, MatchesReference) {
  const auto [dtype, op] = GetParam();
  const size_t esize = dtype_size(dtype);
  std::mt19937_64 rng(0x5eed ^ (static_cast<uint64_t>(dtype) << 8) ^ static_cast<uint64_t>(op));
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}, size_t{1000003}}) {
    std::vector<TestBuffer> srcs;
    for (size_t k = 0; k < kMaxSources; ++k) {
      // Offsets differ per source so that no two arrays share an alignment.
      srcs.emplace_back(dtype, count, (k % 3) * esize);
      fill(dtype, op, rng, srcs.back(), count);
    }
    Reference ref(dtype, op, count);
    for (size_t nsrc = 1; nsrc <= kMaxSources; ++nsrc) {
      ref.fold(srcs[nsrc - 1], nsrc == 1);
      for (bool in_place : {false, true}) {
        SCOPED_TRACE("count " + std::to_string(count) + ", " + std::to_string(nsrc) + " sources" +
                     (in_place ? ", in place" : ""));
        TestBuffer dst(dtype, count, esize);
        std::vector<const void*> ptrs;
        for (size_t k = 0; k < nsrc; ++k) ptrs.push_back(srcs[k].data());
        if (in_place) {
          std::memcpy(dst.data(), srcs[0].data(), srcs[0].bytes());
          ptrs[0] = dst.data();
        }
        reduce(op, dtype, dst.data(), ptrs, count);
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) {
          const std::string why = ref.check(dst, i, nsrc);
          if (!why.empty() && ++bad <= 3) ADD_FAILURE() << "element " << i << ": " << why;
        }
        ASSERT_EQ(bad, 0u);
        ASSERT_TRUE(dst.guard_intact()) << "wrote outside the destination";
        for (size_t k = 1; k < nsrc; ++k) ASSERT_TRUE(srcs[k].guard_intact());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndOps, ReduceKernelTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::ValuesIn(kAllReduceOps)),
                         case_name);

// More sources than one kernel takes, so the blocked multi-pass path runs
// with a partial last group, over sizes that end mid-block.
TEST(Reduce, ManySources) {
  std::mt19937_64 rng(99);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      for (size_t nsrc : {size_t{9}, size_t{13}, size_t{17}}) {
        for (bool in_place : {false, true}) {
          const size_t count = 10007;
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(reduce_op_name(op)) + " " +
                       std::to_string(nsrc) + (in_place ? " in place" : ""));
          std::vector<TestBuffer> srcs;
          Reference ref(dtype, op, count);
          // f16 sums of 17 values on the +-2 grid stay exact in f32.
          for (size_t k = 0; k < nsrc; ++k) {
            srcs.emplace_back(dtype, count, 0);
            fill(dtype, op, rng, srcs.back(), count);
            ref.fold(srcs.back(), k == 0);
          }
          TestBuffer dst(dtype, count, 0);
          std::vector<const void*> ptrs;
          for (auto& s : srcs) ptrs.push_back(s.data());
          if (in_place) {
            std::memcpy(dst.data(), srcs[0].data(), srcs[0].bytes());
            ptrs[0] = dst.data();
          }
          reduce(op, dtype, dst.data(), ptrs, count);
          for (size_t i = 0; i < count; ++i) {
            const std::string why = ref.check(dst, i, nsrc);
            ASSERT_TRUE(why.empty()) << "element " << i << ": " << why;
          }
          ASSERT_TRUE(dst.guard_intact());
        }
      }
    }
  }
}

// Eight sources whose exact sum rounds differently from a sum rounded to the
// half format after every step: 1 + 7 * (a quarter ulp of 1). Stepwise, each
// addition rounds back to 1; rounded once, 1.75 ulp rounds to 2 ulp.
TEST(Reduce, HalfTypesRoundOnce) {
  struct Case {
    DType dtype;
    uint16_t one, quarter_ulp, want;
  };
  // f16: ulp(1) = 2^-10, quarter = 2^-12 (0x0c00); want 1 + 2^-9 = 0x3c02.
  // bf16: ulp(1) = 2^-7, quarter = 2^-9 (0x3b00); want 1 + 2^-6 = 0x3f82.
  for (const Case& c : {Case{DType::f16, 0x3c00, 0x0c00, 0x3c02}, Case{DType::bf16, 0x3f80, 0x3b00, 0x3f82}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)));
    for (size_t count : {size_t{1}, size_t{33}, size_t{5000}}) {
      std::vector<std::vector<uint16_t>> srcs(8, std::vector<uint16_t>(count, c.quarter_ulp));
      srcs[0].assign(count, c.one);
      std::vector<const void*> ptrs;
      for (auto& s : srcs) ptrs.push_back(s.data());
      std::vector<uint16_t> dst(count, 0);
      reduce(ReduceOp::sum, c.dtype, dst.data(), ptrs, count);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(dst[i], c.want) << "count " << count << " element " << i;
      // In place, through the same path the collectives use.
      ptrs[0] = srcs[0].data();
      reduce(ReduceOp::sum, c.dtype, srcs[0].data(), ptrs, count);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(srcs[0][i], c.want) << "in place, element " << i;

      // Pairwise reduction (what a tree of 2-source calls would do) loses it.
      std::vector<uint16_t> acc(count, c.one);
      for (size_t k = 1; k < 8; ++k) reduce2(ReduceOp::sum, c.dtype, acc.data(), acc.data(), srcs[k].data(), count);
      EXPECT_EQ(acc[0], c.one) << "the test values must distinguish rounding once from rounding per step";
    }
  }
}

// The vectorised f16/bf16 paths (F16C / AVX-512 when present) agree bit for
// bit with the scalar conversions, over every half value including
// subnormals, infinities and NaNs.
TEST(Reduce, HalfKernelsAgreeWithScalarConversions) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    auto to_f32 = dtype == DType::f16 ? f16_to_f32 : bf16_to_f32;
    auto from_f32 = dtype == DType::f16 ? f32_to_f16 : f32_to_bf16;
    std::vector<uint16_t> all(65536), minus_zero(65536, 0x8000), out(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
    // x + (-0) == x for every x, so this is widen then narrow of every value.
    reduce2(ReduceOp::sum, dtype, out.data(), all.data(), minus_zero.data(), all.size());
    for (uint32_t h = 0; h < 65536; ++h)
      ASSERT_EQ(out[h], from_f32(to_f32(static_cast<uint16_t>(h)))) << std::hex << h;

    // Random pairs of arbitrary bit patterns through every op.
    std::mt19937_64 rng(7);
    std::vector<uint16_t> a(100003), b(a.size());
    out.resize(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<uint16_t>(rng());
      b[i] = static_cast<uint16_t>(rng());
    }
    for (ReduceOp op : kAllReduceOps) {
      SCOPED_TRACE(std::string(reduce_op_name(op)));
      reduce2(op, dtype, out.data(), a.data(), b.data(), a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const float x = to_f32(a[i]), y = to_f32(b[i]);
        float r = 0;
        switch (op) {
          case ReduceOp::sum: r = x + y; break;
          // The mean rounded once to f32 (the double sum of two halves is
          // exact where it matters), then to the half by the comparison below.
          case ReduceOp::avg: r = static_cast<float>((double(x) + double(y)) / 2); break;
          case ReduceOp::product: r = x * y; break;
          case ReduceOp::min: r = std::isnan(x) || std::isnan(y) ? NAN : std::fmin(x, y); break;
          case ReduceOp::max: r = std::isnan(x) || std::isnan(y) ? NAN : std::fmax(x, y); break;
        }
        const float got = to_f32(out[i]);
        if (std::isnan(r)) {
          ASSERT_TRUE(std::isnan(got)) << i;
        } else if (r == 0 && (op == ReduceOp::min || op == ReduceOp::max)) {
          ASSERT_EQ(got, 0.0f) << i;  // the sign of a zero from min(+0, -0) is unspecified
        } else {
          ASSERT_EQ(out[i], from_f32(r)) << i << ": " << x << " op " << y;
        }
      }
    }
  }
}

template <typename T>
void expect_nan_propagates(DType dtype, T nan, T one, T two, bool (*isnan_of)(T)) {
  SCOPED_TRACE(std::string(dtype_name(dtype)));
  constexpr size_t kCount = 101;
  for (ReduceOp op : {ReduceOp::min, ReduceOp::max, ReduceOp::sum}) {
    std::vector<T> a(kCount, one), b(kCount, two), out(kCount);
    for (size_t i = 0; i < kCount; i += 7) a[i] = nan;
    for (size_t i = 3; i < kCount; i += 11) b[i] = nan;
    reduce2(op, dtype, out.data(), a.data(), b.data(), kCount);
    for (size_t i = 0; i < kCount; ++i) {
      const bool want_nan = isnan_of(a[i]) || isnan_of(b[i]);
      EXPECT_EQ(isnan_of(out[i]), want_nan) << reduce_op_name(op) << " element " << i;
    }
  }
}

TEST(Reduce, FloatMinMaxPropagateNaNFromEitherSide) {
  expect_nan_propagates<float>(DType::f32, NAN, 1.0f, 2.0f, [](float x) { return std::isnan(x); });
  expect_nan_propagates<double>(DType::f64, NAN, 1.0, 2.0, [](double x) { return std::isnan(x); });
  expect_nan_propagates<uint16_t>(DType::f16, 0x7e00, 0x3c00, 0x4000, [](uint16_t h) { return F16Ref::is_nan(h); });
  expect_nan_propagates<uint16_t>(DType::bf16, 0x7fc0, 0x3f80, 0x4000,
                                  [](uint16_t h) { return Bf16Ref::is_nan(h); });
}

template <typename T>
void expect_binary(DType dtype, ReduceOp op, T a, T b, T want) {
  constexpr size_t kCount = 67;  // vector body and scalar tail
  std::vector<T> x(kCount, a), y(kCount, b), out(kCount);
  reduce2(op, dtype, out.data(), x.data(), y.data(), kCount);
  for (size_t i = 0; i < kCount; ++i)
    ASSERT_EQ(out[i], want) << dtype_name(dtype) << " " << reduce_op_name(op) << " of " << +a << ", " << +b
                            << " at " << i;
}

TEST(Reduce, IntegerOverflowWraps) {
  using L8 = std::numeric_limits<int8_t>;
  using L32 = std::numeric_limits<int32_t>;
  using L64 = std::numeric_limits<int64_t>;
  expect_binary<int8_t>(DType::i8, ReduceOp::sum, L8::max(), 1, L8::min());
  expect_binary<int8_t>(DType::i8, ReduceOp::sum, L8::min(), -1, L8::max());
  expect_binary<int8_t>(DType::i8, ReduceOp::product, 16, 16, 0);
  expect_binary<int8_t>(DType::i8, ReduceOp::product, L8::min(), -1, L8::min());
  expect_binary<int8_t>(DType::i8, ReduceOp::product, 100, 3, 44);
  expect_binary<uint8_t>(DType::u8, ReduceOp::sum, 255, 1, 0);
  expect_binary<uint8_t>(DType::u8, ReduceOp::product, 16, 17, 16);
  expect_binary<uint8_t>(DType::u8, ReduceOp::product, 255, 255, 1);
  expect_binary<int32_t>(DType::i32, ReduceOp::sum, L32::max(), 1, L32::min());
  expect_binary<int32_t>(DType::i32, ReduceOp::product, 65536, 65536, 0);
  expect_binary<int32_t>(DType::i32, ReduceOp::product, L32::min(), -1, L32::min());
  expect_binary<int64_t>(DType::i64, ReduceOp::sum, L64::min(), -1, L64::max());
  expect_binary<int64_t>(DType::i64, ReduceOp::product, int64_t{1} << 32, int64_t{1} << 32, 0);
  expect_binary<int64_t>(DType::i64, ReduceOp::product, L64::max(), 3, L64::max() - 2);
  // Signedness of comparisons.
  expect_binary<int8_t>(DType::i8, ReduceOp::min, -128, 127, -128);
  expect_binary<uint8_t>(DType::u8, ReduceOp::max, 128, 127, 128);
  expect_binary<int64_t>(DType::i64, ReduceOp::max, L64::min(), -1, -1);
}

TEST(Reduce, OneSourceIsACopyAndZeroCountTouchesNothing) {
  std::vector<float> src{1.5f, -2.0f, NAN}, dst(3, 0.0f);
  const void* one[] = {src.data()};
  reduce(ReduceOp::product, DType::f32, dst.data(), one, 3);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), sizeof(float) * 3), 0);
  // A signalling NaN f16 is copied bit for bit, not converted.
  std::vector<uint16_t> h{0x7c01}, hout{0};
  const void* hs[] = {h.data()};
  reduce(ReduceOp::sum, DType::f16, hout.data(), hs, 1);
  EXPECT_EQ(hout[0], 0x7c01);
  const void* nulls[] = {nullptr, nullptr};
  EXPECT_NO_THROW(reduce(ReduceOp::sum, DType::f32, nullptr, nulls, 0));
}

TEST(Reduce, RejectsBadArguments) {
  std::vector<float> a(4), b(4);
  EXPECT_THROW(reduce(ReduceOp::sum, DType::f32, a.data(), std::span<const void* const>(), 4), Error);
  const void* alias_second[] = {b.data(), a.data()};
  EXPECT_THROW(reduce(ReduceOp::sum, DType::f32, a.data(), alias_second, 4), Error);
  const void* with_null[] = {a.data(), nullptr};
  EXPECT_THROW(reduce(ReduceOp::sum, DType::f32, b.data(), with_null, 4), Error);
}

// Averages of halves whose sum does not fit the type: the 8 x 9000.0
// in f16, and random values near the top of f16's and bf16's ranges, from 2
// to 8 sources. The result must be the float64 mean rounded once, both from
// reduce() with all sources at once (the shm backend) and through
// widen_for_average, an f32 sum in another order, and narrow_average (the
// backends that add partial sums on the way).
TEST(Reduce, HalfAveragesDivideBeforeRounding) {
  std::mt19937_64 rng(11);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const auto encode = dtype == DType::f16 ? F16Ref::encode : Bf16Ref::encode;
    const auto decode = dtype == DType::f16 ? F16Ref::decode : Bf16Ref::decode;
    for (size_t nsrc = 2; nsrc <= 8; ++nsrc) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(nsrc) + " sources");
      const size_t count = 1001;  // vector bodies and a scalar tail
      std::vector<std::vector<uint16_t>> srcs(nsrc, std::vector<uint16_t>(count));
      for (auto& src : srcs)
        for (size_t i = 0; i < count; ++i) {
          const double v = dtype == DType::f16 ? 32.0 * double(1024 + rng() % 1024)       // [32768, 65504]
                                               : std::ldexp(double(128 + rng() % 128), 120);  // to 3.39e38
          src[i] = encode(i == 0 && dtype == DType::f16 ? 9000.0 : v);
        }
      std::vector<const void*> ptrs;
      for (auto& src : srcs) ptrs.push_back(src.data());
      std::vector<uint16_t> kernel(count), wire(count);
      reduce(ReduceOp::avg, dtype, kernel.data(), ptrs, count);

      std::vector<float> sum(count, 0.0f), terms(count);
      for (size_t k = nsrc; k-- > 0;) {
        widen_for_average(dtype, srcs[k].data(), terms.data(), count, int(nsrc));
        for (size_t i = 0; i < count; ++i) sum[i] += terms[i];
      }
      narrow_average(dtype, sum.data(), wire.data(), count, int(nsrc));

      for (size_t i = 0; i < count; ++i) {
        double mean = 0;
        for (auto& src : srcs) mean += decode(src[i]);
        const uint16_t want = encode(mean / double(nsrc));
        ASSERT_EQ(kernel[i], want) << "reduce, element " << i << ": mean " << mean / double(nsrc);
        ASSERT_EQ(wire[i], want) << "widen/narrow, element " << i << ": mean " << mean / double(nsrc);
      }
      if (dtype == DType::f16) {
        ASSERT_EQ(kernel[0], F16Ref::encode(9000.0));
      }
    }
  }
}

TEST(Reduce, WidenAndNarrowAreForHalvesOnly) {
  std::vector<float> f(4), wide(4);
  EXPECT_THROW(widen_for_average(DType::f32, f.data(), wide.data(), 4, 2), Error);
  EXPECT_THROW(narrow_average(DType::i32, wide.data(), f.data(), 4, 2), Error);
  std::vector<uint16_t> h(4);
  EXPECT_THROW(narrow_average(DType::f16, wide.data(), h.data(), 4, 0), Error);
}

TEST(FinishAverage, FloatsDivideWithOneRounding) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> dist(-1000, 1000);
  for (int n : {2, 3, 7}) {
    std::vector<float> f(1001);
    std::vector<double> d(1001);
    for (size_t i = 0; i < f.size(); ++i) {
      f[i] = static_cast<float>(dist(rng));
      d[i] = dist(rng);
    }
    std::vector<float> f0 = f;
    std::vector<double> d0 = d;
    finish_average(DType::f32, f.data(), f.size(), n);
    finish_average(DType::f64, d.data(), d.size(), n);
    for (size_t i = 0; i < f.size(); ++i) {
      const double exact = static_cast<double>(f0[i]) / n;
      const double half_ulp = std::fabs(std::nextafter(f[i], INFINITY) - f[i]) / 2;
      ASSERT_LE(std::fabs(f[i] - exact), half_ulp) << "f32 " << f0[i] << " / " << n;
      ASSERT_EQ(d[i], d0[i] / n) << "f64 " << d0[i] << " / " << n;
    }
  }
}

TEST(FinishAverage, HalvesDivideInF32AndRoundOnce) {
  std::mt19937_64 rng(4);
  for (int n : {2, 3, 5, 7, 8}) {
    std::vector<uint16_t> h(4099), b(4099);
    std::vector<double> hv(h.size()), bv(b.size());
    for (size_t i = 0; i < h.size(); ++i) {
      hv[i] = (static_cast<double>(rng() % 4095) - 2047) / 64;  // exact in f16
      bv[i] = (static_cast<double>(rng() % 511) - 255) / 8;     // exact in bf16
      h[i] = F16Ref::encode(hv[i]);
      b[i] = Bf16Ref::encode(bv[i]);
    }
    finish_average(DType::f16, h.data(), h.size(), n);
    finish_average(DType::bf16, b.data(), b.size(), n);
    for (size_t i = 0; i < h.size(); ++i) {
      ASSERT_EQ(h[i], F16Ref::encode(hv[i] / n)) << "f16 " << hv[i] << " / " << n;
      ASSERT_EQ(b[i], Bf16Ref::encode(bv[i] / n)) << "bf16 " << bv[i] << " / " << n;
    }
  }
}

template <typename T>
void expect_integer_average(DType dtype, std::vector<T> values, int n) {
  std::vector<T> buf = values;
  finish_average(dtype, buf.data(), buf.size(), n);
  for (size_t i = 0; i < values.size(); ++i) {
    // Truncation toward zero, computed exactly in 64 bits.
    const int64_t want = static_cast<int64_t>(values[i]) / n;
    ASSERT_EQ(static_cast<int64_t>(buf[i]), want) << dtype_name(dtype) << " " << +values[i] << " / " << n;
  }
}

TEST(FinishAverage, IntegersTruncateTowardZero) {
  expect_integer_average<int32_t>(DType::i32, {-7, 7, 5, -5, 0, std::numeric_limits<int32_t>::min(),
                                              std::numeric_limits<int32_t>::max()}, 2);
  expect_integer_average<int8_t>(DType::i8, {-128, 127, -1, 1, -3, 3, 100}, 3);
  expect_integer_average<int8_t>(DType::i8, {-128, 127, 99}, 200);  // more contributors than i8 holds
  expect_integer_average<uint8_t>(DType::u8, {255, 254, 1, 0, 128}, 2);
  expect_integer_average<uint8_t>(DType::u8, {255, 17}, 1000);
  expect_integer_average<int64_t>(DType::i64, {std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max(), -9, 9}, 4);
  // Random values over every integer type and a few contributor counts.
  std::mt19937_64 rng(5);
  for (int n : {3, 7, 8}) {
    std::vector<int64_t> v64(257);
    std::vector<int32_t> v32(257);
    std::vector<int8_t> v8(257);
    for (size_t i = 0; i < v64.size(); ++i) {
      v64[i] = static_cast<int64_t>(rng());
      v32[i] = static_cast<int32_t>(rng());
      v8[i] = static_cast<int8_t>(rng());
    }
    expect_integer_average(DType::i64, v64, n);
    expect_integer_average(DType::i32, v32, n);
    expect_integer_average(DType::i8, v8, n);
  }
}

TEST(FinishAverage, OneContributorIsIdentityAndNonPositiveThrows) {
  std::vector<float> f{1.5f, -3.0f};
  finish_average(DType::f32, f.data(), f.size(), 1);
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], -3.0f);
  EXPECT_THROW(finish_average(DType::f32, f.data(), f.size(), 0), Error);
  EXPECT_THROW(finish_average(DType::i32, f.data(), 1, -2), Error);
}

}  // namespace
}  // namespace cohort::reduce_test
