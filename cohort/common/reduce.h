// Reduction kernels: written once per op, vectorised, shared by every backend.
//
// Floating types accumulate in at least f32: f16 and bf16 inputs are widened,
// combined across all sources, and rounded once (round to nearest even) into
// the destination. Integer types wrap like their C++ counterparts; avg on
// integers truncates toward zero.
#pragma once

#include <cstddef>
#include <span>

#include "cohort/common/dtype.h"
#include "cohort/common/reduce_op.h"

namespace cohort {

// dst[i] = srcs[0][i] op srcs[1][i] op ... for i < count. `dst` may alias
// srcs[0] (and only srcs[0]). avg is treated as sum here; call
// finish_average once the sum over all contributors is complete.
// An empty `srcs` is an error; one source is a copy.
void reduce(ReduceOp op, DType dtype, void* dst, std::span<const void* const> srcs, size_t count);

// Convenience: dst = a op b.
inline void reduce2(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count) {
  const void* srcs[] = {a, b};
  reduce(op, dtype, dst, srcs, count);
}

// buf[i] /= contributors, for ReduceOp::avg after a sum (integers truncate).
void finish_average(DType dtype, void* buf, size_t count, int contributors);

// Half-precision conversions (IEEE binary16 and bfloat16), round to nearest even.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace cohort
