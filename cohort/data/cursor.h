// Cursor: how far a pipeline's epoch has got, across all ranks, as a few
// numbers. It is what goes into a checkpoint.
//
// An epoch visits positions 0 .. size-1 (epoch_order.h). The cursor says
// which positions have been delivered: every one below `consumed`, plus the
// ranges in `also_consumed` (empty when batches are delivered in order; a
// few ranges when an out-of-order window or sharding by file left gaps).
// Positions are independent of the world size, so a cursor saved by N ranks
// resumes on M: the M ranks deal the positions not yet delivered among
// themselves (epoch_plan.h) and every remaining sample is delivered exactly
// once.
//
// The cursor also records the order it is valid for (data set size, seed,
// shuffle, sharding); restoring it into a pipeline with another order is a
// ConfigError.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/data/order_options.h"

namespace cohort::data {

struct PositionRange {
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive
  bool operator==(const PositionRange&) const = default;
};

struct Cursor {
  uint64_t dataset_size = 0;
  OrderOptions order;
  int64_t epoch = 0;
  uint64_t consumed = 0;
  std::vector<PositionRange> also_consumed;  // sorted, disjoint, non-adjacent, all above `consumed`

  // The positions delivered so far.
  uint64_t delivered() const;
  bool epoch_done() const { return delivered() == dataset_size; }
  // The first position of the next epoch.
  Cursor next_epoch() const;

  // One line of text: "cohort-data-cursor v1 size=60000 seed=7 shuffle=1
  // sharding=record epoch=3 consumed=1280 also=1300-1302,1400-1401".
  std::string to_string() const;
  // ConfigError naming the problem for text to_string() did not write.
  static Cursor parse(std::string_view text);
  // ConfigError unless the invariants above hold.
  void validate() const;

  bool operator==(const Cursor&) const = default;
};

// A cursor at the start of `epoch`.
Cursor epoch_start(uint64_t dataset_size, OrderOptions order, int64_t epoch);

// Normalises `ranges` (any order, may touch) together with [0, consumed)
// into a cursor's form. Error when two ranges overlap: a position delivered
// twice is a bug the caller must hear about.
void normalise(uint64_t& consumed, std::vector<PositionRange>& ranges);

}  // namespace cohort::data
