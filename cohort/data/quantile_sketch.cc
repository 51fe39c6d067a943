#include "cohort/data/quantile_sketch.h"

#include <algorithm>
#include <cmath>

#include "cohort/common/check.h"
#include "cohort/data/feature_values.h"
#include "cohort/data/gather_bytes.h"

namespace cohort::data {

QuantileSketch::QuantileSketch(size_t k) : k_(k) {
  COHORT_CHECK_AS(ConfigError, k >= 2 && k % 2 == 0) << "quantile sketch: k must be even and >= 2, got " << k;
}

void QuantileSketch::add(double x) {
  COHORT_CHECK_AS(ConfigError, !std::isnan(x)) << "quantile sketch: NaN has no rank";
  if (levels_.empty()) {
    levels_.emplace_back().reserve(k_);
    odd_.push_back(false);
  }
  levels_[0].push_back(x);
  ++count_;
  if (levels_[0].size() >= k_) compact(0);
}

void QuantileSketch::add(const Feature& f) {
  for_each_value(f, 1, [&](double x, size_t) { add(x); });
}

void QuantileSketch::compact(size_t level) {
  for (size_t h = level; h < levels_.size() && levels_[h].size() >= k_; ++h) {
    if (h + 1 == levels_.size()) {  // before taking references into levels_
      levels_.emplace_back();
      odd_.push_back(false);
    }
    auto& values = levels_[h];
    auto& up = levels_[h + 1];
    std::sort(values.begin(), values.end());
    // An odd count leaves its largest value here; the rest pair up.
    const size_t pairs = values.size() / 2;
    const size_t offset = odd_[h] ? 1 : 0;
    for (size_t p = 0; p < pairs; ++p) up.push_back(values[2 * p + offset]);
    odd_[h] = !odd_[h];
    std::vector<double> rest(values.begin() + long(2 * pairs), values.end());
    values = std::move(rest);
    error_ += uint64_t(1) << h;
  }
}

void QuantileSketch::merge(const QuantileSketch& other) {
  COHORT_CHECK_EQ(other.k_, k_) << "merging quantile sketches of different k";
  if (levels_.size() < other.levels_.size()) {
    levels_.resize(other.levels_.size());
    odd_.resize(other.levels_.size(), false);
  }
  for (size_t h = 0; h < other.levels_.size(); ++h)
    levels_[h].insert(levels_[h].end(), other.levels_[h].begin(), other.levels_[h].end());
  count_ += other.count_;
  error_ += other.error_;
  for (size_t h = 0; h < levels_.size(); ++h)
    if (levels_[h].size() >= k_) compact(h);
}

void QuantileSketch::merge_across(const AllgatherBytes& allgather) {
  QuantileSketch all(k_);
  for (const auto& bytes : allgather(serialize())) all.merge(deserialize(bytes));
  *this = std::move(all);
}

std::vector<std::pair<double, uint64_t>> QuantileSketch::weighted() const {
  std::vector<std::pair<double, uint64_t>> all;
  for (size_t h = 0; h < levels_.size(); ++h)
    for (double v : levels_[h]) all.emplace_back(v, uint64_t(1) << h);
  std::sort(all.begin(), all.end());
  return all;
}

uint64_t QuantileSketch::rank(double x) const {
  uint64_t r = 0;
  for (size_t h = 0; h < levels_.size(); ++h)
    for (double v : levels_[h])
      if (v <= x) r += uint64_t(1) << h;
  return r;
}

double QuantileSketch::quantile(double q) const {
  COHORT_CHECK_AS(ConfigError, count_ > 0) << "quantile of an empty sketch";
  COHORT_CHECK_AS(ConfigError, q >= 0 && q <= 1) << "quantile " << q << " outside [0, 1]";
  const auto all = weighted();
  const double target = q * double(count_);
  uint64_t cumulative = 0;
  for (const auto& [value, weight] : all) {
    cumulative += weight;
    if (double(cumulative) >= target) return value;
  }
  return all.back().first;
}

std::vector<double> QuantileSketch::boundaries(size_t buckets) const {
  COHORT_CHECK_AS(ConfigError, buckets >= 1) << "boundaries of 0 buckets";
  std::vector<double> out;
  for (size_t i = 1; i < buckets; ++i) {
    const double b = quantile(double(i) / double(buckets));
    if (out.empty() || b > out.back()) out.push_back(b);
  }
  return out;
}

std::vector<uint8_t> QuantileSketch::serialize() const {
  ByteWriter w;
  w.u64(k_);
  w.u64(count_);
  w.u64(error_);
  w.u64(levels_.size());
  for (size_t h = 0; h < levels_.size(); ++h) {
    w.u64(odd_[h]);
    w.u64(levels_[h].size());
    for (double v : levels_[h]) w.f64(v);
  }
  return std::move(w.data());
}

QuantileSketch QuantileSketch::deserialize(std::span<const uint8_t> bytes) {
  ByteReader r(bytes, "QuantileSketch");
  QuantileSketch s(size_t(r.u64()));
  s.count_ = r.u64();
  s.error_ = r.u64();
  s.levels_.resize(size_t(r.u64()));
  s.odd_.resize(s.levels_.size());
  for (size_t h = 0; h < s.levels_.size(); ++h) {
    s.odd_[h] = r.u64() != 0;
    s.levels_[h].resize(size_t(r.u64()));
    for (double& v : s.levels_[h]) v = r.f64();
  }
  return s;
}

}  // namespace cohort::data
