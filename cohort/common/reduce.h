// Reduction kernels: written once per op, vectorised, shared by every backend.
//
// Floating types accumulate in at least f32: f16 and bf16 inputs are widened,
// combined across all sources, and rounded once (round to nearest even) into
// the destination; an average is divided before that rounding, so a mean that
// fits never overflows on the way. Integer types wrap like their C++
// counterparts; avg on integers truncates toward zero.
#pragma once

#include <cstddef>
#include <span>

#include "cohort/common/dtype.h"
#include "cohort/common/reduce_op.h"

namespace cohort {

// dst[i] = srcs[0][i] op srcs[1][i] op ... for i < count. `dst` may alias
// srcs[0] (and only srcs[0]). avg is the mean of the sources: their sum
// divided by srcs.size() (for f16/bf16 in f32, before the one rounding).
// An empty `srcs` is an error; one source is a copy.
void reduce(ReduceOp op, DType dtype, void* dst, std::span<const void* const> srcs, size_t count);

// Convenience: dst = a op b (avg: (a + b) / 2).
inline void reduce2(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count) {
  const void* srcs[] = {a, b};
  reduce(op, dtype, dst, srcs, count);
}

// buf[i] /= contributors, for an average whose sum is complete in `buf`
// (integers truncate). For f16/bf16 the sum was rounded already: it may have
// overflowed, and the mean is rounded twice; prefer the f32 path below.
void finish_average(DType dtype, void* buf, size_t count, int contributors);

// Averages of f16/bf16 over a transport that adds partial sums in several
// places (a ring, MPI, two levels of a hierarchy) travel as f32 terms, so that
// they are divided before they are rounded: widen_for_average gives each
// rank's terms (its values, scaled by a power of two so that no sum of them
// can overflow; exact), the transport sums them in f32, and narrow_average
// divides the sum of every contributor's terms and rounds once into `dst`.
bool averages_through_f32(DType dtype);  // f16 and bf16
void widen_for_average(DType dtype, const void* src, float* wide, size_t count, int contributors);
void narrow_average(DType dtype, const float* sum, void* dst, size_t count, int contributors);

// Half-precision conversions (IEEE binary16 and bfloat16), round to nearest even.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace cohort
