// Fusion planning (which ready ops share a collective) and the kernels the
// fused path uses (scaling, identities).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cohort/common/error.h"
#include "cohort/common/reduce.h"
#include "cohort/engine/fusion_buffer.h"
#include "cohort/engine/kernels.h"

namespace cohort::engine::fusion_test {
namespace {

ReadyOp op(OpKind kind, size_t count, DType dtype = DType::f32, ReduceOp rop = ReduceOp::sum, int root = -1) {
  ReadyOp r;
  r.meta.kind = kind;
  r.meta.count = count;
  r.meta.dtype = dtype;
  r.meta.op = rop;
  r.meta.root = root;
  r.contributors = 2;
  return r;
}

std::vector<std::vector<size_t>> plan(const std::vector<ReadyOp>& ops, size_t threshold) {
  std::vector<FusionGroup> groups;
  plan_fusion(ops, threshold, groups);
  std::vector<std::vector<size_t>> out;
  for (const auto& g : groups) out.push_back(g.members);
  return out;
}

using Groups = std::vector<std::vector<size_t>>;

TEST(FusionPlan, SmallAllreducesOfOneKeyShareAGroupUpToTheThreshold) {
  // 4 x 100 floats = 1600 bytes; threshold 1000 bytes: two groups of two.
  std::vector<ReadyOp> ops(4, op(OpKind::allreduce, 100));
  EXPECT_EQ(plan(ops, 1000), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(plan(ops, 1600), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(plan(ops, 0), (Groups{{0}, {1}, {2}, {3}})) << "threshold 0 disables fusion";
}

TEST(FusionPlan, KeysSplitGroupsAndLargeOpsRunAlone) {
  std::vector<ReadyOp> ops = {
      op(OpKind::allreduce, 10),                          // 0
      op(OpKind::allreduce, 10, DType::f64),              // 1 other dtype
      op(OpKind::allreduce, 1000),                        // 2 larger than the threshold
      op(OpKind::allreduce, 10, DType::f32, ReduceOp::max),  // 3 other op
      op(OpKind::allreduce, 10),                          // 4 joins 0
      op(OpKind::broadcast, 10, DType::i8, ReduceOp::sum, 1),  // 5
      op(OpKind::broadcast, 10, DType::f64, ReduceOp::sum, 1), // 6 same root: joins 5
      op(OpKind::broadcast, 10, DType::f32, ReduceOp::sum, 0), // 7 other root
      op(OpKind::allgather, 10),                          // 8 never fused
      op(OpKind::allgather, 10),                          // 9
      op(OpKind::allreduce, 10, DType::f64),              // 10 joins 1
  };
  EXPECT_EQ(plan(ops, 1024), (Groups{{0, 4}, {1, 10}, {2}, {3}, {5, 6}, {7}, {8}, {9}}));
}

TEST(FusionPlan, ScalesAvgContributorsAndOrderedOpsSplitGroups) {
  std::vector<ReadyOp> ops(5, op(OpKind::allreduce, 10, DType::f32, ReduceOp::avg));
  ops[1].meta.postscale = 2.0;
  ops[2].contributors = 1;  // a joined rank: another divisor
  ops[3].ordered = true;
  EXPECT_EQ(plan(ops, 1 << 20), (Groups{{0, 4}, {1}, {2}, {3}}));
}

TEST(FusionBuffer, GrowsAlignedAndKeepsItsCapacity) {
  FusionBuffer b;
  std::byte* p = b.ensure(100);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_GE(b.capacity(), 100u);
  EXPECT_EQ(b.ensure(50), p);
  std::byte* q = b.ensure(1 << 20);
  EXPECT_GE(b.capacity(), size_t(1) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
}

TEST(Kernels, ScaleCopyEveryFloatingDtype) {
  std::vector<float> f = {1, -2, 3.5f};
  scale_copy(DType::f32, f.data(), f.data(), 3, 2.0);
  EXPECT_EQ(f, (std::vector<float>{2, -4, 7}));
  std::vector<double> d = {1, 2}, e(2);
  scale_copy(DType::f64, e.data(), d.data(), 2, 0.25);
  EXPECT_EQ(e, (std::vector<double>{0.25, 0.5}));
  std::vector<uint16_t> h = {f32_to_f16(3.0f), f32_to_f16(-1.5f)};
  scale_copy(DType::f16, h.data(), h.data(), 2, 2.0);
  EXPECT_EQ(f16_to_f32(h[0]), 6.0f);
  EXPECT_EQ(f16_to_f32(h[1]), -3.0f);
  std::vector<uint16_t> bf = {f32_to_bf16(5.0f)};
  scale_copy(DType::bf16, bf.data(), bf.data(), 1, 0.5);
  EXPECT_EQ(bf16_to_f32(bf[0]), 2.5f);
  int32_t i = 3;
  EXPECT_THROW(scale_copy(DType::i32, &i, &i, 1, 2.0), Error);
}

TEST(Kernels, IdentityOfEveryOpLeavesAReductionUnchanged) {
  // x op identity == x for every dtype and op.
  for (DType dtype : kAllDTypes)
    for (ReduceOp rop : kAllReduceOps) {
      std::vector<std::byte> x(4 * dtype_size(dtype)), id(x.size()), out(x.size());
      // x = {1, 2, 3, 4} in the dtype (via the identity-free path: avg/sum of x and zeros).
      std::vector<double> values = {1, 2, 3, 4};
      for (size_t k = 0; k < 4; ++k) {
        std::byte* p = x.data() + k * dtype_size(dtype);
        switch (dtype) {
          case DType::f32: { float v = float(values[k]); std::memcpy(p, &v, 4); break; }
          case DType::f64: std::memcpy(p, &values[k], 8); break;
          case DType::f16: { uint16_t v = f32_to_f16(float(values[k])); std::memcpy(p, &v, 2); break; }
          case DType::bf16: { uint16_t v = f32_to_bf16(float(values[k])); std::memcpy(p, &v, 2); break; }
          case DType::i8: case DType::u8: *p = std::byte(uint8_t(values[k])); break;
          case DType::i32: { int32_t v = int32_t(values[k]); std::memcpy(p, &v, 4); break; }
          case DType::i64: { int64_t v = int64_t(values[k]); std::memcpy(p, &v, 8); break; }
        }
      }
      fill_identity(BufferView{id.data(), 4, dtype}, rop);
      reduce2(rop == ReduceOp::avg ? ReduceOp::sum : rop, dtype, out.data(), x.data(), id.data(), 4);
      EXPECT_EQ(out, x) << dtype_name(dtype) << " " << reduce_op_name(rop);
    }
}

}  // namespace
}  // namespace cohort::engine::fusion_test
