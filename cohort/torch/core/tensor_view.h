// The boundary between LibTorch tensors and cohort's BufferView: dtype
// mapping and the checks every tensor passes before an engine may touch it.
//
// Tensors become views here and nowhere else (DESIGN.md). A tensor cohort can
// move is defined, dense (strided layout), on the CPU, and of a dtype in
// cohort's set (f32, f64, f16, bf16, i8, u8, i32, i64). Anything else throws
// ConfigError naming the tensor and what is wrong with it; no check silently
// converts.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string_view>

#include "cohort/common/buffer_view.h"
#include "cohort/common/dtype.h"

namespace cohort {

// cohort's dtype for a torch scalar type; ConfigError naming `what` for bool,
// complex, quantized and other types cohort does not reduce.
DType to_dtype(c10::ScalarType type, std::string_view what);
c10::ScalarType to_scalar_type(DType dtype);

// Throws ConfigError (naming `what`, e.g. "allreduce 'grad/fc1.weight'") unless
// `tensor` is defined, strided, on the CPU and of a supported dtype.
void check_tensor(const at::Tensor& tensor, std::string_view what);

// The elements of a checked, contiguous tensor (contiguity is checked; the
// view aliases the tensor's storage and is valid while the storage lives).
BufferView view_of(const at::Tensor& tensor, std::string_view what);

}  // namespace cohort
