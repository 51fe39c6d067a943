// IDX files (the MNIST family's format: Fashion-MNIST ships in it),
// optionally gzip-compressed.
//
// Layout: two zero bytes, a type byte (0x08: unsigned bytes, the only type
// the MNIST-family files use), a dimension count, that many big-endian u32
// dimensions, then the elements. Every way a file can be wrong is a
// ConfigError naming the file and the problem: missing, not gzip and not IDX
// (bad magic), another element type, an unexpected number of dimensions, a
// zero or implausibly large dimension, truncated data, trailing bytes, or a
// damaged gzip stream (zlib's CRC and length checks). Decompression stops at
// the size the header announces, so a hostile stream cannot make the reader
// allocate more than that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cohort::data {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Largest element count accepted (a guard against hostile headers: 1 GiB).
inline constexpr uint64_t kMaxIdxElements = uint64_t(1) << 30;

IdxArray read_idx(const std::string& path, size_t expected_dims);

// The same from bytes in memory (gzip or plain); `name` is what errors call it.
IdxArray parse_idx(std::span<const uint8_t> bytes, size_t expected_dims, const std::string& name);

}  // namespace cohort::data
