// IDX files (the MNIST family's format), optionally gzip-compressed, read
// with zlib.
//
// Layout: two zero bytes, a type byte (0x08: unsigned bytes, the only type
// the Fashion-MNIST files use), a dimension count, that many big-endian u32
// dimensions, then the elements. Every way a file can be wrong is a
// ConfigError naming the file and the problem: missing, not gzip and not IDX
// (bad magic), another element type, an unexpected number of dimensions, a
// zero or implausibly large dimension, truncated data, trailing bytes, or a
// corrupt gzip stream (zlib's CRC check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::examples {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Largest element count accepted (a guard against hostile headers: 1 GiB).
inline constexpr uint64_t kMaxIdxElements = uint64_t(1) << 30;

IdxArray read_idx(const std::string& path, size_t expected_dims);

}  // namespace cohort::examples
