// MinMax: the smallest and largest value per column of a feature, in one
// mergeable pass (columns as in feature_values.h). Before any value, min is
// +inf and max -inf.
#pragma once

#include <cstddef>
#include <vector>

#include "cohort/data/gather_bytes.h"
#include "cohort/data/feature.h"

namespace cohort::data {

class MinMax {
 public:
  explicit MinMax(size_t columns = 1);
  void add(double x, size_t column = 0);
  void add(const Feature& f);
  void merge(const MinMax& other);
  // Collective: every rank ends with the extremes of all ranks.
  void merge_across(const AllgatherBytes& allgather);

  size_t columns() const { return min_.size(); }
  double min(size_t column = 0) const { return min_[column]; }
  double max(size_t column = 0) const { return max_[column]; }

 private:
  std::vector<double> min_, max_;
};

}  // namespace cohort::data
