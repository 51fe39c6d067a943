// BufferView: what every collective moves. A non-owning view of `count`
// contiguous elements of `dtype` in host memory.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "cohort/common/dtype.h"

namespace cohort {

struct BufferView {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;

  size_t bytes() const { return count * dtype_size(dtype); }
  std::byte* byte_data() const { return static_cast<std::byte*>(data); }
  // The sub-view of `n` elements starting at element `offset`.
  BufferView slice(size_t offset, size_t n) const {
    return {byte_data() + offset * dtype_size(dtype), n, dtype};
  }
};

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

// A view over a span of a native type; f16/bf16 are built explicitly.
template <typename T>
BufferView view_of(std::span<T> s) {
  return {const_cast<std::remove_const_t<T>*>(s.data()), s.size(), dtype_of<std::remove_const_t<T>>()};
}

}  // namespace cohort
