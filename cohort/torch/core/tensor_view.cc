#include "cohort/torch/core/tensor_view.h"

#include <ATen/ATen.h>

#include <sstream>

#include "cohort/common/check.h"

namespace cohort {

DType to_dtype(c10::ScalarType type, std::string_view what) {
  switch (type) {
    case c10::ScalarType::Float: return DType::f32;
    case c10::ScalarType::Double: return DType::f64;
    case c10::ScalarType::Half: return DType::f16;
    case c10::ScalarType::BFloat16: return DType::bf16;
    case c10::ScalarType::Char: return DType::i8;
    case c10::ScalarType::Byte: return DType::u8;
    case c10::ScalarType::Int: return DType::i32;
    case c10::ScalarType::Long: return DType::i64;
    default: break;
  }
  COHORT_THROW(ConfigError) << what << ": dtype " << c10::toString(type)
                            << " is not supported (cohort moves float32, float64, float16, bfloat16, int8, "
                               "uint8, int32 and int64 tensors)";
  return DType::f32;  // unreachable: the thrower throws at the end of the statement
}

c10::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return c10::ScalarType::Float;
    case DType::f64: return c10::ScalarType::Double;
    case DType::f16: return c10::ScalarType::Half;
    case DType::bf16: return c10::ScalarType::BFloat16;
    case DType::i8: return c10::ScalarType::Char;
    case DType::u8: return c10::ScalarType::Byte;
    case DType::i32: return c10::ScalarType::Int;
    case DType::i64: return c10::ScalarType::Long;
  }
  COHORT_THROW(Error) << "unknown DType " << int(dtype);
  return c10::ScalarType::Float;
}

void check_tensor(const at::Tensor& tensor, std::string_view what) {
  COHORT_CHECK_AS(ConfigError, tensor.defined()) << what << ": the tensor is undefined";
  COHORT_CHECK_AS(ConfigError, tensor.layout() == c10::kStrided)
      << what << ": only dense (strided) tensors are supported, got layout " << tensor.layout();
  COHORT_CHECK_AS(ConfigError, tensor.device().is_cpu())
      << what << ": the tensor is on " << tensor.device().str()
      << "; this build of cohort moves CPU tensors only (copy it with .cpu() first)";
  (void)to_dtype(tensor.scalar_type(), what);
}

BufferView view_of(const at::Tensor& tensor, std::string_view what) {
  check_tensor(tensor, what);
  COHORT_CHECK(tensor.is_contiguous()) << what << ": internal error: view of a non-contiguous tensor";
  return BufferView{tensor.data_ptr(), static_cast<size_t>(tensor.numel()), to_dtype(tensor.scalar_type(), what)};
}

}  // namespace cohort
