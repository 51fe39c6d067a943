#include "cohort/data/crc32c.h"

#include <array>
#include <cstring>

#include "cohort/common/check.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace cohort::data {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82f63b78u;

// tables[k][b]: the CRC of byte b followed by k zero bytes, so eight table
// lookups advance the CRC over eight bytes at once (slicing-by-8).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (kReflectedPolynomial & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};
constexpr Tables kTables;

uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t sse42_extend(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  // Byte steps until 8-byte aligned, then 8 bytes per instruction.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(uint32_t(c), *p++);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, load_le64(p));
  for (; n > 0; --n) c = _mm_crc32_u8(uint32_t(c), *p++);
  return ~uint32_t(c);
}
#endif

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

ExtendFn choose() {
#if defined(__x86_64__)
  if (crc32c_hardware_available())
    return [](uint32_t crc, const void* data, size_t n) { return sse42_extend(crc, static_cast<const uint8_t*>(data), n); };
#endif
  return crc32c_table_extend;
}

}  // namespace

uint32_t crc32c_table_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = load_le64(p) ^ c;
    c = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
        t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
  }
  for (; n > 0; --n) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

bool crc32c_hardware_available() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

uint32_t crc32c_hardware_extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  COHORT_CHECK(crc32c_hardware_available()) << "this CPU has no SSE4.2 crc32 instruction";
  return sse42_extend(crc, static_cast<const uint8_t*>(data), n);
#else
  COHORT_THROW(Error) << "no hardware CRC-32C on this architecture";
#endif
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  // Resolved once; a function-local static is initialised thread-safely.
  static const ExtendFn extend = choose();
  return extend(crc, data, n);
}

std::string_view crc32c_implementation() { return crc32c_hardware_available() ? "sse4.2" : "table"; }

}  // namespace cohort::data
