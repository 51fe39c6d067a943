// DType: the element types every collective moves.
//
// The set is closed (f32, f64, f16, bf16, i8, u8, i32, i64); torch types are
// mapped onto it at the cohort/torch boundary and nowhere else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cohort {

enum class DType : uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i8,  DType::u8,  DType::i32, DType::i64};

// Size of one element in bytes.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

// "f32", "bf16", ...; parse_dtype accepts the same names and throws ConfigError
// on anything else.
std::string_view dtype_name(DType t);
DType parse_dtype(std::string_view name);

}  // namespace cohort
