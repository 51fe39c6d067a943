// Numerical integration of smooth functions on a finite interval, to an
// absolute tolerance: adaptive Gauss-Legendre (20 points per panel, a panel
// halved until the two halves agree with the whole within its share of the
// tolerance, or within rounding of the panels' size). The PRV accountant
// integrates a CDF with it.
#pragma once

#include <functional>

namespace cohort::privacy {

// The integral of f over [a, b] (a <= b). Intervals that still disagree at
// depth 50 (a non-smooth f) are accepted as they are.
double integrate(const std::function<double(double)>& f, double a, double b, double abs_tolerance);

}  // namespace cohort::privacy
