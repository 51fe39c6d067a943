// DType and ReduceOp names, sizes, and BufferView arithmetic.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>

#include "cohort/common/buffer_view.h"
#include "cohort/common/dtype.h"
#include "cohort/common/error.h"
#include "cohort/common/reduce_op.h"

namespace cohort::dtype_test {
namespace {

// Runs `fn`, expects a ConfigError, and returns its message.
template <typename Fn>
std::string config_error_of(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError thrown";
  return {};
}

TEST(DType, NamesRoundTrip) {
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(dtype_name(DType::f32), "f32");
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_name(DType::u8), "u8");
}

TEST(DType, NamesAreDistinct) {
  for (DType a : kAllDTypes)
    for (DType b : kAllDTypes) {
      if (a != b) {
        EXPECT_NE(dtype_name(a), dtype_name(b));
      }
    }
}

TEST(DType, ParsesTorchStyleAliases) {
  EXPECT_EQ(parse_dtype("float"), DType::f32);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("double"), DType::f64);
  EXPECT_EQ(parse_dtype("float64"), DType::f64);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("int32"), DType::i32);
  EXPECT_EQ(parse_dtype("int64"), DType::i64);
}

TEST(DType, BadNameThrowsConfigErrorNamingIt) {
  for (const char* bad : {"f33", "complex64", "", "f32 ", "int128"}) {
    SCOPED_TRACE(bad);
    const std::string what = config_error_of([&] { parse_dtype(bad); });
    EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16"), std::string::npos) << "lists the valid names: " << what;
  }
}

TEST(DType, SizesAndKinds) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) EXPECT_TRUE(is_floating(t));
  for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64}) EXPECT_FALSE(is_floating(t));
}

TEST(ReduceOp, NamesRoundTrip) {
  for (ReduceOp op : kAllReduceOps) {
    SCOPED_TRACE(std::string(reduce_op_name(op)));
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  }
  EXPECT_EQ(reduce_op_name(ReduceOp::product), "product");
}

TEST(ReduceOp, ParsesAliases) {
  EXPECT_EQ(parse_reduce_op("prod"), ReduceOp::product);
  EXPECT_EQ(parse_reduce_op("mean"), ReduceOp::avg);
  EXPECT_EQ(parse_reduce_op("average"), ReduceOp::avg);
}

TEST(ReduceOp, BadNameThrowsConfigErrorNamingIt) {
  for (const char* bad : {"median", "", "Sum", "xor"}) {
    SCOPED_TRACE(bad);
    const std::string what = config_error_of([&] { parse_reduce_op(bad); });
    EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
  }
}

TEST(BufferView, BytesAndSlices) {
  std::array<double, 10> data{};
  BufferView v = view_of(std::span<double>(data));
  EXPECT_EQ(v.dtype, DType::f64);
  EXPECT_EQ(v.count, 10u);
  EXPECT_EQ(v.bytes(), 80u);
  BufferView s = v.slice(3, 4);
  EXPECT_EQ(s.data, &data[3]);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.dtype, DType::f64);
  EXPECT_EQ(s.bytes(), 32u);

  const std::array<int8_t, 5> bytes{};
  BufferView b = view_of(std::span<const int8_t>(bytes));
  EXPECT_EQ(b.dtype, DType::i8);
  EXPECT_EQ(b.bytes(), 5u);

  BufferView half{nullptr, 6, DType::bf16};
  EXPECT_EQ(half.bytes(), 12u);
  EXPECT_EQ(half.slice(2, 3).byte_data() - half.byte_data(), 4);
}

}  // namespace
}  // namespace cohort::dtype_test
