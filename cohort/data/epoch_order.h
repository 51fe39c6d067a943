// EpochOrder: the order in which an epoch visits a source's samples, as a
// map from a position (0 .. size-1) to a sample index, computed on demand.
//
//   Sharding::by_record  position p is sample perm(p), perm an
//                        IndexPermutation keyed by (seed, epoch) (the
//                        identity without shuffle). Ranks are dealt
//                        positions round-robin (epoch_plan.h).
//   Sharding::by_file    files are visited in a permuted order (keyed the
//                        same way), each file's samples in file order, so a
//                        rank reads whole files sequentially. Positions run
//                        through the files in that order; file_starts()
//                        gives each visited file's first position.
//
// Positions are what a cursor records (cursor.h): they mean the same thing
// for every world size, which is why a job can resume on another.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/data/index_permutation.h"
#include "cohort/data/order_options.h"

namespace cohort::data {

class EpochOrder {
 public:
  // `file_sizes`: samples per file of the source, in source order.
  EpochOrder(const std::vector<uint64_t>& file_sizes, OrderOptions options, int64_t epoch);

  uint64_t size() const { return size_; }
  uint64_t sample_at(uint64_t position) const;
  // by_file: the first position of each file in visiting order, then size();
  // by_record: {0, size()}.
  const std::vector<uint64_t>& file_starts() const { return visit_starts_; }

 private:
  OrderOptions options_;
  uint64_t size_ = 0;
  IndexPermutation records_;
  std::vector<uint64_t> visit_starts_;    // positions where each visited file begins
  std::vector<uint64_t> visited_source_;  // the source's first sample of each visited file
};

}  // namespace cohort::data
