// The regression rows elastic_program trains on, as closed forms of the
// row index: the program builds its dataset from them and elastic_test's
// float64 reference replays training over them.
#pragma once

#include <cmath>
#include <cstdint>

namespace cohort::testing {

constexpr int kElasticFeatures = 3;

inline double elastic_feature(int64_t i, int j) { return std::sin(0.37 * double(i + 1) * (j + 1)); }

inline double elastic_target(int64_t i) {
  return 1.5 * elastic_feature(i, 0) - 2.0 * elastic_feature(i, 1) + 0.5 * elastic_feature(i, 2) +
         0.1 * std::cos(double(i));
}

}  // namespace cohort::testing
