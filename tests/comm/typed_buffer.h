// Test support: a buffer of any DType read and written as double, and the
// value pattern the collective tests use (small integers, so that every
// dtype holds every input and every sum of up to 8 of them exactly).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cohort/common/buffer_view.h"
#include "cohort/common/reduce.h"

namespace cohort::testing {

class TypedBuffer {
 public:
  TypedBuffer(DType dtype, size_t count) : dtype_(dtype), count_(count), bytes_(count * dtype_size(dtype) + 1) {}

  BufferView view() { return {bytes_.data(), count_, dtype_}; }
  size_t size() const { return count_; }
  DType dtype() const { return dtype_; }

  double get(size_t i) const {
    const std::byte* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::f32: return load<float>(p);
      case DType::f64: return load<double>(p);
      case DType::f16: return f16_to_f32(load<uint16_t>(p));
      case DType::bf16: return bf16_to_f32(load<uint16_t>(p));
      case DType::i8: return load<int8_t>(p);
      case DType::u8: return load<uint8_t>(p);
      case DType::i32: return load<int32_t>(p);
      case DType::i64: return static_cast<double>(load<int64_t>(p));
    }
    return 0;
  }

  void set(size_t i, double v) {
    std::byte* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::f32: store<float>(p, static_cast<float>(v)); break;
      case DType::f64: store<double>(p, v); break;
      case DType::f16: store<uint16_t>(p, f32_to_f16(static_cast<float>(v))); break;
      case DType::bf16: store<uint16_t>(p, f32_to_bf16(static_cast<float>(v))); break;
      case DType::i8: store<int8_t>(p, static_cast<int8_t>(v)); break;
      case DType::u8: store<uint8_t>(p, static_cast<uint8_t>(v)); break;
      case DType::i32: store<int32_t>(p, static_cast<int32_t>(v)); break;
      case DType::i64: store<int64_t>(p, static_cast<int64_t>(v)); break;
    }
  }

 private:
  template <typename T> static T load(const std::byte* p) { T v; std::memcpy(&v, p, sizeof v); return v; }
  template <typename T> static void store(std::byte* p, T v) { std::memcpy(p, &v, sizeof v); }
  DType dtype_;
  size_t count_;
  std::vector<std::byte> bytes_;
};

// The input of rank r at index i for a reduction with `op`. Sums of up to 8
// stay within [-64, 128]; products have at most two factors of 2 and
// otherwise +-1, so nothing overflows i8/u8 or rounds in f16/bf16.
inline double pattern(int r, size_t i, DType dtype, ReduceOp op) {
  const bool is_unsigned = dtype == DType::u8;
  if (op == ReduceOp::product) {
    if ((i + size_t(r)) % 5 == 0) return 2;
    if (!is_unsigned && (i * 7 + size_t(r)) % 3 == 0) return -1;
    return 1;
  }
  const double v = static_cast<double>((i * 31 + size_t(r) * 17) % 17);
  return is_unsigned ? v : v - 8;
}

// The float64 reference of op over ranks 0..n-1 at index i.
inline double reference(int n, size_t i, DType dtype, ReduceOp op) {
  double acc = pattern(0, i, dtype, op);
  for (int r = 1; r < n; ++r) {
    const double v = pattern(r, i, dtype, op);
    switch (op) {
      case ReduceOp::sum: case ReduceOp::avg: acc += v; break;
      case ReduceOp::product: acc *= v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::avg) acc = is_floating(dtype) ? acc / n : std::trunc(acc / n);
  return acc;
}

// Tolerance for comparing a dtype's result with the float64 reference.
inline double tolerance(DType dtype, double expected) {
  switch (dtype) {
    case DType::f32: return 1e-6 * std::max(1.0, std::abs(expected));
    case DType::f64: return 1e-12 * std::max(1.0, std::abs(expected));
    case DType::f16: return 1e-3 * std::max(1.0, std::abs(expected));
    case DType::bf16: return 8e-3 * std::max(1.0, std::abs(expected));
    default: return 0;
  }
}

}  // namespace cohort::testing
