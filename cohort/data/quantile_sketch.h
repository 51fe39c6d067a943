// QuantileSketch: approximate quantiles of a stream of numbers in bounded
// memory, mergeable across ranks, with a stated, rigorous error bound.
//
// A hierarchy of compactors (Manku, Rajagopalan, Lindsay, SIGMOD 1998; the
// structure KLL refines): level h holds values that each stand for 2^h
// inputs. When a level holds k values it sorts them and promotes every
// other one (alternating which half, deterministically) to level h+1. For
// any x, a compaction at level h changes the estimated rank of x (the
// weight of retained values <= x) by at most 2^h: of each promoted pair at
// most the one pair straddling x is misjudged. The sketch adds those 2^h
// as it compacts, so rank_error_bound() is a proven bound for this stream,
// not an estimate: |estimated rank(x) - true rank(x)| <= rank_error_bound()
// for every x. A priori it is at most (n/k)(log2(n/k) + 1) for n values;
// merging adds the bounds of the parts plus the merge's own compactions.
// Memory: at most k values per level, log2(n/k) + 1 levels.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/data/gather_bytes.h"
#include "cohort/data/feature.h"

namespace cohort::data {

class QuantileSketch {
 public:
  // k: values per level, even, >= 2. Larger k: smaller bound, more memory.
  explicit QuantileSketch(size_t k = 2048);

  void add(double x);  // NaN is a ConfigError
  void add(const Feature& f);  // every element of a dense feature
  void merge(const QuantileSketch& other);  // same k
  // Collective: every rank ends with the same merged sketch (rank order).
  void merge_across(const AllgatherBytes& allgather);

  uint64_t count() const { return count_; }
  uint64_t rank_error_bound() const { return error_; }
  // The smallest retained value whose estimated rank reaches q * count()
  // (q in [0, 1]); its true rank is within rank_error_bound() of q * count().
  double quantile(double q) const;
  // Boundaries of `buckets` buckets of about equal count: quantiles at
  // i / buckets for i = 1 .. buckets-1, deduplicated.
  std::vector<double> boundaries(size_t buckets) const;
  // Estimated count of values <= x.
  uint64_t rank(double x) const;

  std::vector<uint8_t> serialize() const;
  static QuantileSketch deserialize(std::span<const uint8_t> bytes);

 private:
  void compact(size_t level);
  // (value, weight) of every retained value, sorted by value.
  std::vector<std::pair<double, uint64_t>> weighted() const;

  size_t k_;
  std::vector<std::vector<double>> levels_;
  std::vector<bool> odd_;  // per level: which half the next compaction keeps
  uint64_t count_ = 0;
  uint64_t error_ = 0;
};

}  // namespace cohort::data
