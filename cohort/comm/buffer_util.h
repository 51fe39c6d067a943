// Helpers every backend uses to address and validate the buffers of a
// collective. Header-only; internal to cohort/comm.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

// The members of a split() group: the ranks whose (color, key) pair in
// `color_key` (2 entries per rank, as allgathered) has `color`, ordered by
// (key, rank), as every backend's split promises.
inline std::vector<int> split_members(std::span<const int32_t> color_key, int color) {
  std::vector<int> members;
  for (size_t p = 0; p < color_key.size() / 2; ++p)
    if (color_key[2 * p] == color) members.push_back(int(p));
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return color_key[2 * a + 1] < color_key[2 * b + 1]; });
  return members;
}

}  // namespace cohort::comm
