// Helpers every backend uses to address and validate the buffers of a
// collective. Header-only; internal to cohort/comm.
#pragma once

#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include "cohort/common/buffer_view.h"
#include "cohort/common/check.h"

namespace cohort::comm {

// The address of element `element` of `v`.
inline std::byte* at(BufferView v, size_t element) { return v.byte_data() + element * dtype_size(v.dtype); }

// Exclusive prefix sums of `counts`, with the total as the last entry
// (size counts.size() + 1): where each rank's block starts in a packed buffer.
inline std::vector<size_t> displacements(std::span<const size_t> counts) {
  std::vector<size_t> d(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), d.begin() + 1);
  return d;
}

// In place (same start) or disjoint are fine; partial overlap is an Error.
inline void check_no_partial_overlap(BufferView a, BufferView b, const char* what) {
  if (a.data == b.data || a.bytes() == 0 || b.bytes() == 0) return;
  const auto* a0 = a.byte_data();
  const auto* b0 = b.byte_data();
  COHORT_CHECK(a0 + a.bytes() <= b0 || b0 + b.bytes() <= a0)
      << what << ": send and recv buffers overlap without being the same buffer";
}

}  // namespace cohort::comm
