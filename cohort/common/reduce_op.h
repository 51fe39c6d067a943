// ReduceOp: how a reduction combines the contributions of the ranks.
#pragma once

#include <cstdint>
#include <string_view>

namespace cohort {

// avg is sum followed by a division by the number of contributors (integer
// division for integer types).
enum class ReduceOp : uint8_t { sum, avg, min, max, product };

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::product};

// How partial results of `op` combine: a mean's parts are sums, divided once
// the last part is in.
constexpr ReduceOp partial_op(ReduceOp op) { return op == ReduceOp::avg ? ReduceOp::sum : op; }

std::string_view reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(std::string_view name);  // throws ConfigError

}  // namespace cohort
