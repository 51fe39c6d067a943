// Row-sparse batches: the distinct rows a batch touches.
//
// An embedding lookup of ids [5, 9, 5, 2] pulls rows [2, 5, 9] once and
// maps each id to its row (inverse [1, 2, 1, 0]); the gradient of the
// lookup, summed per distinct row, is pushed for the same rows. Pulls and
// pushes take the distinct rows sorted, which is also the order in which
// they split into contiguous shards.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cohort::ps {

struct SparseBatch {
  std::vector<int64_t> rows;     // distinct, ascending
  std::vector<int64_t> inverse;  // ids[i] == rows[inverse[i]]
};

SparseBatch deduplicate(std::span<const int64_t> ids);

// Sums `grads` (ids.size() rows of `cols`) into one row per distinct id, in
// the order of batch.rows.
template <typename T>
std::vector<T> sum_rows(const SparseBatch& batch, std::span<const T> grads, int64_t cols);

}  // namespace cohort::ps
