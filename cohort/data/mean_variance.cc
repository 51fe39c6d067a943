#include "cohort/data/mean_variance.h"

#include <cmath>

#include "cohort/data/feature_values.h"
#include "cohort/data/gather_bytes.h"

namespace cohort::data {

MeanVariance::MeanVariance(size_t columns) : n_(columns, 0), shift_(columns, 0), mean_(columns, 0), m2_(columns, 0) {
  COHORT_CHECK_AS(ConfigError, columns >= 1) << "MeanVariance needs at least one column";
}

void MeanVariance::add(double x, size_t column) {
  double& n = n_[column];
  // Values are taken relative to the column's first value: for data far
  // from zero, x - shift is exact or nearly, and the running mean stays
  // small, so its updates lose nothing to the offset.
  if (n == 0) shift_[column] = x;
  const double y = x - shift_[column];
  double& mean = mean_[column];
  n += 1;
  const double delta = y - mean;
  mean += delta / n;
  m2_[column] += delta * (y - mean);
}

void MeanVariance::add(const Feature& f) {
  for_each_value(f, columns(), [&](double x, size_t c) { add(x, c); });
}

void MeanVariance::merge(const MeanVariance& other) {
  COHORT_CHECK_EQ(other.columns(), columns()) << "merging statistics of different widths";
  for (size_t c = 0; c < columns(); ++c) {
    const double na = n_[c], nb = other.n_[c];
    if (nb == 0) continue;
    if (na == 0) {
      n_[c] = nb;
      shift_[c] = other.shift_[c];
      mean_[c] = other.mean_[c];
      m2_[c] = other.m2_[c];
      continue;
    }
    // The other mean relative to this shift, then Chan et al.'s update.
    const double n = na + nb;
    const double delta = ((other.shift_[c] - shift_[c]) + other.mean_[c]) - mean_[c];
    mean_[c] += delta * (nb / n);
    m2_[c] += other.m2_[c] + delta * delta * (na * nb / n);
    n_[c] = n;
  }
}

void MeanVariance::merge_across(const AllgatherBytes& allgather) {
  MeanVariance all(columns());
  for (const auto& bytes : allgather(serialize())) all.merge(deserialize(bytes));
  *this = std::move(all);
}

double MeanVariance::variance(size_t column) const { return n_[column] < 2 ? 0 : m2_[column] / n_[column]; }

double MeanVariance::stddev(size_t column) const { return std::sqrt(variance(column)); }

std::vector<uint8_t> MeanVariance::serialize() const {
  ByteWriter w;
  w.u64(columns());
  for (size_t c = 0; c < columns(); ++c) {
    w.f64(n_[c]);
    w.f64(shift_[c]);
    w.f64(mean_[c]);
    w.f64(m2_[c]);
  }
  return std::move(w.data());
}

MeanVariance MeanVariance::deserialize(std::span<const uint8_t> bytes) {
  ByteReader r(bytes, "MeanVariance");
  MeanVariance mv(size_t(r.u64()));
  for (size_t c = 0; c < mv.columns(); ++c) {
    mv.n_[c] = r.f64();
    mv.shift_[c] = r.f64();
    mv.mean_[c] = r.f64();
    mv.m2_[c] = r.f64();
  }
  return mv;
}

}  // namespace cohort::data
