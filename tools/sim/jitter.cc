#include "tools/sim/jitter.h"

#include <algorithm>
#include <cmath>

namespace cohort::sim {

namespace {

// The p-quantile of sorted values, linear between order statistics.
double quantile(const std::vector<double>& sorted, double p) {
  const double h = p * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (h - double(lo)) * (sorted[lo + 1] - sorted[lo]);
}

}  // namespace

double slowest_of(std::vector<double> periods, int ranks) {
  if (ranks <= 1 || periods.size() < 2) return 1;
  std::sort(periods.begin(), periods.end());
  const double median = quantile(periods, 0.5);
  if (!(median > 0)) return 1;
  return std::max(1.0, quantile(periods, std::pow(0.5, 1.0 / ranks)) / median);
}

}  // namespace cohort::sim
