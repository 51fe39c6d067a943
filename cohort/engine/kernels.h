// Element kernels the engine needs besides the reductions of common/reduce.h:
// scaling (prescale/postscale) and the identity a joined rank contributes.
#pragma once

#include <cstddef>

#include "cohort/common/buffer_view.h"
#include "cohort/common/reduce_op.h"

namespace cohort::engine {

// dst[i] = src[i] * factor for i < count; dst may equal src. Floating dtypes
// only (f16/bf16 computed in f32 and rounded once); Error otherwise.
void scale_copy(DType dtype, void* dst, const void* src, size_t count, double factor);

// Every element of `buffer` becomes the identity of `op`: 0 for sum and avg,
// 1 for product, +inf (the largest value for integers) for min, -inf (the
// lowest) for max.
void fill_identity(BufferView buffer, ReduceOp op);

}  // namespace cohort::engine
