#include "cohort/data/record_reader.h"

#include <cstring>

#include "cohort/common/check.h"

namespace cohort::data {

RecordReader::RecordReader(std::shared_ptr<const RandomAccessFile> file, RecordReaderOptions options)
    : file_(std::move(file)), options_(options), file_size_(file_->size()) {
  // No larger than the file: small files do not pay for a large buffer.
  buffer_.resize(size_t(std::max<uint64_t>(std::min<uint64_t>(options_.buffer_bytes, file_size_), kRecordOverheadBytes)));
}

bool RecordReader::fill(uint64_t offset, size_t n) {
  if (offset >= buffer_offset_ && offset + n <= buffer_offset_ + buffer_used_) return true;
  if (offset + n > file_size_) return false;
  if (n > buffer_.size()) buffer_.resize(n);
  // Keep what is already buffered from `offset` on, read the rest behind it.
  size_t kept = 0;
  if (offset >= buffer_offset_ && offset < buffer_offset_ + buffer_used_) {
    kept = size_t(buffer_offset_ + buffer_used_ - offset);
    std::memmove(buffer_.data(), buffer_.data() + (offset - buffer_offset_), kept);
  }
  buffer_offset_ = offset;
  const size_t want = size_t(std::min<uint64_t>(buffer_.size(), file_size_ - offset));
  const size_t got = file_->read_at(offset + kept, std::span(buffer_.data() + kept, want - kept));
  buffer_used_ = kept + got;
  return buffer_used_ >= n;
}

void RecordReader::count_bad(const CorruptRecordError& e) {
  if (options_.on_bad_record == OnBadRecord::fail) throw e;
  if (bad_++ == 0) first_error_ = e.what();
}

std::optional<std::span<const uint8_t>> RecordReader::next() {
  while (offset_ < file_size_) {
    const uint64_t frame = offset_;
    record_offset_ = frame;
    if (!fill(frame, kRecordHeaderBytes)) {
      count_bad(CorruptRecordError(file_->name(), frame,
                                   "truncated: " + std::to_string(file_size_ - frame) +
                                       " bytes left, shorter than a record header"));
      offset_ = file_size_;
      break;
    }
    uint64_t length = 0;
    try {
      length = decode_record_header(at(frame), file_->name(), frame, file_size_);
    } catch (const CorruptRecordError& e) {
      count_bad(e);
      offset_ = file_size_;  // nothing left to frame the rest by
      break;
    }
    const uint64_t frame_size = length + kRecordOverheadBytes;
    // decode_record_header checked that the frame fits in the file.
    const bool filled = fill(frame, size_t(frame_size));
    COHORT_CHECK(filled) << file_->name() << ": file shrank while read at byte offset " << frame;
    offset_ = frame + frame_size;
    const std::span<const uint8_t> data(at(frame) + kRecordHeaderBytes, size_t(length));
    try {
      check_record_data(data, at(frame) + kRecordHeaderBytes + length, file_->name(), frame);
    } catch (const CorruptRecordError& e) {
      count_bad(e);
      continue;
    }
    ++good_;
    return data;
  }
  return std::nullopt;
}

void read_record_at(const RandomAccessFile& file, uint64_t offset, uint64_t frame_size, std::vector<uint8_t>& data) {
  if (frame_size < kRecordOverheadBytes)
    throw CorruptRecordError(file.name(), offset, "index gives a frame of " + std::to_string(frame_size) + " bytes");
  // One read for the whole frame; the data is then moved over the header.
  data.resize(size_t(frame_size));
  const size_t got = file.read_at(offset, data);
  if (got < frame_size)
    throw CorruptRecordError(file.name(), offset,
                             "truncated: the index gives a " + std::to_string(frame_size) + "-byte frame, the file holds " +
                                 std::to_string(got));
  const uint64_t length = decode_record_header(data.data(), file.name(), offset, file.size());
  if (length + kRecordOverheadBytes != frame_size)
    throw CorruptRecordError(file.name(), offset,
                             "the record holds " + std::to_string(length) + " data bytes, the index says " +
                                 std::to_string(frame_size - kRecordOverheadBytes) +
                                 " (stale index? rebuild it with `cohort-data index`)");
  uint8_t footer[kRecordFooterBytes];
  std::memcpy(footer, data.data() + kRecordHeaderBytes + length, kRecordFooterBytes);
  std::memmove(data.data(), data.data() + kRecordHeaderBytes, size_t(length));
  data.resize(size_t(length));
  check_record_data(data, footer, file.name(), offset);
}

}  // namespace cohort::data
