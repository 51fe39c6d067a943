#include "cohort/common/dtype.h"

#include "cohort/common/check.h"
#include "cohort/common/reduce_op.h"

namespace cohort {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  if (name == "float" || name == "float32") return DType::f32;
  if (name == "double" || name == "float64") return DType::f64;
  if (name == "half" || name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  COHORT_THROW(ConfigError) << "unknown dtype '" << name << "' (expected f32, f64, f16, bf16, i8, u8, i32, i64)";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::product: return "product";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps)
    if (reduce_op_name(op) == name) return op;
  if (name == "prod") return ReduceOp::product;
  if (name == "mean" || name == "average") return ReduceOp::avg;
  COHORT_THROW(ConfigError) << "unknown reduce op '" << name << "' (expected sum, avg, min, max, product)";
}

}  // namespace cohort
