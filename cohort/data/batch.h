// Batch: what a pipeline delivers. The samples' features stacked into
// columns: a dense feature of shape S becomes one array of shape [n, S...]
// (n samples, contiguous, ready to wrap as a tensor); a bytes feature
// becomes one list of every sample's strings in sample order.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/data/feature.h"
#include "cohort/data/source.h"

namespace cohort::data {

struct Batch {
  int64_t epoch = 0;
  int64_t id = 0;                   // the batch's number in this rank's epoch stream
  std::vector<uint64_t> indices;    // the samples' indices in the source, in batch order
  std::vector<uint64_t> positions;  // their positions in the epoch's order
  Features columns;
  int64_t bad_records = 0;          // samples of this batch skipped as bad (OnBadRecord::skip)

  size_t size() const { return indices.size(); }
  size_t nbytes() const { return columns.nbytes(); }
};

// Stacks `samples` (all with the same feature names, dtypes and shapes).
// ConfigError naming the two samples (through `source`'s describe(), when
// given) when a feature is missing or differs in kind, dtype or shape.
Features collate(const std::vector<Sample>& samples, const Source* source = nullptr);

}  // namespace cohort::data
