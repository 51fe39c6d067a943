// The numbers of a dense feature as doubles, for the analyzers.
//
// for_each_value(f, columns, fn) calls fn(value, column) for every element
// of `f`: with columns == 1 every element goes to column 0 (one statistic
// over all values), else element i goes to column i % columns, so a batch
// [B, n] with columns == n keeps one statistic per element position.
// ConfigError for a bytes feature, or a size that does not split into rows.
#pragma once

#include <cstddef>

#include "cohort/common/check.h"
#include "cohort/data/feature.h"

namespace cohort::data {

template <typename Fn>
void for_each_value(const Feature& f, size_t columns, Fn&& fn) {
  COHORT_CHECK_AS(ConfigError, !f.is_bytes()) << "a numeric analyzer given a bytes feature";
  COHORT_CHECK_AS(ConfigError, columns == 1 || f.numel() % int64_t(columns) == 0)
      << "feature " << f.describe() << " does not split into rows of " << columns << " columns";
  auto loop = [&](auto values) {
    if (columns == 1) {
      for (auto v : values) fn(double(v), size_t(0));
    } else {
      for (size_t i = 0; i < values.size(); ++i) fn(double(values[i]), i % columns);
    }
  };
  switch (f.dtype()) {
    case DType::f32: loop(f.values<float>()); break;
    case DType::f64: loop(f.values<double>()); break;
    case DType::u8: loop(f.values<uint8_t>()); break;
    case DType::i8: loop(f.values<int8_t>()); break;
    case DType::i32: loop(f.values<int32_t>()); break;
    case DType::i64: loop(f.values<int64_t>()); break;
    default: COHORT_THROW(ConfigError) << "analyzers do not read " << f.describe();
  }
}

}  // namespace cohort::data
