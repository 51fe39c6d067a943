#include "cohort/data/min_max.h"

#include <algorithm>
#include <limits>

#include "cohort/data/feature_values.h"
#include "cohort/data/gather_bytes.h"

namespace cohort::data {

MinMax::MinMax(size_t columns)
    : min_(columns, std::numeric_limits<double>::infinity()), max_(columns, -std::numeric_limits<double>::infinity()) {
  COHORT_CHECK_AS(ConfigError, columns >= 1) << "MinMax needs at least one column";
}

void MinMax::add(double x, size_t column) {
  min_[column] = std::min(min_[column], x);
  max_[column] = std::max(max_[column], x);
}

void MinMax::add(const Feature& f) {
  for_each_value(f, columns(), [&](double x, size_t c) { add(x, c); });
}

void MinMax::merge(const MinMax& other) {
  COHORT_CHECK_EQ(other.columns(), columns()) << "merging statistics of different widths";
  for (size_t c = 0; c < columns(); ++c) {
    min_[c] = std::min(min_[c], other.min_[c]);
    max_[c] = std::max(max_[c], other.max_[c]);
  }
}

void MinMax::merge_across(const AllgatherBytes& allgather) {
  ByteWriter w;
  for (size_t c = 0; c < columns(); ++c) {
    w.f64(min_[c]);
    w.f64(max_[c]);
  }
  for (const auto& bytes : allgather(w.data())) {
    ByteReader r(bytes, "MinMax");
    MinMax other(columns());
    for (size_t c = 0; c < columns(); ++c) {
      other.min_[c] = r.f64();
      other.max_[c] = r.f64();
    }
    merge(other);
  }
}

}  // namespace cohort::data
