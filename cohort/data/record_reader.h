// Reading TFRecord files: sequentially (RecordReader) or one record at a
// known offset (read_record_at, with the sidecar index).
//
// Every record's length CRC and data CRC are checked. A bad record is a
// CorruptRecordError naming the file and the byte offset of its frame, or,
// under OnBadRecord::skip, is counted and passed over:
// - a data CRC mismatch skips that one record (its length was intact, so the
//   next frame is found);
// - a damaged length or a truncated frame leaves nothing to frame the rest of
//   the file by, so the rest of the file counts as one bad record and
//   reading ends there.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cohort/data/random_access_file.h"
#include "cohort/data/record_format.h"

namespace cohort::data {

struct RecordReaderOptions {
  OnBadRecord on_bad_record = OnBadRecord::fail;
  size_t buffer_bytes = size_t(1) << 20;  // read-ahead; a larger record is read whole
};

class RecordReader {
 public:
  explicit RecordReader(std::shared_ptr<const RandomAccessFile> file, RecordReaderOptions options = {});
  explicit RecordReader(const std::string& path, RecordReaderOptions options = {})
      : RecordReader(open_file(path), options) {}

  // The next record's data, valid until the next call; nullopt at the end.
  std::optional<std::span<const uint8_t>> next();

  // Byte offset of the frame next() returned last.
  uint64_t record_offset() const { return record_offset_; }
  uint64_t good_records() const { return good_; }
  uint64_t bad_records() const { return bad_; }
  // Under OnBadRecord::skip: the first bad record's error message ("" if none).
  const std::string& first_error() const { return first_error_; }
  const RandomAccessFile& file() const { return *file_; }

 private:
  // Makes [offset, offset + n) available in the buffer; false when the file
  // ends first.
  bool fill(uint64_t offset, size_t n);
  const uint8_t* at(uint64_t offset) const { return buffer_.data() + (offset - buffer_offset_); }
  void count_bad(const CorruptRecordError& e);

  std::shared_ptr<const RandomAccessFile> file_;
  RecordReaderOptions options_;
  uint64_t file_size_;
  uint64_t offset_ = 0;  // next frame
  uint64_t record_offset_ = 0;
  std::vector<uint8_t> buffer_;
  uint64_t buffer_offset_ = 0;
  size_t buffer_used_ = 0;
  uint64_t good_ = 0;
  uint64_t bad_ = 0;
  std::string first_error_;
};

// Reads the record whose frame starts at `offset` and is `frame_size` bytes
// long (from the index) into `data`, checking the frame's length against
// frame_size and both CRCs. CorruptRecordError otherwise.
void read_record_at(const RandomAccessFile& file, uint64_t offset, uint64_t frame_size, std::vector<uint8_t>& data);

}  // namespace cohort::data
