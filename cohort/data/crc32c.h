// CRC-32C (Castagnoli), the checksum of TFRecord framing.
//
// The polynomial is 0x1EDC6F41 (0x82F63B78 reflected), initial value and
// final xor 0xFFFFFFFF, as in iSCSI (RFC 3720) and TensorFlow. On x86-64 the
// SSE4.2 `crc32` instruction computes it where the CPU has one; elsewhere a
// slicing-by-8 table does. The choice is made once, at the first call, from
// the CPU's feature bits; both give identical results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cohort::data {

// The CRC of `n` bytes appended to data whose CRC was `crc` (0 for none):
// crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// The two implementations, callable directly (tests compare them).
// crc32c_hardware throws cohort::Error where the CPU lacks the instruction.
uint32_t crc32c_table_extend(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_hardware_extend(uint32_t crc, const void* data, size_t n);
bool crc32c_hardware_available();
// "sse4.2" or "table": what crc32c_extend uses on this machine.
std::string_view crc32c_implementation();

// TFRecord stores CRCs masked, because a CRC of data that itself holds CRCs
// is weak: rotate right by 15 bits and add a constant.
constexpr uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
constexpr uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace cohort::data
