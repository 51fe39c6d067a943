// CRC-32C against published check values (RFC 3720's test vectors and the
// catalogue's "123456789"), the hardware path against the table path, and
// TFRecord's masking.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cohort/data/crc32c.h"

namespace cohort::data::crc32c_test {
namespace {

struct Vector {
  std::vector<uint8_t> bytes;
  uint32_t crc;
};

std::vector<Vector> published() {
  std::vector<uint8_t> ascending(32), descending(32);
  std::iota(ascending.begin(), ascending.end(), 0);
  for (int i = 0; i < 32; ++i) descending[size_t(i)] = uint8_t(31 - i);
  const std::string check = "123456789";
  return {
      {std::vector<uint8_t>(check.begin(), check.end()), 0xe3069283u},  // CRC catalogue check value
      {std::vector<uint8_t>(32, 0x00), 0x8a9136aau},                     // RFC 3720 B.4
      {std::vector<uint8_t>(32, 0xff), 0x62a8ab43u},
      {ascending, 0x46dd794eu},
      {descending, 0x113fdb5cu},
      {{}, 0x00000000u},
  };
}

TEST(Crc32c, PublishedValues) {
  for (const Vector& v : published()) {
    EXPECT_EQ(crc32c(v.bytes.data(), v.bytes.size()), v.crc);
    EXPECT_EQ(crc32c_table_extend(0, v.bytes.data(), v.bytes.size()), v.crc);
    if (crc32c_hardware_available()) {
      EXPECT_EQ(crc32c_hardware_extend(0, v.bytes.data(), v.bytes.size()), v.crc);
    }
  }
}

TEST(Crc32c, HardwareEqualsTableAtEveryLengthAndAlignment) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2 on this CPU; the table path is what runs";
  EXPECT_EQ(crc32c_implementation(), "sse4.2");
  std::mt19937 gen(7);
  std::vector<uint8_t> buffer(4096 + 16);
  for (auto& b : buffer) b = uint8_t(gen());
  for (size_t align = 0; align < 8; ++align)
    for (size_t n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096}) {
      const uint8_t* p = buffer.data() + align;
      ASSERT_EQ(crc32c_hardware_extend(0, p, n), crc32c_table_extend(0, p, n)) << "n=" << n << " align=" << align;
      ASSERT_EQ(crc32c_hardware_extend(0x12345678u, p, n), crc32c_table_extend(0x12345678u, p, n));
    }
}

TEST(Crc32c, ExtendIsConcatenation) {
  const std::string a = "The quick brown fox ", b = "jumps over the lazy dog";
  const std::string ab = a + b;
  EXPECT_EQ(crc32c_extend(crc32c(a.data(), a.size()), b.data(), b.size()), crc32c(ab.data(), ab.size()));
}

TEST(Crc32c, MaskRoundTripsAndChangesTheValue) {
  std::mt19937 gen(3);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t crc = uint32_t(gen());
    EXPECT_EQ(unmask_crc(mask_crc(crc)), crc);
  }
  // The definition, written out: rotate right by 15, add 0xa282ead8.
  EXPECT_EQ(mask_crc(0x00000001u), 0x00020000u + 0xa282ead8u);
  EXPECT_EQ(mask_crc(0x00008000u), 0x00000001u + 0xa282ead8u);
}

}  // namespace
}  // namespace cohort::data::crc32c_test
