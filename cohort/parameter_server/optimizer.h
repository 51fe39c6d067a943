// Server-side update rules: torch.optim's SGD (momentum, weight decay),
// Adam and Adagrad, applied to a shard's values with the shard's own state
// (momentum buffer; first and second moments; accumulated squares), dense
// or to chosen rows. The rules follow LibTorch 1.13's formulas term by term,
// so a synchronous parameter server reproduces the single-process result.
//
// Rows: apply_rows updates only the given rows, values and state alike
// (SparseAdam's and sparse Adagrad's "lazy" behaviour); one step counter per
// shard drives Adam's bias correction, as torch keeps one per parameter.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/parameter_server/options.h"

namespace cohort::ps {

// How many state buffers of the shard's size a rule keeps.
int slot_count(const OptimizerOptions& options);

template <typename T>
struct ShardTensors {
  std::span<T> values;
  std::vector<std::span<T>> slots;  // slot_count(options) buffers like values
};

// values <- rule(values, grad); `step` counts updates of this shard from 1.
template <typename T>
void apply_dense(const OptimizerOptions& options, ShardTensors<T> shard, std::span<const T> grad, int64_t step);

// The same on rows: grad holds rows.size() rows of `cols` elements, for the
// shard-local row indices `rows` (distinct).
template <typename T>
void apply_rows(const OptimizerOptions& options, ShardTensors<T> shard, int64_t cols, std::span<const int64_t> rows,
                std::span<const T> grad, int64_t step);

}  // namespace cohort::ps
