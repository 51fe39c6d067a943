#include "cohort/privacy/log_space.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cohort/common/check.h"

namespace cohort::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log|Gamma(x)| and the sign of Gamma(x). lgamma_r instead of std::lgamma:
// the latter writes the global signgam, a data race when ranks (threads)
// account concurrently.
double log_abs_gamma(double x, int* sign) { return ::lgamma_r(x, sign); }

}  // namespace

double log_add(double a, double b) {
  const double lo = std::min(a, b), hi = std::max(a, b);
  if (lo == -kInf) return hi;
  return std::log1p(std::exp(lo - hi)) + hi;
}

double log_sub(double a, double b) {
  COHORT_CHECK_GE(a, b) << "log_sub would be negative";
  if (b == -kInf) return a;
  if (a == b) return -kInf;
  // exp(a) - exp(b) = exp(a) * (1 - exp(b - a)), without overflow.
  return a + std::log(-std::expm1(b - a));
}

double log_erfc(double x) {
  // erfc keeps full relative accuracy until it underflows near x = 26.5.
  if (x < 20) return std::log(std::erfc(x));
  // Asymptotic expansion: erfc(x) = exp(-x^2) / (x sqrt(pi)) * S, with
  // S = sum_k (-1)^k (2k-1)!! / (2x^2)^k. At x >= 20 the terms shrink by at
  // least (2k-1)/800 each, so 12 terms are below 1e-30 of the sum.
  const double inv_2x2 = 1.0 / (2.0 * x * x);
  double term = 1.0, sum = 1.0;
  for (int k = 1; k <= 12; ++k) {
    term *= -(2.0 * k - 1.0) * inv_2x2;
    sum += term;
  }
  return -x * x - std::log(x) - 0.5 * std::log(M_PI) + std::log(sum);
}

SignedLog log_binomial(double n, double k) {
  // binom(n, k) = Gamma(n+1) / (Gamma(k+1) Gamma(n-k+1)); Gamma(n+1) > 0 for
  // the n >= 0 used here, Gamma(k+1) > 0, so the sign is that of
  // Gamma(n-k+1), whose poles (n-k+1 a non-positive integer) are the zeros.
  const double rest = n - k + 1.0;
  if (rest <= 0 && rest == std::floor(rest)) return {-kInf, 1};
  int sign_n = 1, sign_k = 1, sign_rest = 1;
  const double value = log_abs_gamma(n + 1.0, &sign_n) - log_abs_gamma(k + 1.0, &sign_k) -
                       log_abs_gamma(rest, &sign_rest);
  return {value, sign_n * sign_k * sign_rest};
}

}  // namespace cohort::privacy
