// The TFRecord framing, as TensorFlow writes it (tensorflow/core/lib/io/
// record_writer.cc describes it):
//
//   uint64  length          little-endian
//   uint32  masked CRC-32C of the 8 length bytes
//   byte    data[length]
//   uint32  masked CRC-32C of data
//
// Records follow one another with no padding and no file header, so a file
// is valid exactly when it splits into such frames with nothing left over.
// Decoding errors are CorruptRecordError: which file, the byte offset of the
// frame, what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cohort/data/bad_record.h"

namespace cohort::data {

inline constexpr size_t kRecordHeaderBytes = 12;
inline constexpr size_t kRecordFooterBytes = 4;
inline constexpr size_t kRecordOverheadBytes = kRecordHeaderBytes + kRecordFooterBytes;

// A damaged TFRecord file. what() reads "<file>: corrupt record at byte
// offset <offset>: <reason>".
class CorruptRecordError : public BadRecordError {
 public:
  CorruptRecordError(std::string file, uint64_t offset, const std::string& reason);
  const std::string& file() const { return file_; }
  uint64_t offset() const { return offset_; }

 private:
  std::string file_;
  uint64_t offset_;
};

void encode_record_header(uint64_t length, uint8_t out[kRecordHeaderBytes]);
void encode_record_footer(std::span<const uint8_t> data, uint8_t out[kRecordFooterBytes]);

// The data length of the frame whose header is `header`, which starts at
// `offset` of `file` (a file of `file_size` bytes). Throws CorruptRecordError
// when the length's CRC does not match or the frame would run past the end.
uint64_t decode_record_header(const uint8_t header[kRecordHeaderBytes], const std::string& file,
                              uint64_t offset, uint64_t file_size);

// Throws CorruptRecordError when `data`'s CRC is not `footer`'s.
void check_record_data(std::span<const uint8_t> data, const uint8_t footer[kRecordFooterBytes],
                       const std::string& file, uint64_t offset);

}  // namespace cohort::data
