// Small order statistics shared by the autotuner, the simulator's trace
// reader, the examples and the benchmarks.
#pragma once

#include <algorithm>
#include <vector>

namespace cohort {

// The median of v: the middle value, or the mean of the two middle values
// when v has an even count; 0 for an empty v (a run that measured nothing).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2) return upper;
  // The lower middle is the largest of the elements nth_element put before mid.
  return 0.5 * (*std::max_element(v.begin(), v.begin() + mid) + upper);
}

}  // namespace cohort
