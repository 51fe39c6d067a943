// MeanVariance: count, mean and variance of a feature's values in one pass,
// mergeable: Welford's update per value, and Chan, Golub and LeVeque's
// pairwise combination ("Updating formulae and a pairwise algorithm for
// computing sample variances", 1979) to merge two partial results. Both are
// numerically stable (no sum of squares), in float64, and run on values
// shifted by each column's first value, so data far from zero keeps its
// precision.
//
// `columns` independent statistics (feature_values.h): 1 gathers every element of a feature
// into one (a data set's pixel mean), n keeps element i of each value in
// column i (a per-pixel mean; the feature must have n elements).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/data/gather_bytes.h"
#include "cohort/data/feature.h"

namespace cohort::data {

class MeanVariance {
 public:
  explicit MeanVariance(size_t columns = 1);

  void add(double x, size_t column = 0);
  // Every element of `f` (dense, any dtype): into column 0 when columns()
  // is 1, else element i into column i % columns() (rows of a batch).
  void add(const Feature& f);
  void merge(const MeanVariance& other);
  // Collective: every rank ends with the merge of all ranks' values, merged
  // in rank order (the same bits on every rank).
  void merge_across(const AllgatherBytes& allgather);

  size_t columns() const { return n_.size(); }
  double count(size_t column = 0) const { return n_[column]; }
  double mean(size_t column = 0) const { return shift_[column] + mean_[column]; }
  // Population variance (divided by the count); 0 for fewer than 2 values.
  double variance(size_t column = 0) const;
  double stddev(size_t column = 0) const;

  std::vector<uint8_t> serialize() const;
  static MeanVariance deserialize(std::span<const uint8_t> bytes);

 private:
  // Per column: count, the first value (shift), mean and sum of squared
  // deviations of the values minus the shift.
  std::vector<double> n_, shift_, mean_, m2_;
};

}  // namespace cohort::data
