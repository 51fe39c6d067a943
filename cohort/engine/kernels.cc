#include "cohort/engine/kernels.h"

#include <cstdint>
#include <cstring>
#include <limits>

#include "cohort/common/check.h"
#include "cohort/common/reduce.h"

namespace cohort::engine {
namespace {

template <typename T>
void scale_native(void* dst, const void* src, size_t n, double factor) {
  const T f = static_cast<T>(factor);
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = s[i] * f;
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void scale_half(void* dst, const void* src, size_t n, double factor) {
  const float f = static_cast<float>(factor);
  auto* d = static_cast<uint16_t*>(dst);
  const auto* s = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Widen(s[i]) * f);
}

template <typename T>
void fill(BufferView b, T value) {
  auto* p = static_cast<T*>(b.data);
  for (size_t i = 0; i < b.count; ++i) p[i] = value;
}

template <typename T>
void fill_native(BufferView b, ReduceOp op) {
  using L = std::numeric_limits<T>;
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: std::memset(b.data, 0, b.bytes()); return;
    case ReduceOp::product: fill<T>(b, T(1)); return;
    case ReduceOp::min: fill<T>(b, L::has_infinity ? L::infinity() : L::max()); return;
    case ReduceOp::max: fill<T>(b, L::has_infinity ? -L::infinity() : L::lowest()); return;
  }
}

void fill_half(BufferView b, ReduceOp op, uint16_t (*narrow)(float)) {
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: std::memset(b.data, 0, b.bytes()); return;
    case ReduceOp::product: fill<uint16_t>(b, narrow(1.0f)); return;
    case ReduceOp::min: fill<uint16_t>(b, narrow(std::numeric_limits<float>::infinity())); return;
    case ReduceOp::max: fill<uint16_t>(b, narrow(-std::numeric_limits<float>::infinity())); return;
  }
}

}  // namespace

void scale_copy(DType dtype, void* dst, const void* src, size_t count, double factor) {
  switch (dtype) {
    case DType::f32: return scale_native<float>(dst, src, count, factor);
    case DType::f64: return scale_native<double>(dst, src, count, factor);
    case DType::f16: return scale_half<f16_to_f32, f32_to_f16>(dst, src, count, factor);
    case DType::bf16: return scale_half<bf16_to_f32, f32_to_bf16>(dst, src, count, factor);
    default: break;
  }
  COHORT_THROW(Error) << "scaling is defined for floating dtypes only, not " << dtype_name(dtype);
}

void fill_identity(BufferView b, ReduceOp op) {
  switch (b.dtype) {
    case DType::f32: return fill_native<float>(b, op);
    case DType::f64: return fill_native<double>(b, op);
    case DType::f16: return fill_half(b, op, f32_to_f16);
    case DType::bf16: return fill_half(b, op, f32_to_bf16);
    case DType::i8: return fill_native<int8_t>(b, op);
    case DType::u8: return fill_native<uint8_t>(b, op);
    case DType::i32: return fill_native<int32_t>(b, op);
    case DType::i64: return fill_native<int64_t>(b, op);
  }
}

}  // namespace cohort::engine
