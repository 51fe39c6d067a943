#include "cohort/data/record_format.h"

#include <cstring>
#include <sstream>

#include "cohort/data/crc32c.h"

namespace cohort::data {
namespace {

void put_le32(uint32_t v, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(v >> (8 * i));
}
uint32_t get_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::string hex(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

}  // namespace

CorruptRecordError::CorruptRecordError(std::string file, uint64_t offset, const std::string& reason)
    : BadRecordError(file + ": corrupt record at byte offset " + std::to_string(offset) + ": " + reason),
      file_(std::move(file)),
      offset_(offset) {}

void encode_record_header(uint64_t length, uint8_t out[kRecordHeaderBytes]) {
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(length >> (8 * i));
  put_le32(mask_crc(crc32c(out, 8)), out + 8);
}

void encode_record_footer(std::span<const uint8_t> data, uint8_t out[kRecordFooterBytes]) {
  put_le32(mask_crc(crc32c(data.data(), data.size())), out);
}

uint64_t decode_record_header(const uint8_t header[kRecordHeaderBytes], const std::string& file,
                              uint64_t offset, uint64_t file_size) {
  const uint32_t stored = get_le32(header + 8);
  const uint32_t computed = mask_crc(crc32c(header, 8));
  if (stored != computed)
    throw CorruptRecordError(file, offset,
                             "length CRC mismatch (stored " + hex(stored) + ", computed " + hex(computed) + ")");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(header[i]) << (8 * i);
  const uint64_t room = file_size - offset;  // offset + header <= file_size by the caller
  if (length > room - kRecordHeaderBytes || room - kRecordHeaderBytes - length < kRecordFooterBytes)
    throw CorruptRecordError(file, offset,
                             "truncated: the record announces " + std::to_string(length) +
                                 " data bytes, the file holds " + std::to_string(room - kRecordHeaderBytes) +
                                 " more bytes, which must also fit the 4-byte data CRC");
  return length;
}

void check_record_data(std::span<const uint8_t> data, const uint8_t footer[kRecordFooterBytes],
                       const std::string& file, uint64_t offset) {
  const uint32_t stored = get_le32(footer);
  const uint32_t computed = mask_crc(crc32c(data.data(), data.size()));
  if (stored != computed)
    throw CorruptRecordError(file, offset,
                             "data CRC mismatch (stored " + hex(stored) + ", computed " + hex(computed) + ")");
}

}  // namespace cohort::data
