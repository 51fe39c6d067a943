#include "cohort/privacy/quadrature.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "cohort/common/check.h"

namespace cohort::privacy {
namespace {

constexpr int kPoints = 20;

struct GaussLegendre {
  std::array<double, kPoints> nodes{}, weights{};

  // The roots of P_20 by Newton's method from Chebyshev guesses, in long
  // double so the float64 rule is exact to the last bit.
  GaussLegendre() {
    for (int i = 0; i < kPoints; ++i) {
      long double x = std::cos(M_PI * (i + 0.75) / (kPoints + 0.5)), derivative = 0;
      for (int iteration = 0; iteration < 100; ++iteration) {
        long double p0 = 1, p1 = x;  // P_0, P_1, then the recurrence up to P_20
        for (int k = 2; k <= kPoints; ++k) {
          const long double pk = ((2 * k - 1) * x * p1 - (k - 1) * p0) / k;
          p0 = p1;
          p1 = pk;
        }
        derivative = kPoints * (x * p1 - p0) / (x * x - 1);
        const long double step = p1 / derivative;
        x -= step;
        if (std::fabs(step) < 1e-19L) break;
      }
      nodes[i] = static_cast<double>(x);
      weights[i] = static_cast<double>(2 / ((1 - x * x) * derivative * derivative));
    }
  }

  double panel(const std::function<double(double)>& f, double a, double b) const {
    const double half = 0.5 * (b - a), middle = 0.5 * (a + b);
    double sum = 0;
    for (int i = 0; i < kPoints; ++i) sum += weights[i] * f(middle + half * nodes[i]);
    return half * sum;
  }
};

const GaussLegendre& rule() {
  static const GaussLegendre instance;
  return instance;
}

double adapt(const std::function<double(double)>& f, double a, double b, double whole, double tolerance,
             int depth) {
  const double middle = 0.5 * (a + b);
  const double left = rule().panel(f, a, middle), right = rule().panel(f, middle, b);
  // Below a few ulps of the panels the halves cannot agree any better.
  const double floor = 1e-15 * (std::fabs(left) + std::fabs(right));
  if (std::fabs(left + right - whole) <= std::max(tolerance, floor) || depth >= 50) return left + right;
  return adapt(f, a, middle, left, tolerance / 2, depth + 1) + adapt(f, middle, b, right, tolerance / 2, depth + 1);
}

}  // namespace

double integrate(const std::function<double(double)>& f, double a, double b, double abs_tolerance) {
  COHORT_CHECK_LE(a, b) << "integration bounds are reversed";
  COHORT_CHECK_GT(abs_tolerance, 0);
  if (a == b) return 0;
  return adapt(f, a, b, rule().panel(f, a, b), abs_tolerance, 0);
}

}  // namespace cohort::privacy
