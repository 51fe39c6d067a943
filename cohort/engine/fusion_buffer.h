// Tensor fusion: which ready ops run as one collective, and the buffer they
// are packed into.
//
// plan_fusion groups, in execution order, allreduces that agree on (dtype,
// op, prescale, postscale, and the number of contributors when the op is avg)
// and broadcasts that agree on the root, while a group's bytes stay within
// the threshold. An op larger than the threshold, any other kind, ordered
// ops, and a group of one run alone, on the caller's buffers, without a copy. Every
// rank plans from the same ReadyOp list, so every rank runs the same
// collectives in the same order.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "cohort/engine/negotiation.h"

namespace cohort::engine {

struct FusionGroup {
  std::vector<size_t> members;  // indices into the ready list, in order
  size_t bytes = 0;
  bool fused() const { return members.size() > 1; }
};

// Groups listed in the order of their first member.
void plan_fusion(std::span<const ReadyOp> ops, size_t threshold_bytes, std::vector<FusionGroup>& out);

// A growable, cache-line aligned byte buffer reused across cycles.
class FusionBuffer {
 public:
  std::byte* ensure(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace cohort::engine
