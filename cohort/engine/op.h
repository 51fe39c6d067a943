// OpKind and OpMeta: what the ranks must agree on for one engine op.
//
// An OpMeta is what a rank tells the others about an op it submitted (sent
// at negotiation, kept in the response cache, compared across ranks). Two
// ranks' metas for the same name "agree" when every field is equal, except
// for an allgather's element count and the first dimension of its shape,
// which legitimately differ per rank (dim-0 varying allgather).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/common/dtype.h"
#include "cohort/common/reduce_op.h"

namespace cohort::engine {

enum class OpKind : uint8_t { allreduce = 1, allgather, broadcast, reduce_scatter, alltoall, barrier };

std::string_view op_kind_name(OpKind kind);

struct OpMeta {
  OpKind kind = OpKind::allreduce;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;  // allreduce, reduce_scatter; sum elsewhere
  int32_t root = -1;            // broadcast; -1 elsewhere
  uint64_t count = 0;           // elements of the input on this rank
  uint64_t row_elements = 1;    // allgather: elements per dim-0 row; 1 elsewhere
  double prescale = 1.0;        // allreduce, reduce_scatter
  double postscale = 1.0;
  std::vector<int64_t> shape;   // optional; compared and shown in messages

  bool operator==(const OpMeta&) const = default;

  // Equal for the purpose of running one collective together (see the file
  // comment): what the response cache matches and mismatch detection checks.
  bool agrees_with(const OpMeta& other) const;

  size_t bytes() const { return count * dtype_size(dtype); }

  // "allreduce(1024 f32, sum, shape [32, 32])", for messages.
  std::string describe() const;
};

// Sizes in the negotiation payload are bounded so that a corrupt or hostile
// payload cannot make a rank allocate without limit.
inline constexpr size_t kMaxNameBytes = 4096;
inline constexpr size_t kMaxShapeDims = 64;

}  // namespace cohort::engine
