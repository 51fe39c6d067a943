// The log-space helpers against direct float64 (or long double)
// evaluation where that is representable, and continuity where it is not.
#include <gtest/gtest.h>

#include <cmath>

#include "cohort/privacy/log_space.h"

namespace cohort::privacy::log_space_test {
namespace {

TEST(LogSpace, AddAndSubtract) {
  EXPECT_NEAR(log_add(std::log(2.0), std::log(3.0)), std::log(5.0), 1e-15);
  EXPECT_EQ(log_add(-INFINITY, 1.5), 1.5);
  EXPECT_NEAR(log_add(1000, 1000), 1000 + std::log(2.0), 1e-12);
  EXPECT_NEAR(log_sub(std::log(5.0), std::log(3.0)), std::log(2.0), 1e-15);
  EXPECT_EQ(log_sub(2.0, 2.0), -INFINITY);
  EXPECT_EQ(log_sub(2.0, -INFINITY), 2.0);
}

TEST(LogSpace, LogErfcMatchesErfcAndContinuesPastUnderflow) {
  for (double x = -5; x < 26; x += 0.37)
    EXPECT_NEAR(log_erfc(x), std::log(std::erfc(x)), 1e-13 * std::max(1.0, std::fabs(std::log(std::erfc(x)))))
        << x;
  // long double's erfcl still resolves 20..100 (it underflows near 106).
  for (double x = 19.5; x < 100; x += 3.1) {
    const long double reference = std::log(std::erfc(static_cast<long double>(x)));
    EXPECT_NEAR(log_erfc(x), static_cast<double>(reference), 1e-14 * std::fabs(static_cast<double>(reference)))
        << x;
  }
  EXPECT_NEAR(log_erfc(1e6), -1e12 - std::log(1e6) - 0.5 * std::log(M_PI), 1e-3);
}

TEST(LogSpace, BinomialsWithSigns) {
  // binom(1.5, 3) = 1.5 * 0.5 * (-0.5) / 6 = -0.0625
  const SignedLog b = log_binomial(1.5, 3);
  EXPECT_EQ(b.sign, -1);
  EXPECT_NEAR(std::exp(b.log_abs), 0.0625, 1e-16);
  EXPECT_NEAR(std::exp(log_binomial(10, 3).log_abs), 120, 1e-12);
  EXPECT_EQ(log_binomial(10, 3).sign, 1);
  EXPECT_EQ(log_binomial(5, 7).log_abs, -INFINITY);  // zero
  EXPECT_NEAR(log_binomial(1024, 512).log_abs, std::lgamma(1025.0) - 2 * std::lgamma(513.0), 1e-9);
}

}  // namespace
}  // namespace cohort::privacy::log_space_test
